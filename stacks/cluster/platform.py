"""Pure builder for the platform layer: GPU and fabric device plugins, and the Dynamo platform chart.

No Pulumi here. ``components/platform.py`` registers what these functions return, so the
objects and Helm values can be tested (and rendered) without a cluster.

What each fabric needs (``fabric_plugins``) and which extended resources it then offers
(``exposed_resources``) are kept next to each other, and a test checks that every catalog
target only requests resources its fabric's plugin exposes.

Pins come from ``stacks/registry/versions.yaml`` (``charts:`` and ``plugins:``).
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Literal, Mapping, Optional, Sequence

from stacks.registry.charts import GPU_TOLERATION, PLATFORM_NAMESPACE, HelmSpec, helm_spec as _helm, plugin_image

# --------------------------------------------------------------------------- shared constants

PLUGIN_NAMESPACE = "kube-system"
PLATFORM_RELEASE = "dynamo-platform"

# The taint our GPU node groups carry; every plugin that must run on GPU nodes tolerates it.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
CRITICAL_ADDONS_TOLERATION = {"key": "CriticalAddonsOnly", "operator": "Exists"}

# Node label the cluster layer sets on EFA-enabled GPU node groups; the EFA plugin DaemonSet
# selects on it (instead of upstream's ~300-entry instance-type affinity list).
EFA_NODE_LABEL = "vpc.amazonaws.com/efa.present"
EFA_NODE_LABEL_VALUE = "true"
EFA_NODE_LABELS = MappingProxyType({EFA_NODE_LABEL: EFA_NODE_LABEL_VALUE})

# The NVIDIA device-plugin chart's default node affinity needs NFD's pci-10de label or this one.
# Without NFD (device-plugin mode, gfd off) the cluster layer must set it on GPU nodes.
GPU_PRESENT_LABELS = MappingProxyType({"nvidia.com/gpu.present": "true"})

EFA_RESOURCE = "vpc.amazonaws.com/efa"
RDMA_PREFIX = "rdma"
IB_RESOURCE_NAME = "ib"  # rdma/ib: Dynamo recipes, the infiniband fabric
NSCALE_RESOURCE_NAME = "shared_ib"  # rdma/shared_ib: Motif-3's upstream components/nscale layer
# GKE multi-network RDMA: the GKE-managed networks a pool attaches (A4X: rdma-0..3), each with its .IP resource.
GKE_RDMA_NETWORKS = 4

EFA_PLUGIN = "aws-efa-k8s-device-plugin"
RDMA_PLUGIN = "k8s-rdma-shared-dev-plugin"

Fabric = Literal["aws-efa", "infiniband", "gke-rdma", "nscale", "none"]
FABRICS: tuple[str, ...] = ("aws-efa", "infiniband", "gke-rdma", "nscale", "none")
NvidiaKind = Literal["device-plugin", "gpu-operator"]
NVIDIA_KINDS: tuple[str, ...] = ("device-plugin", "gpu-operator")


# --------------------------------------------------------------------------- pins and Helm specs: stacks/registry/charts.py


def nvidia_runtime_class(node_selector: Optional[Mapping[str, str]] = None) -> dict:
    """RuntimeClass ``nvidia`` for clusters whose NVIDIA stack is the device plugin (the GPU Operator creates
    its own). Recipes such as Nemotron-3-Ultra's name ``runtimeClassName: nvidia``; without the object the
    API server refuses their pods at admission. Handler ``nvidia``: the containerd runtime the EKS AL2023
    NVIDIA AMI configures on P instances (awslabs/amazon-eks-ami, nodeadm/internal/containerd/runtime_config.go:
    ``nvidiaRuntimeName = "nvidia"``); NVIDIA/k8s-device-plugin's README shows the same object.

    ``node_selector``: the labels of the nodes that have the handler (on EKS, our GPU node groups'
    ``nvidia.com/gpu.present=true``). RuntimeClass ``scheduling.nodeSelector`` is merged into the nodeSelector of
    every pod that names the class at admission, so such a pod can only land where the ``nvidia`` runtime exists
    (Kubernetes API node.k8s.io/v1 Scheduling; "Runtime Class", Scheduling). Without it, a pod naming the class that
    lands on a system node fails to start its sandbox (no such handler)."""
    rc: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    if node_selector:
        rc["scheduling"] = {"nodeSelector": dict(node_selector)}
    return rc


def nvidia_gpu_stack(
    kind: str,
    *,
    driver: bool = False,
    toolkit: bool = False,
    gdrcopy: bool = False,
    host_mofed: bool = False,
    nfd: bool = True,
    gfd: bool = False,
) -> HelmSpec:
    """Exactly one NVIDIA GPU stack: the k8s-device-plugin chart or the GPU Operator.

    Both advertise ``nvidia.com/gpu``; the GPU Operator deploys the same device plugin
    (v0.20.0) itself, so the two must never be installed together. ``kind`` chooses one,
    and the GPU Operator keeps its own device plugin (``devicePlugin.enabled: true``)
    because no standalone plugin is installed next to it.

    device-plugin: ``gfd`` adds GPU feature discovery (and the chart's NFD subchart), which
    labels ``nvidia.com/gpu.product``; off by default because our node groups set that label
    (and ``GPU_PRESENT_LABELS``) themselves.
    gpu-operator: ``driver`` installs the driver and ``toolkit`` the NVIDIA Container Toolkit (both off: the program
    installs the GPU Operator only on EKS, whose AL2023 NVIDIA AMI ships both, and the EKS user guide says to disable
    the operator's installation of the driver and the toolkit there: "Use P6e-GB200 UltraServers with Amazon EKS",
    gpu-operator-values.yaml; the chart's own default is ``toolkit.enabled: true``, gpu-operator v26.7.0 values);
    ``gdrcopy`` for EFA/GPUDirect; ``host_mofed`` with the Network Operator (which runs NFD, so
    pass ``nfd=False``).
    """
    if kind == "device-plugin":
        values: dict[str, Any] = {
            "tolerations": [dict(CRITICAL_ADDONS_TOLERATION), dict(GPU_TOLERATION)],
            "priorityClassName": "system-node-critical",
            "gfd": {"enabled": gfd},
        }
        return _helm("nvidia-device-plugin", "nvidia-device-plugin", "nvidia-device-plugin", values)
    if kind == "gpu-operator":
        values = {
            "nfd": {"enabled": nfd},
            "driver": {"enabled": driver, **({"rdma": {"enabled": True, "useHostMofed": True}} if host_mofed else {})},
            "toolkit": {"enabled": toolkit},
            "devicePlugin": {"enabled": True},  # the operator's plugin is the only one (nothing else is installed)
            "gdrcopy": {"enabled": gdrcopy},
            "daemonsets": {"tolerations": [dict(GPU_TOLERATION)]},
        }
        return _helm("gpu-operator", "gpu-operator", "gpu-operator", values)
    raise ValueError(f"NVIDIA GPU stack kind must be one of {', '.join(NVIDIA_KINDS)}, not {kind!r}")


def dynamo_platform(
    version: Optional[str] = None, *, grove: bool = False, kai_scheduler: bool = False, prometheus_endpoint: Optional[str] = None
) -> HelmSpec:
    """The ``dynamo-platform`` chart (NGC) in ``dynamo-system``: one cluster-wide operator that
    applies its own CRDs (``upgradeCRD``), Kubernetes-API discovery, no bundled etcd/NATS.

    ``grove``/``kai_scheduler`` install the bundled subcharts (multinode DGDs need Grove or LWS;
    no catalog target is multinode today) at the versions the chart names: 1.6.0 bundles Grove
    v0.1.0-alpha.14 and kai-scheduler v0.17.0, recorded beside the chart pin in ``versions.yaml``
    (``chart_pin("dynamo-platform")["grove"]`` / ``["kai-scheduler"]``; the Helm release installs
    them, no separate pin is applied). With both, Grove alpha.13 and later on KAI need KAI's staleness
    grace period at ``-1s`` (Dynamo install guide, "Grove and KAI": ../shared/reference/platform/dynamo-platform.md).
    """
    operator: dict[str, Any] = {
        "enabled": True,
        "upgradeCRD": True,
        "discoveryBackend": "kubernetes",
        "namespaceRestriction": {"enabled": False},
    }
    if prometheus_endpoint:
        operator["dynamo"] = {"metrics": {"prometheusEndpoint": prometheus_endpoint}}
    values: dict[str, Any] = {
        "global": {
            "etcd": {"install": False},
            "nats": {"install": False},
            "grove": {"install": grove, "enabled": grove},
            "kai-scheduler": {"install": kai_scheduler, "enabled": kai_scheduler},
        },
        "dynamo-operator": operator,
    }
    if grove and kai_scheduler:
        values["kai-scheduler"] = {"scheduler": {"args": {"default-staleness-grace-period": "-1s"}}}
    return _helm("dynamo-platform", PLATFORM_RELEASE, PLATFORM_NAMESPACE, values, version)


# --------------------------------------------------------------------------- fabric device plugins


def _host_path(name: str, path: str, type_: Optional[str] = None) -> dict:
    hp: dict[str, Any] = {"path": path}
    if type_:
        hp["type"] = type_
    return {"name": name, "hostPath": hp}


def _labels(name: str, version: str) -> dict:
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/version": version,
        "app.kubernetes.io/part-of": "dynamo-platform",
        "app.kubernetes.io/managed-by": "pulumi",
    }


def _tag(image: str) -> str:
    return image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else "latest"


def efa_device_plugin(
    image: Optional[str] = None,
    *,
    namespace: str = PLUGIN_NAMESPACE,
    node_selector: Optional[Mapping[str, str]] = None,
    extra_tolerations: tuple[dict, ...] = (),
) -> list[dict]:
    """The AWS EFA device plugin (eks-charts aws-efa-k8s-device-plugin) as a plain DaemonSet.

    Follows the upstream chart template (host network, system-node-critical, privileged,
    hostPath mounts) with two changes: it is placed by ``EFA_NODE_LABEL`` instead of an
    instance-type list, and it tolerates the GPU taint. It keeps the chart's exclusion of
    EKS Auto Mode nodes, which ship their own EFA plugin. No ServiceAccount: the pod does not
    talk to the API server (``automountServiceAccountToken: false`` upstream).
    """
    image = image or plugin_image(EFA_PLUGIN)
    name = EFA_PLUGIN
    labels = _labels(name, _tag(image))
    pod_labels = {"name": name}
    selector = dict(node_selector) if node_selector is not None else dict(EFA_NODE_LABELS)
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "selector": {"matchLabels": pod_labels},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": {**pod_labels, **labels}},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "tolerations": [dict(CRITICAL_ADDONS_TOLERATION), dict(GPU_TOLERATION), *map(dict, extra_tolerations)],
                        "priorityClassName": "system-node-critical",
                        "nodeSelector": selector,
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {
                                            "matchExpressions": [
                                                {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["auto"]}
                                            ]
                                        },
                                    ]
                                }
                            }
                        },
                        "hostNetwork": True,
                        "containers": [
                            {
                                "name": name,
                                "image": image,
                                "securityContext": {
                                    "allowPrivilegeEscalation": True,
                                    "privileged": True,
                                    "runAsNonRoot": False,
                                    "runAsUser": 0,
                                },
                                "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                                "volumeMounts": [
                                    {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                                    {"name": "infiniband-volume", "mountPath": "/dev/infiniband/"},
                                    {"name": "neuron-tools", "mountPath": "/opt/aws/neuron/"},
                                ],
                            }
                        ],
                        "volumes": [
                            _host_path("device-plugin", "/var/lib/kubelet/device-plugins"),
                            _host_path("infiniband-volume", "/dev/infiniband/"),
                            _host_path("neuron-tools", "/opt/aws/neuron/", "DirectoryOrCreate"),
                        ],
                    },
                },
            },
        }
    ]


RDMA_CONFIGMAP = "rdma-devices"
RDMA_DAEMONSET = "rdma-shared-dp-ds"


def rdma_config(
    resource_name: str = IB_RESOURCE_NAME,
    *,
    rdma_hca_max: int = 1000,
    vendors: tuple[str, ...] = ("15b3",),
    link_types: tuple[str, ...] = ("infiniband",),
) -> dict:
    """The shared plugin's ``config.json``: one ``rdma/<resource_name>`` resource over the Mellanox
    (vendor 15b3) devices whose link type is InfiniBand. ``rdmaHcaMax`` caps the units per node
    (the Ultra IB recipes request one per GPU, the others one per pod)."""
    return {
        "periodicUpdateInterval": 300,
        "configList": [
            {
                "resourceName": resource_name,
                "resourcePrefix": RDMA_PREFIX,
                "rdmaHcaMax": rdma_hca_max,
                "selectors": {"vendors": list(vendors), "linkTypes": list(link_types)},
            }
        ],
    }


def rdma_shared_device_plugin(
    resource_name: str = IB_RESOURCE_NAME,
    image: Optional[str] = None,
    *,
    namespace: str = PLUGIN_NAMESPACE,
    node_selector: Optional[Mapping[str, str]] = None,
    rdma_hca_max: int = 1000,
    extra_tolerations: tuple[dict, ...] = (),
) -> list[dict]:
    """Mellanox k8s-rdma-shared-dev-plugin: ConfigMap ``rdma-devices`` and DaemonSet ``rdma-shared-dp-ds``
    (upstream's kustomize base, image pinned), exposing ``rdma/<resource_name>``.

    Upstream has no placement; here the DaemonSet tolerates the GPU taint and takes an optional
    ``node_selector`` (e.g. NFD's ``feature.node.kubernetes.io/pci-15b3.present``). On nodes
    without matching devices it advertises nothing.
    """
    image = image or plugin_image(RDMA_PLUGIN)
    labels = _labels(RDMA_PLUGIN, _tag(image))
    pod_labels = {"name": RDMA_DAEMONSET}
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": RDMA_CONFIGMAP, "namespace": namespace, "labels": labels},
        "data": {"config.json": json.dumps(rdma_config(resource_name, rdma_hca_max=rdma_hca_max), indent=2) + "\n"},
    }
    pod_spec: dict[str, Any] = {
        "hostNetwork": True,
        "priorityClassName": "system-node-critical",
        "tolerations": [dict(CRITICAL_ADDONS_TOLERATION), dict(GPU_TOLERATION), *map(dict, extra_tolerations)],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    pod_spec |= {
        "containers": [
            {
                "name": "k8s-rdma-shared-dp-ds",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins", "readOnly": False},
                    {"name": "plugins-registry", "mountPath": "/var/lib/kubelet/plugins_registry", "readOnly": False},
                    {"name": "config", "mountPath": "/k8s-rdma-shared-dev-plugin"},
                    {"name": "devs", "mountPath": "/dev/"},
                ],
            }
        ],
        "volumes": [
            _host_path("device-plugin", "/var/lib/kubelet/device-plugins"),
            _host_path("plugins-registry", "/var/lib/kubelet/plugins_registry"),
            {"name": "config", "configMap": {"name": RDMA_CONFIGMAP, "items": [{"key": "config.json", "path": "config.json"}]}},
            _host_path("devs", "/dev/"),
        ],
    }
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": RDMA_DAEMONSET, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": pod_labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {**pod_labels, **labels}}, "spec": pod_spec},
        },
    }
    return [cm, ds]


# --------------------------------------------------------------------------- fabric -> plugins -> resources

# Which plugin(s) each fabric needs installed. gke-rdma: GKE's multi-network (GKENetworkParamSet /
# Network objects, set up with the cluster) provides the networking.gke.io.networks/* resources;
# there is no device plugin of ours to install.
_FABRIC_PLUGINS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "aws-efa": (EFA_PLUGIN,),
        "infiniband": (RDMA_PLUGIN,),
        "nscale": (RDMA_PLUGIN,),
        "gke-rdma": (),
        "none": (),
    }
)

# The rdma-shared plugin's resourceName per fabric. Nscale's own recipe layer (Motif-3
# components/nscale) requests rdma/shared_ib, which is what Nscale clusters name it.
_RDMA_RESOURCE_NAME: Mapping[str, str] = MappingProxyType({"infiniband": IB_RESOURCE_NAME, "nscale": NSCALE_RESOURCE_NAME})


def _check_fabric(fabric: str) -> None:
    if fabric not in FABRICS:
        raise ValueError(f"unknown fabric {fabric!r}; known: {', '.join(FABRICS)}")


def fabric_plugins(fabric: str) -> list[str]:
    """The device plugin(s) a fabric needs (names as in ``versions.yaml`` ``plugins:``)."""
    _check_fabric(fabric)
    return list(_FABRIC_PLUGINS[fabric])


def gke_rdma_resources(networks: int = GKE_RDMA_NETWORKS) -> set[str]:
    return {f"networking.gke.io.networks/rdma-{i}{ip}" for i in range(networks) for ip in ("", ".IP")}


def exposed_resources(fabric: str) -> set[str]:
    """Extended resources (besides ``nvidia.com/gpu``) pods on this fabric can request."""
    _check_fabric(fabric)
    if fabric == "aws-efa":
        return {EFA_RESOURCE}
    if fabric in _RDMA_RESOURCE_NAME:
        return {f"{RDMA_PREFIX}/{_RDMA_RESOURCE_NAME[fabric]}"}
    if fabric == "gke-rdma":
        return gke_rdma_resources()
    return set()


def fabric_objects(fabric: str, *, node_selector: Optional[Mapping[str, str]] = None) -> list[dict]:
    """The Kubernetes objects of every plugin ``fabric`` needs, in apply order."""
    _check_fabric(fabric)
    objs: list[dict] = []
    for plugin in _FABRIC_PLUGINS[fabric]:
        if plugin == EFA_PLUGIN:
            objs += efa_device_plugin(node_selector=node_selector)
        elif plugin == RDMA_PLUGIN:
            objs += rdma_shared_device_plugin(_RDMA_RESOURCE_NAME[fabric], node_selector=node_selector)
    return objs


def fabrics_objects(fabrics: Sequence[str], *, node_selector: Optional[Mapping[str, str]] = None) -> list[dict]:
    """The objects of every plugin that any of ``fabrics`` needs (a cluster serving targets on several fabrics), each
    once, in apply order. Two fabrics that configure one plugin differently (the RDMA shared device plugin names one
    resource per cluster: ``infiniband`` and ``nscale`` differ) cannot share its objects: ValueError naming both."""
    out: dict[tuple, tuple[str, dict]] = {}
    for fabric in dict.fromkeys(fabrics):
        for obj in fabric_objects(fabric, node_selector=node_selector):
            key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if key in out and out[key][1] != obj:
                raise ValueError(
                    f"fabrics {out[key][0]!r} and {fabric!r} both configure {key[0]} {key[2]} of their device "
                    f"plugin, differently; one cluster runs one such plugin configuration"
                )
            out.setdefault(key, (fabric, obj))
    return [obj for _, obj in out.values()]


__all__ = [
    "fabrics_objects",
    "EFA_NODE_LABEL",
    "EFA_NODE_LABEL_VALUE",
    "EFA_NODE_LABELS",
    "GPU_PRESENT_LABELS",
    "GPU_TAINT",
    "FABRICS",
    "NVIDIA_KINDS",
    "efa_device_plugin",
    "rdma_shared_device_plugin",
    "rdma_config",
    "nvidia_gpu_stack",
    "nvidia_runtime_class",
    "dynamo_platform",
    "exposed_resources",
    "fabric_plugins",
    "fabric_objects",
    "gke_rdma_resources",
]
