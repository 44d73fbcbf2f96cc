"""What the Dynamo operator makes of a DGD: the pods (names, labels, container ports) and Services.

Pure: a v1beta1 DynamoGraphDeployment as ``stacks.serving.build_plan`` renders it in, plain data out.
The simulation (``stacks/cli/simulate.py``) creates these pods on its API server, and the selection
test (tests/test_selection.py) lists them through the PodMonitors' and Services' label selectors.

Sources (ai-dynamo/dynamo, stored index read 2026-12-01; ``../shared/reference/dynamo-next/OPERATOR-LABELS.md``
collects the same facts). Abbreviations used in the comments below:

- C  = ``deploy/operator/internal/consts/consts.go`` @ 0367e404b084336211ade8c536f8c45ab189af47
- G  = ``deploy/operator/internal/dynamo/graph.go`` @ d4872d7e893368976cb9ce9a2799d7e276c54f2d
  (``GetDCDResourceName``, ``GenerateComponentService``)
- CC = ``ComponentDefaultsFactory`` in ``deploy/operator/internal/dynamo/`` (index id 55508141114):
  frontend -> FrontendDefaults; worker, prefill, decode -> WorkerDefaults
- F  = ``deploy/operator/internal/dynamo/component_frontend.go`` @ 132ccbe3dd5fc5c2a95232461d536fbde63e115f
- W  = ``deploy/operator/internal/dynamo/component_worker.go`` @ 015d780ba9c3d32c293ad67b786fe9af0d8a4d22
- H  = ``deploy/operator/internal/dynamo/hash.go`` @ 03bad24064c7381feb663597598e75524e9c98d0
- R  = the DCD workload renderer ``generatePodTemplateSpec`` / ``generateService``
  (``deploy/operator/internal/controller/``, index ids 57459390080 and 57406437126)
- T  = controller test fixture ``TestLegacyWorkerIdentityUpgradeDoesNotTriggerRollout`` (index id 57930476132):
  the worker Deployment ``qwen-decode-db6b6891`` and LeaderWorkerSet ``qwen-decode-db6b6891-0`` the operator renders
- V  = ``ComputeDynamoNamespace`` in ``deploy/operator/api/v1beta1`` (index id 52068361748)
- K  = the DGD CRD, ``../shared/reference/crds/nvidia.com_dynamographdeployments.yaml``, field
  ``spec.components[].type``: "Drives port mapping, frontend detection, planner RBAC, and the pod label
  nvidia.com/dynamo-component-type. Because prefill and decode are first-class values, users can set them directly."

Version note. What this module models is the operator of the platform pin, dynamo-platform 1.6.0
(``charts.dynamo-platform`` in ``stacks/registry/versions.yaml``), whose chart bundles the dynamo-operator 1.6.0 subchart
(``../shared/reference/dynamo-next/platform/dynamo-platform-Chart.yaml``, michaelfeil/dynamo
``deploy/helm/charts/platform/Chart.yaml`` @ 841aeacda04988eeec18cb08aa0292be7e15389c). The sources above are
the newest stored operator, 1.6-era by content (the LPX/failover constants, operator-origin-version); the index
is undated and no release tag of them was checked (OPERATOR-LABELS.md, "Not verified"). For a cluster still on
an older operator (1.5.x, before an upgrade to the 1.6 pins) the facts encoded here are the same as far as the
index shows, except:

- ``nvidia.com/dynamo-component-type`` of a ``type: prefill|decode`` component is ``prefill``/``decode``
  (C's comment on KubeLabelDynamoComponentType, K, ``GetDCDWorkloadComponentType`` index id 59364956812).
  Older operators (v1alpha1 era, still in the index: index id 2598142538) copied ``spec.componentType``
  (then ``worker``) and put the role in ``nvidia.com/dynamo-sub-component-type``; only DCDs converted from
  v1alpha1 keep that (component-type ``worker`` + sub-component-type). This is not new in 1.6: the bug
  report https://github.com/ai-dynamo/dynamo/issues/10596 (2026-06-11, "Dynamo 1.2.0") shows ``type: prefill``
  / ``type: decode`` pods labelled ``prefill``/``decode`` and the chart's worker PodMonitor (``worker`` only)
  missing them; the chart fix (https://github.com/ai-dynamo/dynamo/pull/10597, merged 2026-06-11) selects
  ``In [worker, decode, prefill]``. So 1.5.x operators label the same as the pinned 1.6.0; a monitor must
  select all three types either way.
- The component Service selector: newest (G) = component-type + dynamo-namespace + dynamo-component;
  older DCD controller (index id 2598142538) = component-type + dynamo-namespace. Both select exactly
  the frontend pods of a DGD with one frontend; ``operator_services`` gives the newest.

Pod NAMES are the least verified part: the Deployment (or LeaderWorkerSet) name is verified (G
``GetDCDResourceName``: ``<dgd>-<lower(component)>``, workers ``-<worker hash>``; T), the worker hash is
8 hex digits of a SHA-256 (H) but over Go's JSON of the spec, so its value here is a stand-in of the same
shape; the ReplicaSet's ``pod-template-hash`` and the pod's 5-character suffix are the Deployment and
ReplicaSet controllers' (random/hash values; stand-ins of the same alphabet here). Labels and ports are
verified as listed per line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Optional

# ---- label keys (C)
LABEL_COMPONENT_TYPE = "nvidia.com/dynamo-component-type"  # C KubeLabelDynamoComponentType
LABEL_SUB_COMPONENT_TYPE = "nvidia.com/dynamo-sub-component-type"  # C (only on DCDs converted from v1alpha1)
LABEL_COMPONENT = "nvidia.com/dynamo-component"  # C KubeLabelDynamoComponent; value = the DGD component name (T)
LABEL_NAMESPACE = "nvidia.com/dynamo-namespace"  # C KubeLabelDynamoNamespace
LABEL_DGD_NAME = "nvidia.com/dynamo-graph-deployment-name"  # C KubeLabelDynamoGraphDeploymentName
LABEL_WORKER_HASH = "nvidia.com/dynamo-worker-hash"  # C: "worker generation label on worker DCDs and worker pods"
LABEL_METRICS_ENABLED = "nvidia.com/metrics-enabled"  # C KubeLabelMetricsEnabled, "Controller-managed label for pod selection"
LABEL_SELECTOR = "nvidia.com/selector"  # C KubeLabelDynamoSelector; the Deployment's selector = its name (T)
LABEL_DISCOVERY_BACKEND = "nvidia.com/dynamo-discovery-backend"  # C; "kubernetes" (T)
LABEL_DISCOVERY_ENABLED = "nvidia.com/dynamo-discovery-enabled"  # C; "true" on non-frontend components (T; DCD controller)
LABEL_POD_TEMPLATE_HASH = "pod-template-hash"  # Kubernetes Deployment controller (apps/v1 DefaultDeploymentUniqueLabelKey)
LABEL_LWS_ROLE = "role"  # multinode (LeaderWorkerSet) pods: role=leader|worker (T)
ANNOTATION_ENABLE_METRICS = "nvidia.com/enable-metrics"  # C KubeAnnotationEnableMetrics: "false" on the DGD opts out

# ---- component types (C ComponentType*)
FRONTEND, WORKER, PREFILL, DECODE, PLANNER, EPP, DEFAULT = "frontend", "worker", "prefill", "decode", "planner", "epp", "default"
WORKER_TYPES = (WORKER, PREFILL, DECODE)  # CC: all three get WorkerDefaults; H: IsWorkerComponent hashes these

# ---- ports (C), per component type (F, W; planner/EPP from C only)
HTTP_PORT = ("http", 8000)  # C DynamoContainerPortName / DynamoServicePort; F puts it on the frontend container
SYSTEM_PORT = ("system", 9090)  # C DynamoSystemPortName / DynamoSystemPort; W, T
NIXL_PORT = ("nixl", 19090)  # C DynamoNixlPortName / DynamoNixlPort; W, T
PLANNER_METRICS_PORT = ("metrics", 9085)  # C DynamoMetricsPortName / DynamoPlannerMetricsPort
EPP_GRPC_PORT = ("grpc", 9002)  # C EPPGRPCPortName / EPPGRPCPort
DEFAULT_PORTS: dict[str, tuple[tuple[str, int], ...]] = {
    FRONTEND: (HTTP_PORT,),
    WORKER: (SYSTEM_PORT, NIXL_PORT),
    PREFILL: (SYSTEM_PORT, NIXL_PORT),
    DECODE: (SYSTEM_PORT, NIXL_PORT),
    PLANNER: (PLANNER_METRICS_PORT,),
    EPP: (EPP_GRPC_PORT,),
    DEFAULT: (),
}
COMPONENT_TYPES = tuple(DEFAULT_PORTS)

# The ReplicaSet/pod name alphabet of k8s.io/apimachinery/pkg/util/rand (SafeEncodeString, String):
# consonants and digits without vowels or look-alikes.
_K8S_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class OperatorPod:
    component: str  # DGD component name, e.g. "Frontend", "VllmDecodeWorker"
    component_type: str  # frontend | worker | prefill | decode | planner | epp | default
    replica: int
    name: str  # <workload>-<pod-template-hash>-<5 chars> (Deployment) or <lws>-<group>[-<worker>] (multinode)
    labels: dict[str, str] = field(hash=False)
    ports: dict[str, int] = field(hash=False)  # container port name -> number
    workload: str = ""  # the Deployment / LeaderWorkerSet the pod belongs to (= the DCD name)
    role: str = "main"  # main | leader | worker (multinode)


def _k8s_token(seed: str, n: int) -> str:
    """``n`` characters of the Kubernetes name alphabet, deterministic in ``seed`` (stands in for a random suffix)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_K8S_ALPHANUMS[b % len(_K8S_ALPHANUMS)] for b in digest[:n])


def component_type(comp: dict) -> str:
    """The pod label value of a v1beta1 component: its ``type`` (K; ``GetDCDWorkloadComponentType`` returns
    ``dcd.Spec.ComponentType`` for native v1beta1 DCDs). No type: ``default`` (C ComponentTypeDefault)."""
    t = comp.get("type") or DEFAULT
    if t not in COMPONENT_TYPES:
        raise ValueError(f"component {comp.get('name')!r}: type {t!r} is not one of {', '.join(COMPONENT_TYPES)}")
    return t


def dynamo_namespace(dgd: dict) -> str:
    """``<k8s namespace>-<dgd name>`` with dots replaced (V ``ComputeDynamoNamespace``; no component here sets
    ``globalDynamoNamespace``, which would give ``dynamo``)."""
    meta = dgd["metadata"]
    return f"{meta.get('namespace') or 'default'}-{meta['name'].replace('.', '-')}"


def worker_hash(dgd: dict) -> str:
    """Stand-in for the operator's worker generation hash: 8 hex digits of SHA-256 over the worker components'
    pod-shaping fields (H ``ComputeV1beta1DGDWorkersSpecHash``: backendFramework, env and, per worker, the spec
    without type/replicas/scalingAdapter/modelRef/eppConfig/topologyConstraint). Same shape and inputs; the
    value differs because the operator hashes Go's JSON of the typed spec."""
    stripped = {}
    for c in dgd["spec"]["components"]:
        if component_type(c) in WORKER_TYPES:
            stripped[c["name"]] = {
                k: v
                for k, v in c.items()
                if k not in ("name", "type", "replicas", "scalingAdapter", "modelRef", "eppConfig", "topologyConstraint")
            }
    data = {
        "version": "dgd-worker-rollout-v2",
        "backendFramework": dgd["spec"].get("backendFramework"),
        "env": dgd["spec"].get("env"),
        "workers": stripped,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def workload_name(dgd: dict, comp: dict, whash: Optional[str] = None) -> str:
    """The DCD (and its Deployment/LeaderWorkerSet) name: ``<dgd>-<lower(component)>``, worker types with
    ``-<worker hash>`` (G ``GetDCDResourceName``; T ``qwen-decode-db6b6891``)."""
    base = f"{dgd['metadata']['name']}-{comp['name'].lower()}"
    if component_type(comp) in WORKER_TYPES:
        return f"{base}-{whash or worker_hash(dgd)}"
    return base


def service_name(dgd: dict, comp: dict) -> str:
    """The component Service: the DCD name with dots replaced (R ``generateService``: ``NormalizeKubeResourceName(dcd.Name)``)."""
    return workload_name(dgd, comp).replace(".", "-")


def _metrics_enabled(dgd: dict) -> bool:
    # R: the label is set unless the (DGD-propagated) annotation nvidia.com/enable-metrics is "false".
    return (dgd["metadata"].get("annotations") or {}).get(ANNOTATION_ENABLE_METRICS) != "false"


def pod_labels(dgd: dict, comp: dict, workload: str, whash: str) -> dict[str, str]:
    """The labels of a pod of ``comp`` (R ``generatePodTemplateSpec``; values as in T's worker Deployment)."""
    ctype = component_type(comp)
    labels = {
        LABEL_SELECTOR: workload,  # T: Deployment selector nvidia.com/selector=<deployment name>, also on the pods
        LABEL_COMPONENT: comp["name"],
        LABEL_COMPONENT_TYPE: ctype,
        LABEL_DGD_NAME: dgd["metadata"]["name"],
        LABEL_NAMESPACE: dynamo_namespace(dgd),
        # Discovery: the platform runs dynamo-operator.discoveryBackend "kubernetes" (stacks/cluster/platform.py; the
        # chart default, shared/reference/platform/dynamo-platform-values.yaml). T shows both labels on a worker;
        # the DCD controller enables discovery "for non frontend components" (index id 2598142538).
        LABEL_DISCOVERY_BACKEND: "kubernetes",
    }
    if ctype != FRONTEND:
        labels[LABEL_DISCOVERY_ENABLED] = "true"
    if ctype in WORKER_TYPES:
        labels[LABEL_WORKER_HASH] = whash
    if _metrics_enabled(dgd):
        labels[LABEL_METRICS_ENABLED] = "true"
    return labels


def container_ports(comp: dict) -> dict[str, int]:
    """The main container's named ports: the operator's defaults for the type (F, W, C) and any named port
    the podTemplate's main container declares (the Ultra frontends declare ``http: 8000`` themselves)."""
    ports = dict(DEFAULT_PORTS[component_type(comp)])
    containers = ((comp.get("podTemplate") or {}).get("spec") or {}).get("containers") or []
    main = next((c for c in containers if c.get("name") == "main"), containers[0] if containers else {})
    for p in main.get("ports") or []:
        if p.get("name"):
            ports.setdefault(p["name"], int(p["containerPort"]))
    return ports


def _node_count(comp: dict) -> int:
    mn = comp.get("multinode") or {}
    return int(mn.get("nodeCount") or 1)


def operator_pods(dgd: dict) -> list[OperatorPod]:
    """Every pod the operator runs for ``dgd``, in component order, replica by replica.

    Single-node components: a Deployment named after the DCD (R: ``kubeName := dcd.Name``) with ``replicas``
    pods ``<deployment>-<pod-template-hash>-<5 chars>`` (the Deployment/ReplicaSet controllers' naming).
    Multinode components (``multinode.nodeCount`` > 1, the LeaderWorkerSet path of T): per replica ``i`` a
    LeaderWorkerSet ``<dcd>-<i>`` whose leader pod is ``<lws>-0`` (label role=leader) and workers
    ``<lws>-0-<k>`` (role=worker), k = 1..nodeCount-1: LeaderWorkerSet runs a leader StatefulSet ``<lws>``
    (pod ``<lws>-<group>``) and per leader a worker StatefulSet ``<lws>-<group>`` (pods ``...-<k>``)
    (https://docs.redhat.com/en/documentation/openshift_container_platform/4.22/html/ai_workloads/leader-worker-set-operator,
    "LeaderWorkerSet architecture"; StatefulSet pods are ``<statefulset>-<ordinal>``; the worker ordinals
    starting at 1 are LWS's, not verified here). With Grove enabled the
    names follow Grove's PodCliqueSet instead (C: ``<pcs>-<i>-<pcsg>-<j>-<pclq>-<random>``); the platform
    here installs Grove only when asked (stacks/cluster/platform.py), and no catalog recipe is multinode.
    """
    if dgd.get("apiVersion") != "nvidia.com/v1beta1":
        raise ValueError(f"operator_pods reads v1beta1 DGDs (spec.components); got {dgd.get('apiVersion')!r}")
    whash = worker_hash(dgd)
    out: list[OperatorPod] = []
    for comp in dgd["spec"]["components"]:
        ctype = component_type(comp)
        workload = workload_name(dgd, comp, whash)
        labels = pod_labels(dgd, comp, workload, whash)
        ports = container_ports(comp)
        nodes = _node_count(comp)
        replicas = int(comp.get("replicas", 1))
        if nodes == 1:
            template_hash = _k8s_token(f"{workload}/template", 10)
            for r in range(replicas):
                name = f"{workload}-{template_hash}-{_k8s_token(f'{workload}/{r}', 5)}"
                out.append(
                    OperatorPod(
                        comp["name"], ctype, r, name, {**labels, LABEL_POD_TEMPLATE_HASH: template_hash}, dict(ports), workload
                    )
                )
            continue
        for r in range(replicas):
            lws = f"{workload}-{r}"
            lws_labels = {k: v for k, v in labels.items() if k != LABEL_SELECTOR}  # T: LWS templates carry no selector label
            out.append(
                OperatorPod(
                    comp["name"], ctype, r, f"{lws}-0", {**lws_labels, LABEL_LWS_ROLE: "leader"}, dict(ports), lws, "leader"
                )
            )
            for k in range(1, nodes):
                out.append(
                    OperatorPod(
                        comp["name"],
                        ctype,
                        r,
                        f"{lws}-0-{k}",
                        {**lws_labels, LABEL_LWS_ROLE: "worker"},
                        dict(ports),
                        lws,
                        "worker",
                    )
                )
    return out


def operator_services(dgd: dict) -> list[dict]:
    """The Services the operator creates for the DGD's components.

    R ``generateService``: a Service for the frontend always, and for every component when Kubernetes
    discovery is on (the platform's ``discoveryBackend: kubernetes``). G ``GenerateComponentService``:
    frontend port ``http`` 8000 -> target port ``http``; EPP ``grpc`` 9002; others ``system`` 9090 -> ``system``;
    selector ``{component-type, dynamo-namespace, dynamo-component}``; multinode adds ``role: leader`` (R).
    Labels: the discovery labels (G) (the DCD's own labels are left out: not needed for selection)."""
    out = []
    for comp in dgd["spec"]["components"]:
        ctype = component_type(comp)
        if ctype == FRONTEND:
            port = {"name": HTTP_PORT[0], "port": HTTP_PORT[1], "targetPort": HTTP_PORT[0], "protocol": "TCP"}
        elif ctype == EPP:
            port = {
                "name": EPP_GRPC_PORT[0],
                "port": EPP_GRPC_PORT[1],
                "targetPort": EPP_GRPC_PORT[1],
                "protocol": "TCP",
                "appProtocol": "http2",
            }
        else:
            port = {"name": SYSTEM_PORT[0], "port": SYSTEM_PORT[1], "targetPort": SYSTEM_PORT[0], "protocol": "TCP"}
        selector = {LABEL_COMPONENT_TYPE: ctype, LABEL_NAMESPACE: dynamo_namespace(dgd), LABEL_COMPONENT: comp["name"]}
        if _node_count(comp) > 1:
            selector[LABEL_LWS_ROLE] = "leader"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": service_name(dgd, comp),
                    "namespace": dgd["metadata"].get("namespace") or "default",
                    "labels": {LABEL_DISCOVERY_BACKEND: "kubernetes", LABEL_DISCOVERY_ENABLED: "true"},
                },
                "spec": {"selector": selector, "ports": [port]},
            }
        )
    return out


# ---- label selectors (the Kubernetes labelSelector syntax, for LIST ?labelSelector=)
def label_selector_string(selector: dict) -> str:
    """A metav1.LabelSelector (matchLabels, matchExpressions) as the query string form the API server parses
    (k8s.io/apimachinery labels.Parse: ``k=v``, ``k in (a,b)``, ``k notin (a)``, ``k``, ``!k``; comma = AND)."""
    parts = []
    for k, v in sorted((selector.get("matchLabels") or {}).items()):
        parts.append(f"{k}={v}")
    for e in selector.get("matchExpressions") or []:
        op, key, values = e["operator"], e["key"], list(e.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise ValueError(f"selector operator {op!r} is not one of In, NotIn, Exists, DoesNotExist")
    return ",".join(parts)


def selector_matches(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a metav1.LabelSelector selects ``labels`` (same semantics as the API server; an empty selector selects all)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        op, key, values = e["operator"], e["key"], set(e.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
