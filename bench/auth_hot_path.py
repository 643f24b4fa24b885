"""The incoming-auth hot path, in process: what a request's bearer token costs the gateway.

Sections (each a function returning ``(metrics, ratios)``, merged into the one JSON line):

* ``cache_hit``: a token seen before, found in VerifiedTokenCache (hash + LRU lookup), in
  microseconds per call (target: <= 5 us);
* ``first_seen_<alg>`` for RS256, ES256 and EdDSA: a token not seen before, validated in full
  (parse_jws + verify_signature + check_claims), against PyJWT's ``jwt.decode`` of the same token
  with the same key object, algorithm, audience and issuer (target: <= 1.1x PyJWT), and against
  the bare ``cryptography`` verification of the same signature (the floor);
* ``authenticate_hit``: the whole per-request step of the gateway for a known JWT
  (``JwtAuthenticator.authenticate``), and ``introspection_hit``: an opaque token whose
  introspection answer is cached (``Introspector.introspect``);
* ``cedar_decision``: one authorization decision with the ten Cedar policies of
  :data:`POLICIES` (``CedarPolicies.allowed``), from its decision cache and made by the Cedar
  engine (a new argument value each call), in microseconds;
* ``through_vmcp``: tools/call through three vmcp processes in front of the same floor backend
  (bench/floor_backend.py): anonymous, ``oidc`` incoming auth (keys from a local JWKS endpoint;
  every session presents one token, so the cache is warm), and ``oidc`` with the ten Cedar
  policies. The three run side by side, pinned together on one CPU and loaded at once (32
  sessions shared among them; three rounds, the median kept): run one after the other, the
  machine's drift between runs was larger than the ~10 us being measured. The CPU per call of
  oidc over anonymous (target: <= 1.05), and of oidc with policies over oidc (target: <=
  1.05).

Each case runs ``--iterations`` calls per batch, ``--batches`` batches; the cases of one section
are interleaved batch by batch so that a noisy neighbour slows them alike, and the figure kept is
the median batch. Needs PyJWT (the ``bench`` extra) for the comparison.

Run: ``python bench/auth_hot_path.py [--iterations 2000] [--batches 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import trio
from common import (  # type: ignore[import-not-found]
    LoadResult,
    cpu_seconds,
    cpus,
    emit,
    free_port,
    gateway_config,
    generate_load,
    jwks_server,
    pin_self,
    rsa_jwk,
    started,
)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from vmcp_trio.auth.incoming.authenticator import JwtAuthenticator
from vmcp_trio.auth.incoming.introspection import Introspector
from vmcp_trio.auth.jwt import (
    VerifyKey,
    check_claims,
    key_from_public,
    parse_jws,
    verify_signature,
)
from vmcp_trio.auth.policy.cedar import CedarPolicies
from vmcp_trio.auth.policy.mcp_checks import tool_check
from vmcp_trio.auth.token_cache import VerifiedTokenCache

try:
    import jwt as pyjwt
except ImportError:  # pragma: no cover - depends on the environment
    sys.exit("bench/auth_hot_path.py compares against PyJWT: install the bench extra "
             "(pip install -e '.[bench]', or pip install PyJWT)")

Metrics = dict[str, Any]
Ratios = dict[str, float]
Section = Callable[[], tuple[Metrics, Ratios]]

ISSUER = "https://issuer.example"
AUDIENCE = "https://mcp.example/mcp"
ITERATIONS = 2000
BATCHES = 5


def per_call_us(cases: dict[str, Callable[[], object]], iterations: int | None = None,
                batches: int | None = None) -> dict[str, float]:
    """Median (over batches) microseconds per call of each case, the cases interleaved."""
    iterations = iterations or ITERATIONS
    batches = batches or BATCHES
    for case in cases.values():  # warm up (and fail early if a case raises)
        for _ in range(min(iterations, 200)):
            case()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(batches):
            for name, case in cases.items():
                loop = range(iterations)
                started = time.perf_counter_ns()
                for _ in loop:
                    case()
                samples[name].append((time.perf_counter_ns() - started) / iterations / 1e3)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


def claims() -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "user-1234", "client_id": "bench-client",
            "scope": "tools:read tools:call", "exp": now + 3600, "iat": now, "nbf": now,
            "jti": "4f1c1a52-0f9e-4a57-9a0d-3c1c0f6d2b11", "groups": ["eng", "oncall"],
            "email": "dev@example.com"}


POLICIES = [
    'permit(principal in THVGroup::"eng", action == Action::"call_tool", resource);',
    'permit(principal in THVGroup::"eng", action == Action::"get_prompt", resource);',
    'permit(principal in THVGroup::"eng", action == Action::"read_resource", resource);',
    'permit(principal in THVGroup::"sales", action == Action::"call_tool", '
    'resource == Tool::"search");',
    'forbid(principal, action == Action::"call_tool", resource == Tool::"delete_repo") '
    'unless { principal in THVGroup::"admins" };',
    'forbid(principal, action == Action::"call_tool", resource) '
    'when { resource has destructiveHint && resource.destructiveHint } '
    'unless { principal in THVGroup::"oncall" };',
    'forbid(principal, action == Action::"call_tool", resource == Tool::"echo") '
    'when { resource has arg_text && resource.arg_text == "forbidden" };',
    'permit(principal, action == Action::"call_tool", resource == Tool::"status") '
    'when { context.claim_email like "*@example.com" };',
    'forbid(principal == Client::"blocked-user", action, resource);',
    'permit(principal in THVGroup::"support", action == Action::"read_resource", resource) '
    'when { resource.uri like "tickets://*" };',
]
"""Ten policies of the kinds a platform team writes: by group, tool, annotation, argument and
claim (ToolHive's Cedar model)."""


def private_key(alg: str) -> Any:
    if alg.startswith(("RS", "PS")):
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def raw_verifier(alg: str, public: Any, token: str) -> Callable[[], object]:
    """cryptography's verification of the token's signature, and nothing else."""
    head, payload, signature_b64 = token.split(".")
    data = f"{head}.{payload}".encode()
    signature = pyjwt.utils.base64url_decode(signature_b64)
    if alg == "RS256":
        pkcs1, sha256 = padding.PKCS1v15(), hashes.SHA256()
        return lambda: public.verify(signature, data, pkcs1, sha256)
    if alg == "ES256":
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"),
                                   int.from_bytes(signature[32:], "big"))
        ecdsa = ec.ECDSA(hashes.SHA256())
        return lambda: public.verify(der, data, ecdsa)
    return lambda: public.verify(signature, data)


# --- JWT sections ------------------------------------------------------------------------------


def cache_hit() -> tuple[Metrics, Ratios]:
    key = private_key("RS256")
    token = pyjwt.encode(claims(), key, algorithm="RS256",
                         headers={"kid": "bench", "typ": "at+jwt"})
    now = time.time()
    cache: VerifiedTokenCache[str] = VerifiedTokenCache()
    for i in range(5000):  # a realistically populated cache
        cache.put(f"{token[:-8]}{i:08d}", "other", expires=now + 3600, key_id="k", now=now)
    cache.put(token, "user-1234", expires=now + 3600, key_id="k", now=now)
    assert cache.get(token, now) == "user-1234"
    result = per_call_us({"hit": lambda: cache.get(token, now)}, iterations=20 * ITERATIONS)
    print(f"cache hit: {result['hit']} us/call ({len(token)}-character RS256 token)")
    return {"cache_hit_us": result["hit"], "token_chars": len(token)}, {}


def first_seen(alg: str) -> tuple[Metrics, Ratios]:
    key = private_key(alg)
    public = key.public_key()
    token = pyjwt.encode(claims(), key, algorithm=alg, headers={"kid": "bench", "typ": "at+jwt"})
    verify_key = key_from_public(public, kid="bench")

    def ours() -> None:
        parsed = parse_jws(token)
        verify_signature(parsed, verify_key)
        check_claims(parsed, issuer=ISSUER, audience=AUDIENCE, now=time.time())

    def theirs() -> None:
        pyjwt.decode(token, public, algorithms=[alg], audience=AUDIENCE, issuer=ISSUER)

    result = per_call_us({"ours": ours, "pyjwt": theirs,
                          "raw": raw_verifier(alg, public, token)})
    print(f"{alg}: first seen {result['ours']} us, PyJWT {result['pyjwt']} us, "
          f"raw verify {result['raw']} us")
    metrics = {f"first_seen_us_{alg}": result["ours"], f"pyjwt_us_{alg}": result["pyjwt"],
               f"raw_verify_us_{alg}": result["raw"]}
    ratios = {f"first_seen_vs_pyjwt_{alg}": round(result["ours"] / result["pyjwt"], 3),
              f"first_seen_vs_raw_verify_{alg}": round(result["ours"] / result["raw"], 3)}
    return metrics, ratios


def jwt_sections() -> list[Section]:
    return [cache_hit, *(partial(first_seen, alg) for alg in ("RS256", "ES256", "EdDSA"))]


# --- the gateway's own per-request step ---------------------------------------------------------


class _FixedKeys:
    def __init__(self, key: VerifyKey) -> None:
        self.key = key

    async def key_for(self, kid: str | None) -> VerifyKey | None:
        return self.key


async def _async_per_call_us(call: Callable[[], Awaitable[object]], iterations: int) -> float:
    batches = []
    for _ in range(BATCHES):
        began = time.perf_counter_ns()
        for _ in range(iterations):
            await call()
        batches.append((time.perf_counter_ns() - began) / iterations / 1000)
    return round(statistics.median(batches), 2)


def authenticate_hit() -> tuple[Metrics, Ratios]:
    key = private_key("RS256")
    token = pyjwt.encode(claims(), key, algorithm="RS256",
                         headers={"kid": "bench", "typ": "at+jwt"})
    authenticator = JwtAuthenticator(issuer=ISSUER, audience=AUDIENCE, keys=_FixedKeys(
        key_from_public(key.public_key(), kid="bench")))
    introspector = Introspector(_never, None, issuer=ISSUER, audience=AUDIENCE,  # type: ignore[arg-type]
                                client_id="bench", client_secret="bench")
    opaque = "opaque-token-" + "x" * 30
    now = time.time()
    introspector.cache.put(opaque, {"active": True, "sub": "u", "exp": now + 3600},
                           expires=now + 3600, key_id="introspection", now=now)

    async def measure() -> tuple[float, float]:
        await authenticator.authenticate(token)  # first seen: now cached
        return (await _async_per_call_us(lambda: authenticator.authenticate(token),
                                         10 * ITERATIONS),
                await _async_per_call_us(lambda: introspector.introspect(opaque),
                                         10 * ITERATIONS))

    hit, introspected = trio.run(measure)
    print(f"authenticate (cache hit): {hit} us/call; introspection cache hit: {introspected} us")
    return {"authenticate_hit_us": hit, "introspection_hit_us": introspected}, {}


async def _never() -> str:
    raise AssertionError("the benchmark's introspection answers come from the cache")


# --- through vmcp ------------------------------------------------------------------------------


def cedar_decision() -> tuple[Metrics, Ratios]:
    """One decision with the ten policies: from the cache, and made by the engine."""
    policies = CedarPolicies(POLICIES, server_name="bench")
    token_claims = claims()
    hit = tool_check("echo", {"text": "hello"}, {})
    assert policies.allowed(token_claims, hit)
    counter = iter(range(1 << 62))

    def cached() -> None:
        policies.allowed(token_claims, hit)

    def decided() -> None:
        policies.allowed(token_claims, tool_check("echo", {"text": f"t{next(counter)}"}, {}))

    result = per_call_us({"cached": cached, "decided": decided})
    cached_us, decided_us = result["cached"], result["decided"]
    print(f"cedar decision (10 policies): cached {cached_us} us, decided {decided_us} us")
    return {"cedar_cached_us": cached_us, "cedar_decided_us": decided_us}, {}


def through_vmcp(args: argparse.Namespace) -> tuple[Metrics, Ratios]:
    """The three gateways side by side: pinned together on one CPU and loaded at once (a third
    of the sessions each), so that what the machine does meanwhile slows them alike; each
    round's CPU per call from each process's own clock; the median round is kept."""
    available = cpus()
    server_cpu, load_cpu = available[0], available[-1]
    key = private_key("RS256")
    token = pyjwt.encode({**claims(), "exp": int(time.time()) + 3600}, key, algorithm="RS256",
                         headers={"kid": "bench", "typ": "at+jwt"})
    auth = b"authorization: Bearer " + token.encode() + b"\r\n"
    floor = [sys.executable, "bench/floor_backend.py", "--port", "0"]
    with jwks_server({"keys": [rsa_jwk(key.public_key(), "bench")]}) as jwks_url, \
            started(floor, cpu=load_cpu, ready_line="listening") as (_, line), \
            contextlib.ExitStack() as gateways:
        backend_url = line.split()[-1]
        oidc = (f"{{type: oidc, oidcConfig: {{type: inline, inline: {{issuer: '{ISSUER}', "
                f"audience: '{AUDIENCE}', clientId: bench, jwksUrl: '{jwks_url}', "
                "insecureAllowHTTP: true, jwksAllowPrivateIP: true}}}")
        policies = ", ".join(orjson.dumps(p).decode() for p in POLICIES)
        with_policies = (oidc[:-1] + ", authzConfig: {type: inline, inline: {policies: ["
                         + policies + "]}}}")
        modes = {"anonymous": ("{type: anonymous}", b""), "oidc": (oidc, auth),
                 "oidc_cedar": (with_policies, auth)}
        running: dict[str, tuple[int, str, bytes]] = {}
        for mode, (incoming, credentials) in modes.items():
            config = gateways.enter_context(_config_file(backend_url, incoming))
            port = free_port()
            gateway, _ = gateways.enter_context(started(
                [sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                 "--config", str(config), "--port", str(port)], cpu=server_cpu,
                ready_line="MCP endpoint"))
            running[mode] = (gateway.pid, f"http://127.0.0.1:{port}/mcp", credentials)
        rounds = [_side_by_side(running, args) for _ in range(args.rounds)]
    print(f"through vmcp, {args.rounds} rounds side by side: {rounds}")
    return ({"through_vmcp": {
                "vmcp_cpu_us_per_call": {mode: statistics.median(r[mode] for r in rounds)
                                         for mode in modes},
                "rounds": rounds}},
            {"oidc_vs_anonymous_cpu_per_call": round(statistics.median(
                r["oidc"] / r["anonymous"] for r in rounds), 3),
             "cedar_vs_oidc_cpu_per_call": round(statistics.median(
                 r["oidc_cedar"] / r["oidc"] for r in rounds), 3)})


@contextlib.contextmanager
def _config_file(backend_url: str, incoming: str) -> Iterator[Path]:
    config = gateway_config(backend_url, incoming)
    try:
        yield config
    finally:
        config.unlink()


def _side_by_side(running: dict[str, tuple[int, str, bytes]],
                  args: argparse.Namespace) -> dict[str, float]:
    """One round: every gateway loaded at once; its CPU microseconds per call."""
    sessions = max(1, args.sessions // len(running))
    results: dict[str, LoadResult] = {}
    before = {mode: cpu_seconds(pid) for mode, (pid, _, _) in running.items()}

    async def load(mode: str, url: str, credentials: bytes) -> None:
        results[mode] = await generate_load(url, sessions=sessions, warmup=1.0,
                                            duration=args.duration, auth=credentials)

    async def everyone() -> None:
        async with trio.open_nursery() as nursery:
            for mode, (_, url, credentials) in running.items():
                nursery.start_soon(load, mode, url, credentials)

    trio.run(everyone)
    figures = {}
    for mode, (pid, _, _) in running.items():
        result = results[mode]
        if result.errors or not result.calls:
            raise SystemExit(f"through vmcp ({mode}): {result.errors} errors, "
                             f"{result.calls} calls")
        calls = result.calls * (1.0 + args.duration) / args.duration
        figures[mode] = round((cpu_seconds(pid) - before[mode]) / calls * 1e6, 1)
    return figures


def sections(args: argparse.Namespace) -> list[Section]:
    """Every section of this benchmark, in order (add new groups here)."""
    return [*jwt_sections(), authenticate_hit, cedar_decision, partial(through_vmcp, args)]


def main() -> None:
    global ITERATIONS, BATCHES
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--batches", type=int, default=BATCHES)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the three gateways loaded side by side; the median "
                             "is kept")
    args = parser.parse_args()
    ITERATIONS, BATCHES = args.iterations, args.batches
    cpu = cpus()[-1]
    pin_self(cpu)
    metrics: Metrics = {"iterations": ITERATIONS, "batches": BATCHES, "cpu": cpu,
                        "pyjwt_version": pyjwt.__version__}
    ratios: Ratios = {}
    for section in sections(args):
        section_metrics, section_ratios = section()
        metrics.update(section_metrics)
        ratios.update(section_ratios)
    emit("auth_hot_path", metrics, ratios)


if __name__ == "__main__":
    main()
