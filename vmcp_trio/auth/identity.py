"""Who made a request: the seam between incoming authentication and everything after it.

Every request to ``/mcp`` carries an :class:`Identity`. A session belongs to the identity that
created it, and the same session id presented by another identity is treated as unknown (404),
so a leaked session id is useless without the owner's credentials.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANONYMOUS", "Identity"]


@dataclass(frozen=True)
class Identity:
    issuer: str
    subject: str
    claims: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.issuer, self.subject)


ANONYMOUS = Identity("vmcp:anonymous", "anonymous")
"""The one local identity every request has under anonymous incoming auth."""
