"""The simulated cluster's data: KWOK nodes shaped like the cluster plan, the operator's pods,
node inventories. The runs against the real kube-scheduler are engine tests (tests/test_engine.py, end)."""

import pytest
import yaml

from stacks import catalog
from stacks.cluster import EFA_LABEL, POOL_LABEL
from stacks.config.keys import ConfigError
from stacks.registry.gpus import HOSTS
from stacks.cli.simulate import (
    KWOK_ANNOTATION,
    RUN_LABEL,
    Simulator,
    default_groups,
    eks_allocatable,
    inventory_nodes,
    inventory_objects,
    job_pods,
    node_objects,
    operator_pod_intents,
    stack_scenario,
    target_scenario,
)

TARGETS = catalog.targets()


def _dgd(tid):
    return next(o for o in catalog.recipe_objects(TARGETS[tid]) if o["kind"] == "DynamoGraphDeployment")


def test_eks_allocatable_subtracts_what_the_al2023_kubelet_reserves():
    a = eks_allocatable(HOSTS["p5.48xlarge"], 500)
    # CPU: 6% of core 1 + 1% of core 2 + 0.5% of cores 3-4 + 0.25% of the other 188 = 60+10+10+470 millicores.
    assert a["cpu"] == f"{192000 - 550}m"
    # Memory: 11 MiB x 110 pods + 255 MiB kube-reserved, 100Mi hard eviction.
    assert a["memory"] == f"{2048 * 1024 - (11 * 110 + 255) - 100}Mi"
    assert a["pods"] == "110"
    assert a["ephemeral-storage"] == f"{8 * 3840 * 10**9 // 2**30 * 9 // 10}Gi"  # RAID0 instance store, 10% eviction
    assert eks_allocatable(HOSTS["m7i.2xlarge"], 20) == {
        "cpu": "7910m",
        "memory": f"{32 * 1024 - (11 * 58 + 255) - 100}Mi",
        "ephemeral-storage": "18Gi",
        "pods": "58",
    }


def test_default_eks_shape_carries_the_plans_labels_taint_and_extended_resources():
    groups, runtime_classes = default_groups(TARGETS["lightning-vllm-disagg-h100-dspark"])
    system, gpu = groups
    assert system.labels[POOL_LABEL] == "system" and system.taints == [] and system.count == 2
    assert system.labels["node.kubernetes.io/instance-type"] == "m7i.2xlarge"
    assert gpu.labels[POOL_LABEL] == "gpu" and gpu.labels[EFA_LABEL] == "true"
    assert gpu.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and gpu.labels["nvidia.com/gpu.present"] == "true"
    assert gpu.labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert gpu.taints == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert gpu.allocatable["nvidia.com/gpu"] == "8" and gpu.allocatable["vpc.amazonaws.com/efa"] == "32"
    assert {"cpu", "memory", "ephemeral-storage", "pods"} <= set(gpu.allocatable)
    assert runtime_classes == {"nvidia"}  # the device-plugin NVIDIA stack creates RuntimeClass nvidia too


def test_existing_infiniband_cluster_shape_offers_rdma():
    (system, gpu), runtime_classes = default_groups(TARGETS["lightning-vllm-disagg-h200-dspark"])
    assert gpu.allocatable["rdma/ib"] == "1000" and "vpc.amazonaws.com/efa" not in gpu.allocatable
    assert runtime_classes == {"nvidia"}


def test_node_objects_are_kwok_nodes_with_the_run_label():
    groups, _ = default_groups(TARGETS["lightning-vllm-agg-h100-dspark"])
    nodes = node_objects(groups, "r1")
    assert [n["metadata"]["name"] for n in nodes] == ["sim-system-0", "sim-system-1", "sim-gpu-0"]
    for n in nodes:
        assert n["metadata"]["annotations"] == {KWOK_ANNOTATION: "fake"}
        assert n["metadata"]["labels"][RUN_LABEL] == "r1"
        assert n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"]
        assert n["status"]["allocatable"] == n["status"]["capacity"]
    assert nodes[2]["spec"]["taints"][0]["key"] == "nvidia.com/gpu"


def test_operator_pods_expand_replicas_and_keep_scheduling_fields():
    dgd = _dgd("lightning-vllm-agg-h100-dspark-kv-router")
    intents = operator_pod_intents(dgd)
    by_comp = {}
    for it in intents:
        by_comp.setdefault(it.component, []).append(it)
    worker = next(c for c in dgd["spec"]["components"] if c["type"] != "frontend")
    assert len(by_comp[worker["name"]]) == worker["replicas"] == 4
    pod = by_comp[worker["name"]][0].pod
    spec = worker["podTemplate"]["spec"]
    assert pod["spec"]["tolerations"] == spec["tolerations"]
    assert pod["spec"]["containers"][0]["resources"] == spec["containers"][0]["resources"]
    # Shared memory as the operator mounts it; the model-cache claim does not constrain nodes and is left out.
    assert pod["spec"]["volumes"] == [
        {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": str(worker["sharedMemorySize"])}}
    ]
    assert len({it.pod["metadata"]["name"] for it in intents}) == len(intents)


def test_simulated_pods_carry_the_operators_labels_ports_and_names():
    dgd = _dgd("lightning-vllm-disagg-h100-dspark")
    pods = {it.component: it.pod for it in operator_pod_intents(dgd)}
    assert set(pods) == {"Frontend", "VllmPrefillWorker", "VllmDecodeWorker"}
    types = {c: p["metadata"]["labels"]["nvidia.com/dynamo-component-type"] for c, p in pods.items()}
    assert types == {"Frontend": "frontend", "VllmPrefillWorker": "prefill", "VllmDecodeWorker": "decode"}
    for comp, pod in pods.items():
        labels = pod["metadata"]["labels"]
        assert labels["nvidia.com/metrics-enabled"] == "true"
        assert labels["nvidia.com/dynamo-graph-deployment-name"] == dgd["metadata"]["name"]
        assert labels["nvidia.com/dynamo-component"] == comp
        # Deployment naming: <dgd>-<lower(component)>[-<worker hash>]-<pod-template-hash>-<5 chars>
        assert pod["metadata"]["name"].startswith(f"{dgd['metadata']['name']}-{comp.lower()}-")
        assert labels["nvidia.com/selector"] == pod["metadata"]["name"].rsplit("-", 2)[0]
    ports = {c: {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]} for c, pod in pods.items()}
    assert ports["Frontend"] == {"http": 8000}
    assert ports["VllmPrefillWorker"] == ports["VllmDecodeWorker"] == {"system": 9090, "nixl": 19090}


def test_multinode_components_become_leader_and_worker_pods():
    import copy

    dgd = copy.deepcopy(_dgd("lightning-vllm-agg-h100-dspark"))
    worker = next(c for c in dgd["spec"]["components"] if c["type"] == "worker")
    worker["multinode"] = {"nodeCount": 3}
    worker["replicas"] = 2
    intents = [it for it in operator_pod_intents(dgd) if it.component.startswith(worker["name"])]
    assert sorted(it.component for it in intents) == [f"{worker['name']}/leader"] * 2 + [f"{worker['name']}/worker"] * 4
    roles = [it.pod["metadata"]["labels"]["role"] for it in intents]
    assert roles.count("leader") == 2 and roles.count("worker") == 4
    assert len({it.pod["metadata"]["name"] for it in intents}) == 6


def test_job_pods_keep_the_jobs_node_selector():
    from stacks.config.keys import parse
    from stacks.serving import build_plan

    plan = build_plan(parse({"target": "lightning-vllm-agg-h100-dspark"}), job_node_selector={POOL_LABEL: "system"})
    (pod,) = job_pods(plan.jobs)
    assert pod.component == "Job/model-download" and pod.pod["spec"]["nodeSelector"] == {POOL_LABEL: "system"}
    assert "volumes" not in pod.pod["spec"]


INVENTORY = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: ip-10-0-1-5.ec2.internal
    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, kubernetes.io/arch: amd64}
  spec:
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule, timeAdded: null}]
  status:
    capacity: {cpu: "192", memory: 2097152Mi, nvidia.com/gpu: "8"}
    allocatable: {cpu: 191450m, memory: 2095000Mi, nvidia.com/gpu: "8"}
    conditions: [{type: Ready, status: "True"}]
"""


def test_inventory_keeps_what_the_scheduler_reads():
    (n,) = inventory_nodes(INVENTORY)
    assert n["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert n["allocatable"]["cpu"] == "191450m" and n["capacity"]["cpu"] == "192"
    (obj,) = inventory_objects([n], "r")
    assert obj["metadata"]["name"] == "ip-10-0-1-5.ec2.internal" and obj["metadata"]["annotations"] == {KWOK_ANNOTATION: "fake"}
    assert "conditions" not in obj["status"]


@pytest.mark.parametrize(
    "text", ["just text", "kind: List\nitems: []", yaml.safe_dump({"kind": "List", "items": [{"kind": "Pod"}]})]
)
def test_inventory_refuses_what_is_not_a_node_list(text):
    with pytest.raises(ConfigError, match="--nodes"):
        inventory_nodes(text)


def test_simulator_refuses_a_remote_cluster(tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        yaml.safe_dump(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [
                    {
                        "name": "k",
                        "cluster": {"server": "https://ABC.gr7.us-east-1.eks.amazonaws.com", "certificate-authority-data": ""},
                    }
                ],
                "users": [{"name": "u", "user": {}}],
            }
        )
    )
    with pytest.raises(ConfigError, match="only talks to the local control plane"):
        Simulator(kc)


def test_stack_scenarios_use_the_stack_plan():
    eks = stack_scenario("h100-disagg")
    assert [it.component for it in eks.intents][0] == "Job/model-download"
    assert {n["metadata"]["labels"].get(POOL_LABEL) for n in eks.nodes} == {"system", "gpu"}
    existing = stack_scenario("ultra-b200-agg")
    assert existing.notes and "--nodes" in existing.notes[0]
    inv = stack_scenario("ultra-b200-agg", INVENTORY)
    assert [n["metadata"]["name"] for n in inv.nodes] == ["ip-10-0-1-5.ec2.internal"]


def test_every_target_has_a_scenario():
    for tid, t in TARGETS.items():
        sc = target_scenario(t)
        assert sc.nodes and sc.intents, tid


def test_cli_names_an_unknown_target():
    from stacks.__main__ import main

    assert main(["simulate", "--target", "no-such-target"]) == 2
