"""References between resources, Secrets, and the rules of the kinds a gateway builds on.

:class:`Resolver` indexes the parsed resources by (kind, namespace, name) and follows references
within a namespace, reporting each one that does not resolve at the field that makes it. It
checks the dependency kinds first (Secret, MCPGroup, MCPServer, MCPExternalAuthConfig,
MCPOIDCConfig) and keeps what each resolves to (a backend endpoint, an outgoing strategy), so
every VirtualMCPServer that uses them shares one resolution and one set of messages.

A Secret reference resolves, in this order, from a ``kind: Secret`` document of the
configuration, from the file ``$VMCP_SECRETS_DIR/<name>/<key>`` (the layout of a Kubernetes
Secret mounted as a volume), or from the secrets manager under the name ``<name>/<key>``: the
environment variable ``VMCP_SECRET_<NAME>__<KEY>``, then the ``vmcp secret`` store
(:mod:`vmcp_trio.secrets.manager`, opened only when asked); so a deployment keeps secrets out of
its configuration files.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509

from ..defaults import DEFAULT_BACKEND_URL_TEMPLATE, DEFAULT_PROXY_PORT
from ..secrets.errors import SecretNotFound, SecretsError
from ..secrets.manager import SecretsManager
from ..secrets.names import env_variable, ref_name
from . import models as m
from . import remote_rules, webhook_rules
from .external_auth_rules import external_auth
from .plan import (
    Endpoint,
    HttpEndpoint,
    OutgoingPlan,
    SecretValue,
    StdioEndpoint,
    WebhooksPlan,
    WorkloadToolsPlan,
)
from .problems import PathPart, format_path
from .report import Report, Resource, ResourceKey

if TYPE_CHECKING:
    from .composite_plan import WorkflowPlan

__all__ = ["DEFAULT_BACKEND_URL_TEMPLATE", "Resolver", "check_url_template"]

_TEMPLATE_FIELDS = frozenset({"name", "namespace", "port"})

def check_url_template(template: str) -> str | None:
    """Why ``template`` is unusable as a backend URL template, or None when it is fine."""
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        return f"is not a valid template: {exc}"
    unknown = fields - _TEMPLATE_FIELDS
    if unknown:
        return (f"has unknown placeholders {sorted(unknown)}; "
                f"use {{name}}, {{namespace}} and {{port}}")
    if not template.startswith(("http://", "https://")):
        return "must start with http:// or https://"
    return None


def _command_problem(command: str, env: Mapping[str, str], working_dir: str | None) -> str | None:
    """Why vmcp could not start ``command`` on this machine, or None: a path (with a slash)
    must name an executable file (relative to ``workingDir``); a bare name must be found on
    the PATH the process will have (``spec.env`` may set it)."""
    if "/" in command:
        target = Path(working_dir or ".") / command
        if not (target.is_file() and os.access(target, os.X_OK)):
            return f"{command[:200]!r} is not an executable file"
        return None
    search = env["PATH"] if "PATH" in env else os.environ.get("PATH", os.defpath)
    if shutil.which(command, path=search) is None:
        return (f"{command[:200]!r} is not found on the PATH ({search[:200]}); give a path or "
                "install it")
    return None


class Resolver:
    def __init__(self, resources: Sequence[Resource], report: Report, *,
                 backend_url_template: str = DEFAULT_BACKEND_URL_TEMPLATE,
                 environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        """Where Secret references not in the configuration are looked up (and
        ``VMCP_SECRETS_DIR``)."""
        self.secrets_dir = self.environ.get("VMCP_SECRETS_DIR") or None
        self._secrets: SecretsManager | None = None
        """The secrets manager of ``environ``, made when a reference first needs it."""
        self.report = report
        self.resources = resources
        self.index: dict[ResourceKey, Resource] = {r.key: r for r in resources if r.name}
        self.url_template = backend_url_template
        self.endpoints: dict[ResourceKey, Endpoint] = {}
        self.strategies: dict[ResourceKey, OutgoingPlan] = {}
        self.backend_tools: dict[ResourceKey, WorkloadToolsPlan] = {}
        self.unimplemented_auth: dict[ResourceKey, str] = {}
        """MCPExternalAuthConfigs of a type vmcp does not implement (an error where used)."""
        self.workflows: dict[ResourceKey, WorkflowPlan] = {}
        """The composite tool definitions that are valid (:mod:`.composite_rules`)."""
        """A backend's own MCPToolConfig (MCPServer by url or command, MCPRemoteProxy)."""
        self.webhook_configs: dict[ResourceKey, WebhooksPlan] = {}
        """The MCPWebhookConfigs that are valid."""
        self.backend_webhooks: dict[ResourceKey, WebhooksPlan] = {}
        """The webhooks of an MCPServer reached by url or started by command."""

    # --- lookups -------------------------------------------------------------------------------

    def of_kind(self, kind: str) -> list[Resource]:
        return [r for r in self.resources if r.kind == kind and r.spec is not None]

    def ref(self, owner: Resource, path: Sequence[PathPart], kind: str,
            name: str) -> Resource | None:
        """The referenced resource if it is usable; reports a reference that does not resolve.

        A target that exists but has errors of its own gives None without a second message.
        """
        target = self.index.get((kind, owner.namespace or "", name))
        if target is None:
            self.report.error(owner, path, "reference",
                              f"refers to {kind} {owner.namespace}/{name}, which does not exist"
                              " (references resolve within the same namespace)")
            return None
        return target if target.usable else None

    def ca_certificates(self, owner: Resource, path: Sequence[PathPart],
                        ref: m.SecretKeyRef) -> SecretValue | None:
        """A Secret reference whose value must be PEM CA certificates (a TLS connection's
        ``caCertSecretRef``/``caSecretRef``); a value that is not is reported at its key."""
        certificates = self.secret(owner, path, ref)
        if certificates is not None:
            try:
                x509.load_pem_x509_certificates(certificates.value)
            except ValueError:
                self.report.error(owner, (*path, "key"), "ca-certificate",
                                  f"Secret {certificates.source}: is not PEM certificates")
        return certificates

    def secret(self, owner: Resource, path: Sequence[PathPart],
               ref: m.SecretKeyRef) -> SecretValue | None:
        """The value a Secret reference names: a ``kind: Secret`` document of the
        configuration, else the file ``$VMCP_SECRETS_DIR/<name>/<key>`` (a mounted Kubernetes
        Secret), else the secrets manager's ``<name>/<key>`` (the variable
        ``VMCP_SECRET_<NAME>__<KEY>``, then the ``vmcp secret`` store); reported at ``path``,
        naming every place looked, when none has it."""
        if ("Secret", owner.namespace or "", ref.name) not in self.index:
            found, where = self._secret_outside(ref)
            if found is not None:
                return found
            self.report.error(owner, (*path, "name"), "reference",
                              f"refers to Secret {owner.namespace}/{ref.name}, which is neither "
                              "a document of the configuration (references resolve within the "
                              f"same namespace) nor {' nor '.join(where)}")
            return None
        target = self.ref(owner, (*path, "name"), "Secret", ref.name)
        if target is None:
            return None
        secret: m.SecretResource = target.spec
        source = f"{target.namespace}/{ref.name}[{ref.key}]"
        if ref.key in secret.string_data:
            return SecretValue(source, secret.string_data[ref.key].encode("utf-8"))
        if ref.key in secret.data:
            return SecretValue(source, base64.b64decode(secret.data[ref.key]))
        keys = sorted({*secret.string_data, *secret.data})
        have = f"its keys are: {', '.join(keys)}" if keys else "it has no keys"
        self.report.error(owner, (*path, "key"), "secret-key",
                          f"Secret {target.namespace}/{ref.name} has no key {ref.key!r} ({have})")
        return None

    def _secret_outside(self, ref: m.SecretKeyRef) -> tuple[SecretValue | None, list[str]]:
        """The value from outside the configuration, or None and where it was looked for."""
        where = []
        if self.secrets_dir:
            path = Path(self.secrets_dir) / ref.name / ref.key
            try:
                return SecretValue(f"file {path}", path.read_bytes()), []
            except OSError:
                where.append(f"the file {path}")
        name = ref_name(ref.name, ref.key)
        if self._secrets is None:
            self._secrets = SecretsManager.from_environment(self.environ)
        store = f"the name {name} in the vmcp secret store {self._secrets.path}"
        try:
            value, source = self._secrets.find(name)
        except SecretNotFound:
            return None, [*where, f"the variable {env_variable(name)}", store]
        except SecretsError as exc:  # the store does not open: say why, in its one line
            return None, [*where, f"the variable {env_variable(name)}", f"{store}: {exc}"]
        return SecretValue(source, value.encode("utf-8")), []

    def require_https(self, owner: Resource, path: Sequence[PathPart], url: str | None,
                      allowed: bool, switch: str, *, blame: bool = True) -> None:
        """Plain http only when the block's ``insecureAllowHTTP`` switch says so."""
        if url is not None and url.lower().startswith("http://") and not allowed:
            self.report.error(owner, path, "https",
                              f"must use https (set {switch}: true to allow plain http, "
                              "for development only)", blame=blame)

    # --- the dependency kinds -------------------------------------------------------------------

    def check_dependencies(self) -> None:
        for resource in self.of_kind("Secret"):
            self._check_secret(resource)
        for resource in self.of_kind("MCPExternalAuthConfig"):
            strategy = external_auth(self, resource)
            if strategy is not None:
                self.strategies[resource.key] = strategy
        for resource in self.of_kind("MCPOIDCConfig"):
            self._check_oidc_config(resource)
        for resource in self.of_kind("MCPToolConfig"):
            remote_rules.check_tool_config(self, resource)
        for resource in self.of_kind("MCPWebhookConfig"):
            webhooks = webhook_rules.webhooks_plan(self, resource)
            if webhooks is not None:
                self.webhook_configs[resource.key] = webhooks
        for resource in self.of_kind("MCPServer"):
            endpoint = self._server(resource)
            if endpoint is not None:
                self.endpoints[resource.key] = endpoint
            ref = resource.spec.webhook_config_ref
            target = None if ref is None else self.ref(
                resource, ("spec", "webhookConfigRef", "name"), "MCPWebhookConfig", ref.name)
            if target is not None and target.key in self.webhook_configs:
                self.backend_webhooks[resource.key] = self.webhook_configs[target.key]
        for kind in ("MCPServerEntry", "MCPRemoteProxy"):
            for resource in self.of_kind(kind):
                remote = remote_rules.remote_endpoint(self, resource)
                if remote is not None:
                    self.endpoints[resource.key] = remote
        for kind in ("MCPServer", "MCPRemoteProxy"):
            for resource in self.of_kind(kind):
                ref = resource.spec.tool_config_ref
                endpoint = self.endpoints.get(resource.key)
                if isinstance(endpoint, HttpEndpoint) and endpoint.in_cluster:
                    continue  # ToolHive's proxy in front of an in-cluster server applies it
                kept = getattr(resource.spec, "tools", None)  # an MCPServer's older filter
                if kept is not None and ref is not None:
                    self.report.error(resource, ("spec", "tools"), "conflict",
                                      "is the older form of toolConfigRef: give one of them")
                    continue
                tools = WorkloadToolsPlan(resource.name or "", kept) if kept is not None else \
                    None if ref is None else remote_rules.tool_config_plan(
                        self, resource, ("spec", "toolConfigRef"), ref, resource.name or "")
                if tools is not None:
                    self.backend_tools[resource.key] = tools

    def _check_secret(self, resource: Resource) -> None:
        secret: m.SecretResource = resource.spec
        for key, value in secret.data.items():
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                self.report.error(resource, ("data", key), "base64",
                                  "is not valid base64 (use stringData for plain text)")

    def _server(self, resource: Resource) -> Endpoint | None:
        spec: m.MCPServerSpec = resource.spec
        path = ("spec",)
        if spec.group_ref is not None:
            self.ref(resource, (*path, "groupRef", "name"), "MCPGroup", spec.group_ref.name)
        if spec.external_auth_config_ref is not None:
            self.ref(resource, (*path, "externalAuthConfigRef", "name"), "MCPExternalAuthConfig",
                     spec.external_auth_config_ref.name)
        port = spec.proxy_port or spec.port
        if spec.port is not None and spec.proxy_port is not None and spec.port != spec.proxy_port:
            self.report.error(resource, (*path, "port"), "conflict",
                              "differs from spec.proxyPort (port is its name before ToolHive "
                              "v0.15): set only proxyPort")
        if spec.url is not None and spec.command is not None:
            self.report.error(resource, (*path, "command"), "one-of",
                              "spec.url and spec.command are mutually exclusive: a backend is "
                              "either a running server or a stdio command that vmcp starts")
            return None
        if spec.command is None:
            if spec.working_dir is not None:
                self.report.error(resource, (*path, "workingDir"), "unused-field",
                                  "is used only with spec.command")
            image = [alias for alias in ("args", "env") if getattr(spec, alias)]
            if image:
                reached = ("at spec.url" if spec.url is not None else
                           "at its in-cluster URL (--backend-url-template), where ToolHive's "
                           "operator runs the image")
                self.report.warn(resource, (*path, image[0]), "image-args",
                                 f"{' and '.join(image)} without spec.command belong to the "
                                 f"container image, which vmcp does not run: this backend is "
                                 f"reached {reached}")
        if spec.command is not None:
            if spec.transport not in (None, "stdio"):
                self.report.error(resource, (*path, "transport"), "transport",
                                  "must be stdio (or omitted) for a server that vmcp starts "
                                  "with spec.command")
            problem = _command_problem(spec.command, spec.env, spec.working_dir)
            if problem is not None:
                self.report.error(resource, (*path, "command"), "command", problem)
            endpoint: Endpoint = StdioEndpoint(
                spec.command, spec.args, tuple(sorted(spec.env.items())), spec.working_dir)
        elif spec.url is not None:
            if spec.transport == "stdio":
                self.report.error(resource, (*path, "transport"), "transport",
                                  "must be streamable-http or sse with spec.url (a URL does not "
                                  "speak stdio)")
            endpoint = HttpEndpoint(spec.url, "sse" if spec.transport == "sse" else
                                    "streamable-http")
        else:
            base = self.url_template.format(name=resource.name, namespace=resource.namespace,
                                            port=port or DEFAULT_PROXY_PORT)
            sse = spec.transport == "sse" or (spec.transport in (None, "stdio")
                                              and spec.proxy_mode == "sse")
            endpoint = HttpEndpoint(base.rstrip("/") + ("/sse" if sse else "/mcp"),
                                    "sse" if sse else "streamable-http", in_cluster=True)
        for alias, value in (("proxyPort", port), ("proxyMode", spec.proxy_mode)):
            if value is not None and (spec.url or spec.command):
                self.report.warn(resource, (*path, alias), "unused-field",
                                 "is ignored: it only shapes the in-cluster URL, and this "
                                 "server has spec.url or spec.command")
        return None if resource.broken else endpoint

    def block_matches_type(self, resource: Resource, type_: str, block: str, present: bool,
                            others: dict[str, bool]) -> None:
        """``type: X`` needs the ``X`` block and no block of another type."""
        if not present:
            self.report.error(resource, ("spec", block), "required",
                              f"is required when type is {type_}")
        for other, set_ in others.items():
            if set_:
                self.report.error(resource, ("spec", other), "unused-field",
                                  f"must not be set when type is {type_}")

    def _check_oidc_config(self, resource: Resource) -> None:
        spec: m.OIDCConfigSpec = resource.spec
        if spec.type == "inline":
            self.block_matches_type(resource, spec.type, "inline", spec.inline is not None,
                                     {"kubernetesServiceAccount":
                                      spec.kubernetes_service_account is not None})
            if spec.inline is not None:
                self.check_inline_oidc(resource, ("spec", "inline"), spec.inline)
        else:
            self.block_matches_type(resource, spec.type, "kubernetesServiceAccount", True,
                                     {"inline": spec.inline is not None})
            account = spec.kubernetes_service_account
            url = account.introspection_url if account is not None else None
            if url is not None and url.lower().startswith("http://"):
                self.report.error(resource, ("spec", "kubernetesServiceAccount",
                                             "introspectionUrl"), "https",
                                  "must use https (the tokens it is sent are credentials)")

    def check_inline_oidc(self, owner: Resource, path: Sequence[PathPart],
                          inline: m.SharedInlineOIDC) -> SecretValue | None:
        """https for the issuer's URLs, and the introspection secret when there is one."""
        switch = format_path((*path, "insecureAllowHTTP"))
        for field, alias in (("issuer", "issuer"), ("jwks_url", "jwksUrl"),
                             ("introspection_url", "introspectionUrl")):
            self.require_https(owner, (*path, alias), getattr(inline, field),
                               inline.insecure_allow_http, switch)
        if inline.client_secret_ref is None:
            return None
        return self.secret(owner, (*path, "clientSecretRef"), inline.client_secret_ref)

