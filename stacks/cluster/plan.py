"""The assembled EKS cluster plan: ``ClusterPlan``, ``assemble_plan`` (VPC, system nodes, add-ons, cache storage,
Karpenter, access and control plane around the GPU node groups), ``build_cluster_plan`` (one target),
``build_cluster_only_plan`` (a cluster-only stack), ``build_pools_plan`` (several GPU node groups) and ``plan_eks``
(everything an EKS stack checks and plans before any resource)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from stacks.catalog.model import Target
from stacks.config.keys import NS, ConfigError
from stacks.registry.gpus import InstanceShape, shape_for
from stacks.config.eks import POOL_KEYS, EksConfig, resolve_region
from stacks.cluster.access import access_plan, control_plane_plan
from stacks.cluster.addons import addon_versions
from stacks.cluster import identity
from stacks.cluster.dra import apply_compute_domain, compute_domain
from stacks.cluster.network import _subnets, check_fabric_on_eks, network_plan
from stacks.cluster.pools import (
    GPU_TAINT_KEY,
    POOL_LABEL,
    GpuPool,
    NodeShape,
    _dgd,
    _key,
    _untolerated,
    build_gpu_pool,
    combined_dgd,
    gpu_taint_for,
    pin_gpu_product,
    pool_name,
)
from stacks.cluster.pull_secrets import check_secrets_on_new_cluster, pull_secret
from stacks.cluster.storage import _fsx_static_pv, _gib, _storage_class, cache_class_name, efs_class_parameters


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
    fsx_mbps: Optional[float] = None  # FSx for Lustre: the file system's throughput (MB/s), None on EFS
    # The image pull Secrets this stack creates in its serving namespaces (set by plan_eks / stacks.program).
    pull_secrets: list[dict] = field(default_factory=list)
    addon_versions: dict[str, str] = field(
        default_factory=dict
    )  # add-on -> pinned version (stacks/registry/versions.yaml eks.addons)
    # Who holds which AWS credentials (stacks/cluster/identity.py): the node roles' managed policies; add-on ->
    # (service account, policy) of its own Pod Identity role; add-on -> its configuration values; the add-ons created
    # before any node group.
    node_policies: tuple[str, ...] = ()
    addon_identities: dict[str, tuple[str, str]] = field(default_factory=dict)
    addon_configuration: dict[str, dict] = field(default_factory=dict)
    addons_before_nodes: tuple[str, ...] = ()
    # Every GPU node group (one per gpuPools entry), the first one also as gpu_nodegroup, launch_template, placement_group,
    # shape and gpu_shape above (its resources keep the single-target names).
    gpu_pools: list["GpuPool"] = field(default_factory=list)
    # Egress and endpoints (``network_plan``): NAT gateways, the S3 gateway endpoint, ECR interface endpoints, the API
    # endpoint and the networks it admits, the security groups' rules and the warnings the wiring logs.
    network: dict[str, Any] = field(default_factory=dict)
    # stacks.cluster.karpenter.KarpenterPlan when a GPU pool has capacity: karpenter (its pools get no managed node group).
    karpenter: Optional[Any] = None
    # stacks.cluster.load_balancer.LoadBalancerControllerPlan when the front door needs an NLB (set by stacks.program).
    load_balancer_controller: Optional[Any] = None
    # Who may use the Kubernetes API (``access_plan``), Secrets envelope encryption and control-plane logs
    # (``control_plane_plan``).
    access: dict[str, Any] = field(default_factory=dict)
    control_plane: dict[str, Any] = field(default_factory=dict)
    # The system group's disk was set (dynamo:cluster.systemDiskGib): a change replaces the group. Unset, a running
    # group keeps the disk it has (the wiring ignores diskSize) and preflight says how to resize it.
    system_disk_set: bool = False

    # What the shell reads besides the fields above, derived from them here so components/cluster.py decides nothing.
    @property
    def tags(self) -> dict[str, str]:
        """The tag every AWS resource of the cluster carries (the preflight lookups filter on it)."""
        return {CLUSTER_TAG: self.name}

    @property
    def discovery_tags(self) -> dict[str, str]:
        """The tag Karpenter pools find their subnets and security groups by (EC2NodeClass selector terms), on the
        private subnets, the GPU Local Zone subnet and the EFA group; none without Karpenter, so those stacks keep
        their tags unchanged."""
        from stacks.cluster.karpenter import DISCOVERY_TAG

        return {DISCOVERY_TAG: self.name} if self.karpenter else {}

    @property
    def keep_network(self) -> bool:
        """A protected FSx cache keeps the network it sits in (its ENIs hold the subnet, the security group and the
        VPC): retaining those lets ``pulumi destroy`` finish. EFS mount targets are deleted, so EFS keeps none."""
        return self.protect_cache and self.storage["kind"] == "fsx-lustre"

    @property
    def cluster_policy_arn(self) -> str:
        """The EKS cluster role's managed policy."""
        return identity.managed_policy_arn(identity.CLUSTER_POLICY)

    @property
    def node_policy_arns(self) -> dict[str, str]:
        """The node roles' managed policies (``node_policies``), name -> ARN; the name is part of the resource name."""
        return {p: identity.managed_policy_arn(p) for p in self.node_policies}

    @property
    def addon_roles(self) -> dict[str, tuple[str, str]]:
        """Add-on -> (service account, managed policy ARN) of the add-ons with their own Pod Identity role."""
        return {a: (sa, identity.managed_policy_arn(policy)) for a, (sa, policy) in self.addon_identities.items()}

    @property
    def addons_after_nodes(self) -> list[str]:
        """The add-ons created once the system nodes run their pods: every add-on not in ``addons_before_nodes``."""
        return [a for a in self.addons if a not in self.addons_before_nodes]

    @property
    def file_system_args(self) -> dict[str, Any]:
        """The cache file system's constructor arguments from ``storage`` (without its kind, and without the FSx zone,
        which picks the subnet)."""
        return {k: v for k, v in self.storage.items() if k not in ("kind", "availability_zone")}


# Every AWS resource of the cluster carries it, with the cluster's name.
CLUSTER_TAG = "dynamo.nvidia.com/cluster"


# The system node group's root disk. EKS gives a managed node group without a launch template 20 GiB ("The default
# disk size is 20 GiB for Linux and Bottlerocket": EKS API reference, CreateNodegroup diskSize), which holds the OS,
# the kubelet and the platform's small images, but not a Dynamo runtime image: the frontends and some download Jobs
# pull the same multi-GB vllm-runtime / tensorrtllm-runtime image as the workers (ai-dynamo/dynamo#1058 measured the
# vLLM runtime image at 12.2 GB in 2025; the images have grown since, so 20 GiB each is an estimate). containerd keeps
# both an image's compressed layers and its unpacked snapshot (1.5x the image as a rough bound), and the kubelet starts
# deleting images at 85% disk use (KubeletConfiguration imageGCHighThresholdPercent, default 85), so the disk is sized
# to stay under it. A cluster stack's system nodes run its serving stacks' images, which it cannot see: it assumes three.
SYSTEM_BASE_GIB = 20
RUNTIME_IMAGE_GIB = 20
IMAGE_DISK_FACTOR = 1.5
IMAGE_GC_HIGH_THRESHOLD = 0.85
UNKNOWN_SYSTEM_IMAGES = 3


def system_images(dgds: list[dict]) -> set[str]:
    """The images the system nodes pull for these DGDs: every component that asks for no GPU (frontend, planner, router)
    runs there, and each entry's download Job (one more image: a small Python image or the runtime image)."""
    from stacks.catalog.fit import pod_requests

    out = {
        c["podTemplate"]["spec"]["containers"][0].get("image", "")
        for d in dgds
        for c in d["spec"]["components"]
        if not pod_requests(c["podTemplate"]["spec"]).get("nvidia.com/gpu")
    }
    return out | {f"download:{i}" for i in range(len(dgds))}


def system_disk_gib(images: Optional[int]) -> int:
    """The system group's root disk for ``images`` distinct images (None: a cluster stack's unknown serving images),
    rounded up to 10 GiB."""
    n = UNKNOWN_SYSTEM_IMAGES if images is None else images
    need = (SYSTEM_BASE_GIB + n * RUNTIME_IMAGE_GIB * IMAGE_DISK_FACTOR) / IMAGE_GC_HIGH_THRESHOLD
    return int(-(-need // 10) * 10)


def assemble_plan(
    stack: str,
    cfg: EksConfig,
    pools: list[GpuPool],
    protect_cache: bool = True,
    compute_domain_for: Optional[tuple[Target, dict]] = None,
    dgds: Optional[list[dict]] = None,
) -> ClusterPlan:
    """The cluster around its GPU node groups: VPC, system nodes, add-ons, cache storage. ``pools[0]`` is the
    first GPU group (today's resource names); ``compute_domain_for``: (target, dgd) of a GB200 target whose
    workers span nodes of one NVLink domain; ``dgds``: the DGDs the cluster serves (None: a cluster stack's), whose
    images size the system nodes' disk."""
    zones = cfg.zones()
    # A Local Zone GPU group (GB200 UltraServers) gets its own subnet; with gpuPools, the one Local Zone the pools name.
    local_zone = next((p.nodegroup["availability_zone"] for p in pools if p.nodegroup["availability_zone"] not in zones), None)
    gpu_zone = pools[0].nodegroup["availability_zone"]
    public, private, gpu_subnet = _subnets(cfg.vpc_cidr, zones, local_zone, cfg.subnet_layout)
    name = f"dynamo-{stack}"
    sys_ng = {
        "instance_types": [cfg.system_instance_type],
        "ami_type": "AL2023_x86_64_STANDARD",
        "version": cfg.kubernetes_version,  # node groups follow the control plane in the same `up` (see build_gpu_pool)
        "release_version": cfg.ami_release(),  # the pinned AMI release, as the GPU groups (see build_gpu_pool)
        "disk_size": cfg.system_disk_gib or system_disk_gib(None if dgds is None else len(system_images(dgds))),
        "capacity_type": "ON_DEMAND",
        "scaling_config": {"desired_size": cfg.system_nodes, "min_size": cfg.system_nodes, "max_size": cfg.system_nodes + 2},
        "labels": {POOL_LABEL: "system"},
    }
    static_pv = None
    sc = None
    if cfg.cache_storage == "efs":
        storage: dict[str, Any] = {
            "kind": "efs",
            "throughput_mode": cfg.efs_throughput_mode,
            "performance_mode": "generalPurpose",
            "encrypted": True,
        }
        if cfg.efs_provisioned_throughput_mibps is not None:
            storage["provisioned_throughput_in_mibps"] = cfg.efs_provisioned_throughput_mibps
        class_name = "efs-model-cache"
        sc = _storage_class(class_name, "efs.csi.aws.com", efs_class_parameters("<efs-id>"))
        csi = "aws-efs-csi-driver"
    else:
        # FSx for Lustre is an Availability Zone service: in the GPU zone, or the first zone when the GPUs are in a Local Zone.
        storage = {
            "kind": "fsx-lustre",
            "deployment_type": "PERSISTENT_2",
            "storage_capacity": cfg.fsx_storage_capacity_gib,
            "per_unit_storage_throughput": cfg.fsx_throughput_per_tib,
            "data_compression_type": "LZ4",
            "availability_zone": cfg.cache_availability_zone or (zones[0] if local_zone else gpu_zone),
        }
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
            cd = compute_domain(f"{name}-imex", (dgd.get("metadata") or {}).get("namespace") or "default")
    first = pools[0]
    addons = ["vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", csi]
    from stacks.cluster.karpenter import build_karpenter_plan, node_role_name, pool_objects

    # One NodePool per Karpenter pool (capacity "karpenter": the pools with karpenter settings).
    karpenter = build_karpenter_plan(
        name,
        cfg.region,
        [
            pool_objects(
                name,
                p.name,
                node_role_name(name, cfg.region),
                p.shape.instance_type,
                p.shape.kubernetes_arch,
                p.shape.gpus_per_node,
                p.karpenter["zone"],
                p.nodegroup["labels"],
                p.nodegroup["taints"][0],
                p.karpenter["max_nodes"],
                market_type=p.karpenter["market_type"],
                capacity_reservation_id=p.karpenter["capacity_reservation_id"],
                ami_alias=p.karpenter["ami_alias"],
                consolidate_after=p.karpenter["consolidate_after"],
                gpu=p.gpu,
                nodes_needed=p.nodes_needed,
                efa_cards=p.shape.efa_cards if p.efa else (),
                placeholder_nodes=p.nodes_running,
            )
            for p in pools
            if p.karpenter is not None
        ],
        system_nodes=cfg.system_nodes,
        system_selector={POOL_LABEL: "system"},
    )
    return ClusterPlan(
        name=name,
        region=cfg.region,
        kubernetes_version=cfg.kubernetes_version,
        vpc={"cidr_block": cfg.vpc_cidr, "enable_dns_hostnames": True, "enable_dns_support": True},
        public_subnets=public,
        private_subnets=private,
        gpu_subnet=gpu_subnet,
        network=network_plan(cfg),
        addons=addons,
        addon_versions=addon_versions(cfg.kubernetes_version, addons),  # refuses an add-on without a pin or a stated reason
        node_policies=identity.node_policies(cfg.ssm_access),
        addon_identities={a: identity.ADDON_IDENTITIES[a] for a in addons if a in identity.ADDON_IDENTITIES},
        addon_configuration={a: dict(identity.ADDON_CONFIGURATION[a]) for a in addons if a in identity.ADDON_CONFIGURATION},
        addons_before_nodes=tuple(a for a in addons if a in identity.BEFORE_NODES),
        system_nodegroup=sys_ng,
        system_disk_set=cfg.system_disk_gib is not None,
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
        fsx_mbps=fsx_mbps,
        gpu_pools=list(pools),
        karpenter=karpenter,
        access=access_plan(cfg),
        control_plane=control_plane_plan(name, cfg),
    )


def build_cluster_plan(
    stack: str, cfg: EksConfig, target: Target, dgd: Optional[dict] = None, protect_cache: bool = True, key: str = f"{NS}:cluster"
) -> ClusterPlan:
    """``dgd``: the final DGD (after ``replicas``, images and the fabric profile); node counts, EFA and the
    GB200 ComputeDomain follow it. Defaults to the catalog's DGD for the target. One GPU node group."""
    dgd = dgd or _dgd(target)
    pool = build_gpu_pool(cfg, target.gpu, dgd, target.id, gpu_taint_for(target), key)
    return assemble_plan(stack, cfg, [pool], protect_cache, compute_domain_for=(target, dgd), dgds=[dgd])


def build_cluster_only_plan(stack: str, cfg: EksConfig) -> ClusterPlan:
    """A cluster-only stack (``dynamo:serve: []``): one GPU node group per ``dynamo:cluster.gpuPools`` entry, sized by
    its ``nodes``; serving stacks add their objects later (``cluster.mode: stack``)."""
    k = f"{NS}:cluster"
    if not cfg.gpu_pools:
        raise ConfigError(
            f"{k}.gpuPools: not set; a cluster-only stack ({NS}:serve: []) names its GPU node groups, "
            f"e.g. gpuPools: [{{gpu: h100, nodes: 2}}]"
        )
    pools = []
    for i, p in enumerate(cfg.gpu_pools):
        pcfg, key = cfg.pool_for(p.gpu)
        taint = {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}
        pools.append(build_gpu_pool(pcfg, p.gpu, None, f"pool {p.gpu}", taint, key, pool_name(p.gpu, i == 0)))
    return assemble_plan(stack, cfg, pools, protect_cache=True)


def node_pools(plan: ClusterPlan) -> list[dict]:
    """What a cluster stack exports as ``nodePools`` (and a serving stack checks its entries against): per GPU node
    group its GPU, instance type, node count, per-node allocatable GPUs and EFA devices, labels and taint."""
    return [
        {
            "name": p.name,
            "gpu": p.gpu,
            "instanceType": p.shape.instance_type,
            "count": p.node_shape.count,
            "allocatable": dict(p.node_shape.capacity),
            "labels": dict(p.node_shape.labels),
            "taint": {k: v for k, v in p.node_shape.taints[0].items()},
            **({"capacity": "karpenter"} if p.capacity == "karpenter" else {}),
        }
        for p in plan.gpu_pools
    ]


# --------------------------------------------------------------------------- the EKS part of the program, as data


def plan_eks(
    stack: str,
    cfg,
    cluster: EksConfig,
    raw: dict,
    secret_keys,
    aws_region: Optional[str] = None,
    require_secrets: bool = True,
    door: Optional[dict] = None,
):
    """Everything an EKS stack needs before any resource: region agreement with ``aws:region``, the fabric,
    the Secrets only this stack can create, the serving objects (EFA per GPU of the cluster's instance), the
    cluster plan sized from the final DGD, the GB200 ComputeDomain claims, the FSx claim binding and the
    image pull secrets. Returns ``(cluster, cluster_plan, serving_plan)``; ``cluster`` may carry the region
    from ``aws:region``. ``require_secrets=False`` (render for review) skips only the presence of ``ngcApiKey``;
    ``door``: the front door's ``behind_door``/``client_nvext``, as ``stacks.serving.build_plan`` takes them."""
    from stacks.serving import build_plan, select_target
    from stacks.serving.network_policy import eks_api_server_cidrs

    cluster = resolve_region(cluster, (raw or {}).get("cluster") or {}, aws_region)
    target = select_target(cfg)
    check_fabric_on_eks(target, cfg.fabric_profile)
    check_secrets_on_new_cluster(
        cfg.hf_token_secret_name, cfg.image_pull_secrets if require_secrets else (), raw, set(secret_keys)
    )
    pool_cfg, pool_key = cluster.pool_for(target.gpu, f"{NS}:gpu")
    try:
        shape = shape_for(target.gpu, pool_cfg.instance_type)
    except ValueError as e:
        raise ConfigError(f"{_key(pool_key, 'instanceType')}: {e}") from None
    own_class = cache_class_name(cluster)
    if cfg.storage.class_name and cfg.storage.class_name != own_class and not cfg.storage.existing_claim:
        raise ConfigError(
            f"{NS}:storage.className: {cfg.storage.class_name!r} does not exist on the EKS cluster this `pulumi up` creates, "
            f"so the cache claim would stay Pending; remove it (the stack's class is {own_class!r}, "
            f"from {NS}:cluster.cacheStorage: {cluster.cache_storage}) or set it to {own_class!r}"
        )
    serving = build_plan(
        cfg,
        default_storage_class=cache_class_name(cluster),
        job_node_selector={POOL_LABEL: "system"},
        efa_per_gpu=shape.efa_per_gpu,
        api_server_cidrs=eks_api_server_cidrs(cluster.vpc_cidr),
        **(door or {}),
    )
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
                raise ConfigError(
                    f"{NS}:storage.size: {want} is larger than the FSx file system ({NS}:cluster.fsxStorageCapacityGib: "
                    f"{cluster.fsx_storage_capacity_gib}); raise fsxStorageCapacityGib (1200, 2400 or a multiple of 2400)"
                )
    cp.pull_secrets = [pull_secret(n, ns) for n in cfg.image_pull_secrets]
    return cluster, cp, serving


# --------------------------------------------------------------------------- several GPU node groups (cluster.gpuPools)


def build_pools_plan(
    stack: str, cluster: EksConfig, groups: list[tuple[str, list[tuple[str, str, dict]], dict]], protect_cache: bool = True
) -> ClusterPlan:
    """One GPU node group per GPU of the stack's entries, each sized from the sum of its entries' DGDs (after replicas
    and overrides), plus the ``gpuPools`` no entry uses. ``groups``: ``(gpu, [(entry key, entry name, dgd)], taint)``
    in the order of the entries."""
    if len(groups) > 1 and not cluster.gpu_pools:
        from stacks.config.keys import _camel

        set_keys = [k for k in POOL_KEYS if k in cluster.model_fields_set]
        if not set_keys:
            # Without gpuPools the entries' order would name the node groups, and removing the first entry would
            # rename (replace) another GPU's node group: the pools' order must be stated.
            gpus = [g for g, _, _ in groups]
            raise ConfigError(
                f"{NS}:cluster.gpuPools: not set, but the entries run on {', '.join(gpus)}; list those GPUs "
                f"there (e.g. gpuPools: [{', '.join('{gpu: ' + g + '}' for g in gpus)}]): the pools' order names "
                f"the node groups, so adding or removing an entry never replaces another GPU's node group"
            )
        if set_keys:
            raise ConfigError(
                f"{NS}:cluster.{_camel(set_keys[0])}: applies to one GPU node group, but the entries run on "
                f"{', '.join(g for g, _, _ in groups)}; set it per GPU in {NS}:cluster.gpuPools "
                f"(e.g. gpuPools: [{{gpu: {groups[0][0]}, ...}}, {{gpu: {groups[1][0]}}}])"
            )
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
            pools.append(
                build_gpu_pool(
                    pcfg, gpu, None, f"pool {gpu}", {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}, key, name
                )
            )
            continue
        members, taint = by_gpu[gpu]
        parts = [(n, dgd) for _, n, dgd in members]
        bad = _untolerated(parts, taint)
        if bad:
            raise ConfigError(
                f"{members[0][0]}: the {gpu} node group is tainted {taint['key']}={taint['value']}, which "
                f"{', '.join(bad)} do not tolerate; entries of one GPU share its node group"
            )
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
    return assemble_plan(stack, cluster, pools, protect_cache, dgds=[dgd for _, members, _ in groups for _, _, dgd in members])
