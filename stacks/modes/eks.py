"""``cluster.mode: eks``: the EKS cluster this stack creates (the EKS keys, stacks/config/eks.py). Each entry is sized
and placed for the cluster's instances (region, fabric, EFA per GPU of the instance, node group sized from the final
DGD, GB200 ComputeDomain claims, FSx claim binding: stacks/cluster/plan.py ``plan_eks``); the stack installs the device
plugins, the NVIDIA stack, the Dynamo platform (by default) and, for a front door with a load balancer, the AWS Load
Balancer Controller; its node pools are known before any resource, so pause and the autoscaling bounds apply there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from stacks.cluster import build_cluster_only_plan, build_pools_plan, plan_eks
from stacks.cluster.load_balancer import plan_load_balancer_controller
from stacks.config.keys import NS, ConfigError
from stacks.config.stack import EksCluster
from stacks.modes import ClusterMode, ClusterPart, EntryPlan, cluster_as
from stacks.serving.autoscaling import PoolUse, pause_pools

if TYPE_CHECKING:
    from stacks.config import ClusterConfig, ProgramSpec, ServeEntry
    from stacks.serving.serve import Entry


def eks_layers(plan: Any) -> list[str]:
    """The layers of the EKS cluster: the cluster and its node groups, the model-cache storage and Karpenter where
    planned (the device plugins and the DRA driver are layers of the program: stacks/layers/platform.py)."""
    storage = "StorageClass" if plan.storage_class else "PersistentVolume"
    return [
        "EKS cluster and node groups",
        f"model-cache file system and {storage}",
        _karpenter_layer(plan),
    ]


def _karpenter_layer(cluster_plan: Any) -> str:
    """The Karpenter install and its NodePools, when a GPU pool has capacity: karpenter (stacks/cluster/karpenter.py)."""
    kp = getattr(cluster_plan, "karpenter", None)
    return f"Karpenter {kp.helm.version} and NodePools {', '.join(p.name for p in kp.pools)}" if kp else ""


def combined_cluster_plan(stack: str, cluster: "ClusterConfig", entries: list["Entry"], plans: list) -> Any:
    """One EKS cluster for every entry: one GPU node group per GPU, each holding the sum of its entries' GPU and EFA
    requests (after replicas and overrides; stacks.cluster.build_pools_plan); pull secrets in every serving namespace."""
    for e, cp in zip(entries, plans):
        if cp.compute_domain:
            raise ConfigError(
                f"{e.key}: {e.plan.target.id} spans GPU nodes of one NVLink domain (a ComputeDomain); "
                f"serve it from a stack of its own"
            )
    owners = [e for e in entries if e.plan.cache_pvc is not None]
    if plans[0].static_pv and len(owners) > 1:
        raise ConfigError(
            f"{owners[1].key}: FSx for Lustre binds the stack's file system to one cache claim; entries with "
            f"different checkpoints need {NS}:cluster.cacheStorage: efs"
        )
    groups: dict[str, tuple] = {}
    for e, cp in zip(entries, plans):
        groups.setdefault(e.plan.target.gpu, (e.plan.target.gpu, [], cp.gpu_nodegroup["taints"][0]))[1].append(
            (e.key, e.name, e.plan.dgd)
        )
    merged = build_pools_plan(
        stack, cluster_as(cluster, EksCluster), list(groups.values()), protect_cache=all(e.cfg.storage.protect for e in entries)
    )
    # no entry's workers span nodes (checked above); the sum spanning nodes needs no ComputeDomain
    if merged.static_pv and owners:
        merged.static_pv["spec"]["claimRef"] = {
            "namespace": owners[0].plan.dgd["metadata"]["namespace"],
            "name": owners[0].plan.claim_name,
        }
    seen, pulls = set(), []
    for cp in plans:
        for obj in cp.pull_secrets:
            key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if key not in seen:
                seen.add(key)
                pulls.append(obj)
    merged.pull_secrets = pulls
    return merged


def _pool_key(cluster: "ClusterConfig", index: int, key: str = "nodes") -> str:
    """Where pool ``index``'s node count (``nodes``) or node limit (``maxNodes``) is configured."""
    if cluster_as(cluster, EksCluster).gpu_pools:
        return f"{NS}:cluster.gpuPools[{index}].{key}"
    return f"{NS}:cluster.{'gpuNodes' if key == 'nodes' else key}"


class EksMode(ClusterMode):
    name = "eks"
    installs_charts = True
    redacts_secrets = False
    creates_cluster = True
    labels_gpu_nodes = True  # our GPU node groups carry nvidia.com/gpu.present=true
    installs_load_balancer_controller = True
    lacks_load_balancer_controller = False
    internal_load_balancer = True
    kubeconfig_for_tools = "stack output"
    unchecked_by_render: tuple[str, ...] = ()

    def plan_entry(self, spec: "ProgramSpec", entry: "ServeEntry", door: dict[str, Any]) -> EntryPlan:
        """Sized and placed for the cluster's instances; the cluster config comes back with the region resolved (from
        ``aws:region`` where the cluster sets none)."""
        resolved, cluster_plan, serving = plan_eks(
            spec.stack,
            entry.config,
            cluster_as(spec.cluster, EksCluster),
            entry.raw,
            spec.secret_keys,
            aws_region=spec.aws_region,
            require_secrets=spec.require_secrets,
            door=door,
        )
        return EntryPlan(resolved, cluster_plan, serving)

    def plan_cluster(self, spec: "ProgramSpec", entries: list["Entry"], planned: list[EntryPlan]) -> ClusterPart:
        """The entry's own plan when one target fills the cluster's one GPU pool; else one cluster for every entry
        (``combined_cluster_plan``; also when the cluster has more pools than the entry uses: they are all built)."""
        cluster = cluster_as(planned[0].cluster, EksCluster)  # may carry the region from aws:region
        one_group = spec.single and len(cluster.gpu_pools) <= 1
        cluster_plan = (
            planned[0].cluster_plan
            if one_group
            else combined_cluster_plan(spec.stack, cluster, entries, [p.cluster_plan for p in planned])
        )
        return ClusterPart(cluster, cluster_plan, eks_layers(cluster_plan))

    def plan_cluster_only(self, spec: "ProgramSpec") -> ClusterPart:
        """EKS with the ``gpuPools`` node groups, storage and device plugins; serving stacks reference it
        (``cluster.mode: stack``)."""
        plan = build_cluster_only_plan(spec.stack, cluster_as(spec.cluster, EksCluster))
        return ClusterPart(spec.cluster, plan, eks_layers(plan))

    def installs_device_plugins(self, cluster: "ClusterConfig") -> bool:
        return True

    def installs_platform(self, cluster: "ClusterConfig") -> bool:
        """By default (``installPlatform`` unset)."""
        install = cluster_as(cluster, EksCluster).install_platform
        return True if install is None else bool(install)

    def device_plugin_fabrics(self, cluster_plan: Any, entries: list["Entry"]) -> list[str]:
        """The cluster's: EFA, or none."""
        return ["aws-efa" if cluster_plan.efa else "none"]

    def pod_security_version(self, cluster: "ClusterConfig") -> str:
        """The control plane's minor (``cluster.kubernetesVersion``, e.g. ``v1.35``): the checks are those of the
        Kubernetes release the stack was planned for, so a control plane upgraded out of band (whose admission may
        check more at ``latest``) cannot start refusing the workers before the plan moves the pin with
        ``kubernetesVersion`` in the same ``up``."""
        version = cluster_as(cluster, EksCluster).kubernetes_version
        return f"v{version}" if version else "latest"

    def plan_load_balancer(self, cluster_plan: Any) -> Optional[str]:
        """The AWS Load Balancer Controller with the cluster (stacks/cluster/load_balancer.py): the front door's NLB."""
        cp = cluster_plan
        cp.load_balancer_controller = plan_load_balancer_controller(cp.name, cp.region)
        return f"AWS Load Balancer Controller {cp.load_balancer_controller.helm.version} (front door NLB)"

    def pause_pools(self, cluster_plan: Any, entries: list["Entry"]) -> None:
        if cluster_plan is not None:
            pause_pools(cluster_plan, entries)

    def autoscaling_pools(self, cluster: "ClusterConfig", cluster_plan: Any) -> Optional[dict[str, PoolUse]]:
        """Per GPU, what its pool holds at most: a Karpenter pool's NodePool limit, a managed node group's max size."""
        cp = cluster_plan
        if cp is None:
            return None
        pools = {}
        for i, p in enumerate(cp.gpu_pools):
            if getattr(p, "capacity", "node-group") == "karpenter":  # the NodePool's node (and GPU) limit
                n = int(p.karpenter["max_nodes"])
                pools[p.gpu] = PoolUse(
                    p.gpu,
                    _pool_key(cluster, i, "maxNodes"),
                    n * p.shape.gpus_per_node,
                    f"NodePool limit {n} x {p.shape.instance_type}",
                    n,
                    p.node_shape.capacity,
                )
            elif (p.nodegroup or {}).get("scaling_config"):
                n = int(p.nodegroup["scaling_config"]["max_size"])
                pools[p.gpu] = PoolUse(
                    p.gpu,
                    _pool_key(cluster, i),
                    n * p.shape.gpus_per_node,
                    f"{n} x {p.shape.instance_type}",
                    n,
                    p.node_shape.capacity,
                )
        return pools

    def autoscaling_shortfall(self, cluster: "ClusterConfig", entries: list["Entry"], node_pools: Any) -> Optional[str]:
        return None  # checked while planning (autoscaling_pools)

    def retained_after_destroy(self, cluster_plan: Any) -> list[dict[str, str]]:
        """With ``storage.protect``: the model cache's file system (and for FSx its network and PersistentVolume)."""
        cp = cluster_plan
        out: list[dict[str, str]] = []
        if cp is None or not getattr(cp, "protect_cache", False):
            return out
        kind = (cp.storage or {}).get("kind", "efs")
        tag = f"tag Name={cp.name}-model-cache"  # components/cluster.py tags the file system so
        if kind == "fsx-lustre":
            out.append(
                {
                    "kind": "FSx for Lustre file system",
                    "name": f"{cp.name}-model-cache",
                    "why": "it holds the model cache the claim binds to (storage.protect: true)",
                    "delete": f"aws fsx describe-file-systems --region {cp.region} (the one with {tag}), then "
                    f"aws fsx delete-file-system --file-system-id <id> --region {cp.region}",
                    "adopt": "not re-adopted by a new cluster of this stack (it creates its own); copy the model out first",
                }
            )
            out.append(
                {
                    "kind": "VPC, subnet and security group of the file system",
                    "name": cp.name,
                    "why": "the file system's network interfaces hold them, so destroy could not delete them",
                    "delete": f"after the file system: aws ec2 describe-vpcs --filters Name=tag:Name,Values={cp.name} "
                    f"--region {cp.region}, then delete its security groups, subnets and the VPC",
                    "adopt": "not re-adopted",
                }
            )
            if cp.static_pv:
                pv = cp.static_pv["metadata"]["name"]
                out.append(
                    {
                        "kind": "PersistentVolume",
                        "name": pv,
                        "why": "it points at the kept file system",
                        "delete": f"deleted with the cluster (kubectl delete pv {pv} if the cluster stays)",
                        "adopt": "not re-adopted",
                    }
                )
        else:
            out.append(
                {
                    "kind": "EFS file system",
                    "name": f"{cp.name}-model-cache",
                    "why": "it holds the model cache (storage.protect: true)",
                    "delete": f"aws efs describe-file-systems --region {cp.region} (the one with {tag}), delete its "
                    f"access points, then aws efs delete-file-system --file-system-id <id> --region {cp.region}",
                    "adopt": "not re-adopted by a new cluster of this stack (it creates its own)",
                }
            )
        return out
