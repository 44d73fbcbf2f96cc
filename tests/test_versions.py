"""stacks/versions.yaml is the one manifest: the scripts, go.mod files and pyproject carry the same pins."""
import re
import tomllib
from pathlib import Path

from stacks.versions import versions

ROOT = Path(__file__).resolve().parent.parent
TOOLS = versions()["toolchain"]


def _script_pin(path: str, var: str) -> str:
    m = re.search(rf'^{var}="?(?:\$\{{{var}:-)?([^"}}\s#]+)', (ROOT / path).read_text(), re.M)
    assert m, f"{var} not found in {path}"
    return m.group(1)


def _gomod(path: str, module: str) -> str:
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", (ROOT / path).read_text(), re.M)
    assert m, f"{module} not in {path}"
    return m.group(1)


def test_toolchain_scripts_match_the_manifest():
    assert _script_pin("tools/toolchain.sh", "PULUMI_VERSION") == TOOLS["pulumi"]
    assert _script_pin("tools/toolchain.sh", "K8S_PROVIDER_VERSION") == TOOLS["pulumi-kubernetes"]
    assert _script_pin("tools/actionlint.sh", "ACTIONLINT_VERSION") == TOOLS["actionlint"]
    assert _gomod("tools/kube/go.mod", "k8s.io/kubernetes") == TOOLS["kubernetes"]
    assert _gomod("tools/kube/etcd/go.mod", "go.etcd.io/etcd/server/v3") == TOOLS["etcd"]
    assert _gomod("tools/kube/kwok/go.mod", "sigs.k8s.io/kwok") == TOOLS["kwok"]
    assert _gomod("tools/pulumi/go.mod", "github.com/pulumi/pulumi/pkg/v3") == TOOLS["pulumi"]


def test_python_sdk_matches_the_provider_binary():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pulumi-kubernetes=={TOOLS['pulumi-kubernetes']}" in deps


def test_every_catalog_image_comes_from_the_manifest():
    from stacks import catalog

    known = set(versions()["images"].values())
    for t in catalog.targets().values():
        assert t.image in known, t.id


def test_kube_local_builds_every_pinned_kubernetes_binary():
    """kube-scheduler is built from the same k8s.io/kubernetes pin as kube-apiserver (one tool module)."""
    gomod = (ROOT / "tools/kube/go.mod").read_text()
    for cmd in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert f"k8s.io/kubernetes/cmd/{cmd}\n" in gomod, cmd
    script = (ROOT / "tools/kube-local.sh").read_text()
    assert "k8s.io/kubernetes/cmd/kube-scheduler" in script and "sigs.k8s.io/kwok/cmd/kwok" in script
