"""The cluster modes (``dynamo:cluster.mode``): where a stack's objects go, one module per mode, each one class
implementing ``ClusterMode`` below. May import the registry, the catalog, the config and the plans; the program
(stacks/program) and the shells read a stack's mode through ``stacks.modes.registry.cluster_mode``.

- ``render`` (stacks/modes/render.py): manifests written to a directory; no cluster, no Helm charts;
- ``kubeconfig`` (stacks/modes/kubeconfig.py): an existing cluster, optionally with device plugins and the platform;
- ``stack`` (stacks/modes/stack.py): the EKS cluster of a cluster-only stack, read through a StackReference;
- ``eks`` (stacks/modes/eks.py): the EKS cluster this stack creates.

Everything a mode changes in the plans and the tools is a member of ``ClusterMode``, so the program and the shells
ask the stack's mode (``program.mode.installs_charts``) instead of comparing mode names. The one choice by name is
the registry (``stacks.modes.registry.CLUSTER_MODES``); the Pulumi shell picks its component class per mode
(components/cluster_source.py ``SOURCES``). Adding a mode: docs/architecture.md "Adding a cluster mode".

The mode modules import this module (the interface and the shapes it passes); it imports none of them, so the
registry lives in stacks/modes/registry.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, TypeVar

if TYPE_CHECKING:
    from stacks.config import ClusterConfig, ProgramSpec, ServeEntry
    from stacks.serving import ServingPlan
    from stacks.serving.autoscaling import PoolUse
    from stacks.serving.serve import Entry

_Variant = TypeVar("_Variant")


def cluster_as(cluster: "ClusterConfig", variant: type[_Variant]) -> _Variant:
    """``cluster`` as its mode's config variant (stacks/config/stack.py): a mode is only ever given the config of its
    own ``cluster.mode`` (``stacks.modes.registry.cluster_mode``), so this states what the mode reads."""
    assert isinstance(cluster, variant), f"cluster.mode {cluster.mode!r} is not read as {variant.__name__}"
    return cluster


class EntryPlan(NamedTuple):
    """One serving entry planned on a mode: the cluster config it was planned for (on EKS with the region resolved),
    the mode's cluster plan for the entry (None where the mode plans no cluster) and the entry's serving plan."""

    cluster: "ClusterConfig"
    cluster_plan: Any
    serving: "ServingPlan"


class ClusterPart(NamedTuple):
    """The cluster side of a stack's program: the cluster config the program keeps, the mode's cluster plan
    (``stacks.cluster.ClusterPlan`` on EKS, ``stacks.cluster.ClusterStackPlan`` on a cluster stack, else None), and the
    descriptions of the layers ``up`` creates besides the serving objects (empty strings are dropped)."""

    cluster: "ClusterConfig"
    cluster_plan: Any
    layers: list[str]


# What `render --stack` cannot check on a cluster it does not reach (kubeconfig and stack modes).
LIVE_CLUSTER_NOTE = (
    "the live cluster: that the cache claim's storage class exists (or that a default class does), and that the GPU nodes exist"
)


def entry_fabrics(entries: list["Entry"]) -> list[str]:
    """Every entry's fabric (its ``fabricProfile``, else its target's), each once, in the entries' order."""
    return list(dict.fromkeys(e.cfg.fabric_profile or e.plan.target.fabric for e in entries))


class ClusterMode(ABC):
    """What one cluster mode means to the program and the tools. A mode module defines one subclass that sets every
    attribute and implements every method below (the base class only documents them: a subclass missing a method
    cannot be instantiated); ``registry.CLUSTER_MODES`` holds one instance per mode name.

    Attributes:

    - ``name``: the ``dynamo:cluster.mode`` value (its config variant's ``mode`` Literal in stacks/config/stack.py);
    - ``installs_charts``: Helm releases can be installed (a render provider writes YAML and installs none), so the
      observability charts, KEDA and the front door's controllers are planned;
    - ``redacts_secrets``: Secret values are left out of what the provider writes (render: files on disk);
    - ``creates_cluster``: the stack creates its cluster (a ``stacks.cluster.ClusterPlan``: its node groups, region and
      name), so ``up`` starts from an empty account (timeline), the stack has AWS capacity of its own (cost, simulate's
      planned nodes), exports its kubeconfig (bench_report, the follow commands), and a release stack's network
      guards apply (review);
    - ``labels_gpu_nodes``: the GPU nodes carry ``stacks.cluster.platform.GPU_PRESENT_LABELS`` (the node groups this
      stack creates), so the NVIDIA RuntimeClass selects them;
    - ``installs_load_balancer_controller``: the stack installs the AWS Load Balancer Controller when a front door
      needs a load balancer (an NLB, with its annotations and idle timeout);
    - ``lacks_load_balancer_controller``: the cluster has no load balancer controller and the stack installs none, so
      a front door exposed by a LoadBalancer Service is refused;
    - ``internal_load_balancer``: a front door may ask for an internal load balancer (``exposure: vpc``);
    - ``kubeconfig_for_tools``: where a command-line tool finds the kubeconfig (``"file"``: ``cluster.kubeconfigPath``
      or KUBECONFIG and ``cluster.context``; ``"stack output"``: the stack's ``kubeconfig`` output; None: no cluster);
    - ``unchecked_by_render``: what ``render --stack`` cannot check that ``up`` does on this mode's cluster.
    """

    name: str
    installs_charts: bool
    redacts_secrets: bool
    creates_cluster: bool
    labels_gpu_nodes: bool
    installs_load_balancer_controller: bool
    lacks_load_balancer_controller: bool
    internal_load_balancer: bool
    kubeconfig_for_tools: Optional[str]
    unchecked_by_render: tuple[str, ...]

    @abstractmethod
    def plan_entry(self, spec: "ProgramSpec", entry: "ServeEntry", door: dict[str, Any]) -> EntryPlan:
        """One entry's serving plan on this mode's cluster; ``door``: the front door's ``behind_door``/``client_nvext``,
        as ``stacks.serving.build_plan`` takes them."""

    @abstractmethod
    def plan_cluster(self, spec: "ProgramSpec", entries: list["Entry"], planned: list[EntryPlan]) -> ClusterPart:
        """The cluster side of a serving stack, from its entries (after overrides) and their ``plan_entry`` results in
        the same order: the entries' cluster plans combined into one, the layers; a ConfigError for what cannot share
        the cluster."""

    @abstractmethod
    def plan_cluster_only(self, spec: "ProgramSpec") -> ClusterPart:
        """A cluster-only stack (``dynamo:serve: []``, allowed where the config variant's ``CLUSTER_ONLY`` is set)."""

    @abstractmethod
    def installs_device_plugins(self, cluster: "ClusterConfig") -> bool:
        """The platform layer installs the device plugins and the NVIDIA stack (``cluster.nvidiaStack``), whose DCGM
        exporter the observability layer then scrapes."""

    @abstractmethod
    def installs_platform(self, cluster: "ClusterConfig") -> bool:
        """The stack installs the Dynamo platform (the operator)."""

    @abstractmethod
    def device_plugin_fabrics(self, cluster_plan: Any, entries: list["Entry"]) -> list[str]:
        """The fabrics whose device plugins the platform layer installs (read where ``installs_device_plugins``)."""

    @abstractmethod
    def pod_security_version(self, cluster: "ClusterConfig") -> str:
        """The ``-version`` of the Pod Security labels on every Namespace the program creates (``v1.35`` or
        ``latest``, https://kubernetes.io/docs/concepts/security/pod-security-admission)."""

    @abstractmethod
    def plan_load_balancer(self, cluster_plan: Any) -> Optional[str]:
        """A front door needs a load balancer: the controller this stack installs for it, added to the cluster plan, and
        its layer description; None where the stack installs none."""

    @abstractmethod
    def pause_pools(self, cluster_plan: Any, entries: list["Entry"]) -> None:
        """Scale the node pools this stack creates down to what the entries that are not paused use."""

    @abstractmethod
    def autoscaling_pools(self, cluster: "ClusterConfig", cluster_plan: Any) -> Optional[dict[str, "PoolUse"]]:
        """The GPU pools autoscaled components must fit, known before any resource (per GPU); None where no pool is
        known while planning (only the DGD's own bounds apply then)."""

    @abstractmethod
    def autoscaling_shortfall(self, cluster: "ClusterConfig", entries: list["Entry"], node_pools: Any) -> Optional[str]:
        """The autoscaling bounds against pools known only at ``up`` (a StackReference's ``nodePools`` Output): the
        message ``stacks.serving.autoscaling.check_bounds`` gives, or None when they fit or nothing is known."""

    @abstractmethod
    def retained_after_destroy(self, cluster_plan: Any) -> list[dict[str, str]]:
        """What ``pulumi destroy`` keeps of the cluster layer (stacks/program/retained.py items)."""


class WithoutClusterPlan(ClusterMode):
    """The answers of a mode that plans no cluster of its own (render, an existing cluster): no load balancer
    controller to plan, no pools of its own to pause or to bound autoscaling with, nothing of a cluster layer for
    ``destroy`` to keep. Such a mode subclasses this and implements the rest of ``ClusterMode``."""

    def plan_load_balancer(self, cluster_plan: Any) -> Optional[str]:
        return None

    def pause_pools(self, cluster_plan: Any, entries: list["Entry"]) -> None:
        return None

    def autoscaling_pools(self, cluster: "ClusterConfig", cluster_plan: Any) -> Optional[dict[str, "PoolUse"]]:
        return None

    def autoscaling_shortfall(self, cluster: "ClusterConfig", entries: list["Entry"], node_pools: Any) -> Optional[str]:
        return None

    def retained_after_destroy(self, cluster_plan: Any) -> list[dict[str, str]]:
        return []
