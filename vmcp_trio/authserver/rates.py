"""How often clients may use the authorization server's endpoints that fill its tables.

Registration (``/oauth/register``) and starting a login (``/oauth/authorize``) each write a
record that lives for a while (a registered client, a pending login). :class:`AddressRate`
bounds how many one client address (an IPv6 one as its /64) may start a minute, and how many
every address together may, so that many addresses cannot fill a table one address could not:
past either, the endpoint answers 429 with ``Retry-After`` (the wait until a token is there
again). The buckets refill continuously; a refused request takes from neither; at most
``max_addresses`` addresses are remembered (past them the per-address buckets start over). The
limits are per process: replicas each keep their own.

The budget for every address together is what keeps the tables' memory bounded; its price is
that clients from many addresses (about 20 at the per-address rate) can use it up for everyone
for as long as they keep at it: new logins then wait, existing sessions and tokens are not
touched.
"""

from __future__ import annotations

__all__ = ["AddressRate"]


class AddressRate:
    """Token buckets: one per client address (bounded in addresses) and one for every address
    together, so that many addresses cannot do what one may not. A refused request takes from
    neither."""

    def __init__(self, per_minute: int, total_per_minute: int, *,
                 max_addresses: int = 10_000) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(per_minute)
        self.total_rate = total_per_minute / 60.0
        self.total_burst = float(total_per_minute)
        self.max_addresses = max_addresses
        self.buckets: dict[str, tuple[float, float]] = {}
        self.total: tuple[float, float] | None = None

    @staticmethod
    def _level(bucket: tuple[float, float] | None, burst: float, rate: float,
               now: float) -> float:
        tokens, last = bucket if bucket is not None else (burst, now)
        return min(burst, tokens + (now - last) * rate)

    def retry_after(self, address: str, now: float) -> tuple[int, str] | None:
        """None when allowed (and counted), else the seconds to wait and whose limit it is
        ("address" or "all")."""
        mine = self._level(self.buckets.get(address), self.burst, self.rate, now)
        everyone = self._level(self.total, self.total_burst, self.total_rate, now)
        if mine < 1.0:
            return max(1, int((1.0 - mine) / self.rate) + 1), "address"
        if everyone < 1.0:
            return max(1, int((1.0 - everyone) / self.total_rate) + 1), "all"
        if len(self.buckets) >= self.max_addresses and address not in self.buckets:
            self.buckets.clear()
        self.buckets[address] = (mine - 1.0, now)
        self.total = (everyone - 1.0, now)
        return None
