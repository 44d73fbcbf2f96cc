"""The local node's stand-ins for the two controllers a GPU cluster runs that cannot run here: the Dynamo operator
(its Go module is not served: ../shared/README.md) and a dynamic volume provisioner (EFS/FSx CSI on EKS).

Operator: for every v1beta1 DynamoGraphDeployment, the pods and Services the operator makes of it, as the project's
model of the operator says (``stacks.serving.operator``: names, labels, container ports, Services; the env of
tests/rig.py ``operator_env``), each pod being the component's ``podTemplate`` exactly as rendered, with these
stand-ins, each in ``node_pod`` and nowhere else:
- discovery through etcd (``DYN_DISCOVERY_BACKEND=etcd``, ``ETCD_ENDPOINTS``: an etcd on the node's bridge, as the
  dynamo-platform chart's own etcd) instead of the Kubernetes API the operator's pods use (``kubernetes``), which
  would need the operator's own CRDs and RBAC;
- CPU, memory and ephemeral-storage requests and limits scaled to what a 2-core node holds (``SCALED``); GPUs, EFA
  and RDMA devices are requested as rendered (the node advertises them: tools/node/resources.env);
- an image named by digest, which cannot be reproduced, runs the local runtime image (tools/node/images.py);
- a capability this sandbox's processes lack (``UNAVAILABLE_CAPABILITIES``: SYS_RESOURCE) is not added.
The DGD gets ``status.conditions[Ready]`` once every pod of it is Ready (what ``pulumi up`` waits for: waitFor
``condition=Ready``), and False with the pods that are not, otherwise. Pods carry an owner reference to their DGD,
so deleting the DGD deletes them (the garbage collector).

Provisioner: a Pending claim of StorageClass ``local-node`` gets a hostPath PersistentVolume bound to it, a directory
under the node's volume root owned by uid/gid 1000 (the project's cache volume must be writable by uid 1000,
docs/configuration.md), reclaim policy Retain: the data outlives the claim, as the model cache must.

Usage: controller.py --kubeconfig PATH --volumes DIR [--once]. Polls every second; logs what it does.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from rig import operator_env  # noqa: E402
from stacks.cli.simulate import KubeError, Simulator  # noqa: E402
from stacks.serving.operator import operator_pods, operator_services  # noqa: E402

STORAGE_CLASS = "local-node"
PROVISIONER = "dynamo.local/hostpath"
DISCOVERY_ETCD = "http://10.88.0.1:2379"  # tools/kube-node.sh starts this etcd on the node's bridge address
RUNTIME_IMAGE = "docker.io/dynamo-local/runtime:1.6.1"  # tools/node/images.py RUNTIME_REF
SCALED = {"cpu": "10m", "memory": "32Mi", "ephemeral-storage": "1Mi"}  # requests; the same limits are dropped
SPEC_HASH = "dynamo.local/pod-spec-hash"
# Not in this sandbox's capability bounding set (grep CapBnd /proc/self/status: bit 24, CAP_SYS_RESOURCE, is clear).
UNAVAILABLE_CAPABILITIES = ("SYS_RESOURCE",)
DGD_API = "/apis/nvidia.com/v1beta1"
# Each pass lists every claim, DGD and pod: every 2 s keeps a 2-core machine's API server mostly idle (at 1 s it took
# about 14% of a core here with two targets running).
POLL_SECONDS = 2


def log(msg: str) -> None:
    print(f"[node-controller] {msg}", flush=True)


def _env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in env.items()]


def scale_resources(container: dict) -> None:
    """CPU, memory and ephemeral storage scaled to the 2-core node (module docstring); devices kept as rendered."""
    res = container.get("resources")
    if not res:
        return
    for part in ("requests", "limits"):
        values = res.get(part) or {}
        for k in list(values):
            if k in SCALED:
                if part == "requests":
                    values[k] = SCALED[k]
                else:
                    del values[k]
        if part in res and not values:
            del res[part]


def drop_unavailable_capabilities(container: dict) -> None:
    """Capabilities this sandbox's own processes lack cannot be given to a container (runc: "unable to apply caps:
    operation not permitted"): ``UNAVAILABLE_CAPABILITIES`` are taken out of ``securityContext.capabilities.add``."""
    caps = (container.get("securityContext") or {}).get("capabilities") or {}
    if caps.get("add"):
        caps["add"] = [c for c in caps["add"] if c not in UNAVAILABLE_CAPABILITIES]


def node_pod(dgd: dict, op) -> dict:
    """The pod the operator runs for one replica of a component (module docstring: what stands in)."""
    comp = next(c for c in dgd["spec"]["components"] if c["name"] == op.component)
    spec = copy.deepcopy(comp["podTemplate"]["spec"])
    ns = dgd["metadata"].get("namespace") or "default"
    main = spec["containers"][0]
    dgd_env = dgd["spec"].get("env") or []
    own = {e["name"] for e in main.get("env") or []}
    operator = {k: v for k, v in operator_env(dgd, op).items() if k not in own}
    operator.update({"DYN_DISCOVERY_BACKEND": "etcd", "ETCD_ENDPOINTS": DISCOVERY_ETCD})
    spec_env = [e for e in dgd_env if e["name"] not in own and e["name"] not in operator]
    main["env"] = [*spec_env, *_env_list(operator), *[e for e in main.get("env") or [] if e["name"] not in operator]]
    main["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in op.ports.items()]
    for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
        if "@" in str(c.get("image", "")):
            c["image"] = RUNTIME_IMAGE
        scale_resources(c)
        drop_unavailable_capabilities(c)
    spec.setdefault("restartPolicy", "Always")
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    meta = {
        "name": op.name,
        "namespace": ns,
        "labels": dict(op.labels),
        "annotations": {SPEC_HASH: digest, **((comp.get("podTemplate") or {}).get("metadata") or {}).get("annotations", {})},
        "ownerReferences": dgd_owner(dgd),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def node_services(dgd: dict) -> list[dict]:
    out = []
    for svc in operator_services(dgd):
        svc = copy.deepcopy(svc)
        svc["metadata"]["ownerReferences"] = dgd_owner(dgd)
        out.append(svc)
    return out


def dgd_owner(dgd: dict) -> list[dict]:
    """The owner reference that makes the garbage collector delete an object with its DGD."""
    return [
        {
            "apiVersion": "nvidia.com/v1beta1",
            "kind": "DynamoGraphDeployment",
            "name": dgd["metadata"]["name"],
            "uid": dgd["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or [])


class Controller:
    def __init__(self, kubeconfig: str, volumes: Path):
        self.api = Simulator(kubeconfig)
        self.volumes = volumes

    def create(self, path: str, obj: dict) -> bool:
        """POST ``obj``; False when it exists already (409), any other refusal raised."""
        try:
            self.api.request("POST", path, obj)
            return True
        except KubeError as e:
            if e.status != 409:
                raise
            return False

    # ---- provisioner
    def ensure_storage_class(self) -> None:
        sc = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate",
        }
        if self.create("/apis/storage.k8s.io/v1/storageclasses", sc):
            log(f"StorageClass {STORAGE_CLASS} (default) created")

    def provision(self) -> None:
        for pvc in self.api.request("GET", "/api/v1/persistentvolumeclaims").get("items", []):
            spec, meta = pvc["spec"], pvc["metadata"]
            if (pvc.get("status") or {}).get("phase") != "Pending" or spec.get("volumeName"):
                continue
            if spec.get("storageClassName") not in (STORAGE_CLASS, None):
                continue
            name = f"pvc-{meta['uid']}"
            path = self.volumes / f"{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, 1000, 1000)
            path.chmod(0o2775)
            pv = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
                "spec": {
                    "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                    "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": spec.get("storageClassName") or STORAGE_CLASS,
                    "hostPath": {"path": str(path), "type": "Directory"},
                    "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
                },
            }
            if self.create("/api/v1/persistentvolumes", pv):
                log(f"PersistentVolume {name} at {path} for claim {meta['namespace']}/{meta['name']}")

    # ---- operator
    def reconcile(self) -> None:
        try:
            dgds = self.api.request("GET", f"{DGD_API}/dynamographdeployments").get("items", [])
        except KubeError as e:
            if e.status == 404:
                return  # no DGD CRD installed
            raise
        for dgd in dgds:
            if dgd["metadata"].get("deletionTimestamp"):
                continue
            self.reconcile_dgd(dgd)

    def reconcile_dgd(self, dgd: dict) -> None:
        ns, name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
        want = {op.name: node_pod(dgd, op) for op in operator_pods(dgd)}
        have = {
            p["metadata"]["name"]: p
            for p in self.api.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items", [])
            if any(o.get("uid") == dgd["metadata"]["uid"] for o in p["metadata"].get("ownerReferences") or [])
        }
        for pod_name, pod in have.items():
            outdated = (
                pod_name in want
                and pod["metadata"].get("annotations", {}).get(SPEC_HASH) != want[pod_name]["metadata"]["annotations"][SPEC_HASH]
            )
            if (pod_name not in want or outdated) and not pod["metadata"].get("deletionTimestamp"):
                self.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod_name}", ok_missing=True)
                log(f"{ns}/{name}: deleted pod {pod_name} ({'changed' if outdated else 'no longer wanted'})")
        refused: dict[str, str] = {}
        for pod_name, pod in want.items():
            if pod_name not in have:
                try:
                    if self.create(f"/api/v1/namespaces/{ns}/pods", pod):
                        log(f"{ns}/{name}: created pod {pod_name}")
                except KubeError as e:
                    log(f"{ns}/{name}: pod {pod_name} refused: {e}")
                    refused[pod_name] = str(e)
        for svc in node_services(dgd):
            try:
                if self.create(f"/api/v1/namespaces/{ns}/services", svc):
                    log(f"{ns}/{name}: created Service {svc['metadata']['name']}")
            except KubeError as e:
                log(f"{ns}/{name}: Service {svc['metadata']['name']} refused: {e}")
        not_ready = sorted(n for n in want if n not in have or not _ready(have[n]))
        ready = "False" if not_ready else "True"
        old = next((c for c in (dgd.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
        message = f"pods not Ready: {', '.join(not_ready)}" if not_ready else f"all {len(want)} pods Ready"
        if refused:
            message += "; refused by the API server: " + "; ".join(f"{n}: {m}" for n, m in sorted(refused.items()))
        if old.get("status") != ready or old.get("message") != message:
            status = {
                "state": "successful" if ready == "True" else "pending",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": ready,
                        "reason": "AllPodsReady" if ready == "True" else "PodsNotReady",
                        "message": message,
                        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    }
                ],
            }
            body = {**dgd, "status": status}
            try:
                self.api.request("PUT", f"{DGD_API}/namespaces/{ns}/dynamographdeployments/{name}/status", body)
                log(f"{ns}/{name}: Ready={ready} ({message})")
            except KubeError as e:
                if e.status != 409:
                    log(f"{ns}/{name}: status update refused: {e}")

    def run(self, once: bool = False) -> None:
        self.ensure_storage_class()
        while True:
            try:
                self.provision()
                self.reconcile()
            except Exception as e:  # noqa: BLE001 - a stand-in controller retries whatever failed, and says what
                log(f"retrying after: {type(e).__name__}: {e}")
            if once:
                return
            time.sleep(POLL_SECONDS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--volumes", type=Path, required=True)
    ap.add_argument("--once", action="store_true")
    args = ap.parse_args()
    Controller(args.kubeconfig, args.volumes).run(args.once)


if __name__ == "__main__":
    main()
