"""stacks/registry/versions.yaml is the one manifest: the scripts, go.mod files and pyproject carry the same pins."""

import re

import pytest
import tomllib
from pathlib import Path

from stacks.registry.versions import versions

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


# ------------------------------------------------------------------ a bump of the manifest is an in-place update

# Inputs whose change replaces the resource instead of updating it (ForceNew in the provider schemas pulumi-aws
# wraps: terraform-provider-aws internal/service/eks/addon.go addon_name, cluster_name; node_group.go cluster_name,
# node_group_name). A bump must touch none of them.
FORCE_NEW = {"aws:eks/addon:Addon": {"addonName", "clusterName"}, "aws:eks/nodeGroup:NodeGroup": {"clusterName", "nodeGroupName"}}


def _run_with_manifest(monkeypatch, tmp_path, manifest: dict, config: dict, eks_clusters: dict | None = None):
    import yaml

    from harness import run_program
    from stacks.registry import versions as v

    path = tmp_path / f"versions-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    try:
        monkeypatch.setattr(v, "MANIFEST", path)
        v.versions.cache_clear()
        return {r.urn: r for r in run_program(config, {"hfToken": "hf_x"}, stack="bump", eks_clusters=eks_clusters).resources}
    finally:
        monkeypatch.undo()
        v.versions.cache_clear()


def _allow(manifest: dict, version: str, pins: dict) -> dict:
    """``manifest`` with Kubernetes ``version`` allowed and its add-ons pinned (a future bump of the manifest)."""
    eks = manifest["eks"]
    eks["kubernetesVersions"] = sorted(set(eks["kubernetesVersions"]) | {version}, key=lambda x: int(x.split(".")[1]))
    (eks.get("refusedKubernetesVersions") or {}).pop(version, None)
    eks["addons"][version] = pins
    eks["amiReleaseVersions"][version] = f"{version}.0-20260714"  # a bump pins the AMI release of the new version too
    return manifest


def test_a_version_bump_previews_as_in_place_updates(monkeypatch, tmp_path):
    """Platform chart, add-on pins and the EKS version move together; every resource keeps its URN and only the
    version inputs change, none of them one that replaces its resource."""
    import copy

    base = copy.deepcopy(versions())
    bumped = copy.deepcopy(base)
    bumped["charts"]["dynamo-platform"]["version"] = "1.5.1"
    _allow(bumped, "1.36", {**base["eks"]["addons"]["1.35"], "kube-proxy": "v1.36.0-eksbuild.1", "coredns": "v1.13.2-eksbuild.9"})
    cfg = {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks", "kubernetesVersion": "1.35"}}
    before = _run_with_manifest(monkeypatch, tmp_path, base, cfg)
    # the cluster runs 1.35 (EKS answers the program's lookup): one minor step
    after = _run_with_manifest(
        monkeypatch,
        tmp_path,
        bumped,
        {**cfg, "cluster": {**cfg["cluster"], "kubernetesVersion": "1.36"}},
        eks_clusters={"dynamo-bump": "1.35"},
    )
    assert sorted(before) == sorted(after)  # no resource created, deleted or renamed
    changed = {}
    for urn, r in after.items():
        keys = {k for k in set(r.inputs) | set(before[urn].inputs) if r.inputs.get(k) != before[urn].inputs.get(k)}
        if keys:
            changed[(r.type, r.name)] = keys
            assert not keys & FORCE_NEW.get(r.type, set()), (r.name, keys)
    assert changed == {
        ("aws:eks/cluster:Cluster", "cluster-eks"): {"version"},
        # the node groups follow the control plane in the same `up` (UpdateNodegroupVersion, in place)
        # (UpdateNodegroupVersion, in place) onto the new version's pinned AMI release
        ("aws:eks/nodeGroup:NodeGroup", "cluster-system"): {"version", "releaseVersion"},
        ("aws:eks/nodeGroup:NodeGroup", "cluster-gpu"): {"version", "releaseVersion"},
        ("aws:eks/addon:Addon", "cluster-kube-proxy"): {"addonVersion"},
        ("aws:eks/addon:Addon", "cluster-coredns"): {"addonVersion"},
        ("kubernetes:helm.sh/v3:Release", "dynamo-platform-release"): {"version"},
        # the Pod Security admission labels name the cluster's minor: an in-place label update
        ("kubernetes:core/v1:Namespace", "serving-dynamo-namespace"): {"metadata"},
        ("kubernetes:core/v1:Namespace", "dynamo-platform-namespace"): {"metadata"},
    }, changed
    for name in ("serving-dynamo-namespace", "dynamo-platform-namespace"):
        ns_urn = next(u for u, r in after.items() if (r.type, r.name) == ("kubernetes:core/v1:Namespace", name))
        labels = (before[ns_urn].inputs["metadata"].get("labels") or {}, after[ns_urn].inputs["metadata"].get("labels") or {})
        moved = {k for k in set(labels[0]) | set(labels[1]) if labels[0].get(k) != labels[1].get(k)}
        assert moved and all(k.startswith("pod-security.kubernetes.io/") and k.endswith("-version") for k in moved), moved
        assert {labels[1][k] for k in moved} == {"v1.36"}, labels[1]
    assert after[next(u for u in after if u.endswith("::cluster-kube-proxy"))].inputs["addonVersion"] == "v1.36.0-eksbuild.1"


def test_a_version_skip_in_the_manifest_is_refused(monkeypatch, tmp_path):
    """A manifest whose default jumps two minors refuses a cluster that runs the old default, before any resource."""
    import copy

    import harness

    bumped = _allow(
        copy.deepcopy(versions()), "1.36", dict(versions()["eks"]["addons"]["1.35"], **{"kube-proxy": "v1.36.0-eksbuild.1"})
    )
    bumped["eks"]["kubernetesVersion"] = "1.36"
    with pytest.raises(Exception, match=r"'1\.36' is 2 minor versions ahead of the cluster's '1\.34'"):
        _run_with_manifest(
            monkeypatch, tmp_path, bumped, {"gpu": "h100", "cluster": {"mode": "eks", "currentKubernetesVersion": "1.34"}}
        )
    assert harness.LAST_RUN.resources == []


def test_a_default_that_jumps_the_running_cluster_two_minors_is_refused_without_any_setting(monkeypatch, tmp_path):
    """The stack sets no version at all: the manifest's default moved 1.35 -> 1.37 while the cluster runs 1.35. The
    program reads the running version from EKS and refuses before any AWS resource, naming the steps."""
    import copy

    import harness

    bumped = copy.deepcopy(versions())
    for v in ("1.36", "1.37"):
        _allow(bumped, v, dict(bumped["eks"]["addons"]["1.35"], **{"kube-proxy": f"v{v}.0-eksbuild.1"}))
    bumped["eks"]["kubernetesVersion"] = "1.37"
    with pytest.raises(Exception) as e:
        _run_with_manifest(
            monkeypatch, tmp_path, bumped, {"gpu": "h100", "cluster": {"mode": "eks"}}, eks_clusters={"dynamo-bump": "1.35"}
        )
    assert "'1.37' is 2 minor versions ahead of '1.35', the version EKS cluster 'dynamo-bump' runs" in str(e.value)
    assert (
        'set dynamo:cluster.kubernetesVersion: "1.36", run `pulumi up`; then set dynamo:cluster.kubernetesVersion: "1.37"'
        in str(e.value)
    )
    assert [r.type for r in harness.LAST_RUN.resources] == ["pulumi:providers:aws"]


# ------------------------------------------------------------------ every add-on pinned for every allowed version

ADDON = "aws:eks/addon:Addon"


@pytest.mark.parametrize("cache", ["efs", "fsx-lustre"])
def test_every_addon_the_plan_installs_is_pinned_for_every_allowed_version(cache):
    """For every Kubernetes version a stack may choose, every add-on the program installs carries the version pinned
    in versions.yaml eks.addons, or is listed in eks.unpinnedAddons with a stated reason (then no addonVersion)."""
    from harness import run_program

    eks = versions()["eks"]
    unpinned = eks.get("unpinnedAddons") or {}
    assert all(isinstance(r, str) and len(r) > 40 for r in unpinned.values()), unpinned
    assert set(eks["kubernetesVersions"]) <= set(eks["addons"]), "an allowed version has no add-on pins"
    assert not set(eks["kubernetesVersions"]) & set(eks.get("refusedKubernetesVersions") or {})
    for k8s in eks["kubernetesVersions"]:
        run = run_program(
            {"gpu": "h100", "cluster": {"mode": "eks", "kubernetesVersion": k8s, "cacheStorage": cache}},
            {"hfToken": "hf_x"},
            stack=f"pins-{cache}",
        )
        addons = {r.inputs["addonName"]: r.inputs.get("addonVersion") for r in run.by_type(ADDON)}
        assert {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"} <= set(addons), addons
        for name, rendered in addons.items():
            if name in unpinned:
                assert rendered is None, (k8s, name, rendered)
            else:
                assert name in eks["addons"][k8s], f"{name} has no pin for Kubernetes {k8s}"
                assert rendered == eks["addons"][k8s][name], (k8s, name, rendered)
        # kube-proxy follows the control plane's minor version (EKS user guide, managing-kube-proxy)
        assert addons["kube-proxy"].startswith(f"v{k8s}."), addons["kube-proxy"]


def test_an_addon_without_a_pin_is_refused_before_any_resource(monkeypatch, tmp_path):
    import copy

    import harness

    bumped = copy.deepcopy(versions())
    del bumped["eks"]["addons"]["1.35"]["vpc-cni"]
    with pytest.raises(
        Exception, match=r"dynamo:cluster\.kubernetesVersion: '1\.35' has no pinned EKS add-on version for vpc-cni"
    ):
        _run_with_manifest(
            monkeypatch, tmp_path, bumped, {"gpu": "h100", "cluster": {"mode": "eks", "kubernetesVersion": "1.35"}}
        )
    assert harness.LAST_RUN.resources == []


def test_a_version_without_confirmed_pins_is_refused_with_the_reason():
    from harness import run_program

    import harness

    refused = versions()["eks"]["refusedKubernetesVersions"]
    assert "1.36" in refused
    with pytest.raises(Exception) as e:
        run_program({"gpu": "h100", "cluster": {"mode": "eks", "kubernetesVersion": "1.36"}}, {"hfToken": "hf_x"}, stack="t")
    assert f"dynamo:cluster.kubernetesVersion: '1.36' is refused: {refused['1.36']}; choose one of: 1.34, 1.35" in str(e.value)
    assert harness.LAST_RUN.resources == []


def test_every_allowed_kubernetes_version_has_one_ami_release_of_its_own():
    """versions.yaml eks.amiReleaseVersions names one AMI release per version a stack may pin, each of that version
    (awslabs/amazon-eks-ami CHANGELOG.md writes <minor>.<patch>-<date>), all of one release date (the node groups and the
    Karpenter alias al2023@v<date> run one release)."""
    import re

    eks = versions()["eks"]
    releases = {str(k): str(v) for k, v in eks["amiReleaseVersions"].items()}
    assert set(releases) == {str(v) for v in eks["kubernetesVersions"]}
    dates = set()
    for k8s, rel in releases.items():
        m = re.fullmatch(r"(1\.\d+)\.\d+-(\d{8})", rel)
        assert m and m[1] == k8s, (k8s, rel)
        dates.add(m[2])
    assert len(dates) == 1, dates
