"""One ComponentResource for every optional layer in the one layer shape (``stacks.layers.LayerPlan``).

Type token ``dynamo:<layer key>:<kind>`` (``dynamo:frontDoor:FrontDoor``). Order: the layer's Helm charts, in order
(each waits for the one before); its Namespaces; then every other object, those whose CRDs a chart brings after the
charts. A Secret named in ``plan.secrets`` is filled from its Pulumi secret config key (a mapping data key -> value),
so its values stay Pulumi secrets end to end; render mode writes it without data, like the HF token Secret. The shell
decides nothing: what it creates is ``plan.objects``, which is what ``render --stack`` shows.
"""
from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.platform import helm_release
from stacks.layers import LayerPlan
from stacks.config.keys import NS

PKG = "dynamo"


def _resource_name(layer: str, obj: dict) -> str:
    md = obj["metadata"]
    where = f"{md['namespace']}-" if md.get("namespace") else ""
    return f"{layer}-{obj['kind'].lower()}-{where}{md['name']}"


class Layer(pulumi.ComponentResource):
    """The charts and objects of one optional layer (see the module docstring)."""

    outputs: pulumi.Output[dict]

    def __init__(self, plan: LayerPlan, opts: Optional[pulumi.ResourceOptions] = None,
                 depends_on: Sequence[pulumi.Resource] = (), redact_secrets: bool = False):
        """``depends_on``: what the layer waits for (the serving objects it routes to); ``redact_secrets``: render mode."""
        super().__init__(f"{PKG}:{plan.key}:{plan.kind}", plan.key, None, opts)
        for warning in plan.warnings:
            pulumi.log.warn(warning, resource=self)
        base = list(depends_on)
        self.charts: list[k8s.helm.v3.Release] = []
        for spec in plan.charts:
            self.charts.append(helm_release(f"{plan.key}-{spec.name}", spec,
                                            pulumi.ResourceOptions(parent=self, depends_on=base + self.charts[-1:])))
        namespaces = [o for o in plan.objects if o["kind"] == "Namespace"]
        self.namespaces = [k8s.core.v1.Namespace(_resource_name(plan.key, o), metadata=o["metadata"],
                                                 opts=pulumi.ResourceOptions(parent=self)) for o in namespaces]
        config = pulumi.Config(NS)
        self.objects: list[pulumi.CustomResource] = []
        for index, obj in enumerate(plan.objects):
            if obj["kind"] == "Namespace":
                continue
            after = base + self.namespaces + (self.charts if obj["kind"] in plan.after_charts else [])
            opts_ = pulumi.ResourceOptions(parent=self, depends_on=after)
            name = _resource_name(plan.key, obj)
            fill = plan.secrets.get(index)
            if obj["kind"] == "Secret":
                data = None
                if fill is not None and not redact_secrets:
                    data = pulumi.Output.secret(config.require_secret_object(fill.config_key))
                self.objects.append(k8s.core.v1.Secret(
                    name, metadata=obj["metadata"], type=obj.get("type"), string_data=data,
                    opts=pulumi.ResourceOptions.merge(opts_, pulumi.ResourceOptions(additional_secret_outputs=["stringData", "data"]))))
            elif obj["kind"] == "ConfigMap":
                self.objects.append(k8s.core.v1.ConfigMap(name, metadata=obj["metadata"], data=obj.get("data"), opts=opts_))
            else:
                extra = sorted(set(obj) - {"apiVersion", "kind", "metadata", "spec"})
                if extra:  # a generic resource carries spec only: a field beside it would be dropped silently
                    raise ValueError(f"layer {plan.key}: {obj['kind']} {obj['metadata']['name']} has {extra} beside spec; "
                                     f"give its kind a typed resource in components/layer.py")
                self.objects.append(k8s.apiextensions.CustomResource(
                    name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], spec=obj.get("spec"),
                    opts=opts_))
        self.outputs = pulumi.Output.from_input(plan.outputs)
        self.register_outputs({"outputs": self.outputs})
