"""AWS rules suite: one function per documented AWS constraint, run on the resource graph a stack registers.

Test code: the tests run these rules on the graphs the program registers under mocks, and nothing the program runs
imports them (tests/test_layout.py). Each rule takes a ``Graph`` (the recorded registrations: ``type``, ``name``,
``inputs``, ``retain_on_delete``, ``ignore_changes``, ``dependencies``; tests/harness.py ``run_program`` records them
under mocks, where a resource's id is ``<name>-id``) and returns violations, one line each. The mocks accept any
request; these rules are what AWS would refuse or misbuild. Each docstring names the AWS page the constraint comes
from. ``check(graph)`` runs them all; ``RULES`` maps a rule to the AWS constraint areas it guards (``AREAS``).
``check_update(before, after)`` runs the update rules (``UPDATE_RULES``) on the graphs of two successive `up`s.

This package holds the machinery, the resource types and the helpers several areas share; the rules sit in one module
per group of areas (capacity, dra, network, storage, nodes, access, karpenter, load_balancer, updates), and every name
those modules define is re-exported here, so ``import aws_rules as R; R.<rule>`` reaches any of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterable, Optional

from stacks.registry.gpus import INSTANCES

# The Pulumi types of the resources the rules read.
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
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
RTA = "aws:ec2/routeTableAssociation:RouteTableAssociation"
NAT = "aws:ec2/natGateway:NatGateway"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
SG_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
RUNTIME_CLASS = "kubernetes:node.k8s.io/v1:RuntimeClass"
ACCESS_POLICY_ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
KMS_KEY = "aws:kms/key:Key"
IAM_ROLE = "aws:iam/role:Role"
IAM_POLICY = "aws:iam/policy:Policy"
IAM_ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
RPA = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
EFS_POLICY = "aws:efs/fileSystemPolicy:FileSystemPolicy"
NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"
EC2NODECLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
POD_IDENTITY = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
SQS_QUEUE = "aws:sqs/queue:Queue"
SQS_QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"
EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"
EC2_TAG = "aws:ec2/tag:Tag"
EKS_ADDON = "aws:eks/addon:Addon"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
ENVOY_PROXY = "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy"
HTTP_ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"
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
            r
            if isinstance(r, Res)
            else Res(
                r.type,
                r.name,
                r.inputs,
                bool(getattr(r, "retain_on_delete", False)),
                tuple(getattr(r, "ignore_changes", ()) or ()),
                tuple(getattr(r, "dependencies", ()) or ()),
                getattr(r, "urn", ""),
                bool(getattr(r, "delete_before_replace", False)),
            )
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
AREAS = (
    AREA_CAPACITY_BLOCKS,
    AREA_PLACEMENT_GROUPS,
    AREA_ULTRASERVERS_AND_ZONES,
    AREA_NETWORK,
    AREA_GPU_NODE_SOFTWARE,
    AREA_FSX_LUSTRE,
    AREA_EFA,
    AREA_NODE_COUNT,
    AREA_NODE_GROUP_SIZES,
    AREA_RETENTION,
    AREA_KUBERNETES_VERSION,
    AREA_SECRETS,
    AREA_EFS_THROUGHPUT,
    AREA_CLUSTER_ACCESS,
    AREA_NODE_CREDENTIALS,
    AREA_UPDATES,
    AREA_LOAD_BALANCER,
    AREA_CACHE_ACCESS,
)
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


def _pairs(before: Graph, after: Graph, typ: str):
    old = {r.name: r for r in before.of(typ)}
    return [(old[r.name], r) for r in after.of(typ) if r.name in old]


def _ignored(res: Res, path: str) -> bool:
    """``path`` (dotted input path) or one of its parents is in the resource's ignoreChanges."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in res.ignore_changes for i in range(1, len(parts) + 1))


# --------------------------------------------------------------------------- helpers the area modules share


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
    return {
        **(ng.inputs.get("labels") or {}),
        "node.kubernetes.io/instance-type": it,
        "kubernetes.io/arch": INSTANCES[it].kubernetes_arch if it in INSTANCES else None,
    }


def _selects(pod: dict, labels: dict) -> bool:
    """The pod's nodeSelector and required node affinity admit a node with ``labels`` (Kubernetes "Assigning Pods
    to Nodes": every nodeSelector pair, any one of the nodeSelectorTerms with all its matchExpressions)."""
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    terms = _get(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms") or []

    def match(e):
        v, op = labels.get(e.get("key")), e.get("operator")
        return {
            "In": v in (e.get("values") or []),
            "NotIn": v not in (e.get("values") or []),
            "Exists": v is not None,
            "DoesNotExist": v is None,
        }.get(op, True)

    return not terms or any(all(match(e) for e in t.get("matchExpressions") or []) for t in terms)


def _requirements(np: Res) -> list[dict]:
    return _get(np.inputs, "spec", "template", "spec", "requirements", default=[]) or []


def _nodepool_labels(np: Res) -> dict:
    """The labels a node of the NodePool carries: its template labels and the single values its requirements pin
    (Karpenter labels a node with the requirement values it launched for: karpenter.sh docs, NodePools "requirements")."""
    labels = dict(_get(np.inputs, "spec", "template", "metadata", "labels", default={}) or {})
    for r in _requirements(np):
        if r.get("operator") == "In" and len(r.get("values") or []) == 1:
            labels.setdefault(r["key"], r["values"][0])
    return labels


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
                problems.append(
                    f"{dgd.name}/{comp['name']}: may land on any of {[ng.name for ng in fits]} (select nvidia.com/gpu.product)"
                )
            for ng in fits[:1]:
                out[ng.name].append(comp)
    return out, problems


def _efa_devices(lt: Optional[Res]) -> int:
    nis = (lt.inputs.get("networkInterfaces") if lt else None) or []
    return sum(1 for n in nis if n.get("interfaceType") in ("efa", "efa-only"))


def pod_requests_efa(comp: dict) -> bool:
    return any(
        "vpc.amazonaws.com/efa" in ((c.get("resources") or {}).get("limits") or {})
        for c in comp["podTemplate"]["spec"].get("containers", [])
    )


def _attached(g: Graph, role: Res) -> list[str]:
    """The policy ARNs attached to ``role`` (an attachment names its role by the role's name: its ``name`` input, or the
    name the provider gives it, which the mocks make the resource name)."""
    name = role.inputs.get("name") or role.name
    return [str(a.inputs.get("policyArn")) for a in g.of(RPA) if a.inputs.get("role") == name]


def _addon(g: Graph, name: str) -> Optional[Res]:
    return next((a for a in g.of(EKS_ADDON) if a.inputs.get("addonName") == name), None)


# --------------------------------------------------------------------------- the rules, by area
# Importing the area modules registers their rules in RULES and UPDATE_RULES (in this order). Every name they define,
# helpers included, is re-exported here: a test reaches any rule or helper as ``aws_rules.<name>`` without knowing its
# module, and a name two modules define differently is an error rather than a silent shadow.
from . import capacity, dra, network, storage, nodes, access, karpenter, load_balancer, updates  # noqa: E402

for _module in (capacity, dra, network, storage, nodes, access, karpenter, load_balancer, updates):
    for _name, _value in vars(_module).items():
        if _name.startswith("__") or isinstance(_value, ModuleType):
            continue
        if globals().setdefault(_name, _value) is not _value:
            raise ImportError(f"{_module.__name__}.{_name} is not the {_name} another module of aws_rules defines")
del _module, _name, _value
