"""2026-07-28 input requests: what a client's retry may carry, checked before anything uses it."""

from __future__ import annotations

from typing import Any

import pytest

from vmcp_trio.gateway.parked_calls import RequestStateSigner, check_input_responses

IDENTITY = ("https://issuer", "alice")


@pytest.mark.parametrize("state", ["é.é", "abc.déf", "\udcff.x", "a" * 2000, "no-dot", 42,
                                   None, ["a.b"]])
def test_a_forged_state_of_any_shape_is_simply_invalid(state: object) -> None:
    assert RequestStateSigner().verify(state, IDENTITY, "tools/call", "d") is None


def test_a_genuine_state_verifies_only_for_its_identity_method_and_params() -> None:
    signer = RequestStateSigner()
    state = signer.sign("call-1", IDENTITY, "tools/call", "digest")
    assert signer.verify(state, IDENTITY, "tools/call", "digest") == "call-1"
    assert signer.verify(state, ("https://issuer", "bob"), "tools/call", "digest") is None
    assert signer.verify(state, IDENTITY, "prompts/get", "digest") is None
    assert signer.verify(state, IDENTITY, "tools/call", "other") is None


@pytest.mark.parametrize(("responses", "problem"), [
    ([], "params.inputResponses must be an object"),
    ({"k": "text"}, "params.inputResponses['k'] must be a result object"),
    ({"k": {"error": "no"}}, "params.inputResponses['k'].error must be an object"),
    ({"k": {"error": {"code": "1", "message": "m"}}}, "error.code must be an integer"),
    ({"k": {"error": {"code": None, "message": "m"}}}, "error.code must be an integer"),
    ({"k": {"error": {"code": True, "message": "m"}}}, "error.code must be an integer"),
    ({"k": {"error": {"code": 1, "message": 2}}}, "error.message must be a string"),
])
def test_malformed_input_responses_are_named(responses: Any, problem: str) -> None:
    found = check_input_responses(responses)
    assert found is not None and problem in found


def test_well_formed_input_responses_pass() -> None:
    assert check_input_responses({"a": {"content": []},
                                  "b": {"error": {"code": -1, "message": "declined"}}}) is None


def test_replicas_sharing_fleet_secrets_open_each_others_states_through_a_rotation() -> None:
    old, new = b"o" * 32, b"n" * 32
    state = RequestStateSigner([old]).sign("call-1", IDENTITY, "tools/call", "digest")
    assert RequestStateSigner([old]).verify(state, IDENTITY, "tools/call", "digest") == "call-1"
    rotated = RequestStateSigner([new, old])  # the new secret first: it seals, both open
    assert rotated.verify(state, IDENTITY, "tools/call", "digest") == "call-1"
    assert RequestStateSigner([new]).verify(state, IDENTITY, "tools/call", "digest") is None
    assert RequestStateSigner().verify(state, IDENTITY, "tools/call", "digest") is None
    assert "call-1" not in state and "tools/call" not in state  # sealed, not only signed
