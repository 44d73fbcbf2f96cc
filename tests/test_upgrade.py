"""Upgrading Dynamo on the real engine: a stack brought up by the 1.5-era program (dynamo-platform 1.5.0, the Ultra
Refresh id ``ultra-vllm-agg-b200-agentic-256k-2w-kv``) is updated by today's program (dynamo-platform 1.6.0, the
renamed target ``ultra-vllm-agg-b200-agentic-256K-kv-router``).

The 1.5-era program is today's with the Nemotron-3-Ultra catalog module as it was before the rename
(tests/fixtures/catalog-1.5/ultra.py.txt, this project's own stacks/catalog/ultra.py at 794ed2c, whose renders were
exact against ../shared/reference/dynamo-recipes: checked below) and the platform chart pinned at 1.5.0. A local Helm
repository (no network here) serves one-ConfigMap stand-ins for dynamo-platform 1.5.0 and 1.6.0.

Expected, and asserted step by step on the preview: the Helm release is upgraded in place (same URN, same object);
the DynamoGraphDeployment (with its graph component) is replaced, because its name changes upstream (``ultra-agg-b200-256k-2w-kv`` ->
``ultra-agg-b200-256k-kv-router``, and ``VllmWorker`` -> ``worker``: a Kubernetes object cannot be renamed, and the
operator makes one DynamoComponentDeployment per component name); nothing else changes: the model-cache claim, the
download Jobs, the namespace and the HF Secret stay as they are (the cache is kept). The old id still works with the
new program and the preview warns with the new names; setting the new id then changes nothing.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

import lazy_results  # noqa: F401  (the Automation API's results, fetched when read)
from local_cluster import chart_repo, control_plane
from stacks import catalog
from stacks.cli import fidelity
from stacks.registry import yaml_text
from test_engine import new_stack, set_config

ROOT = Path(__file__).resolve().parent.parent
OLD_ULTRA = ROOT / "tests" / "fixtures" / "catalog-1.5" / "ultra.py.txt"
OLD_ID = "ultra-vllm-agg-b200-agentic-256k-2w-kv"
NEW_ID = catalog.renamed()[OLD_ID]
PLATFORM_15, PLATFORM_16 = "1.5.0", "1.6.0"

pytestmark = pytest.mark.needs_reference


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    """This module's own local control plane (started and stopped here)."""
    for tool in ("pulumi", "kubectl"):
        if not shutil.which(tool):
            from conftest import need_tool

            need_tool(tool)
    state = tmp_path_factory.mktemp("kube-upgrade")
    with control_plane(state, quiet=False):
        yield {"kubeconfig": str(state / "kubeconfig")}


def kubectl(kube, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", "--kubeconfig", kube["kubeconfig"], *args], capture_output=True, text=True)


class Program:
    """A copy of the project whose Ultra catalog module and platform pin can be set to either era."""

    def __init__(self, work: Path, repo_url: str):
        self.work, self.repo_url = work, repo_url
        for name in ("Pulumi.yaml", "__main__.py", "pyproject.toml"):
            shutil.copy(ROOT / name, work / name)
        for d in ("components", "stacks"):
            shutil.copytree(ROOT / d, work / d, ignore=shutil.ignore_patterns("__pycache__"))
        (work / ".venv").symlink_to(ROOT / ".venv")

    def era(self, ultra: Path, platform: str) -> None:
        shutil.copy(ultra, self.work / "stacks" / "catalog" / "ultra.py")
        manifest = self.work / "stacks" / "registry" / "versions.yaml"
        m = yaml_text.load(manifest.read_text())
        m["charts"]["dynamo-platform"] = {**m["charts"]["dynamo-platform"], "repo": self.repo_url, "version": platform}
        manifest.write_text(yaml.safe_dump(m))


def test_the_1_5_era_catalog_module_renders_the_frozen_files_of_the_renamed_targets():
    """The fixture is the 1.5-era program: each Refresh target upstream renamed renders its frozen file exactly."""
    import importlib.machinery
    import importlib.util

    from stacks.catalog.ops import apply_all

    loader = importlib.machinery.SourceFileLoader("stacks.catalog._ultra_1_5", str(OLD_ULTRA))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    old = {t.id: t for t in mod.FAMILY.targets}
    ref = fidelity.recipes_dir()
    assert set(catalog.renamed()) <= set(old)
    for tid in catalog.renamed():
        t = old[tid]
        assert t.upstream in fidelity.renamed_paths()
        diffs = fidelity.compare_file(
            fidelity.load_docs(ref / t.upstream),
            apply_all(mod.FAMILY.builders[t.family](t), t.ops),
            storage_class=None,
            pull_secrets=(),
        )
        assert diffs == [], (tid, diffs)


def _steps(stack, **kw) -> tuple[dict[tuple[str, str], str], str]:
    """(type, name) -> op of every resource the preview plans, and the diagnostics it printed."""
    steps: dict[tuple[str, str], str] = {}
    out: list[str] = []

    def on_event(e):
        pre = getattr(e, "resource_pre_event", None)
        if pre is not None:
            urn = pre.metadata.urn
            steps[(urn.split("::")[2].split("$")[-1], urn.split("::")[-1])] = str(
                pre.metadata.op.value if hasattr(pre.metadata.op, "value") else pre.metadata.op
            )
        diag = getattr(e, "diagnostic_event", None)
        if diag is not None:
            out.append(f"{diag.severity}: {diag.message}")

    stack.preview(on_output=None, on_event=on_event, **kw)
    return steps, "\n".join(out)


@pytest.mark.engine
def test_upgrade_from_the_1_5_pins_and_an_old_ultra_id_to_1_6(kube, tmp_path):
    from pulumi import automation as auto

    (tmp_path / "repo").mkdir()
    repo = chart_repo(tmp_path / "repo", "dynamo-platform", [PLATFORM_15, PLATFORM_16])
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "project").mkdir()
    program = Program(tmp_path / "project", f"http://127.0.0.1:{server.server_address[1]}")
    program.era(OLD_ULTRA, PLATFORM_15)

    ns = "e-upgrade"
    env = {
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "DYNAMO_REFERENCE": str(fidelity.reference_root()),
    }
    (tmp_path / "state").mkdir()
    stack = new_stack(program.work, ns, env)
    config = {
        "target": OLD_ID,
        "namespace": ns,
        "wait": {"enabled": False},
        "cluster": {"mode": "kubeconfig", "kubeconfigPath": kube["kubeconfig"], "installPlatform": True},
    }
    set_config(stack, config, secrets={"hfToken": "hf_UPGRADE_CANARY"})
    try:
        # --- the 1.5-era stack
        assert stack.up(on_output=None).summary.result == "succeeded"
        old_dgd = json.loads(
            kubectl(kube, "get", "dynamographdeployments.nvidia.com", "ultra-agg-b200-256k-2w-kv", "-n", ns, "-o", "json").stdout
        )
        assert [c["name"] for c in old_dgd["spec"]["components"]] == ["Frontend", "VllmWorker"]
        pvc = json.loads(
            kubectl(kube, "get", "pvc", catalog.cache_claim(catalog.targets()[NEW_ID]), "-n", ns, "-o", "json").stdout
        )
        pin = json.loads(kubectl(kube, "get", "configmap", "dynamo-platform-pin", "-n", "dynamo-system", "-o", "json").stdout)
        assert pin["data"]["chartVersion"] == PLATFORM_15
        before = {r["urn"]: r for r in stack.export_stack().deployment["resources"]}

        # --- today's program, the stack file unchanged (old id): it resolves to the renamed target, with a warning
        program.era(ROOT / "stacks" / "catalog" / "ultra.py", PLATFORM_16)
        steps, diagnostics = _steps(stack)
        changed = {k: op for k, op in steps.items() if op != "same"}
        # The DGD's graph component is named by the namespace and the DGD (stacks/program/names.py), so the new DGD
        # comes with its own graph component; no other Kubernetes object changes.
        old_graph, new_graph = (
            f"serving-{ns}-graph-ultra-agg-b200-256k-2w-kv",
            f"serving-{ns}-graph-ultra-agg-b200-256k-kv-router",
        )
        assert changed == {
            ("kubernetes:helm.sh/v3:Release", "dynamo-platform-release"): "update",
            ("dynamo:serving:DynamoGraph", new_graph): "create",
            ("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment", f"{new_graph}-ultra-agg-b200-256k-kv-router"): "create",
            ("dynamo:serving:DynamoGraph", old_graph): "delete",
            ("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment", f"{old_graph}-ultra-agg-b200-256k-2w-kv"): "delete",
        }, changed
        assert ("kubernetes:core/v1:PersistentVolumeClaim", f"serving-{ns}-model-cache") in steps and steps[
            ("kubernetes:core/v1:PersistentVolumeClaim", f"serving-{ns}-model-cache")
        ] == "same"
        assert (
            f"target '{OLD_ID}' was renamed upstream to '{NEW_ID}'" in diagnostics
            and "'ultra-agg-b200-256k-kv-router'" in diagnostics
        )

        # --- the stack file names the new id: the same plan, and no warning
        stack.set_config("dynamo:target", auto.ConfigValue(value=NEW_ID))
        steps2, diagnostics2 = _steps(stack)
        assert {k: op for k, op in steps2.items() if op != "same"} == changed and "renamed upstream" not in diagnostics2
        result = stack.up(on_output=None)
        assert result.summary.result == "succeeded"
        assert {k: v for k, v in result.summary.resource_changes.items() if k != "same"} == {
            "create": 2,
            "delete": 2,
            "update": 1,
        }

        # --- after: new DGD with the 1.6 component names, old one gone, cache claim and release kept (same objects)
        new_dgd = json.loads(
            kubectl(
                kube, "get", "dynamographdeployments.nvidia.com", "ultra-agg-b200-256k-kv-router", "-n", ns, "-o", "json"
            ).stdout
        )
        assert [c["name"] for c in new_dgd["spec"]["components"]] == ["Frontend", "worker"]
        assert kubectl(kube, "get", "dynamographdeployments.nvidia.com", "ultra-agg-b200-256k-2w-kv", "-n", ns).returncode != 0
        pvc_after = json.loads(kubectl(kube, "get", "pvc", pvc["metadata"]["name"], "-n", ns, "-o", "json").stdout)
        assert pvc_after["metadata"]["uid"] == pvc["metadata"]["uid"]
        pin_after = json.loads(
            kubectl(kube, "get", "configmap", "dynamo-platform-pin", "-n", "dynamo-system", "-o", "json").stdout
        )
        assert pin_after["data"]["chartVersion"] == PLATFORM_16 and pin_after["metadata"]["uid"] == pin["metadata"]["uid"]
        after = {r["urn"]: r for r in stack.export_stack().deployment["resources"]}
        release = next(u for u in before if u.endswith("::dynamo-platform-release"))
        assert after[release]["id"] == before[release]["id"] and after[release]["outputs"]["version"] == PLATFORM_16
        converged, _ = _steps(stack)
        assert converged and set(converged.values()) == {"same"}
    finally:
        stack.destroy(on_output=None, run_program=True)
        stack.workspace.remove_stack(stack.name, force=True)
        server.shutdown()
