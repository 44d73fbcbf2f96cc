"""The real Karpenter (core + KWOK cloud provider) against the local control plane of ``tools/kube-local.sh``.

``KarpenterSim`` installs what Karpenter needs on the loopback API server and runs it as a background process:

- the CRDs of the pinned module (NodePool, NodeClaim, NodeOverlay, KWOKNodeClass: ``tools/karpenter.sh build`` copies
  them next to the binary);
- the instance-types file the KWOK provider reads (``INSTANCE_TYPES_FILE_PATH``), generated from stacks/registry/gpus.py by
  ``stacks.cli.kwok_instances.kwok_instance_types``, priced from stacks/registry/prices.yaml for the plan's region (``region_prices``);
- the node lifecycle controller of kube-controller-manager (the real one, same binary as kube-local's, run with only
  ``--controllers=nodelifecycle``): kube-local's controller manager runs without it, and without it the
  ``node.kubernetes.io/not-ready:NoSchedule`` taint that the API server's TaintNodesByCondition admission puts on every
  new node never goes away. Karpenter waits for that taint to go before it calls a node initialized, and the
  scheduler does not bind to it (sigs.k8s.io/karpenter v1.13.0 pkg/scheduling/taints.go KnownEphemeralTaints,
  pkg/controllers/nodeclaim/lifecycle/initialization.go);
- Karpenter itself: ``KUBECONFIG`` of the local cluster, leader election off, batch windows shortened, its log kept.

The KWOK provider creates a Node per NodeClaim annotated ``kwok.x-k8s.io/node=fake`` (kwok/cloudprovider/
cloudprovider.go ``toNode``/``addKwokAnnotation``); kube-local's kwok manages exactly the nodes with that annotation
and its default stages make them Ready. Karpenter's own metrics and health endpoints bind ``:<port>`` (all addresses:
pkg/operator/operator.go formats ``":%d"``, no address flag); free ports are chosen and only the health port is read,
on 127.0.0.1. Every wait ends at its timeout with what it saw last.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import quote
from urllib.request import urlopen

from stacks.cli.kwok_instances import kwok_instance_types, kwok_node_class
from stacks.cli.simulate import REPO_ROOT, KubeError, Simulator
from stacks.registry import yaml_text

KARPENTER_SH = REPO_ROOT / "tools" / "karpenter.sh"
KUBE_GO_MOD = REPO_ROOT / "tools" / "kube" / "go.mod"
CACHE = Path(os.environ.get("DYNAMO_TOOLCHAIN_CACHE") or Path.home() / ".cache" / "dynamo-pulumi-toolchain")
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # sigs.k8s.io/karpenter pkg/apis/v1 NodePoolLabelKey
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"


def karpenter_paths() -> tuple[Path, Path]:
    """(binary, CRD dir), built or reused by tools/karpenter.sh (pinned by tools/karpenter/go.mod)."""
    r = subprocess.run([str(KARPENTER_SH), "build"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode:
        raise RuntimeError(f"tools/karpenter.sh build failed:\n{r.stderr[-2000:]}")
    path = subprocess.run([str(KARPENTER_SH), "path"], capture_output=True, text=True, check=True).stdout.strip()
    crds = subprocess.run([str(KARPENTER_SH), "crds"], capture_output=True, text=True, check=True).stdout.strip()
    return Path(path), Path(crds)


def kube_controller_manager() -> Path:
    """kube-local's kube-controller-manager binary (same pin: tools/kube/go.mod)."""
    m = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)(\s*//.*)?$", KUBE_GO_MOD.read_text(), re.M)
    if not m:
        raise RuntimeError(f"cannot read the k8s.io/kubernetes pin from {KUBE_GO_MOD}")
    version = m.group(1)
    path = CACHE / f"kube-controller-manager-{version}" / "kube-controller-manager"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: run tools/kube-local.sh build")
    return path


def region_prices(region: str) -> dict[str, float]:
    """On-demand $/h of every instance type stacks/registry/prices.yaml prices in ``region`` (the `stacks cost` data)."""
    from stacks.cli.cost import ec2_price, load_prices

    data = load_prices()
    out = {}
    for it in data.get("ec2") or {}:
        p = ec2_price(data, it, region)
        if p:
            out[it] = float(p["usd_per_hour"])
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, timeout: float, probe: Callable[[], object], interval: float = 0.2):
    """Poll ``probe`` until it returns something truthy; at the timeout raise with the last thing it returned."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = probe()
        except (KubeError, OSError) as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s; last seen: {last!r}"[:4000])
        time.sleep(interval)


def _pod_bound(p: dict) -> bool:
    return bool((p.get("spec") or {}).get("nodeName"))


@dataclass
class KarpenterSim:
    """Karpenter and its prerequisites on the local cluster whose kubeconfig is ``kubeconfig``."""

    kubeconfig: Path
    workdir: Path
    zones: tuple[str, ...]
    instance_types: Optional[tuple[str, ...]] = None
    prices: dict[str, float] = field(default_factory=dict)
    batch_idle: str = "200ms"
    batch_max: str = "2s"
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.api = Simulator(self.kubeconfig)
        self.health_port = free_port()

    # ---- set-up
    def install_crds(self, crd_dir: Path, timeout: float = 60) -> list[str]:
        names = []
        for f in sorted(crd_dir.glob("*.yaml")):
            crd = yaml_text.load(f.read_text())
            names.append(crd["metadata"]["name"])
            try:
                self.api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            except KubeError as e:
                if e.status != 409:
                    raise

        def established():
            out = {}
            for n in names:
                crd = self.api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                out[n] = any(
                    c.get("type") == "Established" and c.get("status") == "True"
                    for c in (crd.get("status") or {}).get("conditions") or []
                )
            return all(out.values()) and out or None

        wait_until("Karpenter CRDs Established", timeout, established)
        return names

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")
        p = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        log.close()
        self.procs[name] = p
        self.started[name] = time.monotonic()
        return p

    def log_tail(self, name: str, lines: int = 30) -> str:
        f = self.workdir / f"{name}.log"
        return "\n".join(f.read_text(errors="replace").splitlines()[-lines:]) if f.exists() else ""

    def start_node_lifecycle(self) -> None:
        """The real node lifecycle controller (see the module docstring)."""
        kcm = kube_controller_manager()
        self._spawn(
            "node-lifecycle",
            [
                str(kcm),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
                "--controllers=nodelifecycle",
                "--v=1",
            ],
            dict(os.environ),
        )

    def start(self, binary: Path, timeout: float = 90) -> float:
        """Start Karpenter (after the CRDs); returns seconds until its /readyz answered."""
        types_file = self.workdir / "instance-types.json"
        types_file.write_text(json.dumps(kwok_instance_types(self.zones, self.instance_types, prices=self.prices), indent=1))
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "INSTANCE_TYPES_FILE_PATH": str(types_file),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(free_port()),
            "HEALTH_PROBE_PORT": str(self.health_port),
            "BATCH_IDLE_DURATION": self.batch_idle,
            "BATCH_MAX_DURATION": self.batch_max,
            "LOG_LEVEL": "debug",
            "KUBE_CLIENT_QPS": "200",
            "MEMORY_LIMIT": str(1 << 30),
            "CPU_REQUESTS": "1000",
        }
        t0 = time.monotonic()
        p = self._spawn("karpenter", [str(binary)], env)

        def ready():
            if p.poll() is not None:
                raise RuntimeError(f"karpenter exited with {p.returncode}:\n{self.log_tail('karpenter')}")
            try:
                with urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                    return r.status == 200
            except OSError as e:
                return str(e)

        try:
            wait_until("karpenter /readyz", timeout, lambda: ready() is True)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.log_tail('karpenter')}") from None
        return time.monotonic() - t0

    def apply(self, path: str, obj: dict) -> dict:
        try:
            return self.api.request("POST", path, obj)
        except KubeError as e:
            if e.status != 409:
                raise
            cur = self.api.request("GET", f"{path}/{obj['metadata']['name']}")
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]}}
            return self.api.request("PUT", f"{path}/{obj['metadata']['name']}", obj)

    def apply_node_class(self, name: str, registration_delay: str = "0s") -> dict:
        return self.apply(NODECLASSES, kwok_node_class(name, registration_delay))

    def apply_node_pool(self, pool: dict) -> dict:
        return self.apply(NODEPOOLS, pool)

    # ---- observation
    def nodes(self, node_pool: str) -> list[dict]:
        return self.api.request("GET", f"/api/v1/nodes?labelSelector={quote(f'{NODEPOOL_LABEL}={node_pool}')}").get("items", [])

    def node_claims(self, node_pool: str) -> list[dict]:
        return self.api.request("GET", f"{NODECLAIMS}?labelSelector={quote(f'{NODEPOOL_LABEL}={node_pool}')}").get("items", [])

    def wait_nodes(
        self, node_pool: str, count: int, timeout: float, pods: Optional[Callable[[], list[dict]]] = None
    ) -> list[dict]:
        """Until the pool has exactly ``count`` live nodes (none being deleted) and ``count`` NodeClaims, and, when
        ``pods`` is given, every one of those pods is bound. Karpenter removes a node before the NodeClaim's
        termination finalizer lets the claim go, so counting nodes alone ends a scale-in wait early."""
        last: dict[str, int] = {}

        def seen():
            live = [n for n in self.nodes(node_pool) if not n["metadata"].get("deletionTimestamp")]
            everything = self.nodes(node_pool)
            ps = pods() if pods is not None else []
            last.update(
                nodes=len(everything),
                live=len(live),
                claims=len(self.node_claims(node_pool)),
                bound=sum(map(_pod_bound, ps)),
                pods=len(ps),
            )
            settled = len(everything) == count and len(live) == count and last["claims"] == count
            if settled and (pods is None or last["bound"] == last["pods"]):
                return everything or True
            return None

        try:
            got = wait_until(f"{count} node(s) in NodePool {node_pool}", timeout, seen)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; counts {last}\nkarpenter log:\n{self.log_tail('karpenter', 40)}") from None
        return got if isinstance(got, list) else []

    def stop(self) -> None:
        for name, p in reversed(list(self.procs.items())):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(3)  # nothing to hand over: no leader election, and the cluster is thrown away
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(5)
        self.procs.clear()
        self.api.close()
