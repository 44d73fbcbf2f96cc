"""The ``dynamo:cluster`` settings of ``mode: eks``: ``EksConfig`` and its nested models (``GpuPoolConfig``,
``AccessEntryConfig``), the checks they run before any resource, the EKS version pins and the AWS Region helpers
(``apply_aws_region``, ``resolve_region``) the stack's parse uses. Part of the config layer: it reads the registry
and ``stacks.config.keys`` only, and the EKS plan (stacks/cluster) reads it."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Optional, TypeVar

from pydantic import Field, model_validator

from stacks.config.keys import NS, ConfigError, _Model
from stacks.registry.gpus import InstanceShape, shape_for


# The NVIDIA stack the program installs on GPU nodes: NVIDIA's device plugin alone, or the GPU Operator (driver off: EKS
# GPU AMIs ship one).
NvidiaStack = Literal["device-plugin", "gpu-operator"]

# AWS Regions (commercial and GovCloud) a stack may name; EC2 "Regions and Zones" (docs.aws.amazon.com/global-infrastructure/latest/regions).
AWS_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "ca-west-1",
    "mx-central-1",
    "sa-east-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-7",
    "ap-south-1",
    "ap-south-2",
    "ap-east-1",
    "ap-east-2",
    "me-south-1",
    "me-central-1",
    "il-central-1",
    "af-south-1",
)
# Regions of other partitions: the program writes every IAM, policy and service ARN in the commercial partition
# (arn:aws:...), which GovCloud (arn:aws-us-gov:) and China (arn:aws-cn:) refuse (IAM user guide, "IAM identifiers":
# ARN format arn:partition:service:region:account-id:resource). Refused with the reason instead of failing mid-`up`.
OTHER_PARTITION_REGIONS = {
    "us-gov-west-1": "aws-us-gov",
    "us-gov-east-1": "aws-us-gov",
    "cn-north-1": "aws-cn",
    "cn-northwest-1": "aws-cn",
}
# Largest managed node group: EKS service quota "Nodes per managed node group" (450; EKS user guide, service-quotas).
MAX_NODES_PER_NODEGROUP = 450
_ZONE = re.compile(r"(?P<region>[a-z]{2}(?:-gov)?-[a-z]+-\d)(?P<letter>[a-z])")
_LOCAL_ZONE = re.compile(r"(?P<region>[a-z]{2}(?:-gov)?-[a-z]+-\d)-[a-z]+-\d[a-z]")
# EFS provisioned throughput the API accepts: "Valid values are 1-3414 MiBps, with the upper limit depending on Region.
# To increase this limit, contact AWS Support" (EFS API reference, CreateFileSystem/UpdateFileSystem
# ProvisionedThroughputInMibps; as quoted by the AWS SDK for Kotlin's EFS model docs, docs.aws.amazon.com/sdk-for-kotlin).
EFS_PROVISIONED_MIBPS = (1, 3414)


def _eks_pin(key: str):
    from stacks.registry.versions import versions

    return versions()["eks"][key]


def kubernetes_versions() -> tuple[str, ...]:
    return tuple(_eks_pin("kubernetesVersions"))


def refused_kubernetes_versions() -> dict[str, str]:
    """Versions EKS offers that a stack may not pin, each with the reason (versions.yaml eks.refusedKubernetesVersions)."""
    return {str(k): str(v) for k, v in (_eks_pin("refusedKubernetesVersions") or {}).items()}


def ami_release_versions() -> dict[str, str]:
    """The pinned EKS AL2023 AMI release version per Kubernetes version (versions.yaml eks.amiReleaseVersions)."""
    return {str(k): str(v) for k, v in (_eks_pin("amiReleaseVersions") or {}).items()}


# An EKS AMI release version as DescribeNodegroup reports it: <Kubernetes minor>.<patch>-<release date>, e.g.
# 1.35.6-20260714 (awslabs/amazon-eks-ami CHANGELOG.md, "AMI Details": "Release version").
_AMI_RELEASE_VERSION = re.compile(r"(1\.\d+)\.\d+-(\d{8})")


def karpenter_ami_alias(release_version: str) -> str:
    """Karpenter's AL2023 alias for the AMI release of ``release_version``: ``al2023@v<date>``, the ``v<date>`` suffix of
    that release's AMI names (amazon-eks-node-al2023-x86_64-nvidia-1.35-v20260714; Karpenter's getting-started reads
    ALIAS_VERSION off that name: aws/karpenter-provider-aws website getting-started step01-config.sh)."""
    m = _AMI_RELEASE_VERSION.fullmatch(release_version)
    assert m, release_version
    return f"al2023@v{m[2]}"


def _minor(version: str, key: str) -> int:
    m = re.fullmatch(r"1\.(\d+)", str(version))
    if not m:
        raise ValueError(f"{key}: {version!r} is not a Kubernetes minor version like 1.35")
    return int(m[1])


def check_kubernetes_step(current: Optional[str], wanted: str, k: str = f"{NS}:cluster") -> None:
    """EKS moves a control plane one minor version per UpdateClusterVersion and never back ("Update existing
    cluster to new Kubernetes version": "You can't downgrade", "update to the next minor version only";
    terraform-provider-aws internal/service/eks/cluster.go sends UpdateClusterVersion with the new version as is,
    so a skip fails only after the `up` has started). ``current``: the version the cluster runs (None: a new cluster).
    A skip or a downgrade raises, naming the steps to take."""
    if current is None:
        return
    now, to = _minor(current, f"{k}.currentKubernetesVersion"), _minor(wanted, f"{k}.kubernetesVersion")
    if to < now:
        raise ValueError(
            f"{k}.kubernetesVersion: {wanted!r} is older than the cluster's {current!r} "
            f'({k}.currentKubernetesVersion); EKS cannot downgrade a cluster: set {k}.kubernetesVersion: "{current}" '
            "or a newer one"
        )
    if to - now > 1:
        steps = [f"1.{m}" for m in range(now + 1, to + 1)]
        raise ValueError(
            f"{k}.kubernetesVersion: {wanted!r} is {to - now} minor versions ahead of the cluster's {current!r} "
            f"({k}.currentKubernetesVersion); EKS upgrades one minor version at a time: "
            + "; then ".join(
                f'set {k}.kubernetesVersion: "{v}" and {k}.currentKubernetesVersion: "{p}", run `pulumi up`'
                for p, v in zip([current] + steps, steps)
            )
            + ' (docs/deploy-aws.md, "Upgrading Kubernetes")'
        )


def check_running_version(running: Optional[str], wanted: str, cluster: str, k: str = f"{NS}:cluster") -> None:
    """The same rule against the version the EKS cluster ``cluster`` runs, as EKS reports it (DescribeCluster through
    ``aws.eks.get_cluster``; components/cluster_source.py looks it up before any resource). ``running``: None for a
    cluster that does not exist yet. A skip or a downgrade raises with the key, both versions and the steps."""
    if running is None:
        return
    m = re.fullmatch(r"1\.(\d+)", str(running))
    if not m:
        raise ValueError(
            f"EKS cluster {cluster!r} reports Kubernetes version {running!r}, not a minor version like 1.35; "
            f"{k}.kubernetesVersion cannot be checked against it"
        )
    now, to = int(m[1]), _minor(wanted, f"{k}.kubernetesVersion")
    if to < now:
        raise ValueError(
            f"{k}.kubernetesVersion: {wanted!r} is older than {running!r}, the version EKS cluster {cluster!r} "
            f'runs; EKS cannot downgrade a cluster: set {k}.kubernetesVersion: "{running}" (or a newer one, one minor '
            f'at a time) and run `pulumi up` (docs/deploy-aws.md, "Upgrading Kubernetes")'
        )
    if to - now > 1:
        steps = [f"1.{v}" for v in range(now + 1, to + 1)]
        raise ValueError(
            f"{k}.kubernetesVersion: {wanted!r} is {to - now} minor versions ahead of {running!r}, the version "
            f"EKS cluster {cluster!r} runs; EKS upgrades one minor version at a time (UpdateClusterVersion would "
            f"fail after the `up` has started): "
            + "; then ".join(f'set {k}.kubernetesVersion: "{v}", run `pulumi up`' for v in steps)
            + ' (docs/deploy-aws.md, "Upgrading Kubernetes")'
        )


@dataclass(frozen=True)
class LiveNodeGroup:
    """A managed node group as EKS reports it (DescribeNodegroup through ``aws.eks.get_node_group``)."""

    name: str
    version: str
    capacity_type: str
    desired_size: int
    release_version: Optional[str] = None  # the AMI release its nodes run (DescribeNodegroup releaseVersion)
    disk_size: Optional[int] = None  # diskSize, when the group has no launch template
    pool: Optional[str] = None  # its dynamo.nvidia.com/pool label: system, gpu, gpu-<gpu>
    # its launch template digest tag (stacks.cluster.pools.LAUNCH_TEMPLATE_DIGEST_TAG), where the program set one
    launch_template_digest: Optional[str] = None


def _release_order(release: str) -> tuple:
    m = re.fullmatch(r"1\.(\d+)\.(\d+)-(\d{8})", str(release))
    return (int(m[1]), m[3], int(m[2])) if m else ()


def check_ami_release(groups: Iterable[LiveNodeGroup], release: str, cluster: str, k: str = f"{NS}:cluster") -> None:
    """Refuse, before any resource, an AMI release older than one a running group is on: "You cannot roll back a node
    group to an earlier Kubernetes version or AMI version" (EKS API reference, UpdateNodegroupVersion), so the update
    would fail mid-`up`. A group EKS moved past the pin (a group created before the pin, on EKS's newest AMI) keeps
    its AMI only if the stack pins at least that release."""
    newer = [g for g in groups if g.release_version and _release_order(g.release_version) > _release_order(release)]
    if newer:
        top = max((v for g in newer if (v := g.release_version)), key=_release_order)
        raise ValueError(
            f"{k}.amiReleaseVersion: {release} is older than the AMI release node group(s) "
            f"{', '.join(f'{g.name} ({g.release_version})' for g in newer)} of EKS cluster {cluster!r} run, and EKS "
            f"cannot roll a node group back to an earlier AMI version (UpdateNodegroupVersion). Set "
            f"{k}.amiReleaseVersion: {top} (what they run) or a newer release of Kubernetes {top.split('.')[0]}.{top.split('.')[1]}"
        )


def node_group_changes(
    groups: Iterable[LiveNodeGroup], release: str, system_disk: int, system_disk_set: bool, cluster: str, k: str = f"{NS}:cluster"
) -> list[str]:
    """What this `up` does to the running node groups' nodes that the diff does not say in words, as warnings: an AMI
    release move replaces every node of the group (GPU groups one at a time, MINIMAL), and a system group whose disk
    is smaller than the plan's keeps it (EKS cannot resize a group's disk; a new size replaces the group)."""
    out = []
    for g in groups:
        if g.release_version and g.release_version != release:
            how = (
                "one node at a time (MINIMAL: a node is drained and terminated before its replacement starts)"
                if g.pool != "system"
                else "new nodes first, then the old ones drain"
            )
            out.append(
                f"EKS cluster {cluster!r}: this `up` moves node group {g.name} from AMI release {g.release_version} to {release} "
                f"({k}.amiReleaseVersion, or the pin in stacks/registry/versions.yaml): every node of the group is replaced, {how}"
            )
        if g.pool == "system" and not system_disk_set and g.disk_size is not None and g.disk_size < system_disk:
            out.append(
                f"EKS cluster {cluster!r}: system node group {g.name} keeps its {g.disk_size} GiB root disk; this plan sizes it "
                f"{system_disk} GiB for the runtime images its frontends and download Jobs pull. EKS cannot resize a group's "
                f"disk: set {k}.systemDiskGib: {system_disk} to replace the group (a new group comes up first, then the old "
                f'one drains; docs/deploy-aws.md, "Day 2")'
            )
    return out


def check_node_groups_for_step(
    running: Optional[str],
    wanted: str,
    groups: Iterable[LiveNodeGroup],
    cluster: str,
    k: str = f"{NS}:cluster",
    release: Optional[str] = None,
) -> None:
    """A control-plane step (``wanted`` one minor above the ``running`` version) is refused before any resource while a
    managed node group of the cluster is not at the running version: EKS refuses UpdateClusterVersion then ("Before
    updating your control plane to a new Kubernetes version, make sure that the Kubernetes minor version of both the
    managed nodes and Fargate nodes in your cluster are the same as your control plane's current version": EKS user
    guide, "Update existing cluster to new Kubernetes version"). And while a Capacity Block group runs nodes: the node
    groups follow the control plane in the same `up`, and EKS updates a Capacity Block group's version only at desired
    size 0 (EKS user guide, "Create a managed node group with Capacity Blocks for ML")."""
    if running is None:
        return
    groups = list(groups)
    step = str(wanted) != str(running)
    behind = [g for g in groups if str(g.version) != str(running)]
    if step and behind:
        names = ", ".join(f"{g.name} ({g.version})" for g in behind)
        raise ValueError(
            f"{k}.kubernetesVersion: {wanted!r} steps the control plane of EKS cluster {cluster!r} from {running!r}, "
            f"but its node group(s) {names} are not at {running!r}: EKS refuses the control-plane update while a "
            f"managed node group is behind it. First bring them to {running!r}: keep {k}.kubernetesVersion: "
            f'"{running}" and run `pulumi up` (the program sets every group\'s version), or `aws eks '
            f"update-nodegroup-version --cluster-name {cluster} --nodegroup-name <group> --kubernetes-version "
            f'{running}`; then step (docs/deploy-aws.md, "Upgrading Kubernetes")'
        )

    # The groups carry the control plane's version, so this `up` moves every group not at ``wanted`` (all of them on a
    # step): a Capacity Block group that runs nodes would get a version update EKS refuses.
    # The same for a new AMI release (``release``: the one the plan pins): it is a version update of the group too.
    def ami_moves(g: LiveNodeGroup) -> bool:
        return bool(release and g.release_version and g.release_version != release)

    moved = [
        g
        for g in groups
        if g.capacity_type == "CAPACITY_BLOCK" and g.desired_size > 0 and (step or str(g.version) != str(wanted) or ami_moves(g))
    ]
    if moved:

        def what(g: LiveNodeGroup) -> str:
            if step:
                return f"{g.name} ({g.desired_size} nodes)"
            return f"{g.name} ({g.version}{', AMI ' + str(g.release_version) if ami_moves(g) else ''}, {g.desired_size} nodes)"

        names = ", ".join(what(g) for g in moved)
        only_ami = not step and all(str(g.version) == str(wanted) for g in moved)
        key, to = (f"{k}.amiReleaseVersion", f"AMI release {release}") if only_ami else (f"{k}.kubernetesVersion", repr(wanted))
        raise ValueError(
            f"{key}: this `up` moves the Capacity Block group(s) {names} of EKS cluster "
            f"{cluster!r} to {to} (the node groups follow the control plane and the AMI pin), and EKS updates a Capacity Block "
            f"group's version only at desired size 0. Pause them first (dynamo:paused: true, or paused: true on their "
            f"dynamo:serve entries) and run `pulumi up`, then {'step the version, then ' if step else ''}resume "
            f'(docs/deploy-aws.md, "Capacity Block groups: pause, update, resume")'
        )


def check_capacity_block_launch_templates(
    groups: Iterable[LiveNodeGroup], planned: dict[str, str], cluster: str, k: str = f"{NS}:cluster"
) -> list[str]:
    """Refuse, before any resource, an `up` that gives a running Capacity Block group a new launch template version (the
    next block's capacityReservationId, EFA, user data, disks): the provider sends it as UpdateNodegroupVersion, which EKS
    applies to a Capacity Block group only at desired size 0 (EKS user guide, "Create a managed node group with Capacity
    Blocks for ML", Considerations). ``planned``: pool label -> the plan's launch template digest
    (stacks.cluster.pools.launch_template_digest), compared with the digest tag the live group carries. A running block
    group without the tag (created before the program set it) cannot be compared: returned as warnings."""
    changed, unknown = [], []
    for g in groups:
        if g.capacity_type != "CAPACITY_BLOCK" or g.desired_size <= 0 or g.pool not in planned:
            continue
        if g.launch_template_digest is None:
            unknown.append(g)
        elif g.launch_template_digest != planned[g.pool]:
            changed.append(g)
    if changed:
        names = ", ".join(f"{g.name} ({g.desired_size} nodes)" for g in changed)
        raise ValueError(
            f"{k}: this `up` gives the running Capacity Block group(s) {names} of EKS cluster {cluster!r} a new launch "
            f"template version (a change of capacityReservationId, EFA, user data or disks), which EKS applies as a "
            f"version update, only at desired size 0. Pause them first (dynamo:paused: true, or paused: true on their "
            f"dynamo:serve entries) and run `pulumi up`, then make the change, then resume (docs/deploy-aws.md, "
            f'"Capacity Block groups: pause, update, resume")'
        )
    return [
        f"{k}: the running Capacity Block group {g.name} of EKS cluster {cluster!r} carries no launch template digest yet, so "
        f"this `up` cannot tell whether its launch template changes; if it does, pause the group first (docs/deploy-aws.md, "
        f'"Capacity Block groups: pause, update, resume")'
        for g in unknown
    ]


@dataclass(frozen=True)
class LiveSubnet:
    """A subnet of the cluster's VPC as EC2 reports it (``aws.ec2.get_subnet``)."""

    id: str
    zone: str
    cidr: str


def check_subnet_layout(live: Iterable[LiveSubnet], planned: Iterable[dict], cluster: str, k: str = f"{NS}:cluster") -> None:
    """Refuse, before any resource, a plan that re-cuts the subnets of an existing cluster: a subnet's CIDR block cannot
    change (EC2 has no ModifySubnet for it; the provider replaces the subnet), and the replacement's CIDR collides with
    the old one while the old still holds the nodes' and the cache's interfaces. Each zone has a fixed slot
    (stacks.cluster.network._subnets), so adding a zone or a Local Zone passes; what is refused is a zone list that
    moves a zone to another position (a zone removed from the middle), or a cluster built with the layout by zone count
    planned with the fixed slots."""
    by_zone: dict[str, set[str]] = {}
    for sn in live:
        by_zone.setdefault(sn.zone, set()).add(sn.cidr)
    planned = list(planned)

    def overlapping(cidr: str, cidrs: Iterable[str]) -> list[str]:
        return sorted(c for c in cidrs if ipaddress.ip_network(c).overlaps(ipaddress.ip_network(cidr)))

    moved = [
        (
            p["availability_zone"],
            p["cidr_block"],
            overlapping(p["cidr_block"], by_zone[p["availability_zone"]]) or sorted(by_zone[p["availability_zone"]]),
        )
        for p in planned
        if p["availability_zone"] in by_zone and p["cidr_block"] not in by_zone[p["availability_zone"]]
    ]
    seen = {(z, c) for z, c, _ in moved}
    live_nets = [(z, ipaddress.ip_network(c)) for z, cs in by_zone.items() for c in cs]
    clash = [
        (p["availability_zone"], p["cidr_block"], z, str(n))
        for p in planned
        for z, n in live_nets
        if (p["availability_zone"], p["cidr_block"]) not in seen
        and z != p["availability_zone"]
        and ipaddress.ip_network(p["cidr_block"]).overlaps(n)
    ]
    if moved or clash:
        what = "; ".join(
            [f"{z}: {c} (it has {', '.join(old)})" for z, c, old in moved]
            + [f"{z}: {c} overlaps {oz}'s {oc}" for z, c, oz, oc in clash]
        )
        raise ValueError(
            f"{k}.availabilityZones / {k}.gpuAvailabilityZone: this plan re-cuts the subnets of EKS cluster {cluster!r} "
            f"({what}): a subnet's CIDR block cannot change, so every re-cut subnet would be replaced, with its "
            f"nodes and the cache's network interfaces, and the new blocks collide with the old. Keep the zones the "
            f"cluster has (and the GPU zone); a cluster whose subnets were cut by zone count (two zones with a GPU Local Zone, or four or more zones, "
            f"built before each zone had a fixed slot) keeps them with {k}.subnetLayout: by-zone-count; or build "
            f'the new layout as a new stack (docs/deploy-aws.md, "Zones and subnets")'
        )


def check_cache_zone(live_zone: Optional[str], planned_zone: str, explicit: bool, cluster: str, k: str = f"{NS}:cluster") -> None:
    """Refuse, before any resource, an `up` that would move the FSx for Lustre cache to another zone because the GPU zone
    moved: the file system's subnet is replace-only (FSx CreateFileSystem SubnetIds; the provider replaces it), so the
    cache would be re-created empty, and with storage.protect the old one would leave the state and keep billing. A zone
    named in cacheAvailabilityZone is the user's choice and passes."""
    if live_zone is None or explicit or live_zone == planned_zone:
        return
    raise ValueError(
        f"{k}.cacheAvailabilityZone: the FSx for Lustre cache of EKS cluster {cluster!r} is in {live_zone}, and this "
        f"plan puts it in {planned_zone} (it follows the GPU zone unless set), which replaces the file system: a "
        f"new, empty cache, and the old one deleted or, with storage.protect, kept outside the stack and still "
        f"billed. Set {k}.cacheAvailabilityZone: {live_zone} to keep the cache where it is (the GPU nodes mount it "
        f"across zones, at inter-zone transfer prices), or set it to {planned_zone} to build a new cache there"
    )


POOL_KEYS = (
    "instance_type",
    "gpu_nodes",
    "efa",
    "placement_group",
    "market_type",
    "capacity_reservation_id",
    "gpu_availability_zone",
    "capacity",
    "max_nodes",
    "consolidate_after",
    "ami_alias",
)
# Karpenter pools (stacks/cluster/karpenter.py): the NodePool's node limit; consolidateAfter as the NodePool CRD accepts it
# (sigs.k8s.io/karpenter@v1.13.0 karpenter.sh_nodepools.yaml: ^(([0-9]+(s|m|h))+|Never)$); an AL2023 AMI alias
# (EC2NodeClass amiSelectorTerms alias: family@version, version "latest" or vYYYYMMDD; karpenter.sh docs, NodeClasses).
KARPENTER_KEYS = ("max_nodes", "consolidate_after", "ami_alias")
# consolidateAfter when a Karpenter pool sets none: an empty or underused GPU node goes 10 minutes after its last pod.
DEFAULT_CONSOLIDATE_AFTER = "10m"
_CONSOLIDATE_AFTER = re.compile(r"(([0-9]+(s|m|h))+|Never)")
_AMI_ALIAS = re.compile(r"al2023@(latest|v\d{8})")
MAX_KARPENTER_NODES = 1000


class GpuPoolConfig(_Model):
    """One GPU node group of the cluster (``dynamo:cluster.gpuPools[i]``): its GPU (stacks/registry/__init__.py GPUS with an
    instance in stacks/registry/gpus.py), node count and capacity options. A cluster-only stack names its pools here; a
    serving stack on EKS may too (then each entry's GPU needs a pool, and ``nodes`` must hold that GPU's entries)."""

    gpu: str
    nodes: Optional[int] = Field(default=None, ge=1, le=MAX_NODES_PER_NODEGROUP)
    instance_type: Optional[str] = None
    efa: Optional[bool] = None
    placement_group: Optional[bool] = None
    market_type: Literal["on-demand", "capacity-block"] = "on-demand"
    capacity_reservation_id: Optional[str] = None
    availability_zone: Optional[str] = None
    # node-group (default): a managed node group of `nodes`; karpenter: a NodePool launching up to maxNodes on demand.
    capacity: Literal["node-group", "karpenter"] = "node-group"
    max_nodes: Optional[int] = Field(default=None, ge=1, le=MAX_KARPENTER_NODES)
    consolidate_after: Optional[str] = None
    ami_alias: Optional[str] = None


PRIVATE_VPC_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
# ARN format arn:partition:service:region:account-id:resource (IAM user guide, reference-arns); IAM has no region and
# a 12-digit account; an EKS access entry's principal is an IAM user or role (EKS access entries, principalArn). The
# partition is aws: the Regions this program accepts are all in it (OTHER_PARTITION_REGIONS are refused), and IAM refuses
# a principal of another partition.
_PRINCIPAL_ARN = re.compile(r"arn:aws:iam::[0-9]{12}:(?:role|user)/[\w+=,.@/-]{1,512}", re.ASCII)
# EKS control-plane log types (EKS API LogSetup types; EKS user guide "Send control plane logs to CloudWatch Logs").
ControlPlaneLog = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]
CONTROL_PLANE_LOG_TYPES: tuple[ControlPlaneLog, ...] = ("api", "audit", "authenticator", "controllerManager", "scheduler")
DEFAULT_CONTROL_PLANE_LOGS: tuple[ControlPlaneLog, ...] = ("api", "audit", "authenticator")
# CloudWatch Logs PutRetentionPolicy retentionInDays: "Possible values are: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365,
# 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, and 3653" (CloudWatch Logs API reference, PutRetentionPolicy).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
_K8S_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class AccessEntryConfig(_Model):
    """One EKS access entry (``dynamo:cluster.accessEntries[i]``): an IAM role or user, the access policy it gets
    (``ACCESS_POLICIES``) and, for admin/edit/view, the namespaces it is limited to (empty: the whole cluster)."""

    principal_arn: str
    policy: Literal["cluster-admin", "admin", "edit", "view"]
    namespaces: tuple[str, ...] = ()


class EksConfig(_Model):
    """``dynamo:cluster`` settings for ``mode: eks``. Every check raises before any resource is registered;
    the message names ``dynamo:cluster.<key>``, the value and the valid choices."""

    region: str = "us-east-1"
    kubernetes_version: str = Field(default_factory=lambda: str(_eks_pin("kubernetesVersion")))
    # The version the cluster runs now, when it exists (its kubernetesVersion output): an `up` may move one minor
    # version from it, never more and never back (EKS UpdateClusterVersion); unset on a new cluster.
    current_kubernetes_version: Optional[str] = None
    vpc_cidr: str = "10.0.0.0/16"
    # Where the subnets sit in the VPC (stacks/cluster/network.py): ``fixed-slots``, each zone's block fixed by its
    # position, so zones and a Local Zone can be added later; ``by-zone-count``, sizes follow the zone count, the layout
    # of clusters built before the slots with two zones and a GPU Local Zone, or four or more zones (their next `up`
    # keeps their subnets with it).
    subnet_layout: Literal["fixed-slots", "by-zone-count"] = "fixed-slots"
    availability_zones: tuple[str, ...] = ()  # default: <region>a, <region>b, <region>c
    # default: the first zone. May be a Local Zone of the region (e.g. GB200 UltraServers in us-east-1-dfw-2a):
    # then it gets its own subnet, used by the GPU node group only.
    gpu_availability_zone: Optional[str] = None
    instance_type: Optional[str] = None  # default: the GPU catalog's instance for the target's GPU
    gpu_nodes: Optional[int] = Field(default=None, ge=1, le=MAX_NODES_PER_NODEGROUP)  # default: what the final DGD needs
    efa: Optional[bool] = None  # default: on when the instance supports it
    placement_group: Optional[bool] = None  # default: on for on-demand without a reservation; refused with one
    market_type: Literal["on-demand", "capacity-block"] = "on-demand"
    capacity_reservation_id: Optional[str] = None
    # The GPU pool's capacity (one pool; with gpuPools, per pool): stacks/cluster/karpenter.py.
    capacity: Literal["node-group", "karpenter"] = "node-group"
    max_nodes: Optional[int] = Field(default=None, ge=1, le=MAX_KARPENTER_NODES)
    consolidate_after: Optional[str] = None
    ami_alias: Optional[str] = None
    system_instance_type: str = "m7i.2xlarge"
    system_nodes: int = Field(default=2, ge=1, le=MAX_NODES_PER_NODEGROUP)
    cache_storage: Literal["efs", "fsx-lustre"] = "efs"
    # The FSx for Lustre cache's Availability Zone (FSx for Lustre lives in one subnet): default the GPU zone, or the
    # first zone when the GPUs are in a Local Zone. Set it to keep the cache where it is when the GPU zone moves.
    cache_availability_zone: Optional[str] = None
    efs_throughput_mode: Literal["elastic", "bursting", "provisioned"] = "elastic"
    efs_provisioned_throughput_mibps: Optional[int] = None  # EFS_PROVISIONED_MIBPS, checked in _check
    fsx_storage_capacity_gib: int = 2400
    fsx_throughput_per_tib: Literal[125, 250, 500, 1000] = 1000
    nvidia_stack: NvidiaStack = "device-plugin"
    admin_principal_arns: tuple[str, ...] = ()
    # Who may use the Kubernetes API, as EKS access entries (access_plan). Set: a new cluster grants nobody implicit admin
    # (bootstrapClusterCreatorAdminPermissions false); unset: EKS makes the identity that creates the cluster its admin.
    access_entries: tuple[AccessEntryConfig, ...] = ()
    # Envelope encryption of Kubernetes Secrets with a customer-managed KMS key the stack creates (rotation on), and
    # control-plane logs to CloudWatch Logs (/aws/eks/<cluster>/cluster, created before the cluster with this retention).
    secrets_encryption: bool = True
    control_plane_logs: tuple[ControlPlaneLog, ...] = DEFAULT_CONTROL_PLANE_LOGS
    control_plane_log_retention_days: int = 90
    # Who may reach the public Kubernetes API endpoint. EKS's own default is 0.0.0.0/0 (EKS API reference,
    # VpcConfigRequest.publicAccessCidrs); kept as the default here, and the plan warns about it.
    public_access_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    # The Kubernetes API endpoint: ``public`` (EKS's default: the public endpoint, limited to publicAccessCidrs, and the
    # private one inside the VPC) or ``private`` (the private endpoint only; EKS VpcConfigRequest endpointPublicAccess
    # false). Private: `pulumi up`, kubectl and CI reach the API only through the VPC (a runner inside it, a VPN, peering or
    # Direct Connect), from the networks in privateAccessCidrs, which the cluster security group admits on 443 (EKS user
    # guide, "Cluster API server endpoint": a private-only endpoint is reached from a connected network the cluster
    # security group allows on 443).
    endpoint_access: Literal["public", "private"] = "public"
    private_access_cidrs: tuple[str, ...] = ()
    # Egress: one NAT gateway (in the first zone) or one per zone, so no node's traffic crosses zones to reach it.
    nat_gateways: Literal["one", "per-zone"] = "one"
    # S3 gateway endpoint on the private route tables (no hourly or per-GB charge; ECR image layers and S3 reads skip
    # the NAT's per-GB charge). ECR interface endpoints (ecr.api + ecr.dkr, billed per endpoint per zone-hour).
    s3_gateway_endpoint: bool = True
    ecr_endpoints: bool = False
    # SSM Session Manager on the nodes (the AmazonSSMManagedInstanceCore policy on the node roles): off unless asked for.
    # That policy also reads every SSM parameter of the account; stacks/cluster/identity.py says what the node roles hold.
    ssm_access: bool = False
    # What EKS does when the control plane's version leaves standard support (EKS UpgradePolicy.supportType, always sent):
    # STANDARD, EKS upgrades it by itself; EXTENDED, it stays and bills the extended-support price. A cluster created
    # through the API without it gets EXTENDED (EKS user guide, "Enable EKS extended support").
    upgrade_policy: Literal["STANDARD", "EXTENDED"] = "STANDARD"
    # The AL2023 AMI release every node runs (node groups' releaseVersion, Karpenter's al2023@v<date>); default the pin of
    # stacks/registry/versions.yaml eks.amiReleaseVersions for kubernetesVersion. Staging and prod stacks set it (promote).
    ami_release_version: Optional[str] = None
    # The system node group's root disk (GiB); default sized from the images its pods pull (stacks/cluster/plan.py).
    # EKS cannot change a group's disk (UpdateNodegroupConfig has no diskSize): setting it on a running cluster
    # replaces the system node group.
    system_disk_gib: Optional[int] = Field(default=None, ge=20, le=16384)
    # One GPU node group per pool (cluster.gpuPools); empty: one node group for the GPU of the stack's entries.
    gpu_pools: tuple[GpuPoolConfig, ...] = ()

    @model_validator(mode="after")
    def _check(self):
        """Every section's checks, each section's first problem reported, all at once (one ValueError, a line per
        problem). A section whose checks read what an earlier one checked (the zones read the Region; the pools read
        the zones) runs only when that one passed, so one bad value is reported once, where it is set."""
        k = f"{NS}:cluster"
        problems: list[str] = []

        def passed(*checks: Callable[[str], None]) -> bool:
            for check in checks:
                try:
                    check(k)
                except ValueError as e:
                    problems.append(str(e))
                    return False
            return True

        region_ok = passed(self._check_region)
        passed(self._check_versions)
        passed(self._check_vpc)
        passed(self._check_principals)
        passed(self._check_logs)
        zones_ok = region_ok and passed(self._check_zones)
        passed(self._check_capacity)
        passed(self._check_storage)
        passed(self._check_endpoint)
        if zones_ok:
            passed(self._check_gpu_capacity)
        if problems:
            raise ValueError("\n  ".join(problems))
        return self

    def _check_region(self, k: str) -> None:
        """The Region is one this program can write ARNs for."""
        if self.region in OTHER_PARTITION_REGIONS:
            raise ValueError(
                f"{k}.region: {self.region!r} is in the {OTHER_PARTITION_REGIONS[self.region]} partition, and this program "
                f"writes its IAM and policy ARNs in the aws partition (arn:aws:...), which that partition refuses; "
                f"choose one of: {', '.join(AWS_REGIONS)}"
            )
        if self.region not in AWS_REGIONS:
            raise ValueError(f"{k}.region: {self.region!r} is not an AWS Region; choose one of: {', '.join(AWS_REGIONS)}")

    def _check_versions(self, k: str) -> None:
        """The Kubernetes version step, its support and the AMI release pinned for it."""
        # The step from the running version first: its message names every step to take.
        check_kubernetes_step(self.current_kubernetes_version, self.kubernetes_version, k)
        if self.kubernetes_version in refused_kubernetes_versions():
            raise ValueError(
                f"{k}.kubernetesVersion: {self.kubernetes_version!r} is refused: "
                f"{refused_kubernetes_versions()[self.kubernetes_version]}; choose one of: "
                f"{', '.join(kubernetes_versions())} (stacks/registry/versions.yaml eks.refusedKubernetesVersions)"
            )
        if self.kubernetes_version not in kubernetes_versions():
            raise ValueError(
                f"{k}.kubernetesVersion: {self.kubernetes_version!r} is not an EKS version in standard support; "
                f"choose one of: {', '.join(kubernetes_versions())} (stacks/registry/versions.yaml eks.kubernetesVersions)"
            )
        if self.ami_release_version is not None:
            m = _AMI_RELEASE_VERSION.fullmatch(str(self.ami_release_version))
            pins = ami_release_versions()
            if not m:
                raise ValueError(
                    f"{k}.amiReleaseVersion: {self.ami_release_version!r} is not an EKS AMI release version like "
                    f"{pins.get(self.kubernetes_version, '1.35.6-20260714')} (<Kubernetes version>.<patch>-<date>, as "
                    f"`aws eks describe-nodegroup` reports releaseVersion)"
                )
            if m[1] != self.kubernetes_version:
                fix = (
                    f"set it to {pins[self.kubernetes_version]!r} (the pin for {self.kubernetes_version})"
                    if self.kubernetes_version in pins
                    else "remove it"
                )
                raise ValueError(
                    f"{k}.amiReleaseVersion: {self.ami_release_version!r} is an AMI release for Kubernetes {m[1]}, "
                    f"and {k}.kubernetesVersion is {self.kubernetes_version!r}: EKS refuses a node group release "
                    f"version of another Kubernetes version; {fix}"
                )
        elif self.kubernetes_version not in ami_release_versions():
            raise ValueError(
                f"{k}.kubernetesVersion: {self.kubernetes_version!r} has no pinned AMI release "
                f"(stacks/registry/versions.yaml eks.amiReleaseVersions); set {k}.amiReleaseVersion"
            )

    def _check_vpc(self, k: str) -> None:
        """The VPC range: an IPv4 network AWS allows, in a private range."""
        try:
            net = ipaddress.ip_network(self.vpc_cidr)
        except ValueError:
            raise ValueError(f"{k}.vpcCidr: {self.vpc_cidr!r} is not a CIDR like 10.0.0.0/16") from None
        if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen > 20 or net.prefixlen < 16:
            raise ValueError(
                f"{k}.vpcCidr: {self.vpc_cidr!r} must be an IPv4 network from /16 to /20 (VPC sizes AWS allows, room for 2 subnets per zone)"
            )
        # A VPC range should be private: RFC 1918 (10/8, 172.16/12, 192.168/16) or RFC 6598 shared space (100.64/10), as the
        # Amazon VPC user guide recommends for a VPC's IPv4 block (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html,
        # private ranges of RFC 1918). A public range would shadow the real hosts of that range for every pod and node.
        if not any(net.subnet_of(ipaddress.IPv4Network(r)) for r in PRIVATE_VPC_RANGES):
            raise ValueError(
                f"{k}.vpcCidr: {self.vpc_cidr!r} is a public address range; use a private one inside "
                f"{', '.join(PRIVATE_VPC_RANGES)} (RFC 1918, RFC 6598), e.g. 10.0.0.0/16"
            )

    def _check_principals(self, k: str) -> None:
        """The cluster admins' IAM principal ARNs and the access entries."""
        for arn in self.admin_principal_arns:
            if not isinstance(arn, str) or not _PRINCIPAL_ARN.fullmatch(arn):
                raise ValueError(
                    f"{k}.adminPrincipalArns: {str(arn)[:120]!r} is not an IAM principal ARN like "
                    "arn:aws:iam::123456789012:role/admin or arn:aws:iam::123456789012:user/alice"
                )
        self._check_access(k)

    def _check_logs(self, k: str) -> None:
        """The control-plane log types and their retention."""
        if len(set(self.control_plane_logs)) != len(self.control_plane_logs):
            dup = sorted({t for t in self.control_plane_logs if self.control_plane_logs.count(t) > 1})
            raise ValueError(
                f"{k}.controlPlaneLogs: {dup} listed more than once; list each of {', '.join(CONTROL_PLANE_LOG_TYPES)} once"
            )
        if self.control_plane_log_retention_days not in LOG_RETENTION_DAYS:
            raise ValueError(
                f"{k}.controlPlaneLogRetentionDays: {self.control_plane_log_retention_days} is not a CloudWatch Logs retention; "
                f"choose one of: {', '.join(map(str, LOG_RETENTION_DAYS))}"
            )
        if not self.control_plane_logs and "control_plane_log_retention_days" in self.model_fields_set:
            raise ValueError(
                f"{k}.controlPlaneLogRetentionDays: only applies with {k}.controlPlaneLogs (set to [], no log group "
                "is created); remove it or list the log types"
            )

    def _check_zones(self, k: str) -> None:
        """The Availability Zones and the GPU zone, in the Region."""
        zones = self.availability_zones
        if zones:
            bad = [z for z in zones if not (m := _ZONE.fullmatch(z)) or m["region"] != self.region]
            if bad:
                raise ValueError(
                    f"{k}.availabilityZones: {bad} are not Availability Zones of region {self.region}; "
                    f"use zones like {self.region}a, {self.region}b (Local Zones go in gpuAvailabilityZone only)"
                )
            dup = sorted({z for z in zones if zones.count(z) > 1})
            if dup:
                raise ValueError(f"{k}.availabilityZones: {dup} listed more than once in {list(zones)}; list each zone once")
            if len(zones) < 2:
                raise ValueError(
                    f"{k}.availabilityZones: {list(zones)} names one zone; EKS needs subnets in at least two "
                    f"Availability Zones (EKS user guide, network-reqs), e.g. [{self.region}a, {self.region}b]"
                )
            if len(zones) > 6:
                raise ValueError(f"{k}.availabilityZones: {len(zones)} zones; use 2 to 6")
        gz = self.gpu_availability_zone
        if gz is not None and gz not in self.zones():
            lz = _LOCAL_ZONE.fullmatch(gz)
            if not lz or lz["region"] != self.region:
                raise ValueError(
                    f"{k}.gpuAvailabilityZone: {gz!r} is not one of availabilityZones {list(self.zones())} "
                    f"nor a Local Zone of {self.region} (like {self.region}-dfw-2a)"
                )

    def _check_capacity(self, k: str) -> None:
        """The GPU capacity: reservation id, market type, placement group."""
        if self.capacity_reservation_id is not None and not re.fullmatch(
            r"cr-[0-9a-f]{8}(?:[0-9a-f]{9})?", self.capacity_reservation_id
        ):
            raise ValueError(
                f"{k}.capacityReservationId: {self.capacity_reservation_id!r} is not a reservation id like cr-0123456789abcdef0"
            )
        if self.market_type == "capacity-block" and not self.capacity_reservation_id:
            raise ValueError(
                f"{k}.marketType: capacity-block needs {k}.capacityReservationId (the Capacity Block's reservation id, cr-...)"
            )
        if self.placement_group and self.capacity_reservation_id:
            raise ValueError(
                f"{k}.placementGroup: true conflicts with {k}.capacityReservationId {self.capacity_reservation_id}: "
                "a Capacity Block is already placed together and a targeted reservation launches where it was made; "
                "remove placementGroup"
            )

    def _check_storage(self, k: str) -> None:
        """The model cache's file system: EFS throughput, FSx size."""
        lo, hi = EFS_PROVISIONED_MIBPS
        if self.efs_throughput_mode == "provisioned" and self.efs_provisioned_throughput_mibps is None:
            raise ValueError(
                f"{k}.efsThroughputMode: provisioned needs {k}.efsProvisionedThroughputMibps ({lo}-{hi}), "
                "or choose elastic (the default) or bursting"
            )
        mibps = self.efs_provisioned_throughput_mibps
        if mibps is not None and not lo <= mibps <= hi:
            raise ValueError(
                f"{k}.efsProvisionedThroughputMibps: {mibps} is outside what the EFS API accepts, {lo}-{hi} MiB/s "
                "(CreateFileSystem ProvisionedThroughputInMibps; the upper limit is lower in some Regions and AWS Support "
                "raises it); for more read throughput choose efsThroughputMode: elastic or cacheStorage: fsx-lustre"
            )
        if self.efs_throughput_mode != "provisioned" and self.efs_provisioned_throughput_mibps is not None:
            raise ValueError(
                f"{k}.efsProvisionedThroughputMibps: only applies with efsThroughputMode: provisioned "
                f"(got efsThroughputMode {self.efs_throughput_mode!r})"
            )
        cap = self.fsx_storage_capacity_gib
        if cap not in (1200, 2400) and (cap <= 0 or cap % 2400):
            raise ValueError(
                f"{k}.fsxStorageCapacityGib: {cap} is not a PERSISTENT_2 SSD size; choose 1200, 2400 or a multiple of 2400 "
                "(FSx CreateFileSystem StorageCapacity)"
            )

    def _check_endpoint(self, k: str) -> None:
        """Who reaches the Kubernetes API endpoint."""
        if not self.public_access_cidrs:
            raise ValueError(
                f"{k}.publicAccessCidrs: empty; list the IPv4 networks that may reach the public Kubernetes API "
                "endpoint, e.g. [203.0.113.0/24] (default [0.0.0.0/0], EKS's own default)"
            )
        for key, cidrs in (("publicAccessCidrs", self.public_access_cidrs), ("privateAccessCidrs", self.private_access_cidrs)):
            for c in cidrs:
                try:
                    net = ipaddress.ip_network(c, strict=True)
                except ValueError:
                    net = None
                if net is None or net.version != 4:
                    raise ValueError(
                        f"{k}.{key}: {c!r} is not an IPv4 network like 203.0.113.0/24 (host bits zero); "
                        "the EKS endpoint and security group rules take IPv4 CIDR blocks (EKS API reference, "
                        "VpcConfigRequest.publicAccessCidrs)"
                    )
        if self.endpoint_access == "private":
            if "public_access_cidrs" in self.model_fields_set:
                raise ValueError(
                    f"{k}.publicAccessCidrs: only applies with endpointAccess: public (got endpointAccess: private, "
                    "which has no public endpoint); remove it, or list the networks that reach the private "
                    "endpoint in privateAccessCidrs"
                )
            if not self.private_access_cidrs:
                raise ValueError(
                    f"{k}.privateAccessCidrs: required with endpointAccess: private: list the networks `pulumi up`, "
                    "kubectl and CI reach the VPC from (a runner's subnet, a VPN or peered range), e.g. [10.0.0.0/16]; "
                    "the cluster security group admits them on 443, and nothing else reaches the API"
                )
        elif self.private_access_cidrs:
            raise ValueError(
                f"{k}.privateAccessCidrs: only applies with endpointAccess: private (got endpointAccess: public, "
                "where the VPC reaches the private endpoint already); remove it, or set endpointAccess: private"
            )

    def _check_gpu_capacity(self, k: str) -> None:
        """The GPU pools (or the one GPU group's Karpenter keys) and the cache zone they need."""
        if self.gpu_pools:
            self._check_pools(k)
        else:
            check_karpenter_keys(self, k)
        if not self.gpu_pools and self.gpu_zone_is_local():
            check_cache_in_local_zone(self.cache_storage, self.gpu_zone(), f"{k}.gpuAvailabilityZone")
        if self.cache_availability_zone is not None:
            if self.cache_storage != "fsx-lustre":
                raise ValueError(
                    f"{k}.cacheAvailabilityZone: only applies with cacheStorage: fsx-lustre (got cacheStorage: "
                    f"{self.cache_storage!r}, which has a mount target in every zone); remove it"
                )
            if self.cache_availability_zone not in self.zones():
                raise ValueError(
                    f"{k}.cacheAvailabilityZone: {self.cache_availability_zone!r} is not one of the cluster's "
                    f"Availability Zones; choose one of: {', '.join(self.zones())}"
                )

    def _check_access(self, k: str) -> None:
        """``accessEntries``: IAM role/user ARNs, one entry per principal (EKS CreateAccessEntry: a principal has one
        access entry per cluster, also across ``adminPrincipalArns``), namespaces only for admin/edit/view, and at least
        one cluster-admin for the whole cluster: with entries set a new cluster bootstraps nobody, and the ``up`` that
        creates it installs CRDs and Helm releases through the Kubernetes API, so someone must be cluster-admin."""
        seen: dict[str, str] = {a: f"{k}.adminPrincipalArns" for a in self.admin_principal_arns}
        for i, e in enumerate(self.access_entries):
            ek = f"{k}.accessEntries[{i}]"
            if not _PRINCIPAL_ARN.fullmatch(e.principal_arn):
                raise ValueError(
                    f"{ek}.principalArn: {e.principal_arn[:120]!r} is not an IAM role or user ARN like "
                    "arn:aws:iam::123456789012:role/dynamo-deploy or arn:aws:iam::123456789012:user/alice "
                    "(an assumed-role session ARN arn:aws:sts::... names the role instead)"
                )
            if e.principal_arn in seen:
                raise ValueError(
                    f"{ek}.principalArn: {e.principal_arn!r} already has an access entry ({seen[e.principal_arn]}); "
                    "EKS gives a principal one access entry per cluster: list it once, with its broadest policy"
                )
            seen[e.principal_arn] = ek
            if e.namespaces and e.policy == "cluster-admin":
                raise ValueError(
                    f"{ek}.namespaces: cluster-admin applies to the whole cluster; for {list(e.namespaces)} choose "
                    "policy admin, edit or view, or remove namespaces"
                )
            for ns in e.namespaces:
                if not isinstance(ns, str) or not _K8S_NAMESPACE.fullmatch(ns):
                    raise ValueError(
                        f"{ek}.namespaces: {str(ns)[:80]!r} is not a Kubernetes namespace name (lowercase "
                        "letters, digits and '-', at most 63)"
                    )
        if (
            self.access_entries
            and not self.admin_principal_arns
            and not any(e.policy == "cluster-admin" for e in self.access_entries)
        ):
            raise ValueError(
                f"{k}.accessEntries: no entry has policy cluster-admin, so nobody could administer a new cluster "
                "(with accessEntries set, EKS grants its creator nothing) and this `up` could not install the "
                "platform; add {principalArn: <the role that runs pulumi up>, policy: cluster-admin}"
            )

    def _check_pools(self, k: str) -> None:
        from stacks.config.keys import _camel
        from stacks.registry.gpus import INSTANCES
        from stacks.registry import GPUS

        both = [key for key in POOL_KEYS if key in self.model_fields_set]
        if both:
            raise ValueError(
                f"{k}.{_camel(both[0])}: set per pool in {k}.gpuPools when gpuPools is set "
                f"(each pool has gpu, nodes, instanceType, efa, placementGroup, marketType, capacityReservationId, availabilityZone, "
                f"capacity, maxNodes, consolidateAfter, amiAlias)"
            )
        eks_gpus = sorted(g.id for g in GPUS.values() if g.instance)
        seen: dict[str, int] = {}
        for i, p in enumerate(self.gpu_pools):
            pk = f"{k}.gpuPools[{i}]"
            instance = GPUS[p.gpu].instance if p.gpu in GPUS else None
            if not instance:
                from stacks.registry.gpus import MISSING_INSTANCE_DATA

                raise ValueError(
                    f"{pk}.gpu: {p.gpu!r} is not a GPU with an EC2 instance type; choose one of: {', '.join(eks_gpus)}"
                    + (f" ({p.gpu} has {MISSING_INSTANCE_DATA})" if p.gpu in GPUS else "")
                )
            if p.gpu in seen:
                raise ValueError(
                    f"{pk}.gpu: {p.gpu!r} already has pool gpuPools[{seen[p.gpu]}]; one pool per GPU (raise its nodes)"
                )
            seen[p.gpu] = i
            if p.instance_type is not None:
                try:
                    shape_for(p.gpu, p.instance_type)
                except ValueError as e:
                    raise ValueError(f"{pk}.instanceType: {e}") from None
            shape = INSTANCES[p.instance_type or instance]
            if p.capacity_reservation_id is not None and not re.fullmatch(
                r"cr-[0-9a-f]{8}(?:[0-9a-f]{9})?", p.capacity_reservation_id
            ):
                raise ValueError(
                    f"{pk}.capacityReservationId: {p.capacity_reservation_id!r} is not a reservation id like cr-0123456789abcdef0"
                )
            if p.market_type == "capacity-block" and not p.capacity_reservation_id:
                raise ValueError(
                    f"{pk}.marketType: capacity-block needs {pk}.capacityReservationId (the Capacity Block's reservation id, cr-...)"
                )
            if shape.ultraserver and p.market_type != "capacity-block":
                raise ValueError(
                    f"{pk}.marketType: {p.market_type!r}: {shape.instance_type} is sold only in UltraServer Capacity Blocks; "
                    f"set {pk}.marketType: capacity-block and {pk}.capacityReservationId"
                )
            if p.placement_group and p.capacity_reservation_id:
                raise ValueError(f"{pk}.placementGroup: true conflicts with {pk}.capacityReservationId; remove placementGroup")
            if p.availability_zone is not None and p.availability_zone not in self.zones():
                lz = _LOCAL_ZONE.fullmatch(p.availability_zone)
                if not lz or lz["region"] != self.region:
                    raise ValueError(
                        f"{pk}.availabilityZone: {p.availability_zone!r} is not one of availabilityZones {list(self.zones())} "
                        f"nor a Local Zone of {self.region} (like {self.region}-dfw-2a)"
                    )
                check_cache_in_local_zone(self.cache_storage, p.availability_zone, f"{pk}.availabilityZone")
            check_karpenter_keys(p, pk, shape=shape)
        # One Local Zone subnet per cluster: every pool in a Local Zone names the same one (GB200 UltraServers are
        # offered in one Local Zone of a region).
        local = sorted(
            {p.availability_zone for p in self.gpu_pools if p.availability_zone and p.availability_zone not in self.zones()}
        )
        if len(local) > 1:
            raise ValueError(
                f"{k}.gpuPools: pools in several Local Zones {local}; the cluster has one Local Zone subnet, "
                f"so put every Local Zone pool in one of them"
            )

    def pool_for(self, gpu: str, gpu_key: str = "") -> tuple["EksConfig", str]:
        """The cluster settings of ``gpu``'s node group and the key its errors name: with ``gpuPools``, the
        pool's (a GPU without a pool is a ConfigError naming ``gpu_key``, where the GPU was chosen); else the cluster's."""
        from stacks.registry.gpus import INSTANCES, MISSING_INSTANCE_DATA

        k = f"{NS}:cluster"
        if not any(s.gpu == gpu for s in INSTANCES.values()):  # a GPU registered for existing clusters only
            raise ConfigError(f"{gpu_key or NS + ':gpu'}: {gpu!r} cannot run on an EKS cluster: it has {MISSING_INSTANCE_DATA}")
        if not self.gpu_pools:
            return self, k
        for i, p in enumerate(self.gpu_pools):
            if p.gpu == gpu:
                return self.model_copy(
                    update={
                        "instance_type": p.instance_type,
                        "gpu_nodes": p.nodes,
                        "efa": p.efa,
                        "placement_group": p.placement_group,
                        "market_type": p.market_type,
                        "capacity_reservation_id": p.capacity_reservation_id,
                        "gpu_availability_zone": p.availability_zone,
                        "capacity": p.capacity,
                        "max_nodes": p.max_nodes,
                        "consolidate_after": p.consolidate_after,
                        "ami_alias": p.ami_alias,
                        "gpu_pools": (),
                    }
                ), f"{k}.gpuPools[{i}]"
        raise ConfigError(
            f"{gpu_key or k + '.gpuPools'}: {gpu!r} has no pool in {k}.gpuPools "
            f"(pools: {', '.join(p.gpu for p in self.gpu_pools)}); add {{gpu: {gpu}}} to {k}.gpuPools"
        )

    def ami_release(self) -> str:
        """The AMI release version the nodes run: amiReleaseVersion, else the registry's pin for kubernetesVersion."""
        return self.ami_release_version or ami_release_versions()[self.kubernetes_version]

    def zones(self) -> tuple[str, ...]:
        return self.availability_zones or tuple(f"{self.region}{s}" for s in "abc")

    def gpu_zone(self) -> str:
        return self.gpu_availability_zone or self.zones()[0]

    def gpu_zone_is_local(self) -> bool:
        return self.gpu_zone() not in self.zones()


def check_karpenter_keys(c: Any, key: str, shape: Optional[InstanceShape] = None) -> None:
    """The Karpenter keys of one GPU pool (``c``: a GpuPoolConfig, or the EksConfig of a single pool): they apply only
    with ``capacity: karpenter``; a Karpenter pool sizes itself (no ``nodes``/``gpuNodes``), launches no placement group
    and no UltraServer (GB200 pools stay managed node groups: their Capacity Block, DRA driver and ComputeDomain
    are built for them)."""
    from stacks.config.keys import _camel

    nodes_key = "nodes" if key.endswith("]") else "gpuNodes"
    nodes = c.nodes if hasattr(c, "nodes") else c.gpu_nodes
    if c.capacity != "karpenter":
        for f in KARPENTER_KEYS:
            if getattr(c, f) is not None:
                raise ValueError(
                    f"{key}.{_camel(f)}: only applies with {key}.capacity: karpenter (got capacity {c.capacity!r}); "
                    f"remove it or set {key}.capacity: karpenter"
                )
        return
    if nodes is not None:
        raise ValueError(
            f"{key}.{nodes_key}: {nodes}: a Karpenter pool launches the nodes its pods need; set {key}.maxNodes "
            f"(the NodePool's node limit) instead, or {key}.capacity: node-group for a fixed node group"
        )
    if c.placement_group:
        raise ValueError(
            f"{key}.placementGroup: true is not built for {key}.capacity: karpenter (the EC2NodeClass names no "
            f"placement group); remove placementGroup or use capacity: node-group"
        )
    if c.consolidate_after is not None and not _CONSOLIDATE_AFTER.fullmatch(str(c.consolidate_after)):
        raise ValueError(
            f"{key}.consolidateAfter: {c.consolidate_after!r} is not a duration like 10m, 1h30m or Never "
            "(NodePool disruption.consolidateAfter)"
        )
    if c.ami_alias is not None and not _AMI_ALIAS.fullmatch(str(c.ami_alias)):
        raise ValueError(
            f"{key}.amiAlias: {c.ami_alias!r} is not an AL2023 alias; choose al2023@latest or a pinned "
            "al2023@vYYYYMMDD (Karpenter picks the NVIDIA variant for GPU instances)"
        )
    if shape is not None and shape.ultraserver:
        raise ValueError(
            f"{key}.capacity: karpenter: {shape.instance_type} is sold only in UltraServer Capacity Blocks, which "
            f"this project builds as managed node groups (with the DRA driver and ComputeDomain); use capacity: node-group"
        )


def check_cache_in_local_zone(cache_storage: str, zone: str, key: str) -> None:
    """EFS mount targets exist only in the region's Availability Zones (one per AZ: EFS API ``CreateMountTarget``), and
    the file system's DNS name resolves only where a mount target shares the client's zone (EFS user guide, "Mounting
    on Amazon EC2 with a DNS name": "DNS resolution for file system DNS names requires that the Amazon EFS file system
    has a mount target in the same Availability Zone as the client instance"). The IP fallback of efs-utils needs
    ``elasticfilesystem:DescribeMountTargets``, which no node role here has, and naming one AZ's mount target
    (EFS user guide, "Mounting One Zone file systems": ``-o az=``) is not wired through the EFS CSI driver here. So a
    GPU group in a Local Zone cannot mount the EFS cache: refuse it, naming FSx for Lustre, which the nodes mount by the
    file system's DNS name and mount name (no per-zone mount target; the static PersistentVolume of this stack)."""
    if cache_storage == "efs":
        raise ValueError(
            f"{key}: {zone!r} is a Local Zone, where the EFS model cache cannot be mounted (EFS mount targets and "
            f"their DNS names exist only in Availability Zones); set {NS}:cluster.cacheStorage: fsx-lustre "
            f"(FSx for Lustre in the first Availability Zone, mounted by its DNS name over the VPC)"
        )


def apply_aws_region(raw: dict, aws_region: Optional[str]) -> dict:
    """The ``dynamo:`` mapping with ``cluster.region`` taken from ``aws:region`` when the stack sets only that one
    (before validation, so zones are checked against it); a contradiction is a ConfigError naming both keys."""
    cluster = (raw or {}).get("cluster")
    if not aws_region or not isinstance(cluster, dict) or cluster.get("mode") != "eks":
        return raw
    if "region" in cluster:
        if cluster["region"] != aws_region:
            raise ConfigError(
                f"{NS}:cluster.region: {cluster['region']!r} contradicts aws:region {aws_region!r}; "
                "set one of them (the cluster is created in dynamo:cluster.region)"
            )
        return raw
    if aws_region not in AWS_REGIONS:
        raise ConfigError(f"aws:region: {aws_region!r} is not an AWS Region; choose one of: {', '.join(AWS_REGIONS)}")
    return {**raw, "cluster": {**cluster, "region": aws_region}}


def missing_region_message() -> str:
    """The refusal of an EKS stack that sets neither ``dynamo:cluster.region`` nor ``aws:region``."""
    return (
        f"{NS}:cluster.region: not set, and aws:region is not set either; an EKS stack needs its AWS Region "
        f"(no default is assumed). Set one of them, e.g. `pulumi config set aws:region us-east-1` or "
        f"dynamo:cluster.region: us-east-1 in the stack file; choose one of: {', '.join(AWS_REGIONS)}"
    )


_Eks = TypeVar("_Eks", bound=EksConfig)  # EksConfig or ClusterConfig: resolve_region returns the class it was given


def resolve_region(cfg: _Eks, cluster_raw: dict, aws_region: Optional[str]) -> _Eks:
    """``aws:region`` and ``dynamo:cluster.region`` must agree; the program's AWS provider uses the result.
    Without ``dynamo:cluster.region``, ``aws:region`` sets it; with neither the stack is refused (no silent
    default region: an EKS cluster, its VPC and its prices are all per Region)."""
    if not aws_region:
        if "region" not in (cluster_raw or {}):
            raise ConfigError(missing_region_message())
        return cfg
    if "region" in (cluster_raw or {}):
        if cluster_raw["region"] != aws_region:
            raise ConfigError(
                f"{NS}:cluster.region: {cluster_raw['region']!r} contradicts aws:region {aws_region!r}; "
                "set one of them (the cluster is created in dynamo:cluster.region)"
            )
        return cfg
    try:
        return type(cfg).model_validate({**cfg.model_dump(by_alias=True, exclude_unset=True), "region": aws_region})
    except ValueError as e:
        raise ConfigError(f"aws:region: {aws_region!r}: {e}") from None
