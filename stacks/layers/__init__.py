"""The one shape of an optional layer: a pure plan here, one generic component in the shell (components/layer.py),
one entry in the program's list (``ProgramPlan.layers``).

A layer is data: the Helm charts it installs, the Kubernetes objects it creates around them (in order; a Secret's
values are never in the plan, only which Pulumi secret fills which key), what it waits for, which serving objects wait
for it, and its outputs. ``render --stack`` lists every layer's objects because they are plain dicts, and ``up``
creates exactly those objects.

Adding a layer (docs/architecture.md "Adding an optional layer" has the steps): a config section in ``stacks/config``,
a ``plan_<layer>(spec, entries, cluster)`` function here returning a ``LayerPlan`` (or None when off), one line in
``stacks.program.LAYER_PLANNERS``. The shell needs no new code. The layers in this shape, in the program's order: the
platform layers (``platform.py``: the device plugins, the Dynamo platform and the DRA driver, which the DGDs wait for) and KEDA
(``keda.py``: its chart, which the ScaledObjects wait for), created before the serving objects; observability
(``observability.py``: kube-prometheus-stack, monitors, dashboards, alerts) and the benchmark (``benchmark.py``: the
AIPerf Job), which the program plans with the serving plans because KEDA reads the first's Prometheus and the second
may change the DGD; then those of ``LAYER_PLANNERS``, the front door (``front_door.py``) first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from stacks.registry.charts import HelmSpec

# What a layer waits for, by name; the shell (components/layer.py ``ready_points``) maps each to its resources:
# ``nothing``: the layer needs only the provider (KEDA);
# ``nodes``: the nodes cluster-wide DaemonSets and controllers install on (on EKS the system node group);
# ``storage``: what the model cache waits for (a storage class, the system nodes);
# ``cluster``: the cluster's storage and GPU capacity (node groups or NodePools, and the layers the graphs wait for);
# ``serving``: every serving object, and what the cluster makes for layers (on EKS the AWS Load Balancer Controller);
# ``graphs``: the DynamoGraphDeployments (with the DGD wait on, Ready).
After = Literal["nothing", "nodes", "storage", "cluster", "serving", "graphs"]
# The serving objects that wait for a layer (its ``ready``), so the shell creates it before them: ``graphs``: every
# DynamoGraphDeployment (the device plugins, the Dynamo operator); ``autoscalers``: every ScaledObject (KEDA's CRDs).
Gates = Literal["graphs", "autoscalers"]


@dataclass(frozen=True)
class SecretFill:
    """A Secret's ``stringData`` filled at ``up`` from a Pulumi secret config key (a mapping: data key -> value); the
    plan and ``render`` carry only the redacted object."""

    config_key: str  # the dynamo: secret key, e.g. frontDoorApiKeys


@dataclass
class LayerPlan:
    """One optional layer of a stack (see the module docstring).

    Order at ``up``: the Namespaces (they wait for nothing); the objects of a ``before_charts`` kind; the charts, in
    order, each after the one before (and after the Namespaces and ``before_charts`` objects when "Namespace" is a
    ``before_charts`` kind); then every other object, those of an ``after_charts`` kind after the charts that bring
    their CRDs (``crds_from``, else every chart). All of it waits for ``after``."""

    key: str  # the config section, e.g. frontDoor; the component's module in its type token dynamo:<key>:<kind>
    kind: str  # the component's type, e.g. FrontDoor
    title: str  # what render and the up log call it
    charts: list[HelmSpec] = field(default_factory=list)
    objects: list[dict] = field(default_factory=list)
    # object index -> how the shell fills that Secret's data (values never in the plan)
    secrets: dict[int, SecretFill] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    # Kinds whose CRDs a chart of this layer installs: those objects wait for the charts.
    after_charts: frozenset[str] = frozenset()
    # The charts (HelmSpec.name) that bring the after_charts kinds' CRDs; empty: every chart of the layer.
    crds_from: frozenset[str] = frozenset()
    # Kinds the charts need first (e.g. the Role a chart's pods read with); "Namespace": the charts install into them.
    before_charts: frozenset[str] = frozenset()
    # Helm creates each chart's namespace (False: it exists first, a Namespace of the layer or the cluster's own).
    chart_namespaces: bool = True
    after: After = "serving"
    # object index -> its Pulumi resource name (its URN's); default <key>-<kind>-[<namespace>-]<name> (``resource_name``)
    names: dict[int, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # The component's type token module and resource name (its URN's and its children's parent); default the key.
    module: str = ""
    component: str = ""
    # chart index -> its Release's Pulumi resource name; default <key>-<chart name> (``chart_resource_name``)
    chart_names: dict[int, str] = field(default_factory=dict)
    # object index -> the indexes of earlier objects it waits for besides the order above (a DaemonSet, the ConfigMap it
    # mounts)
    waits: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # What ``after`` resolves to is a dependency of the component itself rather than of each chart and object (the
    # platform layer's registration: the component waits for the nodes or storage, its children for nothing more).
    wait_on_component: bool = False
    # The layer's readiness (``Layer.ready``): every chart and the objects of these kinds; what ``gates`` waits for.
    ready_kinds: frozenset[str] = frozenset()
    gates: Optional[Gates] = None
    # The outputs the component registers (component state only, never stack outputs); None: {"outputs": outputs}.
    registered: Optional[dict[str, Any]] = None
    # Its charts and objects were top-level resources (no parent) before the layer was a component: each carries the
    # alias of that URN (same name and type, no parent), so moving it under the component replaces nothing.
    moved_from_top_level: bool = False

    def resource_name(self, index: int) -> str:
        """The Pulumi resource name of object ``index``: part of its URN, so it never changes for a live object."""
        if index in self.names:
            return self.names[index]
        obj = self.objects[index]
        md = obj["metadata"]
        where = f"{md['namespace']}-" if md.get("namespace") else ""
        return f"{self.key}-{obj['kind'].lower()}-{where}{md['name']}"

    @property
    def type_token(self) -> str:
        """The component's Pulumi type, ``dynamo:<module>:<kind>``: part of every child's URN."""
        return f"dynamo:{self.module or self.key}:{self.kind}"

    @property
    def component_name(self) -> str:
        """The component's Pulumi resource name (its URN's)."""
        return self.component or self.key

    def chart_resource_name(self, index: int) -> str:
        """The Pulumi resource name of chart ``index``'s Release: part of its URN, so it never changes."""
        return self.chart_names.get(index) or f"{self.key}-{self.charts[index].name}"

    def describe(self) -> str:
        """One line for the list of layers ``up`` creates besides the serving objects."""
        charts = f" (charts: {', '.join(f'{c.chart} {c.version}' for c in self.charts)})" if self.charts else ""
        return f"{self.title}{charts}: {len(self.objects)} objects"
