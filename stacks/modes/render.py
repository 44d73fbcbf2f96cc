"""``cluster.mode: render``: the manifests written to ``cluster.renderDir``. No cluster, no credentials, so no Helm
chart (the render provider writes YAML and installs nothing) and no Secret value on disk."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stacks.config.keys import NS, ConfigError
from stacks.modes import WithoutClusterPlan, ClusterPart, EntryPlan, entry_fabrics
from stacks.serving import build_plan

if TYPE_CHECKING:
    from stacks.config import ClusterConfig, ProgramSpec, ServeEntry
    from stacks.serving.serve import Entry


class RenderMode(WithoutClusterPlan):
    name = "render"
    installs_charts = False
    redacts_secrets = True
    creates_cluster = False
    labels_gpu_nodes = False
    installs_load_balancer_controller = False
    lacks_load_balancer_controller = False
    internal_load_balancer = True  # written only: what a later deploy exposes is its own choice
    kubeconfig_for_tools = None
    unchecked_by_render: tuple[str, ...] = ()

    def plan_entry(self, spec: "ProgramSpec", entry: "ServeEntry", door: dict[str, Any]) -> EntryPlan:
        return EntryPlan(spec.cluster, None, build_plan(entry.config, **door))

    def plan_cluster(self, spec: "ProgramSpec", entries: list["Entry"], planned: list[EntryPlan]) -> ClusterPart:
        return ClusterPart(spec.cluster, None, [])

    def plan_cluster_only(self, spec: "ProgramSpec") -> ClusterPart:
        raise ConfigError(f"{NS}:serve: [] (a cluster-only stack) needs cluster.mode eks")

    def installs_device_plugins(self, cluster: "ClusterConfig") -> bool:
        return False

    def installs_platform(self, cluster: "ClusterConfig") -> bool:
        return False

    def device_plugin_fabrics(self, cluster_plan: Any, entries: list["Entry"]) -> list[str]:
        return entry_fabrics(entries)

    def pod_security_version(self, cluster: "ClusterConfig") -> str:
        return "latest"  # the cluster the manifests go to is not known
