"""Karpenter as a GPU capacity mode on EKS (``dynamo:cluster.gpuPools[i].capacity: karpenter``), as plain data.

Instead of a managed node group sized at ``up`` time, a Karpenter pool is one ``EC2NodeClass`` and one ``NodePool``:
Karpenter launches the pool's instance type when GPU pods are pending and removes empty nodes after
``consolidateAfter``, so a paused entry costs no GPU hours. Everything here is pure; ``components/cluster.py`` wires
the plan (IAM role and policy, Pod Identity association, SQS interruption queue and EventBridge rules, the Helm
release, then the two custom resources per pool).

Facts, with their sources:

* Chart ``oci://public.ecr.aws/karpenter/karpenter`` 1.13.1 (stacks/registry/versions.yaml charts.karpenter): the release
  script packages charts/karpenter of the tag with ``helm package --version <version>`` and pushes it to
  ``oci://public.ecr.aws/<gallery>/`` (github.com/aws/karpenter-provider-aws@v1.13.1 hack/release/common.sh; the tag's
  Chart.yaml still reads the previous version until the release bumps it). That module's go.mod requires
  ``sigs.k8s.io/karpenter v1.13.0``: the core the simulated cluster builds (v1.13.0 builds with this machine's
  Go 1.26.8; v1.14.3 and v1.15.0 need newer Go). The install command (OCI chart, ``settings.clusterName``,
  ``settings.interruptionQueue``) is the chart README's (charts/karpenter/README.md @v1.13.1).
* ReservedCapacity: native ODCR support from v1.3, Capacity Blocks from v1.6, "ensure the ReservedCapacity feature
  gate is enabled" (karpenter.sh/docs/tasks/odcrs). The chart renders ``FEATURE_GATES`` from
  ``settings.featureGates.reservedCapacity`` ("reservedCapacity is BETA and is enabled by default": charts/karpenter
  values.yaml and templates/deployment.yaml @v1.13.1; core default ``ReservedCapacity=true`` in
  sigs.k8s.io/karpenter@v1.13.0 pkg/operator/options/options.go); a stack with reservations still sets it explicitly,
  so a chart default changing on a bump cannot turn its reservations off.
* EC2NodeClass schema (github.com/aws/karpenter-provider-aws@v1.13.1 pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml):
  required amiSelectorTerms, subnetSelectorTerms, securityGroupSelectorTerms; exactly one of role / instanceProfile;
  ``alias`` "family@version" (al2023; "latest" drifts on every AMI release, "not recommended for production");
  ``capacityReservationSelectorTerms[].id`` ``^cr-[0-9a-z]+$``; ``instanceStorePolicy: RAID0``; metadataOptions.
  The objects built here were checked against that schema and the NodePool CRD.
* Capacity types ``on-demand``, ``spot``, ``reserved`` (sigs.k8s.io/karpenter@v1.13.0 pkg/apis/v1/labels.go
  CapacityTypeOnDemand/Spot/Reserved, label ``karpenter.sh/capacity-type``). Reservations and Capacity Blocks are
  selected by ``EC2NodeClass.spec.capacityReservationSelectorTerms`` (``- id: cr-...``); "Capacity blocks are modeled as
  on-demand capacity reservations in EC2" (karpenter.sh/docs/tasks/odcrs); the label
  ``karpenter.k8s.aws/capacity-reservation-type`` (``default`` | ``capacity-block``) tells them apart
  (aws/karpenter-provider-aws designs/capacity-block-support.md; @v1.13.1 pkg/apis/v1/labels.go LabelCapacityReservationType).
* ``karpenter.sh/do-not-disrupt`` pod annotation (sigs.k8s.io/karpenter@v1.13.0 pkg/apis/v1/labels.go
  DoNotDisruptAnnotationKey): Karpenter does not voluntarily disrupt a node running such a pod.
* NodePool schema (sigs.k8s.io/karpenter@v1.13.0 pkg/apis/crds/karpenter.sh_nodepools.yaml): ``limits`` (any
  resource, and ``nodes``: pkg/utils/resources/resources.go ``Node = "nodes"``), ``disruption.budgets[].nodes`` (a
  count or a percentage) with ``reasons`` Underutilized | Empty | Drifted, requirement operators In, NotIn, Exists,
  DoesNotExist, Gt, Lt, Gte, Lte; the ``karpenter.sh`` label domain is restricted except ``karpenter.sh/capacity-type``.
* EFA: with no ``networkInterfaces`` a pod's ``vpc.amazonaws.com/efa`` request makes Karpenter launch one ENA+EFA
  interface on every network card (@v1.13.1 pkg/providers/launchtemplate/launchtemplate.go generateNetworkInterfaces,
  the ``EFACount`` path: ``interfaceType: efa`` per card), each taking IP addresses from the subnet (32 primary IPs per
  p5.48xlarge node), where the GPU node groups launch one primary interface and ``efa-only`` ones ("IP optimized":
  designs/efa-for-static-capacity.md). EFA pools therefore name their interfaces in the node groups' layout: the
  primary ``interface`` (ENA) at card 0 / device 0, and one ``efa-only`` interface per EFA card of the instance (card 0
  at device 1, every other card at device 0). The CRD (pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml) allows
  only ``interface`` and ``efa-only``, requires that primary, and allows one ``efa-only`` per card; the node's
  ``vpc.amazonaws.com/efa`` capacity is then the count of ``efa-only`` interfaces (pkg/providers/instancetype/types.go
  ``efas``), so it equals the node groups' EFA count. A changed ``networkInterfaces`` is EC2NodeClass drift: Karpenter
  replaces the pool's nodes.
* Placement groups: v1.13 can select an existing one (EC2NodeClass ``placementGroupSelector``;
  designs/placement-groups-support.md @v1.13.1). Its controller permissions (``ec2:DescribePlacementGroups``, the
  ``placement-group/*`` resource on RunInstances/CreateFleet: upgrade guide "Upgrading to 1.11.0+") are not granted,
  and Karpenter pools get none (``placementGroup: true`` is refused for them).
* Capacity placeholder (``capacity_placeholder``): a pool's GPU nodes are launched when its NodePool exists, not when
  the DGD's workers turn Pending minutes later. Karpenter launches nodes for pods the scheduler marked unschedulable
  (sigs.k8s.io/karpenter@v1.13.0 pkg/utils/pod/scheduling.go ``IsProvisionable``: ``FailedToSchedule`` and not
  scheduled), so a Job of ``pause`` pods that select the NodePool (``karpenter.sh/nodepool``) and tolerate its GPU
  taint makes it launch the pool's instance type (the NodePool allows one). Why the placeholders request no GPU:
  Karpenter's scheduling simulation takes every provisionable pod in CPU-and-memory order (pkg/controllers/
  provisioning/scheduling/queue.go ``byCPUAndMemoryDescending``), with no notion of priority or preemption, and counts
  an in-flight NodeClaim as empty until pods bind to it (provisioner.go ``Schedule``: the nodes' used capacity, then
  the pending pods). Were the placeholders to hold the node's GPUs (the textbook overprovisioning pod,
  kubernetes.io/docs/tasks/administer-cluster/node-overprovisioning), the DGD's workers turning Pending while the
  nodes still boot (the usual case: the platform and the DGD take minutes, a P5 boots for longer) would be simulated
  onto those same NodeClaims and the placeholders would get new ones: one extra GPU node per placeholder, held until
  the deadline (tests/test_karpenter_engine.py shows it with the real Karpenter). So each placeholder requests a
  sliver of CPU and memory and keeps off the other placeholders' nodes (required pod anti-affinity on
  ``kubernetes.io/hostname``, which Karpenter honours when it packs: one NodeClaim per placeholder), and the workers,
  simulated or real, fit beside it: ``parallelism = completions`` = the nodes the pool's unpaused entries fill as
  planned, so no node more than the workers need is launched. The placeholders still carry a negative-value
  PriorityClass (value -1000 and ``preemptionPolicy: Never``, as the kubernetes.io overprovisioning example): a
  higher-priority pod that does not fit preempts them ("If a Pod cannot be scheduled, the scheduler tries to preempt
  (evict) lower priority Pods": kubernetes.io/docs/concepts/configuration/pod-priority-preemption), and Karpenter
  launches nothing for a pod the scheduler nominated for preemption (``IsPreempting``: ``nominatedNodeName`` set;
  aws/karpenter-provider-aws#1051 "Don't provision for pods with nominated node"). The Job never replaces a pod:
  ``restartPolicy: Never`` and ``backoffLimit: 0``: a pod that fails or is deleted (preempted, evicted) counts as failed
  (k8s.io/kubernetes@v1.33.13 pkg/controller/job/job_controller.go ``isPodFailed``: "Count deleted Pods as failures"),
  and one failure fails the Job, whose running pods are then terminated; and it ends:
  "Once a Job reaches activeDeadlineSeconds, all of its running Pods are terminated and the Job status will become
  type: Failed with reason: DeadlineExceeded", which "takes precedence over its .spec.backoffLimit"
  (kubernetes.io/docs/concepts/workloads/controllers/job, "Job termination and cleanup"). After the deadline
  (``PLACEHOLDER_DEADLINE_S``) a node whose workers never came is empty and goes after the NodePool's
  ``consolidateAfter``; that is the placeholder's cost when the DGD never comes (or an entry scales in before the
  deadline: its node stays until then). ``pulumi.com/skipAwait: "true"`` keeps ``up`` from waiting for a Job that is
  not meant to complete (pulumi-kubernetes pkg/metadata/overrides.go ``SkipAwaitLogic``); deleting it (its entries
  paused, the pool gone) deletes its pods (foreground cascading delete: pkg/await/await.go). The image is the
  ``pause`` of the Kubernetes release the simulated cluster runs (kubeadm ``PauseVersion`` 3.10, k8s.io/kubernetes
  @v1.33.13 cmd/kubeadm/app/constants/constants.go), pinned in stacks/registry/versions.yaml by tag as the manifest
  pins its other utility images.
* Interruption queue and rules: the getting-started CloudFormation (aws/karpenter-provider-aws
  website/content/en/preview/getting-started/getting-started-with-karpenter/cloudformation.yaml @0110690d).
* Controller IAM policy (``controller_policy``): the statements of the v1.13 getting-started CloudFormation, as
  aws/karpenter-provider-aws website/content/en/v1.13/reference/cloudformation.md @d8ef6953 reproduces them
  statement by statement (the file itself is the tag's
  website/content/en/preview/getting-started/getting-started-with-karpenter/cloudformation.yaml, that page says;
  website/ is not in the Go module, and neither a v1.13 copy nor the file at v1.13.x could be read here), checked
  against the v1.12 file (website/content/en/v1.12/getting-started/getting-started-with-karpenter/cloudformation.yaml
  @1698d22d) and website/content/en/v1.13/upgrading/upgrade-guide.md @28cad44c. tests/test_karpenter.py holds that
  action list and checks it against the AWS calls of github.com/aws/karpenter-provider-aws@v1.13.1 pkg/aws/sdk.go.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from stacks.config.eks import DEFAULT_CONSOLIDATE_AFTER
from stacks.cluster.identity import nodeclass_metadata, role_name
from stacks.cluster.pools import node_user_data

CAPACITY_KARPENTER = "karpenter"
CAPACITY_NODE_GROUP = "node-group"
CAPACITY_MODES = (CAPACITY_NODE_GROUP, CAPACITY_KARPENTER)

NAMESPACE = "kube-system"  # where the getting-started guide installs the chart (KARPENTER_NAMESPACE="kube-system")
SERVICE_ACCOUNT = "karpenter"
DISCOVERY_TAG = "karpenter.sh/discovery"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
RESERVATION_TYPE_LABEL = "karpenter.k8s.aws/capacity-reservation-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
CAPACITY_TYPES = ("on-demand", "spot", "reserved")
RESERVATION_TYPES = ("default", "capacity-block")
REQUIREMENT_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
DISRUPTION_REASONS = ("Underutilized", "Empty", "Drifted")
CONSOLIDATION_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized")
NODEPOOL_API = "karpenter.sh/v1"
NODECLASS_API = "karpenter.k8s.aws/v1"
# AL2023 alias: Karpenter picks the AL2023 variant for the instance (the NVIDIA one for GPU instances, as the node
# groups' AL2023_x86_64_NVIDIA / AL2023_ARM_64_NVIDIA). "@latest" follows new AMIs (drift replaces nodes);
# karpenter.sh/docs/tasks/managing-amis recommends pinning a version in production. The pools take the AMI release the
# node groups pin (stacks/config/eks.py karpenter_ami_alias: al2023@v<date>), unless gpuPools[i].amiAlias names one.
# The EventBridge rules (source, detail-type) -> the interruption queue: one per message the pinned controller parses
# (github.com/aws/karpenter-provider-aws v1.13.1 pkg/controllers/interruption/messages/*/parser.go, Source and DetailType;
# tests/test_karpenter.py compares the two). The getting-started CloudFormation's ScheduledChangeRule,
# SpotInterruptionRule, RebalanceRule and InstanceStateChangeRule, and the interruption warning of an interruptible
# Capacity Reservation (capacityreservationinterruption; "you receive this notification 2 minutes before your instances
# are terminated", EC2 user guide, "Monitor interruptible Capacity Reservations with EventBridge and CloudTrail").
INTERRUPTION_RULES = (
    ("health", "aws.health", "AWS Health Event"),
    ("spot", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("state-change", "aws.ec2", "EC2 Instance State-change Notification"),
    ("reservation", "aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
)
# IAM role names (CreateRole RoleName) and EventBridge rule names (PutRule Name) are at most 64 characters.
MAX_AWS_NAME = 64
# Capacity placeholders (module docstring): one PriorityClass for the stack, one Job per Karpenter pool with entries.
PLACEHOLDER_PRIORITY_CLASS = "dynamo-capacity-placeholder"
PLACEHOLDER_PRIORITY = -1000  # below every workload's default 0 (the kubernetes.io overprovisioning example's value)
PLACEHOLDER_LABEL = "dynamo.nvidia.com/capacity-placeholder"  # pod label: the pool's name (the anti-affinity selects it)
PLACEHOLDER_DEADLINE_S = 45 * 60  # how long the placeholders may hold nodes that no worker comes to
PLACEHOLDER_REQUESTS = {"cpu": "10m", "memory": "16Mi"}  # a sliver: a worker always fits beside it
SKIP_AWAIT = "pulumi.com/skipAwait"


def chart_pin() -> dict:
    from stacks.registry.charts import chart_pin as pin

    return pin("karpenter")


@dataclass
class KarpenterPool:
    """One GPU pool on Karpenter: its EC2NodeClass and NodePool (plain objects), and what it may launch."""

    name: str  # the pool's name (gpu, gpu-b200): the NodePool and EC2NodeClass are named after it
    gpu: str
    instance_type: str
    capacity_type: str  # on-demand | reserved
    reservation_type: Optional[str]  # default | capacity-block (reserved only)
    zone: str
    max_nodes: int
    gpus_per_node: int
    nodes_needed: int  # what the stack's DGDs need now (0: a cluster-only pool)
    ec2nodeclass: dict
    nodepool: dict
    # The Job whose pods have Karpenter launch the nodes the pool's unpaused entries fill, as soon as the NodePool
    # exists (``capacity_placeholder``); None when no unpaused entry uses the pool.
    placeholder: Optional[dict] = None

    def offerings(self) -> list[dict]:
        """The instance type offerings this NodePool can launch (for a KWOK instance-types file): type, capacity
        type, zone."""
        return [{"instanceType": self.instance_type, "capacityType": self.capacity_type, "zone": self.zone}]


@dataclass
class KarpenterPlan:
    cluster_name: str
    region: str
    queue_name: str
    node_role_name: str
    controller_role_name: str
    helm: Any  # stacks.registry.charts.HelmSpec
    controller_policy: dict  # IAM policy document; "<queue-arn>", "<node-role-arn>", "<account-id>" filled by the wiring
    queue: dict  # aws.sqs.Queue kwargs
    queue_policy: dict  # SQS queue policy document ("<queue-arn>" filled by the wiring)
    rules: list[dict] = field(default_factory=list)  # {name, rule_name, event_pattern}
    # The karpenter-crd chart at the same version: its CRDs are templates, so a chart bump upgrades them (Helm never
    # upgrades a chart's crds/ directory); the karpenter release then skips its own crds/.
    crd_helm: Any = None
    pools: list[KarpenterPool] = field(default_factory=list)
    reserved: bool = False
    # The placeholders' PriorityClass (cluster-scoped), when a pool has a placeholder Job.
    priority_class: Optional[dict] = None

    def placeholders(self) -> list[dict]:
        """The pools' capacity placeholder Jobs (pools without one have none)."""
        return [p.placeholder for p in self.pools if p.placeholder is not None]

    def objects(self) -> list[dict]:
        """The Kubernetes objects, in apply order (every EC2NodeClass before the NodePools that name them, then the
        placeholders' PriorityClass and Jobs)."""
        out = [p.ec2nodeclass for p in self.pools] + [p.nodepool for p in self.pools]
        if self.priority_class is not None:
            out.append(self.priority_class)
        return out + self.placeholders()


def capacity_type_for(market_type: str, capacity_reservation_id: Optional[str]) -> tuple[str, Optional[str]]:
    """``(karpenter.sh/capacity-type, karpenter.k8s.aws/capacity-reservation-type)`` of a pool: a Capacity Block or a
    targeted reservation is ``reserved``; otherwise ``on-demand``."""
    if market_type == "capacity-block":
        return "reserved", "capacity-block"
    if capacity_reservation_id:
        return "reserved", "default"
    return "on-demand", None


def karpenter_network_interfaces(efa_cards: Iterable[int]) -> list[dict]:
    """An EFA pool's ``EC2NodeClass.networkInterfaces`` (module docstring, EFA): the primary ENA interface at card 0 /
    device 0, then one ``efa-only`` interface per EFA card (device 1 on card 0, which holds the primary, else 0)."""
    cards = list(efa_cards)
    if not cards:
        return []
    out = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]
    out += [{"networkCardIndex": card, "deviceIndex": 1 if card == 0 else 0, "interfaceType": "efa-only"} for card in cards]
    return out


def ec2nodeclass(
    name: str,
    cluster_name: str,
    role: str,
    capacity_reservation_id: Optional[str],
    ami_alias: str,
    tags: Optional[dict] = None,
    efa_cards: Iterable[int] = (),
) -> dict:
    """The pool's EC2NodeClass: the AL2023 alias, subnets and security groups by the cluster's discovery tag, the node
    role (Karpenter makes the instance profile from it), the reservation or Capacity Block when there is one, the
    same 500 GiB gp3 root volume, IMDSv2 and instance-store RAID0 as the node groups' launch template."""
    spec: dict[str, Any] = {
        "role": role,
        "amiSelectorTerms": [{"alias": ami_alias}],
        "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster_name}}],
        "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster_name}}],
        "instanceStorePolicy": "RAID0",
        "metadataOptions": nodeclass_metadata(),  # IMDSv2, hop limit 1 (stacks/cluster/identity.py)
        # FastImagePull (parallel image pull), merged by Karpenter with the NodeConfig it generates (stacks/cluster/pools.py)
        "userData": node_user_data(raid0=False),
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "500Gi", "volumeType": "gp3", "deleteOnTermination": True}}
        ],
        "tags": dict(tags or {}),
    }
    if interfaces := karpenter_network_interfaces(efa_cards):
        spec["networkInterfaces"] = interfaces
    if capacity_reservation_id:
        spec["capacityReservationSelectorTerms"] = [{"id": capacity_reservation_id}]
    return {"apiVersion": NODECLASS_API, "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


def nodepool(
    name: str,
    nodeclass: str,
    instance_type: str,
    capacity_type: str,
    labels: dict,
    taint: dict,
    max_nodes: int,
    gpus_per_node: int,
    zone: str,
    reservation_type: Optional[str] = None,
    arch: str = "amd64",
    consolidate_after: str = DEFAULT_CONSOLIDATE_AFTER,
) -> dict:
    """The pool's NodePool: one instance type, one capacity type (and reservation type), one zone; the node groups'
    labels and GPU taint; GPU and node limits; empty nodes consolidated after ``consolidate_after`` (all at once:
    nothing runs there), other disruptions one node at a time; no expiry (a serving node is replaced by drift or by
    hand, never on a timer)."""
    reqs = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity_type]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]},
    ]
    if reservation_type:
        reqs.append({"key": RESERVATION_TYPE_LABEL, "operator": "In", "values": [reservation_type]})
    given = taint.get("effect")  # EKS spells NoSchedule NO_SCHEDULE
    effect = "NoSchedule" if given == "NO_SCHEDULE" else given or "NoSchedule"
    return {
        "apiVersion": NODEPOOL_API,
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
                    "requirements": reqs,
                    "taints": [{"key": taint["key"], "value": str(taint["value"]), "effect": effect}],
                    "expireAfter": "Never",
                },
            },
            "limits": {"nvidia.com/gpu": str(max_nodes * gpus_per_node), "nodes": str(max_nodes)},
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": consolidate_after,
                "budgets": [{"nodes": "100%", "reasons": ["Empty"]}, {"nodes": "1", "reasons": ["Drifted", "Underutilized"]}],
            },
        },
    }


def controller_policy(cluster_name: str, region: str, reserved: bool) -> dict:
    """The controller's IAM policy: the statements (Sids, actions, resources, conditions) of Karpenter v1.13's
    getting-started CloudFormation (aws/karpenter-provider-aws website/content/en/v1.13/reference/cloudformation.md
    @d8ef6953, the v1.13 docs' copy of
    website/content/en/preview/getting-started/getting-started-with-karpenter/cloudformation.yaml), one document
    instead of its six managed policies (NodeLifecycle, IAMIntegration, EKSIntegration, Interruption, ZonalShift,
    ResourceDiscovery; split in 1.9 "without any change to the permissions"). Since the old copy of this policy
    (preview/.../cloudformation.yaml @0110690d): ``iam:ListInstanceProfiles`` (AllowUnscopedInstanceProfileListAction,
    Resource "*": the instance-profile garbage collection of v1.7+, upgrade guide "Upgrading to 1.7.0"),
    ``ec2:DescribeInstanceStatus`` (instance status health checks of the interruption controller, "new required" in
    1.12; in AllowRegionalReadActions as the v1.13 page has it, the v1.12 file had it unconditioned in
    AllowUnscopedEC2DescribeInstanceStatus), no ``ec2:DescribeAvailabilityZones`` (gone upstream, and no call of it in
    @v1.13.1 pkg/aws/sdk.go). Left out on purpose, each with the condition under which v1.13.1 never calls it:
    ``ec2:DescribeCapacityReservations`` unless a pool uses reservations (no ``capacityReservationSelectorTerms``:
    pkg/providers/capacityreservation/provider.go queries nothing); ``ec2:DescribePlacementGroups`` and the
    ``placement-group/*`` resource (no ``placementGroupSelector``: pkg/providers/placementgroup/provider.go returns
    first); the ZonalShift policy's ``arc-zonal-shift:GetManagedResource`` (only with ``settings.enableZonalShift``,
    default false, not set here: pkg/operator/operator.go). PassRole's ``iam:PassedToService`` keeps
    ``ec2.amazonaws.com`` only (upstream adds ``ec2.amazonaws.com.cn`` for the China partition; these ARNs are
    ``arn:aws``). ``<queue-arn>``, ``<node-role-arn>`` and ``<account-id>`` are filled by the wiring."""
    p = "arn:aws"
    owned = {f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    res_owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    created = [
        f"{p}:ec2:{region}:*:{r}/*"
        for r in ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
    ]
    profile = f"{p}:iam::<account-id>:instance-profile/*"
    read = (["ec2:DescribeCapacityReservations"] if reserved else []) + [
        "ec2:DescribeImages",
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceStatus",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeSubnets",
    ]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowScopedEC2InstanceAccessActions",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": [
                    f"{p}:ec2:{region}::image/*",
                    f"{p}:ec2:{region}::snapshot/*",
                    f"{p}:ec2:{region}:*:security-group/*",
                    f"{p}:ec2:{region}:*:subnet/*",
                    f"{p}:ec2:{region}:*:capacity-reservation/*",
                ],
            },
            {
                "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": f"{p}:ec2:{region}:*:launch-template/*",
                "Condition": {"StringEquals": res_owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
            },
            {
                "Sid": "AllowScopedEC2InstanceActionsWithTags",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                "Resource": created,
                "Condition": {
                    "StringEquals": {**owned, "aws:RequestTag/eks:eks-cluster-name": cluster_name},
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            },
            {
                "Sid": "AllowScopedResourceCreationTagging",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": created,
                "Condition": {
                    "StringEquals": {
                        **owned,
                        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                        "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                    },
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            },
            {
                "Sid": "AllowScopedResourceTagging",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": f"{p}:ec2:{region}:*:instance/*",
                "Condition": {
                    "StringEquals": res_owned,
                    "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                    "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                    "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]},
                },
            },
            {
                "Sid": "AllowScopedDeletion",
                "Effect": "Allow",
                "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                "Resource": [f"{p}:ec2:{region}:*:instance/*", f"{p}:ec2:{region}:*:launch-template/*"],
                "Condition": {"StringEquals": res_owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
            },
            {
                "Sid": "AllowRegionalReadActions",
                "Effect": "Allow",
                "Action": read,
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
            },
            {
                "Sid": "AllowSSMReadActions",
                "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": f"{p}:ssm:{region}::parameter/aws/service/*",
            },
            {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"},
            {
                "Sid": "AllowInterruptionQueueActions",
                "Effect": "Allow",
                "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
                "Resource": "<queue-arn>",
            },
            {
                "Sid": "AllowPassingInstanceRole",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": "<node-role-arn>",
                "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            },
            {
                "Sid": "AllowScopedInstanceProfileCreationActions",
                "Effect": "Allow",
                "Action": "iam:CreateInstanceProfile",
                "Resource": profile,
                "Condition": {
                    "StringEquals": {
                        **owned,
                        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                        "aws:RequestTag/topology.kubernetes.io/region": region,
                    },
                    "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            },
            {
                "Sid": "AllowScopedInstanceProfileTagActions",
                "Effect": "Allow",
                "Action": "iam:TagInstanceProfile",
                "Resource": profile,
                "Condition": {
                    "StringEquals": {
                        **res_owned,
                        "aws:ResourceTag/topology.kubernetes.io/region": region,
                        **owned,
                        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                        "aws:RequestTag/topology.kubernetes.io/region": region,
                    },
                    "StringLike": {
                        "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                        "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    },
                },
            },
            {
                "Sid": "AllowScopedInstanceProfileActions",
                "Effect": "Allow",
                "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
                "Resource": profile,
                "Condition": {
                    "StringEquals": {**res_owned, "aws:ResourceTag/topology.kubernetes.io/region": region},
                    "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            },
            {
                "Sid": "AllowUnscopedInstanceProfileListAction",
                "Effect": "Allow",
                "Action": "iam:ListInstanceProfiles",
                "Resource": "*",
            },
            {
                "Sid": "AllowInstanceProfileReadActions",
                "Effect": "Allow",
                "Action": "iam:GetInstanceProfile",
                "Resource": profile,
            },
            {
                "Sid": "AllowAPIServerEndpointDiscovery",
                "Effect": "Allow",
                "Action": "eks:DescribeCluster",
                "Resource": f"{p}:eks:{region}:<account-id>:cluster/{cluster_name}",
            },
        ],
    }


def queue_policy() -> dict:
    """The interruption queue's policy: EventBridge (and SQS) may send to it, and nothing reaches it without TLS (the
    getting-started CloudFormation's KarpenterInterruptionQueuePolicy: its statement and ``DenyHTTP``, Deny ``sqs:*``
    when ``aws:SecureTransport`` is false; karpenter.sh docs, "CloudFormation"); ``<queue-arn>`` filled by the wiring."""
    return {
        "Version": "2012-10-17",
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                "Action": "sqs:SendMessage",
                "Resource": "<queue-arn>",
            },
            {
                "Sid": "DenyHTTP",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "sqs:*",
                "Resource": "<queue-arn>",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


def helm_values(cluster_name: str, queue_name: str, reserved: bool, system_selector: dict, replicas: int, region: str) -> dict:
    """Chart values: the cluster and its interruption queue, the ReservedCapacity gate where reservations are used,
    the controller on the system node group (never on nodes it manages; the chart's default affinity already keeps it
    off ``karpenter.sh/nodepool`` nodes), one replica per system node up to the chart's two (its pod anti-affinity
    puts replicas on distinct hosts), and the region as ``AWS_REGION``: without it the controller asks the instance
    metadata service (karpenter-provider-aws v1.13.1 ``pkg/operator/operator.go``: ``if cfg.Region == ""`` ...
    ``imds.NewFromConfig(cfg).GetRegion``, fatal on error), which the system nodes' hop count of 1 keeps from pods
    (stacks/cluster/identity.py); the chart's ``controller.env`` is where its values.yaml shows ``AWS_REGION``."""
    settings: dict[str, Any] = {"clusterName": cluster_name, "interruptionQueue": queue_name}
    if reserved:
        settings["featureGates"] = {"reservedCapacity": True}
    return {
        "settings": settings,
        "serviceAccount": {"name": SERVICE_ACCOUNT},
        "nodeSelector": {"kubernetes.io/os": "linux", **system_selector},
        "replicas": max(1, min(2, replicas)),
        "controller": {
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "env": [{"name": "AWS_REGION", "value": region}],
        },
    }


def placeholder_priority_class() -> dict:
    """The placeholders' PriorityClass: below every workload, never preempting anything itself."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PLACEHOLDER_PRIORITY_CLASS},
        "value": PLACEHOLDER_PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "Dynamo capacity placeholders: have Karpenter launch a GPU pool's nodes when its NodePool exists; "
        "every workload outranks them",
    }


def capacity_placeholder(
    pool_name: str, taint: dict, nodes: int, image: Optional[str] = None, deadline_s: int = PLACEHOLDER_DEADLINE_S
) -> Optional[dict]:
    """The pool's capacity placeholder Job (module docstring): ``nodes`` pause pods, one per node of the pool's
    NodePool (its ``karpenter.sh/nodepool`` label, its GPU taint tolerated, apart by hostname anti-affinity), each
    requesting a sliver of CPU and memory so the workers fit beside it, at the placeholders' negative priority; never
    replaced, ended after ``deadline_s``; ``up`` does not wait for it. None when no node is needed."""
    if nodes <= 0:
        return None
    if image is None:
        from stacks.registry.versions import image as pinned

        image = pinned("capacity-placeholder")
    given = taint.get("effect")  # EKS spells NoSchedule NO_SCHEDULE
    effect = "NoSchedule" if given == "NO_SCHEDULE" else given or "NoSchedule"
    labels = {
        "app.kubernetes.io/name": "capacity-placeholder",
        "app.kubernetes.io/part-of": "dynamo",
        PLACEHOLDER_LABEL: pool_name,
    }
    pod = {
        "priorityClassName": PLACEHOLDER_PRIORITY_CLASS,
        "restartPolicy": "Never",
        "nodeSelector": {NODEPOOL_LABEL: pool_name},
        "tolerations": [{"key": taint["key"], "operator": "Equal", "value": str(taint["value"]), "effect": effect}],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {PLACEHOLDER_LABEL: pool_name}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        },
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65535,
            "runAsGroup": 65535,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "pause",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "resources": {"requests": dict(PLACEHOLDER_REQUESTS), "limits": dict(PLACEHOLDER_REQUESTS)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"capacity-placeholder-{pool_name}",
            "namespace": NAMESPACE,
            "labels": dict(labels),
            "annotations": {SKIP_AWAIT: "true"},
        },
        "spec": {
            "parallelism": nodes,
            "completions": nodes,
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def pool_objects(
    cluster_name: str,
    pool_name: str,
    node_role: str,
    instance_type: str,
    arch: str,
    gpus_per_node: int,
    zone: str,
    labels: dict,
    taint: dict,
    max_nodes: int,
    *,
    ami_alias: str,
    market_type: str = "on-demand",
    capacity_reservation_id: Optional[str] = None,
    consolidate_after: str = DEFAULT_CONSOLIDATE_AFTER,
    gpu: str = "",
    nodes_needed: int = 0,
    efa_cards: Iterable[int] = (),
    placeholder_nodes: int = 0,
) -> KarpenterPool:
    """One pool's EC2NodeClass and NodePool (both named ``<pool name>``); ``efa_cards``: the instance's EFA network
    cards when the pool's workers use EFA (empty: no interfaces named); ``placeholder_nodes``: the nodes its unpaused
    entries fill as planned, launched as soon as the NodePool exists (``capacity_placeholder``; 0: none)."""
    ctype, rtype = capacity_type_for(market_type, capacity_reservation_id)
    nc = ec2nodeclass(
        pool_name,
        cluster_name,
        node_role,
        capacity_reservation_id,
        ami_alias,
        tags={"dynamo.nvidia.com/cluster": cluster_name},
        efa_cards=efa_cards,
    )
    np = nodepool(
        pool_name,
        pool_name,
        instance_type,
        ctype,
        labels,
        taint,
        max_nodes,
        gpus_per_node,
        zone,
        rtype,
        arch=arch,
        consolidate_after=consolidate_after,
    )
    return KarpenterPool(
        name=pool_name,
        gpu=gpu,
        instance_type=instance_type,
        capacity_type=ctype,
        reservation_type=rtype,
        zone=zone,
        max_nodes=max_nodes,
        gpus_per_node=gpus_per_node,
        nodes_needed=nodes_needed,
        ec2nodeclass=nc,
        nodepool=np,
        placeholder=capacity_placeholder(pool_name, taint, min(placeholder_nodes, max_nodes)),
    )


def build_karpenter_plan(
    cluster_name: str, region: str, pools: Iterable[KarpenterPool], system_nodes: int = 2, system_selector: Optional[dict] = None
) -> Optional[KarpenterPlan]:
    """The Karpenter install for the cluster's Karpenter pools (None when it has none): controller IAM (Pod Identity),
    node role, interruption queue and rules, the pinned chart and the pools' objects."""
    from stacks.registry.charts import HelmSpec

    pools = list(pools)
    if not pools:
        return None
    names = [f"{cluster_name}-{n}" for n, _, _ in INTERRUPTION_RULES]  # the role names fit by construction (identity.role_name)
    too_long = [n for n in names if len(n) > MAX_AWS_NAME]
    if too_long:
        from stacks.config.keys import ConfigError

        room = MAX_AWS_NAME - max(len(n) - len(cluster_name) for n in names)
        raise ConfigError(
            f"stack name: the Karpenter EventBridge rule names of cluster {cluster_name!r} ({', '.join(too_long)}) "
            f"would be longer than AWS's {MAX_AWS_NAME} characters; with Karpenter pools the cluster name may have at most "
            f"{room} characters: use a stack name {len(cluster_name) - room} characters shorter"
        )
    reserved = any(p.capacity_type == "reserved" for p in pools)
    pin = chart_pin()
    helm = HelmSpec(
        name="karpenter",
        chart=pin["chart"],
        version=str(pin["version"]),
        repo=pin["repo"],
        namespace=NAMESPACE,
        values=helm_values(cluster_name, cluster_name, reserved, system_selector or {}, system_nodes, region),
    )
    # The release script publishes karpenter-crd beside karpenter, same version (hack/release/common.sh @v1.13.1:
    # publishHelmChart ... "karpenter-crd"); its CRDs sit in templates/ (charts/karpenter-crd/templates).
    crd_helm = HelmSpec(
        name="karpenter-crd", chart="karpenter-crd", version=str(pin["version"]), repo=pin["repo"], namespace=NAMESPACE
    )
    return KarpenterPlan(
        cluster_name=cluster_name,
        region=region,
        queue_name=cluster_name,
        node_role_name=node_role_name(cluster_name, region),
        controller_role_name=role_name(cluster_name, region, "karpenter"),
        helm=helm,
        crd_helm=crd_helm,
        controller_policy=controller_policy(cluster_name, region, reserved),
        # The CloudFormation's queue: messages kept 300 s, SSE with SQS-managed keys.
        queue={"name": cluster_name, "message_retention_seconds": 300, "sqs_managed_sse_enabled": True},
        queue_policy=queue_policy(),
        # EventBridge rule names: up to 64 characters (EventBridge PutRule Name).
        rules=[
            {"name": n, "rule_name": f"{cluster_name}-{n}", "event_pattern": json.dumps({"source": [src], "detail-type": [dt]})}
            for n, src, dt in INTERRUPTION_RULES
        ],
        pools=pools,
        reserved=reserved,
        priority_class=placeholder_priority_class() if any(p.placeholder for p in pools) else None,
    )


def node_role_name(cluster_name: str, region: str) -> str:
    """The Karpenter node role's name (the EC2NodeClass names it): stacks.cluster.identity.role_name."""
    return role_name(cluster_name, region, "karpenter-node")


def controller_policy_values(queue_arn: str, node_role_arn: str, controller_role_arn: str) -> dict[str, str]:
    """The placeholders of ``KarpenterPlan.controller_policy`` from the resolved ARNs; the account id is the controller
    role ARN's fifth field (``arn:aws:iam::<account>:role/...``), ``*`` while that ARN is not one (a preview's
    placeholder)."""
    account = controller_role_arn.split(":")[4] if controller_role_arn.count(":") >= 5 else "*"
    return {"<queue-arn>": queue_arn, "<node-role-arn>": node_role_arn, "<account-id>": account}


def fill(doc: Any, values: dict[str, str]) -> Any:
    """``doc`` with every ``<placeholder>`` string replaced (the wiring passes resolved ARNs)."""
    if isinstance(doc, dict):
        return {k: fill(v, values) for k, v in doc.items()}
    if isinstance(doc, list):
        return [fill(v, values) for v in doc]
    if isinstance(doc, str):
        for k, v in values.items():
            doc = doc.replace(k, v)
    return doc


def add_do_not_disrupt(dgd: dict, node_selects: Optional[Any] = None) -> list[str]:
    """Give every GPU worker component of ``dgd`` the pod annotation ``karpenter.sh/do-not-disrupt: "true"`` (its
    ``podTemplate.metadata.annotations``; DGD v1beta1 CRD), so consolidation and drift never take a node from under a
    serving worker mid-request. ``node_selects(pod_spec) -> bool`` limits it to the components that land on Karpenter
    pools (None: every GPU component). In place; returns the components annotated. Only for Karpenter pools: stacks on
    node groups keep the upstream recipe's objects unchanged."""
    from stacks.catalog.fit import pod_requests

    done = []
    for comp in dgd["spec"]["components"]:
        pod = comp["podTemplate"]["spec"]
        if not pod_requests(pod).get("nvidia.com/gpu"):
            continue
        if node_selects is not None and not node_selects(pod):
            continue
        meta = comp["podTemplate"].setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), DO_NOT_DISRUPT: "true"}
        done.append(comp["name"])
    return done
