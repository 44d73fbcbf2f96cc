"""The one shape of an optional layer: a pure plan here, one generic component in the shell (components/layer.py),
one entry in the program's list (``ProgramPlan.layers``).

A layer is data: the Helm charts it installs (in order, first), the Kubernetes objects it creates after them (in
order; a Secret's values are never in the plan, only which Pulumi secret fills which key), and its outputs. ``render
--stack`` lists every layer's objects because they are plain dicts, and ``up`` creates exactly those objects.

Adding a layer (docs/architecture.md "Adding an optional layer" has the steps): a config section in ``stacks/config``,
a ``plan_<layer>(spec, entries, cluster)`` function here returning a ``LayerPlan`` (or None when off), one line in
``stacks.program.LAYER_PLANNERS``. The shell needs no new code. ``dynamo:frontDoor`` (stacks/layers/front_door.py) is
the first layer in this shape.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stacks.registry.charts import HelmSpec


@dataclass(frozen=True)
class SecretFill:
    """A Secret's ``stringData`` filled at ``up`` from a Pulumi secret config key (a mapping: data key -> value); the
    plan and ``render`` carry only the redacted object."""

    config_key: str  # the dynamo: secret key, e.g. frontDoorApiKeys


@dataclass
class LayerPlan:
    """One optional layer of a stack (see the module docstring)."""

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
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the list of layers ``up`` creates besides the serving objects."""
        charts = f" (charts: {', '.join(f'{c.chart} {c.version}' for c in self.charts)})" if self.charts else ""
        return f"{self.title}{charts}: {len(self.objects)} objects"
