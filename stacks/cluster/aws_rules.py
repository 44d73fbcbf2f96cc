"""AWS rules suite: one function per documented AWS constraint, run on the resource graph a stack registers.

Each rule takes a ``Graph`` (the recorded registrations: ``type``, ``name``, ``inputs``, ``retain_on_delete``,
``ignore_changes``, ``dependencies``; tests/harness.py ``run_program`` records them under mocks, where a
resource's id is ``<name>-id``) and returns violations, one line each. The mocks accept any request; these
rules are what AWS would refuse or misbuild. Each docstring names the AWS page the constraint comes from.
``check(graph)`` runs them all; ``RULES`` maps a rule to the AWS constraint areas it guards (``AREAS``).
"""
from __future__ import annotations

import inspect
import ipaddress
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Optional

from stacks.cluster import EFS_CLIENT_MBPS, EFS_PROVISIONED_MIBPS, kubernetes_versions, pack
from stacks.cluster import DRA_CHARTS, tolerates
from stacks.registry.gpus import INSTANCES

NODEGROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
VPC = "aws:ec2/vpc:Vpc"
EKS = "aws:eks/cluster:Cluster"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
EFS = "aws:efs/fileSystem:FileSystem"
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET = "kubernetes:core/v1:Secret"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
DGD = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
JOB = "kubernetes:batch/v1:Job"
HELM = "kubernetes:helm.sh/v3:Release"
COMPUTE_DOMAIN = "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain"
AZ = re.compile(r"[a-z]{2}(?:-gov)?-[a-z]+-\d[a-z]")


@dataclass
class Res:
    type: str
    name: str
    inputs: dict
    retain_on_delete: bool = False
    ignore_changes: tuple = ()
    dependencies: tuple = ()
    urn: str = ""
    delete_before_replace: bool = False

    @property
    def id(self) -> str:
        return f"{self.name}-id"  # the mocks' id for a resource


class Graph:
    """The registrations of one program run, with look-ups by type and by (mock) id."""

    def __init__(self, resources: Iterable[Any]):
        self.resources = [
            r if isinstance(r, Res) else Res(r.type, r.name, r.inputs, bool(getattr(r, "retain_on_delete", False)),
                                             tuple(getattr(r, "ignore_changes", ()) or ()), tuple(getattr(r, "dependencies", ()) or ()),
                                             getattr(r, "urn", ""), bool(getattr(r, "delete_before_replace", False)))
            for r in resources
        ]

    def of(self, typ: str) -> list[Res]:
        return [r for r in self.resources if r.type == typ]

    def by_id(self, rid: Any, typ: str) -> Optional[Res]:
        return next((r for r in self.of(typ) if r.id == rid), None)

    def k8s(self, typ: str, name: str, namespace: Optional[str] = None) -> Optional[Res]:
        for r in self.of(typ):
            meta = r.inputs.get("metadata") or {}
            if meta.get("name") == name and (namespace is None or meta.get("namespace") == namespace):
                return r
        return None


Rule = Callable[[Graph], list[str]]
# The AWS constraint areas the cluster layer must get right; every area has at least one rule (tests/test_aws_rules.py).
AREA_CAPACITY_BLOCKS = "Capacity Blocks: instance type and reservation on the launch template"
AREA_PLACEMENT_GROUPS = "cluster placement groups: on-demand EFA only, never with a reservation"
AREA_ULTRASERVERS_AND_ZONES = "GB200 UltraServers, Local Zones and availability zones"
AREA_NETWORK = "network cost (NAT, S3 and ECR endpoints) and the API endpoint"
AREA_GPU_NODE_SOFTWARE = "GPU Operator and RuntimeClass on the EKS NVIDIA AMI"
AREA_FSX_LUSTRE = "FSx for Lustre cache: argument types, static binding, capacity and throughput"
AREA_EFA = "EFA interfaces per instance and per GPU"
AREA_NODE_COUNT = "GPU node count holds the DGDs"
AREA_NODE_GROUP_SIZES = "node group scalingConfig on create and update"
AREA_RETENTION = "retention and destroy of the cache and its network"
AREA_KUBERNETES_VERSION = "Kubernetes version in EKS standard support"
AREA_SECRETS = "Secrets the pods reference exist on a new cluster"
AREA_EFS_THROUGHPUT = "EFS provisioned throughput"
AREA_CLUSTER_ACCESS = "cluster access entries, Secrets envelope encryption and control-plane logs"
AREA_LOAD_BALANCER = "the front door's NLB and the AWS Load Balancer Controller"
AREA_UPDATES = "updates in place: GPU node replacement, immutable specs"
AREA_NODE_CREDENTIALS = "node credentials: instance metadata, node role policies, add-on identities, NetworkPolicy enforcement"
AREA_CACHE_ACCESS = "who reaches the model cache: the EFS file-system policy and encryption at rest"
AREAS = (AREA_CAPACITY_BLOCKS, AREA_PLACEMENT_GROUPS, AREA_ULTRASERVERS_AND_ZONES, AREA_NETWORK, AREA_GPU_NODE_SOFTWARE,
         AREA_FSX_LUSTRE, AREA_EFA, AREA_NODE_COUNT, AREA_NODE_GROUP_SIZES, AREA_RETENTION, AREA_KUBERNETES_VERSION,
         AREA_SECRETS, AREA_EFS_THROUGHPUT, AREA_CLUSTER_ACCESS, AREA_NODE_CREDENTIALS, AREA_UPDATES, AREA_LOAD_BALANCER,
         AREA_CACHE_ACCESS)
RULES: dict[Rule, tuple[str, ...]] = {}


def rule(*areas: str):
    unknown = [a for a in areas if a not in AREAS]
    if unknown:
        raise ValueError(f"unknown AWS constraint area(s) {unknown}; valid: {list(AREAS)}")

    def deco(fn: Rule) -> Rule:
        RULES[fn] = areas
        return fn
    return deco


def check(graph: Graph, rules: Iterable[Rule] = ()) -> list[str]:
    out = []
    for fn in list(rules) or list(RULES):
        out += [f"{fn.__name__}: {v}" for v in fn(graph)]
    return out


def _get(d: Any, *path, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def _launch_template(g: Graph, ng: Res) -> Optional[Res]:
    return g.by_id(_get(ng.inputs, "launchTemplate", "id"), LAUNCH_TEMPLATE)


def _instance_type(g: Graph, ng: Res) -> Optional[str]:
    lt = _launch_template(g, ng)
    types = ng.inputs.get("instanceTypes") or []
    return (lt.inputs.get("instanceType") if lt else None) or (types[0] if types else None)


def _gpu_nodegroups(g: Graph) -> list[Res]:
    return [ng for ng in g.of(NODEGROUP) if _instance_type(g, ng) in INSTANCES]


def _node_labels(g: Graph, ng: Res) -> dict:
    """The labels a node of the group carries: the node group's, and the well-known ones the kubelet sets."""
    it = _instance_type(g, ng)
    return {**(ng.inputs.get("labels") or {}), "node.kubernetes.io/instance-type": it,
            "kubernetes.io/arch": INSTANCES[it].kubernetes_arch if it in INSTANCES else None}


def _selects(pod: dict, labels: dict) -> bool:
    """The pod's nodeSelector and required node affinity admit a node with ``labels`` (Kubernetes "Assigning Pods
    to Nodes": every nodeSelector pair, any one of the nodeSelectorTerms with all its matchExpressions)."""
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    terms = _get(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms") or []

    def match(e):
        v, op = labels.get(e.get("key")), e.get("operator")
        return {"In": v in (e.get("values") or []), "NotIn": v not in (e.get("values") or []),
                "Exists": v is not None, "DoesNotExist": v is None}.get(op, True)
    return not terms or any(all(match(e) for e in t.get("matchExpressions") or []) for t in terms)


def _assigned(g: Graph) -> tuple[dict[str, list[dict]], list[str]]:
    """Every GPU worker component of every DGD, by the GPU node group it can land on (node group name -> components),
    and the problems: a worker no GPU group admits, or one that several GPU groups admit (its pods could land on
    another GPU's nodes)."""
    groups = _gpu_nodegroups(g)
    out: dict[str, list[dict]] = {ng.name: [] for ng in groups}
    problems = []
    for dgd in g.of(DGD):
        for comp in _get(dgd.inputs, "spec", "components", default=[]):
            pod = comp["podTemplate"]["spec"]
            if not any("nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {}) for c in pod.get("containers", [])):
                continue
            fits = [ng for ng in groups if _selects(pod, _node_labels(g, ng))]
            if not fits and groups and not any(_selects(pod, _nodepool_labels(np)) for np in g.of(NODEPOOL)):
                problems.append(f"{dgd.name}/{comp['name']}: no GPU node group admits it (nodeSelector/affinity)")
            elif len(fits) > 1:
                problems.append(f"{dgd.name}/{comp['name']}: may land on any of {[ng.name for ng in fits]} (select nvidia.com/gpu.product)")
            for ng in fits[:1]:
                out[ng.name].append(comp)
    return out, problems


def _efa_devices(lt: Optional[Res]) -> int:
    nis = (lt.inputs.get("networkInterfaces") if lt else None) or []
    return sum(1 for n in nis if n.get("interfaceType") in ("efa", "efa-only"))


# --------------------------------------------------------------------------- Capacity Blocks


@rule(AREA_CAPACITY_BLOCKS)
def capacity_block_launch_template(g: Graph) -> list[str]:
    """A managed node group on a Capacity Block uses a launch template that carries ``InstanceType``,
    ``InstanceMarketOptions.MarketType = capacity-block`` and ``CapacityReservationSpecification`` targeting the
    block; the node group's capacity type is ``CAPACITY_BLOCK`` and it names no ``instanceTypes``.
    Source: EKS user guide, "Create a managed node group with Capacity Blocks for ML" (capacity-blocks-mng);
    the same launch template contract in AWS PCS "Configure a compute node group to use a Capacity Block"."""
    out = []
    for ng in g.of(NODEGROUP):
        lt = _launch_template(g, ng)
        cb_ng = ng.inputs.get("capacityType") == "CAPACITY_BLOCK"
        cb_lt = bool(lt) and _get(lt.inputs, "instanceMarketOptions", "marketType") == "capacity-block"
        if cb_lt and not cb_ng:
            out.append(f"{ng.name}: launch template {lt.name} is capacity-block but capacityType is {ng.inputs.get('capacityType')!r}")
        if not cb_ng:
            continue
        if lt is None:
            out.append(f"{ng.name}: CAPACITY_BLOCK node group without a launch template")
            continue
        if not cb_lt:
            out.append(f"{ng.name}: launch template {lt.name} has no instanceMarketOptions.marketType capacity-block")
        if not lt.inputs.get("instanceType"):
            out.append(f"{ng.name}: launch template {lt.name} has no instanceType")
        if not _get(lt.inputs, "capacityReservationSpecification", "capacityReservationTarget", "capacityReservationId"):
            out.append(f"{ng.name}: launch template {lt.name} targets no capacity reservation")
        if ng.inputs.get("instanceTypes"):
            out.append(f"{ng.name}: CAPACITY_BLOCK node group names instanceTypes {ng.inputs['instanceTypes']} (must be on the launch template only)")
    return out


@rule(AREA_CAPACITY_BLOCKS)
def instance_type_in_one_place(g: Graph) -> list[str]:
    """The instance type is set in the launch template or in the node group, not both.
    Source: EKS user guide, "Customize managed nodes with launch templates" (launch-templates: instance types)."""
    out = []
    for ng in g.of(NODEGROUP):
        lt = _launch_template(g, ng)
        if lt and lt.inputs.get("instanceType") and ng.inputs.get("instanceTypes"):
            out.append(f"{ng.name}: instance type both in launch template {lt.name} and in instanceTypes")
        if not _instance_type(g, ng):
            out.append(f"{ng.name}: no instance type in the node group or its launch template")
    return out


# --------------------------------------------------------------------------- placement groups


@rule(AREA_PLACEMENT_GROUPS)
def no_placement_group_with_reservation(g: Graph) -> list[str]:
    """No cluster placement group when a launch template targets a capacity reservation or block: instances
    of a Capacity Block are already placed together in an UltraCluster, and a targeted On-Demand Capacity
    Reservation launches only into the placement group it was created in.
    Source: EC2 API reference ``CapacityBlock``; EC2 user guide "Placement group rules and limitations" and
    "Capacity Reservations for cluster placement groups"."""
    out = []
    for lt in g.of(LAUNCH_TEMPLATE):
        if _get(lt.inputs, "capacityReservationSpecification", "capacityReservationTarget") and _get(lt.inputs, "placement", "groupName"):
            out.append(f"{lt.name}: targets a capacity reservation and places instances in placement group {_get(lt.inputs, 'placement', 'groupName')}")
    return out


@rule(AREA_PLACEMENT_GROUPS)
def on_demand_efa_in_cluster_placement_group(g: Graph) -> list[str]:
    """On-demand EFA nodes (no reservation) launch into a cluster placement group, for the lowest latency between
    them. Source: EC2 user guide "Get started with EFA" (launch into a cluster placement group); EKS user guide
    "Manage EFA devices on Amazon EKS" (placement groups)."""
    out = []
    for ng in _gpu_nodegroups(g):
        lt = _launch_template(g, ng)
        if _efa_devices(lt) and not _get(lt.inputs, "capacityReservationSpecification", "capacityReservationTarget"):
            group = _get(lt.inputs, "placement", "groupName")
            if not group or not any(pg.inputs.get("strategy") == "cluster" and pg.inputs.get("name", pg.name) == group for pg in g.of(PLACEMENT_GROUP)):
                out.append(f"{ng.name}: on-demand EFA node group without a cluster placement group")
    return out


# --------------------------------------------------------------------------- GB200 UltraServers, zones


@rule(AREA_ULTRASERVERS_AND_ZONES)
def ultraserver_only_as_capacity_block(g: Graph) -> list[str]:
    """``p6e-gb200.36xlarge`` is sold only inside UltraServers (u-p6e-gb200x36: 9 instances, x72: 18), through
    Capacity Blocks; EKS supports it from Kubernetes 1.33 with the AL2023 ARM NVIDIA AMI.
    Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS" (ml-eks-nvidia-ultraserver)."""
    out = []
    for ng in g.of(NODEGROUP):
        it = _instance_type(g, ng)
        if it in INSTANCES and INSTANCES[it].ultraserver:
            if ng.inputs.get("capacityType") != "CAPACITY_BLOCK":
                out.append(f"{ng.name}: {it} with capacityType {ng.inputs.get('capacityType')!r}, not CAPACITY_BLOCK")
            if ng.inputs.get("amiType") != "AL2023_ARM_64_NVIDIA":
                out.append(f"{ng.name}: {it} with amiType {ng.inputs.get('amiType')!r}, not AL2023_ARM_64_NVIDIA")
            if int(_get(ng.inputs, "scalingConfig", "maxSize", default=0)) > 18:
                out.append(f"{ng.name}: {it} maxSize above 18 (the largest UltraServer)")
    return out


@rule(AREA_ULTRASERVERS_AND_ZONES)
def capacity_block_in_one_zone(g: Graph) -> list[str]:
    """Capacity Block instances launch only in subnets of the block's Availability Zone, so a CAPACITY_BLOCK node
    group's subnets are all in one zone. Source: EC2 user guide "Launch instances using Capacity Blocks"
    (capacity-blocks-launch); terraform-aws-eks-blueprints pattern ml-capacity-block."""
    out = []
    for ng in g.of(NODEGROUP):
        if ng.inputs.get("capacityType") != "CAPACITY_BLOCK":
            continue
        zones = {(_s.inputs.get("availabilityZone") if (_s := g.by_id(sid, SUBNET)) else None) for sid in ng.inputs.get("subnetIds") or []}
        if len(zones) != 1 or None in zones:
            out.append(f"{ng.name}: CAPACITY_BLOCK node group subnets span zones {sorted(map(str, zones))}")
    return out


@rule(AREA_ULTRASERVERS_AND_ZONES)
def eks_cluster_subnets_in_two_availability_zones(g: Graph) -> list[str]:
    """The EKS cluster's subnets are in at least two Availability Zones, and none is in a Local Zone (a Local Zone
    subnet serves node groups only). Source: EKS user guide "View Amazon EKS networking requirements for VPC and
    subnets" (network-reqs); "Launch low-latency EKS clusters with AWS Local Zones"."""
    out = []
    for c in g.of(EKS):
        zones = []
        for sid in _get(c.inputs, "vpcConfig", "subnetIds", default=[]) or []:
            sn = g.by_id(sid, SUBNET)
            zone = sn.inputs.get("availabilityZone") if sn else None
            if zone is None or not AZ.fullmatch(zone):
                out.append(f"{c.name}: subnet {sid} in {zone!r} is not an Availability Zone subnet")
            zones.append(zone)
        if len({z for z in zones if z}) < 2:
            out.append(f"{c.name}: subnets in {sorted({str(z) for z in zones})}: EKS needs two or more Availability Zones")
    return out


@rule(AREA_ULTRASERVERS_AND_ZONES)
def gb200_nvlink_domain_has_dra_and_compute_domain(g: Graph) -> list[str]:
    """GB200 nodes run the NVIDIA DRA driver (ComputeDomains, IMEX); when a ComputeDomain is registered every GPU
    worker of the DGD claims its channel. Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS"
    (DRA, NVIDIA DRA driver, ComputeDomain); NVIDIA "DRA Driver for GPUs" (ComputeDomains)."""
    out = []
    gb200 = [ng for ng in _gpu_nodegroups(g) if INSTANCES[_instance_type(g, ng)].ultraserver]
    if not gb200:
        return out
    if not any(r.inputs.get("chart") in DRA_CHARTS for r in g.of(HELM)):
        out.append("GB200 node group without the NVIDIA DRA driver release (dra-driver-nvidia-gpu)")
    for cd in g.of(COMPUTE_DOMAIN):
        template = _get(cd.inputs, "spec", "channel", "resourceClaimTemplate", "name")
        for dgd in g.of(DGD):
            for comp in _get(dgd.inputs, "spec", "components", default=[]):
                pod = comp["podTemplate"]["spec"]
                if not any("nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {}) for c in pod.get("containers", [])):
                    continue
                if not any(c.get("resourceClaimTemplateName") == template for c in pod.get("resourceClaims") or []):
                    out.append(f"{comp['name']}: no claim on ComputeDomain channel {template}")
    return out


# --------------------------------------------------------------------------- GB200 DRA driver placement on EKS

# The scheduling defaults of the DRA driver charts (what Helm uses where the release's values say nothing):
# nvidia-dra-driver-gpu 25.x: NVIDIA/k8s-dra-driver-gpu deployments/helm/nvidia-dra-driver-gpu/values.yaml @0540432
# (controller required on node-role.kubernetes.io/control-plane; kubelet plugin tolerates nothing).
# dra-driver-nvidia-gpu: kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/values.yaml
# @3fe94879c9cfdbdc8fad4b62c712f0c7a1f9de22, a main-branch commit (its values turn on the v1beta2 conversion webhook of
# the 0.5 line), NOT the 0.4.1 release this project pins (versions.yaml charts.nvidia-dra-driver-gpu): these defaults are
# unverified for 0.4.1. Why: the chart's Chart.yaml says version "0.4.1" at commit 764900e7833798a1528bd52a2af3e1b2d5f7a616
# of that repository, but the source index searched holds no values.yaml at that commit (0.4.1 was cut on a release
# branch: kubernetes-sigs/dra-driver-nvidia-gpu#1232 "Bump release version to v0.4.1", the cherry-picks of #1140), and
# the NVIDIA/k8s-dra-driver-gpu Chart.yaml read says 0.5.0-dev (@4deb6ebc). The values.yaml versions read
# disagree where it matters here: @3fe94879 (below) prefers control-plane nodes for the controller and has the kubelet
# plugin tolerate nvidia.com/gpu; @6fade973 and @9457bc47 add two NFD PCI-class terms to the kubelet plugin's affinity;
# NVIDIA/k8s-dra-driver-gpu @a0b61536 requires control-plane nodes for the controller and tolerates nothing for the
# plugin (the 25.x shape). The program's release values (stacks/cluster/dra.py) set every one of those fields (the
# controller's nodeSelector, required affinity and tolerations; the plugin's required affinity and tolerations; lists
# replace in Helm's merge), so the rule below gives the same verdict under each of them (tests/test_aws_rules.py
# test_dra_rule_verdict_does_not_depend_on_the_unverified_defaults); only the controller's preferred affinity
# (a preference, no admission effect) comes from whichever defaults 0.4.1 has.
_GPU_PRESENT_TERMS = [
    {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}]},
    {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id", "operator": "In", "values": ["NVIDIA"]}]},
    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
]
DRA_CHART_DEFAULTS = {
    "nvidia-dra-driver-gpu": {
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}},
        "controller": {"nodeSelector": {}, "priorityClassName": "system-node-critical",
                       "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
                       "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                           {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}]}}}},
        "kubeletPlugin": {"nodeSelector": {}, "priorityClassName": "system-node-critical", "tolerations": [],
                          "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _GPU_PRESENT_TERMS}}}},
    },
    "dra-driver-nvidia-gpu": {
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}},
        "controller": {"nodeSelector": {}, "priorityClassName": "system-node-critical",
                       "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                                       {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
                                       {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                       "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                           {"weight": 100, "preference": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}}]}}},
        "kubeletPlugin": {"nodeSelector": {}, "priorityClassName": "system-node-critical",
                          "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                          "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _GPU_PRESENT_TERMS}}}},
    },
}


def helm_merge(defaults: Any, values: Any) -> Any:
    """Helm's value coalescing as it applies here: maps merge key by key, anything else (lists, scalars) given by the
    user replaces the default (Helm docs, "Values Files")."""
    if isinstance(defaults, dict) and isinstance(values, dict):
        return {k: helm_merge(defaults.get(k), values[k]) if k in values else defaults[k] for k in {**defaults, **values}}
    return values if values is not None else defaults


def dra_pod_specs(release_values: dict, chart: str) -> tuple[dict, dict, dict]:
    """(effective values, controller pod scheduling fields, kubelet-plugin pod scheduling fields) of a DRA driver release:
    the chart's defaults merged with the release's values, as the chart templates (templates/controller.yaml,
    templates/kubeletplugin.yaml) render ``nodeSelector``, ``affinity`` and ``tolerations`` into the pod specs."""
    eff = helm_merge(DRA_CHART_DEFAULTS[chart], release_values or {})

    def pod(part: str) -> dict:
        v = eff.get(part) or {}
        return {k: v[k] for k in ("nodeSelector", "affinity", "tolerations") if v.get(k)}
    return eff, pod("controller"), pod("kubeletPlugin")


def _admits(pod: dict, g: Graph, ng: Res) -> bool:
    """The pod's nodeSelector/required affinity select the group's labels and it tolerates every taint of the group."""
    return _selects(pod, _node_labels(g, ng)) and all(tolerates(pod, t) for t in ng.inputs.get("taints") or [])


@rule(AREA_ULTRASERVERS_AND_ZONES)
def dra_driver_values_follow_the_eks_guide(g: Graph) -> list[str]:
    """The NVIDIA DRA driver on EKS: ComputeDomains on, GPU allocation off (the device plugin allocates GPUs); the
    controller Deployment schedules on a node group of the cluster (EKS has no control-plane nodes, where the chart's
    defaults put it), and the kubelet-plugin DaemonSet is admitted by every GB200 node group: its affinity selects the
    group's labels and it tolerates the group's ``nvidia.com/gpu`` taint. Evaluated on the chart's defaults merged with
    the release's values. Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS" (dra-values.yaml:
    resources.gpus.enabled false, computeDomains.enabled true, controller without control-plane placement, kubeletPlugin
    affinity nvidia.com/gpu.present=true and toleration nvidia.com/gpu Exists NoSchedule)."""
    out = []
    gb200 = [ng for ng in _gpu_nodegroups(g) if INSTANCES[_instance_type(g, ng)].ultraserver]
    for rel in g.of(HELM):
        chart = rel.inputs.get("chart")
        if chart not in DRA_CHARTS:
            continue
        eff, controller, plugin = dra_pod_specs(rel.inputs.get("values") or {}, chart)
        if not _get(eff, "resources", "computeDomains", "enabled"):
            out.append(f"{rel.name}: resources.computeDomains.enabled is not true (the ComputeDomains GB200 needs)")
        if _get(eff, "resources", "gpus", "enabled"):
            out.append(f"{rel.name}: resources.gpus.enabled is true (GPU allocation stays with the device plugin on EKS)")
        if not any(_admits(controller, g, ng) for ng in g.of(NODEGROUP)):
            out.append(f"{rel.name}: the controller schedules on no node group ({controller}); EKS has no control-plane nodes")
        for ng in gb200:
            if not _admits(plugin, g, ng):
                out.append(f"{rel.name}: the kubelet plugin is not admitted by GB200 node group {ng.name} "
                           f"(labels {ng.inputs.get('labels')}, taints {ng.inputs.get('taints')}; plugin {plugin})")
    return out


# --------------------------------------------------------------------------- Local Zone GPU groups and the model cache


@rule(AREA_ULTRASERVERS_AND_ZONES)
def local_zone_nodes_do_not_mount_efs(g: Graph) -> list[str]:
    """No EFS model cache when a GPU node group runs in a Local Zone: EFS mount targets exist in Availability Zones
    only, and the file system's DNS name resolves only in a zone with a mount target. Source: EFS user guide
    "Mounting on Amazon EC2 with a DNS name" (a mount target in the client's Availability Zone is required); EFS API
    ``CreateMountTarget`` (one mount target per Availability Zone); FSx for Lustre is the cache for Local Zone groups."""
    out = []
    if not g.of(EFS):
        return out
    for ng in _gpu_nodegroups(g):
        for sid in ng.inputs.get("subnetIds") or []:
            sn = g.by_id(sid, SUBNET)
            zone = sn.inputs.get("availabilityZone") if sn else None
            if zone and not AZ.fullmatch(zone):
                out.append(f"{ng.name}: GPU nodes in Local Zone {zone} with an EFS model cache they cannot mount (use FSx for Lustre)")
    return out


# --------------------------------------------------------------------------- network cost and the API endpoint

ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
RTA = "aws:ec2/routeTableAssociation:RouteTableAssociation"
NAT = "aws:ec2/natGateway:NatGateway"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
RUNTIME_CLASS = "kubernetes:node.k8s.io/v1:RuntimeClass"


def _nat_route_tables(g: Graph) -> list[Res]:
    return [rt for rt in g.of(ROUTE_TABLE) if any(r.get("natGatewayId") for r in rt.inputs.get("routes") or [])]


@rule(AREA_NETWORK)
def private_route_tables_reach_s3_through_a_gateway_endpoint(g: Graph) -> list[str]:
    """Every route table that sends traffic to a NAT gateway also carries the S3 gateway endpoint, so S3 traffic (ECR
    image layers, pre-signed S3 downloads) does not pay the NAT gateway's per-GB processing charge; a gateway
    endpoint has no hourly or per-GB charge. Source: VPC pricing (aws.amazon.com/vpc/pricing: NAT gateway $/GB
    processed; gateway endpoints free); PrivateLink guide "Gateway endpoints for Amazon S3"; ECR API
    ``GetDownloadUrlForLayer`` (layers are S3 downloads)."""
    out = []
    s3 = [e for e in g.of(VPC_ENDPOINT) if str(e.inputs.get("serviceName", "")).endswith(".s3") and e.inputs.get("vpcEndpointType") == "Gateway"]
    for rt in _nat_route_tables(g):
        if not any(rt.id in (e.inputs.get("routeTableIds") or []) for e in s3):
            out.append(f"{rt.name}: routes to a NAT gateway without the S3 gateway endpoint (S3 bytes pay NAT per-GB charges)")
    return out


@rule(AREA_NETWORK)
def private_subnet_uses_its_zones_nat(g: Graph) -> list[str]:
    """A private subnet in a zone that has a NAT gateway routes through that zone's NAT gateway: traffic to a NAT in
    another zone pays inter-AZ transfer on top of NAT processing, and loses egress when that zone fails. Source: VPC
    user guide "NAT gateways" (create a NAT gateway in each Availability Zone and route each zone's traffic to its own);
    VPC pricing (data transfer between Availability Zones)."""
    out = []
    nat_zone = {}
    for nat in g.of(NAT):
        sn = g.by_id(nat.inputs.get("subnetId"), SUBNET)
        if sn:
            nat_zone[nat.id] = sn.inputs.get("availabilityZone")
    zones_with_nat = set(nat_zone.values())
    for a in g.of(RTA):
        sn, rt = g.by_id(a.inputs.get("subnetId"), SUBNET), g.by_id(a.inputs.get("routeTableId"), ROUTE_TABLE)
        if not sn or not rt:
            continue
        nats = [r.get("natGatewayId") for r in rt.inputs.get("routes") or [] if r.get("natGatewayId")]
        zone = sn.inputs.get("availabilityZone")
        if nats and zone in zones_with_nat and not any(nat_zone.get(n) == zone for n in nats):
            out.append(f"{sn.name} ({zone}) routes through a NAT gateway in {[nat_zone.get(n) for n in nats]}, not its own zone's")
    return out


@rule(AREA_NETWORK)
def ecr_interface_endpoints_are_complete(g: Graph) -> list[str]:
    """ECR interface endpoints come as a pair, ``ecr.api`` and ``ecr.dkr``, with private DNS, in a subnet of every
    Availability Zone the node groups use, next to the S3 gateway endpoint that carries the image layers. Source: ECR
    user guide "Amazon ECR interface VPC endpoints (AWS PrivateLink)" (both endpoints; 443 from the VPC; private DNS);
    ECR API ``GetDownloadUrlForLayer``; PrivateLink pricing (billed per endpoint per Availability Zone-hour)."""
    out = []
    ecr = {str(e.inputs.get("serviceName", "")).rsplit(".", 2)[-2] + "." + str(e.inputs.get("serviceName", "")).rsplit(".", 1)[-1]: e
           for e in g.of(VPC_ENDPOINT) if ".ecr." in str(e.inputs.get("serviceName", ""))}
    if not ecr:
        return out
    missing = {"ecr.api", "ecr.dkr"} - set(ecr)
    if missing:
        out.append(f"ECR interface endpoints without {sorted(missing)}: image pulls still go through the NAT gateway")
    node_zones = set()
    for ng in g.of(NODEGROUP):
        for sid in ng.inputs.get("subnetIds") or []:
            sn = g.by_id(sid, SUBNET)
            if sn and AZ.fullmatch(str(sn.inputs.get("availabilityZone"))):
                node_zones.add(sn.inputs["availabilityZone"])
    for svc, e in ecr.items():
        if not e.inputs.get("privateDnsEnabled"):
            out.append(f"{e.name}: {svc} without private DNS (clients would still resolve the public ECR endpoint)")
        zones = {(_s.inputs.get("availabilityZone") if (_s := g.by_id(sid, SUBNET)) else None) for sid in e.inputs.get("subnetIds") or []}
        if node_zones - zones:
            out.append(f"{e.name}: no endpoint subnet in {sorted(node_zones - zones)} where nodes run")
    if not any(str(e.inputs.get("serviceName", "")).endswith(".s3") for e in g.of(VPC_ENDPOINT)):
        out.append("ECR interface endpoints without the S3 gateway endpoint: image layers still cross the NAT gateway")
    return out


@rule(AREA_NETWORK)
def eks_public_endpoint_cidrs_are_explicit(g: Graph) -> list[str]:
    """A cluster whose Kubernetes API endpoint is public names the CIDR blocks allowed to reach it
    (``publicAccessCidrs``, from ``dynamo:cluster.publicAccessCidrs``) instead of leaving EKS's default of 0.0.0.0/0
    implicit. Source: EKS API reference ``VpcConfigRequest`` (publicAccessCidrs: default 0.0.0.0/0); EKS user guide
    "Cluster API server endpoint"."""
    out = []
    for c in g.of(EKS):
        vc = c.inputs.get("vpcConfig") or {}
        if vc.get("endpointPublicAccess", True) and not vc.get("publicAccessCidrs"):
            out.append(f"{c.name}: public API endpoint without publicAccessCidrs (EKS opens it to 0.0.0.0/0)")
    return out


SG_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


@rule(AREA_NETWORK)
def eks_endpoint_is_reachable(g: Graph) -> list[str]:
    """The Kubernetes API keeps at least one endpoint, and a private-only endpoint is reached from connected networks
    that the cluster security group admits on TCP 443, or no `pulumi up` after this one reaches it. Sources: EKS API
    reference ``VpcConfigRequest`` (endpointPublicAccess false: requests only from within the VPC); eksctl "Cluster
    Access" ("EKS doesn't allow clusters without either private or public access enabled"); EKS user guide "Cluster API
    server endpoint" (private-only access from a connected network) and "View Amazon EKS security group requirements
    for clusters" (the cluster group admits only itself by default)."""
    out = []
    for c in g.of(EKS):
        vc = c.inputs.get("vpcConfig") or {}
        public, private = vc.get("endpointPublicAccess", True), vc.get("endpointPrivateAccess", False)
        if not public and not private:
            out.append(f"{c.name}: neither the public nor the private API endpoint is on (EKS refuses it)")
        elif not public:
            rules = [r for r in g.of(SG_INGRESS_RULE) if r.inputs.get("fromPort") == 443 and r.inputs.get("toPort") == 443
                     and r.inputs.get("ipProtocol") == "tcp" and r.inputs.get("cidrIpv4")]
            if not rules:
                out.append(f"{c.name}: private-only API endpoint, and no rule admits any network to the cluster security group "
                           "on 443: nothing outside the cluster reaches the API")
    return out


@rule(AREA_GPU_NODE_SOFTWARE)
def gpu_operator_leaves_driver_and_toolkit_to_the_ami(g: Graph) -> list[str]:
    """On the EKS AL2023 NVIDIA AMI the GPU Operator installs neither the driver nor the NVIDIA Container Toolkit: the
    AMI ships both (the chart's defaults install both). Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon
    EKS" ("you must disable the operator installation of the driver and toolkit"; gpu-operator-values.yaml
    driver.enabled false, toolkit.enabled false); gpu-operator v26.7.0 values.yaml (driver/toolkit enabled: true)."""
    out = []
    nvidia_ami = any(str(ng.inputs.get("amiType", "")).endswith("_NVIDIA") for ng in g.of(NODEGROUP))
    if not nvidia_ami:
        return out
    for rel in g.of(HELM):
        if rel.inputs.get("chart") != "gpu-operator":
            continue
        values = rel.inputs.get("values") or {}
        for part in ("driver", "toolkit"):
            if _get(values, part, "enabled") is not False:
                out.append(f"{rel.name}: {part}.enabled is not false on the AL2023 NVIDIA AMI, which ships the {part}")
    return out


def _pods_naming(g: Graph, runtime_class: str) -> list[tuple[str, dict]]:
    """(``dgd/component`` or Job name, pod spec) of every DGD component and Job pod that names ``runtime_class``."""
    out = [(f"{d.name}/{c['name']}", c["podTemplate"]["spec"]) for d in g.of(DGD) for c in _get(d.inputs, "spec", "components", default=[])]
    out += [(j.name, _get(j.inputs, "spec", "template", "spec", default={}) or {}) for j in g.of(JOB)]
    return [(n, p) for n, p in out if p.get("runtimeClassName") == runtime_class]


@rule(AREA_GPU_NODE_SOFTWARE)
def nvidia_runtime_class_selects_gpu_nodes(g: Graph) -> list[str]:
    """The ``nvidia`` RuntimeClass on an EKS cluster carries ``scheduling.nodeSelector`` labels that every GPU node group
    has and the system node group does not, so a pod naming the class lands only where the handler exists.

    On the GPU Operator path the program registers no RuntimeClass: the operator creates its own (``operator.runtimeClass``,
    default ``nvidia``), and no value of the chart gives it a node selector (the chart's values.yaml as read sets only its
    name; a node selector exists for the Kata runtime classes, ``kataManager.config.runtimeClasses[].nodeSelector``; the
    operator creates nvidia, nvidia-cdi and nvidia-legacy with no way to turn them off, NVIDIA/gpu-operator#2145). That
    class cannot be checked here, so the rule checks the pods instead: every DGD component or Job pod that names it
    requests ``nvidia.com/gpu`` (only GPU nodes advertise it) or selects no non-GPU node group. Unverified: the v26.7.0
    chart and operator this project pins were not read (the values.yaml read is NVIDIA/gpu-operator
    deployments/gpu-operator/values.yaml @d7413be9, an older release). Source: Kubernetes API node.k8s.io/v1
    ``Scheduling.nodeSelector`` (merged into the pod's nodeSelector at admission); awslabs/amazon-eks-ami nodeadm
    runtime_config.go (the nvidia runtime on the NVIDIA AMI only)."""
    out = []
    if not g.of(EKS):
        return out
    for rc in g.of(RUNTIME_CLASS):
        if rc.inputs.get("handler") != "nvidia":
            continue
        sel = _get(rc.inputs, "scheduling", "nodeSelector") or {}
        if not sel:
            out.append(f"{rc.name}: RuntimeClass nvidia without scheduling.nodeSelector (its pods may land on nodes without the nvidia runtime)")
            continue
        for ng in g.of(NODEGROUP):
            labels = _node_labels(g, ng)
            carries = all(labels.get(k) == v for k, v in sel.items())
            if ng in _gpu_nodegroups(g) and not carries:
                out.append(f"{rc.name}: nodeSelector {sel} does not select GPU node group {ng.name}")
            if ng not in _gpu_nodegroups(g) and carries:
                out.append(f"{rc.name}: nodeSelector {sel} also selects non-GPU node group {ng.name}")
    registered = {_get(rc.inputs, "metadata", "name") for rc in g.of(RUNTIME_CLASS)}
    gpu_groups = _gpu_nodegroups(g)
    for rel in g.of(HELM):
        if rel.inputs.get("chart") != "gpu-operator":
            continue
        name = _get(rel.inputs, "values", "operator", "runtimeClass", default="nvidia")
        if name in registered:
            continue
        for who, pod in _pods_naming(g, name):
            if any("nvidia.com/gpu" in {**((c.get("resources") or {}).get("requests") or {}), **((c.get("resources") or {}).get("limits") or {})}
                   for c in pod.get("containers") or []):
                continue
            elsewhere = [ng.name for ng in g.of(NODEGROUP) if ng not in gpu_groups and _selects(pod, _node_labels(g, ng))]
            if elsewhere:
                out.append(f"{who}: names RuntimeClass {name}, which the GPU Operator ({rel.name}) creates without "
                           f"scheduling.nodeSelector, requests no nvidia.com/gpu and may land on non-GPU node group(s) {elsewhere}")
    return out

# --------------------------------------------------------------------------- FSx for Lustre


@lru_cache(maxsize=None)
def _sdk_params(typ: str) -> dict[str, str]:
    """``{camelCaseInput: annotation}`` of a pulumi-aws resource's Args class, from the installed SDK."""
    import importlib

    m = re.fullmatch(r"aws:([a-zA-Z0-9]+)/[a-zA-Z0-9]+:([A-Za-z0-9]+)", typ)
    if not m:
        return {}
    try:
        args = getattr(importlib.import_module(f"pulumi_aws.{m[1]}"), f"{m[2]}Args")
    except (ImportError, AttributeError):
        return {}
    out = {}
    for name, p in inspect.signature(args.__init__).parameters.items():
        if name != "self":
            head, *rest = name.split("_")
            out[head + "".join(x.title() for x in rest)] = str(p.annotation)
    return out


@rule(AREA_FSX_LUSTRE)
def argument_types_match_the_installed_sdk(g: Graph) -> list[str]:
    """Every pulumi-aws argument has the shape the installed SDK declares: a list where it takes a Sequence, a
    single value where it does not (pulumi-aws 7.x ``aws.fsx.LustreFileSystem(subnet_ids=...)`` is one string).
    Source: pulumi-aws SDK ``pulumi_aws/fsx/lustre_file_system.py``; FSx API ``CreateFileSystem`` SubnetIds
    (Lustre: one subnet)."""
    out = []
    for r in g.resources:
        params = _sdk_params(r.type)
        for key, value in r.inputs.items():
            ann = params.get(key)
            if ann is None or "Mapping" in ann:
                continue
            top_sequence = ann.startswith("typing.Union[typing.Sequence") or ann.startswith("typing.Sequence")
            if isinstance(value, list) and not top_sequence:
                out.append(f"{r.name} ({r.type}): {key} is a list, the SDK takes one value ({ann[:60]}...)")
            if isinstance(value, str) and top_sequence:
                out.append(f"{r.name} ({r.type}): {key} is one value, the SDK takes a list")
    return out


@rule(AREA_FSX_LUSTRE)
def fsx_cache_is_bound_statically(g: Graph) -> list[str]:
    """The FSx CSI driver provisions a new file system per PVC or binds statically; it has no StorageClass
    parameter naming an existing file system. The stack's file system is bound by a PersistentVolume with
    ``csi.volumeHandle`` (its id), ``volumeAttributes.dnsname`` and ``mountname``, reserved for the cache claim.
    Source: kubernetes-sigs/aws-fsx-csi-driver examples/kubernetes/static_provisioning, pkg/driver/controller.go."""
    out = []
    for sc in g.of(STORAGE_CLASS):
        if sc.inputs.get("provisioner") == "fsx.csi.aws.com" and "fileSystemId" in (sc.inputs.get("parameters") or {}):
            out.append(f"{sc.name}: fsx.csi.aws.com StorageClass with a fileSystemId parameter (the driver ignores it and creates a new file system)")
    for fs in g.of(FSX):
        pvs = [pv for pv in g.of(PV) if _get(pv.inputs, "spec", "csi", "volumeHandle") == fs.id]
        if not pvs:
            out.append(f"{fs.name}: no PersistentVolume with volumeHandle {fs.id}")
            continue
        for pv in pvs:
            attrs = _get(pv.inputs, "spec", "csi", "volumeAttributes", default={}) or {}
            if not attrs.get("dnsname") or not attrs.get("mountname"):
                out.append(f"{pv.name}: volumeAttributes lack dnsname/mountname ({sorted(attrs)})")
            ref = _get(pv.inputs, "spec", "claimRef", default={}) or {}
            claim = g.k8s(PVC, ref.get("name"), ref.get("namespace"))
            if claim is None:
                out.append(f"{pv.name}: claimRef {ref} names no registered claim")
            elif _get(claim.inputs, "spec", "storageClassName") != _get(pv.inputs, "spec", "storageClassName"):
                out.append(f"{pv.name}: claim {ref.get('name')} asks for class {_get(claim.inputs, 'spec', 'storageClassName')!r}, "
                           f"the volume has {_get(pv.inputs, 'spec', 'storageClassName')!r}")
    return out


@rule(AREA_FSX_LUSTRE)
def fsx_capacity_and_throughput(g: Graph) -> list[str]:
    """PERSISTENT_2 SSD capacity is 1200 GiB, 2400 GiB or a multiple of 2400 GiB, and throughput is per TiB
    (125, 250, 500 or 1000 MB/s/TiB); the model cache must read at least as fast as one EFS client (~1.5 GiB/s).
    Sources: FSx API ``CreateFileSystem`` StorageCapacity, ``PerUnitStorageThroughput``; FSx for Lustre user guide
    "Performance"; EFS user guide "Amazon EFS performance"."""
    out = []
    for fs in g.of(FSX):
        cap = int(fs.inputs.get("storageCapacity") or 0)
        per = int(fs.inputs.get("perUnitStorageThroughput") or 0)
        if cap not in (1200, 2400) and (cap <= 0 or cap % 2400):
            out.append(f"{fs.name}: storageCapacity {cap} GiB is not 1200, 2400 or a multiple of 2400")
        if fs.inputs.get("deploymentType") == "PERSISTENT_2" and per not in (125, 250, 500, 1000):
            out.append(f"{fs.name}: perUnitStorageThroughput {per} is not one of 125, 250, 500, 1000")
        if cap / 1024 * per < EFS_CLIENT_MBPS:
            out.append(f"{fs.name}: {cap} GiB x {per} MB/s/TiB = {cap / 1024 * per:.0f} MB/s, slower than one EFS client ({EFS_CLIENT_MBPS:.0f} MB/s)")
    return out


# --------------------------------------------------------------------------- EFA per GPU, node count


def _gpu_workers(g: Graph):
    for dgd in g.of(DGD):
        for comp in _get(dgd.inputs, "spec", "components", default=[]):
            for c in comp["podTemplate"]["spec"].get("containers", []):
                lim = (c.get("resources") or {}).get("limits") or {}
                if "nvidia.com/gpu" in lim:
                    yield comp, lim


@rule(AREA_EFA)
def efa_requests_follow_the_instance(g: Graph) -> list[str]:
    """A worker that requests EFA devices requests its GPU count times the instance's EFA devices per GPU:
    p5/p5e 32 EFA / 8 GPU = 4, p5en 16 / 8 = 2, p6-b200 8 / 8 = 1 (the EFA interfaces the launch template attaches).
    Source: EC2 user guide "Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
    (efa-acc-inst-types); EKS user guide "Manage EFA devices on Amazon EKS"."""
    out = []
    for ng in _gpu_nodegroups(g):
        shape = INSTANCES[_instance_type(g, ng)]
        lt = _launch_template(g, ng)
        devices = _efa_devices(lt)
        if devices and devices != shape.efa_interfaces:
            out.append(f"{ng.name}: launch template attaches {devices} EFA interfaces, {shape.instance_type} has {shape.efa_interfaces}")
        mine = {id(c) for c in _assigned(g)[0][ng.name]}
        for comp, lim in _gpu_workers(g):
            if id(comp) not in mine:
                continue
            if "vpc.amazonaws.com/efa" in lim:
                want = int(lim["nvidia.com/gpu"]) * devices // shape.gpus_per_node
                if int(lim["vpc.amazonaws.com/efa"]) != want:
                    out.append(f"{comp['name']}: requests {lim['vpc.amazonaws.com/efa']} EFA for {lim['nvidia.com/gpu']} GPU(s); "
                               f"{shape.instance_type} gives {devices // shape.gpus_per_node} per GPU ({want})")
    return out


@rule(AREA_NODE_COUNT)
def gpu_node_group_holds_the_dgd(g: Graph) -> list[str]:
    """Each GPU node group's size holds every GPU and EFA device of the DGD workers that land on it, summed over all
    the stack's DGDs (replicas included); otherwise pods stay Pending and ``pulumi up`` waits out the DGD timeout.
    Every GPU worker lands on exactly one GPU node group (its nodeSelector/affinity against the groups' labels).
    Capacity per node: the instance's GPUs and the EFA interfaces its launch template attaches. Source: Kubernetes
    scheduling of extended resources ("Resource Management for Pods and Containers", "Assigning Pods to Nodes");
    EKS user guide "Manage EFA devices on Amazon EKS"."""
    assigned, out = _assigned(g)
    for ng in _gpu_nodegroups(g):
        shape = INSTANCES[_instance_type(g, ng)]
        cap = {"nvidia.com/gpu": shape.gpus_per_node}
        devices = _efa_devices(_launch_template(g, ng))
        if devices:
            cap["vpc.amazonaws.com/efa"] = devices
        size = int(_get(ng.inputs, "scalingConfig", "desiredSize", default=0))
        needed, too_big = pack({"spec": {"components": assigned[ng.name]}}, cap)
        out += [f"{ng.name}: {t}" for t in too_big]
        if needed > size or needed > int(_get(ng.inputs, "scalingConfig", "maxSize", default=0)):
            out.append(f"{ng.name}: desiredSize {size} < {needed} {shape.instance_type} nodes the DGDs need")
    return out


# --------------------------------------------------------------------------- node group sizes, create and update


@rule(AREA_NODE_GROUP_SIZES)
def scaling_config_in_order(g: Graph) -> list[str]:
    """Every node group's scalingConfig has min <= desired <= max (CreateNodegroup refuses "minSize can't be greater
    than desiredSize" and "desiredSize can't be greater than maxSize"). Source: EKS API ``NodegroupScalingConfig``;
    the errors as AWS returns them in sassoftware/viya4-iac-aws#298 and ministryofjustice/cloud-platform-infrastructure PR 4595."""
    out = []
    for ng in g.of(NODEGROUP):
        sc = ng.inputs.get("scalingConfig") or {}
        lo, want, hi = (int(sc.get(k, 0)) for k in ("minSize", "desiredSize", "maxSize"))
        if not lo <= want <= hi:
            out.append(f"{ng.name}: scalingConfig min {lo}, desired {want}, max {hi} is not min <= desired <= max")
    return out


@rule(AREA_NODE_GROUP_SIZES)
def desired_size_sent_on_every_update(g: Graph) -> list[str]:
    """A GPU node group's desired size is never in ``ignoreChanges``: the provider sends the whole scalingConfig in one
    UpdateNodegroupConfig, so an ignored desired size goes out unchanged with the new bounds, and EKS refuses a new
    minimum above it ("Minimum capacity N can't be greater than desired size M") or a new maximum below it, while a
    Capacity Block group (min 0) accepts the new maximum and adds no node. Source: terraform-provider-aws
    internal/service/eks/node_group.go (update: ``expandNodegroupScalingConfig`` of the whole block);
    terraform-aws-eks issues 748, 2030 and 3683 (the error with ``ignore_changes = [scaling_config[0].desired_size]``)."""
    return [f"{ng.name}: scalingConfig.desiredSize is in ignoreChanges: a resize sends the old desired size with the new bounds"
            for ng in _gpu_nodegroups(g) if any(k in ("scalingConfig", "scalingConfig.desiredSize") for k in ng.ignore_changes)]


# --------------------------------------------------------------------------- cluster access, Secrets encryption, control-plane logs

ACCESS_POLICY_ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
KMS_KEY = "aws:kms/key:Key"
IAM_ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
AUTHENTICATION_MODES = ("API", "API_AND_CONFIG_MAP", "CONFIG_MAP")


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


@rule(AREA_CLUSTER_ACCESS)
def access_entries_are_complete(g: Graph) -> list[str]:
    """Every standard access entry has an access policy association for the same principal and cluster, registered
    after it (AssociateAccessPolicy needs the entry: "the access entry must already exist"), with an EKS access policy
    ARN and a scope EKS accepts (``cluster``, or ``namespace`` with namespaces); one entry per principal per cluster
    (CreateAccessEntry refuses a second one, ResourceInUseException). Sources: EKS API CreateAccessEntry,
    AssociateAccessPolicy, AccessScope; EKS user guide "Review access policy permissions"."""
    out = []
    seen: dict[tuple, str] = {}
    for e in g.of(ACCESS_ENTRY):
        key = (e.inputs.get("clusterName"), e.inputs.get("principalArn"))
        if key in seen:
            out.append(f"{e.name}: a second access entry for {key[1]} (already {seen[key]}); EKS allows one per principal")
        seen[key] = e.name
        if e.inputs.get("type") not in (None, "STANDARD"):
            continue
        assoc = [a for a in g.of(ACCESS_POLICY_ASSOCIATION)
                 if (a.inputs.get("clusterName"), a.inputs.get("principalArn")) == key]
        if not assoc:
            out.append(f"{e.name}: access entry for {key[1]} without an access policy association (it authenticates, but may do nothing)")
        for a in assoc:
            if e.urn and e.urn not in a.dependencies:
                out.append(f"{a.name}: associated without waiting for access entry {e.name}")
            if not str(a.inputs.get("policyArn", "")).startswith("arn:aws:eks::aws:cluster-access-policy/"):
                out.append(f"{a.name}: policyArn {a.inputs.get('policyArn')!r} is not an EKS access policy")
            scope = a.inputs.get("accessScope") or {}
            if scope.get("type") not in ("cluster", "namespace") or (scope.get("type") == "namespace") != bool(scope.get("namespaces")):
                out.append(f"{a.name}: accessScope {scope} is neither cluster nor namespace with namespaces")
    return out


@rule(AREA_CLUSTER_ACCESS)
def cluster_is_administered_without_the_creator(g: Graph) -> list[str]:
    """A cluster created with ``bootstrapClusterCreatorAdminPermissions: false`` gives its creator no access entry, so the
    stack names at least one cluster-admin (AmazonEKSClusterAdminPolicy, cluster scope) and the Kubernetes objects of
    the same ``up`` come after that association (else the installing identity is refused by the API server). The mode is
    API or API_AND_CONFIG_MAP (access entries exist only there); with CONFIG_MAP EKS refuses the flag off. Sources: EKS API
    CreateAccessConfigRequest (bootstrapClusterCreatorAdminPermissions, authenticationMode API | API_AND_CONFIG_MAP |
    CONFIG_MAP); upbound/configuration-aws-eks#130 ("bootstrapClusterCreatorAdminPermissions must be true if cluster
    authentication mode is set to CONFIG_MAP")."""
    out = []
    for c in g.of(EKS):
        ac = c.inputs.get("accessConfig") or {}
        mode = ac.get("authenticationMode", "CONFIG_MAP")
        if mode not in AUTHENTICATION_MODES:
            out.append(f"{c.name}: authenticationMode {mode!r} is not one of {AUTHENTICATION_MODES}")
        if ac.get("bootstrapClusterCreatorAdminPermissions", True):
            continue
        if mode == "CONFIG_MAP":
            out.append(f"{c.name}: bootstrapClusterCreatorAdminPermissions false with authenticationMode CONFIG_MAP (EKS refuses it)")
        admins = [a for a in g.of(ACCESS_POLICY_ASSOCIATION) if a.inputs.get("clusterName") == c.inputs.get("name")
                  and a.inputs.get("policyArn") == CLUSTER_ADMIN_POLICY and (a.inputs.get("accessScope") or {}).get("type") == "cluster"]
        if not admins:
            out.append(f"{c.name}: created without the creator's admin and no cluster-admin access entry: nobody can administer it")
            continue
        admin_urns = {a.urn for a in admins}
        for p in g.of("pulumi:providers:kubernetes"):
            if not admin_urns & set(p.dependencies):
                out.append(f"{p.name}: Kubernetes provider does not wait for a cluster-admin access entry of {c.name}")
    return out


@rule(AREA_CLUSTER_ACCESS)
def secrets_are_envelope_encrypted_with_a_rotating_key(g: Graph) -> list[str]:
    """A cluster with ``encryptionConfig`` encrypts ``secrets`` (the one resource EKS takes) with a symmetric KMS key of
    the stack that has automatic rotation on and that the cluster waits for, and the cluster role may use that key
    (kms:Encrypt, kms:Decrypt, kms:ListGrants, kms:DescribeKey). Sources: EKS API EncryptionConfig (resources:
    "secrets"); EKS user guide enable-kms (symmetric key, same Region); terraform-aws-modules/terraform-aws-eks main.tf
    @0005984c (cluster_encryption policy, enable_key_rotation)."""
    out = []
    keys = {k.urn: k for k in g.of(KMS_KEY)}
    for c in g.of(EKS):
        enc = c.inputs.get("encryptionConfig")
        if not enc:
            continue
        if sorted(enc.get("resources") or []) != ["secrets"]:
            out.append(f"{c.name}: encryptionConfig resources {enc.get('resources')} (EKS takes [secrets])")
        mine = [keys[u] for u in c.dependencies if u in keys]
        if not mine:
            out.append(f"{c.name}: encryptionConfig with no KMS key of the stack that the cluster waits for")
        for k in mine:
            if k.inputs.get("enableKeyRotation") is not True:
                out.append(f"{k.name}: KMS key for {c.name}'s Secrets without enableKeyRotation")
            if k.inputs.get("customerMasterKeySpec", k.inputs.get("keySpec", "SYMMETRIC_DEFAULT")) != "SYMMETRIC_DEFAULT":
                out.append(f"{k.name}: not a symmetric key (EKS envelope encryption needs SYMMETRIC_DEFAULT)")
            uses = [p for p in g.of(IAM_ROLE_POLICY) if k.urn in p.dependencies and p.urn in c.dependencies
                    and str(p.inputs.get("role")) == _role_id_of(g, c)]
            if not uses or not all(a in str(uses[0].inputs.get("policy")) for a in ("kms:Encrypt", "kms:Decrypt", "kms:DescribeKey")):
                out.append(f"{c.name}: its role has no policy on KMS key {k.name} that the cluster waits for")
    return out


def _role_id_of(g: Graph, c: Res) -> str:
    """The mock id of the cluster's IAM role (its roleArn ends with the role's name under the mocks)."""
    role = next((r for r in g.of(IAM_ROLE) if str(c.inputs.get("roleArn", "")).endswith("/" + str(r.inputs.get("name") or r.name))), None)
    return role.id if role else ""


@rule(AREA_CLUSTER_ACCESS)
def control_plane_logs_have_their_log_group_first(g: Graph) -> list[str]:
    """A cluster that sends control-plane logs writes to the log group ``/aws/eks/<cluster>/cluster``; the stack creates
    it with a retention before the cluster, or EKS creates it on first delivery with no retention (kept forever) and the
    stack's own create then fails on the existing group. Every log type is one EKS knows. Sources: EKS user guide "Send
    control plane logs to CloudWatch Logs" (log group /aws/eks/my-cluster/cluster; api, audit, authenticator,
    controllerManager, scheduler); terraform-aws-modules/terraform-aws-eks main.tf @0005984c (aws_cloudwatch_log_group
    /aws/eks/${cluster_name}/cluster, retention_in_days, in the cluster's depends_on); CloudWatch Logs
    PutRetentionPolicy (retention values). The cluster role may not create log groups, or logs still delivered while
    the cluster is destroyed re-create the group outside the stack (terraform-aws-eks main.tf, inline Deny
    logs:CreateLogGroup; terraform-aws-modules/terraform-aws-eks#920)."""
    from stacks.cluster import CONTROL_PLANE_LOG_TYPES, LOG_RETENTION_DAYS

    out = []
    for c in g.of(EKS):
        types = c.inputs.get("enabledClusterLogTypes") or []
        bad = [t for t in types if t not in CONTROL_PLANE_LOG_TYPES]
        if bad:
            out.append(f"{c.name}: enabledClusterLogTypes {bad} are not EKS log types {CONTROL_PLANE_LOG_TYPES}")
        if not types:
            continue
        want = f"/aws/eks/{c.inputs.get('name')}/cluster"
        groups = [lg for lg in g.of(LOG_GROUP) if lg.inputs.get("name") == want]
        if not groups:
            out.append(f"{c.name}: logs {types} without the stack's log group {want} (EKS would create it with no retention)")
            continue
        for lg in groups:
            if lg.urn not in c.dependencies:
                out.append(f"{c.name}: does not wait for log group {lg.name} ({want})")
            if int(lg.inputs.get("retentionInDays") or 0) not in LOG_RETENTION_DAYS:
                out.append(f"{lg.name}: retentionInDays {lg.inputs.get('retentionInDays')} is not a CloudWatch Logs retention")
        role = _role_id_of(g, c)
        denies = [p for p in g.of(IAM_ROLE_POLICY) if str(p.inputs.get("role")) == role and '"Deny"' in str(p.inputs.get("policy"))
                  and "logs:CreateLogGroup" in str(p.inputs.get("policy"))]
        if not denies:
            out.append(f"{c.name}: its role may create log groups, so logs delivered during destroy re-create {want} outside the stack")
    return out


# --------------------------------------------------------------------------- update rules: a before/after pair of graphs
# What the program registers on one `up` (before) and on the next (after), for the resources both hold (same name):
# the request the provider sends to AWS for the change, checked against what the AWS API accepts on update.

UpdateRule = Callable[[Graph, Graph], list[str]]
UPDATE_RULES: dict[UpdateRule, tuple[str, ...]] = {}  # an update rule -> the AWS constraint areas it guards (AREAS)


def update_rule(*areas: str):
    unknown = [a for a in areas if a not in AREAS]
    if unknown or not areas:
        raise ValueError(f"unknown AWS constraint area(s) {unknown or '(none named)'}; valid: {list(AREAS)}")

    def deco(fn: UpdateRule) -> UpdateRule:
        UPDATE_RULES[fn] = areas
        return fn
    return deco


def check_update(before: Graph, after: Graph, rules: Iterable[UpdateRule] = ()) -> list[str]:
    return [f"{fn.__name__}: {v}" for fn in (list(rules) or UPDATE_RULES) for v in fn(before, after)]


def _scaling(ng: Res) -> tuple[int, int, int]:
    sc = ng.inputs.get("scalingConfig") or {}
    return int(sc.get("minSize", 0)), int(sc.get("desiredSize", 0)), int(sc.get("maxSize", 0))


def sent_scaling(before: Res, after: Res) -> Optional[tuple[int, int, int]]:
    """The (min, desired, max) UpdateNodegroupConfig carries when ``after`` replaces ``before``'s inputs, None when the
    scalingConfig does not change. An ignored path keeps its old value (Pulumi ``ignoreChanges``: the old input is
    used), and the provider sends the whole block (terraform-provider-aws node_group.go update)."""
    lo, want, hi = _scaling(after)
    if any(k in ("scalingConfig", "scalingConfig.desiredSize") for k in after.ignore_changes):
        want = _scaling(before)[1]
    if "scalingConfig" in after.ignore_changes:
        lo, hi = _scaling(before)[0], _scaling(before)[2]
    return None if (lo, want, hi) == _scaling(before) else (lo, want, hi)


def _pairs(before: Graph, after: Graph, typ: str):
    old = {r.name: r for r in before.of(typ)}
    return [(old[r.name], r) for r in after.of(typ) if r.name in old]


@update_rule(AREA_NODE_GROUP_SIZES)
def node_group_update_keeps_min_desired_max(before: Graph, after: Graph) -> list[str]:
    """UpdateNodegroupConfig is refused unless the scaling it carries has min <= desired <= max: "Minimum capacity N
    can't be greater than desired size M" (a scale-up whose new minimum meets the old desired size) and "desiredSize
    can't be greater than maxSize" (a scale-down whose new maximum meets it). Source: EKS API ``UpdateNodegroupConfig``
    / ``NodegroupScalingConfig``; terraform-aws-eks issues 748, 2030, 3683 (scale-up), 944; ministryofjustice/
    cloud-platform-infrastructure PR 4595 (the maxSize error); terraform-provider-aws internal/service/eks/node_group.go."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        sent = sent_scaling(old, new)
        if sent is None:
            continue
        lo, want, hi = sent
        if lo > want:
            out.append(f"{new.name}: InvalidParameterException: Minimum capacity {lo} can't be greater than desired size {want}")
        if want > hi:
            out.append(f"{new.name}: InvalidParameterException: desiredSize {want} can't be greater than maxSize {hi}")
    return out


@update_rule(AREA_NODE_GROUP_SIZES)
def node_group_update_runs_the_size_asked_for(before: Graph, after: Graph) -> list[str]:
    """After the update a node group runs the desired size the new graph names (``dynamo:cluster.gpuNodes`` or what the
    replicas need): EKS keeps the desired size the request carried, or the old one when the request leaves it out or
    carries the old one. Source: EKS API ``NodegroupScalingConfig`` ("desiredSize: the current number of nodes that
    the managed node group should maintain"); terraform-provider-aws internal/service/eks/node_group.go."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        sent = sent_scaling(old, new)
        runs = sent[1] if sent else _scaling(old)[1]
        if runs != _scaling(new)[1]:
            out.append(f"{new.name}: runs {runs} node(s) after the update, the stack asks for {_scaling(new)[1]}")
    return out


@update_rule(AREA_NODE_GROUP_SIZES, AREA_NODE_COUNT)
def node_group_update_reaches_the_nodes_the_dgds_need(before: Graph, after: Graph) -> list[str]:
    """After the update a GPU node group keeps the desired size the request carried (or its old one when no request
    changes it), and that is the node count EKS runs: it must hold every GPU worker of the new DGDs, or the new pods
    stay Pending and the DGD waits out ``dgdTimeout`` (a Capacity Block group with min 0 accepts a larger maximum and
    adds nothing). Source: EKS API ``NodegroupScalingConfig`` ("desiredSize: the current number of nodes that the
    managed node group should maintain"); Kubernetes scheduling of extended resources."""
    out = []
    assigned, _ = _assigned(after)
    for old, new in _pairs(before, after, NODEGROUP):
        if new.name not in assigned:
            continue
        sent = sent_scaling(old, new)
        runs = sent[1] if sent else _scaling(old)[1]
        shape = INSTANCES[_instance_type(after, new)]
        cap = {"nvidia.com/gpu": shape.gpus_per_node}
        if _efa_devices(_launch_template(after, new)):
            cap["vpc.amazonaws.com/efa"] = _efa_devices(_launch_template(after, new))
        needed, _ = pack({"spec": {"components": assigned[new.name]}}, cap)
        if runs < needed:
            out.append(f"{new.name}: keeps {runs} node(s) after the update, the DGDs need {needed} {shape.instance_type}")
    return out


# Launch template inputs whose change makes the provider create a new launch template version (everything but the
# template's own tags and default-version settings: terraform-provider-aws internal/service/ec2/ec2_launch_template.go,
# resourceLaunchTemplateUpdate ``updateKeys``); the node group then moves to that version (its launchTemplate.version
# is the template's latest_version, components/cluster.py).
_LT_NOT_VERSIONED = ("tags", "tagsAll", "defaultVersion", "updateDefaultVersion", "name", "namePrefix")


def _version_changes(before: Graph, after: Graph, old: Res, new: Res) -> list[str]:
    """What makes the provider send UpdateNodegroupVersion for ``old`` -> ``new``: a new Kubernetes ``version``, a new
    ``releaseVersion`` (AMI), a new ``launchTemplate.version``, or a change to the launch template's data (a new
    version of the same template). A different launch template id or name replaces the group (ForceNew), no update."""
    out = []
    for key, what in (("version", "Kubernetes version"), ("releaseVersion", "AMI release version")):
        a, b = old.inputs.get(key), new.inputs.get(key)
        if b is not None and a != b and not _ignored(new, key):
            out.append(f"{what} {a} -> {b}")
    if _ignored(new, "launchTemplate"):
        return out
    a, b = _get(old.inputs, "launchTemplate", "version"), _get(new.inputs, "launchTemplate", "version")
    if a is not None and b is not None and str(a) != str(b) and not _ignored(new, "launchTemplate.version"):
        out.append(f"launch template version {a} -> {b}")
    lt_old, lt_new = _launch_template(before, old), _launch_template(after, new)
    if lt_old is not None and lt_new is not None and lt_old.name == lt_new.name:
        a_data, b_data = ({k: v for k, v in lt.inputs.items() if k not in _LT_NOT_VERSIONED} for lt in (lt_old, lt_new))
        changed = sorted(k for k in set(a_data) | set(b_data) if a_data.get(k) != b_data.get(k))
        if changed and not any(s.startswith("launch template version") for s in out):
            out.append(f"launch template {lt_new.name} changes ({', '.join(changed)}): a new launch template version")
    return out


@update_rule(AREA_CAPACITY_BLOCKS, AREA_NODE_GROUP_SIZES)
def capacity_block_group_updates_its_version_at_zero_nodes(before: Graph, after: Graph) -> list[str]:
    """A Capacity Block node group's version (its launch template version, AMI release version or Kubernetes version)
    is updated only while its desired size is 0: "When upgrading managed node groups with Capacity Blocks, make sure
    that the desired size of the node group is set to 0". The size EKS has when the update starts is the group's desired
    size before it: the provider sends UpdateNodegroupVersion first ("Do any version update first") and the new scaling
    after it in UpdateNodegroupConfig, so an update that both pauses the group and changes its version is refused too:
    pause in one ``up``, change the version in the next, resume in a third. On-demand and reserved groups are not
    concerned. Sources: EKS user guide "Create a managed node group with Capacity Blocks for ML" (capacity-blocks-mng,
    Considerations); hashicorp/terraform-provider-aws internal/service/eks/node_group.go @012e0a32 (resourceNodeGroupUpdate;
    launch_template id and name ForceNew, version in place) and internal/service/ec2/ec2_launch_template.go
    (resourceLaunchTemplateUpdate: CreateLaunchTemplateVersion on a change of the template's data)."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        if old.inputs.get("capacityType") != "CAPACITY_BLOCK":
            continue
        running = _scaling(old)[1]
        changes = _version_changes(before, after, old, new)
        if changes and running > 0:
            then = (" (this update also pauses it, but the version update goes out first)"
                    if (sent_scaling(old, new) or _scaling(old))[1] == 0 else "")
            out.append(f"{new.name}: {'; '.join(changes)} while the Capacity Block group runs {running} node(s){then}: EKS updates "
                       "a Capacity Block group's version only at desired size 0. First pause it (dynamo:paused: true, or paused: "
                       "true on every dynamo:serve entry of this pool) and run `pulumi up`; then make this change and `pulumi up`; "
                       "then resume (docs/deploy-aws.md, \"Capacity Block groups: pause, update, resume\")")
    return out


def _ignored(res: Res, path: str) -> bool:
    """``path`` (dotted input path) or one of its parents is in the resource's ignoreChanges."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in res.ignore_changes for i in range(1, len(parts) + 1))


def _bootstrap(c: Res) -> bool:
    return bool(_get(c.inputs, "accessConfig", "bootstrapClusterCreatorAdminPermissions", default=True))


def _secrets_key(g: Graph, c: Res) -> Optional[str]:
    """The name of the stack's KMS key a cluster's encryptionConfig uses (the key the cluster waits for), or None
    without encryptionConfig."""
    if not c.inputs.get("encryptionConfig"):
        return None
    return next((_urn_name(u) for u in c.dependencies if "$aws:kms/key:Key::" in u), "<a key outside the stack>")


@update_rule(AREA_CLUSTER_ACCESS)
def eks_update_keeps_the_creator_bootstrap(before: Graph, after: Graph) -> list[str]:
    """``accessConfig.bootstrapClusterCreatorAdminPermissions`` acts only when EKS creates the cluster and the provider
    replaces the cluster when it changes, so an update carries the value the cluster was created with: the program
    keeps it with ``ignoreChanges`` (the old input, from the state; the new value only on create). A replaced cluster
    takes every node, add-on and workload with it. Sources: EKS API CreateAccessConfigRequest ("set as a cluster admin
    access entry during cluster creation time"); terraform-provider-aws internal/service/eks/cluster.go
    (bootstrap_cluster_creator_admin_permissions ForceNew); opendatacube/datacube-k8s-eks#303 (the same change
    recreating existing clusters); Pulumi docs, "Resource option: ignoreChanges"."""
    out = []
    for old, new in _pairs(before, after, EKS):
        sent = _bootstrap(old) if _ignored(new, "accessConfig.bootstrapClusterCreatorAdminPermissions") else _bootstrap(new)
        if sent != _bootstrap(old):
            out.append(f"{new.name}: bootstrapClusterCreatorAdminPermissions {_bootstrap(old)} -> {sent} replaces the cluster "
                       "(create-only); keep it in ignoreChanges so an existing cluster keeps its value")
    return out


@update_rule(AREA_CLUSTER_ACCESS)
def eks_update_never_removes_secrets_encryption(before: Graph, after: Graph) -> list[str]:
    """Secrets envelope encryption cannot be removed from a cluster ("You can't disable secrets encryption after enabling
    it. This action is irreversible"): an update without the ``encryptionConfig`` the cluster has makes the provider
    replace the cluster, and adding one is an in-place AssociateEncryptionConfig. Its key cannot be swapped either: the
    provider sends nothing for a changed key (it associates only when there was none), so the cluster keeps using the
    old key, which the stack would then delete. Sources: EKS user guide enable-kms (the warning); terraform-provider-aws
    internal/service/eks/cluster.go (``ForceNewIfChange("encryption_config", ...)`` from one to none;
    AssociateEncryptionConfig only from none to one); EKS API AssociateEncryptionConfig."""
    out = []
    for old, new in _pairs(before, after, EKS):
        had, has = _secrets_key(before, old), (None if _ignored(new, "encryptionConfig") else _secrets_key(after, new))
        if _ignored(new, "encryptionConfig"):
            has = had
        if had and not has:
            out.append(f"{new.name}: Secrets envelope encryption (key {had}) removed from an existing cluster: EKS cannot disable it "
                       "and the provider replaces the cluster; keep dynamo:cluster.secretsEncryption: true on this stack")
        elif had and has and had != has:
            out.append(f"{new.name}: Secrets key {had} -> {has}: EKS keeps the key a cluster was given, and {had} would be deleted")
    return out


@update_rule(AREA_CLUSTER_ACCESS)
def eks_update_authentication_mode_only_moves_to_api(before: Graph, after: Graph) -> list[str]:
    """The authentication mode moves CONFIG_MAP -> API_AND_CONFIG_MAP -> API and never back ("you can't change the
    authentication mode back to a mode that removes the EKS API and access entries"). Sources: EKS user guide "Change
    authentication mode to use access entries" (setting-up-access-entries); EKS API UpdateAccessConfigRequest."""
    order = {m: i for i, m in enumerate(("CONFIG_MAP", "API_AND_CONFIG_MAP", "API"))}
    out = []
    for old, new in _pairs(before, after, EKS):
        a = _get(old.inputs, "accessConfig", "authenticationMode", default="CONFIG_MAP")
        b = _get(new.inputs, "accessConfig", "authenticationMode", default=a)
        if order.get(b, -1) < order.get(a, -1):
            out.append(f"{new.name}: authenticationMode {a} -> {b}: EKS cannot move back from access entries")
    return out


@update_rule(AREA_KUBERNETES_VERSION)
def eks_update_moves_one_minor_version(before: Graph, after: Graph) -> list[str]:
    """An existing control plane moves one Kubernetes minor version per update and never back: UpdateClusterVersion to
    a version two minors ahead, or an older one, is refused by EKS after the `up` has started (the program looks the
    running version up first: components/cluster_source.py). Sources: EKS user guide "Update existing cluster to new
    Kubernetes version" (update-cluster: "update to the next minor version only", "You can't downgrade");
    terraform-provider-aws internal/service/eks/cluster.go (a changed ``version`` is one UpdateClusterVersion, in place)."""
    out = []
    for old, new in _pairs(before, after, EKS):
        a, b = (re.fullmatch(r"1\.(\d+)", str(r.inputs.get("version"))) for r in (old, new))
        if not a or not b:
            continue
        if int(b[1]) < int(a[1]):
            out.append(f"{new.name}: version {old.inputs.get('version')} -> {new.inputs.get('version')}: EKS cannot downgrade a cluster")
        elif int(b[1]) - int(a[1]) > 1:
            out.append(f"{new.name}: version {old.inputs.get('version')} -> {new.inputs.get('version')}: EKS upgrades one minor "
                       f"version per UpdateClusterVersion")
    return out


# --------------------------------------------------------------------------- retention and destroy


@rule(AREA_RETENTION)
def cache_file_system_follows_the_claim(g: Graph) -> list[str]:
    """The cache file system is retained exactly when the cache claim is (``dynamo:storage.protect``): a protected
    claim on a deleted file system is useless, and an unprotected stack must not leave a billed file system.
    Source: EFS/FSx pricing (storage billed per GB-month until deleted); Kubernetes "Persistent Volumes" (Retain)."""
    out = []
    claims = g.of(PVC)
    for fs in g.of(FSX) + g.of(EFS):
        for c in claims:
            if c.retain_on_delete != fs.retain_on_delete:
                out.append(f"{fs.name}: retainOnDelete {fs.retain_on_delete}, cache claim {c.name} {c.retain_on_delete}")
    return out


_REFS = {"subnetId": SUBNET, "subnetIds": SUBNET, "securityGroupIds": SECURITY_GROUP, "securityGroups": SECURITY_GROUP, "vpcId": VPC}


@rule(AREA_RETENTION)
def retained_resources_keep_their_network(g: Graph) -> list[str]:
    """A retained resource with network interfaces keeps the subnets, security groups and VPC they sit in: deleting
    a subnet or security group that an ENI still uses fails with DependencyViolation, so ``pulumi destroy`` would
    stop. EFS mount targets are deleted (their ENIs go with them); an FSx file system's ENIs stay with it.
    Source: EC2 API ``DeleteSubnet``/``DeleteSecurityGroup`` (DependencyViolation); FSx user guide "File system
    access control with Amazon VPC" (the file system's network interfaces)."""
    out = []
    pending = [r for r in g.resources if r.retain_on_delete and r.type.startswith("aws:")]
    seen = set()
    while pending:
        r = pending.pop()
        if r.name in seen:
            continue
        seen.add(r.name)
        for key, typ in _REFS.items():
            ids = r.inputs.get(key)
            for rid in ids if isinstance(ids, list) else [ids] if ids else []:
                dep = g.by_id(rid, typ)
                if dep is None:
                    continue
                if not dep.retain_on_delete:
                    out.append(f"{r.name} is retained but its {key} {dep.name} is not: destroy fails with DependencyViolation")
                pending.append(dep)
    return out


# --------------------------------------------------------------------------- Kubernetes version


@rule(AREA_KUBERNETES_VERSION)
def kubernetes_version_in_standard_support(g: Graph) -> list[str]:
    """The control plane runs a Kubernetes version in EKS standard support (14 months from release; extended
    support costs extra per cluster hour): 1.34 or newer today, pinned in stacks/registry/versions.yaml.
    Source: EKS user guide "Understand the Kubernetes version lifecycle on EKS" (kubernetes-versions)."""
    out = []
    for c in g.of(EKS):
        v = str(c.inputs.get("version"))
        ok = re.fullmatch(r"1\.(\d+)", v)
        if v not in kubernetes_versions() or not ok or int(ok[1]) < 34:
            out.append(f"{c.name}: version {v!r} is not in standard support ({', '.join(kubernetes_versions())})")
    return out


# --------------------------------------------------------------------------- Secrets on a new cluster


def _pull_secret_refs(x: Any) -> Iterable[str]:
    if isinstance(x, dict):
        for s in x.get("imagePullSecrets") or [] if isinstance(x.get("imagePullSecrets"), list) else []:
            yield s.get("name")
        for k, v in x.items():
            yield from _pull_secret_refs(v)
    elif isinstance(x, list):
        for v in x:
            yield from _pull_secret_refs(v)


def _secret_refs(x: Any) -> Iterable[str]:
    if isinstance(x, dict):
        for key in ("secretRef", "secretKeyRef"):
            if isinstance(x.get(key), dict) and x[key].get("name"):
                yield x[key]["name"]
        for v in x.values():
            yield from _secret_refs(v)
    elif isinstance(x, list):
        for v in x:
            yield from _secret_refs(v)


@rule(AREA_SECRETS)
def secrets_exist_on_a_new_cluster(g: Graph) -> list[str]:
    """On a cluster the same ``up`` creates, every Secret the workloads name (image pull secrets, the HF token)
    must be created by the stack: nothing else could have made it, and pods would fail ErrImagePull or
    CreateContainerConfigError. Pull secrets are ``kubernetes.io/dockerconfigjson``, and the DGD waits for them.
    Source: Kubernetes "Pull an Image from a Private Registry"; EKS (a new cluster has no user Secrets)."""
    if not g.of(EKS):
        return []
    out = []
    for r in g.of(DGD) + g.of(JOB):
        ns = _get(r.inputs, "metadata", "namespace")
        for name in set(_pull_secret_refs(r.inputs.get("spec"))):
            s = g.k8s(SECRET, name, ns)
            if s is None:
                out.append(f"{r.name}: imagePullSecret {name} is not created by the stack")
            elif s.inputs.get("type") != "kubernetes.io/dockerconfigjson":
                out.append(f"{r.name}: imagePullSecret {name} has type {s.inputs.get('type')!r}")
            elif r.type == DGD and s.urn and s.urn not in r.dependencies:
                out.append(f"{r.name}: does not wait for imagePullSecret {name} (workers would start in ErrImagePull)")
        for name in set(_secret_refs(r.inputs.get("spec"))):
            if g.k8s(SECRET, name, ns) is None:
                out.append(f"{r.name}: Secret {name} is not created by the stack")
    return out


# --------------------------------------------------------------------------- EFS throughput


@rule(AREA_EFS_THROUGHPUT)
def efs_provisioned_throughput_in_the_api_range(g: Graph) -> list[str]:
    """``ProvisionedThroughputInMibps`` is one the EFS API accepts: "Valid values are 1-3414 MiBps, with the upper limit
    depending on Region" (AWS Support raises it). Source: EFS API reference ``CreateFileSystem`` /
    ``UpdateFileSystem`` ProvisionedThroughputInMibps."""
    lo, hi = EFS_PROVISIONED_MIBPS
    return [f"{fs.name}: provisionedThroughputInMibps {fs.inputs['provisionedThroughputInMibps']} is outside {lo}-{hi}"
            for fs in g.of(EFS) if fs.inputs.get("provisionedThroughputInMibps") is not None
            and not lo <= float(fs.inputs["provisionedThroughputInMibps"]) <= hi]


@rule(AREA_EFS_THROUGHPUT)
def efs_provisioned_throughput_has_its_value(g: Graph) -> list[str]:
    """An EFS file system in provisioned throughput mode carries ``ProvisionedThroughputInMibps``.
    Source: EFS API ``CreateFileSystem`` (ProvisionedThroughputInMibps: required with ThroughputMode provisioned);
    EFS user guide "Amazon EFS performance"."""
    out = []
    for fs in g.of(EFS):
        if fs.inputs.get("throughputMode") == "provisioned" and not fs.inputs.get("provisionedThroughputInMibps"):
            out.append(f"{fs.name}: throughputMode provisioned without provisionedThroughputInMibps")
    return out


# --------------------------------------------------------------------------- EFA launch template shape


EFS_POLICY = "aws:efs/fileSystemPolicy:FileSystemPolicy"


@rule(AREA_CACHE_ACCESS)
def efs_cache_refuses_clients_without_tls(g: Graph) -> list[str]:
    """An EFS cache carries a file-system policy that denies every request without TLS and still grants mounting through
    a mount target (what EFS grants by default), and is encrypted at rest. Sources: EFS user guide, "Creating file
    system policies" ("Enforce in-transit encryption for all clients"), "Using IAM to control access to file systems"
    (the default policy: ClientRootAccess, ClientWrite, ClientMount with elasticfilesystem:AccessedViaMountTarget),
    "Encrypting data at rest" (encryption is chosen at creation only)."""
    import json

    out = []
    for fs in g.of(EFS):
        if fs.inputs.get("encrypted") is not True:
            out.append(f"{fs.name}: not encrypted at rest (only a new file system can be)")
        pols = [p for p in g.of(EFS_POLICY) if p.inputs.get("fileSystemId") == fs.id]
        if not pols:
            out.append(f"{fs.name}: no file-system policy: any host of the VPC mounts the cache over plain NFS")
            continue
        doc = json.loads(pols[0].inputs.get("policy") or "{}")
        sts = doc.get("Statement") or []
        deny = any(st.get("Effect") == "Deny" and st.get("Action") == "*"
                   and _get(st, "Condition", "Bool", "aws:SecureTransport") == "false" for st in sts)
        mount = any(st.get("Effect") == "Allow" and "elasticfilesystem:ClientMount" in (st.get("Action") or [])
                    and _get(st, "Condition", "Bool", "elasticfilesystem:AccessedViaMountTarget") == "true" for st in sts)
        if not deny:
            out.append(f"{pols[0].name}: the policy does not deny requests without TLS (aws:SecureTransport false)")
        if not mount:
            out.append(f"{pols[0].name}: the policy grants no ClientMount through a mount target: the nodes cannot mount the cache")
    return out


@rule(AREA_EFA)
def efa_only_is_never_the_primary_interface(g: Graph) -> list[str]:
    """The primary network interface (network card 0, device 0) is ENA or EFA (with ENA), never EFA-only; each
    network card carries at most one interface at device index 0. Source: EC2 user guide
    "Maximize network bandwidth on Amazon EC2 instances with multiple network cards" (efa-acc-inst-types)."""
    out = []
    for lt in g.of(LAUNCH_TEMPLATE):
        nis = lt.inputs.get("networkInterfaces") or []
        primary = [n for n in nis if n.get("networkCardIndex", 0) == 0 and n.get("deviceIndex", 0) == 0]
        if nis and (len(primary) != 1 or primary[0].get("interfaceType") == "efa-only"):
            out.append(f"{lt.name}: primary interface is {primary}")
        slots = [(n.get("networkCardIndex", 0), n.get("deviceIndex", 0)) for n in nis]
        if len(slots) != len(set(slots)):
            out.append(f"{lt.name}: two interfaces on the same network card and device index")
    return out


@rule(AREA_EFA)
def single_node_without_efa_workers_gets_no_efa(g: Graph) -> list[str]:
    """A GPU node group of one node whose DGD workers request no EFA device (an aggregated target on one node) gets
    no EFA interfaces and no placement group: EFA is OS-bypass networking with other instances and a cluster placement
    group minimises latency between instances, neither of which one instance uses. Source: AWS ParallelCluster user
    guide "Elastic Fabric Adapter" (docs.aws.amazon.com/parallelcluster/v2/ug/efa.html); EC2 user guide "Placement
    groups" (cluster: instances close together for low-latency traffic between them)."""
    out = []
    assigned, _ = _assigned(g)
    for ng in _gpu_nodegroups(g):
        comps = assigned[ng.name]
        if not comps or int(_get(ng.inputs, "scalingConfig", "maxSize", default=0)) != 1:
            continue  # no serving entry sizes it (a cluster stack's pool), or more than one node
        if any(pod_requests_efa(c) for c in comps):
            continue
        lt = _launch_template(g, ng)
        if _efa_devices(lt):
            out.append(f"{ng.name}: one node, no worker requests vpc.amazonaws.com/efa, yet {_efa_devices(lt)} EFA interfaces")
        if lt is not None and _get(lt.inputs, "placement", "groupName"):
            out.append(f"{ng.name}: one node in placement group {_get(lt.inputs, 'placement', 'groupName')}")
    return out


def pod_requests_efa(comp: dict) -> bool:
    return any("vpc.amazonaws.com/efa" in ((c.get("resources") or {}).get("limits") or {})
               for c in comp["podTemplate"]["spec"].get("containers", []))



# --------------------------------------------------------------------------- Karpenter pools (capacity: karpenter)
# The objects stacks/cluster/karpenter.py builds and components/cluster.py registers: the NodePool and EC2NodeClass custom
# resources, the Karpenter release, its IAM, Pod Identity, interruption queue and rules. The source of each
# constraint is in the rule's docstring; the constants come from stacks/cluster/karpenter.py (sigs.k8s.io/karpenter@v1.13.0).

NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"
EC2NODECLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
IAM_ROLE = "aws:iam/role:Role"
IAM_POLICY = "aws:iam/policy:Policy"
ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
POD_IDENTITY = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
SQS_QUEUE = "aws:sqs/queue:Queue"
SQS_QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"
EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"
EC2_TAG = "aws:ec2/tag:Tag"
EKS_ADDON = "aws:eks/addon:Addon"


def _karpenter_release(g: Graph) -> Optional[Res]:
    return next((r for r in g.of(HELM) if str(r.inputs.get("chart", "")).endswith("/karpenter")), None)


def _requirements(np: Res) -> list[dict]:
    return _get(np.inputs, "spec", "template", "spec", "requirements", default=[]) or []


def _req_values(np: Res, key: str) -> list[str]:
    return [v for r in _requirements(np) if r.get("key") == key and r.get("operator") == "In" for v in r.get("values") or []]


def _nodepool_labels(np: Res) -> dict:
    """The labels a node of the NodePool carries: its template labels and the single values its requirements pin
    (Karpenter labels a node with the requirement values it launched for: karpenter.sh docs, NodePools "requirements")."""
    labels = dict(_get(np.inputs, "spec", "template", "metadata", "labels", default={}) or {})
    for r in _requirements(np):
        if r.get("operator") == "In" and len(r.get("values") or []) == 1:
            labels.setdefault(r["key"], r["values"][0])
    return labels


def _nodeclass_of(g: Graph, np: Res) -> Optional[Res]:
    ref = _get(np.inputs, "spec", "template", "spec", "nodeClassRef", default={}) or {}
    return g.k8s(EC2NODECLASS, ref.get("name")) if ref.get("kind") == "EC2NodeClass" else None


def _policy_statements(g: Graph) -> list[dict]:
    import json

    out = []
    for p in g.of(IAM_POLICY):
        doc = p.inputs.get("policy")
        try:
            doc = json.loads(doc) if isinstance(doc, str) else doc
        except ValueError:
            continue
        out += (doc or {}).get("Statement") or []
    return out


def _actions(st: dict) -> list[str]:
    a = st.get("Action") or []
    return [a] if isinstance(a, str) else list(a)


def _resources(st: dict) -> list[str]:
    r = st.get("Resource") or []
    return [r] if isinstance(r, str) else list(r)


def _gpu_components(g: Graph) -> list[tuple[Res, dict]]:
    return [(dgd, comp) for dgd in g.of(DGD) for comp in _get(dgd.inputs, "spec", "components", default=[])
            if any("nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {}) for c in comp["podTemplate"]["spec"].get("containers", []))]


def _on_nodepool(g: Graph, np: Res) -> list[tuple[Res, dict]]:
    """The GPU worker components whose pods can land on the NodePool's nodes: selected by their nodeSelector/affinity
    and tolerating its taints."""
    labels = _nodepool_labels(np)
    taints = _get(np.inputs, "spec", "template", "spec", "taints", default=[]) or []
    return [(d, c) for d, c in _gpu_components(g) if _selects(c["podTemplate"]["spec"], labels)
            and all(tolerates(c["podTemplate"]["spec"], t) for t in taints)]


@rule()
def karpenter_nodepool_requirements_are_valid(g: Graph) -> list[str]:
    """Every NodePool requirement is one Karpenter accepts: operators In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte,
    In with values; ``karpenter.sh/capacity-type`` values from on-demand, spot, reserved; no other ``karpenter.sh``
    label key; ``karpenter.k8s.aws/capacity-reservation-type`` values default or capacity-block and only with reserved;
    the instance types are GPU instances this project knows; the nodeClassRef names a registered EC2NodeClass; taint
    effects NoSchedule, PreferNoSchedule or NoExecute. Source: sigs.k8s.io/karpenter@v1.13.0
    pkg/apis/crds/karpenter.sh_nodepools.yaml (requirements, taints) and pkg/apis/v1/labels.go (capacity types);
    aws/karpenter-provider-aws designs/capacity-block-support.md (capacity-reservation-type)."""
    from stacks.cluster.karpenter import CAPACITY_TYPE_LABEL, CAPACITY_TYPES, REQUIREMENT_OPERATORS, RESERVATION_TYPE_LABEL, RESERVATION_TYPES

    out = []
    for np in g.of(NODEPOOL):
        for r in _requirements(np):
            key, op, values = r.get("key", ""), r.get("operator"), r.get("values") or []
            if op not in REQUIREMENT_OPERATORS:
                out.append(f"{np.name}: requirement {key} operator {op!r} not one of {list(REQUIREMENT_OPERATORS)}")
            if op == "In" and not values:
                out.append(f"{np.name}: requirement {key} In without values")
            if key.split("/")[0].endswith("karpenter.sh") and key != CAPACITY_TYPE_LABEL:
                out.append(f"{np.name}: requirement on restricted label {key}")
        ctypes = _req_values(np, CAPACITY_TYPE_LABEL)
        if not ctypes:
            out.append(f"{np.name}: no {CAPACITY_TYPE_LABEL} requirement (Karpenter would default to on-demand)")
        bad = [v for v in ctypes if v not in CAPACITY_TYPES]
        if bad:
            out.append(f"{np.name}: {CAPACITY_TYPE_LABEL} values {bad} not in {list(CAPACITY_TYPES)}")
        rtypes = _req_values(np, RESERVATION_TYPE_LABEL)
        if [v for v in rtypes if v not in RESERVATION_TYPES]:
            out.append(f"{np.name}: {RESERVATION_TYPE_LABEL} values {rtypes} not in {list(RESERVATION_TYPES)}")
        if rtypes and ctypes != ["reserved"]:
            out.append(f"{np.name}: {RESERVATION_TYPE_LABEL} {rtypes} with capacity types {ctypes} (reservation types exist only for reserved)")
        its = _req_values(np, "node.kubernetes.io/instance-type")
        if not its or [t for t in its if t not in INSTANCES]:
            out.append(f"{np.name}: instance types {its} are not GPU instances of the catalog ({', '.join(sorted(INSTANCES))})")
        if _nodeclass_of(g, np) is None:
            out.append(f"{np.name}: nodeClassRef {_get(np.inputs, 'spec', 'template', 'spec', 'nodeClassRef')} names no registered EC2NodeClass")
        for t in _get(np.inputs, "spec", "template", "spec", "taints", default=[]) or []:
            if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                out.append(f"{np.name}: taint {t.get('key')} effect {t.get('effect')!r}")
    return out


@rule()
def karpenter_reservation_selector_exactly_for_reserved(g: Graph) -> list[str]:
    """A NodePool launches ``reserved`` capacity only from the reservations its EC2NodeClass selects with
    ``capacityReservationSelectorTerms`` (a Capacity Block is a reservation too), so the terms are there exactly when
    the NodePool asks for reserved (on-demand pools must not consume a reservation they do not name); a Capacity Block
    pool also requires ``capacity-reservation-type: capacity-block``; with reserved pools the release enables the
    ReservedCapacity feature gate, and the controller may describe reservations and launch into them. Source:
    karpenter.sh/docs/tasks/odcrs (v1.3 reservations, v1.6 Capacity Blocks, ReservedCapacity gate); terraform-aws-eks
    PR 3510 and eksctl-io/eksctl#8748 (ec2:DescribeCapacityReservations); aws/karpenter-provider-aws PR 7801
    (capacity-reservation/* on RunInstances)."""
    from stacks.cluster.karpenter import CAPACITY_TYPE_LABEL, RESERVATION_TYPE_LABEL

    out, reserved = [], False
    for np in g.of(NODEPOOL):
        nc = _nodeclass_of(g, np)
        if nc is None:
            continue
        terms = _get(nc.inputs, "spec", "capacityReservationSelectorTerms", default=[]) or []
        wants = "reserved" in _req_values(np, CAPACITY_TYPE_LABEL)
        reserved |= wants
        if wants and not terms:
            out.append(f"{np.name}: capacity type reserved but EC2NodeClass {nc.name} selects no capacity reservation")
        if terms and not wants:
            out.append(f"{np.name}: EC2NodeClass {nc.name} selects reservations {terms} but the NodePool does not ask for reserved capacity")
        if any(not (t.get("id") or t.get("tags")) for t in terms):
            out.append(f"{nc.name}: capacityReservationSelectorTerms {terms} name neither an id nor tags")
        if "capacity-block" in _req_values(np, RESERVATION_TYPE_LABEL) and not terms:
            out.append(f"{np.name}: capacity-block pool without a selected Capacity Block")
    if reserved:
        rel = _karpenter_release(g)
        if rel is None or _get(rel.inputs, "values", "settings", "featureGates", "reservedCapacity") is not True:
            out.append("reserved NodePools but the Karpenter release does not set settings.featureGates.reservedCapacity: true")
        sts = _policy_statements(g)
        if not any("ec2:DescribeCapacityReservations" in _actions(st) for st in sts):
            out.append("reserved NodePools but no controller policy allows ec2:DescribeCapacityReservations")
        if not any("ec2:RunInstances" in _actions(st) and any(":capacity-reservation/" in r for r in _resources(st)) for st in sts):
            out.append("reserved NodePools but no controller policy allows ec2:RunInstances on capacity-reservation/*")
    return out


@rule()
def karpenter_nodeclass_role_joins_the_cluster(g: Graph) -> list[str]:
    """The EC2NodeClass ``role`` is an IAM role the stack creates, trusted by EC2, with the node policies, and it has
    an EKS access entry of type EC2_LINUX (the cluster's authentication mode is API: a node whose role has no access
    entry cannot join); the controller may pass exactly that role to EC2 (Karpenter creates the instance profile from
    it). Source: EKS API CreateAccessEntry ("If the principalArn is for an IAM role that's used for self-managed Amazon
    EC2 nodes, specify EC2_LINUX"); Karpenter getting-started CloudFormation (KarpenterNodeRole, AllowPassingInstanceRole)."""
    import json

    out = []
    roles = {r.inputs.get("name"): r for r in g.of(IAM_ROLE) if r.inputs.get("name")}
    passable = [r for st in _policy_statements(g) if "iam:PassRole" in _actions(st) for r in _resources(st)]
    for nc in g.of(EC2NODECLASS):
        role = _get(nc.inputs, "spec", "role")
        r = roles.get(role)
        if r is None:
            out.append(f"{nc.name}: role {role!r} is not an IAM role of this stack")
            continue
        trust = r.inputs.get("assumeRolePolicy")
        trust = json.loads(trust) if isinstance(trust, str) else trust or {}
        if not any("ec2.amazonaws.com" in json.dumps(st.get("Principal")) for st in trust.get("Statement") or []):
            out.append(f"{nc.name}: role {role} is not trusted by ec2.amazonaws.com")
        if not any(e.inputs.get("type") == "EC2_LINUX" and str(e.inputs.get("principalArn", "")).endswith(f":role/{role}")
                   for e in g.of(ACCESS_ENTRY)):
            out.append(f"{nc.name}: role {role} has no EC2_LINUX access entry (its nodes cannot join the cluster)")
        if not any(str(p).endswith(f":role/{role}") for p in passable):
            out.append(f"{nc.name}: the controller may not iam:PassRole {role}")
    return out


@rule(AREA_EFA)
def karpenter_efa_pools_name_their_interfaces(g: Graph) -> list[str]:
    """A NodePool whose workers request ``vpc.amazonaws.com/efa`` uses an EC2NodeClass that names its network
    interfaces: the primary ``interface`` at card 0 / device 0, one ``efa-only`` interface per EFA card of the instance
    type, no two on one (card, device) slot and at most one ``efa-only`` per card. Without ``networkInterfaces``
    Karpenter launches an ENA+EFA interface on every card, each taking subnet IPs. Source: karpenter-provider-aws
    @v1.13.1 pkg/providers/launchtemplate/launchtemplate.go generateNetworkInterfaces (the EFACount path),
    pkg/providers/instancetype/types.go efas (EFA capacity = the count of efa-only interfaces),
    pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml (networkInterfaces enum and CEL rules),
    designs/efa-for-static-capacity.md ("IP optimized")."""
    out = []
    classes = {_get(nc.inputs, "metadata", "name"): nc for nc in g.of(EC2NODECLASS)}
    for np in g.of(NODEPOOL):
        its = _req_values(np, "node.kubernetes.io/instance-type")
        if len(its) != 1 or its[0] not in INSTANCES or not any(pod_requests_efa(c) for _, c in _on_nodepool(g, np)):
            continue
        shape = INSTANCES[its[0]]
        ref = _get(np.inputs, "spec", "template", "spec", "nodeClassRef", "name")
        nc = classes.get(ref)
        nis = (_get(nc.inputs, "spec", "networkInterfaces", default=None) or []) if nc is not None else []
        if not nis:
            out.append(f"{np.name}: EFA workers, but EC2NodeClass {ref!r} names no networkInterfaces (an ENA+EFA "
                       f"interface on every card)")
            continue
        primary = [n for n in nis if (n.get("networkCardIndex"), n.get("deviceIndex")) == (0, 0)]
        if [n.get("interfaceType") for n in primary] != ["interface"]:
            out.append(f"{ref}: the primary (card 0, device 0) is {primary}, not one 'interface'")
        slots = [(n.get("networkCardIndex"), n.get("deviceIndex")) for n in nis]
        if len(slots) != len(set(slots)):
            out.append(f"{ref}: two interfaces on one (card, device) slot")
        efa_cards = [n.get("networkCardIndex") for n in nis if n.get("interfaceType") == "efa-only"]
        if len(efa_cards) != len(set(efa_cards)):
            out.append(f"{ref}: more than one efa-only interface on a card")
        if sorted(efa_cards) != sorted(shape.efa_cards):
            out.append(f"{ref}: efa-only on cards {sorted(efa_cards)}, {shape.instance_type} has EFA on {sorted(shape.efa_cards)}")
    return out


@rule()
def karpenter_node_limits_hold_the_dgds(g: Graph) -> list[str]:
    """A NodePool's ``limits`` (``nodes`` and ``nvidia.com/gpu``) hold every GPU worker that lands on it, packed on its
    instance type (GPU and EFA devices per node): past its limits Karpenter launches nothing and the workers stay
    Pending. Every GPU worker lands on exactly one GPU pool. Source: sigs.k8s.io/karpenter@v1.13.0
    karpenter.sh_nodepools.yaml ("Limits define a set of bounds for provisioning capacity"; ``nodes``:
    pkg/utils/resources/resources.go); Kubernetes scheduling of extended resources."""
    out = []
    nodepools = g.of(NODEPOOL)
    for np in nodepools:
        its = _req_values(np, "node.kubernetes.io/instance-type")
        if len(its) != 1 or its[0] not in INSTANCES:
            continue
        shape = INSTANCES[its[0]]
        comps = [c for _, c in _on_nodepool(g, np)]
        cap = {"nvidia.com/gpu": shape.gpus_per_node}
        if any(pod_requests_efa(c) for c in comps):
            cap["vpc.amazonaws.com/efa"] = shape.efa_interfaces
        needed, too_big = pack({"spec": {"components": comps}}, cap)
        limits = _get(np.inputs, "spec", "limits", default={}) or {}
        nodes = int(str(limits.get("nodes", 0)) or 0)
        gpus = int(str(limits.get("nvidia.com/gpu", 0)) or 0)
        if too_big:
            out.append(f"{np.name}: no {shape.instance_type} holds " + "; ".join(too_big))
        if needed > nodes:
            out.append(f"{np.name}: limits.nodes {nodes} < {needed} {shape.instance_type} the DGDs need")
        if needed * shape.gpus_per_node > gpus and needed:
            out.append(f"{np.name}: limits nvidia.com/gpu {gpus} < {needed * shape.gpus_per_node} on the {needed} nodes the DGDs need")
    if nodepools:
        groups = _gpu_nodegroups(g)
        for d, c in _gpu_components(g):
            pod = c["podTemplate"]["spec"]
            n = sum(1 for np in nodepools if (d, c) in [(x, y) for x, y in _on_nodepool(g, np)])
            n += sum(1 for ng in groups if _selects(pod, _node_labels(g, ng)))
            if n != 1:
                out.append(f"{d.name}/{c['name']}: lands on {n} GPU pools (select nvidia.com/gpu.product and tolerate its pool's taint)")
    return out


@rule()
def karpenter_discovery_tags_match_the_selectors(g: Graph) -> list[str]:
    """Each EC2NodeClass finds subnets and security groups by tags: some subnet in every zone its NodePools require,
    and some security group, carry the selector's tags (a security group the stack does not create, the EKS cluster
    security group, through an ``aws.ec2.Tag``); the selected groups include the cluster security group, which lets the
    node reach the control plane. Source: karpenter.sh docs, NodeClasses (subnetSelectorTerms, securityGroupSelectorTerms:
    "select by tags"); EKS user guide "View Amazon EKS security group requirements for clusters"."""
    from stacks.cluster.karpenter import DISCOVERY_TAG

    out = []
    subnets = g.of(SUBNET)
    tags_of_sg = {sg.id: dict(sg.inputs.get("tags") or {}) for sg in g.of(SECURITY_GROUP)}
    for t in g.of(EC2_TAG):
        tags_of_sg.setdefault(t.inputs.get("resourceId"), {})[t.inputs.get("key")] = t.inputs.get("value")
    # The EKS cluster security group is created by EKS, not by the stack: the one group tagged here but not registered.
    cluster_sgs = {sid for sid in tags_of_sg if sid not in {sg.id for sg in g.of(SECURITY_GROUP)}}
    for nc in g.of(EC2NODECLASS):
        zones = {z for np in g.of(NODEPOOL) if _nodeclass_of(g, np) is nc for z in _req_values(np, "topology.kubernetes.io/zone")}
        for term in _get(nc.inputs, "spec", "subnetSelectorTerms", default=[]) or []:
            want = term.get("tags") or {}
            hit = [s for s in subnets if want and all((s.inputs.get("tags") or {}).get(k) == v for k, v in want.items())]
            if not hit:
                out.append(f"{nc.name}: no subnet carries {want}")
            missing = zones - {s.inputs.get("availabilityZone") for s in hit}
            if hit and missing:
                out.append(f"{nc.name}: no subnet tagged {want} in zones {sorted(missing)} its NodePools require")
        selected = set()
        for term in _get(nc.inputs, "spec", "securityGroupSelectorTerms", default=[]) or []:
            want = term.get("tags") or {}
            hit = {sid for sid, tags in tags_of_sg.items() if want and all(tags.get(k) == v for k, v in want.items())}
            if not hit:
                out.append(f"{nc.name}: no security group carries {want}")
            selected |= hit
        if selected and not selected & cluster_sgs:
            out.append(f"{nc.name}: the selected security groups do not include the cluster security group")
        for term in (_get(nc.inputs, "spec", "subnetSelectorTerms", default=[]) or []) + (_get(nc.inputs, "spec", "securityGroupSelectorTerms", default=[]) or []):
            if DISCOVERY_TAG in (term.get("tags") or {}) and term["tags"][DISCOVERY_TAG] not in {c.inputs.get("name") for c in g.of(EKS)}:
                out.append(f"{nc.name}: {DISCOVERY_TAG}={term['tags'][DISCOVERY_TAG]} names no cluster of this stack")
    return out


@rule()
def karpenter_interruption_queue_is_wired(g: Graph) -> list[str]:
    """The Karpenter release reads its interruption queue (``settings.interruptionQueue``, the queue's name), the queue
    keeps messages 300 s with SSE, its policy lets EventBridge send, a rule for each message the controller parses (AWS
    Health events, Spot interruption warnings, rebalance recommendations, instance state changes, interruptible Capacity
    Reservation interruption warnings: ``stacks.cluster.karpenter.INTERRUPTION_RULES``, which tests/test_karpenter.py
    holds to the provider's parsers) targets it, and the controller may receive and delete its messages. Source:
    Karpenter getting-started CloudFormation (KarpenterInterruptionQueue, KarpenterInterruptionQueuePolicy with DenyHTTP,
    ScheduledChangeRule, SpotInterruptionRule, RebalanceRule, InstanceStateChangeRule, AllowInterruptionQueueActions)
    and github.com/aws/karpenter-provider-aws v1.13.1 pkg/controllers/interruption/messages."""
    import json

    from stacks.cluster.karpenter import INTERRUPTION_RULES

    rel = _karpenter_release(g)
    if rel is None:
        return []
    out = []
    name = _get(rel.inputs, "values", "settings", "interruptionQueue")
    queue = next((q for q in g.of(SQS_QUEUE) if q.inputs.get("name") == name), None)
    if queue is None:
        return [f"{rel.name}: settings.interruptionQueue {name!r} names no SQS queue of this stack"]
    arn = f":{name}"
    if int(queue.inputs.get("messageRetentionSeconds", 0)) != 300 or not queue.inputs.get("sqsManagedSseEnabled"):
        out.append(f"{queue.name}: messageRetentionSeconds {queue.inputs.get('messageRetentionSeconds')}, sqsManagedSseEnabled "
                   f"{queue.inputs.get('sqsManagedSseEnabled')} (want 300, true)")
    pols = [json.loads(p.inputs["policy"]) for p in g.of(SQS_QUEUE_POLICY) if isinstance(p.inputs.get("policy"), str)]
    if not any("events.amazonaws.com" in json.dumps(st.get("Principal")) and "sqs:SendMessage" in _actions(st)
               and any(r.endswith(arn) for r in _resources(st)) for p in pols for st in p.get("Statement") or []):
        out.append(f"{queue.name}: no queue policy lets events.amazonaws.com send to it")
    if not any(st.get("Effect") == "Deny" and "sqs:*" in _actions(st) and any(r.endswith(arn) for r in _resources(st))
               and str(_get(st, "Condition", "Bool", "aws:SecureTransport")).lower() == "false"
               for p in pols for st in p.get("Statement") or []):
        out.append(f"{queue.name}: its policy does not deny requests without TLS (DenyHTTP: sqs:* when aws:SecureTransport is false)")
    targets = [t for t in g.of(EVENT_TARGET) if str(t.inputs.get("arn", "")).endswith(arn)]
    for _, src, detail in INTERRUPTION_RULES:
        rules = [r for r in g.of(EVENT_RULE) if json.loads(r.inputs.get("eventPattern") or "{}") == {"source": [src], "detail-type": [detail]}]
        if not any(t.inputs.get("rule") in {r.inputs.get("name", r.name) for r in rules} | {r.name for r in rules} for t in targets) or not rules:
            out.append(f"no EventBridge rule for {src} {detail!r} targets the interruption queue {name}")
    if not any({"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= set(_actions(st)) and any(r.endswith(arn) for r in _resources(st))
               for st in _policy_statements(g)):
        out.append(f"the controller policy does not allow sqs:ReceiveMessage and sqs:DeleteMessage on {name}")
    return out


@rule()
def karpenter_controller_has_its_identity(g: Graph) -> list[str]:
    """The controller's service account gets its IAM role through EKS Pod Identity: an association for the release's
    namespace and ``serviceAccount.name``, a role trusted by ``pods.eks.amazonaws.com`` (sts:AssumeRole, sts:TagSession)
    with the controller policy attached, and the eks-pod-identity-agent add-on. Source: EKS user guide "Learn how EKS
    Pod Identity grants pods access to AWS services" (trust policy, agent add-on); Karpenter getting-started
    (podIdentityAssociations for kube-system/karpenter)."""
    import json

    rel = _karpenter_release(g)
    if rel is None:
        return []
    out = []
    ns, sa = rel.inputs.get("namespace"), _get(rel.inputs, "values", "serviceAccount", "name")
    assoc = [a for a in g.of(POD_IDENTITY) if a.inputs.get("namespace") == ns and a.inputs.get("serviceAccount") == sa]
    if not assoc:
        return [f"{rel.name}: no Pod Identity association for {ns}/{sa}"]
    roles = {str(r.inputs.get("name")): r for r in g.of(IAM_ROLE)}
    for a in assoc:
        role = roles.get(str(a.inputs.get("roleArn", "")).rsplit("/", 1)[-1])
        trust = json.loads(role.inputs.get("assumeRolePolicy") or "{}") if role else {}
        if not any("pods.eks.amazonaws.com" in json.dumps(st.get("Principal")) and {"sts:AssumeRole", "sts:TagSession"} <= set(_actions(st))
                   for st in trust.get("Statement") or []):
            out.append(f"{a.name}: role {a.inputs.get('roleArn')} is not trusted by pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession")
    if _addon(g, "eks-pod-identity-agent") is None:
        out.append("no eks-pod-identity-agent add-on: the Pod Identity association gives the controller no credentials")
    return out


@rule(AREA_NODE_CREDENTIALS)
def karpenter_controller_knows_its_region(g: Graph) -> list[str]:
    """The controller is told the cluster's Region (``AWS_REGION`` in ``controller.env``): without it the controller
    asks the instance metadata service for it and exits when that fails, and the system nodes it runs on answer no pod
    (IMDSv2 with hop count 1). Source: karpenter-provider-aws v1.13.1 ``pkg/operator/operator.go`` (``if cfg.Region ==
    ""`` ... ``imds.NewFromConfig(cfg).GetRegion``, ``lo.Must0``) and ``charts/karpenter/values.yaml``
    (``controller.env``); EKS user guide "Upgrade from Amazon Linux 2 to Amazon Linux 2023" (managed node groups'
    default hop count 1)."""
    rel = _karpenter_release(g)
    if rel is None:
        return []
    env = {e.get("name"): e.get("value") for e in _get(rel.inputs, "values", "controller", "env", default=[]) or []}
    if not env.get("AWS_REGION"):
        return [f"{rel.name}: values.controller.env has no AWS_REGION: the controller would ask the instance metadata service, "
                "which hop count 1 keeps from its pod, and exit"]
    return []


@rule()
def karpenter_serving_workers_are_not_disrupted(g: Graph) -> list[str]:
    """Every GPU worker that lands on a NodePool carries the pod annotation ``karpenter.sh/do-not-disrupt: "true"``, so
    consolidation and drift never take its node mid-request; the NodePool consolidates only empty nodes; and its
    disruption budgets let Karpenter take at most one GPU node at a time for any reason but Empty (drift of a new AMI,
    consolidation), always (no schedule), while empty nodes may all go at once. Without budgets Karpenter defaults to
    one budget of 10% of the pool's nodes for every reason. Source: sigs.k8s.io/karpenter@v1.13.0 pkg/apis/v1/labels.go
    (DoNotDisruptAnnotationKey); karpenter.sh docs, Disruption ("karpenter.sh/do-not-disrupt", consolidationPolicy
    WhenEmpty); sigs.k8s.io/karpenter@v1.13.0 pkg/apis/crds/karpenter.sh_nodepools.yaml ``disruption.budgets``: "If
    there are multiple active budgets, Karpenter uses the most restrictive value. If left undefined, this will default
    to one budget with a value to 10%"; ``reasons``: "If Reasons is not set, this budget applies to all methods";
    ``schedule``: "If omitted, the budget is always active"."""
    from stacks.cluster.karpenter import DISRUPTION_REASONS, DO_NOT_DISRUPT

    out = []
    for np in g.of(NODEPOOL):
        if _get(np.inputs, "spec", "disruption", "consolidationPolicy") != "WhenEmpty":
            out.append(f"{np.name}: consolidationPolicy {_get(np.inputs, 'spec', 'disruption', 'consolidationPolicy')!r}, not WhenEmpty")
        budgets = _get(np.inputs, "spec", "disruption", "budgets")
        if not budgets:
            out.append(f"{np.name}: no disruption budgets: Karpenter defaults to 10% of the pool's nodes at once for every reason")
            budgets = []
        for reason in DISRUPTION_REASONS:
            if reason == "Empty":
                continue
            # always-active budgets that apply to this reason; the most restrictive one wins
            counts = [str(b.get("nodes")) for b in budgets if not b.get("schedule")
                      and (not b.get("reasons") or reason in b["reasons"])]
            fixed = [int(c) for c in counts if c.isdigit()]
            if not fixed or min(fixed) > 1:
                out.append(f"{np.name}: disruption budgets {counts or 'none'} for {reason}: more than one GPU node may be "
                           f"taken at once; add {{nodes: \"1\", reasons: [{reason}]}}")
        for d, c in _on_nodepool(g, np):
            if str(_get(c, "podTemplate", "metadata", "annotations", DO_NOT_DISRUPT)) != "true":
                out.append(f"{d.name}/{c['name']}: on NodePool {np.name} without {DO_NOT_DISRUPT}: \"true\"")
    return out


# --------------------------------------------------------------------------- what a pod can reach of AWS credentials
RPA = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
EC2_TRUST = "ec2.amazonaws.com"


def _node_roles(g: Graph) -> list[Res]:
    """The IAM roles EC2 instances assume (the node groups' and Karpenter's node roles)."""
    return [r for r in g.of(IAM_ROLE) if EC2_TRUST in str(r.inputs.get("assumeRolePolicy", ""))]


def _attached(g: Graph, role: Res) -> list[str]:
    """The policy ARNs attached to ``role`` (an attachment names its role by the role's name: its ``name`` input, or the
    name the provider gives it, which the mocks make the resource name)."""
    name = role.inputs.get("name") or role.name
    return [str(a.inputs.get("policyArn")) for a in g.of(RPA) if a.inputs.get("role") == name]


def _addon(g: Graph, name: str) -> Optional[Res]:
    return next((a for a in g.of(EKS_ADDON) if a.inputs.get("addonName") == name), None)


# AMI types whose EKS-made launch template requires IMDSv2 with hop limit 1 (see pods_cannot_reach_the_node_role).
EKS_DEFAULT_IMDS_HOP_1_AMI_PREFIX = "AL2023_"


def _named_roles(g: Graph) -> list[Res]:
    return [r for r in g.of(IAM_ROLE) if r.inputs.get("name")]


@rule(AREA_NODE_CREDENTIALS)
def named_iam_roles_carry_their_region(g: Graph) -> list[str]:
    """An IAM role the program names itself carries the cluster's Region in its name: IAM names are unique in the
    account, EKS cluster names only per Region, so ``dynamo-<stack>-karpenter`` of a stack in us-east-1 and one of the
    same name in us-west-2 would collide (the second CreateRole fails mid-`up` with EntityAlreadyExists). Sources: IAM
    user guide, "IAM identifiers" (friendly names unique within the account); EKS API CreateCluster (name unique in the
    Region); IAM API CreateRole (EntityAlreadyExists, RoleName at most 64 characters)."""
    # The Region the controllers that hold these roles are told (the load balancer controller's ``region``, Karpenter's
    # ``AWS_REGION``): the cluster's.
    regions = {str(_get(r.inputs, "values", "region")) for r in g.of(HELM) if _get(r.inputs, "values", "region")}
    regions |= {str(e.get("value")) for r in g.of(HELM) for e in (_get(r.inputs, "values", "controller", "env") or [])
                if isinstance(e, dict) and e.get("name") == "AWS_REGION"}
    out = []
    for r in _named_roles(g):
        name = str(r.inputs["name"])
        if len(name) > 64:
            out.append(f"{r.name}: role name {name!r} is longer than IAM's 64 characters")
        elif regions and not any(reg in name for reg in regions) and not re.search(r"-[0-9a-f]{6}$", name):
            out.append(f"{r.name}: role name {name!r} does not carry the cluster's Region ({', '.join(sorted(regions))}): a stack "
                       "with the same cluster name in another Region would claim the same role")
    return out


@update_rule(AREA_NODE_CREDENTIALS, AREA_UPDATES)
def named_iam_roles_keep_their_names(before: Graph, after: Graph) -> list[str]:
    """A role's name is replace-only (IAM has no rename; the provider's ``name`` is ForceNew), and a replaced Karpenter
    node role is a new role: nodes launched with the old one's instance profile lose their credentials when it is
    deleted. So a role whose planned name differs from the one it was created with keeps its name (``ignoreChanges:
    name``). Sources: IAM API (no UpdateRole field for the name); hashicorp/terraform-provider-aws
    internal/service/iam/role.go (``name`` ForceNew)."""
    out = []
    for old, new in _pairs(before, after, IAM_ROLE):
        a, b = old.inputs.get("name"), new.inputs.get("name")
        if a and b and a != b and not _ignored(new, "name"):
            out.append(f"{new.name}: role name {a} -> {b} replaces the role (IAM cannot rename one); keep the name (ignoreChanges: name)")
    return out


# An EKS AMI release version: <Kubernetes minor>.<patch>-<date> (awslabs/amazon-eks-ami CHANGELOG.md, "Release version").
_RELEASE_VERSION = re.compile(r"(1\.\d+)\.\d+-\d{8}")


@rule(AREA_KUBERNETES_VERSION, AREA_UPDATES)
def nodes_run_a_pinned_ami_release(g: Graph) -> list[str]:
    """Every managed node group names its AMI release (``releaseVersion``) of its own Kubernetes version, and every
    EC2NodeClass a dated AL2023 alias: without them EKS launches "the latest available AMI version for the node
    group's current Kubernetes version" (EKS API reference, CreateNodegroup releaseVersion), so a launch template change
    made for another reason also moves every node to a new AMI and NVIDIA driver; Karpenter's ``@latest`` drifts every
    node at each AMI release ("not recommended for production": karpenter.sh docs, Managing AMIs). Each release version
    belongs to one Kubernetes version, which it starts with (1.35.6-20260714 for 1.35). Sources: EKS API reference
    CreateNodegroup and UpdateNodegroupVersion (releaseVersion); awslabs/amazon-eks-ami CHANGELOG.md ("AMI Details":
    release version per Kubernetes version); karpenter.sh docs "Managing AMIs"."""
    out = []
    for ng in g.of(NODEGROUP):
        rel, version = ng.inputs.get("releaseVersion"), ng.inputs.get("version")
        m = _RELEASE_VERSION.fullmatch(str(rel or ""))
        if not m:
            out.append(f"{ng.name}: releaseVersion {rel!r}: the group takes EKS's newest AMI on every update; pin a release like 1.35.6-20260714")
        elif version is not None and m[1] != str(version):
            out.append(f"{ng.name}: releaseVersion {rel} is an AMI release of Kubernetes {m[1]}, the group runs {version}")
    for nc in g.of(EC2NODECLASS):
        for term in _get(nc.inputs, "spec", "amiSelectorTerms", default=[]) or []:
            alias = str(term.get("alias") or "")
            if alias and not re.fullmatch(r"al2023@v\d{8}", alias):
                out.append(f"{nc.name}: amiSelectorTerms alias {alias!r}: Karpenter drifts every node on each AMI release; "
                           "pin al2023@vYYYYMMDD")
    return out


_ARN = re.compile(r"\barn:(aws[a-z-]*):")


def _partition(region: str) -> str:
    """The AWS partition of a Region: aws-us-gov for GovCloud, aws-cn for China, aws for the others (AWS General
    Reference, "Amazon Resource Names (ARNs)": partition)."""
    return "aws-us-gov" if region.startswith("us-gov-") else "aws-cn" if region.startswith("cn-") else "aws"


def _strings(x: Any):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


@rule(AREA_CLUSTER_ACCESS, AREA_NODE_CREDENTIALS)
def arns_are_in_the_regions_partition(g: Graph) -> list[str]:
    """Every ARN the program writes (IAM policies, trust policies, access entries, KMS and queue policies) is in the
    partition of the Region the AWS provider deploys to: IAM refuses a policy or principal of another partition, so a
    GovCloud or China stack written in ``arn:aws:`` fails on its first IAM resource. Source: AWS General Reference,
    "Amazon Resource Names (ARNs)" (``partition``: aws, aws-cn, aws-us-gov)."""
    regions = {str(p.inputs.get("region")) for p in g.of("pulumi:providers:aws") if p.inputs.get("region")}
    out = []
    for region in sorted(regions):
        want = _partition(region)
        for r in g.resources:
            bad = sorted({m for text in _strings(r.inputs) for m in _ARN.findall(text) if m != want})
            if bad:
                out.append(f"{r.name}: ARNs in partition {', '.join(bad)}, but the provider deploys to {region} (partition {want})")
    return out


@rule(AREA_KUBERNETES_VERSION)
def node_groups_follow_the_control_plane_version(g: Graph) -> list[str]:
    """Every managed node group names its Kubernetes ``version``, the cluster's: a group without one stays on the
    version it was created with when the control plane moves (the provider sends no UpdateNodegroupVersion), and EKS
    then refuses the next control-plane step ("If your cluster has managed node groups attached to it, all of your node
    groups' Kubernetes versions must match the cluster's Kubernetes version in order to update the cluster to a new
    Kubernetes version"). ``version`` is valid with a launch template that names no AMI. Sources: EKS API reference,
    UpdateClusterVersion; CreateNodegroup ``version`` ("If you specify launchTemplate, and your launch template uses a
    custom AMI, then don't specify version")."""
    versions = {str(c.inputs.get("version")) for c in g.of(EKS) if c.inputs.get("version")}
    out = []
    for ng in g.of(NODEGROUP):
        v = ng.inputs.get("version")
        if not v:
            out.append(f"{ng.name}: no version: the group stays behind when the control plane moves, and EKS refuses the "
                       f"next control-plane step while it is behind; set version to the cluster's ({', '.join(sorted(versions)) or '?'})")
        elif versions and str(v) not in versions:
            out.append(f"{ng.name}: version {v} is not the cluster's ({', '.join(sorted(versions))})")
    return out


@update_rule(AREA_KUBERNETES_VERSION, AREA_UPDATES)
def ami_release_never_moves_back(before: Graph, after: Graph) -> list[str]:
    """A node group's ``releaseVersion`` only moves forward: "You cannot roll back a node group to an earlier Kubernetes
    version or AMI version" (EKS API reference, UpdateNodegroupVersion); the update would fail mid-`up`. Source: EKS
    API reference, UpdateNodegroupVersion."""
    from stacks.cluster.config import _release_order

    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        a, b = old.inputs.get("releaseVersion"), new.inputs.get("releaseVersion")
        if a and b and _release_order(b) < _release_order(a) and not _ignored(new, "releaseVersion"):
            out.append(f"{new.name}: releaseVersion {a} -> {b} rolls the group back to an earlier AMI, which EKS refuses")
    return out


# A Dynamo runtime image (vllm-runtime 12.2 GB in ai-dynamo/dynamo#1058, 2025), 1.5x on disk (compressed layers and the
# unpacked snapshot), on top of EKS's 20 GiB default: the least root disk a node that pulls one needs.
MIN_RUNTIME_NODE_DISK_GIB = 20 + 1.5 * 12.2


@rule(AREA_NODE_GROUP_SIZES)
def system_nodes_hold_a_runtime_image(g: Graph) -> list[str]:
    """A managed node group without a launch template of ours (the system group: the frontends and download Jobs pull
    the multi-GB Dynamo runtime image there) sets ``diskSize`` above EKS's default: "The default disk size is 20 GiB
    for Linux" (EKS API reference, CreateNodegroup diskSize), which one runtime image unpacked already fills (the vLLM
    runtime image was 12.2 GB in ai-dynamo/dynamo#1058; containerd keeps its layers and its snapshot). Sources: EKS API
    reference CreateNodegroup (diskSize); ai-dynamo/dynamo#1058 ("The resulting runtime container size is around 12.2 GB")."""
    out = []
    for ng in g.of(NODEGROUP):
        if ng.inputs.get("launchTemplate"):
            continue  # the launch template's block device mapping sizes the disk (500 GiB on the GPU groups)
        size = ng.inputs.get("diskSize")
        if size is None or float(size) < MIN_RUNTIME_NODE_DISK_GIB:
            out.append(f"{ng.name}: diskSize {size if size is not None else 'unset (EKS default 20 GiB)'}: its pods pull a Dynamo "
                       f"runtime image, which needs at least {MIN_RUNTIME_NODE_DISK_GIB:.0f} GiB")
    return out


@rule(AREA_NODE_CREDENTIALS)
def pods_cannot_reach_the_node_role(g: Graph) -> list[str]:
    """Every GPU launch template and EC2NodeClass requires IMDSv2 with a PUT response hop limit of 1, so a token
    response cannot reach a pod's network namespace and no pod reads the node role's credentials; the node roles hold
    neither the VPC CNI's ENI policy nor anything account-wide beyond the worker and ECR read-only policies (SSM Session
    Manager only where asked for). Sources: EKS Best Practices Guide, security, "Restrict access to the instance
    profile assigned to the worker node" (IMDSv2, hop count 1); Karpenter v1 EC2NodeClass ``metadataOptions``
    (default ``httpPutResponseHopLimit: 1``, ``httpTokens: required``); EKS user guide "Configure the Amazon VPC CNI
    plugin to use IRSA" and "IAM roles for Amazon EKS add-ons" (the CNI policy on the add-on's own role, not the
    node's). A managed node group without a launch template of ours (the system group) runs on the launch template EKS
    makes for it, which has both only for an AL2023 AMI type: EKS user guide "Upgrade from Amazon Linux 2 to Amazon
    Linux 2023" ("AL2023 requires IMDSv2 by default"; "For IMDSv2, the default hop count for managed node groups is
    set to 1. This means that containers won't have access to the node's credentials using IMDS"), so such a group
    must name an AL2023 AMI type."""
    from stacks.cluster.identity import CNI_POLICY, NODE_POLICIES, SSM_POLICY

    out = []
    for ng in g.of(NODEGROUP):
        if not ng.inputs.get("launchTemplate") and not str(ng.inputs.get("amiType") or "").startswith(EKS_DEFAULT_IMDS_HOP_1_AMI_PREFIX):
            out.append(f"{ng.name}: no launch template of ours and amiType {ng.inputs.get('amiType')!r}: EKS's own launch "
                       f"template gives IMDSv2 with hop limit 1 only to {EKS_DEFAULT_IMDS_HOP_1_AMI_PREFIX}* AMI types, so a pod "
                       "could take the node role")
    for lt in g.of(LAUNCH_TEMPLATE):
        md = lt.inputs.get("metadataOptions") or {}
        if md.get("httpTokens") != "required" or md.get("httpPutResponseHopLimit") != 1:
            out.append(f"{lt.name}: metadataOptions {md}: a pod can take the node role (IMDSv2 required, hop limit 1)")
    for nc in g.of(EC2NODECLASS):
        md = _get(nc.inputs, "spec", "metadataOptions", default={}) or {}
        if md.get("httpTokens") != "required" or md.get("httpPutResponseHopLimit") != 1:
            out.append(f"{nc.name}: metadataOptions {md}: a pod can take the node role (IMDSv2 required, hop limit 1)")
    allowed = {f"arn:aws:iam::aws:policy/{p}" for p in (*NODE_POLICIES, SSM_POLICY)}
    for role in _node_roles(g):
        for arn in _attached(g, role):
            if arn.endswith("/" + CNI_POLICY):
                out.append(f"{role.name}: node role holds {CNI_POLICY} (any ENI in the account); it belongs to the vpc-cni add-on's own role")
            elif arn not in allowed:
                out.append(f"{role.name}: node role holds {arn}, beyond what a kubelet needs ({sorted(allowed)})")
    return out


@rule(AREA_NODE_CREDENTIALS)
def vpc_cni_has_its_own_identity_before_the_nodes(g: Graph) -> list[str]:
    """With the CNI policy off the node role, aws-node gets its credentials only through the EKS Pod Identity agent: the
    ``vpc-cni`` add-on carries a Pod Identity association for its service account ``aws-node`` to a role holding
    ``AmazonEKS_CNI_Policy``, and both it and ``eks-pod-identity-agent`` exist before any node group, or a new node's
    aws-node cannot assign pod IPs and the node never becomes Ready. Sources: EKS user guide "IAM roles for Amazon EKS
    add-ons" (Pod Identity association on the add-on; the agent must run), "Amazon VPC CNI" (service account aws-node);
    terraform-aws-modules/terraform-aws-eks v21 ``addons`` (``before_compute = true`` for vpc-cni and
    eks-pod-identity-agent)."""
    from stacks.cluster.identity import CNI_POLICY

    if not g.of(NODEGROUP) and not g.of(EC2NODECLASS):
        return []
    cni, agent = _addon(g, "vpc-cni"), _addon(g, "eks-pod-identity-agent")
    if cni is None or agent is None:
        return [f"the cluster's nodes need the vpc-cni and eks-pod-identity-agent add-ons (found: vpc-cni {cni is not None}, "
                f"eks-pod-identity-agent {agent is not None})"]
    out = []
    assocs = cni.inputs.get("podIdentityAssociations") or []
    ours = [a for a in assocs if a.get("serviceAccount") == "aws-node"]
    if not ours:
        out.append(f"{cni.name}: no Pod Identity association for aws-node: the CNI would need the node role's {CNI_POLICY}")
    for a in ours:
        role = next((r for r in g.of(IAM_ROLE) if str(a.get("roleArn", "")).endswith("/" + str(r.inputs.get("name") or r.name))), None)
        if role is None or not any(arn.endswith("/" + CNI_POLICY) for arn in _attached(g, role)):
            out.append(f"{cni.name}: aws-node's Pod Identity role {a.get('roleArn')} does not hold {CNI_POLICY}")
    for ng in g.of(NODEGROUP):
        for addon in (cni, agent):
            if addon.urn not in ng.dependencies:
                out.append(f"{ng.name}: created without waiting for the {addon.inputs.get('addonName')} add-on")
    return out


@rule(AREA_NODE_CREDENTIALS)
def network_policies_are_enforced(g: Graph) -> list[str]:
    """A NetworkPolicy the stack registers on EKS is enforced only when the VPC CNI add-on runs its network policy
    agent: configuration values ``{"enableNetworkPolicy": "true"}`` (VPC CNI >= 1.14). Source: EKS user guide
    "Restrict Pod network traffic with Kubernetes network policies" ("Enable the network policy parameter for the
    add-on")."""
    import json

    policies = g.of(NETWORK_POLICY)
    if not policies or not g.of(EKS):
        return []
    cni = _addon(g, "vpc-cni")
    raw = (cni.inputs.get("configurationValues") if cni else None) or "{}"
    if str(json.loads(raw).get("enableNetworkPolicy")) != "true":
        names = sorted({str(_get(p.inputs, "metadata", "name")) for p in policies})
        return [f"{len(names)} NetworkPolicies ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) are not enforced: "
                f"the vpc-cni add-on's configurationValues {raw} lack enableNetworkPolicy: \"true\""]
    return []


def _node_security_groups(g: Graph) -> list[Res]:
    """The security groups the stack puts on GPU nodes besides EKS's cluster group: those the launch templates' network
    interfaces name, and those an EC2NodeClass selects by tag."""
    ids = {sid for lt in g.of(LAUNCH_TEMPLATE) for ni in (lt.inputs.get("networkInterfaces") or [])
           for sid in (ni.get("securityGroups") or [])}
    terms = [t.get("tags") or {} for nc in g.of(EC2NODECLASS) for t in (_get(nc.inputs, "spec", "securityGroupSelectorTerms", default=[]) or [])]
    return [sg for sg in g.of(SECURITY_GROUP)
            if sg.id in ids or any(t and all((sg.inputs.get("tags") or {}).get(k) == v for k, v in t.items()) for t in terms)]


@rule(AREA_NODE_CREDENTIALS)
def gpu_node_security_group_admits_only_itself(g: Graph) -> list[str]:
    """The security group the GPU nodes carry for EFA admits and sends all traffic to and from itself only, plus,
    where the cache is FSx for Lustre, Lustre's client ports (TCP 988, 1018-1023) from the file system's security
    group. Every other path runs through EKS's cluster security group: a VPC-wide or internet rule here opens the
    nodes, and the model code on them, to every host of the VPC. Sources: EC2 user guide, "Prepare an EFA-enabled
    security group"; FSx for Lustre user guide, "File system access control with Amazon VPC" (Lustre client rules);
    EKS user guide, "View Amazon EKS security group requirements for clusters"."""
    from stacks.cluster.network import LUSTRE_CLIENT_PORTS

    cache_sgs = {sid for fs in g.of(FSX) for sid in (fs.inputs.get("securityGroupIds") or [])}
    out = []
    for sg in _node_security_groups(g):
        if _get(sg.inputs, "tags", default={}).get("aws:eks:cluster-name"):
            continue  # EKS's own cluster security group (not registered by the stack, listed for completeness)
        for direction in ("ingress", "egress"):
            for r in sg.inputs.get(direction) or []:
                lustre = (direction == "ingress" and r.get("protocol") == "tcp"
                          and (r.get("fromPort"), r.get("toPort")) in LUSTRE_CLIENT_PORTS
                          and set(r.get("securityGroups") or []) <= cache_sgs and r.get("securityGroups"))
                only_self = r.get("self") is True and not r.get("cidrBlocks") and not r.get("ipv6CidrBlocks") and not r.get("securityGroups")
                if not (only_self or lustre):
                    out.append(f"{sg.name}: {direction} rule {r}: the GPU nodes' EFA group admits only itself (and Lustre's client "
                               "ports from the cache's group); other traffic goes through the cluster security group")
    return out


# --------------------------------------------------------------------------- updates in place
def _gpu_group(ng: Res) -> bool:
    return "NVIDIA" in str(ng.inputs.get("amiType", ""))


def _strategy_problem(ng: Res) -> Optional[str]:
    cfg = ng.inputs.get("updateConfig") or {}
    if cfg.get("updateStrategy") != "MINIMAL" or int(cfg.get("maxUnavailable") or 0) < 1:
        return (f"updateConfig {cfg}: a launch template or version change replaces every GPU node with EKS's DEFAULT "
                "strategy, which first launches up to twice the zones' count of new nodes (GPUs a reservation sized to the "
                "group does not have); use updateStrategy MINIMAL with maxUnavailable 1")
    return None


@rule(AREA_UPDATES)
def gpu_node_groups_update_without_spare_gpus(g: Graph) -> list[str]:
    """Every GPU managed node group replaces its nodes with the MINIMAL strategy: terminate, then launch, one node at a
    time. Source: EKS API reference, NodegroupUpdateConfig.updateStrategy ("The default strategy ... launches the new
    instances first, before terminating the old instances. The minimal strategy ... terminates the old instances before
    launching the new instances ... useful in scenarios where you are constrained to resources or costs (for example,
    with hardware accelerators such as GPUs)"); EKS user guide "Understand each phase of node updates" (the default
    surge: up to twice the number of Availability Zones)."""
    return [f"{ng.name}: {m}" for ng in g.of(NODEGROUP) if _gpu_group(ng) and (m := _strategy_problem(ng))]


@update_rule(AREA_UPDATES)
def gpu_launch_template_change_needs_no_spare_gpus(before: Graph, after: Graph) -> list[str]:
    """An update that gives a GPU node group a new launch template version (EFA, reservation, user data, disk,
    placement), AMI or Kubernetes version replaces every node of the group; with the DEFAULT strategy EKS first launches
    new nodes beside the old ones, which on a reservation sized to the group cannot start. Sources: as
    ``gpu_node_groups_update_without_spare_gpus``; hashicorp/terraform-provider-aws internal/service/eks/node_group.go
    (resourceNodeGroupUpdate: "Do any version update first", UpdateNodegroupVersion, then UpdateNodegroupConfig with
    updateConfig: a strategy set in the same update comes too late for its version update)."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        if not _gpu_group(new):
            continue
        changes = _version_changes(before, after, old, new)
        # The provider sends UpdateNodegroupVersion before UpdateNodegroupConfig: the replacement runs with the strategy
        # the group had before this update (set MINIMAL in an `up` of its own first, or with `aws eks
        # update-nodegroup-config --update-config updateStrategy=MINIMAL,maxUnavailable=1`).
        problem = _strategy_problem(new) or (_strategy_problem(old) and (
            "the group gets MINIMAL in this same update, but the provider sends the version update first, so the nodes are "
            "replaced under the old strategy: " + _strategy_problem(old)))
        if changes and problem:
            out.append(f"{new.name}: {'; '.join(changes)} replaces every node: {problem}")
    return out


# Custom resource kinds whose CRD makes the whole spec immutable (x-kubernetes-validations ``self == oldSelf`` on spec):
# an update that changes it is refused by the API server mid-`up`. ComputeDomain: kubernetes-sigs/dra-driver-nvidia-gpu
# deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml ("A computeDomain.spec is immutable").
IMMUTABLE_SPEC_KINDS = (COMPUTE_DOMAIN,)


@update_rule(AREA_UPDATES, AREA_ULTRASERVERS_AND_ZONES)
def immutable_specs_never_change_in_place(before: Graph, after: Graph) -> list[str]:
    """An object whose CRD declares its spec immutable keeps the spec it was created with across every update (a
    replica or node-count change must not reach it). Source: the CRDs named in ``IMMUTABLE_SPEC_KINDS``; Kubernetes
    "CustomResourceDefinition validation rules" (transition rules: ``self == oldSelf`` refuses any change)."""
    out = []
    for typ in IMMUTABLE_SPEC_KINDS:
        for old, new in _pairs(before, after, typ):
            if old.inputs.get("spec") != new.inputs.get("spec") and not _ignored(new, "spec"):
                out.append(f"{new.name}: spec {old.inputs.get('spec')} -> {new.inputs.get('spec')}: the API server refuses it "
                           f"({typ.rsplit(':', 1)[-1]}.spec is immutable)")
    return out


@update_rule(AREA_UPDATES, AREA_ULTRASERVERS_AND_ZONES)
def subnets_are_never_re_cut(before: Graph, after: Graph) -> list[str]:
    """A subnet keeps its CIDR block across every update, and a new subnet takes a block no existing one holds: EC2 has no
    call that changes a subnet's block (ModifySubnetAttribute changes attributes only), so the provider replaces the
    subnet, create-first, and CreateSubnet refuses a block that overlaps an existing subnet's (InvalidSubnet.Conflict);
    the old subnet cannot be deleted first while nodes' and the cache's interfaces sit in it. So adding a zone or a
    Local Zone must leave every other subnet where it is. Sources: EC2 API reference, CreateSubnet ("The CIDR block of a
    subnet can't overlap ... other subnets in the VPC") and ModifySubnetAttribute; hashicorp/terraform-provider-aws
    internal/service/ec2/vpc_subnet.go (cidr_block ForceNew)."""
    out = []
    old = {r.name: str(r.inputs.get("cidrBlock")) for r in before.of(SUBNET)}
    for o, n in _pairs(before, after, SUBNET):
        if str(o.inputs.get("cidrBlock")) != str(n.inputs.get("cidrBlock")) and not _ignored(n, "cidrBlock"):
            out.append(f"{n.name}: cidrBlock {o.inputs.get('cidrBlock')} -> {n.inputs.get('cidrBlock')} replaces the subnet, with "
                       "its nodes' and the cache's network interfaces")
    for n in after.of(SUBNET):
        if n.name in old:
            continue
        block = ipaddress.ip_network(str(n.inputs.get("cidrBlock")))
        clash = sorted(name for name, c in old.items() if ipaddress.ip_network(c).overlaps(block))
        if clash:
            out.append(f"{n.name}: new subnet {block} overlaps {', '.join(f'{c} ({old[c]})' for c in clash)}: CreateSubnet refuses it")
    return out


@update_rule(AREA_FSX_LUSTRE, AREA_RETENTION)
def fsx_cache_stays_in_its_subnet(before: Graph, after: Graph) -> list[str]:
    """The FSx for Lustre cache keeps its subnet across every update: ``subnetIds`` is replace-only, so a move (the GPU
    zone moved, and the cache follows it unless cacheAvailabilityZone is set) creates a new, empty file system and
    deletes the old one, or with storage.protect leaves it outside the stack, still billed. Sources: FSx API reference,
    CreateFileSystem SubnetIds (no UpdateFileSystem field changes it); hashicorp/terraform-provider-aws
    internal/service/fsx/lustre_file_system.go (subnet_ids ForceNew)."""
    out = []
    for o, n in _pairs(before, after, FSX):
        if o.inputs.get("subnetIds") != n.inputs.get("subnetIds") and not _ignored(n, "subnetIds"):
            out.append(f"{n.name}: subnetIds {o.inputs.get('subnetIds')} -> {n.inputs.get('subnetIds')} replaces the file system: a "
                       "new, empty cache; keep its zone with cacheAvailabilityZone")
    return out


@rule(AREA_KUBERNETES_VERSION)
def upgrade_policy_is_sent(g: Graph) -> list[str]:
    """The cluster says what happens at the end of standard support (``upgradePolicy.supportType`` STANDARD or
    EXTENDED) on create and on every update: without it a cluster created through the API gets EXTENDED, and a
    version past standard support then bills the extended-support hour ($0.60 instead of $0.10) unseen. Setting it is
    an in-place update. Sources: EKS user guide "Enable EKS extended support" ("clusters created with the AWS API have
    extended support enabled"), "View current cluster upgrade policy"; EKS API UpgradePolicyRequest; CloudFormation
    AWS::EKS::Cluster UpgradePolicy ("Update requires: No interruption")."""
    out = []
    for c in g.of(EKS):
        st = _get(c.inputs, "upgradePolicy", "supportType")
        if st not in ("STANDARD", "EXTENDED"):
            out.append(f"{c.name}: upgradePolicy.supportType {st!r} is not sent (STANDARD or EXTENDED): EKS takes EXTENDED for an "
                       "API-created cluster, billed at the extended-support price once the version leaves standard support")
    return out


@update_rule(AREA_CLUSTER_ACCESS)
def access_policy_association_is_replaced_delete_first(before: Graph, after: Graph) -> list[str]:
    """An access policy association whose scope changes (a namespace added to an entry) is replaced: its access scope,
    principal and policy are ForceNew in the provider. EKS keys an association by (cluster, principal, policy):
    AssociateAccessPolicy on an existing pair updates that one association, and the old resource's delete then
    disassociates the same pair, leaving the principal with no policy. The replacement must delete first
    (``deleteBeforeReplace``). Sources: EKS API AssociateAccessPolicy / DisassociateAccessPolicy (principalArn +
    policyArn identify the association); hashicorp/terraform-provider-aws internal/service/eks/access_policy_association.go
    (access_scope, policy_arn, principal_arn ForceNew; the id is cluster#principal#policy)."""
    out = []
    for old, new in _pairs(before, after, ACCESS_POLICY_ASSOCIATION):
        keys = ("accessScope",)  # a new principal or policy is another (principal, policy) pair: create-first is safe
        changed = [k for k in keys if old.inputs.get(k) != new.inputs.get(k)]
        if changed and not new.delete_before_replace:
            out.append(f"{new.name}: {', '.join(changed)} change replaces the association create-first; the delete of the old one then "
                       f"disassociates the same (principal, policy) pair and leaves {new.inputs.get('principalArn')} without "
                       f"{new.inputs.get('policyArn')}: replace it with deleteBeforeReplace")
    return out


# --------------------------------------------------------------------------- the front door's load balancer
ENVOY_PROXY = "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy"
HTTP_ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"
LB_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-"
LBC_CHART = "aws-load-balancer-controller"
NLB_IDLE_TIMEOUT = (60, 6000)  # ELB user guide, "Update the idle timeout for your Network Load Balancer TCP listener"


def _nlb_services(g: Graph) -> list[tuple[Res, dict]]:
    """(EnvoyProxy, its Service spec) for every gateway Service the AWS Load Balancer Controller turns into an NLB."""
    out = []
    for ep in g.of(ENVOY_PROXY):
        svc = _get(ep.inputs, "spec", "provider", "kubernetes", "envoyService", default={}) or {}
        if (svc.get("annotations") or {}).get(f"{LB_ANNOTATION}type") == "external":
            out.append((ep, svc))
    return out


def _seconds(v: Any) -> Optional[int]:
    m = re.fullmatch(r"(\d+)s", str(v or ""))
    return int(m[1]) if m else None


@rule(AREA_LOAD_BALANCER)
def front_door_nlb_is_built_by_a_controller_that_can(g: Graph) -> list[str]:
    """A gateway Service annotated for the AWS Load Balancer Controller (``aws-load-balancer-type: external``, IP
    targets) becomes an NLB only if the controller runs in the cluster with its own credentials and knows the cluster,
    Region and VPC (chart values ``clusterName``, ``region``, ``vpcId``: without them it reads the node's instance
    metadata, which hop limit 1 keeps from it); its Pod Identity role holds the upstream IAM policy; the subnets of the
    scheme carry the discovery tag (``kubernetes.io/role/elb`` for internet-facing, ``kubernetes.io/role/internal-elb``
    for internal); an internet-facing NLB lists its source ranges; every TCP listener's idle timeout is within 60-6000 s
    and at least the longest route timeout behind it (a stream idle longer than that is cut). Sources: AWS Load Balancer
    Controller docs v2 "Network Load Balancer" (service annotations: aws-load-balancer-type external,
    nlb-target-type ip, scheme, listener-attributes.TCP-<port>), "Subnet auto-discovery", "Installation" (helm values
    clusterName, region, vpcId; IAM policy docs/install/iam_policy.json); ELB user guide, NLB listeners
    ("tcp.idle_timeout.seconds": 60-6000); EKS user guide "EKS Pod Identity"."""
    out = []
    nlbs = _nlb_services(g)
    if not nlbs:
        return out
    eks = next(iter(g.of(EKS)), None)
    releases = [h for h in g.of(HELM) if h.inputs.get("chart") == LBC_CHART]
    if not releases:
        return [f"{ep.name}: its Service is annotated for the AWS Load Balancer Controller, which the stack does not install"
                for ep, _ in nlbs]
    rel = releases[0]
    values = rel.inputs.get("values") or {}
    for key in ("clusterName", "region", "vpcId"):
        if not values.get(key):
            out.append(f"{rel.name}: values.{key} not set: the controller would read it from the node's instance metadata")
    if eks is not None and values.get("clusterName") != eks.inputs.get("name"):
        out.append(f"{rel.name}: values.clusterName {values.get('clusterName')!r} is not the cluster {eks.inputs.get('name')!r}")
    sa = (values.get("serviceAccount") or {}).get("name")
    assoc = [a for a in g.of(POD_IDENTITY) if a.inputs.get("serviceAccount") == sa and a.inputs.get("namespace") == rel.inputs.get("namespace")]
    if not assoc:
        out.append(f"{rel.name}: no Pod Identity association for {rel.inputs.get('namespace')}/{sa}")
    for a in assoc:
        role = next((r for r in g.of(IAM_ROLE) if str(a.inputs.get("roleArn", "")).endswith("/" + str(r.inputs.get("name") or r.name))), None)
        policies = [pol for pol in g.of(IAM_POLICY) if role is not None and
                    any(arn == f"arn:aws:iam::123456789012:policy/{pol.inputs.get('name') or pol.name}" for arn in _attached(g, role))]
        if not any("elasticloadbalancing:CreateLoadBalancer" in str(pol.inputs.get("policy")) for pol in policies):
            out.append(f"{a.name}: the controller's role {a.inputs.get('roleArn')} holds no policy allowing elasticloadbalancing:CreateLoadBalancer")
        if not (a.urn in rel.dependencies):
            out.append(f"{rel.name}: installed without waiting for its Pod Identity association {a.name}")
    routes = [t for r in g.of(HTTP_ROUTE) for rule_ in (_get(r.inputs, "spec", "rules", default=[]) or [])
              if (t := _seconds(_get(rule_, "timeouts", "request"))) is not None]
    longest = max(routes, default=0)
    for ep, svc in nlbs:
        ann = svc.get("annotations") or {}
        scheme = ann.get(f"{LB_ANNOTATION}scheme", "internal")
        tag = "kubernetes.io/role/elb" if scheme == "internet-facing" else "kubernetes.io/role/internal-elb"
        if not any((sn.inputs.get("tags") or {}).get(tag) == "1" for sn in g.of(SUBNET)):
            out.append(f"{ep.name}: a {scheme} NLB needs subnets tagged {tag}=1, and none is")
        if scheme == "internet-facing" and not svc.get("loadBalancerSourceRanges"):
            out.append(f"{ep.name}: an internet-facing NLB without loadBalancerSourceRanges admits every address")
        if ann.get(f"{LB_ANNOTATION}nlb-target-type") != "ip":
            out.append(f"{ep.name}: nlb-target-type {ann.get(f'{LB_ANNOTATION}nlb-target-type')!r}: the gateway's pods are IP targets (ip)")
        idles = {k.rsplit("-", 1)[-1]: v for k, v in ann.items() if k.startswith(f"{LB_ANNOTATION}listener-attributes.TCP-")}
        if not idles:
            out.append(f"{ep.name}: no listener idle timeout: the NLB's 350 s default cuts routes of up to {longest} s")
        for port, v in sorted(idles.items()):
            m = re.fullmatch(r"tcp\.idle_timeout\.seconds=(\d+)", str(v))
            idle = int(m[1]) if m else None
            if idle is None or not NLB_IDLE_TIMEOUT[0] <= idle <= NLB_IDLE_TIMEOUT[1]:
                out.append(f"{ep.name}: TCP-{port} {v!r}: tcp.idle_timeout.seconds must be {NLB_IDLE_TIMEOUT[0]}-{NLB_IDLE_TIMEOUT[1]}")
            elif idle < min(longest, NLB_IDLE_TIMEOUT[1]):
                out.append(f"{ep.name}: TCP-{port} idles out after {idle} s, before the longest route timeout ({longest} s)")
    return out


@update_rule(AREA_LOAD_BALANCER)
def front_door_update_keeps_its_load_balancer(before: Graph, after: Graph) -> list[str]:
    """An update that keeps the front door keeps its NLB and the controller that manages it: the gateway's EnvoyProxy
    (whose Service the NLB belongs to) and the controller's release are the same resources after the update. Deleting
    the EnvoyProxy deletes the NLB, and its successor gets a new DNS name (clients of ``frontDoorUrl`` break); deleting
    the controller while the Service stays leaves the NLB unmanaged (its finalizer then blocks the Service's delete).
    Closing the door (no route left) deletes them as asked. Sources: AWS Load Balancer Controller docs v2 "Network
    Load Balancer" (the NLB's lifecycle follows the Service's) and "Installation" (uninstall: delete the Services of
    type LoadBalancer first)."""
    out = []
    door_stays = bool(after.of(HTTP_ROUTE))
    new_eps = {ep.name for ep, _ in _nlb_services(after)}
    for ep, _ in _nlb_services(before):
        if door_stays and ep.name not in new_eps and not any(r.type == ENVOY_PROXY and r.name == ep.name for r in after.resources):
            out.append(f"{ep.name}: the update deletes (or renames) the gateway's EnvoyProxy while the front door's routes stay: "
                       "its NLB is deleted and a new one gets a new DNS name")
    if _nlb_services(after):
        new_rels = {h.name for h in after.of(HELM) if h.inputs.get("chart") == LBC_CHART}
        for h in before.of(HELM):
            if h.inputs.get("chart") == LBC_CHART and h.name not in new_rels:
                out.append(f"{h.name}: the AWS Load Balancer Controller release is deleted or renamed while the front door keeps its NLB")
    return out
