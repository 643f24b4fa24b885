"""Rules of a VirtualMCPServer's ``telemetryConfigRef``: an MCPTelemetryConfig as ``OTEL_*``.

One job: turn the MCPTelemetryConfig a gateway names into the standard OpenTelemetry variables
that mean the same (:class:`~.plan.TelemetryPlan`), which ``vmcp serve`` applies at start beneath
the process's own variables (an operator's ``OTEL_*`` wins). The mapping:

* ``openTelemetry.enabled`` and ``tracing.enabled`` -> ``OTEL_TRACES_EXPORTER=otlp`` (either one
  off: no traces from the manifest); ``endpoint`` -> ``OTEL_EXPORTER_OTLP_ENDPOINT``, given
  ``http://`` when ``insecure`` and ``https://`` otherwise when it has no scheme (ToolHive's
  endpoints are ``host:port``); ``tracing.samplingRate`` -> ``OTEL_TRACES_SAMPLER=
  parentbased_traceidratio`` with its argument; ``resourceAttributes`` ->
  ``OTEL_RESOURCE_ATTRIBUTES``; ``telemetryConfigRef.serviceName`` (else the gateway's name) ->
  ``OTEL_SERVICE_NAME``; ``headers`` and ``sensitiveHeaders`` (values from Secrets, never
  printed) -> the exporter's headers.
* Said, not acted on: ``metrics.enabled`` (vmcp does not push OTLP metrics; ``/metrics`` serves
  them) and ``useLegacyAttributes`` are warnings; ``prometheus`` needs nothing (``/metrics`` is
  always served). ``caBundleRef``: the collector's certificate may chain to that ConfigMap's CA
  (written to a private file for ``OTEL_EXPORTER_OTLP_CERTIFICATE`` at start).
* Traces are a process-wide setting: a reload that changes them is told they apply at the next
  start.
"""

from __future__ import annotations

from . import models as m
from . import remote_rules
from .plan import SecretValue, TelemetryPlan
from .report import Resource
from .resolver import Resolver

__all__ = ["resolve_telemetry"]

REF = ("spec", "telemetryConfigRef")


def _endpoint(settings: m.OpenTelemetrySettings) -> str | None:
    endpoint = settings.endpoint
    if endpoint is None or "://" in endpoint:
        return endpoint
    return f"{'http' if settings.insecure else 'https'}://{endpoint}"


def resolve_telemetry(resolver: Resolver, gateway: Resource,
                      ref: m.TelemetryConfigRef | None) -> TelemetryPlan | None:
    """The gateway's telemetry settings; None when it names none (or when reported)."""
    if ref is None:
        return None
    target = resolver.ref(gateway, (*REF, "name"), "MCPTelemetryConfig", ref.name)
    if target is None:
        return None
    spec: m.TelemetryConfigSpec = target.spec
    settings = spec.open_telemetry or m.OpenTelemetrySettings()
    report = resolver.report
    at = ("spec", "openTelemetry")
    if settings.metrics is not None and settings.metrics.enabled:
        report.warn(target, (*at, "metrics", "enabled"), "ignored-field",
                    "is ignored: vmcp does not push OTLP metrics; GET /metrics serves them")
    variables = {"OTEL_SERVICE_NAME": ref.service_name or gateway.name or "vmcp-trio"}
    endpoint = _endpoint(settings)
    tracing = settings.tracing
    if settings.enabled and tracing is not None and tracing.enabled:
        variables["OTEL_TRACES_EXPORTER"] = "otlp"
        variables["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        variables["OTEL_TRACES_SAMPLER_ARG"] = tracing.sampling_rate
        if endpoint is not None:
            variables["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    if settings.resource_attributes:
        variables["OTEL_RESOURCE_ATTRIBUTES"] = ",".join(
            f"{key}={value}" for key, value in settings.resource_attributes.items())
    headers = [(name, SecretValue(f"{target.ident} headers[{name}]", value.encode()))
               for name, value in settings.headers.items()]
    for index, header in enumerate(settings.sensitive_headers):
        value = resolver.secret(target, (*at, "sensitiveHeaders", index, "secretKeyRef"),
                                header.secret_key_ref)
        if value is None:
            return None
        headers.append((header.name, value))
    ca_bundle = None
    if settings.ca_bundle_ref is not None:
        ca_bundle = remote_rules.read_ca_bundle(resolver, target, settings.ca_bundle_ref,
                                                (*at, "caBundleRef"), endpoint)
        if ca_bundle is None:
            return None
    return TelemetryPlan(tuple(sorted(variables.items())), tuple(headers), ca_bundle)
