"""One ComponentResource for every optional layer in the one layer shape (``stacks.layers.LayerPlan``): the device
plugins, the Dynamo platform and the NVIDIA DRA driver, KEDA, observability, the benchmark and the front door.

Type token ``dynamo:<module>:<kind>`` (``dynamo:frontDoor:FrontDoor``, ``dynamo:platform:DevicePlugins``; the module
defaults to the layer key), resource name the plan's ``component_name`` (default the key). Order (``LayerPlan``'s
docstring): its Namespaces; the objects the charts need first; its Helm charts, in order (each waits for the one
before); then every other object, those whose CRDs a chart brings after the charts, each also after the earlier objects
its plan names (``waits``). Each object's and chart's resource name is the plan's (``LayerPlan.resource_name``,
``chart_resource_name``). A Secret named in ``plan.secrets`` is
filled from its Pulumi secret config key (a mapping data key -> value), so its values stay Pulumi secrets end to end;
render mode writes it without data, like the HF token Secret. Some kinds get their typed resource (``TYPED``: those
with fields beside ``spec``, a Role's rules, a ConfigMap's data or a RuntimeClass's handler, and Namespace, Job,
DaemonSet and ServiceAccount); every other kind is a generic resource of the same type token. The shell decides
nothing: what it creates is ``plan.objects``, which is what ``render --stack`` shows, and what it waits for is the
readiness point the plan names (``ready_points``). A layer that serving objects wait for
(``plan.gates``) is created before them (``create_layers`` with no serving layer yet), and its ``ready`` joins what
those objects wait for (``gate``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime.settings import get_root_resource

from components.platform import helm_release
from stacks.layers import LayerPlan
from stacks.config.keys import NS

PKG = "dynamo"

# Kind -> its typed resource (the type token a generic resource of that kind would have too); the kinds whose fields
# beside metadata are not one ``spec`` need theirs.
TYPED: dict[str, Callable[[str, dict, pulumi.ResourceOptions], pulumi.CustomResource]] = {
    "Namespace": lambda name, o, opts: k8s.core.v1.Namespace(name, metadata=o["metadata"], opts=opts),
    "ConfigMap": lambda name, o, opts: k8s.core.v1.ConfigMap(name, metadata=o["metadata"], data=o.get("data"), opts=opts),
    "Role": lambda name, o, opts: k8s.rbac.v1.Role(name, metadata=o["metadata"], rules=o.get("rules"), opts=opts),
    "RoleBinding": lambda name, o, opts: k8s.rbac.v1.RoleBinding(
        name, metadata=o["metadata"], role_ref=o["roleRef"], subjects=o.get("subjects"), opts=opts
    ),
    "Job": lambda name, o, opts: k8s.batch.v1.Job(name, metadata=o["metadata"], spec=o["spec"], opts=opts),
    "DaemonSet": lambda name, o, opts: k8s.apps.v1.DaemonSet(name, metadata=o["metadata"], spec=o["spec"], opts=opts),
    "ServiceAccount": lambda name, o, opts: k8s.core.v1.ServiceAccount(name, metadata=o["metadata"], opts=opts),
    "RuntimeClass": lambda name, o, opts: k8s.node.v1.RuntimeClass(
        name, metadata=o["metadata"], handler=o["handler"], scheduling=o.get("scheduling"), opts=opts
    ),
}


def ready_points(source: Any, serving: Any = None) -> dict[str, list[pulumi.Resource]]:
    """What each readiness point a layer may wait for (``stacks.layers.After``) is, in resources: ``source`` a
    components.cluster_source.ClusterSource, ``serving`` a components.serving_layer.ServingLayer (None: before the
    serving objects exist, only the cluster's points)."""
    points: dict[str, list[pulumi.Resource]] = {
        "nothing": [],
        "nodes": list(source.nodes_ready),
        "storage": list(source.storage_ready),
        "cluster": [*source.storage_ready, *source.gpu_ready],
    }
    if serving is not None:
        points["serving"] = [*serving.servings.values(), *source.layers_ready]
        points["graphs"] = [g.dgd for s in serving.servings.values() for g in s.graphs]
    return points


def create_layers(plans: Sequence[LayerPlan], source: Any, serving: Any = None, redact_secrets: bool = False) -> list["Layer"]:
    """The layers of ``plans`` due now, in order: with no ``serving`` (before the serving objects) those that serving
    objects wait for (``plan.gates``), else every other. Each waits for the readiness point its plan names."""
    ready = ready_points(source, serving)
    due = [p for p in plans if (p.gates is not None) == (serving is None)]
    for p in due:
        assert p.after in ready, f"layer {p.key}: serving objects wait for it ({p.gates}), so it cannot wait for {p.after}"
    return [
        Layer(p, opts=pulumi.ResourceOptions(provider=source.provider), depends_on=ready[p.after], redact_secrets=redact_secrets)
        for p in due
    ]


def gate(layers: Sequence["Layer"], gates: str) -> list[pulumi.Resource]:
    """The readiness of every layer that the serving objects ``gates`` names wait for (``stacks.layers.Gates``)."""
    return [r for layer in layers if layer.plan.gates == gates for r in layer.ready]


class Layer(pulumi.ComponentResource):
    """The charts and objects of one optional layer (see the module docstring)."""

    outputs: pulumi.Output[dict]

    def __init__(
        self,
        plan: LayerPlan,
        opts: Optional[pulumi.ResourceOptions] = None,
        depends_on: Sequence[pulumi.Resource] = (),
        redact_secrets: bool = False,
    ):
        """``depends_on``: what the layer waits for (``ready_points()[plan.after]``); ``redact_secrets``: render mode."""
        if plan.wait_on_component:
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(depends_on)))
        assert plan.type_token.startswith(f"{PKG}:"), "the type token is the project's"
        super().__init__(plan.type_token, plan.component_name, None, opts)
        self.plan = plan
        for warning in plan.warnings:
            pulumi.log.warn(warning, resource=self)
        base: list[pulumi.Resource] = [] if plan.wait_on_component else list(depends_on)
        # A top-level resource's parent was the stack resource (the SDK's default parent): the alias names it, so the
        # engine finds the old URN, urn:...::pulumi:pulumi:Stack$<type>::<name>.
        moved = [pulumi.Alias(parent=get_root_resource())] if plan.moved_from_top_level else None
        created: dict[int, pulumi.CustomResource] = {}  # object index -> its resource, for ``plan.waits``
        config = pulumi.Config(NS)
        self.namespaces: list[pulumi.Resource] = []
        self.objects: list[pulumi.Resource] = []
        self.charts: list[pulumi.Resource] = []  # the Helm Releases, in order

        def create(index: int, obj: dict, after: list[pulumi.Resource]) -> pulumi.CustomResource:
            opts_ = pulumi.ResourceOptions(
                parent=self, depends_on=after + [created[i] for i in plan.waits.get(index, ())], aliases=moved
            )
            name = plan.resource_name(index)
            fill = plan.secrets.get(index)
            if obj["kind"] == "Secret":
                data: Any = None  # a secret Output of the mapping data key -> value
                if fill is not None and not redact_secrets:
                    data = pulumi.Output.secret(config.require_secret_object(fill.config_key))
                created[index] = k8s.core.v1.Secret(
                    name,
                    metadata=obj["metadata"],
                    type=obj.get("type"),
                    string_data=data,
                    opts=pulumi.ResourceOptions.merge(
                        opts_, pulumi.ResourceOptions(additional_secret_outputs=["stringData", "data"])
                    ),
                )
                return created[index]
            if obj["kind"] in TYPED:
                created[index] = TYPED[obj["kind"]](name, obj, opts_)
                return created[index]
            extra = sorted(set(obj) - {"apiVersion", "kind", "metadata", "spec"})
            if extra:  # a generic resource carries spec only: a field beside it would be dropped silently
                raise ValueError(
                    f"layer {plan.key}: {obj['kind']} {obj['metadata']['name']} has {extra} beside spec; "
                    f"give its kind a typed resource in components/layer.py TYPED"
                )
            created[index] = k8s.apiextensions.CustomResource(
                name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], spec=obj.get("spec"), opts=opts_
            )
            return created[index]

        indexed = list(enumerate(plan.objects))
        self.namespaces = [create(i, o, []) for i, o in indexed if o["kind"] == "Namespace"]
        first = [(i, o) for i, o in indexed if o["kind"] != "Namespace" and o["kind"] in plan.before_charts]
        self.objects = [create(i, o, base + self.namespaces) for i, o in first]
        chart_base: list[pulumi.Resource] = base + (self.namespaces if "Namespace" in plan.before_charts else []) + self.objects
        for i, spec in enumerate(plan.charts):
            self.charts.append(
                helm_release(
                    plan.chart_resource_name(i),
                    spec,
                    pulumi.ResourceOptions(parent=self, depends_on=chart_base + self.charts[-1:], aliases=moved),
                    create_namespace=plan.chart_namespaces,
                )
            )
        crds: list[pulumi.Resource] = [
            c for c, spec in zip(self.charts, plan.charts) if not plan.crds_from or spec.name in plan.crds_from
        ]
        for index, obj in indexed:
            if obj["kind"] == "Namespace" or obj["kind"] in plan.before_charts:
                continue
            waits: list[pulumi.Resource] = base + self.namespaces + (crds if obj["kind"] in plan.after_charts else [])
            self.objects.append(create(index, obj, waits))
        # What other components wait for (``plan.gates``): every chart and the objects of the ``ready_kinds``.
        self.ready: list[pulumi.Resource] = [*self.charts, *(created[i] for i, o in indexed if o["kind"] in plan.ready_kinds)]
        self.outputs = pulumi.Output.from_input(plan.outputs)
        self.register_outputs({"outputs": self.outputs} if plan.registered is None else plan.registered)
