"""stacks/serving/operator.py against the operator facts it cites: labels per component type, container ports, names,
Services; and, without an API server, that the project's PodMonitors select every serving pod of every target
(tests/test_selection.py asks the real API server the same)."""

import copy

import pytest

from stacks import catalog
from stacks.config.keys import parse
from stacks.observe.observability import dynamo_pod_monitors
from stacks.serving.operator import label_selector_string, operator_pods, operator_services, selector_matches
from stacks.serving import build_plan

TARGETS = catalog.targets()
SERVING_TYPES = ("frontend", "worker", "prefill", "decode")
# The Deployment controller's label on the pods of one ReplicaSet (apps/v1 DefaultDeploymentUniqueLabelKey), not Dynamo's.
POD_TEMPLATE_HASH = "pod-template-hash"


@pytest.fixture(scope="module")
def L():
    """The operator's pod label keys by role, read from ../shared/reference/dynamo-next/OPERATOR-LABELS.md (section 1;
    tests/operator_reference.py), never from stacks.serving.operator's constants: a typo there must fail here."""
    from operator_reference import label_keys

    return label_keys()


def _dgd(tid, **cfg):
    return build_plan(parse({"target": tid, **cfg})).dgd


@pytest.fixture(scope="module")
def all_dgds():
    return {tid: _dgd(tid) for tid in TARGETS}


def test_prefill_and_decode_pods_carry_their_own_component_type(L):
    """A v1beta1 ``type: prefill|decode`` component's pods are labelled ``prefill``/``decode`` (operator consts.go
    comment on KubeLabelDynamoComponentType; GetDCDWorkloadComponentType); ``worker`` is the alpha-era label."""
    dgd = _dgd("lightning-vllm-disagg-h100-dspark")
    by_comp = {p.component: p for p in operator_pods(dgd)}
    assert {c: p.labels[L["component_type"]] for c, p in by_comp.items()} == {
        "Frontend": "frontend",
        "VllmPrefillWorker": "prefill",
        "VllmDecodeWorker": "decode",
    }
    assert all(L["sub_component_type"] not in p.labels for p in by_comp.values())  # only on converted v1alpha1 DCDs
    assert {p.component_type for p in by_comp.values()} == {"frontend", "prefill", "decode"}


def test_aggregated_worker_and_motif_roles_typed_worker_stay_worker(L):
    agg = {p.component: p.labels[L["component_type"]] for p in operator_pods(_dgd("lightning-vllm-agg-h100-dspark"))}
    assert agg == {"Frontend": "frontend", "agg": "worker"}
    # Motif-3's disaggregated recipe types both roles ``worker``; the operator labels what the type says.
    motif = {
        p.component: p.labels[L["component_type"]] for p in operator_pods(_dgd("motif3-vllm-disagg-b200-chat-generic-2p1d-kv"))
    }
    assert motif == {"Frontend": "frontend", "PrefillWorker": "worker", "DecodeWorker": "worker"}


def test_every_pod_has_the_selection_labels_and_its_types_ports(L):
    dgd = _dgd("ultra-vllm-disagg-b200-agentic-256K")
    name = dgd["metadata"]["name"]
    for p in operator_pods(dgd):
        assert p.labels[L["metrics_enabled"]] == "true"
        assert p.labels[L["dgd_name"]] == name
        assert p.labels[L["component"]] == p.component
        assert p.labels[L["dynamo_namespace"]] == f"dynamo-{name}"  # <k8s namespace>-<dgd name> (ComputeDynamoNamespace)
        if p.component_type == "frontend":
            assert p.ports == {"http": 8000}
            assert L["worker_hash"] not in p.labels
        else:
            assert p.ports == {"system": 9090, "nixl": 19090}
            assert len(p.labels[L["worker_hash"]]) == 8


def test_every_pod_label_key_is_one_the_operator_documents(all_dgds, L):
    """No pod of any target carries a label key outside OPERATOR-LABELS.md section 1 (and the Deployment controller's
    pod-template-hash): a misspelt key would be a label no Service, PodMonitor or NetworkPolicy of Dynamo selects."""
    documented = set(L.values()) | {POD_TEMPLATE_HASH}
    extra = {(tid, k) for tid, dgd in all_dgds.items() for p in operator_pods(dgd) for k in p.labels if k not in documented}
    assert extra == set()


def test_names_follow_the_dcd_and_deployment_naming(L):
    dgd = _dgd("ultra-vllm-disagg-b200-agentic-256K")
    name = dgd["metadata"]["name"]
    pods = operator_pods(dgd)
    front = next(p for p in pods if p.component_type == "frontend")
    assert front.workload == f"{name}-frontend"  # GetDCDResourceName: <dgd>-<lower(component)>, no hash for non-workers
    decode = [p for p in pods if p.component_type == "decode"]
    assert len(decode) == 2 and decode[0].replica == 0 and decode[1].replica == 1
    whash = decode[0].labels[L["worker_hash"]]
    assert decode[0].workload == f"{name}-decode-{whash}"  # workers: -<worker hash> (component "decode" since Dynamo 1.6)
    for p in pods:
        assert p.labels[L["selector"]] == p.workload
        # Deployment pods: <deployment>-<pod-template-hash>-<5 chars>
        assert p.name == f"{p.workload}-{p.labels[POD_TEMPLATE_HASH]}-{p.name.rsplit('-', 1)[1]}"
        assert len(p.name.rsplit("-", 1)[1]) == 5
    assert decode[0].labels[POD_TEMPLATE_HASH] == decode[1].labels[POD_TEMPLATE_HASH]  # one ReplicaSet
    assert len({p.name for p in pods}) == len(pods)


def test_worker_hash_changes_with_the_worker_spec_not_the_replicas(L):
    dgd = _dgd("lightning-vllm-agg-h100-dspark")
    h = next(p for p in operator_pods(dgd) if p.component_type == "worker").labels[L["worker_hash"]]
    more = copy.deepcopy(dgd)
    more["spec"]["components"][1]["replicas"] = 3
    assert {p.labels.get(L["worker_hash"]) for p in operator_pods(more)} == {None, h}
    other = copy.deepcopy(dgd)
    other["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["image"] = "example.invalid/other:1"
    assert next(p for p in operator_pods(other) if p.component_type == "worker").labels[L["worker_hash"]] != h


def test_metrics_opt_out_annotation_drops_the_label(L):
    dgd = copy.deepcopy(_dgd("lightning-vllm-agg-h100-dspark"))
    dgd["metadata"].setdefault("annotations", {})["nvidia.com/enable-metrics"] = "false"
    assert all(L["metrics_enabled"] not in p.labels for p in operator_pods(dgd))


def test_frontend_service_selects_exactly_the_frontend_pods():
    dgd = _dgd("lightning-vllm-agg-h100-dspark-kv-router")
    pods = operator_pods(dgd)
    services = {s["metadata"]["name"]: s for s in operator_services(dgd)}
    front = services[f"{dgd['metadata']['name']}-frontend"]
    assert front["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert [p.name for p in pods if selector_matches({"matchLabels": front["spec"]["selector"]}, p.labels)] == [
        p.name for p in pods if p.component_type == "frontend"
    ]
    # Kubernetes discovery (the platform's default): a Service per component, port system 9090.
    assert len(services) == 2
    worker = next(s for n, s in services.items() if n != f"{dgd['metadata']['name']}-frontend")
    assert worker["spec"]["ports"][0]["name"] == "system" and worker["spec"]["ports"][0]["port"] == 9090
    assert sum(selector_matches({"matchLabels": worker["spec"]["selector"]}, p.labels) for p in pods) == 4


def test_multinode_component_pods_are_a_leader_and_workers_per_replica(L):
    dgd = copy.deepcopy(_dgd("lightning-vllm-agg-h100-dspark"))
    dgd["spec"]["components"][1].update(multinode={"nodeCount": 2}, replicas=2)
    pods = [p for p in operator_pods(dgd) if p.component_type == "worker"]
    assert [(p.replica, p.role) for p in pods] == [(0, "leader"), (0, "worker"), (1, "leader"), (1, "worker")]
    assert pods[0].name == f"{pods[0].workload}-0" and pods[1].name == f"{pods[0].workload}-0-1"
    svc = next(s for s in operator_services(dgd) if s["spec"]["selector"][L["component_type"]] == "worker")
    assert [p.role for p in pods if selector_matches({"matchLabels": svc["spec"]["selector"]}, p.labels)] == ["leader", "leader"]


def test_a_v1alpha1_dgd_is_refused():
    dgd = copy.deepcopy(_dgd("lightning-vllm-agg-h100-dspark"))
    dgd["apiVersion"] = "nvidia.com/v1alpha1"
    with pytest.raises(ValueError, match="v1beta1"):
        operator_pods(dgd)


def test_label_selector_string_is_the_api_servers_syntax():
    sel = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "t", "operator": "In", "values": ["worker", "prefill"]},
            {"key": "x", "operator": "NotIn", "values": ["y"]},
            {"key": "e", "operator": "Exists"},
            {"key": "d", "operator": "DoesNotExist"},
        ],
    }
    assert label_selector_string(sel) == "a=1,b=2,t in (worker,prefill),x notin (y),e,!d"
    with pytest.raises(ValueError, match="operator"):
        label_selector_string({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]})


def test_every_name_and_label_value_is_valid_for_kubernetes(all_dgds):
    """Label values are at most 63 characters; names are DNS subdomains (pods) or labels (Services). The API server
    would refuse anything else (tests/test_selection.py creates them)."""
    import re

    label_value = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
    dns_label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    for tid, dgd in all_dgds.items():
        for p in operator_pods(dgd):
            assert len(p.name) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", p.name), (tid, p.name)
            bad = {k: v for k, v in p.labels.items() if not label_value.match(v)}
            assert not bad, (tid, bad)
        for s in operator_services(dgd):
            assert dns_label.match(s["metadata"]["name"]), (tid, s["metadata"]["name"])


def test_project_pod_monitors_select_every_serving_pod_of_every_target(all_dgds):
    """Pure twin of the API-server test: every frontend/worker/prefill/decode pod of every target is selected by
    one of the project's PodMonitors on an endpoint port the pod has."""
    counts = {t: [0, 0] for t in SERVING_TYPES}
    missed = []
    for tid, dgd in all_dgds.items():
        ns, name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
        monitors = dynamo_pod_monitors(ns, name, {})
        for p in operator_pods(dgd):
            counts[p.component_type][1] += 1
            ok = any(
                selector_matches(m["spec"]["selector"], p.labels)
                and ns in m["spec"]["namespaceSelector"].get("matchNames", [ns])
                and any(e.get("port") in p.ports for e in m["spec"]["podMetricsEndpoints"])
                for m in monitors
            )
            counts[p.component_type][0] += ok
            if not ok:
                missed.append((tid, p.component, p.component_type))
    print({t: f"{s}/{n}" for t, (s, n) in counts.items()})
    assert counts["prefill"][1] > 0 and counts["decode"][1] > 0 and counts["worker"][1] > 0
    assert missed == []
