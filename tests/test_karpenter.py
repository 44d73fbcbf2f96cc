"""Karpenter as a GPU capacity mode on EKS (stacks/cluster/karpenter.py, its wiring in components/cluster.py, its AWS rules).

The real program runs under mocks (tests/harness.py) for a Karpenter pool on on-demand capacity, a targeted
reservation and a Capacity Block: every AWS rule passes, and each Karpenter rule fails on a graph carrying the
mistake it guards against. Config errors name the key, the value and the choices before any resource; stacks that
keep managed node groups register nothing new and their DGDs stay exactly the recipe's."""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path

import pytest
import yaml

from harness import CAPACITY, CR, SECRETS, go_module_dir, run_program
import aws_rules as R
from aws_rules import Graph, check
from stacks.cluster import karpenter as K
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.registry.versions import versions
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
KARPENTER_RULES = [fn for fn in R.RULES if fn.__name__.startswith("karpenter_")]


def stack_config(kind: str = "on-demand", **cluster) -> dict:
    return {
        "gpu": "h100",
        "topology": "disagg",
        "imagePullSecrets": ["ngc-secret"],
        "cluster": {"mode": "eks", "region": "us-east-1", "capacity": "karpenter", **CAPACITY[kind], **cluster},
    }


@functools.lru_cache(maxsize=None)
def _run(key: str, stack: str) -> Graph:
    return Graph(run_program(yaml_text.load(key), SECRETS, stack=stack).resources)


def graph(cfg: dict, stack: str = "kt") -> Graph:
    return copy.deepcopy(_run(yaml.safe_dump(cfg), stack))


def one(g: Graph, typ: str, name_part: str = ""):
    found = [r for r in g.of(typ) if name_part in r.name]
    assert found, (typ, name_part)
    return found[0]


def fails(g: Graph, rule) -> list[str]:
    out = rule(g)
    assert out, f"{rule.__name__} passed a graph it must refuse"
    return out


# --------------------------------------------------------------------------- the whole graph, three capacity kinds


@pytest.mark.parametrize("capacity", sorted(CAPACITY))
def test_karpenter_pool_passes_every_aws_rule(capacity):
    g = graph(stack_config(capacity))
    assert len(KARPENTER_RULES) >= 8
    assert check(g) == []
    # The pool is a NodePool, not a managed node group: only the system node group is registered.
    assert [ng.name for ng in g.of(R.NODEGROUP)] == ["cluster-system"]
    assert not g.of(R.LAUNCH_TEMPLATE) and not g.of(R.PLACEMENT_GROUP)
    np = one(g, R.NODEPOOL)
    ctype = K.CAPACITY_TYPES[2] if capacity != "on-demand" else "on-demand"
    assert R._req_values(np, K.CAPACITY_TYPE_LABEL) == [ctype]
    nc = one(g, R.EC2NODECLASS)
    assert ("capacityReservationSelectorTerms" in nc.inputs["spec"]) == (capacity != "on-demand")
    rtype = R._req_values(np, K.RESERVATION_TYPE_LABEL)
    assert rtype == {"on-demand": [], "reservation": ["default"], "capacity-block": ["capacity-block"]}[capacity]


def test_committed_karpenter_stack_passes_the_aws_rules():
    cfg = yaml_text.load((ROOT / "Pulumi.h100-karpenter.yaml").read_text())["config"]
    cfg = {k.split(":", 1)[1]: v for k, v in cfg.items() if k.startswith("dynamo:")}
    g = graph(cfg, "h100-karpenter")
    assert check(g) == []
    np = one(g, R.NODEPOOL)
    assert np.inputs["spec"]["limits"] == {"nvidia.com/gpu": "32", "nodes": "4"}
    assert np.inputs["spec"]["disruption"]["consolidateAfter"] == "10m"


def test_nodepool_labels_and_taint_are_the_node_groups():
    """The DGDs select on the same labels whichever capacity the pool has."""

    def plan(capacity):
        raw = stack_config()
        raw["cluster"]["capacity"] = capacity
        return build_program(raw, "kt", frozenset(SECRETS)).cluster_plan

    ng, kp = plan("node-group"), plan("karpenter")
    pool = kp.karpenter.pools[0]
    assert pool.nodepool["spec"]["template"]["metadata"]["labels"] == ng.gpu_nodegroup["labels"]
    taint = ng.gpu_nodegroup["taints"][0]
    assert pool.nodepool["spec"]["template"]["spec"]["taints"] == [
        {"key": taint["key"], "value": taint["value"], "effect": "NoSchedule"}
    ]
    assert pool.instance_type == ng.shape.instance_type and pool.zone == ng.gpu_nodegroup["availability_zone"]
    assert pool.offerings() == [{"instanceType": "p5.48xlarge", "capacityType": "on-demand", "zone": pool.zone}]


def test_karpenter_pools_run_the_ami_release_the_node_groups_pin():
    """Not al2023@latest (Karpenter drifts every node on each AMI release): the alias of the release the node groups pin,
    al2023@v20260714 (awslabs/amazon-eks-ami CHANGELOG.md: AMI Release v20260714, AMI names ...-1.35-v20260714), or the
    pool's own amiAlias."""

    def alias(**cluster):
        plan = build_program(stack_config(**cluster), "kt", frozenset(SECRETS)).cluster_plan
        return plan.karpenter.pools[0].ec2nodeclass["spec"]["amiSelectorTerms"], plan.system_nodegroup["release_version"]

    assert alias() == ([{"alias": "al2023@v20260714"}], "1.35.6-20260714")
    assert alias(amiReleaseVersion="1.35.5-20260601") == ([{"alias": "al2023@v20260601"}], "1.35.5-20260601")
    assert alias(amiAlias="al2023@v20260101")[0] == [{"alias": "al2023@v20260101"}]


def test_do_not_disrupt_only_on_karpenter_pools():
    raw = stack_config()
    kp = build_program(raw, "kt", frozenset(SECRETS))
    raw["cluster"]["capacity"] = "node-group"
    ng = build_program(raw, "kt", frozenset(SECRETS))
    gpu = [c for c in kp.serving.dgd["spec"]["components"] if c["name"] != "Frontend"]
    assert gpu and all(c["podTemplate"]["metadata"]["annotations"] == {K.DO_NOT_DISRUPT: "true"} for c in gpu)
    frontend = next(c for c in kp.serving.dgd["spec"]["components"] if c["name"] == "Frontend")
    assert K.DO_NOT_DISRUPT not in json.dumps(frontend)
    # A node-group stack's DGD is the recipe's (no annotation anywhere), and nothing Karpenter is planned.
    assert K.DO_NOT_DISRUPT not in json.dumps(ng.serving.dgd) and ng.cluster_plan.karpenter is None


def test_stacks_without_karpenter_register_nothing_karpenter():
    raw = stack_config()
    raw["cluster"].pop("capacity")
    g = graph(raw)
    assert not g.of(R.NODEPOOL) and not g.of(R.EC2NODECLASS) and not g.of(R.SQS_QUEUE) and R._karpenter_release(g) is None
    assert not any(K.DISCOVERY_TAG in (r.inputs.get("tags") or {}) for r in g.resources)


def test_mixed_pools_node_group_and_karpenter():
    raw = {
        "imagePullSecrets": ["ngc-secret"],
        "cluster": {
            "mode": "eks",
            "region": "us-east-1",
            "gpuPools": [{"gpu": "h100"}, {"gpu": "b200", "capacity": "karpenter", "maxNodes": 2}],
        },
        "serve": [
            {"name": "a", "target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
            {"name": "b", "target": "lightning-vllm-agg-b200-mtp", "namespace": "b"},
        ],
    }
    g = graph(raw, "mixed")
    assert check(g) == []
    assert [ng.name for ng in g.of(R.NODEGROUP) if ng.name != "cluster-system"] == ["cluster-gpu"]
    assert [np.inputs["metadata"]["name"] for np in g.of(R.NODEPOOL)] == ["gpu-b200"]
    dgds = {d.inputs["metadata"]["namespace"]: json.dumps(d.inputs) for d in g.of(R.DGD)}
    assert K.DO_NOT_DISRUPT in dgds["b"] and K.DO_NOT_DISRUPT not in dgds["a"]


def test_cluster_only_karpenter_pool():
    raw = {
        "serve": [],
        "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100", "capacity": "karpenter", "maxNodes": 3}]},
    }
    g = graph(raw, "konly")
    assert check(g) == []
    assert one(g, R.NODEPOOL).inputs["spec"]["limits"]["nodes"] == "3"


# --------------------------------------------------------------------------- capacity placeholders


def _placeholder_pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def test_placeholder_job_per_pool_asks_for_the_nodes_its_entries_fill():
    """Per Karpenter pool with unpaused entries one Job: as many pods as nodes the pool's DGDs fill (parallelism =
    completions), each selecting the pool's NodePool, tolerating its GPU taint, apart from the others by hostname,
    requesting a sliver (no GPU: the workers fit beside it), at the negative priority, never retried, ended after
    45 min, not awaited by `up`; one PriorityClass for the stack."""
    from stacks.catalog.fit import pack

    def pools(**scale):
        raw = {
            "imagePullSecrets": ["ngc-secret"],
            "cluster": {
                "mode": "eks",
                "region": "us-east-1",
                "gpuPools": [
                    {"gpu": "h100", "capacity": "karpenter", "maxNodes": 4},
                    {"gpu": "b200", "capacity": "karpenter", "maxNodes": 3},
                ],
            },
            "serve": [
                {"name": "a", "target": "lightning-vllm-disagg-h100-dspark", "namespace": "a", **scale},
                {"name": "b", "target": "lightning-vllm-agg-b200-mtp", "namespace": "b"},
            ],
        }
        program = build_program(raw, "kp", frozenset(SECRETS))
        return program, {p.name: p for p in program.cluster_plan.karpenter.pools}

    program, by_name = pools()
    kp = program.cluster_plan.karpenter
    assert set(by_name) == {"gpu", "gpu-b200"} and len(kp.placeholders()) == 2
    for e in program.entries:
        pool = next(p for p in kp.pools if p.gpu == e.plan.target.gpu)
        job = pool.placeholder
        spec, pod = job["spec"], _placeholder_pod(job)
        nodes = pack(e.plan.dgd, program.cluster_plan.gpu_pools[kp.pools.index(pool)].node_shape.capacity)[0]
        assert spec["parallelism"] == spec["completions"] == nodes == pool.nodes_needed >= 1, (pool.name, spec)
        assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], pod["restartPolicy"]) == (0, 45 * 60, "Never")
        assert job["metadata"]["namespace"] == K.NAMESPACE and job["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
        assert pod["nodeSelector"] == {K.NODEPOOL_LABEL: pool.name}
        taint = pool.nodepool["spec"]["template"]["spec"]["taints"][0]
        assert pod["tolerations"] == [{"operator": "Equal", **taint}]
        (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {
            "labelSelector": {"matchLabels": {K.PLACEHOLDER_LABEL: pool.name}},
            "topologyKey": "kubernetes.io/hostname",
        }
        assert spec["template"]["metadata"]["labels"][K.PLACEHOLDER_LABEL] == pool.name
        assert pod["priorityClassName"] == kp.priority_class["metadata"]["name"] == K.PLACEHOLDER_PRIORITY_CLASS
        (ctr,) = pod["containers"]
        assert ctr["image"] == versions()["images"]["capacity-placeholder"] == "registry.k8s.io/pause:3.10"
        assert ctr["resources"]["requests"] == {"cpu": "10m", "memory": "16Mi"}  # no GPU, no EFA
        assert "nvidia.com/gpu" not in json.dumps(ctr["resources"])
    assert kp.priority_class["value"] < 0 and kp.priority_class["preemptionPolicy"] == "Never"
    assert kp.priority_class["globalDefault"] is False
    assert [o["kind"] for o in kp.objects()] == ["EC2NodeClass"] * 2 + ["NodePool"] * 2 + ["PriorityClass", "Job", "Job"]
    # More replicas, more nodes, more placeholders (never above the pool's node limit).
    _, more = pools(replicas={"VllmDecodeWorker": 12})
    assert more["gpu"].placeholder["spec"]["parallelism"] > by_name["gpu"].placeholder["spec"]["parallelism"]


def test_no_placeholder_for_paused_entries_or_node_group_pools():
    from stacks.cli.cost import paused_raw

    raw = {
        "imagePullSecrets": ["ngc-secret"],
        "cluster": {
            "mode": "eks",
            "region": "us-east-1",
            "gpuPools": [{"gpu": "h100"}, {"gpu": "b200", "capacity": "karpenter", "maxNodes": 2}],
        },
        "serve": [
            {"name": "a", "target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
            {"name": "b", "target": "lightning-vllm-agg-b200-mtp", "namespace": "b"},
        ],
    }
    kp = build_program(raw, "mixed", frozenset(SECRETS)).cluster_plan.karpenter
    assert [p.name for p in kp.pools] == ["gpu-b200"] and [j["metadata"]["name"] for j in kp.placeholders()] == [
        "capacity-placeholder-gpu-b200"
    ]
    # The Karpenter pool's entry paused: no Job, no PriorityClass; the NodePool stays.
    raw["serve"][1]["paused"] = True
    kp = build_program(raw, "mixed", frozenset(SECRETS)).cluster_plan.karpenter
    assert kp.pools[0].placeholder is None and kp.priority_class is None and kp.placeholders() == []
    assert [o["kind"] for o in kp.objects()] == ["EC2NodeClass", "NodePool"]
    # The whole stack paused (as `stacks cost` pauses it), a single-target stack, and a cluster-only pool: none.
    paused = build_program(paused_raw(stack_config()), "kt", frozenset(SECRETS)).cluster_plan.karpenter
    assert paused.placeholders() == [] and paused.priority_class is None
    assert build_program(stack_config(), "kt", frozenset(SECRETS)).cluster_plan.karpenter.placeholders()
    only = {
        "serve": [],
        "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100", "capacity": "karpenter", "maxNodes": 3}]},
    }
    assert build_program(only, "konly", frozenset()).cluster_plan.karpenter.placeholders() == []
    # Node-group stacks plan nothing Karpenter at all.
    raw["cluster"]["gpuPools"][1].pop("capacity")
    raw["cluster"]["gpuPools"][1].pop("maxNodes")
    assert build_program(raw, "mixed", frozenset(SECRETS)).cluster_plan.karpenter is None


def test_placeholder_is_wired_after_its_nodepool_created_once_and_not_awaited():
    """components/cluster.py: the PriorityClass and each pool's Job, the Job after its NodePool and the PriorityClass,
    its spec never updated (a changed count would start a second round of placeholders), the skipAwait annotation on
    the object `up` applies; nothing of it on a node-group stack."""
    run = run_program(stack_config(), SECRETS, stack="kt")
    pool = run.one("kubernetes:karpenter.sh/v1:NodePool")
    (pc,) = run.by_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    (job,) = [r for r in run.by_type("kubernetes:batch/v1:Job") if r.name.endswith("-placeholder")]
    assert job.name == "cluster-karpenter-gpu-placeholder" and pc.name == "cluster-karpenter-placeholder-priority"
    assert {pool.urn, pc.urn} <= set(job.dependencies)
    assert job.ignore_changes == ["spec"]
    assert job.inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    assert pc.inputs["value"] == K.PLACEHOLDER_PRIORITY and pc.inputs["preemptionPolicy"] == "Never"
    ng = stack_config()
    ng["cluster"].pop("capacity")
    plain = run_program(ng, SECRETS, stack="kt")
    assert not plain.by_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    assert not [r for r in plain.by_type("kubernetes:batch/v1:Job") if r.name.endswith("-placeholder")]


# --------------------------------------------------------------------------- pure builders


def test_helm_pin_and_feature_gate():
    pin = versions()["charts"]["karpenter"]
    tool = (versions().get("toolchain") or {}).get("karpenter")
    # Both pins must exist: the simulated cluster's Karpenter core (toolchain.karpenter) is the chart's (charts.karpenter.core).
    assert tool, "stacks/registry/versions.yaml: toolchain.karpenter (the simulated cluster's Karpenter core) is not pinned"
    assert pin.get("core"), "stacks/registry/versions.yaml: charts.karpenter.core (the core the chart runs) is not pinned"
    assert pin.get("version"), "stacks/registry/versions.yaml: charts.karpenter.version is not pinned"
    assert pin["core"] == tool
    od = build_program(stack_config(), "kt", frozenset(SECRETS)).cluster_plan.karpenter
    cb = build_program(stack_config("capacity-block"), "kt", frozenset(SECRETS)).cluster_plan.karpenter
    assert od.helm.version == pin["version"] and od.helm.repo.startswith("oci://")
    assert "featureGates" not in od.helm.values["settings"]
    assert cb.helm.values["settings"]["featureGates"] == {"reservedCapacity": True}
    assert od.helm.values["settings"]["interruptionQueue"] == od.queue_name == od.cluster_name
    reads = lambda plan: next(s for s in plan.controller_policy["Statement"] if s["Sid"] == "AllowRegionalReadActions")["Action"]
    assert "ec2:DescribeCapacityReservations" in reads(cb) and "ec2:DescribeCapacityReservations" not in reads(od)


def test_capacity_type_mapping():
    assert K.capacity_type_for("on-demand", None) == ("on-demand", None)
    assert K.capacity_type_for("on-demand", CR) == ("reserved", "default")
    assert K.capacity_type_for("capacity-block", CR) == ("reserved", "capacity-block")


def test_add_do_not_disrupt_respects_selection():
    dgd = {
        "spec": {
            "components": [
                {"name": "w", "podTemplate": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}]}}},
                {"name": "f", "podTemplate": {"spec": {"containers": [{}]}}},
                {
                    "name": "other",
                    "podTemplate": {
                        "metadata": {"annotations": {"a": "b"}},
                        "spec": {"nodeSelector": {"p": "x"}, "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
                    },
                },
            ]
        }
    }
    assert K.add_do_not_disrupt(dgd, lambda pod: "nodeSelector" in pod) == ["other"]
    assert dgd["spec"]["components"][2]["podTemplate"]["metadata"]["annotations"] == {"a": "b", K.DO_NOT_DISRUPT: "true"}
    assert "metadata" not in dgd["spec"]["components"][0]["podTemplate"]


# --------------------------------------------------------------------------- config errors, before any resource


@pytest.mark.parametrize(
    "cluster, key, words",
    [
        ({"capacity": "autoscaler"}, "dynamo:cluster.capacity", ["'autoscaler'", "'node-group'", "'karpenter'"]),
        ({"capacity": "node-group", "maxNodes": 3}, "dynamo:cluster.maxNodes", ["only applies with", "capacity: karpenter"]),
        ({"gpuNodes": 2}, "dynamo:cluster.gpuNodes", ["maxNodes"]),
        ({"maxNodes": 0}, "dynamo:cluster.maxNodes", ["greater than or equal to 1"]),
        ({"consolidateAfter": "5 minutes"}, "dynamo:cluster.consolidateAfter", ["'5 minutes'", "10m"]),
        ({"amiAlias": "al2@latest"}, "dynamo:cluster.amiAlias", ["'al2@latest'", "al2023@latest"]),
        ({"placementGroup": True}, "dynamo:cluster.placementGroup", ["karpenter"]),
    ],
)
def test_bad_karpenter_config_names_key_value_and_choices(cluster, key, words):
    raw = stack_config(**cluster)
    with pytest.raises(ConfigError) as e:
        build_program(raw, "kt", frozenset(SECRETS))
    msg = str(e.value)
    assert key in msg, msg
    for w in words:
        assert w in msg, msg


def test_max_nodes_below_what_the_dgd_needs():
    raw = stack_config(maxNodes=1)
    raw["replicas"] = {"VllmDecodeWorker": 8}  # 9 one-GPU workers: two p5.48xlarge
    with pytest.raises(ConfigError, match=r"dynamo:cluster.maxNodes: 1 x p5.48xlarge cannot hold .* use at least 2"):
        build_program(raw, "kt", frozenset(SECRETS))


def test_pool_keys_and_refusals_per_pool():
    base = {
        "serve": [],
        "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100", "capacity": "karpenter"}]},
    }
    with pytest.raises(ConfigError, match=r"dynamo:cluster.gpuPools\[0\].maxNodes: not set"):
        build_program(base, "k", frozenset())
    gb = {
        "serve": [],
        "cluster": {
            "mode": "eks",
            "region": "us-east-1",
            "cacheStorage": "fsx-lustre",
            "gpuPools": [
                {
                    "gpu": "gb200",
                    "capacity": "karpenter",
                    "maxNodes": 2,
                    "marketType": "capacity-block",
                    "capacityReservationId": CR,
                    "availabilityZone": "us-east-1-dfw-2a",
                }
            ],
        },
    }
    with pytest.raises(ConfigError, match=r"gpuPools\[0\].capacity: karpenter: p6e-gb200.36xlarge .* use capacity: node-group"):
        build_program(gb, "k", frozenset())
    both = {
        "serve": [],
        "cluster": {"mode": "eks", "region": "us-east-1", "capacity": "karpenter", "gpuPools": [{"gpu": "h100", "maxNodes": 1}]},
    }
    with pytest.raises(ConfigError, match=r"dynamo:cluster.capacity: set per pool in dynamo:cluster.gpuPools"):
        build_program(both, "k", frozenset())


# --------------------------------------------------------------------------- each rule fails on the mistake it guards


def test_rule_requirements():
    g = graph(stack_config())
    np = one(g, R.NODEPOOL)
    reqs = np.inputs["spec"]["template"]["spec"]["requirements"]
    next(r for r in reqs if r["key"] == K.CAPACITY_TYPE_LABEL)["values"] = ["ondemand"]
    assert any("not in" in v for v in fails(g, R.karpenter_nodepool_requirements_are_valid))
    g = graph(stack_config())
    reqs = one(g, R.NODEPOOL).inputs["spec"]["template"]["spec"]["requirements"]
    next(r for r in reqs if r["key"] == "node.kubernetes.io/instance-type")["values"] = ["p4d.24xlarge"]
    assert any("not GPU instances" in v for v in fails(g, R.karpenter_nodepool_requirements_are_valid))
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["template"]["spec"]["requirements"].append(
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}
    )
    assert any("restricted" in v for v in fails(g, R.karpenter_nodepool_requirements_are_valid))
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["template"]["spec"]["requirements"].append(
        {"key": K.RESERVATION_TYPE_LABEL, "operator": "In", "values": ["default"]}
    )
    assert any("only for reserved" in v for v in fails(g, R.karpenter_nodepool_requirements_are_valid))
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "missing"
    assert any("no registered EC2NodeClass" in v for v in fails(g, R.karpenter_nodepool_requirements_are_valid))


def test_rule_reservation_selector():
    g = graph(stack_config())  # on-demand pool given a reservation it does not ask for
    one(g, R.EC2NODECLASS).inputs["spec"]["capacityReservationSelectorTerms"] = [{"id": CR}]
    assert any("does not ask for reserved" in v for v in fails(g, R.karpenter_reservation_selector_exactly_for_reserved))
    for cap in ("reservation", "capacity-block"):
        g = graph(stack_config(cap))
        del one(g, R.EC2NODECLASS).inputs["spec"]["capacityReservationSelectorTerms"]
        assert any(
            "selects no capacity reservation" in v for v in fails(g, R.karpenter_reservation_selector_exactly_for_reserved)
        )
        g = graph(stack_config(cap))
        del R._karpenter_release(g).inputs["values"]["settings"]["featureGates"]
        assert any("reservedCapacity" in v for v in fails(g, R.karpenter_reservation_selector_exactly_for_reserved))
        g = graph(stack_config(cap))
        pol = one(g, R.IAM_POLICY, "karpenter")
        doc = json.loads(pol.inputs["policy"])
        for st in doc["Statement"]:
            if isinstance(st["Action"], list) and "ec2:DescribeCapacityReservations" in st["Action"]:
                st["Action"].remove("ec2:DescribeCapacityReservations")
        pol.inputs["policy"] = json.dumps(doc)
        assert any("DescribeCapacityReservations" in v for v in fails(g, R.karpenter_reservation_selector_exactly_for_reserved))


def test_rule_nodeclass_role():
    g = graph(stack_config())
    one(g, R.EC2NODECLASS).inputs["spec"]["role"] = "KarpenterNodeRole-other"
    assert any("not an IAM role of this stack" in v for v in fails(g, R.karpenter_nodeclass_role_joins_the_cluster))
    g = graph(stack_config())
    one(g, R.ACCESS_ENTRY, "karpenter").inputs["type"] = "STANDARD"
    assert any("no EC2_LINUX access entry" in v for v in fails(g, R.karpenter_nodeclass_role_joins_the_cluster))
    g = graph(stack_config())
    pol = one(g, R.IAM_POLICY, "karpenter")
    pol.inputs["policy"] = pol.inputs["policy"].replace('karpenter-node"', 'karpenter-nodes"')
    assert any("iam:PassRole" in v for v in fails(g, R.karpenter_nodeclass_role_joins_the_cluster))


def test_rule_limits():
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["limits"] = {"nvidia.com/gpu": "8", "nodes": "0"}
    assert any("limits.nodes 0" in v for v in fails(g, R.karpenter_node_limits_hold_the_dgds))
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["limits"]["nvidia.com/gpu"] = "4"
    assert any("nvidia.com/gpu 4" in v for v in fails(g, R.karpenter_node_limits_hold_the_dgds))
    g = graph(stack_config())  # a taint the workers do not tolerate: they land on no pool
    one(g, R.NODEPOOL).inputs["spec"]["template"]["spec"]["taints"][0]["value"] = "other"
    assert any("lands on 0 GPU pools" in v for v in fails(g, R.karpenter_node_limits_hold_the_dgds))


def test_rule_discovery_tags():
    g = graph(stack_config())
    for sn in g.of(R.SUBNET):
        (sn.inputs.get("tags") or {}).pop(K.DISCOVERY_TAG, None)
    assert any("no subnet carries" in v for v in fails(g, R.karpenter_discovery_tags_match_the_selectors))
    g = graph(stack_config())
    zone = R._req_values(one(g, R.NODEPOOL), "topology.kubernetes.io/zone")[0]
    for sn in g.of(R.SUBNET):
        if sn.inputs.get("availabilityZone") == zone:
            (sn.inputs.get("tags") or {}).pop(K.DISCOVERY_TAG, None)
    assert any("in zones" in v for v in fails(g, R.karpenter_discovery_tags_match_the_selectors))
    g = graph(stack_config())
    g.resources = [r for r in g.resources if r.type != R.EC2_TAG]
    assert any("cluster security group" in v for v in fails(g, R.karpenter_discovery_tags_match_the_selectors))


def test_rule_interruption_queue():
    g = graph(stack_config())
    R._karpenter_release(g).inputs["values"]["settings"]["interruptionQueue"] = "other"
    assert any("names no SQS queue" in v for v in fails(g, R.karpenter_interruption_queue_is_wired))
    g = graph(stack_config())
    g.resources = [r for r in g.resources if not (r.type == R.EVENT_TARGET and r.name.endswith("rebalance"))]
    assert any("Rebalance" in v for v in fails(g, R.karpenter_interruption_queue_is_wired))
    g = graph(stack_config())
    one(g, R.SQS_QUEUE).inputs["messageRetentionSeconds"] = 1209600
    assert any("messageRetentionSeconds" in v for v in fails(g, R.karpenter_interruption_queue_is_wired))
    g = graph(stack_config())
    pol = one(g, R.SQS_QUEUE_POLICY)
    pol.inputs["policy"] = pol.inputs["policy"].replace("events.amazonaws.com", "sns.amazonaws.com")
    assert any("events.amazonaws.com" in v for v in fails(g, R.karpenter_interruption_queue_is_wired))
    # the policy earlier versions wrote: no DenyHTTP (the getting-started CloudFormation denies sqs:* without TLS)
    g = graph(stack_config())
    pol = one(g, R.SQS_QUEUE_POLICY)
    doc = json.loads(pol.inputs["policy"])
    assert [st for st in doc["Statement"] if st.get("Sid") == "DenyHTTP"] == [
        {
            "Sid": "DenyHTTP",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": doc["Statement"][0]["Resource"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    ]
    doc["Statement"] = [st for st in doc["Statement"] if st.get("Sid") != "DenyHTTP"]
    pol.inputs["policy"] = json.dumps(doc)
    assert any("does not deny requests without TLS" in v for v in fails(g, R.karpenter_interruption_queue_is_wired))


def test_rule_controller_identity():
    g = graph(stack_config())
    one(g, R.POD_IDENTITY).inputs["serviceAccount"] = "karpenter-controller"
    assert any("no Pod Identity association" in v for v in fails(g, R.karpenter_controller_has_its_identity))
    g = graph(stack_config())
    g.resources = [
        r for r in g.resources if not (r.type == R.EKS_ADDON and r.inputs.get("addonName") == "eks-pod-identity-agent")
    ]
    assert any("eks-pod-identity-agent" in v for v in fails(g, R.karpenter_controller_has_its_identity))


def test_rule_do_not_disrupt():
    g = graph(stack_config())
    for c in one(g, R.DGD).inputs["spec"]["components"]:
        c["podTemplate"].pop("metadata", None)
    assert any(K.DO_NOT_DISRUPT in v for v in fails(g, R.karpenter_serving_workers_are_not_disrupted))
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["disruption"]["consolidationPolicy"] = "WhenEmptyOrUnderutilized"
    assert any("not WhenEmpty" in v for v in fails(g, R.karpenter_serving_workers_are_not_disrupted))


def test_rule_disruption_budgets():
    """The NodePool's budgets: one GPU node at a time for drift and consolidation, always; removing them (Karpenter's
    default is 10% of the pool for every reason), widening one, or putting it on a schedule fails the rule."""
    g = graph(stack_config())
    assert R.karpenter_serving_workers_are_not_disrupted(g) == []
    assert one(g, R.NODEPOOL).inputs["spec"]["disruption"]["budgets"] == [
        {"nodes": "100%", "reasons": ["Empty"]},
        {"nodes": "1", "reasons": ["Drifted", "Underutilized"]},
    ]
    g = graph(stack_config())
    del one(g, R.NODEPOOL).inputs["spec"]["disruption"]["budgets"]
    v = fails(g, R.karpenter_serving_workers_are_not_disrupted)
    assert (
        any("no disruption budgets" in m for m in v)
        and any("for Drifted" in m for m in v)
        and any("for Underutilized" in m for m in v)
    )
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["disruption"]["budgets"][1]["nodes"] = "10%"
    assert any("for Drifted" in m for m in fails(g, R.karpenter_serving_workers_are_not_disrupted))
    g = graph(stack_config())
    one(g, R.NODEPOOL).inputs["spec"]["disruption"]["budgets"][1].update(schedule="@daily", duration="1h")
    assert any("for Underutilized" in m for m in fails(g, R.karpenter_serving_workers_are_not_disrupted))
    g = graph(stack_config())  # one budget for every reason, one node at a time: as strict, passes
    one(g, R.NODEPOOL).inputs["spec"]["disruption"]["budgets"] = [{"nodes": "1"}]
    assert R.karpenter_serving_workers_are_not_disrupted(g) == []


def test_karpenter_is_told_its_region_because_its_pod_cannot_ask_the_node():
    """karpenter-provider-aws v1.13.1 asks IMDS for the Region when the SDK finds none (pkg/operator/operator.go, read
    from the Go module proxy) and exits on failure; the system nodes' hop count 1 refuses a pod, so the chart's
    controller.env carries AWS_REGION, the stack's own Region."""
    operator = (
        go_module_dir("github.com/aws/karpenter-provider-aws", f"v{versions()['charts']['karpenter']['version']}")
        / "pkg/operator/operator.go"
    ).read_text()
    assert 'if cfg.Region == "" {' in operator and "imds.NewFromConfig(cfg).GetRegion" in operator
    region = "eu-north-1"
    g = graph(stack_config(region=region))
    rel = R._karpenter_release(g)
    assert {"name": "AWS_REGION", "value": region} in rel.inputs["values"]["controller"]["env"]
    assert R.karpenter_controller_knows_its_region(g) == []
    rel.inputs["values"]["controller"].pop("env")  # the values the chart had before: no region
    v = R.karpenter_controller_knows_its_region(g)
    assert len(v) == 1 and "AWS_REGION" in v[0]


def test_every_karpenter_rule_cites_its_source_and_is_exercised_here():
    import inspect

    src = inspect.getsource(inspect.getmodule(test_rule_requirements))
    for fn in KARPENTER_RULES:
        assert "Source:" in fn.__doc__, fn.__name__
        assert f"R.{fn.__name__}" in src, f"{fn.__name__} has no failing-graph test"


# --------------------------------------------------------------------------- the objects against Karpenter's own CRDs


def _crd_schema(path) -> dict:
    return yaml_text.load(path.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _schema_errors(x, s: dict, path: str) -> list[str]:
    """Structural OpenAPI v3 check (types, required, unknown fields, enums, patterns); CEL rules are left to the API
    server (the engine tests apply NodePools to a real one)."""
    t, out = s.get("type"), []
    if s.get("x-kubernetes-int-or-string"):
        return out
    if t == "object":
        if not isinstance(x, dict):
            return [f"{path}: not an object"]
        out += [f"{path}: missing {r}" for r in s.get("required", []) if r not in x]
        props, extra = s.get("properties"), s.get("additionalProperties")
        for k, v in x.items():
            if props is not None:
                out += [f"{path}.{k}: unknown field"] if k not in props else _schema_errors(v, props[k], f"{path}.{k}")
            elif isinstance(extra, dict):
                out += _schema_errors(v, extra, f"{path}.{k}")
    elif t == "array":
        if not isinstance(x, list):
            return [f"{path}: not an array"]
        for i, v in enumerate(x):
            out += _schema_errors(v, s["items"], f"{path}[{i}]")
    elif t == "string":
        if not isinstance(x, str):
            return [f"{path}: {x!r} not a string"]
        if "enum" in s and x not in s["enum"]:
            out.append(f"{path}: {x!r} not in {s['enum']}")
        if "pattern" in s and not re.search(s["pattern"], x):
            out.append(f"{path}: {x!r} does not match {s['pattern']}")
    elif t == "integer" and (not isinstance(x, int) or isinstance(x, bool)):
        out.append(f"{path}: {x!r} not an integer")
    elif t == "boolean" and not isinstance(x, bool):
        out.append(f"{path}: {x!r} not a boolean")
    return out


def test_objects_match_the_pinned_crds():
    """The EC2NodeClass against github.com/aws/karpenter-provider-aws at the chart's version, the NodePool against the
    core the chart runs (sigs.k8s.io/karpenter), both downloaded from the Go module proxy."""
    pin = versions()["charts"]["karpenter"]
    core = go_module_dir("sigs.k8s.io/karpenter", pin["core"])
    aws = go_module_dir("github.com/aws/karpenter-provider-aws", f"v{pin['version']}")
    bad = copy.deepcopy(build_program(stack_config(), "kt", frozenset(SECRETS)).cluster_plan.karpenter.pools[0])
    bad.nodepool["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    bad.ec2nodeclass["spec"]["capacityReservationSelectorTerms"] = [{"id": "reservation-1"}]
    nodepools = _crd_schema(core / "pkg/apis/crds/karpenter.sh_nodepools.yaml")
    nodeclasses = _crd_schema(aws / "pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml")
    for kind in CAPACITY:
        pool = build_program(stack_config(kind), "kt", frozenset(SECRETS)).cluster_plan.karpenter.pools[0]
        assert _schema_errors(pool.nodepool, nodepools, "NodePool") == []
        assert _schema_errors(pool.ec2nodeclass, nodeclasses, "EC2NodeClass") == []
    assert _schema_errors(bad.nodepool, nodepools, "NodePool")
    assert _schema_errors(bad.ec2nodeclass, nodeclasses, "EC2NodeClass")


def test_aws_name_limits_are_checked_before_any_resource():
    # EventBridge rule names (PutRule Name, at most 64) are <cluster>-<rule>, the longest rule "state-change"; IAM role
    # names fit whatever the cluster name (stacks.cluster.identity.role_name), the Region kept in a hash when long.
    ok = "s" * (64 - len("-state-change") - len("dynamo-"))
    kp = build_program(stack_config(), ok, frozenset(SECRETS)).cluster_plan.karpenter
    assert f"dynamo-{ok}-state-change" in {r["rule_name"] for r in kp.rules}
    assert len(kp.node_role_name) <= 64 and len(kp.controller_role_name) <= 64 and kp.node_role_name != kp.controller_role_name
    with pytest.raises(
        ConfigError,
        match=r"stack name: .* longer than AWS's 64 characters; .* at most 51 characters: use a stack name 1 characters shorter",
    ):
        build_program(stack_config(), ok + "s", frozenset(SECRETS))


def test_crd_chart_installs_before_the_controller():
    g = graph(stack_config())
    crd = next(r for r in g.of(R.HELM) if str(r.inputs.get("chart", "")).endswith("/karpenter-crd"))
    ctl = R._karpenter_release(g)
    assert crd.inputs["version"] == ctl.inputs["version"] == versions()["charts"]["karpenter"]["version"]
    assert crd.urn in ctl.dependencies and ctl.inputs.get("skipCrds") is True
    for cr in g.of(R.NODEPOOL) + g.of(R.EC2NODECLASS):
        assert ctl.urn in cr.dependencies


# --------------------------------------------------------------------------- the controller policy against Karpenter's own


# The controller statements of Karpenter v1.13's getting-started CloudFormation, Sid -> actions, as
# aws/karpenter-provider-aws website/content/en/v1.13/reference/cloudformation.md @d8ef6953 reproduces them (the file is
# the tag's website/content/en/preview/getting-started/getting-started-with-karpenter/cloudformation.yaml; website/ is not
# in the Go module github.com/aws/karpenter-provider-aws@v1.13.1, so the list is stored here). Checked against
# website/content/en/v1.12/getting-started/getting-started-with-karpenter/cloudformation.yaml @1698d22d (the same actions;
# there ec2:DescribeInstanceStatus is its own statement, AllowUnscopedEC2DescribeInstanceStatus).
UPSTREAM_VERSION = "1.13"
UPSTREAM_CONTROLLER_ACTIONS = {
    "AllowScopedEC2InstanceAccessActions": {"ec2:RunInstances", "ec2:CreateFleet"},
    "AllowScopedEC2LaunchTemplateAccessActions": {"ec2:RunInstances", "ec2:CreateFleet"},
    "AllowScopedEC2InstanceActionsWithTags": {"ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"},
    "AllowScopedResourceCreationTagging": {"ec2:CreateTags"},
    "AllowScopedResourceTagging": {"ec2:CreateTags"},
    "AllowScopedDeletion": {"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"},
    "AllowPassingInstanceRole": {"iam:PassRole"},
    "AllowScopedInstanceProfileCreationActions": {"iam:CreateInstanceProfile"},
    "AllowScopedInstanceProfileTagActions": {"iam:TagInstanceProfile"},
    "AllowScopedInstanceProfileActions": {
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:DeleteInstanceProfile",
    },
    "AllowAPIServerEndpointDiscovery": {"eks:DescribeCluster"},
    "AllowInterruptionQueueActions": {"sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"},
    "AllowZonalShiftStatusReadOnly": {"arc-zonal-shift:GetManagedResource"},
    "AllowRegionalReadActions": {
        "ec2:DescribeCapacityReservations",
        "ec2:DescribeImages",
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceStatus",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribePlacementGroups",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeSubnets",
    },
    "AllowSSMReadActions": {"ssm:GetParameter"},
    "AllowPricingReadActions": {"pricing:GetProducts"},
    "AllowUnscopedInstanceProfileListAction": {"iam:ListInstanceProfiles"},
    "AllowInstanceProfileReadActions": {"iam:GetInstanceProfile"},
}
# Upstream actions this policy leaves out, each with the condition under which v1.13.1 never calls it (checked below
# against the plan where it is the plan's own).
LEFT_OUT = {
    "arc-zonal-shift:GetManagedResource": "only with settings.enableZonalShift (pkg/operator/operator.go EnableZonalShift)",
    "ec2:DescribePlacementGroups": "only for an EC2NodeClass placementGroupSelector (pkg/providers/placementgroup/provider.go)",
}
RESERVED_ONLY = {
    "ec2:DescribeCapacityReservations"
}  # only for capacityReservationSelectorTerms (pkg/providers/capacityreservation)


def _policy_actions(doc: dict) -> dict[str, set]:
    out: dict[str, set] = {}
    for st in doc["Statement"]:
        assert st["Effect"] == "Allow", st
        acts = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        out.setdefault(st["Sid"], set()).update(acts)
    return out


def _plans():
    return {kind: build_program(stack_config(kind), "kt", frozenset(SECRETS)).cluster_plan.karpenter for kind in CAPACITY}


def test_controller_policy_is_the_pinned_getting_started_policy():
    """Every statement of the pinned version's getting-started policy, action for action, less only LEFT_OUT (and
    DescribeCapacityReservations on a pool without reservations); nothing upstream does not grant. A pin bump past
    1.13 fails here until the list above is re-read from that version's cloudformation.yaml."""
    pin = versions()["charts"]["karpenter"]["version"]
    assert pin.split(".")[:2] == UPSTREAM_VERSION.split("."), (
        f"charts.karpenter {pin}: re-derive UPSTREAM_CONTROLLER_ACTIONS from that version's cloudformation.yaml"
    )
    for kind, plan in _plans().items():
        drop = set(LEFT_OUT) | (set() if plan.pools[0].capacity_type == "reserved" else RESERVED_ONLY)
        want = {sid: acts - drop for sid, acts in UPSTREAM_CONTROLLER_ACTIONS.items() if acts - drop}
        assert _policy_actions(plan.controller_policy) == want, kind
        # The conditions under which the left-out actions are never called hold for this plan.
        assert "enableZonalShift" not in plan.helm.values["settings"]
        assert "placementGroupSelector" not in plan.pools[0].ec2nodeclass["spec"]
        assert ("capacityReservationSelectorTerms" in plan.pools[0].ec2nodeclass["spec"]) == (
            plan.pools[0].capacity_type == "reserved"
        )
    lst = next(
        s for s in _plans()["on-demand"].controller_policy["Statement"] if s["Sid"] == "AllowUnscopedInstanceProfileListAction"
    )
    assert lst["Resource"] == "*"  # a List action: IAM scopes it to no instance profile


def _sdk_actions(sdk_go: str) -> set[str]:
    """IAM actions of the AWS calls in the provider's pkg/aws/sdk.go interfaces (EC2API -> ec2:..., IAMAPI -> iam:...)."""
    prefix = {
        "EC2API": "ec2",
        "IAMAPI": "iam",
        "EKSAPI": "eks",
        "PricingAPI": "pricing",
        "SSMAPI": "ssm",
        "SQSAPI": "sqs",
        "ARCZonalShiftAPI": "arc-zonal-shift",
        "TimestreamWriteAPI": "timestream",
    }
    out = set()
    for name, body in re.findall(r"type (\w+) interface \{(.*?)\n\}", sdk_go, re.S):
        assert name in prefix, f"pkg/aws/sdk.go: new AWS client interface {name}: map it to its IAM service"
        out |= {f"{prefix[name]}:{m}" for m in re.findall(r"^\s*(\w+)\(", body, re.M)}
    return out


def test_controller_policy_covers_the_pinned_providers_aws_calls():
    """Every AWS call of github.com/aws/karpenter-provider-aws at the chart's version (pkg/aws/sdk.go, from the Go module
    proxy as the CRD check) is granted, left out with its reason, or never made by the controller; every granted action
    but iam:PassRole (a permission EC2 checks on RunInstances/CreateFleet, no API) is one of those calls."""
    pin = versions()["charts"]["karpenter"]
    aws = go_module_dir("github.com/aws/karpenter-provider-aws", f"v{pin['version']}")
    calls = _sdk_actions((aws / "pkg/aws/sdk.go").read_text())
    assert {"iam:ListInstanceProfiles", "ec2:DescribeInstanceStatus"} <= calls
    not_by_the_controller = {  # declared in sdk.go, called only by test/ (the e2e suites), not by pkg/ or cmd/
        "iam:GetRole": "test/pkg/environment/aws/expectations.go",
        "sqs:SendMessage": "test/ (pkg/providers/sqs wrapper, no caller)",
        "timestream:WriteRecords": "test/pkg/environment/aws/metrics.go",
    }
    granted = set().union(*_policy_actions(_plans()["reservation"].controller_policy).values())
    assert calls - granted - set(LEFT_OUT) - set(not_by_the_controller) == set()
    assert granted - calls == {"iam:PassRole"}
    assert set(LEFT_OUT) <= calls and set(not_by_the_controller) <= calls
    assert granted <= set().union(*UPSTREAM_CONTROLLER_ACTIONS.values())


def test_interruption_rules_are_the_messages_the_pinned_controller_parses():
    """One EventBridge rule per interruption message github.com/aws/karpenter-provider-aws parses at the chart's
    version (pkg/controllers/interruption/messages/*/parser.go: Source and DetailType), no more, no fewer."""
    from stacks.cluster.karpenter import INTERRUPTION_RULES

    pin = versions()["charts"]["karpenter"]
    aws = go_module_dir("github.com/aws/karpenter-provider-aws", f"v{pin['version']}")
    parsed = set()
    for parser in sorted((aws / "pkg/controllers/interruption/messages").glob("*/parser.go")):
        text = parser.read_text()
        detail = re.search(r'func \(p Parser\) DetailType\(\) string \{\s*return "([^"]+)"', text)
        source = re.search(r'func \(p Parser\) Source\(\) string \{\s*return "([^"]+)"', text)
        if detail is None and source is None:
            continue  # not an EventBridge message (e.g. the instance status poller)
        assert detail and source, f"{parser}: a parser without both Source and DetailType"
        parsed.add((source[1], detail[1]))
    assert len(parsed) >= 5, parsed  # the five of v1.13.1: a regex that finds nothing must not pass
    assert {(src, dt) for _, src, dt in INTERRUPTION_RULES} == parsed


# --------------------------------------------------------------------------- EFA pools name their interfaces


def _efa_pool(topology: str = "disagg"):
    program = build_program({**stack_config(), "topology": topology}, "kt", frozenset(SECRETS))
    (pool,) = program.cluster_plan.karpenter.pools
    return program, pool


def test_efa_pool_names_one_primary_and_one_efa_only_interface_per_efa_card():
    """The instance's EFA count comes from the reference's AWS facts; the layout rules from the EC2NodeClass CRD's
    validations (one primary ``interface`` at card 0 / device 0, unique (card, device), one ``efa-only`` per card) and
    Karpenter's EFA capacity (the count of ``efa-only`` interfaces)."""
    import aws_reference

    program, pool = _efa_pool()
    facts = aws_reference.instance(pool.instance_type)
    interfaces = pool.ec2nodeclass["spec"]["networkInterfaces"]
    assert [i for i in interfaces if i["interfaceType"] == "interface"] == [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    ]
    efa_only = [i for i in interfaces if i["interfaceType"] == "efa-only"]
    assert len(efa_only) == aws_reference.efa_interfaces(pool.instance_type)
    assert len({i["networkCardIndex"] for i in efa_only}) == len(efa_only)  # one per card
    assert len({(i["networkCardIndex"], i["deviceIndex"]) for i in interfaces}) == len(interfaces)
    assert all(0 <= i["networkCardIndex"] < facts.network_cards for i in interfaces)
    # The same EFA devices as the node groups' launch template would give the instance.
    from stacks.cluster.pools import network_interfaces

    (gpu_pool,) = [p for p in program.cluster_plan.gpu_pools if p.capacity == "karpenter"]
    lt = network_interfaces(gpu_pool.shape, True)
    assert len(efa_only) == len([i for i in lt if i.get("interface_type") in ("efa", "efa-only")])


def test_pool_without_efa_workers_names_no_interfaces():
    program, pool = _efa_pool("agg")
    (gpu_pool,) = [p for p in program.cluster_plan.gpu_pools if p.capacity == "karpenter"]
    assert gpu_pool.efa is False
    assert "networkInterfaces" not in pool.ec2nodeclass["spec"]


def _drop_interfaces(spec):
    del spec["networkInterfaces"]


def _efa_only_primary(spec):
    spec["networkInterfaces"][0]["interfaceType"] = "efa-only"


def _two_efa_on_one_card(spec):
    spec["networkInterfaces"].append({"networkCardIndex": 0, "deviceIndex": 2, "interfaceType": "efa-only"})


def _one_card_missing(spec):
    spec["networkInterfaces"].pop()


@pytest.mark.parametrize(
    "mistake, words",
    [
        (_drop_interfaces, "names no networkInterfaces"),
        (_efa_only_primary, "not one 'interface'"),
        (_two_efa_on_one_card, "more than one efa-only interface on a card"),
        (_one_card_missing, "has EFA on"),
    ],
    ids=lambda x: getattr(x, "__name__", "words"),
)
def test_rule_karpenter_efa_interfaces(mistake, words):
    g = graph(stack_config())
    assert R.karpenter_efa_pools_name_their_interfaces(g) == []
    nc = one(g, R.EC2NODECLASS)
    mistake(nc.inputs["spec"])
    assert any(words in v for v in fails(g, R.karpenter_efa_pools_name_their_interfaces))
