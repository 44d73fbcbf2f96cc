"""Platform-layer ComponentResources: thin wiring of ``stacks.cluster.platform`` objects and Helm specs.

``DevicePlugins`` installs one NVIDIA GPU stack (device plugin *or* GPU Operator) and the
fabric device plugin(s) the target's fabric needs; ``DynamoPlatform`` installs the Dynamo
operator chart. Both expose ``ready``: the resources a DynamoGraphDeployment should depend on.

Note: ``helm.v3.Release`` needs a reachable cluster; it cannot be rendered by a provider in
``render_yaml_to_directory`` mode.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import pulumi
import pulumi_kubernetes as k8s

from stacks.registry.charts import PLATFORM_NAMESPACE, HelmSpec
from stacks.cluster.platform import (
    dynamo_platform,
    exposed_resources,
    fabrics_objects,
    fabric_plugins,
    nvidia_gpu_stack,
    nvidia_runtime_class,
)

PKG = "dynamo"
HELM_TIMEOUT_SECONDS = 900


def _opts(parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = (), **kw) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on), **kw)


def helm_release(name: str, spec: HelmSpec, opts: pulumi.ResourceOptions, create_namespace: bool = True) -> k8s.helm.v3.Release:
    """One ``helm.v3.Release`` from a pure ``HelmSpec``; it waits for the chart's workloads to be ready."""
    return k8s.helm.v3.Release(
        name,
        name=spec.name,
        chart=spec.chart,
        version=spec.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=spec.repo),
        namespace=spec.namespace,
        create_namespace=create_namespace,
        values=spec.values,
        timeout=HELM_TIMEOUT_SECONDS,
        opts=opts,
    )


def _k8s_object(name: str, obj: dict, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """A typed pulumi_kubernetes resource for one plain object from ``stacks.cluster.platform``."""
    kind = obj["kind"]
    if kind == "DaemonSet":
        return k8s.apps.v1.DaemonSet(name, metadata=obj["metadata"], spec=obj["spec"], opts=opts)
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=obj["metadata"], data=obj.get("data"), opts=opts)
    if kind == "ServiceAccount":
        return k8s.core.v1.ServiceAccount(name, metadata=obj["metadata"], opts=opts)
    raise ValueError(f"platform object kind {kind!r} has no typed resource mapping")


class DevicePlugins(pulumi.ComponentResource):
    """One NVIDIA GPU stack (``nvidia``: ``device-plugin`` | ``gpu-operator`` | ``None`` when the cluster
    already has one) plus the device plugin(s) for ``fabric`` (one fabric, or a list: every plugin any of them needs,
    each once; ``stacks.cluster.platform.fabrics_objects``)."""

    nvidia_release: pulumi.Output[str]
    plugins: pulumi.Output[list]
    resources: pulumi.Output[list]

    def __init__(self, name: str, fabric: Union[str, Sequence[str]], nvidia: Optional[str] = "device-plugin",
                 opts: Optional[pulumi.ResourceOptions] = None, nvidia_spec: Optional[HelmSpec] = None,
                 fabric_node_selector: Optional[dict] = None, runtime_class_node_selector: Optional[dict] = None):
        super().__init__(f"{PKG}:platform:DevicePlugins", name, None, opts)
        spec = nvidia_spec or (nvidia_gpu_stack(nvidia) if nvidia else None)
        self.nvidia = helm_release(f"{name}-{spec.name}", spec, _opts(self)) if spec else None
        self.objects: list[pulumi.CustomResource] = []
        previous: list[pulumi.Resource] = []
        self.runtime_class = None
        if nvidia == "device-plugin" and nvidia_spec is None:  # the GPU Operator brings its own
            rc = nvidia_runtime_class(runtime_class_node_selector)
            self.runtime_class = k8s.node.v1.RuntimeClass(f"{name}-nvidia-runtimeclass", metadata=rc["metadata"],
                                                          handler=rc["handler"], scheduling=rc.get("scheduling"), opts=_opts(self))
        fabrics = [fabric] if isinstance(fabric, str) else list(fabric)
        for obj in fabrics_objects(fabrics, node_selector=fabric_node_selector):
            meta = obj["metadata"]
            r = _k8s_object(f"{name}-{meta['name']}-{obj['kind'].lower()}", obj, _opts(self, previous))
            self.objects.append(r)
            if obj["kind"] == "ConfigMap":
                previous = previous + [r]  # the DaemonSet mounts it
        self.ready: list[pulumi.Resource] = ([self.nvidia] if self.nvidia else []) + ([self.runtime_class] if self.runtime_class else []) + [
            r for r in self.objects if isinstance(r, k8s.apps.v1.DaemonSet)
        ]
        self.nvidia_release = pulumi.Output.from_input(spec.name if spec else "")
        self.plugins = pulumi.Output.from_input(list(dict.fromkeys(p for f in fabrics for p in fabric_plugins(f))))
        self.resources = pulumi.Output.from_input(sorted(set().union(*(exposed_resources(f) for f in fabrics))))
        self.register_outputs({"nvidiaRelease": self.nvidia_release, "plugins": self.plugins, "resources": self.resources})


class DynamoPlatform(pulumi.ComponentResource):
    """The ``dynamo-platform`` chart in ``dynamo-system`` (namespace, then release). ``skip=True``
    registers nothing, for clusters that already run the cluster-wide operator, but still
    exposes the outputs (and an empty ``ready``)."""

    namespace: pulumi.Output[str]
    release_name: pulumi.Output[str]
    version: pulumi.Output[str]

    def __init__(self, name: str, version: Optional[str] = None, skip: bool = False,
                 opts: Optional[pulumi.ResourceOptions] = None, spec: Optional[HelmSpec] = None,
                 create_namespace: bool = True):
        super().__init__(f"{PKG}:platform:DynamoPlatform", name, None, opts)
        spec = spec or dynamo_platform(version)
        self.ns: Optional[k8s.core.v1.Namespace] = None
        self.release: Optional[k8s.helm.v3.Release] = None
        if not skip:
            deps: list[pulumi.Resource] = []
            if create_namespace:
                self.ns = k8s.core.v1.Namespace(
                    f"{name}-namespace",
                    metadata={"name": spec.namespace, "labels": {"app.kubernetes.io/part-of": "dynamo-platform"}},
                    opts=_opts(self),
                )
                deps.append(self.ns)
            self.release = helm_release(f"{name}-release", spec, _opts(self, deps), create_namespace=False)
        self.ready: list[pulumi.Resource] = [self.release] if self.release else []
        self.namespace = pulumi.Output.from_input(spec.namespace or PLATFORM_NAMESPACE)
        self.release_name = pulumi.Output.from_input(spec.name)
        self.version = pulumi.Output.from_input(spec.version)
        self.register_outputs({"namespace": self.namespace, "releaseName": self.release_name, "version": self.version})
