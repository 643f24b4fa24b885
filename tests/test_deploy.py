"""deploy/kubernetes/, checked offline: what `kubectl apply -k` would send, and what it means.

* crds/crds.yaml is exactly what scripts/crds.py writes from the models (drift fails);
* every document that kubectl's kustomize builds from deploy/kubernetes/ and from its opt-in
  crds/ validates against Kubernetes' own schemas (kubernetes-validate, strict: an unknown field
  fails);
* the CRDs are structural (what the API server demands of a v1 CRD, and the schema files do not
  check), and the custom resources of the ConfigMap and of examples/ validate against them;
* the ConfigMap's files pass `vmcp validate`, with the Secrets laid out as the Deployment mounts
  them;
* the Deployment's drain arithmetic, probes, replicas, mounts and security, the PDB and the
  Service agree with each other and with the gateway's configuration.

tests/test_deploy_options.py checks what an operator opts into around them.
"""

from __future__ import annotations

import copy
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import kubernetes_validate
import pytest
from pydantic import Field

from vmcp_trio.defaults import DEFAULT_API_GROUP
from vmcp_trio.resources.crds import GO_DURATION_PATTERN, crd_documents, spec_schema
from vmcp_trio.resources.durations import parse_duration
from vmcp_trio.resources.fields import DurationText
from vmcp_trio.resources.models import KIND_MODELS, Model

from .deploy_helpers import (
    CRDS,
    DEPLOY,
    Doc,
    built,
    config_documents,
    config_files,
    crds_script,
    documents,
    env,
    gateway_container,
    kustomization,
    manifests,
    only,
    pod_spec,
)
from .helpers import ROOT

KUBERNETES_VERSION = "1.37"
"""A recent Kubernetes whose schemas kubernetes-validate ships (its 1.37.0 has 1.25 to 1.37)."""


# --- (1) crds.yaml is generated -----------------------------------------------------------------


def test_crds_yaml_is_what_the_models_generate() -> None:
    if crds_script().render() != (CRDS / "crds.yaml").read_text(encoding="utf-8"):
        pytest.fail("deploy/kubernetes/crds/crds.yaml differs from the models: run "
                    ".venv/bin/python scripts/crds.py and commit the result", pytrace=False)


def test_crds_script_check_flags_drift_in_one_line(tmp_path: Path) -> None:
    script = [sys.executable, str(ROOT / "scripts" / "crds.py"), "--check"]
    ok = subprocess.run(script, capture_output=True, text=True, timeout=120, check=False)
    assert (ok.returncode, ok.stderr) == (0, "")

    stale = tmp_path / "crds.yaml"
    stale.write_text((CRDS / "crds.yaml").read_text(encoding="utf-8").replace(
        "nullable: true", "nullable: false", 1), encoding="utf-8")
    drift = subprocess.run([*script, "--output", str(stale)], capture_output=True, text=True,
                           timeout=120, check=False)
    assert drift.returncode == 1
    assert drift.stderr.count("\n") == 1 and "python scripts/crds.py" in drift.stderr


# --- (2) Kubernetes' own schemas ------------------------------------------------------------------


def test_kustomization_lists_every_manifest_into_namespace_vmcp() -> None:
    k = kustomization()
    assert (k["apiVersion"], k["kind"], k["namespace"]) == (
        "kustomize.config.k8s.io/v1beta1", "Kustomization", "vmcp")
    listed = k["resources"]
    assert len(listed) == len(set(listed))
    on_disk = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == on_disk, "a manifest is missing from kustomization.yaml, or vice versa"
    [generator] = k["configMapGenerator"]
    assert sorted(generator["files"]) == sorted(
        f"config/{p.name}" for p in (DEPLOY / "config").glob("*.yaml"))
    assert only("Namespace")["metadata"]["name"] == "vmcp"


def test_every_manifest_validates_against_kubernetes_schemas_strictly() -> None:
    seen = 0
    problems = []
    for folder in (DEPLOY, CRDS):  # the default kustomization and the opt-in CRDs
        name = folder.relative_to(ROOT)
        for index, doc in enumerate(built(folder), start=1):
            seen += 1
            try:
                version = kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(part) for part in exc.path)
                problems.append(f"{name} #{index} {doc.get('kind')}: {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{name} #{index}: {exc.message}")
            else:
                assert version == KUBERNETES_VERSION
    assert not problems, "\n".join(problems)
    assert seen >= 20


def test_the_schema_check_is_strict() -> None:
    """A control: the check above does fail on an unknown field (a typo in a probe)."""
    deployment = copy.deepcopy(only("Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="httpGett"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


# --- (3) the CRDs, and the custom resources against them -----------------------------------------


FORBIDDEN_KEYWORDS = {"$ref", "$defs", "definitions", "patternProperties", "dependencies",
                      "additionalItems", "id", "$schema", "title", "const", "discriminator",
                      "prefixItems", "propertyNames", "allOf", "anyOf", "oneOf", "not"}
SCALARS = {"string", "integer", "number", "boolean"}


def structural_problems(node: Doc, path: str) -> list[str]:
    """What the API server refuses in a v1 CRD's schema (beyond the shape the schema files
    check): Kubernetes' structural-schema rules, for the subset of OpenAPI our generator uses
    (it emits no allOf/anyOf/oneOf/not at all)."""
    problems = [f"{path}: {key} is not allowed" for key in FORBIDDEN_KEYWORDS & set(node)]
    free = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
        "x-kubernetes-int-or-string")
    if "type" not in node and not free:
        problems.append(f"{path}: has no type")
    if node.get("type") == "null":
        problems.append(f"{path}: type null (use nullable)")
    if node.get("uniqueItems"):
        problems.append(f"{path}: uniqueItems true")
    if "additionalProperties" in node:
        if not isinstance(node["additionalProperties"], dict):
            problems.append(f"{path}: additionalProperties must be a schema")
        if "properties" in node:
            problems.append(f"{path}: properties and additionalProperties together")
    if "items" in node and not isinstance(node["items"], dict):
        problems.append(f"{path}: items must be one schema")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{path}: an array needs items")
    if node.get("x-kubernetes-list-type") == "set" and node["items"].get("type") not in SCALARS:
        problems.append(f"{path}: a set of non-scalars")
    if "default" in node and not FORBIDDEN_KEYWORDS & set(node):
        try:
            jsonschema.validate(node["default"], to_jsonschema(node))
        except jsonschema.ValidationError as exc:
            problems.append(f"{path}: default does not validate: {exc.message}")
    for name, child in node.get("properties", {}).items():
        problems += structural_problems(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), dict):
        problems += structural_problems(node["items"], f"{path}[]")
    return problems


def to_jsonschema(node: Any, *, prune: bool = False) -> Any:
    """An OpenAPI (Kubernetes) schema as JSON Schema: ``nullable`` as a null type, a boolean
    ``exclusiveMinimum``/``exclusiveMaximum`` as the bound itself. With ``prune``, every object
    that names its fields refuses the others: a field Kubernetes would prune silently is an
    error here, so the CRD must know every field a resource uses."""
    if isinstance(node, list):
        return [to_jsonschema(item, prune=prune) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: to_jsonschema(value, prune=prune) if key in ("items", "additionalProperties")
           else value for key, value in node.items() if key != "nullable"}
    if "properties" in node:
        out["properties"] = {name: to_jsonschema(child, prune=prune)
                             for name, child in node["properties"].items()}
        if prune and not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for bound in ("Minimum", "Maximum"):  # OpenAPI 3.0's boolean form to JSON Schema's
        if out.get(f"exclusive{bound}") is True:
            out[f"exclusive{bound}"] = out.pop(bound.lower())
    if node.get("nullable") and "type" in node:
        out["type"] = [node["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def crds() -> dict[str, Doc]:
    return {doc["spec"]["names"]["kind"]: doc for doc in documents(CRDS / "crds.yaml")}


def test_one_crd_per_kind_with_toolhive_versions() -> None:
    found = crds()
    assert set(found) == set(KIND_MODELS) - {"Secret"}
    for kind, crd in found.items():
        spec = crd["spec"]
        names = spec["names"]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert spec["group"] == DEFAULT_API_GROUP
        assert crd["metadata"]["name"] == f"{names['plural']}.{DEFAULT_API_GROUP}"
        assert (names["plural"], names["singular"], names["listKind"]) == (
            kind.lower() + "s", kind.lower(), kind + "List")
        assert spec["scope"] == "Namespaced"
        versions = {v["name"]: v for v in spec["versions"]}
        assert set(versions) == {"v1beta1", "v1alpha1"}
        assert [v["name"] for v in spec["versions"] if v["storage"]] == ["v1beta1"]
        assert all(v["served"] and v["subresources"] == {"status": {}} for v in versions.values())
        assert versions["v1alpha1"]["deprecated"] is True
        assert versions["v1alpha1"]["deprecationWarning"] == (
            "toolhive.stacklok.dev/v1alpha1 is deprecated; use v1beta1")
        assert "deprecated" not in versions["v1beta1"]
        assert versions["v1alpha1"]["schema"] == versions["v1beta1"]["schema"]
        root = versions["v1beta1"]["schema"]["openAPIV3Schema"]
        assert root["properties"]["metadata"] == {"type": "object"}
        assert root["properties"]["status"] == {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}
        assert (root.get("required") == ["spec"]) == (kind != "MCPGroup")


def test_crd_schemas_are_structural() -> None:
    problems = []
    for kind, crd in crds().items():
        for version in crd["spec"]["versions"]:
            problems += structural_problems(version["schema"]["openAPIV3Schema"],
                                            f"{kind}/{version['name']}")
    assert not problems, "\n".join(problems)


def test_the_structural_check_finds_what_kubernetes_refuses() -> None:
    """A control: the generator's raw material (pydantic's JSON schema) is not structural."""
    raw = KIND_MODELS["VirtualMCPServer"].model_json_schema(by_alias=True)
    found = " ".join(structural_problems(raw, "raw"))
    for problem in ("$defs is not allowed", "title is not allowed", "has no type"):
        assert problem in found


class _A(Model):
    kind: Literal["a"]
    x: int = 1


class _B(Model):
    kind: Literal["b"]
    y: str


class _Tree(Model):
    children: tuple[_Tree, ...] = ()


class _Shapes(Model):
    """Every JSON Schema shape pydantic makes, for the converter."""

    only: Literal["only"] = "only"
    pair: tuple[int, str] | None = None
    anything: Any = None
    free: dict[str, Any] = Field(default_factory=dict)
    either: Annotated[_A | _B, Field(discriminator="kind")] | None = None
    number_or_text: int | str = 0
    tags: frozenset[str] = frozenset()
    ratio: Annotated[float, Field(gt=0, lt=1)] = 0.5
    tree: _Tree | None = None
    wait: DurationText | None = None
    mixed: int | bool | None = None
    headers: dict[Annotated[str, Field(pattern="^[a-z]+$")], str] = Field(default_factory=dict)


def test_the_converter_gives_every_shape_a_structural_form() -> None:
    schema = spec_schema(_Shapes)
    assert not structural_problems(schema, "shapes"), structural_problems(schema, "shapes")
    p = schema["properties"]
    assert p["only"] == {"type": "string", "enum": ["only"], "default": "only"}
    assert p["pair"] == {"type": "array", "nullable": True, "maxItems": 2, "minItems": 2,
                         "items": {"x-kubernetes-int-or-string": True}}
    assert p["anything"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert p["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    either = p["either"]
    assert (either["type"], either["nullable"], either["required"]) == ("object", True, ["kind"])
    assert either["properties"]["kind"] == {"type": "string", "enum": ["a", "b"]}
    assert set(either["properties"]) == {"kind", "x", "y"}
    assert p["numberOrText"] == {"x-kubernetes-int-or-string": True, "default": 0}
    assert p["tags"]["x-kubernetes-list-type"] == "set"
    assert (p["ratio"]["minimum"], p["ratio"]["exclusiveMinimum"]) == (0, True)
    assert p["tree"]["properties"]["children"]["items"] == {
        "x-kubernetes-preserve-unknown-fields": True}  # recursion stops after one level
    assert p["wait"]["type"] == "string" and p["wait"]["pattern"] == GO_DURATION_PATTERN
    assert p["mixed"] == {"nullable": True, "x-kubernetes-preserve-unknown-fields": True}
    assert p["headers"] == {"type": "object", "additionalProperties": {"type": "string"}}
    durations = jsonschema.Draft202012Validator({"pattern": GO_DURATION_PATTERN})
    for good in ("30s", "1h30m", "1.5h", "250ms", "0", "5\u00b5s"):
        assert durations.is_valid(good), good
    for bad in ("30", "-5s", "1d", "", "s"):
        assert not durations.is_valid(bad), bad


def validate_custom_resource(doc: Doc) -> None:
    group, _, version = doc["apiVersion"].rpartition("/")
    crd = crds()[doc["kind"]]
    assert group == crd["spec"]["group"]
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    assert version in served, f"{doc['kind']} {version} is not served"
    schema = to_jsonschema(served[version]["schema"]["openAPIV3Schema"], prune=True)
    jsonschema.validate(doc, schema)


def test_configmap_resources_validate_against_the_crds() -> None:
    docs = config_documents()
    assert sorted(doc["kind"] for doc in docs) == [
        "MCPGroup", "MCPServer", "MCPServer", "VirtualMCPServer"]
    for doc in docs:
        validate_custom_resource(doc)
    # and as v1beta1, the stored version
    for doc in docs:
        validate_custom_resource({**doc, "apiVersion": f"{DEFAULT_API_GROUP}/v1beta1"})


def test_example_resources_validate_against_the_crds() -> None:
    """Every custom resource of examples/ (the README's shapes) fits its CRD: no field that the
    API server would prune or refuse."""
    count = 0
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in documents(path):
            if doc["kind"] != "Secret":
                validate_custom_resource(doc)
                count += 1
    assert count >= 20


def test_the_crd_check_bites() -> None:
    """Controls: a field the CRD does not know, a wrong enum, a bad duration all fail."""
    gateway = next(doc for doc in config_documents() if doc["kind"] == "VirtualMCPServer")
    for change in (
        lambda spec: spec.update(sessionStorag={}),
        lambda spec: spec["sessionStorage"].update(provider="memcached"),
        lambda spec: spec.update(operational={"timeouts": {"default": "1d"}}),
        lambda spec: spec["incomingAuth"]["oidcConfig"]["inline"].update(issuer=None),
    ):
        broken = copy.deepcopy(gateway)
        change(broken["spec"])
        with pytest.raises(jsonschema.ValidationError):
            validate_custom_resource(broken)


# --- (4) the gateway's configuration passes `vmcp validate` --------------------------------------


def secrets_dir(base: Path, values: dict[tuple[str, str], str]) -> Path:
    """Secrets as the Deployment mounts them: $VMCP_SECRETS_DIR/<secret name>/<key>."""
    root = base / "secrets"
    for (name, key), value in values.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / key).write_text(value, encoding="utf-8")
    return root


def vmcp_validate(tmp_path: Path, secrets_root: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "etc-vmcp"
    config.mkdir()
    for name, text in config_files().items():
        (config / name).write_text(text, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VMCP_")}
    environ["VMCP_SECRETS_DIR"] = str(secrets_root)
    return subprocess.run([sys.executable, "-m", "vmcp_trio", "validate", "--config", str(config)],
                          capture_output=True, text=True, env=environ, timeout=120, check=False)


def referenced_secrets() -> set[tuple[str, str]]:
    storage = next(doc for doc in config_documents()
                   if doc["kind"] == "VirtualMCPServer")["spec"]["sessionStorage"]
    refs = [storage["passwordRef"], *storage["hmacSecretRefs"]]
    return {(ref["name"], ref["key"]) for ref in refs}


def test_configmap_passes_vmcp_validate_with_the_mounted_secrets(tmp_path: Path) -> None:
    assert referenced_secrets() == {("vmcp-redis", "password"), ("vmcp-fleet", "hmac")}
    root = secrets_dir(tmp_path, {("vmcp-fleet", "hmac"): secrets.token_urlsafe(48),
                                  ("vmcp-redis", "password"): secrets.token_hex(32)})
    result = vmcp_validate(tmp_path, root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid: 4 document(s), 0 warning(s)" in result.stdout
    assert "VirtualMCPServer vmcp/platform-gateway" in result.stdout
    assert "incoming auth: oidc" in result.stdout
    for backend in ("fetch", "time"):
        assert f"{backend}: streamable-http http://{backend}.mcp-servers.svc" in result.stdout


def test_the_placeholder_fleet_secret_is_refused(tmp_path: Path) -> None:
    """Applied unchanged, secret-example.yaml stops the gateway instead of running it on a
    published key: its placeholder is shorter than the 32 bytes an HMAC secret needs."""
    values = {(secret["metadata"]["name"], key): value
              for secret in (doc for _, _, doc in manifests() if doc["kind"] == "Secret")
              for key, value in secret["stringData"].items()}
    assert referenced_secrets() <= set(values)
    result = vmcp_validate(tmp_path, secrets_dir(tmp_path, values))
    assert result.returncode == 1
    assert "hmacSecretRefs[0]" in result.stdout and "[hmac-secret]" in result.stdout


def test_configmap_holds_no_secret() -> None:
    assert all(doc["kind"] != "Secret" for doc in config_documents())


# --- (5) the Deployment, the PDB and the Service -------------------------------------------------


def seconds(text: str) -> float:
    return parse_duration(text).total_seconds()


def named_port(container: Doc, port: int | str) -> int:
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p["name"] == port)


def test_drain_arithmetic() -> None:
    container = gateway_container()
    variables = env(container)
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep" and len(sleep) == 2
    pre_stop = float(sleep[1])
    drain = seconds(variables["VMCP_DRAIN_DELAY"])
    grace = seconds(variables["VMCP_SHUTDOWN_GRACE"])
    assert (pre_stop, drain, grace) == (5, 5, 30)
    assert pod_spec()["terminationGracePeriodSeconds"] >= pre_stop + drain + grace
    assert pod_spec()["terminationGracePeriodSeconds"] == pre_stop + drain + grace + 5


def test_probes_ports_and_arguments() -> None:
    container = gateway_container()
    assert container["args"] == ["serve", "--config", "/etc/vmcp", "--host", "0.0.0.0",
                                 "--port", "4483"]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/health")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert named_port(container, get["port"]) == 4483


def test_replicas_disruption_budget_and_service() -> None:
    deployment = only("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    replicas = deployment["spec"]["replicas"]
    assert replicas == 3
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    pdb = only("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] < replicas
    assert pdb["spec"]["minAvailable"] == 2
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()

    service = only("Service", "vmcp")
    assert service["spec"].get("sessionAffinity", "None") != "ClientIP"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == 80
    assert named_port(gateway_container(), port["targetPort"]) == 4483

    spread = pod_spec()["topologySpreadConstraints"]
    by_node = [c for c in spread if c["topologyKey"] == "kubernetes.io/hostname"]
    assert by_node and by_node[0]["labelSelector"]["matchLabels"].items() <= labels.items()


def test_security_context() -> None:
    pod = pod_spec()["securityContext"]
    container = gateway_container()["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"]["drop"] == ["ALL"]
    resources = gateway_container()["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys()
    assert "memory" in resources["limits"]


def test_config_and_referenced_secrets_are_mounted_read_only() -> None:
    container = gateway_container()
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    config = mounts["/etc/vmcp"]
    assert config["readOnly"] is True and "configMap" in volumes[config["name"]]

    secrets_root = env(container)["VMCP_SECRETS_DIR"]
    assert secrets_root == "/etc/vmcp-secrets"
    shipped = {(doc["metadata"]["name"], key) for _, _, doc in manifests()
               if doc["kind"] == "Secret" for key in doc["stringData"]}
    for name, key in referenced_secrets():
        mount = mounts[f"{secrets_root}/{name}"]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"]["secretName"] == name
        assert (name, key) in shipped


def test_sentinel_addresses_are_the_example_statefulset() -> None:
    storage = next(doc for doc in config_documents()
                   if doc["kind"] == "VirtualMCPServer")["spec"]["sessionStorage"]
    assert storage["provider"] == "redis"
    statefulset = only("StatefulSet", "vmcp-redis")
    headless = only("Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    pods = {f"{statefulset['metadata']['name']}-{i}" for i in
            range(statefulset["spec"]["replicas"])}
    for address in storage["sentinelConfig"]["sentinelAddrs"]:
        match = re.fullmatch(r"([a-z0-9-]+)\.([a-z0-9-]+)\.vmcp\.svc\.cluster\.local:26379",
                             address)
        assert match, address
        assert match[1] in pods and match[2] == headless["metadata"]["name"]
    assert len(storage["sentinelConfig"]["sentinelAddrs"]) == len(pods) == 3
    containers = {c["name"]: c for c in statefulset["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"redis", "sentinel"}
    assert {c["image"] for c in containers.values()} == {"redis:7"}
    assert storage["passwordRef"] == next(
        e["valueFrom"]["secretKeyRef"] for e in containers["redis"]["env"]
        if e["name"] == "REDIS_PASSWORD")


def test_dockerfile_healthcheck_follows_the_port() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^ENV .*VMCP_PORT=4483", dockerfile, re.MULTILINE | re.DOTALL)
    healthcheck = dockerfile[dockerfile.index("\nHEALTHCHECK "):]
    healthcheck = healthcheck[:healthcheck.index("\n", healthcheck.index("CMD"))]
    assert "os.environ.get('VMCP_PORT', '4483')" in healthcheck
    assert 'CMD ["serve", "--config", "/etc/vmcp", "--host", "0.0.0.0"]' in dockerfile


def test_generated_documents_share_no_objects() -> None:
    """YAML anchors would appear if the two versions shared one schema object."""
    docs = crd_documents()
    ids: set[int] = set()

    def walk(node: Any) -> None:
        if isinstance(node, (dict, list)):
            assert id(node) not in ids
            ids.add(id(node))
            for child in node.values() if isinstance(node, dict) else node:
                walk(child)

    walk(docs)
    assert "&id" not in (CRDS / "crds.yaml").read_text(encoding="utf-8")
