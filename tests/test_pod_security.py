"""Pod Security admission labels on the namespaces the program creates (stacks.serving.pod_security_labels,
stacks.program.pod_security): a serving namespace enforces the least strict Pod Security Standards level that admits
every pod the plan puts there, and warns and audits at ``restricted``.

The oracle is the API server's own Pod Security admission: the engine test creates namespaces with the program's
labels on a real kube-apiserver (PodSecurity admission is on by default) and server-side dry-run creates a Pod from
each rendered worker, frontend and Job pod spec: admitted at the level the plan computed, refused at the next stricter
one. So a pod spec the program's checks misjudge, or a level stricter or looser than the pods need, fails there."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from local_cluster import control_plane
from stacks import catalog
from stacks.program import build_program, pod_security_version
from stacks.registry.charts import PLATFORM_NAMESPACE
from stacks.serving import (
    PSS_LEVELS,
    PSS_PREFIX,
    least_strict,
    plan_pods,
    pod_security_labels,
    pod_security_level,
    pod_security_violations,
)

SECRETS = frozenset({"hfToken"})
ENFORCE, WARN, AUDIT = (PSS_PREFIX + m for m in ("enforce", "warn", "audit"))
BASELINE_ONLY = "ultra-vllm-agg-b200-agentic-256K-kv-router"  # worker runs as root, adds no capability: baseline
PRIVILEGED = "ultra-vllm-disagg-b200-agentic-256K"  # same checkpoint; its workers add IPC_LOCK and SYS_RESOURCE


def _program(raw: dict):
    return build_program(raw, "t", SECRETS)


def _namespaces(program) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in program.objects() if o["kind"] == "Namespace"}


def _pods(program) -> list[tuple[str, dict, dict]]:
    out = [p for e in program.entries for p in plan_pods(e.plan)]
    if program.benchmark is not None:
        t = program.benchmark.job["spec"]["template"]
        out.append((program.benchmark.job_name, t["spec"], (t.get("metadata") or {}).get("annotations") or {}))
    return out


def _adds_beyond_baseline(spec: dict) -> bool:
    from stacks.serving import BASELINE_CAPABILITIES

    return any(
        set(((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        for c in spec.get("containers") or []
    )


# --------------------------------------------------------------------------- the levels, from the plan's pod specs


def test_every_catalog_target_enforces_the_least_strict_level_its_pods_fit():
    seen = set()
    for tid in sorted(catalog.targets()):
        program = _program({"target": tid})
        labels = program.serving.namespace["metadata"]["labels"]
        pods = _pods(program)
        assert labels[ENFORCE] == least_strict(pod_security_level(s, a) for _, s, a in pods), tid
        assert labels[WARN] == labels[AUDIT] == "restricted", tid
        # The workers that add IPC_LOCK / SYS_RESOURCE / SYS_PTRACE (outside baseline's list) need privileged.
        assert (labels[ENFORCE] == "privileged") == any(_adds_beyond_baseline(s) for _, s, _ in pods), tid
        # The hardened download Jobs fit restricted (stacks/serving/hardening.py).
        assert all(
            pod_security_level(s, a) == "restricted" for _, s, a in pods[len(program.serving.dgd["spec"]["components"]) :]
        ), tid
        seen.add(labels[ENFORCE])
    assert seen == {"privileged", "baseline"}, "the catalog has both kinds of namespace"


def test_the_level_follows_the_final_pod_specs_not_the_target():
    """The level is read from the pod specs as planned: a worker changed to add IPC_LOCK, then planned again,
    makes the namespace privileged; dropped again, baseline."""
    from stacks.program import pod_security

    program = _program({"target": BASELINE_ONLY})
    assert program.serving.namespace["metadata"]["labels"][ENFORCE] == "baseline"
    worker = next(c for c in program.serving.dgd["spec"]["components"] if c["name"] == "worker")
    sc = worker["podTemplate"]["spec"]["containers"][0].setdefault("securityContext", {})
    sc["capabilities"] = {"add": ["IPC_LOCK"]}
    assert pod_security(program).serving.namespace["metadata"]["labels"][ENFORCE] == "privileged"
    del sc["capabilities"]
    assert pod_security(program).serving.namespace["metadata"]["labels"][ENFORCE] == "baseline"


def test_entries_sharing_a_namespace_enforce_the_union_on_the_namespace_owner():
    for order in ((BASELINE_ONLY, PRIVILEGED), (PRIVILEGED, BASELINE_ONLY)):
        program = _program({"namespace": "team", "serve": [{"target": t} for t in order]})
        owner, other = program.entries
        assert owner.owns_namespace and not other.owns_namespace and other.plan.namespace is None
        assert _namespaces(program)["team"][ENFORCE] == "privileged", order
    # Apart, each keeps its own level.
    program = _program({"serve": [{"target": BASELINE_ONLY, "namespace": "a"}, {"target": PRIVILEGED, "namespace": "b"}]})
    got = _namespaces(program)
    assert (got["a"][ENFORCE], got["b"][ENFORCE]) == ("baseline", "privileged")
    # Two baseline entries in one namespace stay baseline.
    program = _program(
        {"namespace": "team", "serve": [{"target": BASELINE_ONLY}, {"target": "ultra-vllm-agg-b200-agentic-1M-kv-router"}]}
    )
    assert _namespaces(program)["team"][ENFORCE] == "baseline"


def test_least_strict_is_the_union_of_levels():
    assert least_strict(["restricted", "baseline", "restricted"]) == "baseline"
    assert least_strict(["baseline", "privileged"]) == "privileged"
    assert least_strict([]) == "restricted"  # no pod: the strictest level admits all of none


def test_labels_warn_and_audit_at_restricted_with_one_version():
    assert pod_security_labels("baseline", "v1.35") == {
        ENFORCE: "baseline",
        ENFORCE + "-version": "v1.35",
        WARN: "restricted",
        WARN + "-version": "v1.35",
        AUDIT: "restricted",
        AUDIT + "-version": "v1.35",
    }
    assert pod_security_labels(None) == {
        WARN: "restricted",
        WARN + "-version": "latest",
        AUDIT: "restricted",
        AUDIT + "-version": "latest",
    }


def test_the_version_is_the_eks_minor_when_the_plan_knows_it_else_latest():
    eks = _program({"target": BASELINE_ONLY, "cluster": {"mode": "eks", "region": "us-east-1"}})
    minor = f"v{eks.cluster.kubernetes_version}"
    assert pod_security_version(eks.cluster) == minor
    for ns, labels in _namespaces(eks).items():
        versions = {v for k, v in labels.items() if k.startswith(PSS_PREFIX) and k.endswith("-version")}
        assert versions == {minor}, ns  # the Dynamo platform's namespace (a layer) too
    for mode in ({"mode": "render"}, {"mode": "kubeconfig"}):
        labels = _namespaces(_program({"target": BASELINE_ONLY, "cluster": mode}))["dynamo"]
        assert labels[ENFORCE + "-version"] == labels[WARN + "-version"] == labels[AUDIT + "-version"] == "latest"


def test_benchmark_job_counts_and_fits_restricted():
    program = _program({"target": BASELINE_ONLY, "benchmark": {"enabled": True}})
    _, spec, ann = _pods(program)[-1]
    assert pod_security_level(spec, ann) == "restricted"
    assert _namespaces(program)["dynamo"][ENFORCE] == "baseline"


def test_observability_and_front_door_namespaces():
    program = _program(
        {
            "target": BASELINE_ONLY,
            "cluster": {"mode": "kubeconfig"},
            "observability": {"enabled": True},
            "frontDoor": {"enabled": True},
        }
    )
    ns = _namespaces(program)
    obs = program.observability.namespace
    # kube-prometheus-stack's node exporter (host network, PID and paths) and dcgm-exporter need privileged.
    assert ns[obs][ENFORCE] == "privileged" and ns[obs][WARN] == ns[obs][AUDIT] == "restricted"
    door = [n for n, labels in ns.items() if labels.get("app.kubernetes.io/part-of") == "dynamo-front-door"]
    assert door and ENFORCE not in ns[door[0]] and ns[door[0]][WARN] == ns[door[0]][AUDIT] == "restricted"
    # No chart there: only ConfigMaps and monitors, restricted.
    program = _program(
        {
            "target": BASELINE_ONLY,
            "cluster": {"mode": "kubeconfig"},
            "observability": {
                "enabled": True,
                "prometheus": "existing",
                "dcgm": "none",
                "prometheusEndpoint": "http://prom.example:9090",
            },
        }
    )
    obs = program.observability.namespace
    if obs in _namespaces(program):
        assert _namespaces(program)[obs][ENFORCE] == "restricted"


@pytest.mark.parametrize(
    "field,level",
    [
        ({"hostNetwork": True}, "privileged"),
        ({"hostPID": True}, "privileged"),
        ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, "privileged"),
        ({"containers": [{"name": "c", "securityContext": {"privileged": True}}]}, "privileged"),
        ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}]}, "privileged"),
        ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["CHOWN"]}}}]}, "baseline"),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}, "privileged"),
        ({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}, "privileged"),
        ({"containers": [{"name": "c"}]}, "baseline"),
    ],
)
def test_single_controls(field, level):
    spec = {"containers": [{"name": "c"}], **field}
    assert pod_security_level(spec) == level, pod_security_violations(spec, "baseline")


def test_a_hardened_pod_is_restricted_and_each_missing_control_drops_it():
    spec = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }
    assert pod_security_level(spec) == "restricted"
    for path, value in (
        (("securityContext", "runAsNonRoot"), None),
        (("securityContext", "seccompProfile"), None),
        (("containers", 0, "securityContext", "allowPrivilegeEscalation"), None),
        (("containers", 0, "securityContext", "capabilities"), None),
        (("containers", 0, "securityContext", "runAsUser"), 0),
        (("securityContext", "runAsNonRoot"), False),
    ):
        s = copy.deepcopy(spec)
        d = s
        for k in path[:-1]:
            d = d[k]
        if value is None:
            del d[path[-1]]
        else:
            d[path[-1]] = value
        assert pod_security_level(s) == "baseline", path


# --------------------------------------------------------------------------- the API server's Pod Security admission


def _shape(tid: str) -> str:
    """What of a target's pods Pod Security looks at: every securityContext, host field, port and volume kind."""
    program = _program({"target": tid})
    keys = []
    for _, spec, ann in _pods(program):
        keys.append(
            {
                "pod": {k: spec.get(k) for k in ("securityContext", "hostNetwork", "hostPID", "hostIPC")},
                "containers": [
                    (c.get("securityContext"), [p.get("hostPort") for p in c.get("ports") or []])
                    for c in spec.get("containers", []) + spec.get("initContainers", [])
                ],
                "volumes": sorted(k for v in spec.get("volumes") or [] for k in v if k != "name"),
                "ann": ann,
            }
        )
    return json.dumps(keys, sort_keys=True, default=str)


def representative_targets() -> list[str]:
    """One catalog target per distinct pod security shape (the whole catalog has a handful)."""
    shapes: dict[str, str] = {}
    for tid in sorted(catalog.targets()):
        shapes.setdefault(_shape(tid), tid)
    return list(shapes.values())


def _pod(name: str, ns: str, spec: dict, annotations: dict) -> dict:
    """A Pod as the operator (or the Job controller) makes it from the template: the operator adds a /dev/shm
    emptyDir to every component (its documented default), which no level forbids."""
    spec = copy.deepcopy(spec)
    vols = spec.setdefault("volumes", [])
    if not any(v.get("name") == "shared-memory" for v in vols):
        vols.append({"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name.lower()[:60].rstrip("-"), "namespace": ns, "annotations": annotations},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    if not shutil.which("kubectl"):
        from conftest import missing

        missing("kubectl not on PATH", "run `make test` (it builds the pinned toolchain) or tools/toolchain.sh")
    from stacks.cli.simulate import Simulator

    state = tmp_path_factory.mktemp("kube-pss")
    with control_plane(state, apiserver_only=True, crds=False, timeout=300):
        sim = Simulator(state / "kubeconfig")
        try:
            yield sim
        finally:
            sim.close()


def _namespace(sim, name: str, labels: dict) -> None:
    sim.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    sim.request(
        "POST",
        f"/api/v1/namespaces/{name}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )


def _runtime_classes(sim, names: set[str]) -> None:
    """The RuntimeClasses the pods name (``nvidia``), so the RuntimeClass admission plugin lets them through to Pod
    Security; it reads from an informer, so wait until a dry-run pod naming each is admitted."""
    import time

    from stacks.cli.simulate import KubeError

    for n in sorted(names):
        sim.request(
            "POST",
            "/apis/node.k8s.io/v1/runtimeclasses",
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": n}, "handler": n},
        )
        probe = _pod(
            "probe",
            "pss-privileged",
            {"runtimeClassName": n, "containers": [{"name": "c", "image": "registry.invalid/none:0"}]},
            {},
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                sim.request("POST", "/api/v1/namespaces/pss-privileged/pods?dryRun=All", probe)
                break
            except KubeError as e:
                if "RuntimeClass" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _admitted(sim, pod: dict) -> str | None:
    """None when the API server admits the Pod (server-side dry run), else its refusal."""
    from stacks.cli.simulate import KubeError

    try:
        sim.request("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods?dryRun=All", pod)
        return None
    except KubeError as e:
        assert e.status == 403 and "violates PodSecurity" in str(e), str(e)
        return str(e)


@pytest.mark.engine
def test_api_server_admits_each_pod_at_the_computed_level_and_refuses_it_one_stricter(apiserver):
    sim = apiserver
    for level in PSS_LEVELS:  # one namespace per level, enforce only
        _namespace(sim, f"pss-{level}", {PSS_PREFIX + "enforce": level, PSS_PREFIX + "enforce-version": "latest"})
    sample = representative_targets()
    _runtime_classes(sim, {s.get("runtimeClassName") for t in sample for _, s, _ in _pods(_program({"target": t}))} - {None})
    assert BASELINE_ONLY in sample or any(
        _program({"target": t}).serving.namespace["metadata"]["labels"][ENFORCE] == "baseline" for t in sample
    )
    for i, tid in enumerate(sample):
        program = _program({"target": tid, "cluster": {"mode": "kubeconfig"}, "benchmark": {"enabled": True}})
        ns = f"pss-t{i}"
        labels = program.serving.namespace["metadata"]["labels"]
        _namespace(sim, ns, labels)
        ns_level = labels[ENFORCE]
        refused_one_stricter = False
        for name, spec, ann in _pods(program):
            own = pod_security_level(spec, ann)
            # The namespace with the program's labels admits every pod of the plan.
            assert _admitted(sim, _pod(name, ns, spec, ann)) is None, (tid, name)
            # The pod's own level admits it; the next stricter one refuses it (so the level is exactly what it needs).
            assert _admitted(sim, _pod(name, f"pss-{own}", spec, ann)) is None, (tid, name, own)
            if own != "restricted":
                stricter = PSS_LEVELS[PSS_LEVELS.index(own) + 1]
                assert _admitted(sim, _pod(name, f"pss-{stricter}", spec, ann)) is not None, (tid, name, stricter)
                refused_one_stricter |= own == ns_level
        # One stricter than the namespace's level refuses at least one of its pods: the level is the least it can be.
        assert refused_one_stricter or ns_level == "restricted", (tid, ns_level)


def test_platform_namespace_enforces_a_level_the_operators_pod_fits():
    """dynamo-system, which the platform layer creates, enforces the strictest level the operator's pod fits, as the
    dynamo-operator chart's values configure its manager container (the reference values file, not the program's
    constants), and warns and audits at restricted."""
    import yaml

    from conftest import reference_file

    values = yaml.safe_load(reference_file("platform/dynamo-operator-values.yaml").read_text())
    manager = values["controllerManager"]["manager"]
    pod = {"containers": [{"name": "manager", "securityContext": manager["containerSecurityContext"]}]}
    level = pod_security_level(pod)
    program = _program({"target": BASELINE_ONLY, "cluster": {"mode": "eks", "region": "us-east-1"}})
    labels = _namespaces(program)[PLATFORM_NAMESPACE]
    assert labels[ENFORCE] == level == "baseline", pod_security_violations(pod, "restricted")
    assert labels[WARN] == labels[AUDIT] == "restricted"
