"""Cluster plans: EKS, node pools, Karpenter, the platform and device-plugin charts, scheduling checks. May
import the registry, the catalog and the config (stacks/config; ``EksConfig``, the EKS keys, is
stacks/config/eks.py and re-exported here).

Pure plan of the cluster layer: EKS with a system and a GPU node group, EFA, storage.

``build_cluster_plan`` turns the stack's ``dynamo:cluster`` settings and the chosen
target into plain data (kwargs for pulumi-aws constructors and Kubernetes objects);
``components/cluster.py`` only wires that data into resources. ``node_shape`` says
what a node of the GPU group offers the scheduler, so tests can check that every
target's workers fit the group they will land on.

The EKS plan, by concern (each module imports only the ones above it):

- ``addons``: the pinned EKS add-on versions;
- ``storage``: EFS / FSx for Lustre, the cache StorageClass and the FSx static PersistentVolume;
- ``pools``: GPU node groups (launch templates, EFA, capacity types, scaling), ``NodeShape`` and ``pack``;
- ``network``: subnets, NAT gateways, S3 / ECR endpoints, the fabric EKS offers;
- ``dra``: the NVIDIA DRA driver and GB200 ComputeDomains;
- ``access``: access entries, Secrets encryption (KMS) and control-plane logs;
- ``pull_secrets``: the image pull Secrets and secret keys of a new cluster;
- ``plan``: ``ClusterPlan``, ``assemble_plan``, ``build_cluster_plan`` and the other plan builders, ``plan_eks``;
- ``cluster_stack``: serving on a cluster-only stack's cluster (``cluster.mode: stack``).

This package re-exports their public names: callers import them from ``stacks.cluster``.
"""

from __future__ import annotations

from stacks.config.eks import (
    AWS_REGIONS,
    CONTROL_PLANE_LOG_TYPES,
    DEFAULT_CONTROL_PLANE_LOGS,
    EFS_PROVISIONED_MIBPS,
    KARPENTER_KEYS,
    LOG_RETENTION_DAYS,
    MAX_KARPENTER_NODES,
    MAX_NODES_PER_NODEGROUP,
    POOL_KEYS,
    PRIVATE_VPC_RANGES,
    AccessEntryConfig,
    EksConfig,
    GpuPoolConfig,
    apply_aws_region,
    check_cache_in_local_zone,
    check_karpenter_keys,
    check_kubernetes_step,
    kubernetes_versions,
    missing_region_message,
    resolve_region,
)
from stacks.cluster.addons import addon_versions
from stacks.cluster.storage import EFS_CLIENT_MBPS, FSX_THROUGHPUT_PER_TIB, cache_class_name
from stacks.cluster.storage import _gib  # noqa: F401  (tests read it from here)
from stacks.cluster.pools import (
    AMI_TYPE,
    EFA_LABEL,
    GPU_TAINT_KEY,
    NODE_RESOURCES,
    NODEADM_USER_DATA,
    POOL_LABEL,
    GpuPool,
    NodeShape,
    build_gpu_pool,
    combined_dgd,
    gpu_taint_for,
    network_interfaces,
    pack,
    pin_gpu_product,
    pod_requests,
    pool_name,
    scaling_config,
    tolerates,
)
from stacks.cluster.network import (
    ECR_ENDPOINT_SERVICES,
    EKS_FABRICS,
    INTERFACE_ENDPOINT_USD_PER_AZ_HOUR,
    NAT_USD_PER_GB,
    NAT_USD_PER_HOUR,
    check_fabric_on_eks,
    network_plan,
)
from stacks.cluster.dra import (
    COMPUTE_DOMAIN_CLAIM,
    DRA_CHARTS,
    apply_compute_domain,
    compute_domain,
    dra_driver_spec,
    dra_driver_values,
)
from stacks.cluster.access import ACCESS_POLICIES, SECRETS_KEY_ACTIONS, access_plan, control_plane_plan
from stacks.cluster.pull_secrets import (
    NGC_KEY,
    NGC_REGISTRY,
    PULL_SECRET_KEY,
    check_secrets_on_new_cluster,
    dockerconfigjson,
    pull_secret,
)
from stacks.cluster.plan import (
    ClusterPlan,
    assemble_plan,
    build_cluster_only_plan,
    build_cluster_plan,
    build_pools_plan,
    node_pools,
    plan_eks,
)
from stacks.cluster.cluster_stack import ClusterStackPlan, capacity_shortfall, combined_stack_plan, plan_on_cluster_stack

__all__ = [
    "AWS_REGIONS",
    "CONTROL_PLANE_LOG_TYPES",
    "DEFAULT_CONTROL_PLANE_LOGS",
    "EFS_PROVISIONED_MIBPS",
    "KARPENTER_KEYS",
    "LOG_RETENTION_DAYS",
    "MAX_KARPENTER_NODES",
    "MAX_NODES_PER_NODEGROUP",
    "POOL_KEYS",
    "PRIVATE_VPC_RANGES",
    "AccessEntryConfig",
    "EksConfig",
    "GpuPoolConfig",
    "apply_aws_region",
    "check_cache_in_local_zone",
    "check_karpenter_keys",
    "check_kubernetes_step",
    "kubernetes_versions",
    "missing_region_message",
    "resolve_region",
    "addon_versions",
    "EFS_CLIENT_MBPS",
    "FSX_THROUGHPUT_PER_TIB",
    "cache_class_name",
    "AMI_TYPE",
    "EFA_LABEL",
    "GPU_TAINT_KEY",
    "NODE_RESOURCES",
    "NODEADM_USER_DATA",
    "POOL_LABEL",
    "GpuPool",
    "NodeShape",
    "build_gpu_pool",
    "combined_dgd",
    "gpu_taint_for",
    "network_interfaces",
    "pack",
    "pin_gpu_product",
    "pod_requests",
    "pool_name",
    "scaling_config",
    "tolerates",
    "ECR_ENDPOINT_SERVICES",
    "EKS_FABRICS",
    "INTERFACE_ENDPOINT_USD_PER_AZ_HOUR",
    "NAT_USD_PER_GB",
    "NAT_USD_PER_HOUR",
    "check_fabric_on_eks",
    "network_plan",
    "COMPUTE_DOMAIN_CLAIM",
    "DRA_CHARTS",
    "apply_compute_domain",
    "compute_domain",
    "dra_driver_spec",
    "dra_driver_values",
    "ACCESS_POLICIES",
    "SECRETS_KEY_ACTIONS",
    "access_plan",
    "control_plane_plan",
    "NGC_KEY",
    "NGC_REGISTRY",
    "PULL_SECRET_KEY",
    "check_secrets_on_new_cluster",
    "dockerconfigjson",
    "pull_secret",
    "ClusterPlan",
    "assemble_plan",
    "build_cluster_only_plan",
    "build_cluster_plan",
    "build_pools_plan",
    "node_pools",
    "plan_eks",
    "ClusterStackPlan",
    "capacity_shortfall",
    "combined_stack_plan",
    "plan_on_cluster_stack",
]
