"""What the real-node tests do on the local node (tools/kube-node.sh): apply a target's rendered objects, wait for its
download Job and its DGD, reach its frontend Service, and say what a pod that did not start saw.

What the node runs as rendered and what stands in is listed in one place each: the images in tools/node/images.py,
the operator's pods and the volume provisioner in tools/node/controller.py, the model hub in tools/node/hub.py, the
device plugins in tools/kube/node/deviceplugin (counts in tools/node/resources.env), and the node labels the rendered
placement asks for in tools/node/placement.py (a GPU node on EKS carries them from its node group or from NVIDIA's
feature discovery).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "node"))

from placement import label_args, placement_labels  # noqa: E402


class NodeError(AssertionError):
    pass


def kubectl(env: dict, *args: str, input: Optional[str] = None, check: bool = True, timeout: float = 60) -> str:
    cmd = [str(ROOT / ".tools" / "bin" / "kubectl"), "--kubeconfig", f"{env['KUBE_LOCAL_DIR']}/kubeconfig", *args]
    res = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise NodeError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout


def apply_in_order(env: dict, objs: list[dict], job_timeout: float) -> None:
    """Apply the rendered objects in their order, as ``up`` does with waits on: each Job is waited for (Complete)
    before the objects after it (Ultra's model-validate Job reads what the download Job wrote)."""
    batch: list[dict] = []
    for o in objs:
        batch.append(o)
        if o["kind"] == "Job":
            apply(env, batch)
            batch = []
            ns, name = o["metadata"]["namespace"], o["metadata"]["name"]
            wait_for(f"Job {ns}/{name} Complete", job_complete(env, ns, name), job_timeout, env, ns)
    if batch:
        apply(env, batch)


def apply(env: dict, objs: Iterable[dict]) -> None:
    kubectl(
        env, "apply", "--server-side", "--field-manager=node-test", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs)
    )


def label_node_for(env: dict, objs: Iterable[dict]) -> dict[str, str]:
    """Label the node as the rendered placement asks (tools/node/placement.py); returns the labels set. Targets whose
    placement asks for different values of one label (an H100 and a B200 target) run one after the other."""
    labels = placement_labels(objs)
    if labels:
        kubectl(env, *label_args(labels))
    return labels


def diagnose(env: dict, namespace: str, lines: int = 15) -> str:
    """Every pod of the namespace: phase, container states, events, and each container's last log lines."""
    out = [f"--- pods in {namespace}:", kubectl(env, "-n", namespace, "get", "pods", "-o", "wide", check=False)]
    pods = json.loads(kubectl(env, "-n", namespace, "get", "pods", "-o", "json", check=False) or '{"items": []}')["items"]
    for p in pods:
        name = p["metadata"]["name"]
        for st in [
            *(p.get("status", {}).get("initContainerStatuses") or []),
            *(p.get("status", {}).get("containerStatuses") or []),
        ]:
            out.append(
                f"{name}/{st['name']}: ready={st.get('ready')} restarts={st.get('restartCount')} state={json.dumps(st.get('state'))}"
                f" last={json.dumps(st.get('lastTerminationState') or {})}"
            )
            log = node_log(env, namespace, name, p["metadata"]["uid"], st["name"])
            out.append("    " + "\n    ".join(log.strip().splitlines()[-lines:]))
    out.append(f"--- events in {namespace}:")
    out.append(kubectl(env, "-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False)[-4000:])
    out.append(f"--- claims in {namespace} and volumes:")
    out.append(kubectl(env, "-n", namespace, "get", "pvc", "-o", "wide", check=False))
    out.append(kubectl(env, "get", "pv", "-o", "wide", check=False))
    controller = Path(env["KUBE_LOCAL_DIR"]) / "node" / "logs" / "node-controller.log"
    if controller.is_file():  # the stand-in operator and provisioner (tools/node/controller.py)
        out.append("--- node-controller.log (last lines):")
        out.append("\n".join(controller.read_text(errors="replace").splitlines()[-20:]))
    return "\n".join(out)


def node_log(env: dict, namespace: str, pod: str, uid: str, container: str) -> str:
    """A container's log as the kubelet wrote it on the node (podLogsDir: <ns>_<pod>_<uid>/<container>/<restart>.log),
    every restart's, oldest first: what ``kubectl logs`` and ``--previous`` read, without a round trip."""
    d = Path(env["KUBE_LOCAL_DIR"]) / "node" / "pod-logs" / f"{namespace}_{pod}_{uid}" / container
    files = sorted(d.glob("*.log"), key=lambda f: int(f.stem) if f.stem.isdigit() else 0) if d.is_dir() else []
    # CRI log lines: "<time> <stream> <P|F> <text>"
    return "\n".join(line.split(" ", 3)[-1] for f in files for line in f.read_text(errors="replace").splitlines())


def wait_for(what: str, probe, timeout: float, env: dict, namespace: str, interval: float = 2) -> None:
    """Poll ``probe()`` -> (done, last seen) until done; at the deadline fail with the last seen and the diagnosis."""
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        done, seen = probe()
        if done:
            return
        time.sleep(interval)
    raise NodeError(f"{what}: not done after {timeout:.0f}s; last seen: {seen}\n{diagnose(env, namespace)}")


def job_complete(env: dict, namespace: str, name: str):
    def probe():
        job = json.loads(kubectl(env, "-n", namespace, "get", "job", name, "-o", "json", check=False) or "{}")
        conds = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
        if conds.get("Failed") == "True":
            raise NodeError(f"Job {namespace}/{name} failed: {job['status']}\n{diagnose(env, namespace)}")
        return conds.get("Complete") == "True", json.dumps(job.get("status"))

    return probe


def dgd_ready(env: dict, namespace: str, name: str):
    def probe():
        dgd = json.loads(kubectl(env, "-n", namespace, "get", "dynamographdeployment", name, "-o", "json", check=False) or "{}")
        cond = next((c for c in (dgd.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
        return cond.get("status") == "True", json.dumps(cond)

    return probe


def service_url(env: dict, namespace: str, name: str, port_name: str = "http") -> str:
    svc = json.loads(kubectl(env, "-n", namespace, "get", "service", name, "-o", "json"))
    port = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == port_name)
    return f"http://{svc['spec']['clusterIP']}:{port}"


def chat(url: str, model: str, timeout: float = 60) -> dict:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Say hello from the local node."}],
            "max_tokens": 16,
            "stream": False,
        }
    ).encode()
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def hub_requests(env: dict) -> list[str]:
    """The requests the node's model hub answered (tools/node/hub.py logs one line each)."""
    log = Path(env["KUBE_LOCAL_DIR"]) / "node" / "logs" / "model-hub.log"
    return [line.strip() for line in log.read_text().splitlines() if line[:4] in ("GET ", "HEAD")]
