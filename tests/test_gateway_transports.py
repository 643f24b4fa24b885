"""The gateway over HTTP/2: h2c (prior knowledge) and TLS with ALPN, with the official SDK
client speaking HTTP/2 to it, and HTTP/1.1 over TLS with our own client."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import httpx2
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from vmcp_trio.http.client import HttpClient

from .gateway_helpers import running_gateway


def self_signed(folder: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 (and localhost) and its key, as files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vmcp test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


async def call_with_sdk(url: str, http: httpx2.AsyncClient) -> tuple[str, str]:
    seen: list[str] = []

    async def record(response: httpx2.Response) -> None:
        seen.append(response.http_version)

    http.event_hooks["response"] = [record]
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy",
                            read_timeout_seconds=20) as client:
        result = await client.call_tool("clock_echo", {"message": "over h2"})
    return result.content[0].text, seen[-1]  # type: ignore[union-attr]


async def test_h2c_prior_knowledge() -> None:
    async with running_gateway() as (url, _):
        http = httpx2.AsyncClient(http1=False, http2=True, timeout=20)
        text, version = await call_with_sdk(url, http)
    assert (text, version) == ("over h2", "HTTP/2")


async def test_tls_with_http2_and_http11(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(cafile=cert)
    async with running_gateway(tls=(cert, key)) as (url, _):
        assert url.startswith("https://")
        http = httpx2.AsyncClient(http2=True, verify=context, timeout=20)
        text, version = await call_with_sdk(url, http)
        assert (text, version) == ("over h2", "HTTP/2")
        client = HttpClient(ssl_context=context)
        with trio.fail_after(10):
            status, _, body = await client.request("GET", url.removesuffix("/mcp") + "/health")
        assert status == 200 and body == b'{"status":"ok"}'
        await client.aclose()
