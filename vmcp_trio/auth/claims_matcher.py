"""CEL expressions over a token's claims: ToolHive's ``awsSts.roleMappings[].matcher`` and
``authServerConfig.trustedIssuers[].actorMatcher``.

One job: compile an operator's expression once (:func:`compile_matcher`; a syntax error is a
:class:`MatcherError` with the parser's own account, which the configuration reports at the
field) and answer, per token, whether it matches (:meth:`ClaimsMatcher.matches`). Rules kept:

* The verified claims are bound as ``claims`` (a map), as ToolHive binds them: ``"admins" in
  claims["groups"]``, ``claims["sub"] == "user123" && !("act" in claims)``.
* Only ``true`` matches. ``false``, a value of another type and an evaluation error (a missing
  key, a type mismatch) are no match, never an exception to the caller: a matcher can only
  grant, so failing closed is the safe side.
* CEL has no loops or recursion: an evaluation costs at most the expression's size (4,096
  characters at most, ToolHive's bound) times the claims' (those of a token whose signature was
  checked). About 0.2 ms each on this machine; the callers cache what they grant per token.

The engine is cel-python (``celpy``), the maintained pure-Python CEL implementation: no other
Python package implements CEL, and writing one is out of proportion with two matcher fields.
"""

from __future__ import annotations

import functools
from typing import Any

from celpy import Environment, celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

__all__ = ["MAX_EXPRESSION", "ClaimsMatcher", "MatcherError", "compile_matcher"]

MAX_EXPRESSION = 4096


@functools.cache
def _environment() -> Environment:
    """The CEL environment, built at the first compile: building its parser takes about a
    quarter of a second, which every process start would pay for two rarely used fields."""
    return Environment()


class MatcherError(ValueError):
    """The expression is not CEL; the message says where (never the claims)."""


class ClaimsMatcher:
    def __init__(self, expression: str, program: Any) -> None:
        self.expression = expression
        self._program = program

    def __repr__(self) -> str:
        return f"ClaimsMatcher({self.expression[:80]!r})"

    def matches(self, claims: dict[str, Any]) -> bool:
        """Whether the expression is ``true`` for ``claims`` (anything else: no match)."""
        try:
            result = self._program.evaluate({"claims": json_to_cel(claims)})
        except (CELEvalError, ValueError, TypeError, RecursionError):
            return False
        return isinstance(result, celtypes.BoolType) and bool(result)


def compile_matcher(expression: str) -> ClaimsMatcher:
    """The compiled expression; raises :class:`MatcherError`."""
    if len(expression) > MAX_EXPRESSION:
        raise MatcherError(f"is longer than {MAX_EXPRESSION} characters")
    try:
        environment = _environment()
        program = environment.program(environment.compile(expression))
    except CELParseError as exc:
        where = " ".join(str(exc).split())[:300]
        raise MatcherError(f"is not a CEL expression: {where}") from None
    return ClaimsMatcher(expression, program)
