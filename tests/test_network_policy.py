"""Optional NetworkPolicies (dynamo:networkPolicy, stacks/serving/network_policy.py): off by default; when on, deny by default
and allow what Dynamo needs; their selectors pick the operator-exact pods (stacks.serving.operator.operator_pods) and the
Jobs' pods. The engine test creates them, the hardened Jobs and the pods on a real kube-apiserver (own control plane,
etcd + kube-apiserver only, as tests/test_selection.py) and lists pods through each policy's own selector."""
from __future__ import annotations

import shutil
from urllib.parse import quote

import pytest

from local_cluster import control_plane
from stacks import catalog
from stacks.serving.benchmark import build_benchmark
from stacks.spec.config import BenchmarkConfig, ConfigError, parse
from stacks.serving.network_policy import benchmark_job_name
from stacks.serving.operator import label_selector_string, operator_pods
from stacks.serving import build_plan

TARGETS = sorted(catalog.targets())
SAMPLE = ["lightning-vllm-agg-h100-dspark", "lightning-vllm-disagg-h100-dspark", "ultra-vllm-agg-b200-chat-256k-mtp",
          "motif3-vllm-disagg-b200-chat-generic-2p1d-kv", "ultra-vllm-disagg-gb200-agentic-1M"]
NP = {"enabled": True, "ingressNamespaces": ["gateway"], "monitoringNamespaces": ["monitoring"]}


def _plan(tid: str, ns: str = "dynamo", **extra):
    return build_plan(parse({"target": tid, "namespace": ns, "networkPolicy": NP, **extra}))


def _matches(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        if e["operator"] == "In" and labels.get(e["key"]) not in e["values"]:
            return False
    return True


def test_off_by_default():
    plan = build_plan(parse({"target": SAMPLE[0]}))
    assert plan.network_policies == [] and not [o for o in plan.objects() if o["kind"] == "NetworkPolicy"]


def test_bad_namespace_name_is_refused_with_the_key():
    with pytest.raises(ConfigError, match="networkPolicy") as e:
        parse({"target": SAMPLE[0], "networkPolicy": {"enabled": True, "ingressNamespaces": ["Bad_NS"]}})
    assert "Bad_NS" in str(e.value)


def test_benchmark_job_name_is_the_benchmark_jobs():
    plan = build_plan(parse({"target": SAMPLE[1]}))
    assert build_benchmark(plan, BenchmarkConfig.model_validate({"enabled": True})).job_name == benchmark_job_name(plan.dgd)


@pytest.mark.parametrize("tid", TARGETS)
def test_selectors_match_the_operator_exact_pods(tid):
    plan = _plan(tid)
    pols = {p["metadata"]["name"][len(plan.dgd["metadata"]["name"]) + 1:]: p for p in plan.network_policies}
    assert set(pols) == {"default-deny", "dns", "graph", "frontend-ingress", "monitoring", "jobs-egress"}
    assert pols["default-deny"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    pods = operator_pods(plan.dgd)
    # Every pod of the graph is in the graph policy (frontend <-> workers) and the monitoring one.
    for name in ("graph", "monitoring"):
        assert all(_matches(pols[name]["spec"]["podSelector"], p.labels) for p in pods), name
    fe = [p for p in pods if _matches(pols["frontend-ingress"]["spec"]["podSelector"], p.labels)]
    assert fe and {p.component_type for p in fe} == {"frontend"}
    assert len(fe) == len([p for p in pods if p.component_type == "frontend"])
    fe_ports = {x["port"] for r in pols["frontend-ingress"]["spec"]["ingress"] for x in r["ports"]}
    assert fe_ports == {port for p in fe for port in p.ports.values()} == {8000}
    # The workers' ports (system, NIXL) are not open to other namespaces except monitoring.
    worker_ports = {port for p in pods if p.component_type != "frontend" for port in p.ports.values()}
    assert not worker_ports & fe_ports
    assert worker_ports <= {x["port"] for r in pols["monitoring"]["spec"]["ingress"] for x in r["ports"]}
    ns_from = pols["frontend-ingress"]["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert ns_from == ["dynamo", "gateway"]
    # Platform: NATS and etcd in dynamo-system.
    platform = [r for r in pols["graph"]["spec"]["egress"] if r.get("to") and "namespaceSelector" in r["to"][0]]
    assert platform[0]["to"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "dynamo-system"}
    assert {x["port"] for x in platform[0]["ports"]} == {4222, 2379}
    # The download Jobs' pods (the Job controller's job-name label) get HTTPS egress; the graph's pods are not Jobs.
    jobs = pols["jobs-egress"]["spec"]["podSelector"]
    for j in plan.jobs:
        assert _matches(jobs, {"batch.kubernetes.io/job-name": j["metadata"]["name"]})
    assert not any(_matches(jobs, p.labels) for p in pods)


def test_benchmark_job_is_allowed_to_reach_the_frontend():
    plan = _plan(SAMPLE[1], benchmark={"enabled": True})
    jobs = next(p for p in plan.network_policies if p["metadata"]["name"].endswith("-jobs-egress"))
    assert benchmark_job_name(plan.dgd) in jobs["spec"]["podSelector"]["matchExpressions"][0]["values"]


# --------------------------------------------------------------------------- a real API server

@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    if not shutil.which("kubectl"):
        from conftest import missing

        missing("kubectl not on PATH", "run `make test` (it builds the pinned toolchain) or tools/toolchain.sh")
    from stacks.cli.simulate import Simulator

    state = tmp_path_factory.mktemp("kube-netpol")
    with control_plane(state, apiserver_only=True, crds=False, timeout=300):
        sim = Simulator(state / "kubeconfig")
        try:
            yield sim
        finally:
            sim.close()


def _pod(name: str, ns: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"automountServiceAccountToken": False, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "registry.invalid/none:0"}]}}


@pytest.mark.engine
def test_api_server_admits_the_policies_and_their_selectors_list_the_right_pods(apiserver):
    sim = apiserver
    for i, tid in enumerate(SAMPLE):
        ns = f"np{i}"
        plan = _plan(tid, ns, benchmark={"enabled": True})
        sim.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        sim.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        for pol in plan.network_policies:
            got = sim.request("POST", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", pol)
            assert got["spec"]["podSelector"] == pol["spec"]["podSelector"], "admitted unchanged"
        # The hardened Jobs are admitted as they are (securityContext, emptyDir, env).
        bench = build_benchmark(plan, BenchmarkConfig.model_validate({"enabled": True})).job
        for job in plan.jobs + [bench]:
            got = sim.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)
            assert got["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        pods = operator_pods(plan.dgd)
        for op in pods:
            sim.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(op.name, ns, op.labels))
        job_pods = [j["metadata"]["name"] for j in plan.jobs + [bench]]
        for name in job_pods:
            sim.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(f"{name}-x1", ns, {"batch.kubernetes.io/job-name": name}))
        listed = {}
        for pol in sim.request("GET", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies")["items"]:
            sel = label_selector_string(pol["spec"]["podSelector"])
            items = sim.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={quote(sel)}")["items"]
            listed[pol["metadata"]["name"][len(plan.dgd["metadata"]["name"]) + 1:]] = {p["metadata"]["name"] for p in items}
        every = {op.name for op in pods} | {f"{n}-x1" for n in job_pods}
        assert listed["default-deny"] == listed["dns"] == every
        assert listed["graph"] == listed["monitoring"] == {op.name for op in pods}
        assert listed["frontend-ingress"] == {op.name for op in pods if op.component_type == "frontend"}
        assert listed["jobs-egress"] == {f"{n}-x1" for n in job_pods}


def test_the_program_registers_the_policies_before_the_jobs_and_the_dgd():
    """The real program (__main__.py under Pulumi's mocks): one NetworkPolicy resource per planned policy, and the
    download Jobs and the DGD wait for them (so the allow rules exist before anything runs under the deny)."""
    from harness import run_program

    cfg = {"target": SAMPLE[1], "cluster": {"mode": "render"}, "networkPolicy": NP}
    run = run_program(cfg, {"hfToken": "hf_x"})
    pols = run.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    planned = _plan(SAMPLE[1]).network_policies
    assert sorted(r.inputs["metadata"]["name"] for r in pols) == sorted(p["metadata"]["name"] for p in planned)
    urns = {r.urn for r in pols}
    for r in run.by_type("kubernetes:batch/v1:Job") + run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"):
        assert urns <= set(r.dependencies), r.name
    off = run_program({k: v for k, v in cfg.items() if k != "networkPolicy"}, {"hfToken": "hf_x"})
    assert not off.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
