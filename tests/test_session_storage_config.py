"""``spec.sessionStorage`` (the Redis a gateway's replicas share, and the secrets they derive
their common keys from) and Secret references that resolve outside the configuration (a mounted
Secret's files, an environment variable)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from vmcp_trio.resources.problems import Severity
from vmcp_trio.resources.summary import describe_plan
from vmcp_trio.secrets.names import env_variable, ref_name

from .helpers import example_docs, expect_error, matching, resource, validate

Docs = list[dict[str, Any]]
FLEET = "f" * 40
NO_ENV: dict[str, str] = {}


def gateway_with(storage: dict[str, Any] | None, *secrets: tuple[str, dict[str, str]]) -> Docs:
    docs = example_docs("anonymous.yaml")
    gateway = resource(docs, "VirtualMCPServer")
    if storage is not None:
        gateway["spec"]["sessionStorage"] = storage
    for name, data in secrets:
        docs.append({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": name, "namespace": gateway["metadata"]["namespace"]},
                     "stringData": data})
    return docs


REDIS = {"provider": "redis", "address": "redis.example:6379",
         "hmacSecretRefs": [{"name": "fleet", "key": "hmac"}]}


def test_redis_session_storage_gives_the_plan_its_redis_and_fleet_secrets() -> None:
    result = validate(gateway_with(REDIS, ("fleet", {"hmac": FLEET})), environ=NO_ENV)
    assert result.ok, result.problems
    plan = result.plans[0]
    assert plan.session_storage is not None
    assert plan.session_storage.addr == "redis.example:6379"
    assert plan.session_storage.key_prefix == f"vmcp:session:{{dev:{plan.name}}}:"
    assert [s.value for s in plan.fleet_secrets] == [FLEET.encode()]


def test_sentinel_and_password_resolve_and_db_defaults_from_the_sentinel_block() -> None:
    storage = {"provider": "redis", "keyPrefix": "team-a:",
               "sentinelConfig": {"masterName": "mymaster", "db": 3,
                                  "sentinelAddrs": ["s1:26379", "s2:26379"]},
               "passwordRef": {"name": "redis", "key": "password"},
               "hmacSecretRefs": [{"name": "fleet", "key": "hmac"}]}
    result = validate(gateway_with(storage, ("fleet", {"hmac": FLEET}),
                                   ("redis", {"password": "pw"})), environ=NO_ENV)
    assert result.ok, result.problems
    redis = result.plans[0].session_storage
    assert redis is not None and redis.master_name == "mymaster" and redis.db == 3
    assert redis.sentinel_addrs == ("s1:26379", "s2:26379") and redis.key_prefix == "team-a:"
    assert redis.password is not None and redis.password.value == b"pw"


def test_redis_without_shared_secrets_is_refused() -> None:
    storage = {"provider": "redis", "address": "redis.example:6379"}
    expect_error(validate(gateway_with(storage), environ=NO_ENV), "required",
                 "spec.sessionStorage.hmacSecretRefs", kind="VirtualMCPServer",
                 contains="opens on every other")


def test_without_hmac_secrets_the_fleet_derives_its_keys_from_the_redis_password() -> None:
    """Every replica holds the Redis password: a long one is enough to derive the same keys
    (bound to the key prefix), with a warning; a short one is refused."""
    storage = {"provider": "redis", "address": "redis.example:6379",
               "passwordRef": {"name": "redis", "key": "password"}}
    password = ("redis", {"password": "p" * 24})
    first = validate(gateway_with(storage, password), environ=NO_ENV)
    assert first.ok, first.problems
    (note,) = matching(first, rule="derived-secret")
    assert note.severity is Severity.WARNING and "set hmacSecretRefs" in note.message
    (secret,) = first.plans[0].fleet_secrets
    assert len(secret.value) == 32 and secret.value != b"p" * 24
    again = validate(gateway_with(storage, password), environ=NO_ENV)
    assert again.plans[0].fleet_secrets == first.plans[0].fleet_secrets
    elsewhere = validate(gateway_with({**storage, "keyPrefix": "other:"}, password),
                         environ=NO_ENV)
    assert elsewhere.plans[0].fleet_secrets != first.plans[0].fleet_secrets
    short = validate(gateway_with(storage, ("redis", {"password": "short"})), environ=NO_ENV)
    expect_error(short, "required", "spec.sessionStorage.hmacSecretRefs",
                 contains="a passwordRef of at least 16 bytes")


def test_the_authorization_servers_hmac_secrets_serve_when_the_block_has_none() -> None:
    docs = example_docs("embedded-auth-server.yaml")
    gateway = resource(docs, "VirtualMCPServer")
    gateway["spec"]["sessionStorage"] = {"provider": "redis", "address": "redis.example:6379"}
    result = validate(docs, environ=NO_ENV)
    assert result.ok, result.errors
    plan = result.plans[0]
    assert plan.auth_server is not None and plan.auth_server.hmac_secrets
    assert plan.fleet_secrets == plan.auth_server.hmac_secrets


def test_redis_needs_exactly_one_of_address_and_sentinel() -> None:
    both = {**REDIS, "sentinelConfig": {"masterName": "m", "sentinelAddrs": ["s:26379"]}}
    neither = {k: v for k, v in REDIS.items() if k != "address"}
    for storage in (both, neither):
        expect_error(validate(gateway_with(storage, ("fleet", {"hmac": FLEET})),
                              environ=NO_ENV), "one-of", "spec.sessionStorage",
                     contains="exactly one of address")


def test_a_short_fleet_secret_and_contradicting_dbs_are_refused() -> None:
    result = validate(gateway_with(REDIS, ("fleet", {"hmac": "short"})), environ=NO_ENV)
    expect_error(result, "hmac-secret", "spec.sessionStorage.hmacSecretRefs[0].key",
                 contains="at least 32 bytes")
    storage = {**{k: v for k, v in REDIS.items() if k != "address"}, "db": 1,
               "sentinelConfig": {"masterName": "m", "sentinelAddrs": ["s:26379"], "db": 2}}
    expect_error(validate(gateway_with(storage, ("fleet", {"hmac": FLEET})), environ=NO_ENV),
                 "conflict", "spec.sessionStorage.sentinelConfig.db")


def test_memory_ignores_redis_fields_with_a_warning() -> None:
    storage = {"provider": "memory", "address": "redis.example:6379"}
    result = validate(gateway_with(storage), environ=NO_ENV)
    assert result.ok and result.plans[0].session_storage is None
    [warning] = matching(result, rule="unused-field", path="spec.sessionStorage.address",
                         severity=Severity.WARNING)
    assert "ignored when provider is memory" in warning.message


# --- Secret references outside the configuration ------------------------------------------------


def test_a_secret_resolves_from_a_mounted_file_then_a_variable(tmp_path: Path) -> None:
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "hmac").write_text(FLEET + "-file")
    variable = env_variable(ref_name("fleet", "hmac"))
    assert variable == "VMCP_SECRET_FLEET__HMAC"
    environ = {"VMCP_SECRETS_DIR": str(tmp_path), variable: FLEET + "-env"}
    from_file = validate(gateway_with(REDIS), environ=environ)
    assert from_file.ok, from_file.problems
    assert from_file.plans[0].fleet_secrets[0].value == (FLEET + "-file").encode()
    assert from_file.plans[0].fleet_secrets[0].source == f"file {tmp_path}/fleet/hmac"
    from_env = validate(gateway_with(REDIS), environ={variable: FLEET + "-env"})
    assert from_env.plans[0].fleet_secrets[0].value == (FLEET + "-env").encode()
    # A Secret document of the configuration comes first.
    from_doc = validate(gateway_with(REDIS, ("fleet", {"hmac": FLEET})), environ=environ)
    assert from_doc.plans[0].fleet_secrets[0].value == FLEET.encode()


def test_a_secret_found_nowhere_names_every_place_it_was_looked_for(tmp_path: Path) -> None:
    store = tmp_path / "store.enc"
    result = validate(gateway_with(REDIS), environ={"VMCP_SECRETS_DIR": str(tmp_path),
                                                    "VMCP_SECRETS_FILE": str(store)})
    problem = expect_error(result, "reference", "spec.sessionStorage.hmacSecretRefs[0].name")
    assert f"the file {tmp_path}/fleet/hmac" in problem.message
    assert "the variable VMCP_SECRET_FLEET__HMAC" in problem.message
    assert f"the name fleet/hmac in the vmcp secret store {store}" in problem.message


def test_a_base64_secret_document_still_decodes() -> None:
    encoded = base64.b64encode(FLEET.encode()).decode()
    docs = gateway_with(REDIS)
    docs.append({"apiVersion": "v1", "kind": "Secret",
                 "metadata": {"name": "fleet", "namespace": "dev"}, "data": {"hmac": encoded}})
    result = validate(docs, environ=NO_ENV)
    assert result.ok and result.plans[0].fleet_secrets[0].value == FLEET.encode()


def test_the_summary_says_where_sessions_live_and_hides_the_password() -> None:
    storage = {**REDIS, "passwordRef": {"name": "redis", "key": "password"}}
    shared = validate(gateway_with(storage, ("fleet", {"hmac": FLEET}),
                                   ("redis", {"password": "pw-never-shown"})), environ=NO_ENV)
    text = describe_plan(shared.plans[0])
    assert ("  sessions: shared by the replicas through redis redis.example:6379, db 0, prefix "
            "vmcp:session:{dev:dev-gateway}:, password <redacted>; 1 fleet secret(s)") in text
    assert "pw-never-shown" not in text and FLEET not in text
    alone = validate(gateway_with(None), environ=NO_ENV)
    assert ("  sessions: memory, one process (behind a balancer: sticky sessions); keys "
            "random per process") in describe_plan(alone.plans[0])
