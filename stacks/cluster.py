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
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from . import catalog
from .catalog.model import Target
from .config import NS, ConfigError, _Model
from .gpus import InstanceShape, nodes_needed, shape_for

GPU_TAINT_KEY = "nvidia.com/gpu"
POOL_LABEL = "dynamo.nvidia.com/pool"
EFA_LABEL = "vpc.amazonaws.com/efa.present"
AMI_TYPE = {"x86_64": "AL2023_x86_64_NVIDIA", "arm64": "AL2023_ARM_64_NVIDIA"}


class EksConfig(_Model):
    """``dynamo:cluster`` settings for ``mode: eks``."""

    region: str = "us-east-1"
    kubernetes_version: str = "1.33"
    vpc_cidr: str = "10.0.0.0/16"
    availability_zones: tuple[str, ...] = ()  # default: <region>a, <region>b, <region>c
    gpu_availability_zone: Optional[str] = None  # default: the first zone (or the reservation's)
    instance_type: Optional[str] = None  # default: the GPU catalog's instance for the target's GPU
    gpu_nodes: Optional[int] = None  # default: what the target needs
    efa: Optional[bool] = None  # default: on when the instance supports it
    placement_group: bool = True
    market_type: Literal["on-demand", "capacity-block"] = "on-demand"
    capacity_reservation_id: Optional[str] = None
    system_instance_type: str = "m7i.2xlarge"
    system_nodes: int = Field(default=2, ge=1)
    cache_storage: Literal["efs", "fsx-lustre"] = "efs"
    efs_throughput_mode: Literal["elastic", "bursting", "provisioned"] = "elastic"
    fsx_storage_capacity_gib: int = 1200
    nvidia_stack: Literal["device-plugin", "gpu-operator"] = "device-plugin"
    admin_principal_arns: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check(self):
        try:
            net = ipaddress.ip_network(self.vpc_cidr)
        except ValueError:
            raise ValueError(f"vpcCidr {self.vpc_cidr!r} is not a CIDR like 10.0.0.0/16") from None
        if net.prefixlen > 20:
            raise ValueError(f"vpcCidr {self.vpc_cidr!r} is too small: use /20 or larger for 2x{len(self.zones())} subnets")
        if self.gpu_availability_zone and self.gpu_availability_zone not in self.zones():
            raise ValueError(f"gpuAvailabilityZone {self.gpu_availability_zone!r} is not one of availabilityZones {list(self.zones())}")
        if self.market_type == "capacity-block" and not self.capacity_reservation_id:
            raise ValueError("marketType capacity-block needs capacityReservationId (the Capacity Block's reservation id)")
        return self

    def zones(self) -> tuple[str, ...]:
        return self.availability_zones or tuple(f"{self.region}{s}" for s in "abc")


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
    private_subnets: list[dict]
    addons: list[str]
    system_nodegroup: dict
    gpu_nodegroup: dict
    launch_template: dict
    placement_group: Optional[dict]
    shape: InstanceShape
    gpu_shape: NodeShape
    storage: dict
    storage_class: dict
    nvidia_stack: str
    efa: bool
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


def _subnets(cidr: str, zones: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """Split the VPC into /4-smaller private subnets (big, for pods) and small public ones."""
    net = ipaddress.ip_network(cidr)
    halves = list(net.subnets(prefixlen_diff=1))
    private = list(halves[0].subnets(prefixlen_diff=2))
    public = list(halves[1].subnets(prefixlen_diff=4))
    return (
        [{"availability_zone": z, "cidr_block": str(public[i])} for i, z in enumerate(zones)],
        [{"availability_zone": z, "cidr_block": str(private[i])} for i, z in enumerate(zones)],
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
    """One interface per EFA-capable network card: the first ``efa`` (EFA + ENA), the rest ``efa-only``."""
    if not efa:
        return [{"device_index": 0, "network_card_index": 0, "delete_on_termination": True}]
    out = []
    for i in range(shape.efa_interfaces):
        card = i * (shape.network_cards // shape.efa_interfaces) if shape.network_cards > shape.efa_interfaces else i
        out.append(
            {
                "device_index": 0,
                "network_card_index": card,
                "interface_type": "efa" if i == 0 else "efa-only",
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


def build_cluster_plan(stack: str, cfg: EksConfig, target: Target) -> ClusterPlan:
    try:
        shape = shape_for(target.gpu, cfg.instance_type)
    except ValueError as e:
        raise ConfigError(f"{NS}:cluster.instanceType: {e}") from None
    zones = cfg.zones()
    gpu_zone = cfg.gpu_availability_zone or zones[0]
    efa = shape.efa_interfaces > 0 if cfg.efa is None else cfg.efa
    dgd = next(d for d in catalog.recipe_objects(target) if d["kind"] == "DynamoGraphDeployment")
    gpus = catalog.gpus_needed(dgd)
    count = cfg.gpu_nodes or nodes_needed(gpus, shape)
    if count * shape.gpus_per_node < gpus:
        raise ConfigError(f"{NS}:cluster.gpuNodes: {count} nodes x {shape.gpus_per_node} GPUs < {gpus} GPUs that {target.id} needs; use at least {nodes_needed(gpus, shape)}")
    public, private = _subnets(cfg.vpc_cidr, zones)
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
    placement_group = {"strategy": "cluster"} if cfg.placement_group else None
    if cfg.capacity_reservation_id:
        lt["capacity_reservation_specification"] = {"capacity_reservation_target": {"capacity_reservation_id": cfg.capacity_reservation_id}}
    if cfg.market_type == "capacity-block":
        lt["instance_market_options"] = {"market_type": "capacity-block"}
    capacity = {"nvidia.com/gpu": shape.gpus_per_node}
    if efa:
        capacity["vpc.amazonaws.com/efa"] = shape.efa_interfaces
    gpu_ng = {
        "instance_types": [shape.instance_type],
        "ami_type": AMI_TYPE[shape.arch],
        "capacity_type": "CAPACITY_BLOCK" if cfg.market_type == "capacity-block" else "ON_DEMAND",
        "scaling_config": {"desired_size": count, "min_size": 0 if cfg.market_type == "capacity-block" else count, "max_size": count},
        "labels": labels,
        "taints": [taint],
        "availability_zone": gpu_zone,
        "update_config": {"max_unavailable": 1},
    }
    sys_ng = {
        "instance_types": [cfg.system_instance_type],
        "ami_type": "AL2023_x86_64_STANDARD",
        "capacity_type": "ON_DEMAND",
        "scaling_config": {"desired_size": cfg.system_nodes, "min_size": cfg.system_nodes, "max_size": cfg.system_nodes + 2},
        "labels": {POOL_LABEL: "system"},
    }
    if cfg.cache_storage == "efs":
        storage = {"kind": "efs", "throughput_mode": cfg.efs_throughput_mode, "performance_mode": "generalPurpose", "encrypted": True}
        sc = _storage_class("efs-model-cache", "efs.csi.aws.com", {"provisioningMode": "efs-ap", "directoryPerms": "700", "fileSystemId": "<efs-id>"})
        csi = "aws-efs-csi-driver"
    else:
        storage = {"kind": "fsx-lustre", "deployment_type": "PERSISTENT_2", "storage_capacity": cfg.fsx_storage_capacity_gib,
                   "per_unit_storage_throughput": 250, "availability_zone": gpu_zone}
        sc = _storage_class("fsx-model-cache", "fsx.csi.aws.com", {"fileSystemId": "<fsx-id>", "subnetId": "<subnet-id>", "securityGroupIds": "<sg-id>"})
        csi = "aws-fsx-csi-driver"
    return ClusterPlan(
        name=name,
        region=cfg.region,
        kubernetes_version=cfg.kubernetes_version,
        vpc={"cidr_block": cfg.vpc_cidr, "enable_dns_hostnames": True, "enable_dns_support": True},
        public_subnets=public,
        private_subnets=private,
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
        nvidia_stack=cfg.nvidia_stack,
        efa=efa,
        admin_principal_arns=cfg.admin_principal_arns,
        notes={"gpus": gpus},
    )
