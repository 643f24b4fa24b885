"""Field types shared by the resource models: strict scalars and checked string formats.

Each format check raises ``PydanticCustomError(rule, message)`` so the error carries our rule id
and a message that describes the expected shape. Messages never quote the offending value: a
field that looks like a URL may carry credentials, and a mistyped secret may end up anywhere.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, Strict
from pydantic_core import PydanticCustomError

from .durations import Duration, DurationError, parse_duration

__all__ = [
    "DNS_NAME_RULE",
    "Bool",
    "DnsLabel",
    "DnsSubdomain",
    "DotPath",
    "DurationText",
    "HeaderName",
    "HostPort",
    "Int",
    "NonEmpty",
    "Port",
    "Str",
    "UrlText",
    "is_dns_subdomain",
]

Str = Annotated[str, Strict()]
Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
NonEmpty = Annotated[str, Strict(), Field(min_length=1, max_length=4096)]
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
HeaderName = Annotated[str, Strict(), Field(min_length=1, max_length=255,
                                            pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")]
"""An HTTP header name (an RFC 9110 token)."""

_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value):
        raise PydanticCustomError(
            "dns-label",
            "must be a DNS label: 1 to 63 lowercase letters, digits and hyphens, "
            "starting and ending with a letter or digit",
        )
    return value


DNS_NAME_RULE = ("must be a DNS subdomain name: at most 253 characters of lowercase letters, "
                 "digits, '-' and '.', each part starting and ending with a letter or digit")


def is_dns_subdomain(value: str) -> bool:
    """Kubernetes' rule for object names (RFC 1123 subdomain)."""
    return len(value) <= 253 and all(_DNS_LABEL.match(part) for part in value.split("."))


def _dns_subdomain(value: str) -> str:
    if not is_dns_subdomain(value):
        raise PydanticCustomError("dns-name", DNS_NAME_RULE)
    return value


DnsLabel = Annotated[str, Strict(), AfterValidator(_dns_label)]
DnsSubdomain = Annotated[str, Strict(), AfterValidator(_dns_subdomain)]


def _url(value: str) -> str:
    """Absolute http(s) URL with a host, no fragment, no whitespace. https is checked later,
    where the block's ``insecureAllowHTTP`` switch is known."""
    message = "must be an absolute http:// or https:// URL with a host"
    if len(value) > 2048:
        raise PydanticCustomError("url", "is longer than 2048 characters")
    if any(ch.isspace() for ch in value):
        raise PydanticCustomError("url", message + " and no spaces")
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise PydanticCustomError("url", message + " (the host or port is malformed)") from None
    if parts.scheme not in ("http", "https") or not host:
        raise PydanticCustomError("url", message)
    if parts.fragment or value.endswith("#"):
        raise PydanticCustomError("url", "must not have a #fragment")
    return value


UrlText = Annotated[str, Strict(), AfterValidator(_url)]


def _duration(value: object) -> Duration:
    if isinstance(value, Duration):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError(
            "duration", "must be a duration string such as '30s', '10m' or '1h30m'"
        )
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise PydanticCustomError("duration", str(exc)) from None


DurationText = Annotated[Duration, BeforeValidator(_duration)]


def _host_port(value: str) -> str:
    message = "must be host:port (for example 10.0.0.5:26379 or [::1]:26379)"
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise PydanticCustomError("host-port", message)
    if not 1 <= int(port) <= 65535:
        raise PydanticCustomError("host-port", "port must be between 1 and 65535")
    if host.startswith("["):
        if not host.endswith("]"):
            raise PydanticCustomError("host-port", message)
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise PydanticCustomError("host-port", message) from None
    elif ":" in host or any(ch.isspace() for ch in host):
        raise PydanticCustomError("host-port", message)
    return value


HostPort = Annotated[str, Strict(), AfterValidator(_host_port)]


def _dot_path(value: str) -> str:
    if not value or any(not segment.strip() for segment in value.split(".")):
        raise PydanticCustomError(
            "dot-path",
            "must be a dot-notation path of non-empty segments, such as 'authed_user.access_token'",
        )
    return value


DotPath = Annotated[str, Strict(), AfterValidator(_dot_path)]

