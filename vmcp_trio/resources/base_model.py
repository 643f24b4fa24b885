"""The base of every resource model, and the pieces every kind shares: scopes, free-form
blocks, a Secret reference.

One job: the one definition of what a model of these resources is (camelCase names only,
unknown fields refused, immutable once built, input never echoed in errors), so that the kinds
split over several modules (:mod:`.models`, :mod:`.external_auth_models`) share it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .fields import DnsSubdomain, NonEmpty, Str

__all__ = ["FreeForm", "Model", "Scopes", "SecretKeyRef"]


class Model(BaseModel):
    """camelCase names only, unknown fields refused, immutable once built."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        hide_input_in_errors=True,
    )


Scopes = tuple[NonEmpty, ...]

FreeForm = dict[Str, Any]
"""A block whose inner fields vmcp does not check yet (its feature is not implemented)."""


class SecretKeyRef(Model):
    """``{name, key}`` of a Secret in the same namespace."""

    name: DnsSubdomain
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
