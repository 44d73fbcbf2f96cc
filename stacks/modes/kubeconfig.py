"""``cluster.mode: kubeconfig``: an existing cluster (the secret ``dynamo:kubeconfig``, else ``cluster.kubeconfigPath``
or KUBECONFIG, and ``cluster.context``). The stack installs the device plugins of its entries' fabrics and the NVIDIA
stack only with ``installDevicePlugins``, and the Dynamo platform only with ``installPlatform`` (such clusters usually
have it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stacks.cluster.platform import fabrics_objects
from stacks.config.keys import NS, ConfigError
from stacks.config.stack import KubeconfigCluster
from stacks.modes import LIVE_CLUSTER_NOTE, WithoutClusterPlan, ClusterPart, EntryPlan, cluster_as, entry_fabrics
from stacks.serving import build_plan

if TYPE_CHECKING:
    from stacks.config import ClusterConfig, ProgramSpec, ServeEntry
    from stacks.serving.serve import Entry


class KubeconfigMode(WithoutClusterPlan):
    name = "kubeconfig"
    installs_charts = True
    redacts_secrets = False
    creates_cluster = False
    labels_gpu_nodes = False
    installs_load_balancer_controller = False
    lacks_load_balancer_controller = False  # the cluster's own controller serves a LoadBalancer Service
    internal_load_balancer = False
    kubeconfig_for_tools = "file"
    unchecked_by_render = (
        "the kubeconfig file (cluster.kubeconfigPath or KUBECONFIG belongs to the machine that runs `up`)",
        LIVE_CLUSTER_NOTE,
    )

    def plan_entry(self, spec: "ProgramSpec", entry: "ServeEntry", door: dict[str, Any]) -> EntryPlan:
        return EntryPlan(spec.cluster, None, build_plan(entry.config, **door))

    def plan_cluster(self, spec: "ProgramSpec", entries: list["Entry"], planned: list[EntryPlan]) -> ClusterPart:
        """With ``installDevicePlugins``: one device plugin per fabric the entries use, refused where two cannot share
        a node (``stacks.cluster.platform.fabrics_objects``)."""
        cluster = cluster_as(spec.cluster, KubeconfigCluster)
        if not cluster.install_device_plugins:
            return ClusterPart(cluster, None, [])
        try:
            fabrics_objects(entry_fabrics(entries))
        except ValueError as err:
            raise ConfigError(
                f"{NS}:cluster.installDevicePlugins: {err} (entries: "
                f"{', '.join(f'{e.key} on {e.cfg.fabric_profile or e.plan.target.fabric}' for e in entries)}); "
                f"serve them from separate clusters, or install the plugins yourself (installDevicePlugins: false)"
            ) from None
        return ClusterPart(cluster, None, [])  # the device plugins: a layer (stacks/layers/platform.py)

    def plan_cluster_only(self, spec: "ProgramSpec") -> ClusterPart:
        raise ConfigError(f"{NS}:serve: [] (a cluster-only stack) needs cluster.mode eks")

    def installs_device_plugins(self, cluster: "ClusterConfig") -> bool:
        return bool(cluster_as(cluster, KubeconfigCluster).install_device_plugins)

    def installs_platform(self, cluster: "ClusterConfig") -> bool:
        return bool(cluster_as(cluster, KubeconfigCluster).install_platform)

    def device_plugin_fabrics(self, cluster_plan: Any, entries: list["Entry"]) -> list[str]:
        """Every entry's fabric, each once: a stack serving an InfiniBand and an EFA target installs both plugins."""
        return entry_fabrics(entries)

    def pod_security_version(self, cluster: "ClusterConfig") -> str:
        return "latest"  # the plan does not know the cluster's version
