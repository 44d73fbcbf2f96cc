"""Pure plan of the cluster layer: EKS with a system and a GPU node group, EFA, storage.

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

from . import catalog
from .catalog.model import Target
from .config import NS, ConfigError, _Model
from .gpus import InstanceShape, shape_for

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


def _eks_pin(key: str):
    from .versions import versions

    return versions()["eks"][key]


def kubernetes_versions() -> tuple[str, ...]:
    return tuple(_eks_pin("kubernetesVersions"))


class EksConfig(_Model):
    """``dynamo:cluster`` settings for ``mode: eks``. Every check raises before any resource is registered;
    the message names ``dynamo:cluster.<key>``, the value and the valid choices."""

    region: str = "us-east-1"
    kubernetes_version: str = Field(default_factory=lambda: str(_eks_pin("kubernetesVersion")))
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
    system_instance_type: str = "m7i.2xlarge"
    system_nodes: int = Field(default=2, ge=1, le=MAX_NODES_PER_NODEGROUP)
    cache_storage: Literal["efs", "fsx-lustre"] = "efs"
    efs_throughput_mode: Literal["elastic", "bursting", "provisioned"] = "elastic"
    efs_provisioned_throughput_mibps: Optional[int] = Field(default=None, ge=1, le=10240)
    fsx_storage_capacity_gib: int = 2400
    fsx_throughput_per_tib: Literal[125, 250, 500, 1000] = 1000
    nvidia_stack: Literal["device-plugin", "gpu-operator"] = "device-plugin"
    admin_principal_arns: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check(self):
        k = f"{NS}:cluster"
        if self.region not in AWS_REGIONS:
            raise ValueError(f"{k}.region: {self.region!r} is not an AWS Region; choose one of: {', '.join(AWS_REGIONS)}")
        if self.kubernetes_version not in kubernetes_versions():
            raise ValueError(f"{k}.kubernetesVersion: {self.kubernetes_version!r} is not an EKS version in standard support; "
                             f"choose one of: {', '.join(kubernetes_versions())} (stacks/versions.yaml eks.kubernetesVersions)")
        try:
            net = ipaddress.ip_network(self.vpc_cidr)
        except ValueError:
            raise ValueError(f"{k}.vpcCidr: {self.vpc_cidr!r} is not a CIDR like 10.0.0.0/16") from None
        if net.version != 4 or net.prefixlen > 20 or net.prefixlen < 16:
            raise ValueError(f"{k}.vpcCidr: {self.vpc_cidr!r} must be an IPv4 network from /16 to /20 (VPC sizes AWS allows, room for 2 subnets per zone)")
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
        if self.efs_throughput_mode == "provisioned" and self.efs_provisioned_throughput_mibps is None:
            raise ValueError(f"{k}.efsThroughputMode: provisioned needs {k}.efsProvisionedThroughputMibps (1-10240), "
                             "or choose elastic (the default) or bursting")
        if self.efs_throughput_mode != "provisioned" and self.efs_provisioned_throughput_mibps is not None:
            raise ValueError(f"{k}.efsProvisionedThroughputMibps: only applies with efsThroughputMode: provisioned "
                             f"(got efsThroughputMode {self.efs_throughput_mode!r})")
        cap = self.fsx_storage_capacity_gib
        if cap not in (1200, 2400) and (cap <= 0 or cap % 2400):
            raise ValueError(f"{k}.fsxStorageCapacityGib: {cap} is not a PERSISTENT_2 SSD size; choose 1200, 2400 or a multiple of 2400 "
                             "(FSx CreateFileSystem StorageCapacity)")
        return self

    def zones(self) -> tuple[str, ...]:
        return self.availability_zones or tuple(f"{self.region}{s}" for s in "abc")

    def gpu_zone(self) -> str:
        return self.gpu_availability_zone or self.zones()[0]

    def gpu_zone_is_local(self) -> bool:
        return self.gpu_zone() not in self.zones()


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


def resolve_region(cfg: EksConfig, cluster_raw: dict, aws_region: Optional[str]) -> EksConfig:
    """``aws:region`` and ``dynamo:cluster.region`` must agree; the program's AWS provider uses the result.
    Without ``dynamo:cluster.region``, ``aws:region`` sets it."""
    if not aws_region:
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
    ``stacks.scheduling.check_target`` checks), and the replicas no single node can hold."""
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


def dra_driver_spec():
    """The NVIDIA DRA driver for ComputeDomains only (GPU allocation stays with the device plugin); host driver
    root / as on the EKS AL2023 NVIDIA AMI. Pinned in versions.yaml charts.nvidia-dra-driver-gpu."""
    from .platform import HelmSpec, chart_pin

    pin = chart_pin("nvidia-dra-driver-gpu")
    return HelmSpec(name="nvidia-dra-driver-gpu", chart=pin["chart"], version=str(pin["version"]), repo=pin["repo"],
                    namespace="nvidia-dra-driver-gpu", values={"nvidiaDriverRoot": "/", "resources": {"gpus": {"enabled": False}}})


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


def build_cluster_plan(stack: str, cfg: EksConfig, target: Target, dgd: Optional[dict] = None, protect_cache: bool = True) -> ClusterPlan:
    """``dgd``: the final DGD (after ``replicas``, images and the fabric profile); node counts, EFA and the
    GB200 ComputeDomain follow it. Defaults to the catalog's DGD for the target."""
    k = f"{NS}:cluster"
    try:
        shape = shape_for(target.gpu, cfg.instance_type)
    except ValueError as e:
        raise ConfigError(f"{k}.instanceType: {e}") from None
    dgd = dgd or _dgd(target)
    zones = cfg.zones()
    gpu_zone = cfg.gpu_zone()
    local_zone = gpu_zone if cfg.gpu_zone_is_local() else None
    efa = shape.efa_interfaces > 0 if cfg.efa is None else cfg.efa
    efa_workers = [c["name"] for c in dgd["spec"]["components"] if pod_requests(c["podTemplate"]["spec"]).get("vpc.amazonaws.com/efa")]
    if efa_workers and not efa:
        raise ConfigError(f"{k}.efa: false, but {', '.join(efa_workers)} of {target.id} request vpc.amazonaws.com/efa (KV transfer over EFA); "
                          f"remove {k}.efa (EFA is on by default for {shape.instance_type}) or choose an aggregated target")
    if shape.ultraserver and cfg.market_type != "capacity-block":
        raise ConfigError(f"{k}.marketType: {cfg.market_type!r}: {shape.instance_type} is sold only in UltraServer Capacity Blocks "
                          f"(u-p6e-gb200x36, u-p6e-gb200x72); set {k}.marketType: capacity-block and {k}.capacityReservationId "
                          "(EKS user guide, ml-eks-nvidia-ultraserver)")
    capacity = {"nvidia.com/gpu": shape.gpus_per_node}
    if efa:
        capacity["vpc.amazonaws.com/efa"] = shape.efa_interfaces
    needed, too_big = pack(dgd, capacity)
    if too_big:
        raise ConfigError(f"{k}.instanceType: {shape.instance_type}: no single node holds " + "; ".join(too_big)
                          + f" ({target.id}); choose a larger instance type of {target.gpu} or fewer GPUs per worker")
    needed = max(needed, 1)
    gpus = catalog.gpus_needed(dgd)
    count = cfg.gpu_nodes or needed
    if count < needed:
        raise ConfigError(f"{k}.gpuNodes: {count} x {shape.instance_type} cannot hold {target.id} as configured "
                          f"({gpus} GPUs, EFA {shape.efa_per_gpu}/GPU, replicas included); use at least {needed}")
    if shape.ultraserver and count > 18:
        raise ConfigError(f"{k}.gpuNodes: {count}: an UltraServer holds at most 18 {shape.instance_type} (u-p6e-gb200x72)")
    public, private, gpu_subnet = _subnets(cfg.vpc_cidr, zones, local_zone)
    name = f"dynamo-{stack}"
    taint = gpu_taint_for(target)
    labels = {
        POOL_LABEL: "gpu",
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
    placement_group = {"strategy": "cluster"} if (cfg.placement_group is not False and not cfg.capacity_reservation_id) else None
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
        "scaling_config": {"desired_size": count, "min_size": 0 if capacity_block else count, "max_size": count},
        "labels": labels,
        "taints": [taint],
        "availability_zone": gpu_zone,
        "update_config": {"max_unavailable": 1},
    }
    if not capacity_block:
        gpu_ng = {"instance_types": [shape.instance_type], **gpu_ng}
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
    dra = shape.ultraserver
    cd = None
    if dra and target.topology == "disagg" and needed > 1:
        cd = compute_domain(f"{name}-imex", (dgd.get("metadata") or {}).get("namespace") or "default", needed)
    return ClusterPlan(
        name=name,
        region=cfg.region,
        kubernetes_version=cfg.kubernetes_version,
        vpc={"cidr_block": cfg.vpc_cidr, "enable_dns_hostnames": True, "enable_dns_support": True},
        public_subnets=public,
        private_subnets=private,
        gpu_subnet=gpu_subnet,
        addons=["vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", csi],
        system_nodegroup=sys_ng,
        gpu_nodegroup=gpu_ng,
        launch_template=lt,
        placement_group=placement_group,
        shape=shape,
        gpu_shape=NodeShape(
            name="gpu",
            labels={**labels, "kubernetes.io/arch": shape.kubernetes_arch, "node.kubernetes.io/instance-type": shape.instance_type},
            taints=[{"key": taint["key"], "value": taint["value"], "effect": "NoSchedule"}],
            capacity=capacity,
            count=count,
        ),
        storage=storage,
        storage_class=sc,
        static_pv=static_pv,
        cache_class_name=class_name,
        protect_cache=protect_cache,
        nvidia_stack=cfg.nvidia_stack,
        efa=efa,
        dra_driver=dra,
        compute_domain=cd,
        admin_principal_arns=cfg.admin_principal_arns,
        notes={"gpus": gpus, "nodes_needed": needed, "fsx_mbps": fsx_mbps, "efa_per_gpu": shape.efa_per_gpu},
    )


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
    from .serving import build_plan, select_target

    cluster = resolve_region(cluster, (raw or {}).get("cluster") or {}, aws_region)
    target = select_target(cfg)
    check_fabric_on_eks(target, cfg.fabric_profile)
    check_secrets_on_new_cluster(cfg.hf_token_secret_name, cfg.image_pull_secrets if require_secrets else (), raw, set(secret_keys))
    try:
        shape = shape_for(target.gpu, cluster.instance_type)
    except ValueError as e:
        raise ConfigError(f"{NS}:cluster.instanceType: {e}") from None
    own_class = cache_class_name(cluster)
    if cfg.storage.class_name and cfg.storage.class_name != own_class and not cfg.storage.existing_claim:
        raise ConfigError(f"{NS}:storage.className: {cfg.storage.class_name!r} does not exist on the EKS cluster this `pulumi up` creates, "
                          f"so the cache claim would stay Pending; remove it (the stack's class is {own_class!r}, "
                          f"from {NS}:cluster.cacheStorage: {cluster.cache_storage}) or set it to {own_class!r}")
    serving = build_plan(cfg, default_storage_class=cache_class_name(cluster), job_node_selector={POOL_LABEL: "system"},
                         efa_per_gpu=shape.efa_per_gpu)
    cp = build_cluster_plan(stack, cluster, target, dgd=serving.dgd, protect_cache=cfg.storage.protect)
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
