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
from stacks.config.keys import BenchmarkConfig, ConfigError, parse
from stacks.serving.network_policy import benchmark_job_name, front_door_ingress
from stacks.serving.operator import label_selector_string, operator_pods
from stacks.serving import build_plan

TARGETS = sorted(catalog.targets())
SAMPLE = [
    "lightning-vllm-agg-h100-dspark",
    "lightning-vllm-disagg-h100-dspark",
    "ultra-vllm-agg-b200-chat-256k-mtp",
    "motif3-vllm-disagg-b200-chat-generic-2p1d-kv",
    "ultra-vllm-disagg-gb200-agentic-1M",
]
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
    pols = {p["metadata"]["name"][len(plan.dgd["metadata"]["name"]) + 1 :]: p for p in plan.network_policies}
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
    assert ns_from == ["gateway"]  # not the serving namespace as a whole: its own pods only by the benchmark Job's label
    # Platform: NATS and etcd in dynamo-system.
    platform = [r for r in pols["graph"]["spec"]["egress"] if r.get("to") and "namespaceSelector" in r["to"][0]]
    assert platform[0]["to"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "dynamo-system"}
    assert {x["port"] for x in platform[0]["ports"]} == {4222, 2379}
    # The download Jobs' pods (the Job controller's job-name label) get HTTPS egress; the graph's pods are not Jobs.
    jobs = pols["jobs-egress"]["spec"]["podSelector"]
    for j in plan.jobs:
        assert _matches(jobs, {"batch.kubernetes.io/job-name": j["metadata"]["name"]})
    assert not any(_matches(jobs, p.labels) for p in pods)


# --------------------------------------------------------------------------- exact specs from Dynamo's facts
#
# The expected policies below are written from facts outside the product, never from its constants:
# - pod label keys and port numbers: ../shared/reference/dynamo-next/OPERATOR-LABELS.md (sections 1 and 2), parsed
#   by tests/operator_reference.py (frontend ``http`` 8000; workers ``system`` 9090 and the NIXL exporter 19090);
# - NATS 4222, etcd 2379 and the platform namespace: ../shared/reference/platform (dynamo-platform values.yaml
#   ``nats.config.nats.port`` and the ``etcdAddr`` format; dynamo-platform.md ``helm install ... -n dynamo-system``);
# - Kubernetes: every namespace carries ``kubernetes.io/metadata.name`` (>= 1.22); the Job controller labels a Job's
#   pods ``batch.kubernetes.io/job-name`` (>= 1.27); CoreDNS runs in kube-system with ``k8s-app: kube-dns`` and
#   answers on 53 UDP and TCP; the API server listens on 6443 behind the ``kubernetes`` Service's 443.

NS_LABEL = "kubernetes.io/metadata.name"
JOB_LABEL = "batch.kubernetes.io/job-name"
WORKER_TYPES = ("worker", "prefill", "decode")  # OPERATOR-LABELS.md section 1: the worker component types
EXACT = [(SAMPLE[0], False), (SAMPLE[1], True), (SAMPLE[2], True), (SAMPLE[3], False), (SAMPLE[4], True)]
FRONT_DOOR_NAMESPACES = ["team-a", "dynamo-gateway"]


@pytest.fixture(scope="module")
def facts():
    from operator_reference import label_keys, operator_ports, platform_facts

    return {"labels": label_keys(), "ports": operator_ports(), "platform": platform_facts()}


def _tcp_ports(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _from_namespaces(names) -> dict:
    return {"namespaceSelector": {"matchExpressions": [{"key": NS_LABEL, "operator": "In", "values": sorted(set(names))}]}}


def _expected_specs(dgd: dict, job_names: list[str], clients: list[str], facts: dict) -> dict[str, dict]:
    """policy name -> spec, for the serving namespace's policies and the front door's one."""
    name = dgd["metadata"]["name"]
    keys, ports, platform = facts["labels"], facts["ports"], facts["platform"]
    graph = {keys["dgd_name"]: name}
    frontend = {keys["dgd_name"]: name, keys["component_type"]: "frontend"}
    types = {c["type"] for c in dgd["spec"]["components"]}
    assert "frontend" in types and types & set(WORKER_TYPES), types
    for c in dgd["spec"]["components"]:  # a frontend that declares its port declares the operator's
        for ctr in c["podTemplate"]["spec"]["containers"] if c["type"] == "frontend" else []:
            assert all(p["containerPort"] == ports["http"] for p in ctr.get("ports") or [] if p.get("name") == "http")
    http = ports["http"]
    scraped = sorted({http, ports["system"], ports["nixl"]})  # frontend http; workers' system server and NIXL exporter
    return {
        f"{name}-default-deny": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        f"{name}-dns": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {NS_LABEL: "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                }
            ],
        },
        f"{name}-graph": {
            "podSelector": {"matchLabels": graph},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": graph}}]}],
            "egress": [
                {"to": [{"podSelector": {"matchLabels": graph}}]},
                {
                    "to": [{"namespaceSelector": {"matchLabels": {NS_LABEL: platform["namespace"]}}}],
                    "ports": _tcp_ports(platform["nats_port"], platform["etcd_port"]),
                },
                {"ports": _tcp_ports(443, 6443)},
            ],
        },
        f"{name}-frontend-ingress": {
            "podSelector": {"matchLabels": frontend},
            "policyTypes": ["Ingress"],
            # The ingress namespaces, and of the serving namespace only the benchmark Job's pods (by the Job
            # controller's label), when there is one.
            "ingress": [
                {
                    "from": [_from_namespaces(NP["ingressNamespaces"])]
                    + (
                        [{"podSelector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "In", "values": clients}]}}]
                        if clients
                        else []
                    ),
                    "ports": _tcp_ports(http),
                }
            ],
        },
        f"{name}-monitoring": {
            "podSelector": {"matchLabels": graph},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [_from_namespaces(NP["monitoringNamespaces"])], "ports": _tcp_ports(*scraped)}],
        },
        f"{name}-jobs-egress": {
            "podSelector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "In", "values": sorted(job_names)}]},
            "policyTypes": ["Egress"],
            "egress": [{"ports": _tcp_ports(443)}],
        },
        **(
            {
                f"{name}-frontend-clients-egress": {
                    "podSelector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "In", "values": clients}]},
                    "policyTypes": ["Egress"],
                    "egress": [{"to": [{"podSelector": {"matchLabels": frontend}}], "ports": _tcp_ports(http)}],
                }
            }
            if clients
            else {}
        ),
        f"{name}-front-door-ingress": {
            "podSelector": {"matchLabels": frontend},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [_from_namespaces(FRONT_DOOR_NAMESPACES)], "ports": _tcp_ports(http)}],
        },
    }


@pytest.mark.parametrize("tid,benchmark", EXACT)
def test_every_policy_spec_is_exactly_what_dynamo_needs(tid, benchmark, facts):
    """Each policy, whole, against a spec written from Dynamo's and Kubernetes' facts: a rule admitting any source
    or any port, a wrong selector, a missing or extra port fails here."""
    plan = _plan(tid, benchmark={"enabled": benchmark})
    jobs = [j["metadata"]["name"] for j in plan.jobs]
    clients = [build_benchmark(plan, BenchmarkConfig.model_validate({"enabled": True})).job_name] if benchmark else []
    jobs += clients
    policies = plan.network_policies + [front_door_ingress(plan.dgd, FRONT_DOOR_NAMESPACES)]
    for p in policies:
        assert (p["apiVersion"], p["kind"], p["metadata"]["namespace"]) == ("networking.k8s.io/v1", "NetworkPolicy", "dynamo")
    got = {p["metadata"]["name"]: p["spec"] for p in policies}
    assert len(got) == len(policies)
    want = _expected_specs(plan.dgd, jobs, clients, facts)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name


def _open(rule: dict, peers_key: str) -> list[str]:
    """How a rule is open: no peer (any address), a peer selecting everything, no port (any port), a port entry
    without a port number (every port of the protocol)."""
    why = []
    peers = rule.get(peers_key)
    if not peers:
        why.append(f"no {peers_key!r}: any address")
    for peer in peers or []:
        cidr = (peer.get("ipBlock") or {}).get("cidr")
        if cidr in ("0.0.0.0/0", "::/0") or not any(peer.get(k) for k in ("podSelector", "namespaceSelector", "ipBlock")):
            why.append(f"peer {peer} selects everything")
    if not rule.get("ports"):
        why.append("no 'ports': any port")
    if any("port" not in p for p in rule.get("ports") or []):
        why.append("a port entry without a port: every port")
    return why


def test_no_policy_of_any_target_opens_a_rule_beyond_the_documented_ones(facts):
    """Rules without a peer or without ports are allowed only where the module docstring says so: the graph's pods
    among themselves (any port), the API server (TCP 443/6443, any address: not a pod) and the Jobs' HTTPS egress
    (Hugging Face Hub, PyPI). Every other rule names both its peers and its ports; only default-deny and DNS select
    every pod of the namespace."""
    dgd_key = facts["labels"]["dgd_name"]
    problems = []
    for tid in sorted(catalog.targets()):
        plan = _plan(tid, benchmark={"enabled": True})
        name = plan.dgd["metadata"]["name"]
        graph_peer = [{"podSelector": {"matchLabels": {dgd_key: name}}}]
        allowed = [
            (f"{name}-graph", "ingress", {"from": graph_peer}),
            (f"{name}-graph", "egress", {"to": graph_peer}),
            (f"{name}-graph", "egress", {"ports": _tcp_ports(443, 6443)}),
            (f"{name}-jobs-egress", "egress", {"ports": _tcp_ports(443)}),
        ]
        for pol in plan.network_policies + [front_door_ingress(plan.dgd, FRONT_DOOR_NAMESPACES)]:
            pname, spec = pol["metadata"]["name"], pol["spec"]
            if not spec["podSelector"] and pname not in (f"{name}-default-deny", f"{name}-dns"):
                problems.append((tid, pname, "podSelector {} selects every pod"))
            for direction, peers_key in (("ingress", "from"), ("egress", "to")):
                for rule in spec.get(direction) or []:
                    why = _open(rule, peers_key)
                    if why and (pname, direction, rule) not in allowed:
                        problems.append((tid, pname, direction, rule, why))
    assert problems == []


def test_benchmark_job_is_allowed_to_reach_the_frontend():
    plan = _plan(SAMPLE[1], benchmark={"enabled": True})
    jobs = next(p for p in plan.network_policies if p["metadata"]["name"].endswith("-jobs-egress"))
    assert benchmark_job_name(plan.dgd) in jobs["spec"]["podSelector"]["matchExpressions"][0]["values"]


# --------------------------------------------------------------------------- where Dynamo's pods reach the API server
#
# EKS API reference, KubernetesNetworkConfigRequest.serviceIpv4Cidr (the program names none, so EKS picks a range):
EKS_SERVICE_CIDR_DOC = (
    "If you don't specify a block, Kubernetes assigns addresses from either the 10.100.0.0/16 or 172.20.0.0/16 CIDR blocks."
)
# The control plane's network interfaces (the ``kubernetes`` Service's endpoints) are in the cluster's subnets, so in
# the VPC: EKS user guide, "Amazon EKS creates up to 4 elastic network interfaces in the subnets that you specify".


def _api_server_rule(plan) -> dict:
    graph = next(p for p in plan.network_policies if p["metadata"]["name"].endswith("-graph"))
    rules = [r for r in graph["spec"]["egress"] if any(x["port"] in (443, 6443) for x in r.get("ports") or [])]
    assert len(rules) == 1, rules
    return rules[0]


def _eks_plan(tid: str, vpc_cidr: str, **np_extra):
    from stacks.cluster.plan import plan_eks
    from stacks.config import cluster_config

    raw = {
        "target": tid,
        "namespace": "dynamo",
        "networkPolicy": {**NP, **np_extra},
        "cluster": {"mode": "eks", "region": "us-east-1", "vpcCidr": vpc_cidr},
    }
    return plan_eks(
        "np-test",
        parse({k: v for k, v in raw.items() if k != "cluster"}),
        cluster_config(raw),
        raw,
        frozenset(),
        require_secrets=False,
    )[2]


@pytest.mark.parametrize("vpc_cidr", ["10.0.0.0/16", "10.20.0.0/18"])
def test_on_the_eks_cluster_it_builds_dynamo_pods_reach_only_the_vpc_and_the_service_ranges_on_the_api_ports(vpc_cidr):
    """The EKS cluster the program builds: the API server's ClusterIP is in one of EKS's default Service ranges, its
    endpoints in the VPC; nothing else is reachable on 443/6443 (no rule without peers)."""
    import re

    service_ranges = re.findall(r"\d+\.\d+\.\d+\.\d+/\d+", EKS_SERVICE_CIDR_DOC)
    assert len(service_ranges) == 2
    plan = _eks_plan(SAMPLE[1], vpc_cidr)
    assert _api_server_rule(plan) == {
        "to": [{"ipBlock": {"cidr": c}} for c in sorted({vpc_cidr, *service_ranges})],
        "ports": _tcp_ports(443, 6443),
    }
    assert plan.warnings == []


def test_listed_api_server_networks_replace_any_address_and_the_eks_default():
    listed = ["192.0.2.10/32", "198.51.100.0/24"]
    for plan in (
        _plan(SAMPLE[0], networkPolicy={**NP, "apiServerCidrs": listed}),
        _eks_plan(SAMPLE[0], "10.0.0.0/16", apiServerCidrs=listed),
    ):
        assert _api_server_rule(plan) == {"to": [{"ipBlock": {"cidr": c}} for c in listed], "ports": _tcp_ports(443, 6443)}
        assert plan.warnings == []


def test_an_unknown_api_server_leaves_the_ports_open_and_says_which_key_closes_them():
    plan = _plan(SAMPLE[0])
    assert _api_server_rule(plan) == {"ports": _tcp_ports(443, 6443)}
    assert len(plan.warnings) == 1 and "dynamo:networkPolicy.apiServerCidrs" in plan.warnings[0]
    assert build_plan(parse({"target": SAMPLE[0]})).warnings == []  # no policies, nothing to say


def test_a_bad_api_server_network_is_refused_with_the_key_and_the_value():
    with pytest.raises(ConfigError, match=r"networkPolicy\.apiServerCidrs") as e:
        parse({"target": SAMPLE[0], "networkPolicy": {**NP, "apiServerCidrs": ["10.0.0.0/33"]}})
    assert "10.0.0.0/33" in str(e.value)


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
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.invalid/none:0"}],
        },
    }


@pytest.mark.engine
def test_api_server_admits_the_policies_and_their_selectors_list_the_right_pods(apiserver):
    sim = apiserver
    for i, tid in enumerate(SAMPLE):
        ns = f"np{i}"
        plan = _plan(tid, ns, benchmark={"enabled": True})
        sim.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        sim.request(
            "POST",
            f"/api/v1/namespaces/{ns}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
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
            listed[pol["metadata"]["name"][len(plan.dgd["metadata"]["name"]) + 1 :]] = {p["metadata"]["name"] for p in items}
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
