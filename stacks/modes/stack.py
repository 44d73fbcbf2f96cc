"""``cluster.mode: stack``: the EKS cluster of a cluster-only stack (``cluster.stack``), read through a Pulumi
StackReference at ``up``. The cluster stack installs the device plugins, the platform and no load balancer
controller; this stack checks its entries against the pools the cluster stack exports (``nodePools``, an Output) and
creates its pull Secrets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from stacks.cluster import combined_stack_plan, plan_on_cluster_stack
from stacks.config.keys import NS, ConfigError
from stacks.config.stack import StackCluster
from stacks.modes import LIVE_CLUSTER_NOTE, ClusterMode, ClusterPart, EntryPlan, cluster_as, entry_fabrics
from stacks.serving.autoscaling import check_bounds, cluster_stack_pools

if TYPE_CHECKING:
    from stacks.config import ClusterConfig, ProgramSpec, ServeEntry
    from stacks.serving.autoscaling import PoolUse
    from stacks.serving.serve import Entry


class StackMode(ClusterMode):
    name = "stack"
    installs_charts = True
    redacts_secrets = False
    creates_cluster = False
    labels_gpu_nodes = False
    installs_load_balancer_controller = False
    lacks_load_balancer_controller = True
    internal_load_balancer = False
    kubeconfig_for_tools = None
    unchecked_by_render = (LIVE_CLUSTER_NOTE,)

    def plan_entry(self, spec: "ProgramSpec", entry: "ServeEntry", door: dict[str, Any]) -> EntryPlan:
        """Checked against the cluster stack's pools at ``up`` (stacks/cluster/cluster_stack.py)."""
        ref_plan, serving = plan_on_cluster_stack(
            entry.config, spec.cluster, entry.raw, spec.secret_keys, require_secrets=spec.require_secrets, door=door
        )
        return EntryPlan(spec.cluster, ref_plan, serving)

    def plan_cluster(self, spec: "ProgramSpec", entries: list["Entry"], planned: list[EntryPlan]) -> ClusterPart:
        return ClusterPart(spec.cluster, combined_stack_plan(spec.cluster, entries, [p.cluster_plan for p in planned]), [])

    def plan_cluster_only(self, spec: "ProgramSpec") -> ClusterPart:
        raise ConfigError(f"{NS}:serve: [] (a cluster-only stack) needs cluster.mode eks")

    def installs_device_plugins(self, cluster: "ClusterConfig") -> bool:
        return False  # the cluster stack's

    def installs_platform(self, cluster: "ClusterConfig") -> bool:
        return False  # the cluster stack's

    def device_plugin_fabrics(self, cluster_plan: Any, entries: list["Entry"]) -> list[str]:
        return entry_fabrics(entries)

    def pod_security_version(self, cluster: "ClusterConfig") -> str:
        return "latest"  # the cluster stack's version is read only at `up`

    def plan_load_balancer(self, cluster_plan: Any) -> Optional[str]:
        return None

    def pause_pools(self, cluster_plan: Any, entries: list["Entry"]) -> None:
        return None  # the cluster stack's pools

    def autoscaling_pools(self, cluster: "ClusterConfig", cluster_plan: Any) -> Optional[dict[str, "PoolUse"]]:
        return None  # known at `up` only: autoscaling_shortfall

    def autoscaling_shortfall(self, cluster: "ClusterConfig", entries: list["Entry"], node_pools: Any) -> Optional[str]:
        """The bounds against the cluster stack's pools (components/cluster_source.py checks them in the ``nodePools``
        Output's apply, before any DGD); None when they fit, nothing is autoscaled, or the pools are not a list
        (``stacks.cluster.capacity_shortfall`` reports that)."""
        if not isinstance(node_pools, list) or not all(isinstance(p, dict) for p in node_pools):
            return None
        stack = cluster_as(cluster, StackCluster).stack
        assert stack is not None, "StackCluster requires cluster.stack"
        try:
            check_bounds(entries, cluster_stack_pools(node_pools, stack))
        except ConfigError as e:
            return str(e)
        return None

    def retained_after_destroy(self, cluster_plan: Any) -> list[dict[str, str]]:
        return []  # the cluster stack keeps its file system
