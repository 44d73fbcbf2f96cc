"""The platform layer in the one layer shape: the device plugins (the NVIDIA stack, its RuntimeClass, the fabric
device plugins), the Dynamo platform (the operator chart in its namespace) and, where a GPU pool spans an NVLink domain
(GB200), the NVIDIA DRA driver for its ComputeDomains: LayerPlans the DGDs wait for (``gates="graphs"``).

Each keeps the URNs its own component had: type ``dynamo:platform:DevicePlugins`` named ``device-plugins`` and
``dynamo:platform:DynamoPlatform`` named ``dynamo-platform``, every child's name as it was (``names``, ``chart_names``),
the component waiting for the nodes or storage and its children for nothing more (``wait_on_component``), and the
outputs it registered (``registered``). The objects come from stacks/cluster/platform.py.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from stacks.cluster.platform import (
    dynamo_platform,
    exposed_resources,
    fabric_plugins,
    fabrics_objects,
    nvidia_gpu_stack,
    nvidia_runtime_class,
)
from stacks.cluster.dra import dra_driver_spec
from stacks.layers import LayerPlan
from stacks.registry.charts import PLATFORM_NAMESPACE
from stacks.serving import pod_security_labels

PLATFORM_POD_SECURITY = "baseline"  # the level dynamo-system enforces (plan_dynamo_platform says why)

DEVICE_PLUGINS = "device-plugins"  # the component's resource name, the prefix of its children's
DYNAMO_PLATFORM = "dynamo-platform"
DRA_DRIVER = "nvidia-dra-driver-gpu"  # the release's Pulumi resource name (and Helm release name), unchanged since 25.x


def plan_device_plugins(
    fabrics: Sequence[str],
    nvidia: Optional[str] = "device-plugin",
    runtime_class_node_selector: Optional[Mapping[str, str]] = None,
    fabric_node_selector: Optional[Mapping[str, str]] = None,
) -> LayerPlan:
    """One NVIDIA GPU stack (``nvidia``: ``device-plugin`` | ``gpu-operator`` | None when the cluster has one), the
    RuntimeClass ``nvidia`` beside the device plugin (the GPU Operator brings its own), and the objects of every plugin
    the ``fabrics`` need, each once (``fabrics_objects``). Installed beside the GPU nodes, not after them (``after``
    the system nodes): a DaemonSet with no node yet is rolled out, and its pods start on each GPU node as it joins.
    Ready (what the DGDs wait for): the NVIDIA release, the RuntimeClass and the DaemonSets."""
    fabrics = list(fabrics)
    spec = nvidia_gpu_stack(nvidia) if nvidia else None
    objects: list[dict] = []
    names: dict[int, str] = {}
    if nvidia == "device-plugin":
        names[len(objects)] = f"{DEVICE_PLUGINS}-nvidia-runtimeclass"
        objects.append(nvidia_runtime_class(runtime_class_node_selector))
    waits: dict[int, tuple[int, ...]] = {}
    configmaps: list[int] = []
    for obj in fabrics_objects(fabrics, node_selector=fabric_node_selector):
        index = len(objects)
        names[index] = f"{DEVICE_PLUGINS}-{obj['metadata']['name']}-{obj['kind'].lower()}"
        if configmaps:
            waits[index] = tuple(configmaps)  # a DaemonSet mounts the ConfigMap before it
        if obj["kind"] == "ConfigMap":
            configmaps.append(index)
        objects.append(obj)
    registered: dict[str, Any] = {
        "nvidiaRelease": spec.name if spec else "",
        "plugins": list(dict.fromkeys(p for f in fabrics for p in fabric_plugins(f))),
        "resources": sorted(set().union(*(exposed_resources(f) for f in fabrics))),
    }
    return LayerPlan(
        key="devicePlugins",
        kind="DevicePlugins",
        title="device plugins",
        module="platform",
        component=DEVICE_PLUGINS,
        charts=[spec] if spec else [],
        chart_names={0: f"{DEVICE_PLUGINS}-{spec.name}"} if spec else {},
        objects=objects,
        names=names,
        waits=waits,
        after="nodes",
        wait_on_component=True,
        ready_kinds=frozenset({"RuntimeClass", "DaemonSet"}),
        gates="graphs",
        registered=registered,
    )


def plan_dynamo_platform(install: bool = True, prometheus_endpoint: Optional[str] = None) -> LayerPlan:
    """The ``dynamo-platform`` chart in ``dynamo-system`` (its Namespace first, then the release), once the nodes it
    runs on exist (on EKS the system nodes), not after the model cache's storage: the chart installs no etcd or NATS and
    claims no volume (stacks/cluster/platform.py ``dynamo_platform``), and the operator's pods need only the cluster's
    networking, which EKS bootstraps at cluster creation ("If you set this value to False when creating a cluster, the
    default networking add-ons will not be installed. The default networking add-ons include vpc-cni, coredns, and
    kube-proxy": EKS API CreateCluster ``bootstrapSelfManagedAddons``, left at its default here) and whose vpc-cni add-on
    the program creates before the nodes (stacks/cluster/identity.py ``BEFORE_NODES``). The operator learns the Prometheus URL (Planner, autoscaling) when observability is on. Without
    ``install`` (the cluster runs its own operator, the stack installs only device plugins) the component stays, empty,
    with its outputs. Ready (what the DGDs wait for): the release."""
    spec = dynamo_platform(prometheus_endpoint=prometheus_endpoint)
    # Pod Security (stacks.serving.pod_security_labels): the operator's pod fits baseline (the dynamo-operator chart's
    # values: controllerManager.manager.containerSecurityContext allowPrivilegeEscalation false, capabilities drop
    # ALL; no host namespace, host path or privileged container: shared/reference/platform/dynamo-operator-values.yaml),
    # so baseline is enforced and restricted warned and audited; the version is the program's (stacks.program).
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": spec.namespace,
            "labels": {"app.kubernetes.io/part-of": "dynamo-platform", **pod_security_labels(PLATFORM_POD_SECURITY)},
        },
    }
    registered = {"namespace": spec.namespace or PLATFORM_NAMESPACE, "releaseName": spec.name, "version": spec.version}
    return LayerPlan(
        key="dynamoPlatform",
        kind="DynamoPlatform",
        title="Dynamo platform",
        module="platform",
        component=DYNAMO_PLATFORM,
        charts=[spec] if install else [],
        objects=[namespace] if install else [],
        names={0: f"{DYNAMO_PLATFORM}-namespace"},
        chart_names={0: f"{DYNAMO_PLATFORM}-release"},
        before_charts=frozenset({"Namespace"}),
        chart_namespaces=False,
        after="nodes",
        wait_on_component=True,
        gates="graphs",
        registered=registered,
    )


def plan_dra_driver() -> LayerPlan:
    """The NVIDIA DRA driver release (stacks/cluster/dra.py ``dra_driver_spec``: ComputeDomains only, its controller
    on the system nodes, its kubelet plugin on the GPU nodes), which the DGDs' ComputeDomain claims need. Installed
    beside the GPU nodes, after the system nodes (``after="nodes"``), like the device plugins: the kubelet plugin's
    DaemonSet rolls out with no GPU node yet and starts on each as it joins. The release keeps its URN: named as before
    (``chart_names``), and it was a top-level resource of the EKS cluster source, so it carries that URN as its alias
    (``moved_from_top_level``)."""
    return LayerPlan(
        key="draDriver",
        kind="DraDriver",
        title="NVIDIA DRA driver (ComputeDomains)",
        module="platform",
        charts=[dra_driver_spec()],
        chart_names={0: DRA_DRIVER},
        after="nodes",
        gates="graphs",
        moved_from_top_level=True,
    )
