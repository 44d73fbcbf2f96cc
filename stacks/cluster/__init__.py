"""Cluster plans: EKS, node pools, Karpenter, the platform and device-plugin charts, scheduling checks, AWS rules. May
import the registry, the catalog and the spec.

Pure plan of the cluster layer: EKS with a system and a GPU node group, EFA, storage.

``build_cluster_plan`` turns the stack's ``dynamo:cluster`` settings and the chosen
target into plain data (kwargs for pulumi-aws constructors and Kubernetes objects);
``components/cluster.py`` only wires that data into resources. ``node_shape`` says
what a node of the GPU group offers the scheduler, so tests can check that every
target's workers fit the group they will land on.
"""
from __future__ import annotations

import base64
import ipaddress
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from stacks import catalog
from stacks.catalog.model import Target
from stacks.spec.config import NS, ConfigError, _Model
from stacks.registry.gpus import InstanceShape, shape_for

GPU_TAINT_KEY = "nvidia.com/gpu"
POOL_LABEL = "dynamo.nvidia.com/pool"
EFA_LABEL = "vpc.amazonaws.com/efa.present"
AMI_TYPE = {"x86_64": "AL2023_x86_64_NVIDIA", "arm64": "AL2023_ARM_64_NVIDIA"}


# AWS Regions (commercial and GovCloud) a stack may name; EC2 "Regions and Zones" (docs.aws.amazon.com/global-infrastructure/latest/regions).
AWS_REGIONS = (
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "ca-west-1", "mx-central-1", "sa-east-1",
    "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1", "eu-central-2", "eu-north-1", "eu-south-1", "eu-south-2",
    "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3",
    "ap-southeast-4", "ap-southeast-5", "ap-southeast-7", "ap-south-1", "ap-south-2", "ap-east-1", "ap-east-2",
    "me-south-1", "me-central-1", "il-central-1", "af-south-1", "us-gov-west-1", "us-gov-east-1",
)
# Largest managed node group: EKS service quota "Nodes per managed node group" (450; EKS user guide, service-quotas).
MAX_NODES_PER_NODEGROUP = 450
# EFS Elastic throughput: about 1.5 GiB/s read per client (EFS user guide, "Amazon EFS performance"); the FSx default
# must not be slower for a single vLLM loader reading hundreds of GB.
EFS_CLIENT_MBPS = 1.5 * 1024 * 1.048576  # 1.5 GiB/s in MB/s
FSX_THROUGHPUT_PER_TIB = (125, 250, 500, 1000)  # PERSISTENT_2 SSD, MB/s/TiB (FSx CreateFileSystem PerUnitStorageThroughput)
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
        raise ValueError(f"{k}.kubernetesVersion: {wanted!r} is older than the cluster's {current!r} "
                         f"({k}.currentKubernetesVersion); EKS cannot downgrade a cluster: set {k}.kubernetesVersion: \"{current}\" "
                         "or a newer one")
    if to - now > 1:
        steps = [f"1.{m}" for m in range(now + 1, to + 1)]
        raise ValueError(f"{k}.kubernetesVersion: {wanted!r} is {to - now} minor versions ahead of the cluster's {current!r} "
                         f"({k}.currentKubernetesVersion); EKS upgrades one minor version at a time: "
                         + "; then ".join(f"set {k}.kubernetesVersion: \"{v}\" and {k}.currentKubernetesVersion: \"{p}\", run `pulumi up`"
                                          for p, v in zip([current] + steps, steps))
                         + " (docs/deploy-aws.md, \"Upgrading Kubernetes\")")


def addon_versions(kubernetes_version: str) -> dict[str, str]:
    """The pinned EKS add-on versions for a control-plane version (stacks/registry/versions.yaml eks.addons); an add-on
    without a pin there gets EKS's default version for the cluster's Kubernetes version (CreateAddon without
    addonVersion)."""
    return dict((_eks_pin("addons") or {}).get(str(kubernetes_version)) or {})


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


POOL_KEYS = ("instance_type", "gpu_nodes", "efa", "placement_group", "market_type", "capacity_reservation_id", "gpu_availability_zone",
             "capacity", "max_nodes", "consolidate_after", "ami_alias")
# Karpenter pools (stacks/cluster/karpenter.py): the NodePool's node limit; consolidateAfter as the NodePool CRD accepts it
# (sigs.k8s.io/karpenter@v1.13.0 karpenter.sh_nodepools.yaml: ^(([0-9]+(s|m|h))+|Never)$); an AL2023 AMI alias
# (EC2NodeClass amiSelectorTerms alias: family@version, version "latest" or vYYYYMMDD; karpenter.sh docs, NodeClasses).
KARPENTER_KEYS = ("max_nodes", "consolidate_after", "ami_alias")
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
# a 12-digit account; an EKS access entry's principal is an IAM user or role (EKS access entries, principalArn).
_PRINCIPAL_ARN = re.compile(r"arn:aws(?:-cn|-us-gov)?:iam::[0-9]{12}:(?:role|user)/[\w+=,.@/-]{1,512}", re.ASCII)


# EKS access policies a stack may associate (EKS user guide "Review access policy permissions", access-policy-permissions:
# arn:aws:eks::aws:cluster-access-policy/<name>; like the Kubernetes cluster-admin, admin, edit and view roles).
ACCESS_POLICIES = {
    "cluster-admin": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
    "admin": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy",
    "edit": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy",
    "view": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
}
# EKS control-plane log types (EKS API LogSetup types; EKS user guide "Send control plane logs to CloudWatch Logs").
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
DEFAULT_CONTROL_PLANE_LOGS = ("api", "audit", "authenticator")
# CloudWatch Logs PutRetentionPolicy retentionInDays: "Possible values are: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365,
# 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, and 3653" (CloudWatch Logs API reference, PutRetentionPolicy).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
# What the cluster role may do with the Secrets key (terraform-aws-modules/terraform-aws-eks main.tf @0005984c,
# aws_iam_policy.cluster_encryption).
SECRETS_KEY_ACTIONS = ("kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey")
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
    efs_throughput_mode: Literal["elastic", "bursting", "provisioned"] = "elastic"
    efs_provisioned_throughput_mibps: Optional[int] = None  # EFS_PROVISIONED_MIBPS, checked in _check
    fsx_storage_capacity_gib: int = 2400
    fsx_throughput_per_tib: Literal[125, 250, 500, 1000] = 1000
    nvidia_stack: Literal["device-plugin", "gpu-operator"] = "device-plugin"
    admin_principal_arns: tuple[str, ...] = ()
    # Who may use the Kubernetes API, as EKS access entries (access_plan). Set: a new cluster grants nobody implicit admin
    # (bootstrapClusterCreatorAdminPermissions false); unset: EKS makes the identity that creates the cluster its admin.
    access_entries: tuple[AccessEntryConfig, ...] = ()
    # Envelope encryption of Kubernetes Secrets with a customer-managed KMS key the stack creates (rotation on), and
    # control-plane logs to CloudWatch Logs (/aws/eks/<cluster>/cluster, created before the cluster with this retention).
    secrets_encryption: bool = True
    control_plane_logs: tuple[Literal["api", "audit", "authenticator", "controllerManager", "scheduler"], ...] = DEFAULT_CONTROL_PLANE_LOGS
    control_plane_log_retention_days: int = 90
    # Who may reach the public Kubernetes API endpoint. EKS's own default is 0.0.0.0/0 (EKS API reference,
    # VpcConfigRequest.publicAccessCidrs); kept as the default here, and the plan warns about it.
    public_access_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    # Egress: one NAT gateway (in the first zone) or one per zone, so no node's traffic crosses zones to reach it.
    nat_gateways: Literal["one", "per-zone"] = "one"
    # S3 gateway endpoint on the private route tables (no hourly or per-GB charge; ECR image layers and S3 reads skip
    # the NAT's per-GB charge). ECR interface endpoints (ecr.api + ecr.dkr, billed per endpoint per zone-hour).
    s3_gateway_endpoint: bool = True
    ecr_endpoints: bool = False
    # One GPU node group per pool (cluster.gpuPools); empty: one node group for the GPU of the stack's entries.
    gpu_pools: tuple[GpuPoolConfig, ...] = ()

    @model_validator(mode="after")
    def _check(self):
        k = f"{NS}:cluster"
        if self.region not in AWS_REGIONS:
            raise ValueError(f"{k}.region: {self.region!r} is not an AWS Region; choose one of: {', '.join(AWS_REGIONS)}")
        if self.kubernetes_version not in kubernetes_versions():
            raise ValueError(f"{k}.kubernetesVersion: {self.kubernetes_version!r} is not an EKS version in standard support; "
                             f"choose one of: {', '.join(kubernetes_versions())} (stacks/registry/versions.yaml eks.kubernetesVersions)")
        try:
            net = ipaddress.ip_network(self.vpc_cidr)
        except ValueError:
            raise ValueError(f"{k}.vpcCidr: {self.vpc_cidr!r} is not a CIDR like 10.0.0.0/16") from None
        if net.version != 4 or net.prefixlen > 20 or net.prefixlen < 16:
            raise ValueError(f"{k}.vpcCidr: {self.vpc_cidr!r} must be an IPv4 network from /16 to /20 (VPC sizes AWS allows, room for 2 subnets per zone)")
        # A VPC range should be private: RFC 1918 (10/8, 172.16/12, 192.168/16) or RFC 6598 shared space (100.64/10), as the
        # Amazon VPC user guide recommends for a VPC's IPv4 block (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html,
        # private ranges of RFC 1918). A public range would shadow the real hosts of that range for every pod and node.
        if not any(net.subnet_of(ipaddress.ip_network(r)) for r in PRIVATE_VPC_RANGES):
            raise ValueError(f"{k}.vpcCidr: {self.vpc_cidr!r} is a public address range; use a private one inside "
                             f"{', '.join(PRIVATE_VPC_RANGES)} (RFC 1918, RFC 6598), e.g. 10.0.0.0/16")
        for arn in self.admin_principal_arns:
            if not isinstance(arn, str) or not _PRINCIPAL_ARN.fullmatch(arn):
                raise ValueError(f"{k}.adminPrincipalArns: {str(arn)[:120]!r} is not an IAM principal ARN like "
                                 "arn:aws:iam::123456789012:role/admin or arn:aws:iam::123456789012:user/alice")
        self._check_access(k)
        if len(set(self.control_plane_logs)) != len(self.control_plane_logs):
            dup = sorted({t for t in self.control_plane_logs if self.control_plane_logs.count(t) > 1})
            raise ValueError(f"{k}.controlPlaneLogs: {dup} listed more than once; list each of {', '.join(CONTROL_PLANE_LOG_TYPES)} once")
        if self.control_plane_log_retention_days not in LOG_RETENTION_DAYS:
            raise ValueError(f"{k}.controlPlaneLogRetentionDays: {self.control_plane_log_retention_days} is not a CloudWatch Logs retention; "
                             f"choose one of: {', '.join(map(str, LOG_RETENTION_DAYS))}")
        if not self.control_plane_logs and "control_plane_log_retention_days" in self.model_fields_set:
            raise ValueError(f"{k}.controlPlaneLogRetentionDays: only applies with {k}.controlPlaneLogs (set to [], no log group "
                             "is created); remove it or list the log types")
        zones = self.availability_zones
        if zones:
            bad = [z for z in zones if not (m := _ZONE.fullmatch(z)) or m["region"] != self.region]
            if bad:
                raise ValueError(f"{k}.availabilityZones: {bad} are not Availability Zones of region {self.region}; "
                                 f"use zones like {self.region}a, {self.region}b (Local Zones go in gpuAvailabilityZone only)")
            dup = sorted({z for z in zones if zones.count(z) > 1})
            if dup:
                raise ValueError(f"{k}.availabilityZones: {dup} listed more than once in {list(zones)}; list each zone once")
            if len(zones) < 2:
                raise ValueError(f"{k}.availabilityZones: {list(zones)} names one zone; EKS needs subnets in at least two "
                                 f"Availability Zones (EKS user guide, network-reqs), e.g. [{self.region}a, {self.region}b]")
            if len(zones) > 6:
                raise ValueError(f"{k}.availabilityZones: {len(zones)} zones; use 2 to 6")
        gz = self.gpu_availability_zone
        if gz is not None and gz not in self.zones():
            lz = _LOCAL_ZONE.fullmatch(gz)
            if not lz or lz["region"] != self.region:
                raise ValueError(f"{k}.gpuAvailabilityZone: {gz!r} is not one of availabilityZones {list(self.zones())} "
                                 f"nor a Local Zone of {self.region} (like {self.region}-dfw-2a)")
        if self.capacity_reservation_id is not None and not re.fullmatch(r"cr-[0-9a-f]{8}(?:[0-9a-f]{9})?", self.capacity_reservation_id):
            raise ValueError(f"{k}.capacityReservationId: {self.capacity_reservation_id!r} is not a reservation id like cr-0123456789abcdef0")
        if self.market_type == "capacity-block" and not self.capacity_reservation_id:
            raise ValueError(f"{k}.marketType: capacity-block needs {k}.capacityReservationId (the Capacity Block's reservation id, cr-...)")
        if self.placement_group and self.capacity_reservation_id:
            raise ValueError(f"{k}.placementGroup: true conflicts with {k}.capacityReservationId {self.capacity_reservation_id}: "
                             "a Capacity Block is already placed together and a targeted reservation launches where it was made; "
                             "remove placementGroup")
        check_kubernetes_step(self.current_kubernetes_version, self.kubernetes_version, k)
        lo, hi = EFS_PROVISIONED_MIBPS
        if self.efs_throughput_mode == "provisioned" and self.efs_provisioned_throughput_mibps is None:
            raise ValueError(f"{k}.efsThroughputMode: provisioned needs {k}.efsProvisionedThroughputMibps ({lo}-{hi}), "
                             "or choose elastic (the default) or bursting")
        mibps = self.efs_provisioned_throughput_mibps
        if mibps is not None and not lo <= mibps <= hi:
            raise ValueError(f"{k}.efsProvisionedThroughputMibps: {mibps} is outside what the EFS API accepts, {lo}-{hi} MiB/s "
                             "(CreateFileSystem ProvisionedThroughputInMibps; the upper limit is lower in some Regions and AWS Support "
                             "raises it); for more read throughput choose efsThroughputMode: elastic or cacheStorage: fsx-lustre")
        if self.efs_throughput_mode != "provisioned" and self.efs_provisioned_throughput_mibps is not None:
            raise ValueError(f"{k}.efsProvisionedThroughputMibps: only applies with efsThroughputMode: provisioned "
                             f"(got efsThroughputMode {self.efs_throughput_mode!r})")
        cap = self.fsx_storage_capacity_gib
        if cap not in (1200, 2400) and (cap <= 0 or cap % 2400):
            raise ValueError(f"{k}.fsxStorageCapacityGib: {cap} is not a PERSISTENT_2 SSD size; choose 1200, 2400 or a multiple of 2400 "
                             "(FSx CreateFileSystem StorageCapacity)")
        if not self.public_access_cidrs:
            raise ValueError(f"{k}.publicAccessCidrs: empty; list the IPv4 networks that may reach the public Kubernetes API "
                             "endpoint, e.g. [203.0.113.0/24] (default [0.0.0.0/0], EKS's own default)")
        for c in self.public_access_cidrs:
            try:
                net = ipaddress.ip_network(c, strict=True)
            except ValueError:
                net = None
            if net is None or net.version != 4:
                raise ValueError(f"{k}.publicAccessCidrs: {c!r} is not an IPv4 network like 203.0.113.0/24 (host bits zero); "
                                 "the EKS public endpoint takes IPv4 CIDR blocks (EKS API reference, VpcConfigRequest.publicAccessCidrs)")
        if self.gpu_pools:
            self._check_pools(k)
        else:
            check_karpenter_keys(self, k)
        if not self.gpu_pools and self.gpu_zone_is_local():
            check_cache_in_local_zone(self.cache_storage, self.gpu_zone(), f"{k}.gpuAvailabilityZone")
        return self

    def _check_access(self, k: str) -> None:
        """``accessEntries``: IAM role/user ARNs, one entry per principal (EKS CreateAccessEntry: a principal has one
        access entry per cluster, also across ``adminPrincipalArns``), namespaces only for admin/edit/view, and at least
        one cluster-admin for the whole cluster: with entries set a new cluster bootstraps nobody, and the ``up`` that
        creates it installs CRDs and Helm releases through the Kubernetes API, so someone must be cluster-admin."""
        seen: dict[str, str] = {a: f"{k}.adminPrincipalArns" for a in self.admin_principal_arns}
        for i, e in enumerate(self.access_entries):
            ek = f"{k}.accessEntries[{i}]"
            if not _PRINCIPAL_ARN.fullmatch(e.principal_arn):
                raise ValueError(f"{ek}.principalArn: {e.principal_arn[:120]!r} is not an IAM role or user ARN like "
                                 "arn:aws:iam::123456789012:role/dynamo-deploy or arn:aws:iam::123456789012:user/alice "
                                 "(an assumed-role session ARN arn:aws:sts::... names the role instead)")
            if e.principal_arn in seen:
                raise ValueError(f"{ek}.principalArn: {e.principal_arn!r} already has an access entry ({seen[e.principal_arn]}); "
                                 "EKS gives a principal one access entry per cluster: list it once, with its broadest policy")
            seen[e.principal_arn] = ek
            if e.namespaces and e.policy == "cluster-admin":
                raise ValueError(f"{ek}.namespaces: cluster-admin applies to the whole cluster; for {list(e.namespaces)} choose "
                                 "policy admin, edit or view, or remove namespaces")
            for ns in e.namespaces:
                if not isinstance(ns, str) or not _K8S_NAMESPACE.fullmatch(ns):
                    raise ValueError(f"{ek}.namespaces: {str(ns)[:80]!r} is not a Kubernetes namespace name (lowercase "
                                     "letters, digits and '-', at most 63)")
        if self.access_entries and not self.admin_principal_arns and not any(
                e.policy == "cluster-admin" for e in self.access_entries):
            raise ValueError(f"{k}.accessEntries: no entry has policy cluster-admin, so nobody could administer a new cluster "
                             "(with accessEntries set, EKS grants its creator nothing) and this `up` could not install the "
                             "platform; add {principalArn: <the role that runs pulumi up>, policy: cluster-admin}")

    def _check_pools(self, k: str) -> None:
        from stacks.spec.config import _camel
        from stacks.registry.gpus import INSTANCES
        from stacks.registry import GPUS

        both = [key for key in POOL_KEYS if key in self.model_fields_set]
        if both:
            raise ValueError(f"{k}.{_camel(both[0])}: set per pool in {k}.gpuPools when gpuPools is set "
                             f"(each pool has gpu, nodes, instanceType, efa, placementGroup, marketType, capacityReservationId, availabilityZone, "
                             f"capacity, maxNodes, consolidateAfter, amiAlias)")
        eks_gpus = sorted(g.id for g in GPUS.values() if g.instance)
        seen: dict[str, int] = {}
        for i, p in enumerate(self.gpu_pools):
            pk = f"{k}.gpuPools[{i}]"
            if p.gpu not in GPUS or not GPUS[p.gpu].instance:
                from stacks.registry.gpus import MISSING_INSTANCE_DATA

                raise ValueError(f"{pk}.gpu: {p.gpu!r} is not a GPU with an EC2 instance type; choose one of: {', '.join(eks_gpus)}"
                                 + (f" ({p.gpu} has {MISSING_INSTANCE_DATA})" if p.gpu in GPUS else ""))
            if p.gpu in seen:
                raise ValueError(f"{pk}.gpu: {p.gpu!r} already has pool gpuPools[{seen[p.gpu]}]; one pool per GPU (raise its nodes)")
            seen[p.gpu] = i
            if p.instance_type is not None:
                try:
                    shape_for(p.gpu, p.instance_type)
                except ValueError as e:
                    raise ValueError(f"{pk}.instanceType: {e}") from None
            shape = INSTANCES[p.instance_type or GPUS[p.gpu].instance]
            if p.capacity_reservation_id is not None and not re.fullmatch(r"cr-[0-9a-f]{8}(?:[0-9a-f]{9})?", p.capacity_reservation_id):
                raise ValueError(f"{pk}.capacityReservationId: {p.capacity_reservation_id!r} is not a reservation id like cr-0123456789abcdef0")
            if p.market_type == "capacity-block" and not p.capacity_reservation_id:
                raise ValueError(f"{pk}.marketType: capacity-block needs {pk}.capacityReservationId (the Capacity Block's reservation id, cr-...)")
            if shape.ultraserver and p.market_type != "capacity-block":
                raise ValueError(f"{pk}.marketType: {p.market_type!r}: {shape.instance_type} is sold only in UltraServer Capacity Blocks; "
                                 f"set {pk}.marketType: capacity-block and {pk}.capacityReservationId")
            if p.placement_group and p.capacity_reservation_id:
                raise ValueError(f"{pk}.placementGroup: true conflicts with {pk}.capacityReservationId; remove placementGroup")
            if p.availability_zone is not None and p.availability_zone not in self.zones():
                lz = _LOCAL_ZONE.fullmatch(p.availability_zone)
                if not lz or lz["region"] != self.region:
                    raise ValueError(f"{pk}.availabilityZone: {p.availability_zone!r} is not one of availabilityZones {list(self.zones())} "
                                     f"nor a Local Zone of {self.region} (like {self.region}-dfw-2a)")
                check_cache_in_local_zone(self.cache_storage, p.availability_zone, f"{pk}.availabilityZone")
            check_karpenter_keys(p, pk, shape=shape)
        # One Local Zone subnet per cluster: every pool in a Local Zone names the same one (GB200 UltraServers are
        # offered in one Local Zone of a region).
        local = sorted({p.availability_zone for p in self.gpu_pools if p.availability_zone and p.availability_zone not in self.zones()})
        if len(local) > 1:
            raise ValueError(f"{k}.gpuPools: pools in several Local Zones {local}; the cluster has one Local Zone subnet, "
                             f"so put every Local Zone pool in one of them")

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
                return self.model_copy(update={
                    "instance_type": p.instance_type, "gpu_nodes": p.nodes, "efa": p.efa, "placement_group": p.placement_group,
                    "market_type": p.market_type, "capacity_reservation_id": p.capacity_reservation_id,
                    "gpu_availability_zone": p.availability_zone, "capacity": p.capacity, "max_nodes": p.max_nodes,
                    "consolidate_after": p.consolidate_after, "ami_alias": p.ami_alias, "gpu_pools": ()}), f"{k}.gpuPools[{i}]"
        raise ConfigError(f"{gpu_key or k + '.gpuPools'}: {gpu!r} has no pool in {k}.gpuPools "
                          f"(pools: {', '.join(p.gpu for p in self.gpu_pools)}); add {{gpu: {gpu}}} to {k}.gpuPools")

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
    from stacks.spec.config import _camel

    nodes_key = "nodes" if key.endswith("]") else "gpuNodes"
    nodes = c.nodes if hasattr(c, "nodes") else c.gpu_nodes
    if c.capacity != "karpenter":
        for f in KARPENTER_KEYS:
            if getattr(c, f) is not None:
                raise ValueError(f"{key}.{_camel(f)}: only applies with {key}.capacity: karpenter (got capacity {c.capacity!r}); "
                                 f"remove it or set {key}.capacity: karpenter")
        return
    if nodes is not None:
        raise ValueError(f"{key}.{nodes_key}: {nodes}: a Karpenter pool launches the nodes its pods need; set {key}.maxNodes "
                         f"(the NodePool's node limit) instead, or {key}.capacity: node-group for a fixed node group")
    if c.placement_group:
        raise ValueError(f"{key}.placementGroup: true is not built for {key}.capacity: karpenter (the EC2NodeClass names no "
                         f"placement group); remove placementGroup or use capacity: node-group")
    if c.consolidate_after is not None and not _CONSOLIDATE_AFTER.fullmatch(str(c.consolidate_after)):
        raise ValueError(f"{key}.consolidateAfter: {c.consolidate_after!r} is not a duration like 10m, 1h30m or Never "
                         "(NodePool disruption.consolidateAfter)")
    if c.ami_alias is not None and not _AMI_ALIAS.fullmatch(str(c.ami_alias)):
        raise ValueError(f"{key}.amiAlias: {c.ami_alias!r} is not an AL2023 alias; choose al2023@latest or a pinned "
                         "al2023@vYYYYMMDD (Karpenter picks the NVIDIA variant for GPU instances)")
    if shape is not None and shape.ultraserver:
        raise ValueError(f"{key}.capacity: karpenter: {shape.instance_type} is sold only in UltraServer Capacity Blocks, which "
                         f"this project builds as managed node groups (with the DRA driver and ComputeDomain); use capacity: node-group")


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
        raise ValueError(f"{key}: {zone!r} is a Local Zone, where the EFS model cache cannot be mounted (EFS mount targets and "
                         f"their DNS names exist only in Availability Zones); set {NS}:cluster.cacheStorage: fsx-lustre "
                         f"(FSx for Lustre in the first Availability Zone, mounted by its DNS name over the VPC)")


def apply_aws_region(raw: dict, aws_region: Optional[str]) -> dict:
    """The ``dynamo:`` mapping with ``cluster.region`` taken from ``aws:region`` when the stack sets only that one
    (before validation, so zones are checked against it); a contradiction is a ConfigError naming both keys."""
    cluster = (raw or {}).get("cluster")
    if not aws_region or not isinstance(cluster, dict) or cluster.get("mode") != "eks":
        return raw
    if "region" in cluster:
        if cluster["region"] != aws_region:
            raise ConfigError(f"{NS}:cluster.region: {cluster['region']!r} contradicts aws:region {aws_region!r}; "
                              "set one of them (the cluster is created in dynamo:cluster.region)")
        return raw
    if aws_region not in AWS_REGIONS:
        raise ConfigError(f"aws:region: {aws_region!r} is not an AWS Region; choose one of: {', '.join(AWS_REGIONS)}")
    return {**raw, "cluster": {**cluster, "region": aws_region}}


def missing_region_message() -> str:
    """The refusal of an EKS stack that sets neither ``dynamo:cluster.region`` nor ``aws:region``."""
    return (f"{NS}:cluster.region: not set, and aws:region is not set either; an EKS stack needs its AWS Region "
            f"(no default is assumed). Set one of them, e.g. `pulumi config set aws:region us-east-1` or "
            f"dynamo:cluster.region: us-east-1 in the stack file; choose one of: {', '.join(AWS_REGIONS)}")


def resolve_region(cfg: EksConfig, cluster_raw: dict, aws_region: Optional[str]) -> EksConfig:
    """``aws:region`` and ``dynamo:cluster.region`` must agree; the program's AWS provider uses the result.
    Without ``dynamo:cluster.region``, ``aws:region`` sets it; with neither the stack is refused (no silent
    default region: an EKS cluster, its VPC and its prices are all per Region)."""
    if not aws_region:
        if "region" not in (cluster_raw or {}):
            raise ConfigError(missing_region_message())
        return cfg
    if "region" in (cluster_raw or {}):
        if cluster_raw["region"] != aws_region:
            raise ConfigError(f"{NS}:cluster.region: {cluster_raw['region']!r} contradicts aws:region {aws_region!r}; "
                              "set one of them (the cluster is created in dynamo:cluster.region)")
        return cfg
    try:
        return type(cfg).model_validate({**cfg.model_dump(by_alias=True, exclude_unset=True), "region": aws_region})
    except ValueError as e:
        raise ConfigError(f"aws:region: {aws_region!r}: {e}") from None


@dataclass
class NodeShape:
    """What one node of a group offers the scheduler."""

    name: str
    labels: dict[str, str]
    taints: list[dict]
    capacity: dict[str, int]
    count: int


@dataclass
class ClusterPlan:
    name: str
    region: str
    kubernetes_version: str
    vpc: dict
    public_subnets: list[dict]
    private_subnets: list[dict]  # the EKS cluster's subnets (Availability Zones only)
    gpu_subnet: Optional[dict]  # a Local Zone subnet for the GPU node group only (None: it uses a private subnet)
    addons: list[str]
    system_nodegroup: dict
    gpu_nodegroup: dict
    launch_template: dict
    placement_group: Optional[dict]
    shape: InstanceShape
    gpu_shape: NodeShape
    storage: dict
    storage_class: Optional[dict]  # EFS: dynamic provisioning through access points
    static_pv: Optional[dict]  # FSx for Lustre: the stack's file system as a PersistentVolume (claimRef filled by the wiring)
    cache_class_name: str
    protect_cache: bool
    nvidia_stack: str
    efa: bool
    dra_driver: bool = False  # NVIDIA DRA driver for ComputeDomains (GB200)
    compute_domain: Optional[dict] = None  # ComputeDomain the workers claim when they span nodes of one NVLink domain
    admin_principal_arns: tuple[str, ...] = ()
    notes: dict[str, Any] = field(default_factory=dict)
    addon_versions: dict[str, str] = field(default_factory=dict)  # add-on -> pinned version (stacks/registry/versions.yaml eks.addons)
    # Every GPU node group (one per gpuPools entry), the first one also as gpu_nodegroup, launch_template, placement_group,
    # shape and gpu_shape above (its resources keep the single-target names).
    gpu_pools: list["GpuPool"] = field(default_factory=list)
    # Egress and endpoints (``network_plan``): NAT gateways, the S3 gateway endpoint, ECR interface endpoints, the
    # public API endpoint's CIDRs and the warnings the wiring logs.
    network: dict[str, Any] = field(default_factory=dict)
    # stacks.cluster.karpenter.KarpenterPlan when a GPU pool has capacity: karpenter (its pools get no managed node group).
    karpenter: Optional[Any] = None
    # Who may use the Kubernetes API (``access_plan``), Secrets envelope encryption and control-plane logs
    # (``control_plane_plan``).
    access: dict[str, Any] = field(default_factory=dict)
    control_plane: dict[str, Any] = field(default_factory=dict)


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
    # "node-group" (the managed node group above) or "karpenter" (a NodePool; nodegroup and launch_template then only
    # describe the nodes, nothing registers them). ``karpenter``: max_nodes, consolidate_after, ami_alias, market_type,
    # capacity_reservation_id, zone.
    capacity: str = "node-group"
    karpenter: Optional[dict] = None


def gpu_taint_for(t: Target) -> dict:
    """The GPU taint the target's workers tolerate (Equal value wins, else ``true``)."""
    dgd = next(d for d in catalog.recipe_objects(t) if d["kind"] == "DynamoGraphDeployment")
    for comp in dgd["spec"]["components"]:
        for tol in comp["podTemplate"]["spec"].get("tolerations") or []:
            if tol.get("key") == GPU_TAINT_KEY and tol.get("operator", "Equal") == "Equal":
                return {"key": GPU_TAINT_KEY, "value": tol["value"], "effect": "NO_SCHEDULE"}
    return {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}


def _subnets(cidr: str, zones: tuple[str, ...], local_zone: Optional[str] = None) -> tuple[list[dict], list[dict], Optional[dict]]:
    """Split the VPC in two: private subnets (big, for pods: one per zone, plus one for a GPU Local Zone) in the
    first half, small public ones in the second. Sizes follow the zone count (2 to 6 zones, and the Local Zone)."""
    net = ipaddress.ip_network(cidr)
    halves = list(net.subnets(prefixlen_diff=1))
    n_private = len(zones) + (1 if local_zone else 0)
    private = list(halves[0].subnets(prefixlen_diff=max(2, math.ceil(math.log2(n_private)))))
    public = list(halves[1].subnets(prefixlen_diff=max(4, math.ceil(math.log2(len(zones))))))
    lz = {"availability_zone": local_zone, "cidr_block": str(private[len(zones)])} if local_zone else None
    return (
        [{"availability_zone": z, "cidr_block": str(public[i])} for i, z in enumerate(zones)],
        [{"availability_zone": z, "cidr_block": str(private[i])} for i, z in enumerate(zones)],
        lz,
    )


NODEADM_RAID0 = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="BOUNDARY"

--BOUNDARY
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  instance:
    localStorage:
      strategy: RAID0

--BOUNDARY--
"""


def network_interfaces(shape: InstanceShape, efa: bool) -> list[dict]:
    """One interface per EFA network card of the instance (``shape.efa_cards``): the primary (card 0, device 0)
    is ``efa`` (EFA + ENA) when card 0 carries EFA, else a plain ENA interface; the others are ``efa-only``
    (EC2 user guide, efa-acc-inst-types: an EFA-only interface cannot be the primary one)."""
    if not efa:
        return [{"device_index": 0, "network_card_index": 0, "delete_on_termination": True}]
    out = []
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


EKS_FABRICS = ("aws-efa", "none")


def check_fabric_on_eks(target: Target, fabric_profile: Optional[str]) -> None:
    """EKS offers EFA only: a recipe built for InfiniBand, GKE RDMA or Nscale needs the EFA profile."""
    if target.topology == "disagg" and target.fabric == "none" and fabric_profile != "aws-efa":
        raise ConfigError(
            f"{NS}:fabricProfile: {target.id} names no RDMA fabric, so on EKS its NIXL KV transfer would fall back to TCP; "
            f"set {NS}:fabricProfile: aws-efa"
        )
    if target.fabric not in EKS_FABRICS and fabric_profile != "aws-efa":
        raise ConfigError(
            f"{NS}:fabricProfile: {target.id} moves KV cache over {target.fabric}, which EKS does not have; "
            f"set {NS}:fabricProfile: aws-efa (EFA devices and the LIBFABRIC backend) or use an existing {target.fabric} cluster (cluster.mode: kubeconfig)"
        )


def _storage_class(name: str, provisioner: str, parameters: dict) -> dict:
    """The model-cache StorageClass; ``<...>`` parameters are filled from the file system the cluster creates.
    Retain: deleting the claim must not delete the cache's data."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "parameters": parameters,
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
    }


def _fsx_static_pv(name: str, class_name: str, capacity_gib: int) -> dict:
    """The stack's FSx for Lustre file system as a PersistentVolume: the CSI driver has no StorageClass parameter
    naming an existing file system, so the cache binds statically (kubernetes-sigs/aws-fsx-csi-driver,
    examples/kubernetes/static_provisioning: ``volumeHandle`` = file system id, ``dnsname``, ``mountname``).
    ``<...>`` values come from the file system; the wiring adds ``claimRef`` (the serving layer's claim)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": f"{capacity_gib}Gi"},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"],
            "mountOptions": ["flock"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class_name,
            "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": "<fsx-id>", "volumeAttributes": {"dnsname": "<fsx-dns>", "mountname": "<fsx-mount>"}},
        },
    }


def _dgd(target: Target) -> dict:
    return next(d for d in catalog.recipe_objects(target) if d["kind"] == "DynamoGraphDeployment")


NODE_RESOURCES = ("nvidia.com/gpu", "vpc.amazonaws.com/efa")


def pod_requests(pod: dict, resources: tuple[str, ...] = NODE_RESOURCES) -> dict[str, int]:
    """Extended-resource requests of one pod (limits win over requests, as the scheduler counts them)."""
    out: dict[str, int] = {}
    for c in pod.get("containers") or []:
        res = c.get("resources") or {}
        for k, v in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items():
            if k in resources:
                out[k] = out.get(k, 0) + int(v)
    return out


def pack(dgd: dict, capacity: dict[str, int]) -> tuple[int, list[str]]:
    """GPU nodes the DGD's GPU pods need, first fit in component and replica order (the order
    ``stacks.cluster.scheduling.check_target`` checks), and the replicas no single node can hold."""
    nodes: list[dict[str, int]] = []
    too_big: list[str] = []
    for comp in dgd["spec"]["components"]:
        req = pod_requests(comp["podTemplate"]["spec"])
        if not req.get("nvidia.com/gpu"):
            continue
        if any(capacity.get(k, 0) < v for k, v in req.items()):
            too_big.append(f"{comp['name']} requests {req}, a node has {capacity}")
            continue
        for _ in range(int(comp.get("replicas", 1))):
            node = next((n for n in nodes if all(n.get(k, 0) >= v for k, v in req.items())), None)
            if node is None:
                node = dict(capacity)
                nodes.append(node)
            for k, v in req.items():
                node[k] -= v
    return len(nodes), too_big


DRA_CHARTS = ("dra-driver-nvidia-gpu", "nvidia-dra-driver-gpu")  # the chart's name from v0.4.0, and before it


def dra_driver_values() -> dict:
    """Helm values of the NVIDIA DRA driver on EKS, from the EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS"
    (awsdocs/amazon-eks-user-guide latest/ug/ml/ml-eks-nvidia-ultraserver.adoc @e0464053, "Install NVIDIA DRA driver",
    dra-values.yaml): ComputeDomains only (GPU allocation stays with the device plugin); the controller off the
    control-plane placement of the chart's defaults (EKS has no control-plane nodes: NVIDIA/k8s-dra-driver-gpu
    values.yaml @0540432 requires node-role.kubernetes.io/control-plane); the kubelet plugin on nodes labelled
    ``nvidia.com/gpu.present=true`` and tolerating the ``nvidia.com/gpu`` NoSchedule taint (the old chart's plugin
    tolerates nothing). Host driver root ``/``: the AL2023 NVIDIA AMI ships the driver.

    The guide clears the controller's placement with ``null``; the Python SDK drops null map values before they reach
    the engine (pulumi/pulumi#12178; pulumi-kubernetes#3811, #2034) and empty lists have been dropped too
    (pulumi-kubernetes#2089). So the controller's placement is stated with non-empty values instead, which Helm's
    value merge applies whatever the chart's defaults (lists replace, maps merge): required affinity and nodeSelector
    on the system node group, tolerations replaced by CriticalAddonsOnly only (no control-plane toleration).
    ``nameOverride`` keeps the resource names of a release first installed from the pre-0.4 chart
    (kubernetes-sigs/dra-driver-nvidia-gpu site/content/docs/upgrade.md @617fbb49, "Upgrade from v25.12.0 to v0.4.0")."""
    from stacks.cluster.platform import GPU_TOLERATION, CRITICAL_ADDONS_TOLERATION

    system = {POOL_LABEL: "system"}
    return {
        "nameOverride": "nvidia-dra-driver-gpu",
        "nvidiaDriverRoot": "/",
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "controller": {
            "nodeSelector": dict(system),
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": ["system"]}]}]}}},
            "tolerations": [dict(CRITICAL_ADDONS_TOLERATION)],
        },
        "kubeletPlugin": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}},
            "tolerations": [dict(GPU_TOLERATION)],
        },
    }


def dra_driver_spec():
    """The NVIDIA DRA driver release (values: ``dra_driver_values``). Pinned in versions.yaml charts.nvidia-dra-driver-gpu
    (the chart is dra-driver-nvidia-gpu from v0.4.0; the release keeps its name, so the Pulumi URN and the Helm
    release do not change)."""
    from stacks.cluster.platform import HelmSpec, chart_pin

    pin = chart_pin("nvidia-dra-driver-gpu")
    return HelmSpec(name="nvidia-dra-driver-gpu", chart=pin["chart"], version=str(pin["version"]), repo=pin["repo"],
                    namespace="nvidia-dra-driver-gpu", values=dra_driver_values())


COMPUTE_DOMAIN_CLAIM = "compute-domain-channel"


def compute_domain(name: str, namespace: str, nodes: int) -> dict:
    """A ComputeDomain (NVIDIA DRA driver): an IMEX domain over the nodes the workers run on, with a
    ResourceClaimTemplate each worker claims (resource.nvidia.com/v1beta1)."""
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": nodes, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def apply_compute_domain(dgd: dict, cd: dict) -> None:
    """Give every GPU worker of the DGD a claim on the ComputeDomain's channel (in place)."""
    template = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    for comp in dgd["spec"]["components"]:
        pod = comp["podTemplate"]["spec"]
        if not pod_requests(pod).get("nvidia.com/gpu"):
            continue
        claims = pod.setdefault("resourceClaims", [])
        if not any(c.get("name") == COMPUTE_DOMAIN_CLAIM for c in claims):
            claims.append({"name": COMPUTE_DOMAIN_CLAIM, "resourceClaimTemplateName": template})
        main = next((c for c in pod["containers"] if c.get("name") == "main"), pod["containers"][0])
        rc = main.setdefault("resources", {}).setdefault("claims", [])
        if not any(c.get("name") == COMPUTE_DOMAIN_CLAIM for c in rc):
            rc.append({"name": COMPUTE_DOMAIN_CLAIM})


def _key(prefix: str, name: str) -> str:
    """``dynamo:cluster.gpuNodes`` for the cluster's one GPU group, ``dynamo:cluster.gpuPools[i].nodes`` for a pool."""
    if prefix.endswith("]"):
        name = {"gpuNodes": "nodes", "gpuAvailabilityZone": "availabilityZone"}.get(name, name)
    return f"{prefix}.{name}"


def build_gpu_pool(cfg: EksConfig, gpu: str, dgd: Optional[dict], what: str, taint: dict, key: str = f"{NS}:cluster",
                   name: str = "gpu") -> GpuPool:
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
        raise ConfigError(f"{_key(key, 'efa')}: false, but {', '.join(efa_workers)} of {what} request vpc.amazonaws.com/efa (KV transfer over EFA); "
                          f"remove {_key(key, 'efa')} (EFA is on by default for {shape.instance_type}) or choose an aggregated target")
    if shape.ultraserver and cfg.market_type != "capacity-block":
        raise ConfigError(f"{_key(key, 'marketType')}: {cfg.market_type!r}: {shape.instance_type} is sold only in UltraServer Capacity Blocks "
                          f"(u-p6e-gb200x36, u-p6e-gb200x72); set {_key(key, 'marketType')}: capacity-block and {_key(key, 'capacityReservationId')} "
                          "(EKS user guide, ml-eks-nvidia-ultraserver)")
    capacity = {"nvidia.com/gpu": shape.gpus_per_node}
    if efa:
        capacity["vpc.amazonaws.com/efa"] = shape.efa_interfaces
    karpenter = cfg.capacity == "karpenter"
    if karpenter and shape.ultraserver:
        raise ConfigError(f"{_key(key, 'capacity')}: karpenter: {shape.instance_type} is sold only in UltraServer Capacity Blocks, "
                          "which this project builds as managed node groups (with the DRA driver and ComputeDomain); use capacity: node-group")
    if dgd is None:
        needed, gpus = 0, 0
        if karpenter:
            if cfg.max_nodes is None:
                raise ConfigError(f"{_key(key, 'maxNodes')}: not set; a Karpenter pool that no serving entry of this stack sizes needs "
                                  f"its node limit (1-{MAX_KARPENTER_NODES})")
        elif cfg.gpu_nodes is None:
            raise ConfigError(f"{_key(key, 'gpuNodes')}: not set; a pool that no serving entry of this stack sizes needs its node count "
                              f"(1-{MAX_NODES_PER_NODEGROUP})")
    else:
        needed, too_big = pack(dgd, capacity)
        if too_big:
            raise ConfigError(f"{_key(key, 'instanceType')}: {shape.instance_type}: no single node holds " + "; ".join(too_big)
                              + f" ({what}); choose a larger instance type of {gpu} or fewer GPUs per worker")
        needed = max(needed, 1)
        gpus = catalog.gpus_needed(dgd)
    count = cfg.gpu_nodes or needed
    if karpenter:
        # The NodePool's node limit: maxNodes, default what the DGDs need now (an autoscaled entry raises it).
        count = cfg.max_nodes or needed
        if count < needed:
            raise ConfigError(f"{_key(key, 'maxNodes')}: {count} x {shape.instance_type} cannot hold {what} as configured "
                              f"({gpus} GPUs, EFA {shape.efa_per_gpu}/GPU, replicas included); use at least {needed}")
    if count < needed:
        raise ConfigError(f"{_key(key, 'gpuNodes')}: {count} x {shape.instance_type} cannot hold {what} as configured "
                          f"({gpus} GPUs, EFA {shape.efa_per_gpu}/GPU, replicas included); use at least {needed}")
    if shape.ultraserver and count > 18:
        raise ConfigError(f"{_key(key, 'gpuNodes')}: {count}: an UltraServer holds at most 18 {shape.instance_type} (u-p6e-gb200x72)")
    labels = {
        POOL_LABEL: name,
        "nvidia.com/gpu.product": shape.product,
        "nvidia.com/gpu.present": "true",
    }
    if efa:
        labels[EFA_LABEL] = "true"
    lt: dict[str, Any] = {
        "network_interfaces": network_interfaces(shape, efa),
        "user_data": base64.b64encode(NODEADM_RAID0.encode()).decode(),
        "metadata_options": {"http_tokens": "required", "http_put_response_hop_limit": 2},
        "block_device_mappings": [{"device_name": "/dev/xvda", "ebs": {"volume_size": 500, "volume_type": "gp3", "delete_on_termination": "true"}}],
    }
    capacity_block = cfg.market_type == "capacity-block"
    # Capacity Blocks are already co-located and a targeted reservation launches where it was made: no placement group then.
    # Without EFA nothing crosses instances, so no placement group unless placementGroup: true asks for one.
    wants_pg = cfg.placement_group if cfg.placement_group is not None else efa
    placement_group = {"strategy": "cluster"} if (wants_pg and not cfg.capacity_reservation_id and not karpenter) else None
    if cfg.capacity_reservation_id:
        lt["capacity_reservation_specification"] = {"capacity_reservation_target": {"capacity_reservation_id": cfg.capacity_reservation_id}}
    if capacity_block:
        # EKS "Create a managed node group with Capacity Blocks for ML": the launch template names the instance type,
        # the capacity-block market and the reservation; the node group sets no instanceTypes.
        lt["instance_market_options"] = {"market_type": "capacity-block"}
        lt["instance_type"] = shape.instance_type
    gpu_ng = {
        "ami_type": AMI_TYPE[shape.arch],
        "capacity_type": "CAPACITY_BLOCK" if capacity_block else "ON_DEMAND",
        "scaling_config": scaling_config(count, capacity_block),
        "labels": labels,
        "taints": [taint],
        "availability_zone": cfg.gpu_zone(),
        "update_config": {"max_unavailable": 1},
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
        from stacks.cluster.karpenter import DEFAULT_AMI_ALIAS, DEFAULT_CONSOLIDATE_AFTER

        kp = {"max_nodes": count, "consolidate_after": cfg.consolidate_after or DEFAULT_CONSOLIDATE_AFTER,
              "ami_alias": cfg.ami_alias or DEFAULT_AMI_ALIAS, "market_type": cfg.market_type,
              "capacity_reservation_id": cfg.capacity_reservation_id, "zone": cfg.gpu_zone()}
    return GpuPool(name=name, gpu=gpu, nodegroup=gpu_ng, launch_template=lt, placement_group=placement_group, shape=shape,
                   node_shape=node_shape, efa=efa, nodes_needed=needed, gpus=gpus,
                   capacity="karpenter" if karpenter else "node-group", karpenter=kp)


def pool_name(gpu: str, first: bool) -> str:
    """The first GPU group keeps the single-target resource names (``cluster-gpu``); others carry their GPU."""
    return "gpu" if first else f"gpu-{gpu}"


# Interface endpoints for ECR: ecr.api (API calls such as DescribeImages) and ecr.dkr (the Docker registry API used by
# pulls) (ECR user guide, "Amazon ECR interface VPC endpoints (AWS PrivateLink)": the endpoint's security group admits
# 443 from the VPC's private subnets; Route 53 private DNS). Image layers are downloaded from pre-signed S3 URLs (ECR API
# GetDownloadUrlForLayer), so without the S3 gateway endpoint layer bytes still cross the NAT gateway.
# Each interface endpoint bills per Availability Zone-hour, $0.01 in us-east-1, plus $0.01/GB
# (aws.amazon.com/privatelink/pricing); a gateway endpoint for S3 has no hourly or per-GB charge (aws.amazon.com/vpc/pricing).
ECR_ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr")
INTERFACE_ENDPOINT_USD_PER_AZ_HOUR = 0.01
# NAT gateway, us-east-1: $0.045 per gateway-hour and $0.045 per GB processed (aws.amazon.com/vpc/pricing, NAT
# gateway pricing, read 2026-12-01); cross-zone traffic to a NAT in another zone adds inter-AZ transfer.
NAT_USD_PER_HOUR = 0.045
NAT_USD_PER_GB = 0.045


def network_plan(cfg: EksConfig) -> dict[str, Any]:
    """Egress of the cluster's private subnets and the endpoints that keep AWS traffic off the NAT gateway's per-GB
    charge: ``nat_zones`` (the zones with a NAT gateway: the first, or every zone), ``s3_gateway_endpoint``,
    ``interface_endpoints`` (service suffixes), ``public_access_cidrs`` and ``warnings``."""
    zones = cfg.zones()
    warnings = []
    if "0.0.0.0/0" in cfg.public_access_cidrs:
        warnings.append(f"{NS}:cluster.publicAccessCidrs includes 0.0.0.0/0 (the default, as EKS's): the Kubernetes API endpoint "
                        "accepts connections from any address (authentication still applies); list your networks there, e.g. "
                        "[203.0.113.0/24]")
    if cfg.ecr_endpoints and not cfg.s3_gateway_endpoint:
        warnings.append(f"{NS}:cluster.ecrEndpoints without s3GatewayEndpoint: ECR image layers still come from S3 through the NAT gateway")
    return {
        "nat_zones": list(zones) if cfg.nat_gateways == "per-zone" else [zones[0]],
        "s3_gateway_endpoint": cfg.s3_gateway_endpoint,
        "interface_endpoints": list(ECR_ENDPOINT_SERVICES) if cfg.ecr_endpoints else [],
        "public_access_cidrs": list(cfg.public_access_cidrs),
        "warnings": warnings,
    }


def _principal_slug(arn: str) -> str:
    """A stable resource-name part for a principal: account, kind and name (``123456789012-role-ops-admin``), so reordering
    ``accessEntries`` renames nothing (a renamed access entry would be created before the old one is deleted, and EKS
    refuses a second entry for the same principal)."""
    account, rest = arn.split(":")[4], arn.split(":", 5)[5]
    return re.sub(r"[^A-Za-z0-9_.=,@+-]+", "-", f"{account}-{rest}")


def access_plan(cfg: EksConfig) -> dict[str, Any]:
    """Who may use the cluster's Kubernetes API, as EKS access entries (authentication mode API only).

    ``bootstrap_creator_admin``: EKS CreateCluster ``accessConfig.bootstrapClusterCreatorAdminPermissions`` ("whether or
    not the cluster creator IAM principal was set as a cluster admin access entry during cluster creation time", default
    true; EKS API reference CreateAccessConfigRequest). False as soon as ``accessEntries`` names the principals; true
    without them, as before (the creator's implicit admin, warned about). It only acts on CreateCluster: terraform-provider-
    aws marks it ForceNew (internal/service/eks/cluster.go), so the wiring keeps an existing cluster's value
    (``ignoreChanges``) and never replaces a cluster for it.

    ``authentication_mode``: API. Of API, API_AND_CONFIG_MAP and CONFIG_MAP (EKS API AccessConfigResponse), API uses access
    entries only; nothing here writes the aws-auth ConfigMap, managed node groups get their entries from EKS, and a
    cluster cannot go back from API ("you can't change the authentication mode back to a mode that removes the EKS API
    and access entries", EKS user guide setting-up-access-entries): existing clusters of this program already run API.

    ``entries``: one access entry and one policy association per principal; ``adminPrincipalArns`` keep their resource
    names (``admin-<i>``), ``accessEntries`` are named by principal (``access-<account>-<role|user>-<name>``)."""
    entries = [{"name": f"admin-{i}", "principal_arn": arn, "policy": "cluster-admin",
                "policy_arn": ACCESS_POLICIES["cluster-admin"], "access_scope": {"type": "cluster"}}
               for i, arn in enumerate(cfg.admin_principal_arns)]
    for e in cfg.access_entries:
        scope = {"type": "namespace", "namespaces": list(e.namespaces)} if e.namespaces else {"type": "cluster"}
        entries.append({"name": f"access-{_principal_slug(e.principal_arn)}", "principal_arn": e.principal_arn, "policy": e.policy,
                        "policy_arn": ACCESS_POLICIES[e.policy], "access_scope": scope})
    warnings = []
    if not cfg.access_entries:
        warnings.append(f"{NS}:cluster.accessEntries is not set: a new cluster makes whoever runs its first `up` cluster-admin "
                        "implicitly (EKS bootstrapClusterCreatorAdminPermissions); name the deploy role and your admins there, "
                        "e.g. [{principalArn: arn:aws:iam::<account>:role/<deploy role>, policy: cluster-admin}] "
                        "(docs/deploy-aws.md, \"Cluster access\")")
    return {"authentication_mode": "API", "bootstrap_creator_admin": not cfg.access_entries, "entries": entries, "warnings": warnings}


def control_plane_plan(name: str, cfg: EksConfig) -> dict[str, Any]:
    """Secrets envelope encryption and control-plane logs of the cluster ``name``.

    ``secrets_encryption``: a customer-managed symmetric KMS key of the stack with automatic rotation, used for
    ``resources: ["secrets"]`` (EKS EncryptionConfig; EKS user guide enable-kms: symmetric, same Region). Adding it to an
    existing cluster is an in-place AssociateEncryptionConfig (terraform-provider-aws internal/service/eks/cluster.go
    update: only from none to one), and it cannot be undone: "You can't disable secrets encryption after enabling it.
    This action is irreversible" (EKS user guide enable-kms); the provider replaces the cluster when it is removed
    (``ForceNewIfChange("encryption_config", ...)``), which the AWS rules' update rules refuse. The cluster role gets
    kms:Encrypt, kms:Decrypt, kms:ListGrants, kms:DescribeKey on the key (terraform-aws-modules/terraform-aws-eks
    main.tf @0005984c, cluster_encryption policy).

    ``logs``: the log types, the log group EKS writes to (``/aws/eks/<cluster>/cluster``) and its retention. The stack
    creates the group before the cluster (terraform-aws-eks main.tf: the cluster depends on aws_cloudwatch_log_group):
    otherwise EKS creates it on first delivery with no retention (events never expire) and the stack could not create
    it afterwards. ``cluster_role_policy`` denies the cluster role logs:CreateLogGroup, so logs still delivered while
    ``pulumi destroy`` deletes the cluster cannot re-create the group outside the stack (terraform-aws-eks main.tf, the
    cluster role's inline policy; terraform-aws-modules/terraform-aws-eks#920)."""
    logs = None
    if cfg.control_plane_logs:
        logs = {"types": list(cfg.control_plane_logs), "log_group": f"/aws/eks/{name}/cluster",
                "retention_in_days": cfg.control_plane_log_retention_days,
                "cluster_role_policy": {"Version": "2012-10-17", "Statement": [
                    {"Effect": "Deny", "Action": ["logs:CreateLogGroup"], "Resource": "*"}]}}
    return {"secrets_encryption": cfg.secrets_encryption, "logs": logs}


def assemble_plan(stack: str, cfg: EksConfig, pools: list[GpuPool], protect_cache: bool = True,
                  compute_domain_for: Optional[tuple[Target, dict]] = None) -> ClusterPlan:
    """The cluster around its GPU node groups: VPC, system nodes, add-ons, cache storage. ``pools[0]`` is the
    first GPU group (today's resource names); ``compute_domain_for``: (target, dgd) of a GB200 target whose
    workers span nodes of one NVLink domain."""
    zones = cfg.zones()
    # A Local Zone GPU group (GB200 UltraServers) gets its own subnet; with gpuPools, the one Local Zone the pools name.
    local_zone = next((p.nodegroup["availability_zone"] for p in pools if p.nodegroup["availability_zone"] not in zones), None)
    gpu_zone = pools[0].nodegroup["availability_zone"]
    public, private, gpu_subnet = _subnets(cfg.vpc_cidr, zones, local_zone)
    name = f"dynamo-{stack}"
    sys_ng = {
        "instance_types": [cfg.system_instance_type],
        "ami_type": "AL2023_x86_64_STANDARD",
        "capacity_type": "ON_DEMAND",
        "scaling_config": {"desired_size": cfg.system_nodes, "min_size": cfg.system_nodes, "max_size": cfg.system_nodes + 2},
        "labels": {POOL_LABEL: "system"},
    }
    static_pv = None
    sc = None
    if cfg.cache_storage == "efs":
        storage = {"kind": "efs", "throughput_mode": cfg.efs_throughput_mode, "performance_mode": "generalPurpose", "encrypted": True}
        if cfg.efs_provisioned_throughput_mibps is not None:
            storage["provisioned_throughput_in_mibps"] = cfg.efs_provisioned_throughput_mibps
        class_name = "efs-model-cache"
        sc = _storage_class(class_name, "efs.csi.aws.com", {"provisioningMode": "efs-ap", "directoryPerms": "700", "fileSystemId": "<efs-id>"})
        csi = "aws-efs-csi-driver"
    else:
        # FSx for Lustre is an Availability Zone service: in the GPU zone, or the first zone when the GPUs are in a Local Zone.
        storage = {"kind": "fsx-lustre", "deployment_type": "PERSISTENT_2", "storage_capacity": cfg.fsx_storage_capacity_gib,
                   "per_unit_storage_throughput": cfg.fsx_throughput_per_tib, "data_compression_type": "LZ4",
                   "availability_zone": zones[0] if local_zone else gpu_zone}
        class_name = "fsx-model-cache"
        static_pv = _fsx_static_pv(f"{name}-model-cache", class_name, cfg.fsx_storage_capacity_gib)
        csi = "aws-fsx-csi-driver"
    fsx_mbps = cfg.fsx_storage_capacity_gib / 1024 * cfg.fsx_throughput_per_tib if cfg.cache_storage == "fsx-lustre" else None
    # GB200: DRA driver for IMEX; a ComputeDomain when a disaggregated target's workers span nodes of the NVLink domain.
    dra = any(p.shape.ultraserver for p in pools)
    cd = None
    if compute_domain_for and dra:
        target, dgd = compute_domain_for
        if target.topology == "disagg" and pools[0].nodes_needed > 1:
            cd = compute_domain(f"{name}-imex", (dgd.get("metadata") or {}).get("namespace") or "default", pools[0].nodes_needed)
    first = pools[0]
    from stacks.cluster.karpenter import build_karpenter_plan, node_role_name, pool_objects

    karpenter = build_karpenter_plan(name, cfg.region, [
        pool_objects(name, p.name, node_role_name(name), p.shape.instance_type, p.shape.kubernetes_arch, p.shape.gpus_per_node,
                     p.karpenter["zone"], p.nodegroup["labels"], p.nodegroup["taints"][0], p.karpenter["max_nodes"],
                     market_type=p.karpenter["market_type"], capacity_reservation_id=p.karpenter["capacity_reservation_id"],
                     ami_alias=p.karpenter["ami_alias"], consolidate_after=p.karpenter["consolidate_after"], gpu=p.gpu,
                     nodes_needed=p.nodes_needed)
        for p in pools if p.capacity == "karpenter"], system_nodes=cfg.system_nodes, system_selector={POOL_LABEL: "system"})
    return ClusterPlan(
        name=name,
        region=cfg.region,
        kubernetes_version=cfg.kubernetes_version,
        vpc={"cidr_block": cfg.vpc_cidr, "enable_dns_hostnames": True, "enable_dns_support": True},
        public_subnets=public,
        private_subnets=private,
        gpu_subnet=gpu_subnet,
        network=network_plan(cfg),
        addons=["vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", csi],
        addon_versions={a: v for a, v in addon_versions(cfg.kubernetes_version).items()
                        if a in ("vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", csi)},
        system_nodegroup=sys_ng,
        gpu_nodegroup=first.nodegroup,
        launch_template=first.launch_template,
        placement_group=first.placement_group,
        shape=first.shape,
        gpu_shape=first.node_shape,
        storage=storage,
        storage_class=sc,
        static_pv=static_pv,
        cache_class_name=class_name,
        protect_cache=protect_cache,
        nvidia_stack=cfg.nvidia_stack,
        efa=any(p.efa for p in pools),
        dra_driver=dra,
        compute_domain=cd,
        admin_principal_arns=cfg.admin_principal_arns,
        notes={"gpus": sum(p.gpus for p in pools), "nodes_needed": first.nodes_needed, "fsx_mbps": fsx_mbps,
               "efa_per_gpu": first.shape.efa_per_gpu},
        gpu_pools=list(pools),
        karpenter=karpenter,
        access=access_plan(cfg),
        control_plane=control_plane_plan(name, cfg),
    )


def build_cluster_plan(stack: str, cfg: EksConfig, target: Target, dgd: Optional[dict] = None, protect_cache: bool = True,
                       key: str = f"{NS}:cluster") -> ClusterPlan:
    """``dgd``: the final DGD (after ``replicas``, images and the fabric profile); node counts, EFA and the
    GB200 ComputeDomain follow it. Defaults to the catalog's DGD for the target. One GPU node group."""
    dgd = dgd or _dgd(target)
    pool = build_gpu_pool(cfg, target.gpu, dgd, target.id, gpu_taint_for(target), key)
    return assemble_plan(stack, cfg, [pool], protect_cache, compute_domain_for=(target, dgd))


def build_cluster_only_plan(stack: str, cfg: EksConfig) -> ClusterPlan:
    """A cluster-only stack (``dynamo:serve: []``): one GPU node group per ``dynamo:cluster.gpuPools`` entry, sized by
    its ``nodes``; serving stacks add their objects later (``cluster.mode: stack``)."""
    k = f"{NS}:cluster"
    if not cfg.gpu_pools:
        raise ConfigError(f"{k}.gpuPools: not set; a cluster-only stack ({NS}:serve: []) names its GPU node groups, "
                          f"e.g. gpuPools: [{{gpu: h100, nodes: 2}}]")
    pools = []
    for i, p in enumerate(cfg.gpu_pools):
        pcfg, key = cfg.pool_for(p.gpu)
        taint = {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}
        pools.append(build_gpu_pool(pcfg, p.gpu, None, f"pool {p.gpu}", taint, key, pool_name(p.gpu, i == 0)))
    return assemble_plan(stack, cfg, pools, protect_cache=True)


def node_pools(plan: ClusterPlan) -> list[dict]:
    """What a cluster stack exports as ``nodePools`` (and a serving stack checks its entries against): per GPU node
    group its GPU, instance type, node count, per-node allocatable GPUs and EFA devices, labels and taint."""
    return [{"name": p.name, "gpu": p.gpu, "instanceType": p.shape.instance_type, "count": p.node_shape.count,
             "allocatable": dict(p.node_shape.capacity), "labels": dict(p.node_shape.labels),
             "taint": {k: v for k, v in p.node_shape.taints[0].items()},
             **({"capacity": "karpenter"} if p.capacity == "karpenter" else {})} for p in plan.gpu_pools]



# --------------------------------------------------------------------------- secrets on a cluster this `up` creates

NGC_KEY = "ngcApiKey"  # NGC API key: the stack writes the nvcr.io .dockerconfigjson from it
PULL_SECRET_KEY = "imagePullSecret"  # or a whole .dockerconfigjson (any registry)


def check_secrets_on_new_cluster(hf_token_secret_name: Optional[str], image_pull_secrets: tuple[str, ...], raw: dict,
                                 secret_keys: frozenset[str] | set[str]) -> None:
    """On a cluster the same ``pulumi up`` creates, nothing else can have made a Secret: the HF token comes from
    ``dynamo:hfToken`` and every image pull secret is created from ``dynamo:ngcApiKey`` (both Pulumi secrets)."""
    if hf_token_secret_name:
        raise ConfigError(f"{NS}:hfTokenSecretName: {hf_token_secret_name!r} names a Secret in the EKS cluster this `pulumi up` creates, "
                          f"so nothing could have made it; remove it and run `pulumi config set --secret {NS}:hfToken <token>`")
    for key in (NGC_KEY, PULL_SECRET_KEY):
        if key in (raw or {}):
            raise ConfigError(f"{NS}:{key} is set in plain text; set it as a secret: `pulumi config set --secret {NS}:{key} <value>`")
    if image_pull_secrets and not {NGC_KEY, PULL_SECRET_KEY} & set(secret_keys):
        raise ConfigError(f"{NS}:{NGC_KEY} is not set, but {NS}:imagePullSecrets names {list(image_pull_secrets)}, which this stack must create "
                          f"on its new cluster; run `pulumi config set --secret {NS}:{NGC_KEY} <NGC API key>` (nvcr.io), or set the secret "
                          f"{NS}:{PULL_SECRET_KEY} to a whole .dockerconfigjson, or remove {NS}:imagePullSecrets for public images")


NGC_REGISTRY = "nvcr.io"


def pull_secret(name: str, namespace: str) -> dict:
    """A ``kubernetes.io/dockerconfigjson`` Secret for nvcr.io; ``.dockerconfigjson`` is filled by the wiring from
    the secret ``dynamo:ngcApiKey`` (user ``$oauthtoken``, NGC's documented login) and stays a Pulumi secret."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": "<redacted: Pulumi secret>"}}


def dockerconfigjson(api_key: str, registry: str = NGC_REGISTRY) -> str:
    import json

    auth = base64.b64encode(f"$oauthtoken:{api_key}".encode()).decode()
    return json.dumps({"auths": {registry: {"username": "$oauthtoken", "password": api_key, "auth": auth}}})


# --------------------------------------------------------------------------- the EKS part of the program, as data

def cache_class_name(cfg: EksConfig) -> str:
    return "efs-model-cache" if cfg.cache_storage == "efs" else "fsx-model-cache"


def _gib(quantity: str) -> float:
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|Pi)?", str(quantity))
    if not m:
        return 0.0
    return float(m[1]) * {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1, "Ti": 2**10, "Pi": 2**20, None: 2**-30}[m[2]]


def plan_eks(stack: str, cfg, cluster: EksConfig, raw: dict, secret_keys, aws_region: Optional[str] = None,
             require_secrets: bool = True):
    """Everything an EKS stack needs before any resource: region agreement with ``aws:region``, the fabric,
    the Secrets only this stack can create, the serving objects (EFA per GPU of the cluster's instance), the
    cluster plan sized from the final DGD, the GB200 ComputeDomain claims, the FSx claim binding and the
    image pull secrets. Returns ``(cluster, cluster_plan, serving_plan)``; ``cluster`` may carry the region
    from ``aws:region``. ``require_secrets=False`` (render for review) skips only the presence of ``ngcApiKey``."""
    from stacks.serving import build_plan, select_target

    cluster = resolve_region(cluster, (raw or {}).get("cluster") or {}, aws_region)
    target = select_target(cfg)
    check_fabric_on_eks(target, cfg.fabric_profile)
    check_secrets_on_new_cluster(cfg.hf_token_secret_name, cfg.image_pull_secrets if require_secrets else (), raw, set(secret_keys))
    pool_cfg, pool_key = cluster.pool_for(target.gpu, f"{NS}:gpu")
    try:
        shape = shape_for(target.gpu, pool_cfg.instance_type)
    except ValueError as e:
        raise ConfigError(f"{_key(pool_key, 'instanceType')}: {e}") from None
    own_class = cache_class_name(cluster)
    if cfg.storage.class_name and cfg.storage.class_name != own_class and not cfg.storage.existing_claim:
        raise ConfigError(f"{NS}:storage.className: {cfg.storage.class_name!r} does not exist on the EKS cluster this `pulumi up` creates, "
                          f"so the cache claim would stay Pending; remove it (the stack's class is {own_class!r}, "
                          f"from {NS}:cluster.cacheStorage: {cluster.cache_storage}) or set it to {own_class!r}")
    serving = build_plan(cfg, default_storage_class=cache_class_name(cluster), job_node_selector={POOL_LABEL: "system"},
                         efa_per_gpu=shape.efa_per_gpu)
    cp = build_cluster_plan(stack, pool_cfg, target, dgd=serving.dgd, protect_cache=cfg.storage.protect, key=pool_key)
    if cp.gpu_pools[0].capacity == "karpenter":  # consolidation never takes a node from under a serving worker
        from stacks.cluster.karpenter import add_do_not_disrupt

        add_do_not_disrupt(serving.dgd)
    ns = serving.dgd["metadata"]["namespace"]
    if cp.compute_domain:
        cp.compute_domain["metadata"]["namespace"] = ns
        apply_compute_domain(serving.dgd, cp.compute_domain)
    if cp.static_pv:
        cp.static_pv["spec"]["claimRef"] = {"namespace": ns, "name": serving.claim_name}
        if serving.cache_pvc:
            want = serving.cache_pvc["spec"]["resources"]["requests"]["storage"]
            if _gib(want) > cluster.fsx_storage_capacity_gib:
                raise ConfigError(f"{NS}:storage.size: {want} is larger than the FSx file system ({NS}:cluster.fsxStorageCapacityGib: "
                                  f"{cluster.fsx_storage_capacity_gib}); raise fsxStorageCapacityGib (1200, 2400 or a multiple of 2400)")
    cp.notes["pull_secrets"] = [pull_secret(n, ns) for n in cfg.image_pull_secrets]
    return cluster, cp, serving


# --------------------------------------------------------------------------- several GPU node groups (cluster.gpuPools)

def _pins_gpu_product(pod: dict) -> bool:
    if "nvidia.com/gpu.product" in (pod.get("nodeSelector") or {}):
        return True
    terms = (((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    return bool(terms) and all(any(e.get("key") == "nvidia.com/gpu.product" for e in t.get("matchExpressions") or []) for t in terms)


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
    effect = {"NO_SCHEDULE": "NoSchedule"}.get(taint.get("effect"), taint.get("effect"))
    for t in pod.get("tolerations") or []:
        if t.get("effect") not in (None, "", effect):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", taint["key"]):
            return True
        if t.get("operator", "Equal") == "Equal" and t.get("key") == taint["key"] and str(t.get("value", "")) == str(taint["value"]):
            return True
    return False


def combined_dgd(parts: list[tuple[str, dict]]) -> dict:
    """``(entry name, DGD)`` pairs as one DGD whose components are all of theirs, so capacity is sized from the sum."""
    comps = [{**c, "name": f"{name}/{c['name']}"} for name, d in parts for c in d["spec"]["components"]]
    first = parts[0][1]
    return {**first, "spec": {**first["spec"], "components": comps}}


def _untolerated(parts: list[tuple[str, dict]], taint: dict) -> list[str]:
    return [f"{name}/{c['name']}" for name, d in parts for c in d["spec"]["components"]
            if pod_requests(c["podTemplate"]["spec"]).get("nvidia.com/gpu") and not tolerates(c["podTemplate"]["spec"], taint)]


def build_pools_plan(stack: str, cluster: EksConfig, groups: list[tuple[str, list[tuple[str, str, dict]], dict]],
                     protect_cache: bool = True) -> ClusterPlan:
    """One GPU node group per GPU of the stack's entries, each sized from the sum of its entries' DGDs (after replicas
    and overrides), plus the ``gpuPools`` no entry uses. ``groups``: ``(gpu, [(entry key, entry name, dgd)], taint)``
    in the order of the entries."""
    if len(groups) > 1 and not cluster.gpu_pools:
        from stacks.spec.config import _camel

        set_keys = [k for k in POOL_KEYS if k in cluster.model_fields_set]
        if not set_keys:
            # Without gpuPools the entries' order would name the node groups, and removing the first entry would
            # rename (replace) another GPU's node group: the pools' order must be stated.
            gpus = [g for g, _, _ in groups]
            raise ConfigError(f"{NS}:cluster.gpuPools: not set, but the entries run on {', '.join(gpus)}; list those GPUs "
                              f"there (e.g. gpuPools: [{', '.join('{gpu: ' + g + '}' for g in gpus)}]): the pools' order names "
                              f"the node groups, so adding or removing an entry never replaces another GPU's node group")
        if set_keys:
            raise ConfigError(f"{NS}:cluster.{_camel(set_keys[0])}: applies to one GPU node group, but the entries run on "
                              f"{', '.join(g for g, _, _ in groups)}; set it per GPU in {NS}:cluster.gpuPools "
                              f"(e.g. gpuPools: [{{gpu: {groups[0][0]}, ...}}, {{gpu: {groups[1][0]}}}])")
    by_gpu = {gpu: (members, taint) for gpu, members, taint in groups}
    for gpu, (members, _) in by_gpu.items():
        cluster.pool_for(gpu, f"{members[0][0]}.gpu")  # every entry's GPU has a pool (when gpuPools is set)
    # With gpuPools the pools' order names the groups (its first keeps the single-target names), so adding or removing an
    # entry never renames another GPU's node group; without it, the entries' order does (one GPU: always "gpu").
    order = [p.gpu for p in cluster.gpu_pools] or list(by_gpu)
    pools: list[GpuPool] = []
    for gpu in order:
        pcfg, key = cluster.pool_for(gpu)
        name = pool_name(gpu, not pools)
        if gpu not in by_gpu:
            pools.append(build_gpu_pool(pcfg, gpu, None, f"pool {gpu}", {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}, key, name))
            continue
        members, taint = by_gpu[gpu]
        parts = [(n, dgd) for _, n, dgd in members]
        bad = _untolerated(parts, taint)
        if bad:
            raise ConfigError(f"{members[0][0]}: the {gpu} node group is tainted {taint['key']}={taint['value']}, which "
                              f"{', '.join(bad)} do not tolerate; entries of one GPU share its node group")
        pools.append(build_gpu_pool(pcfg, gpu, combined_dgd(parts), ", ".join(k for k, _, _ in members), taint, key, name))
    if len(pools) > 1:  # a worker that does not select its GPU could land on another GPU's nodes
        for pool in pools:
            for _, _, dgd in by_gpu.get(pool.gpu, ([], None))[0]:
                pin_gpu_product(dgd, pool.shape.product)
    for pool in pools:  # workers on Karpenter pools: consolidation never takes a node from under a serving worker
        if pool.capacity == "karpenter":
            from stacks.cluster.karpenter import add_do_not_disrupt

            for _, _, dgd in by_gpu.get(pool.gpu, ([], None))[0]:
                add_do_not_disrupt(dgd)
    return assemble_plan(stack, cluster, pools, protect_cache)


# --------------------------------------------------------------------------- serving on a cluster stack (mode: stack)

@dataclass
class ClusterStackPlan:
    """A serving stack on the cluster of a cluster-only stack (``cluster.mode: stack``): what its ``up`` checks against
    the referenced ``nodePools`` and ``storageClassName`` (known only as Outputs), and the pull secrets it creates."""

    stack: str  # org/project/name
    requirements: list[dict]  # per GPU: gpu, product, dgd (the sum of its entries), efa_per_gpu, entries
    storage_class: Optional[str]  # the class the cache claim asks for (None: no claim of the stack's own)
    notes: dict[str, Any] = field(default_factory=dict)


def plan_on_cluster_stack(cfg, cluster, raw: dict, secret_keys, require_secrets: bool = True):
    """The serving plan of one entry on a cluster stack's EKS cluster: EFA per GPU of the GPU's default instance (checked
    against the pool at ``up``), the download Job on the system node group, GPU workers pinned to their GPU (the cluster
    may have several GPU node groups), pull secrets the stack creates in its namespaces. Returns ``(plan, serving)``."""
    from stacks.registry import GPUS
    from stacks.serving import build_plan, select_target

    target = select_target(cfg)
    check_fabric_on_eks(target, cfg.fabric_profile)
    for key in (NGC_KEY, PULL_SECRET_KEY):
        if key in (raw or {}):
            raise ConfigError(f"{NS}:{key} is set in plain text; set it as a secret: `pulumi config set --secret {NS}:{key} <value>`")
    if require_secrets and cfg.image_pull_secrets and not {NGC_KEY, PULL_SECRET_KEY} & set(secret_keys):
        raise ConfigError(f"{NS}:{NGC_KEY} is not set, but {NS}:imagePullSecrets names {list(cfg.image_pull_secrets)}, which this stack creates "
                          f"in its namespaces on the cluster of {cluster.stack}; run `pulumi config set --secret {NS}:{NGC_KEY} <NGC API key>`, "
                          f"or remove {NS}:imagePullSecrets for public images")
    try:
        shape = shape_for(target.gpu)
    except ValueError as e:
        raise ConfigError(f"{NS}:gpu: {target.gpu!r} cannot run on an EKS cluster stack: {e}") from None
    storage_class = cfg.storage.class_name or "efs-model-cache"
    serving = build_plan(cfg, default_storage_class=storage_class, job_node_selector={POOL_LABEL: "system"}, efa_per_gpu=shape.efa_per_gpu)
    pin_gpu_product(serving.dgd, GPUS[target.gpu].label)
    ns = serving.dgd["metadata"]["namespace"]
    plan = ClusterStackPlan(stack=cluster.stack, requirements=[], storage_class=storage_class if serving.cache_pvc else None,
                            notes={"pull_secrets": [pull_secret(n, ns) for n in cfg.image_pull_secrets], "efa_per_gpu": shape.efa_per_gpu})
    return plan, serving


def combined_stack_plan(cluster, entries: list, plans: list[ClusterStackPlan]) -> ClusterStackPlan:
    """All entries of a serving stack on a cluster stack: requirements per GPU (the sum of the entries' DGDs), every
    namespace's pull secrets once, the storage class of the claims (one class: the cluster stack has one)."""
    from stacks.registry import GPUS

    by_gpu: dict[str, list] = {}
    for e, cp in zip(entries, plans):
        by_gpu.setdefault(e.plan.target.gpu, []).append((e, cp))
    reqs = []
    for gpu, members in by_gpu.items():
        reqs.append({"gpu": gpu, "product": GPUS[gpu].label, "efa_per_gpu": members[0][1].notes["efa_per_gpu"],
                     "entries": [e.key for e, _ in members], "dgd": combined_dgd([(e.name, e.plan.dgd) for e, _ in members])})
    seen, pulls = set(), []
    for cp in plans:
        for obj in cp.notes.get("pull_secrets") or []:
            k = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if k not in seen:
                seen.add(k)
                pulls.append(obj)
    classes = [cp.storage_class for cp in plans if cp.storage_class]
    return ClusterStackPlan(stack=cluster.stack, requirements=reqs, storage_class=classes[0] if classes else None,
                            notes={"pull_secrets": pulls})


def capacity_shortfall(requirements: list[dict], pools: Any, stack: str) -> Optional[str]:
    """The cluster stack's ``nodePools`` against the serving entries (pure; the wiring calls it on the resolved
    output): a message naming the pool and the shortfall, or None when every GPU's entries fit its pool."""
    if not isinstance(pools, list) or not all(isinstance(p, dict) for p in pools):
        return (f"{NS}:cluster.stack: {stack} exports no nodePools list (got {type(pools).__name__}); "
                "is it a cluster-only stack of this project that has been `pulumi up`-ed?")
    out = []
    for req in requirements:
        pool = next((p for p in pools if p.get("gpu") == req["gpu"]), None)
        if pool is None:
            out.append(f"{', '.join(req['entries'])}: {stack} has no {req['gpu']} pool (pools: "
                       f"{', '.join(str(p.get('gpu')) for p in pools) or 'none'}); add {{gpu: {req['gpu']}, nodes: N}} to its {NS}:cluster.gpuPools")
            continue
        alloc = {k: int(v) for k, v in (pool.get("allocatable") or {}).items()}
        gpus_per_node = alloc.get("nvidia.com/gpu", 0)
        efa = alloc.get("vpc.amazonaws.com/efa", 0)
        if any(c for c in req["dgd"]["spec"]["components"] if pod_requests(c["podTemplate"]["spec"]).get("vpc.amazonaws.com/efa")) \
                and gpus_per_node and efa // gpus_per_node != req["efa_per_gpu"]:
            out.append(f"pool {pool.get('name')} ({pool.get('instanceType')}): {efa // gpus_per_node} EFA per GPU, the entries "
                       f"{', '.join(req['entries'])} request {req['efa_per_gpu']} per GPU (the default {req['gpu']} instance)")
            continue
        taint = pool.get("taint")
        bad = _untolerated([("", req["dgd"])], taint) if isinstance(taint, dict) and taint.get("key") else []
        if bad:
            out.append(f"pool {pool.get('name')}: tainted {taint['key']}={taint['value']}, which {', '.join(b.lstrip('/') for b in bad)} do not tolerate")
        needed, too_big = pack(req["dgd"], alloc)
        count = int(pool.get("count") or 0)
        if too_big:
            out.append(f"pool {pool.get('name')} ({pool.get('instanceType')}): no node holds " + "; ".join(too_big))
        elif needed > count:
            gpus = catalog.gpus_needed(req["dgd"])
            out.append(f"pool {pool.get('name')} ({count} x {pool.get('instanceType')}) cannot hold {', '.join(req['entries'])}: they need "
                       f"{needed} nodes ({gpus} GPUs), {needed - count} more; raise {NS}:cluster.gpuPools nodes of {req['gpu']} in {stack}")
    if not out:
        return None
    return f"{NS}:cluster.stack: the entries do not fit the cluster of {stack}:\n  " + "\n  ".join(out)
