"""GPU node groups: node labels and taints, launch templates (EFA interfaces, RAID0 local storage, capacity
reservations and Capacity Blocks), scaling, what one node offers the scheduler (``NodeShape``), packing a DGD's
workers onto nodes (``pack``), ``build_gpu_pool``, and the helpers for several GPU pools on one cluster (tolerations,
pinning a worker to its GPU product, combined DGDs)."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional

from stacks import catalog
from stacks.catalog.fit import NODE_RESOURCES, pack, pod_requests  # noqa: F401 (the cluster package's names)
from stacks.catalog.model import Target
from stacks.config.keys import NS, ConfigError
from stacks.registry.gpus import InstanceShape, shape_for
from stacks.cluster.identity import launch_template_metadata
from stacks.config.eks import MAX_KARPENTER_NODES, MAX_NODES_PER_NODEGROUP, EksConfig


GPU_TAINT_KEY = "nvidia.com/gpu"
POOL_LABEL = "dynamo.nvidia.com/pool"
EFA_LABEL = "vpc.amazonaws.com/efa.present"
AMI_TYPE = {"x86_64": "AL2023_x86_64_NVIDIA", "arm64": "AL2023_ARM_64_NVIDIA"}
GPU_UPDATE_CONFIG = {"max_unavailable": 1, "update_strategy": "MINIMAL"}
# How long `up` waits for a GPU node group's update: MINIMAL replaces one node at a time (drain, terminate, launch a
# p5/p6, its AMI's RAID0 and EFA set-up, Ready), budgeted 30 min a node (a wait's budget, not its expected time:
# stacks/registry/durations.yaml estimates a GPU node's boot at 8 min, and Karpenter gives a node 15 min to register),
# never less than the provider's 60 min default.
GPU_NODE_REPLACE_MINUTES = 30


def update_timeout_minutes(nodes: int) -> int:
    return max(60, GPU_NODE_REPLACE_MINUTES * max(nodes, 1))


def scaling_config(count: int, capacity_block: bool) -> dict:
    """The GPU node group's scalingConfig, sent whole on create and on every update that changes it (pulumi-aws
    wraps terraform-provider-aws, whose node group update sends ``scaling_config`` min, max and desired in one
    UpdateNodegroupConfig: internal/service/eks/node_group.go). EKS checks min <= desired <= max on that request
    ("Minimum capacity N can't be greater than desired size M", terraform-aws-eks issues 748, 2030, 3683, where
    ignore_changes kept the old desired size). The program owns the desired size: it is never in ignoreChanges, so
    a resize sends the new desired size with the new bounds and every step keeps min <= desired <= max.
    On-demand and reserved groups are fixed at ``count``; a Capacity Block group may go to zero (EKS scales it in
    when the block ends: min 0), and its desired size is ``count`` so a scale-up adds nodes."""
    return {"desired_size": count, "min_size": 0 if capacity_block else count, "max_size": count}


@dataclass
class NodeShape:
    """What one node of a group offers the scheduler."""

    name: str
    labels: dict[str, str]
    taints: list[dict]
    capacity: dict[str, int]
    count: int


@dataclass
class GpuPool:
    """One GPU node group: ``name`` is ``gpu`` for the first (resource names ``cluster-gpu``) and ``gpu-<gpu>`` for
    the others; ``nodes_needed``: what its entries' DGDs need (0 for a cluster-only pool)."""

    name: str
    gpu: str
    nodegroup: dict
    launch_template: dict
    placement_group: Optional[dict]
    shape: InstanceShape
    node_shape: NodeShape
    efa: bool
    nodes_needed: int
    gpus: int = 0
    # The nodes the entries' GPU pods fill as planned (paused components at 0 replicas count none): a Karpenter pool's
    # capacity placeholders (stacks/cluster/karpenter.py). ``nodes_needed`` is at least 1 for a pool entries size.
    nodes_running: int = 0
    # "node-group" (the managed node group above) or "karpenter" (a NodePool; nodegroup and launch_template then only
    # describe the nodes, nothing registers them). ``karpenter``: max_nodes, consolidate_after, ami_alias, market_type,
    # capacity_reservation_id, zone.
    capacity: str = "node-group"
    karpenter: Optional[dict] = None


# A GPU node group's tag holding a digest of what its launch template is made of (the plan's launch template and
# placement group): a change of it is a new launch template version, which EKS applies as a version update of the group.
# `up` compares the live group's tag with the plan's before any resource (stacks.config.eks.check_capacity_block_launch_templates).
LAUNCH_TEMPLATE_DIGEST_TAG = "dynamo.nvidia.com/launch-template-digest"


def launch_template_digest(pool: "GpuPool") -> str:
    """A digest of the plan's launch template of ``pool`` and its placement group: equal digests, the same launch
    template version content; different, a new version (a version update of the node group)."""
    text = json.dumps({"launch_template": pool.launch_template, "placement_group": pool.placement_group}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def gpu_taint_for(t: Target) -> dict:
    """The GPU taint the target's workers tolerate (Equal value wins, else ``true``)."""
    dgd = next(d for d in catalog.recipe_objects(t) if d["kind"] == "DynamoGraphDeployment")
    for comp in dgd["spec"]["components"]:
        for tol in comp["podTemplate"]["spec"].get("tolerations") or []:
            if tol.get("key") == GPU_TAINT_KEY and tol.get("operator", "Equal") == "Equal":
                return {"key": GPU_TAINT_KEY, "value": tol["value"], "effect": "NO_SCHEDULE"}
    return {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}


def node_user_data(raid0: bool) -> str:
    """A GPU node's user data: a MIME multipart with one nodeadm NodeConfig part, which EKS (managed node groups) and
    Karpenter (an EC2NodeClass's ``userData``) merge with the NodeConfig they generate (cluster name, endpoint, CA).

    - ``featureGates: {FastImagePull: true}``: containerd pulls image layers in parallel through the SOCI snapshotter
      (on instance-store RAID0 it lives on the NVMe array), which nodeadm enables on nodes of at least 4 CPUs and 7 GiB
      (awslabs/amazon-eks-ami nodeadm internal/containerd/config.go ``UseSOCISnapshotter``; api/v1alpha1
      nodeconfig_types.go ``FastImagePull``). A misspelled gate is ignored without a word, so tests/test_nodeadm.py runs
      every rendered user data through nodeadm's own code.
    - ``instance.localStorage.strategy: RAID0`` (``raid0``): the instance-store NVMe as one RAID0 array for containerd
      and the kubelet. A Karpenter EC2NodeClass says it with ``instanceStorePolicy: RAID0`` instead.

    A change of this text is a new launch template version (every GPU node of the group is replaced, one at a time:
    ``GPU_UPDATE_CONFIG``) or an EC2NodeClass drift (Karpenter replaces the nodes; serving pods carry do-not-disrupt)."""
    storage = "  instance:\n    localStorage:\n      strategy: RAID0\n" if raid0 else ""
    return (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="BOUNDARY"\n\n--BOUNDARY\n'
        "Content-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n"
        f"{storage}  featureGates:\n    FastImagePull: true\n\n--BOUNDARY--\n"
    )


NODEADM_USER_DATA = node_user_data(raid0=True)  # the GPU node groups' launch templates


def network_interfaces(shape: InstanceShape, efa: bool) -> list[dict]:
    """One interface per EFA network card of the instance (``shape.efa_cards``): the primary (card 0, device 0)
    is ``efa`` (EFA + ENA) when card 0 carries EFA, else a plain ENA interface; the others are ``efa-only``
    (EC2 user guide, efa-acc-inst-types: an EFA-only interface cannot be the primary one)."""
    if not efa:
        return [{"device_index": 0, "network_card_index": 0, "delete_on_termination": True}]
    out: list[dict[str, Any]] = []
    if 0 not in shape.efa_cards:
        out.append({"device_index": 0, "network_card_index": 0, "delete_on_termination": True})
    for card in shape.efa_cards:
        out.append(
            {
                "device_index": 0,
                "network_card_index": card,
                "interface_type": "efa" if card == 0 else "efa-only",
                "delete_on_termination": True,
            }
        )
    return out


def _dgd(target: Target) -> dict:
    return next(d for d in catalog.recipe_objects(target) if d["kind"] == "DynamoGraphDeployment")


def _key(prefix: str, name: str) -> str:
    """``dynamo:cluster.gpuNodes`` for the cluster's one GPU group, ``dynamo:cluster.gpuPools[i].nodes`` for a pool."""
    if prefix.endswith("]"):
        name = {"gpuNodes": "nodes", "gpuAvailabilityZone": "availabilityZone"}.get(name, name)
    return f"{prefix}.{name}"


def build_gpu_pool(
    cfg: EksConfig, gpu: str, dgd: Optional[dict], what: str, taint: dict, key: str = f"{NS}:cluster", name: str = "gpu"
) -> GpuPool:
    """One GPU node group: ``cfg`` carries its settings (``EksConfig.pool_for``), ``dgd`` the GPU and EFA requests it
    must hold (the sum of the entries of this GPU; None: a cluster-only pool, sized by its ``nodes``), ``what`` names
    them in errors, ``key`` is where its settings live (``dynamo:cluster`` or ``dynamo:cluster.gpuPools[i]``)."""
    try:
        shape = shape_for(gpu, cfg.instance_type)
    except ValueError as e:
        raise ConfigError(f"{_key(key, 'instanceType')}: {e}") from None
    comps = dgd["spec"]["components"] if dgd else []
    efa_workers = [c["name"] for c in comps if pod_requests(c["podTemplate"]["spec"]).get("vpc.amazonaws.com/efa")]
    # EFA serves traffic between instances (OS-bypass with other instances of the subnet; a cluster placement group
    # minimises latency between instances: AWS ParallelCluster user guide, "Elastic Fabric Adapter"). With a known
    # DGD whose workers request no EFA device (aggregated targets: no KV transfer, every worker on one node) the
    # group gets no EFA interfaces and, by default, no placement group. A pool no entry sizes keeps EFA for the
    # serving stacks that come later.
    efa = (shape.efa_interfaces > 0 and (dgd is None or bool(efa_workers))) if cfg.efa is None else cfg.efa
    if efa_workers and not efa:
        raise ConfigError(
            f"{_key(key, 'efa')}: false, but {', '.join(efa_workers)} of {what} request vpc.amazonaws.com/efa (KV transfer over EFA); "
            f"remove {_key(key, 'efa')} (EFA is on by default for {shape.instance_type}) or choose an aggregated target"
        )
    if shape.ultraserver and cfg.market_type != "capacity-block":
        raise ConfigError(
            f"{_key(key, 'marketType')}: {cfg.market_type!r}: {shape.instance_type} is sold only in UltraServer Capacity Blocks "
            f"(u-p6e-gb200x36, u-p6e-gb200x72); set {_key(key, 'marketType')}: capacity-block and {_key(key, 'capacityReservationId')} "
            "(EKS user guide, ml-eks-nvidia-ultraserver)"
        )
    capacity = {"nvidia.com/gpu": shape.gpus_per_node}
    if efa:
        capacity["vpc.amazonaws.com/efa"] = shape.efa_interfaces
    karpenter = cfg.capacity == "karpenter"
    if karpenter and shape.ultraserver:
        raise ConfigError(
            f"{_key(key, 'capacity')}: karpenter: {shape.instance_type} is sold only in UltraServer Capacity Blocks, "
            "which this project builds as managed node groups (with the DRA driver and ComputeDomain); use capacity: node-group"
        )
    if dgd is None:
        needed, gpus, running = 0, 0, 0
        if karpenter:
            if cfg.max_nodes is None:
                raise ConfigError(
                    f"{_key(key, 'maxNodes')}: not set; a Karpenter pool that no serving entry of this stack sizes needs "
                    f"its node limit (1-{MAX_KARPENTER_NODES})"
                )
        elif cfg.gpu_nodes is None:
            raise ConfigError(
                f"{_key(key, 'gpuNodes')}: not set; a pool that no serving entry of this stack sizes needs its node count "
                f"(1-{MAX_NODES_PER_NODEGROUP})"
            )
    else:
        needed, too_big = pack(dgd, capacity)
        if too_big:
            raise ConfigError(
                f"{_key(key, 'instanceType')}: {shape.instance_type}: no single node holds "
                + "; ".join(too_big)
                + f" ({what}); choose a larger instance type of {gpu} or fewer GPUs per worker"
            )
        running, needed = needed, max(needed, 1)
        gpus = catalog.gpus_needed(dgd)
    count = cfg.gpu_nodes or needed
    if karpenter:
        # The NodePool's node limit: maxNodes, default what the DGDs need now (an autoscaled entry raises it).
        count = cfg.max_nodes or needed
        if count < needed:
            raise ConfigError(
                f"{_key(key, 'maxNodes')}: {count} x {shape.instance_type} cannot hold {what} as configured "
                f"({gpus} GPUs, EFA {shape.efa_per_gpu}/GPU, replicas included); use at least {needed}"
            )
    if count < needed:
        raise ConfigError(
            f"{_key(key, 'gpuNodes')}: {count} x {shape.instance_type} cannot hold {what} as configured "
            f"({gpus} GPUs, EFA {shape.efa_per_gpu}/GPU, replicas included); use at least {needed}"
        )
    if shape.ultraserver and count > 18:
        raise ConfigError(
            f"{_key(key, 'gpuNodes')}: {count}: an UltraServer holds at most 18 {shape.instance_type} (u-p6e-gb200x72)"
        )
    labels = {
        POOL_LABEL: name,
        "nvidia.com/gpu.product": shape.product,
        "nvidia.com/gpu.present": "true",
    }
    if efa:
        labels[EFA_LABEL] = "true"
    lt: dict[str, Any] = {
        "network_interfaces": network_interfaces(shape, efa),
        "user_data": base64.b64encode(NODEADM_USER_DATA.encode()).decode(),
        "metadata_options": launch_template_metadata(),  # IMDSv2, hop limit 1: no pod reads the node role (stacks/cluster/identity.py)
        "block_device_mappings": [
            {"device_name": "/dev/xvda", "ebs": {"volume_size": 500, "volume_type": "gp3", "delete_on_termination": "true"}}
        ],
    }
    capacity_block = cfg.market_type == "capacity-block"
    # Capacity Blocks are already co-located and a targeted reservation launches where it was made: no placement group then.
    # Without EFA nothing crosses instances, so no placement group unless placementGroup: true asks for one.
    wants_pg = cfg.placement_group if cfg.placement_group is not None else efa
    placement_group = {"strategy": "cluster"} if (wants_pg and not cfg.capacity_reservation_id and not karpenter) else None
    if cfg.capacity_reservation_id:
        lt["capacity_reservation_specification"] = {
            "capacity_reservation_target": {"capacity_reservation_id": cfg.capacity_reservation_id}
        }
    if capacity_block:
        # EKS "Create a managed node group with Capacity Blocks for ML": the launch template names the instance type,
        # the capacity-block market and the reservation; the node group sets no instanceTypes.
        lt["instance_market_options"] = {"market_type": "capacity-block"}
        lt["instance_type"] = shape.instance_type
    gpu_ng: dict[str, Any] = {
        "ami_type": AMI_TYPE[shape.arch],
        # The group's Kubernetes version is the control plane's: after a control-plane step the same `up` moves the groups
        # (UpdateNodegroupVersion, after UpdateClusterVersion: the group depends on the cluster), so the next step is not
        # refused for a group left behind ("Before updating your control plane ... the Kubernetes minor version of ... the
        # managed nodes ... [must be] the same as your control plane's current version": EKS user guide, update-cluster).
        # Valid with a launch template that names no AMI (this one names none): EKS CreateNodegroup ``version``.
        "version": cfg.kubernetes_version,
        # The pinned AMI release (versions.yaml eks.amiReleaseVersions): the nodes move to a new AMI and NVIDIA driver only
        # when the pin moves, not with every launch template change. Valid with a launch template that names no AMI.
        "release_version": cfg.ami_release(),
        "capacity_type": "CAPACITY_BLOCK" if capacity_block else "ON_DEMAND",
        "scaling_config": scaling_config(count, capacity_block),
        "labels": labels,
        "taints": [taint],
        "availability_zone": cfg.gpu_zone(),
        # A launch template or version change replaces every node. EKS's DEFAULT strategy first launches up to twice the
        # zones' count of new nodes (spare GPUs a reservation sized to the group does not have); MINIMAL terminates
        # before it launches, one node at a time ("useful in scenarios where you are constrained to resources or costs
        # (for example, with hardware accelerators such as GPUs)": EKS API reference, NodegroupUpdateConfig.updateStrategy).
        "update_config": GPU_UPDATE_CONFIG,
    }
    if not capacity_block:
        gpu_ng = {"instance_types": [shape.instance_type], **gpu_ng}
    node_shape = NodeShape(
        name=name,
        labels={**labels, "kubernetes.io/arch": shape.kubernetes_arch, "node.kubernetes.io/instance-type": shape.instance_type},
        taints=[{"key": taint["key"], "value": taint["value"], "effect": "NoSchedule"}],
        capacity=capacity,
        count=count,
    )
    kp = None
    if karpenter:
        from stacks.config.eks import DEFAULT_CONSOLIDATE_AFTER, karpenter_ami_alias

        kp = {
            "max_nodes": count,
            "consolidate_after": cfg.consolidate_after or DEFAULT_CONSOLIDATE_AFTER,
            "ami_alias": cfg.ami_alias or karpenter_ami_alias(cfg.ami_release()),
            "market_type": cfg.market_type,
            "capacity_reservation_id": cfg.capacity_reservation_id,
            "zone": cfg.gpu_zone(),
        }
    return GpuPool(
        name=name,
        gpu=gpu,
        nodegroup=gpu_ng,
        launch_template=lt,
        placement_group=placement_group,
        shape=shape,
        node_shape=node_shape,
        efa=efa,
        nodes_needed=needed,
        gpus=gpus,
        nodes_running=running,
        capacity="karpenter" if karpenter else "node-group",
        karpenter=kp,
    )


def pool_name(gpu: str, first: bool) -> str:
    """The first GPU group keeps the single-target resource names (``cluster-gpu``); others carry their GPU."""
    return "gpu" if first else f"gpu-{gpu}"


def _pins_gpu_product(pod: dict) -> bool:
    if "nvidia.com/gpu.product" in (pod.get("nodeSelector") or {}):
        return True
    terms = (
        ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    ).get("nodeSelectorTerms") or []
    return bool(terms) and all(
        any(e.get("key") == "nvidia.com/gpu.product" for e in t.get("matchExpressions") or []) for t in terms
    )


def pin_gpu_product(dgd: dict, product: str) -> list[str]:
    """On a cluster with GPU node groups of several GPUs, a GPU worker that does not select its GPU could land on
    another GPU's nodes: give it ``nodeSelector: nvidia.com/gpu.product`` (in place). Returns the components pinned."""
    pinned = []
    for comp in dgd["spec"]["components"]:
        pod = comp["podTemplate"]["spec"]
        if pod_requests(pod).get("nvidia.com/gpu") and not _pins_gpu_product(pod):
            pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), "nvidia.com/gpu.product": product}
            pinned.append(comp["name"])
    return pinned


def tolerates(pod: dict, taint: dict) -> bool:
    """Kubernetes "Taints and Tolerations": Exists matches any value; Equal (the default) needs the same value."""
    given = taint.get("effect")  # EKS spells NoSchedule NO_SCHEDULE
    effect = "NoSchedule" if given == "NO_SCHEDULE" else given
    for t in pod.get("tolerations") or []:
        if t.get("effect") not in (None, "", effect):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", taint["key"]):
            return True
        if (
            t.get("operator", "Equal") == "Equal"
            and t.get("key") == taint["key"]
            and str(t.get("value", "")) == str(taint["value"])
        ):
            return True
    return False


def combined_dgd(parts: list[tuple[str, dict]]) -> dict:
    """``(entry name, DGD)`` pairs as one DGD whose components are all of theirs, so capacity is sized from the sum."""
    comps = [{**c, "name": f"{name}/{c['name']}"} for name, d in parts for c in d["spec"]["components"]]
    first = parts[0][1]
    return {**first, "spec": {**first["spec"], "components": comps}}


def _untolerated(parts: list[tuple[str, dict]], taint: dict) -> list[str]:
    return [
        f"{name}/{c['name']}"
        for name, d in parts
        for c in d["spec"]["components"]
        if pod_requests(c["podTemplate"]["spec"]).get("nvidia.com/gpu") and not tolerates(c["podTemplate"]["spec"], taint)
    ]
