"""``python -m stacks simulate``: the real kube-scheduler places a stack's pods on simulated nodes.

The local control plane (``tools/kube-local.sh``: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok) gets KWOK nodes shaped like the cluster the stack would build (or like
an existing cluster's ``kubectl get nodes -o yaml``). The pods the stack would run are submitted,
and the real scheduler binds each one or records why it cannot (the ``PodScheduled=False``
condition carries the same message as the ``FailedScheduling`` event: "0/3 nodes are available:
1 Insufficient vpc.amazonaws.com/efa, 2 node(s) had untolerated taint ..."). kwok's default stages
then make bound pods Running and Job pods Succeeded.

Pieces, each a pure function except ``Simulator``:

- ``eks_groups`` / ``default_groups`` / ``inventory_nodes``: node groups from the EKS cluster plan
  (``stacks.cluster.build_cluster_plan``: pool labels, product/instance-type/EFA labels, the GPU
  taint, ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa``), the default cluster shape of a target's
  fabric, or an inventory. CPU, memory, ephemeral storage and pods come from ``stacks.registry.gpus.HOSTS``
  less what the EKS AL2023 kubelet reserves (``eks_allocatable``).
- ``operator_pod_intents``: the pods the Dynamo operator creates from a DGD (the operator is not
  available offline), named and labelled as ``stacks.serving.operator.operator_pods`` says the operator does
  (component-type frontend/worker/prefill/decode, metrics-enabled, DGD name, dynamo namespace, the
  Deployment selector label; container ports ``http`` 8000 or ``system`` 9090 and ``nixl`` 19090;
  multinode components as LeaderWorkerSet leader and worker pods), carrying the component's podTemplate
  scheduling fields (resources, nodeSelector, affinity, tolerations, runtimeClassName,
  priorityClassName) and shared memory as a memory-backed emptyDir of ``sharedMemorySize`` (the
  operator's 8Gi default on workers without one). Storage volumes become emptyDirs: the model cache is a
  ReadWriteMany EFS/FSx claim that constrains no node.
- ``Simulator``: a minimal REST client for the local API server; creates nodes, RuntimeClasses and
  pods, waits for the scheduler, reads placements, cleans up. It refuses any server other than the
  loopback one that ``tools/kube-local.sh`` runs: it creates fake nodes.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Optional
from urllib.parse import quote, urlparse

import yaml

from stacks import catalog, registry
from stacks.catalog.model import Target
from stacks.cluster import POOL_LABEL, EksConfig, build_cluster_plan, gpu_taint_for
from stacks.config.keys import NS, ConfigError
from stacks.registry.gpus import HOSTS, HostResources, default_shape, host_type_for
from stacks.serving.operator import WORKER_TYPES, operator_pods
from stacks.registry import yaml_text

REPO_ROOT = Path(__file__).resolve().parents[2]
KUBE_LOCAL = REPO_ROOT / "tools" / "kube-local.sh"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # kube-local.sh runs kwok with --manage-nodes-with-annotation-selector=<this>=fake
RUN_LABEL = "simulate.dynamo.nvidia.com/run"  # on every node, pod and RuntimeClass the simulation creates
POD_LABEL = "simulate.dynamo.nvidia.com/pod"
GROUP_LABEL = "simulate.dynamo.nvidia.com/group"  # the node group of a simulated node (system, gpu)
SIM_NAMESPACE = "dynamo-simulate"
SYSTEM_ROOT_GIB = 20  # EKS managed node group default disk size (no launch template disk on the system group)
GPU_ROOT_GIB = 500  # the GPU launch template's root volume (stacks/cluster/pools.py block_device_mappings)
# The operator's /dev/shm when a component names no sharedMemorySize (ai-dynamo/dynamo
# deploy/operator/internal/consts/consts.go DefaultSharedMemorySize; a worker Deployment rendered by the operator
# carries emptyDir shared-memory, medium Memory, sizeLimit 8Gi: see stacks/serving/operator.py source T).
DEFAULT_SHARED_MEMORY = "8Gi"


# ---------------------------------------------------------------------------------------------- node shapes
@dataclass
class NodeGroup:
    """``count`` identical nodes: labels, taints and allocatable resources (quantities as strings)."""

    name: str
    count: int
    labels: dict[str, str]
    taints: list[dict]
    allocatable: dict[str, str]
    note: str = ""


def eks_allocatable(host: HostResources, root_gib: int) -> dict[str, str]:
    """Allocatable CPU/memory/ephemeral-storage/pods of an EKS AL2023 node.

    kube-reserved as nodeadm computes it (awslabs/amazon-eks-ami ``nodeadm/internal/kubelet/config.go``:
    CPU 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% above; memory 11 MiB per pod
    + 255 MiB) and the kubelet's default hard eviction (memory.available 100Mi, nodefs.available 10%).
    Ephemeral storage is the instance store (RAID0 by the launch template's nodeadm config) when there
    is one, else the root volume."""
    millicores = host.vcpus * 1000
    reserved = 0
    for lo, hi, pct in ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, 1 << 40, 25)):
        if millicores > lo:
            reserved += (min(millicores, hi) - lo) * pct // 10000
    memory_mi = host.memory_gib * 1024 - (11 * host.max_pods + 255) - 100
    disk_gi = host.local_nvme_gb * 10**9 // 2**30 if host.local_nvme_gb else root_gib
    return {
        "cpu": f"{millicores - reserved}m",
        "memory": f"{memory_mi}Mi",
        "ephemeral-storage": f"{disk_gi * 9 // 10}Gi",
        "pods": str(host.max_pods),
    }


def _host(instance_type: str) -> HostResources:
    try:
        return HOSTS[instance_type]
    except KeyError:
        raise ConfigError(
            f"{NS}:cluster: instance type {instance_type!r} has no host resources in stacks/registry/gpus.py HOSTS; "
            f"known: {', '.join(sorted(HOSTS))}"
        ) from None


def eks_groups(plan) -> list[NodeGroup]:
    """The system and GPU node groups of an EKS cluster plan (``stacks.cluster.ClusterPlan``)."""
    sys_ng = plan.system_nodegroup
    sys_type = sys_ng["instance_types"][0]
    system = NodeGroup(
        "system",
        sys_ng["scaling_config"]["desired_size"],
        {**sys_ng["labels"], "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": sys_type},
        [],
        eks_allocatable(_host(sys_type), SYSTEM_ROOT_GIB),
    )
    shape = plan.gpu_shape
    alloc = eks_allocatable(_host(plan.shape.instance_type), GPU_ROOT_GIB)
    alloc.update({k: str(v) for k, v in shape.capacity.items()})
    gpu = NodeGroup("gpu", shape.count, dict(shape.labels), copy.deepcopy(shape.taints), alloc)
    return [system, gpu]


def default_eks_config(t: Target) -> EksConfig:
    """The EKS settings a target gets when a stack names none: on-demand, except UltraServer GPUs (GB200),
    sold only as Capacity Blocks (a placeholder reservation id)."""
    shape = default_shape(t.gpu)  # None: a GPU without instance data, which the EKS plan refuses by name
    if shape is not None and shape.ultraserver:
        return EksConfig(market_type="capacity-block", capacity_reservation_id="cr-00000000000000000")
    return EksConfig()


# Existing clusters of the non-AWS fabrics (no plan of ours builds them). Extended resources: the names
# stacks.cluster.platform.exposed_resources gives for the fabric, with the rdma-shared device plugin's rdmaHcaMax
# (1000) for rdma/* and one per GKE RDMA network. CPU and memory: the catalog host of the same GPU (an
# approximation). Extra labels: what the recipes of that fabric select on.
EXISTING_FABRICS: dict[str, tuple[int, str, dict[str, str]]] = {
    # fabric: (GPUs per node, kubernetes arch, extra labels)
    "infiniband": (8, "amd64", {}),
    "gke-rdma": (4, "arm64", {"cloud.google.com/gke-accelerator": "nvidia-gb200"}),
    "nscale": (8, "amd64", {"node.kubernetes.io/instance-type": "g.192.b200.8"}),
    # No KV-transfer fabric, for a GPU registered without instance data (existing clusters only; with instance data
    # the EKS plan is the default shape): 8 GPUs per node, assumed like the rest of this table.
    "none": (8, "amd64", {}),
}


def _fabric_resources(fabric: str) -> dict[str, int]:
    from stacks.cluster.platform import exposed_resources

    return {r: 1000 if r.startswith("rdma/") else 1 for r in sorted(exposed_resources(fabric))}


def _dgd(objs: Iterable[dict]) -> dict:
    return next(o for o in objs if o["kind"] == "DynamoGraphDeployment")


def default_groups(t: Target) -> tuple[list[NodeGroup], set[str]]:
    """The default cluster shape of a target's GPU and fabric, and the RuntimeClasses it has. Nodes are
    counted for the target's recipe, as the cluster plan counts them (a replica override does not add any).

    AWS fabrics: the EKS plan with default settings; both NVIDIA stacks give RuntimeClass ``nvidia``
    (the device plugin with ``stacks.cluster.platform.nvidia_runtime_class``, the GPU Operator its own). Other
    fabrics: an existing cluster of that fabric, assumed to run the GPU Operator (RuntimeClass ``nvidia``)."""
    if t.fabric == "aws-efa" or (t.fabric == "none" and default_shape(t.gpu) is not None):
        plan = build_cluster_plan("simulate", default_eks_config(t), t)
        return eks_groups(plan), {"nvidia"}
    if t.fabric not in EXISTING_FABRICS:
        raise ConfigError(
            f"{NS}:fabric: no default cluster shape for fabric {t.fabric!r}; known: aws-efa, {', '.join(EXISTING_FABRICS)}"
        )
    per_node, arch, extra = EXISTING_FABRICS[t.fabric]
    extended = _fabric_resources(t.fabric)
    host_type = host_type_for(t.gpu)
    gpus = catalog.gpus_needed(_dgd(catalog.recipe_objects(t)))
    taint = gpu_taint_for(t)
    product = registry.label(t.gpu)
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.present": "true", "kubernetes.io/arch": arch, **extra}
    alloc = eks_allocatable(_host(host_type), GPU_ROOT_GIB)
    alloc.update({"nvidia.com/gpu": str(per_node), **{k: str(v) for k, v in extended.items()}})
    gpu = NodeGroup(
        "gpu",
        max(1, -(-gpus // per_node)),
        labels,
        [{"key": taint["key"], "value": taint["value"], "effect": "NoSchedule"}],
        alloc,
        note=f"existing {t.fabric} cluster (CPU/memory of {host_type})",
    )
    system = NodeGroup(
        "system",
        2,
        {POOL_LABEL: "system", "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m7i.2xlarge"},
        [],
        eks_allocatable(_host("m7i.2xlarge"), SYSTEM_ROOT_GIB),
    )
    return [system, gpu], {"nvidia"}


def inventory_nodes(text: str) -> list[dict]:
    """Nodes of ``kubectl get nodes -o yaml`` (a List, or one Node), reduced to what the scheduler reads:
    name, labels, taints, unschedulable, capacity and allocatable."""
    try:
        doc = yaml_text.load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--nodes: not YAML ({e})") from None
    items = (
        doc.get("items")
        if isinstance(doc, dict) and doc.get("kind") == "List"
        else [doc]
        if isinstance(doc, dict) and doc.get("kind") == "Node"
        else None
    )
    if not items:
        raise ConfigError("--nodes: expected the output of `kubectl get nodes -o yaml` (kind: List of Nodes, or one Node)")
    out = []
    for n in items:
        if not isinstance(n, dict) or n.get("kind", "Node") != "Node" or not (n.get("metadata") or {}).get("name"):
            raise ConfigError(f"--nodes: every item must be a Node with metadata.name; got {str(n)[:80]!r}")
        st = n.get("status") or {}
        spec = n.get("spec") or {}
        out.append(
            {
                "name": n["metadata"]["name"],
                "labels": dict(n["metadata"].get("labels") or {}),
                "taints": [{k: v for k, v in t.items() if k in ("key", "value", "effect")} for t in spec.get("taints") or []],
                "unschedulable": bool(spec.get("unschedulable")),
                "allocatable": dict(st.get("allocatable") or st.get("capacity") or {}),
                "capacity": dict(st.get("capacity") or st.get("allocatable") or {}),
            }
        )
    return out


def node_objects(groups: list[NodeGroup], run: str, prefix: str = "sim") -> list[dict]:
    """KWOK Node objects for the groups (``<prefix>-<group>-<i>``)."""
    out = []
    for g in groups:
        for i in range(g.count):
            name = f"{prefix}-{g.name}-{i}"
            out.append(_node(name, {**g.labels, GROUP_LABEL: g.name}, g.taints, g.allocatable, g.allocatable, run))
    return out


def inventory_objects(nodes: list[dict], run: str) -> list[dict]:
    return [_node(n["name"], n["labels"], n["taints"], n["allocatable"], n["capacity"], run, n["unschedulable"]) for n in nodes]


def _node(name, labels, taints, allocatable, capacity, run, unschedulable=False) -> dict:
    labels = {"kubernetes.io/os": "linux", **labels, "kubernetes.io/hostname": name, RUN_LABEL: run}
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": spec,
        "status": {"allocatable": dict(allocatable), "capacity": dict(capacity)},
    }


# ---------------------------------------------------------------------------------------------- pods
@dataclass
class PodIntent:
    """One pod the stack would run: which component (or Job) and replica it stands for."""

    component: str
    replica: int
    pod: dict


SCHEDULING_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "runtimeClassName",
    "priorityClassName",
    "topologySpreadConstraints",
    "hostNetwork",
    "schedulerName",
)


def _dns(s: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", s.lower()).strip("-")[:50].rstrip("-")


def _pod(name: str, spec: dict, labels: dict, shm: Optional[str] = None) -> dict:
    """A pod with the scheduling-relevant fields of ``spec``; storage volumes dropped, shared memory kept."""
    out = {k: copy.deepcopy(spec[k]) for k in SCHEDULING_FIELDS if k in spec}
    out["restartPolicy"] = "Always"
    out["automountServiceAccountToken"] = False
    containers = []
    for c in spec["containers"]:
        containers.append(
            {
                "name": c["name"],
                "image": c.get("image") or "registry.invalid/none:0",
                **({"resources": c["resources"]} if c.get("resources") else {}),
            }
        )
    if shm:
        out["volumes"] = [{"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": shm}}]
        containers[0]["volumeMounts"] = [{"name": "shared-memory", "mountPath": "/dev/shm"}]
    out["containers"] = containers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": out}


def _shm_size(comp: dict) -> Optional[str]:
    if comp.get("sharedMemorySize"):
        return str(comp["sharedMemorySize"])
    for v in comp["podTemplate"]["spec"].get("volumes") or []:
        ed = v.get("emptyDir") or {}
        if ed.get("medium") == "Memory":
            return str(ed.get("sizeLimit") or "") or None
    return None


def operator_pod_intents(dgd: dict) -> list[PodIntent]:
    """The operator's pods for a DGD (``stacks.serving.operator.operator_pods``: names, labels, container ports), each
    with its component's podTemplate scheduling fields and shared memory (see module docstring)."""
    comps = {c["name"]: c for c in dgd["spec"]["components"]}
    out = []
    for op in operator_pods(dgd):
        comp = comps[op.component]
        shm = _shm_size(comp) or (DEFAULT_SHARED_MEMORY if op.component_type in WORKER_TYPES else None)
        pod = _pod(op.name, comp["podTemplate"]["spec"], dict(op.labels), shm)
        pod["spec"]["containers"][0]["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in op.ports.items()]
        out.append(PodIntent(op.component if op.role == "main" else f"{op.component}/{op.role}", op.replica, pod))
    return out


def job_pods(objs: Iterable[dict]) -> list[PodIntent]:
    """The first pod of every Job (the model download, validation), with the Job template's scheduling fields."""
    out = []
    for o in objs:
        if o["kind"] == "Job":
            spec = o["spec"]["template"]["spec"]
            out.append(
                PodIntent(
                    f"Job/{o['metadata']['name']}", 0, _pod(f"job-{_dns(o['metadata']['name'])}", spec, {"component": "job"})
                )
            )
    return out


# ---------------------------------------------------------------------------------------------- API client
class KubeError(RuntimeError):
    def __init__(self, status: int, body: dict | str):
        self.status, self.body = status, body
        msg = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {msg}")


class Simulator:
    """A minimal client of the LOCAL API server (loopback only) for the simulation."""

    def __init__(self, kubeconfig: str | os.PathLike, namespace: str = SIM_NAMESPACE):
        cfg = yaml_text.load(Path(kubeconfig).read_text())
        ctx_name = cfg.get("current-context")
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
        url = urlparse(cluster["server"])
        if url.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ConfigError(
                f"simulate creates fake nodes, so it only talks to the local control plane "
                f"(tools/kube-local.sh); {kubeconfig} points at {cluster['server']}"
            )
        self.host, self.port = url.hostname, url.port or 443
        self.namespace = namespace
        self._tmp = tempfile.TemporaryDirectory(prefix="simulate-")
        tmp = Path(self._tmp.name)
        import http.client  # here, not at import: every other command of the CLI loads this module without a connection
        import ssl

        self._http = http.client
        ctx_ssl = ssl.create_default_context()
        ca = tmp / "ca.crt"
        ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        ctx_ssl.load_verify_locations(str(ca))
        crt, key = tmp / "c.crt", tmp / "c.key"
        crt.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.touch(mode=0o600)
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        ctx_ssl.load_cert_chain(str(crt), str(key))
        self.ssl = ctx_ssl
        self.conn: Optional["http.client.HTTPSConnection"] = None

    def request(self, method: str, path: str, body: Any = None, ok_missing: bool = False) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            if self.conn is None:
                self.conn = self._http.HTTPSConnection(self.host, self.port, context=self.ssl, timeout=30)
            try:
                self.conn.request(
                    method, path, body=data, headers={"Content-Type": "application/json", "Accept": "application/json"}
                )
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (self._http.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        try:
            out = json.loads(raw) if raw else {}
        except ValueError:
            out = {"message": raw.decode(errors="replace")}
        if resp.status == 404 and ok_missing:
            return {}
        if resp.status >= 400:
            raise KubeError(resp.status, out)
        return out

    # ---- objects
    def ensure_namespace(self) -> None:
        try:
            self.request(
                "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
            )
        except KubeError as e:
            if e.status != 409:
                raise
        deadline = time.monotonic() + 60  # pods need the namespace's default ServiceAccount (serviceaccount controller)
        while not self.request("GET", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default", ok_missing=True):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no ServiceAccount default in namespace {self.namespace} after 60s (is kube-controller-manager running?)"
                )
            time.sleep(0.1)

    def create_nodes(self, nodes: list[dict], run: Optional[str] = None) -> None:
        """Create the nodes (labelled with ``run`` when given) with exactly their own taints.

        The API server's TaintNodesByCondition admission adds ``node.kubernetes.io/not-ready:NoSchedule``
        to every new node; on a cluster the node lifecycle controller removes it once the node reports
        Ready. kube-local runs without that controller (no kubelets), so this does its part: kwok marks
        the node Ready, and the taints are set back to the node's own."""
        for n in nodes:
            n = copy.deepcopy(n)
            if run:
                n["metadata"]["labels"][RUN_LABEL] = run
            self.request("POST", "/api/v1/nodes", n)
            patch = {"spec": {"taints": n["spec"].get("taints") or None}}
            self._patch(f"/api/v1/nodes/{n['metadata']['name']}", patch)

    def _patch(self, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        if self.conn is None:
            self.conn = self._http.HTTPSConnection(self.host, self.port, context=self.ssl, timeout=30)
        self.conn.request(
            "PATCH", path, body=data, headers={"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
        )
        resp = self.conn.getresponse()
        raw = resp.read()
        if resp.status >= 400:
            raise KubeError(resp.status, json.loads(raw) if raw else {})
        return json.loads(raw) if raw else {}

    def set_runtime_classes(self, names: set[str], run: str) -> None:
        """Exactly these RuntimeClasses (handler = name) exist among the simulation's own."""
        path = "/apis/node.k8s.io/v1/runtimeclasses"
        have = {i["metadata"]["name"] for i in self.request("GET", f"{path}?labelSelector={quote(RUN_LABEL)}").get("items", [])}
        for n in have - names:
            self.request("DELETE", f"{path}/{n}", ok_missing=True)
        for n in names - have:
            self.request(
                "POST",
                path,
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "handler": n,
                    "metadata": {"name": n, "labels": {RUN_LABEL: run}},
                },
            )
        # The RuntimeClass admission plugin reads from an informer: wait until it agrees (a dry-run pod).
        for n in names ^ have:
            deadline = time.monotonic() + 30
            while self._runtime_class_admitted(n) != (n in names):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the API server's admission did not catch up with RuntimeClass {n!r} in 30s")
                time.sleep(0.1)

    def _runtime_class_admitted(self, name: str) -> bool:
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "runtime-class-probe"},
            "spec": {
                "runtimeClassName": name,
                "automountServiceAccountToken": False,
                "containers": [{"name": "c", "image": "registry.invalid/none:0"}],
            },
        }
        try:
            self.request("POST", f"/api/v1/namespaces/{self.namespace}/pods?dryRun=All", probe)
            return True
        except KubeError as e:
            if e.status == 403 and "RuntimeClass" in str(e):
                return False
            raise

    def submit(self, intents: list[PodIntent], run: str) -> dict[str, str]:
        """Create the pods; returns the admission error of each pod the API server refused."""
        refused = {}
        for it in intents:
            pod = copy.deepcopy(it.pod)
            pod["metadata"]["labels"] = {**pod["metadata"]["labels"], RUN_LABEL: run, POD_LABEL: "true"}
            try:
                self.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", pod)
            except KubeError as e:
                if e.status not in (400, 403, 422):
                    raise
                refused[pod["metadata"]["name"]] = (
                    f"refused at admission: {e.body.get('message') if isinstance(e.body, dict) else e.body}"
                )
        return refused

    def pods(self, run: str) -> list[dict]:
        sel = quote(f"{RUN_LABEL}={run}")
        return self.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={sel}").get("items", [])

    def wait_decided(self, run: str, expected: int, nodes: int, timeout: float = 60) -> list[dict]:
        """Until every pod is bound, or marked unschedulable by the scheduler after it has seen all ``nodes``
        nodes as they are (an attempt made before its informer caught up says "0/<fewer> nodes", or names the
        not-ready taint the nodes are created with; the scheduler retries those on the node events)."""
        deadline = time.monotonic() + timeout
        while True:
            pods = self.pods(run)
            if len(pods) >= expected and all(_decided(p, nodes) for p in pods):
                return pods
            if time.monotonic() > deadline:
                return pods
            time.sleep(0.1)

    def cleanup(self, run: Optional[str] = None) -> None:
        """Delete the simulation's pods (at once: no kubelet drains them) and nodes; the RuntimeClasses stay
        until the next ``set_runtime_classes``."""
        sel = quote(f"{RUN_LABEL}={run}" if run else RUN_LABEL)
        self.request(
            "DELETE", f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={sel}&gracePeriodSeconds=0", ok_missing=True
        )
        self.request("DELETE", f"/api/v1/nodes?labelSelector={sel}", ok_missing=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = self.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={sel}").get("items", [])
            left += self.request("GET", f"/api/v1/nodes?labelSelector={sel}").get("items", [])
            if not left:
                return
            time.sleep(0.1)

    def close(self) -> None:
        if self.conn:
            self.conn.close()
        self._tmp.cleanup()


def _decided(pod: dict, nodes: int) -> bool:
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and (c.get("message") or "").startswith(f"0/{nodes} nodes are available")
        and "node.kubernetes.io/not-ready" not in c.get("message", "")
        for c in (pod.get("status") or {}).get("conditions") or []
    )


# ---------------------------------------------------------------------------------------------- placement
@dataclass
class Placement:
    component: str
    replica: int
    pod: str
    node: Optional[str] = None
    pool: Optional[str] = None
    reason: Optional[str] = None  # the scheduler's FailedScheduling message, or the admission error

    @property
    def placed(self) -> bool:
        return self.node is not None


@dataclass
class Result:
    placements: list[Placement] = field(default_factory=list)
    nodes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.placed for p in self.placements)

    def pending(self) -> list[Placement]:
        return [p for p in self.placements if not p.placed]


def run(
    sim: Simulator,
    nodes: list[dict],
    intents: list[PodIntent],
    runtime_classes: set[str],
    run_id: str,
    timeout: float = 60,
    keep: bool = False,
) -> Result:
    """Create the nodes, then the pods; read back every placement; remove pods and nodes unless ``keep``."""
    sim.ensure_namespace()
    sim.cleanup(run_id)
    sim.set_runtime_classes(runtime_classes, run_id)
    try:
        sim.create_nodes(nodes, run_id)
        total = len(sim.request("GET", "/api/v1/nodes").get("items", []))
        refused = sim.submit(intents, run_id)
        pods = {p["metadata"]["name"]: p for p in sim.wait_decided(run_id, len(intents) - len(refused), total, timeout)}
        pools = {
            n["metadata"]["name"]: n["metadata"]["labels"].get(POOL_LABEL) or n["metadata"]["labels"].get(GROUP_LABEL)
            for n in nodes
        }
        out = Result(nodes=len(nodes))
        for it in intents:
            name = it.pod["metadata"]["name"]
            pl = Placement(it.component, it.replica, name)
            if name in refused:
                pl.reason = refused[name]
            else:
                p = pods.get(name) or {}
                pl.node = (p.get("spec") or {}).get("nodeName")
                if pl.node:
                    pl.pool = pools.get(pl.node)
                else:
                    cond: dict = next(
                        (c for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {}
                    )
                    pl.reason = cond.get("message") or f"not scheduled within {timeout:.0f}s"
            out.placements.append(pl)
        return out
    finally:
        if not keep:
            sim.cleanup(run_id)


# ---------------------------------------------------------------------------------------------- stacks and targets
@dataclass
class Scenario:
    """What to simulate: the nodes, the pods and the RuntimeClasses of one stack or target."""

    title: str
    nodes: list[dict]
    intents: list[PodIntent]
    runtime_classes: set[str]
    notes: list[str] = field(default_factory=list)


def target_scenario(
    t: Target,
    run_id: str = "sim",
    dgd: Optional[dict] = None,
    groups: Optional[list[NodeGroup]] = None,
    runtime_classes: Optional[set[str]] = None,
) -> Scenario:
    """A catalog target (or a configured DGD of it) on its default cluster shape, or on ``groups``."""
    objs = catalog.recipe_objects(t)
    dgd = dgd or _dgd(objs)
    default, rcs = default_groups(t)
    groups = groups if groups is not None else default
    return Scenario(
        t.id, node_objects(groups, run_id), operator_pod_intents(dgd), rcs if runtime_classes is None else runtime_classes
    )


def stack_scenario(stack: str, inventory: Optional[str] = None, run_id: str = "sim") -> Scenario:
    """A committed stack, as ``up`` plans it (``program_for_stack``: every entry of a ``dynamo:serve`` list, each with its
    overrides and replicas): its pods on its EKS plan's nodes, or on an inventory, or (an existing cluster or a cluster
    stack's, without inventory) on the default shape of its targets' GPUs."""
    from stacks.program.render import program_for_stack
    from stacks.cli.shell import CliError

    program = program_for_stack(stack)
    if not program.entries:
        raise CliError(
            f"stack {stack} is a cluster-only stack ({NS}:serve: []): it runs no serving pods to place; simulate a "
            f"stack that serves on it (cluster.mode: stack naming it)"
        )
    plans = [e.plan for e in program.entries]
    cluster, notes = program.cluster, []
    rcs: set[str] = set()
    if program.mode.creates_cluster:  # the cluster plan has the node groups
        plan = program.cluster_plan
        groups = eks_groups(plan)
        rcs = {"nvidia"} if plan.nvidia_stack == "gpu-operator" else set()
    else:
        groups, seen = [], {}
        for p in plans:  # one default shape per GPU and fabric the entries use
            key = (p.target.gpu, p.target.fabric)
            if key in seen:
                continue
            shape, shape_rcs = default_groups(p.target)
            seen[key] = True
            rcs |= shape_rcs
            for g in shape:
                if g.name == "system" and any(x.name == "system" for x in groups):
                    continue
                groups.append(g if len(seen) == 1 or g.name == "system" else replace(g, name=f"{g.name}-{p.target.gpu}"))
        if not inventory:
            shapes = ", ".join(f"{gpu}/{fabric}" for gpu, fabric in seen)
            notes.append(
                f"{stack} runs on an existing cluster ({cluster.mode}): simulated on the default {shapes} shape; "
                f"pass --nodes with `kubectl get nodes -o yaml` of your cluster to check it instead"
            )
    intents = [it for p in plans for it in job_pods(p.jobs) + operator_pod_intents(p.dgd)]
    if inventory:
        nodes = inventory_objects(inventory_nodes(inventory), run_id)
        rcs = {it.pod["spec"]["runtimeClassName"] for it in intents if it.pod["spec"].get("runtimeClassName")}
        if rcs:
            notes.append(
                f"RuntimeClasses {sorted(rcs)} are assumed to exist on the inventory's cluster (not in `kubectl get nodes`)"
            )
    else:
        nodes = node_objects(groups, run_id)
    title = ", ".join(p.target.id for p in plans)
    return Scenario(f"stack {stack} ({title})", nodes, intents, rcs, notes)


def simulation_state() -> Path:
    """Where the simulation's own control plane lives (``KUBE_LOCAL_DIR``, default .tools/kube-simulate: not the
    ``make local-up`` one, whose Jobs would otherwise run while the simulated nodes exist)."""
    return Path(os.environ.get("KUBE_LOCAL_DIR") or REPO_ROOT / ".tools" / "kube-simulate")


def control_plane_running(state: Path) -> bool:
    r = subprocess.run(
        [str(KUBE_LOCAL), "status"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KUBE_LOCAL_DIR": str(state)},
    )
    return r.returncode == 0


def stop_control_plane(state: Path) -> None:
    """Stop the five processes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok; about 750 MB)."""
    subprocess.run(
        [str(KUBE_LOCAL), "stop"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KUBE_LOCAL_DIR": str(state)},
    )


def local_kubeconfig(start: bool = True, kept: bool = True) -> Path:
    """The simulation's own local control plane (``simulation_state``), started if asked; ``kept``: it stays running for
    the next run, and the line printed says how to stop it (stop: ``KUBE_LOCAL_DIR=<dir> tools/kube-local.sh stop``)."""
    state = simulation_state()
    if start:
        from stacks.cli.shell import CliError, progress

        # A no-op when it runs already; else minutes the first time (it builds the control plane from source).
        with progress(f"simulate: starting the local control plane in {state} (the first run builds it)"):
            r = subprocess.run(
                [str(KUBE_LOCAL), "start"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "KUBE_LOCAL_DIR": str(state)},
            )
        if r.returncode:
            log = state / "kube-local-start.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(r.stderr)
            last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise CliError(f"tools/kube-local.sh start failed: {last} (its output: {log})")
        if kept:
            print(
                f"(local control plane in {state} kept running; stop it with: KUBE_LOCAL_DIR={state} tools/kube-local.sh stop)",
                file=sys.stderr,
            )
    return state / "kubeconfig"


def format_result(title: str, res: Result, notes: Iterable[str] = ()) -> str:
    lines = [f"{title}: {res.nodes} simulated nodes"]
    lines += [f"  note: {n}" for n in notes]
    for p in res.placements:
        where = f"{p.node} ({p.pool})" if p.placed and p.pool else p.node if p.placed else f"PENDING: {p.reason}"
        lines.append(f"  {p.component}[{p.replica}]\t{where}")
    pend = len(res.pending())
    lines.append(f"{len(res.placements) - pend}/{len(res.placements)} pods placed" + (f", {pend} pending" if pend else ""))
    return "\n".join(lines)


def cmd(args) -> int:
    from stacks.cli.shell import progress

    inventory = Path(args.nodes).read_text() if args.nodes else None
    if args.target:
        t = catalog.targets().get(args.target)
        if not t:
            from stacks.registry import did_you_mean

            raise ConfigError(
                f"--target {args.target!r} is not a catalog target{did_you_mean(args.target, catalog.targets())}; "
                "list them: dynamo-stacks targets"
            )
        sc = target_scenario(t)
        if inventory:
            sc.nodes = inventory_objects(inventory_nodes(inventory), "cli")
    else:
        sc = stack_scenario(args.stack, inventory)
    # A control plane this run starts is stopped after it, unless asked to keep it (--keep, --keep-control-plane);
    # one that was running already stays as it was.
    started = None
    if args.kubeconfig:
        kubeconfig = Path(args.kubeconfig)
    else:
        state = simulation_state()
        keep = args.keep or args.keep_control_plane or control_plane_running(state)
        started = None if keep else state
        kubeconfig = local_kubeconfig(kept=keep)
    try:
        sim = Simulator(kubeconfig)
        try:
            with progress(f"simulate: placing {len(sc.intents)} pods on {len(sc.nodes)} nodes (at most {args.timeout:.0f}s)"):
                res = run(sim, sc.nodes, sc.intents, sc.runtime_classes, "cli", timeout=args.timeout, keep=args.keep)
        finally:
            sim.close()
    finally:
        if started is not None:
            stop_control_plane(started)
    print(format_result(sc.title, res, sc.notes))
    return 0 if res.ok else 1


def add_subparser(sub) -> None:
    from stacks.cli.shell import existing_file

    p = sub.add_parser(
        "simulate",
        help="place a stack's pods with the real kube-scheduler on simulated nodes",
        description="Place the pods of a committed stack (or a catalog target) with the real "
        "kube-scheduler on KWOK nodes shaped like its cluster, on a local control plane "
        "(started, and built the first time, by tools/kube-local.sh). Exit 0 when every pod "
        "is placed, 1 when some stay pending.",
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--stack", metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    g.add_argument("--target", metavar="ID", help="a catalog target, on the default cluster shape of its GPU")
    p.add_argument(
        "--nodes",
        metavar="YAML",
        type=existing_file("save one with `kubectl get nodes -o yaml > nodes.yaml`"),
        help="node inventory: `kubectl get nodes -o yaml` of an existing cluster, saved to a file",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=existing_file("the kubeconfig of a local control plane"),
        help="a local control plane's kubeconfig (default: start tools/kube-local.sh in .tools/kube-simulate)",
    )
    p.add_argument("--timeout", type=float, default=60, metavar="SECONDS", help="seconds to wait for the scheduler (default 60)")
    p.add_argument(
        "--keep", action="store_true", help="leave the nodes and pods in place for inspection (and the control plane running)"
    )
    p.add_argument(
        "--keep-control-plane",
        action="store_true",
        help="leave the local control plane this run starts running for the next run (default: stopped after the run)",
    )
    p.set_defaults(fn=cmd)
