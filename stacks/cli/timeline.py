"""``python -m stacks timeline --stack NAME``: how long until the DGD is Ready, and why.

The steps and their order are the program's own resource graph (``__main__.py`` and
``components/cluster.py``): on EKS the VPC, then the control plane, then the system and GPU
node groups side by side; the cache file system next to the control plane; the StorageClass
after the add-ons; the model download Job as soon as the StorageClass and the system nodes
exist (``cache_deps``), *not* after the GPU nodes; the DGD after the download, the GPU nodes,
the device plugins and the platform (``graph_deps``); then image pull and worker start-up.
``tests/test_timeline.py`` checks these edges against the dependencies the program registers.

Image pull: where the program pre-pulls the worker image (an entry's ``ServingPlan.image_prepuller``, the DaemonSet of
stacks/serving/prepull.py, planned on ``cluster.mode: eks``), its pod goes onto each GPU node as soon as the node is
Ready, beside the device plugins' pods, and the kubelet pulls the image then: the pull starts when the GPU node joins,
and the worker starts once the pull, the DGD and the plugins' pods (the GPUs advertised) are all done; the workers find
the image present (``IfNotPresent``). Without a pre-puller the pull starts when the worker is scheduled: after the DGD
and the plugins' pods.

Durations (minutes, each with its source) live in ``stacks/registry/durations.yaml``; the download is
checkpoint size / throughput (+ pod start). The sequential recipe runbook (platform docs'
install order: cluster and GPU nodes, GPU stack, platform, then secret, PVC, download Job, DGD)
is the same graph with the download after the GPU nodes, plugins and platform; the difference is
what running the download in parallel saves. All pure: no cloud, no cluster.

GPU capacity: a pool on a managed node group (the default) launches its nodes beside the download; a pool on
Karpenter (``capacity: karpenter``, stacks/cluster/karpenter.py) has no node group: Karpenter's AWS resources (roles,
Pod Identity association, node access entry, interruption queue and rules) need only the cluster and are made beside the
system nodes (``karpenter-aws``), its controller's release waits for the system nodes (``karpenter``: the controller
Ready, then the EC2NodeClass, NodePool and placeholder), and the GPU nodes launch as soon as the pool's NodePool exists,
for the pool's capacity placeholder Job created with it (``capacity_placeholder``: pods that Karpenter launches the
nodes the DGD's workers fill for, minutes before the DGD exists; the workers bind beside them). A paused entry (no
placeholder) has its nodes go ``consolidateAfter`` plus Karpenter's disruption polling and emptiness validation after
its last GPU pod (measured with the real Karpenter by tests/test_karpenter_engine.py, figures in
stacks/registry/durations.yaml ``karpenter``). The report shows both paths side by side.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional, Union

from stacks.cli.shell import wrap
from stacks.cluster.karpenter import PLACEHOLDER_DEADLINE_S
from stacks.modes.registry import CLUSTER_MODES
from stacks.registry import yaml_text

DURATIONS = Path(__file__).resolve().parents[1] / "registry" / "durations.yaml"
GB = 10**9


@lru_cache(maxsize=1)
def durations() -> dict:
    return yaml_text.load(DURATIONS.read_text())


@dataclass
class Step:
    name: str
    minutes: float
    source: str
    after: tuple[str, ...] = ()
    basis: str = ""


@dataclass
class Timeline:
    stack: str
    target: str
    mode: str
    steps: dict[str, Step]
    finish: dict[str, float] = field(default_factory=dict)  # earliest finish per step
    critical: list[str] = field(default_factory=list)
    capacity: str = "node-group"  # node-group | karpenter (the GPU pools' capacity; eks only)
    consolidate_after_s: Optional[float] = None  # the Karpenter pools' consolidateAfter (None: Never)
    warm_start: Optional[Step] = None  # the worker start with the compile-cache entry on the volume
    prepull: bool = False  # the image pull starts when the GPU node joins (the program's pre-puller)

    @property
    def total(self) -> float:
        return max(self.finish.values()) if self.finish else 0.0

    @property
    def creates_cluster(self) -> bool:
        """The stack creates its cluster (its mode's ``creates_cluster``): ``up`` starts from an empty account, and the
        GPU capacity path (node groups or Karpenter) is its own."""
        return CLUSTER_MODES[self.mode].creates_cluster

    def start(self, name: str) -> float:
        return self.finish[name] - self.steps[name].minutes

    def latest_finish(self, name: str) -> float:
        """The latest ``name`` may finish without delaying the end (backward pass over the graph)."""
        succ = [s for s in self.steps.values() if name in s.after]
        return min((self.latest_finish(s.name) - s.minutes for s in succ), default=self.total)

    def slack(self, name: str) -> float:
        """How much longer ``name`` could take without delaying the end (total float)."""
        return self.latest_finish(name) - self.finish[name]


def schedule(steps: dict[str, Step]) -> tuple[dict[str, float], list[str]]:
    """Earliest finish of every step (all start as soon as their predecessors end) and the critical path."""
    finish: dict[str, float] = {}

    def fin(n: str, seen=()) -> float:
        if n in seen:
            raise ValueError(f"cycle in the step graph at {n}")
        if n not in finish:
            s = steps[n]
            finish[n] = max((fin(a, seen + (n,)) for a in s.after), default=0.0) + s.minutes
        return finish[n]

    for n in steps:
        fin(n)
    end = max(finish, key=lambda n: (finish[n], n == "worker-startup"))
    path = [end]
    while steps[path[-1]].after:
        path.append(max(steps[path[-1]].after, key=lambda a: finish[a]))
    return finish, path[::-1]


def _bytes(quantity: str) -> float:
    from stacks.config.keys import quantity_bytes

    return float(quantity_bytes(quantity))


def checkpoint_gb(model: str, precision: Optional[str], cache_size: Optional[str]) -> tuple[float, str]:
    """(GB, how it was obtained) for the checkpoint the download Job fetches."""
    ck = durations()["checkpoints"]
    params = ck["billions_of_params"].get(model)
    per = ck["bytes_per_param"].get(precision or "")
    if params is not None and per is not None:
        return params * per, f"{params}B params x {per} B ({precision})"
    if cache_size:
        return _bytes(cache_size) / GB, f"model-cache PVC size {cache_size} (upper bound; parameter count not recorded)"
    raise ValueError(f"no checkpoint size for {model}/{precision}: add it to {DURATIONS.name} checkpoints")


def download_step(
    model: str,
    precision: Optional[str],
    cache_size: Optional[str],
    after: tuple[str, ...],
    storage_gb_s: Optional[tuple[float, str]] = None,
) -> Step:
    """``storage_gb_s``: (GB/s, why) when the cache file system writes slower than the download stream."""
    d = durations()["download"]
    gb, how = checkpoint_gb(model, precision, cache_size)
    rate, why = float(d["throughput_gb_per_s"]), "download stream"
    if storage_gb_s and storage_gb_s[0] < rate:
        rate, why = storage_gb_s[0], storage_gb_s[1]
    minutes = d["overhead_minutes"] + gb / rate / 60
    src = f"{gb:.1f} GB ({how}) / {rate:.2f} GB/s ({why}) + {d['overhead_minutes']} min pod start; {d['source']}"
    return Step("model-download", round(minutes, 2), src, after, d["basis"])


def image_pull_step(after: tuple[str, ...], prepull: bool = False) -> Step:
    """The worker image's pull on a GPU node: its size at the parallel-pull rate AWS measured (durations.yaml ``image``;
    every GPU node pulls with FastImagePull, stacks/cluster/pools.py). ``prepull``: the pre-puller DaemonSet pulls it
    as the node joins (the source says so)."""
    im = durations()["image"]
    rate = im["measured_bytes"] / im["measured_parallel_s"]  # bytes per second
    minutes = im["gigabytes"] * GB / rate / 60
    src = (
        f"{im['gigabytes']} GB / {rate / GB:.2f} GB/s (parallel pull, FastImagePull) = {minutes * 60:.0f} s; "
        f"{im['size_source']}; {im['pull_source']}"
    )
    if prepull:
        src = f"{im['prepull_source']}; " + src
    return Step("image-pull", round(minutes, 2), src, after, "derived")


# Upstream's GPU worker startupProbe period where a stack's DGD is not at hand (stacks/serving/startup_probe.py).
UPSTREAM_PROBE_PERIOD_S = 30.0


def worker_start_steps(
    checkpoint: tuple[float, str], read: Optional[tuple[float, str]], probe_period_s: float, after: tuple[str, ...]
) -> tuple[Step, Step]:
    """(cold, warm) start of a vLLM worker (durations.yaml ``worker_start``): the weights read from the cache at the
    file system's per-client rate (``read``: (GB/s, why); None: EFS's), what every start does with a warm compile
    cache, the startup probe seen within one period, and, cold, torch.compile from nothing."""
    ws = durations()["worker_start"]
    gb, how = checkpoint
    rate, why = read if read else (float(ws["cache_read_gb_per_s"]), "EFS per client")
    parts = {name: float(row["seconds"]) for name, row in ws["warm_seconds"].items()}
    parts = {"weights": gb / rate, **parts, "probe": probe_period_s}
    warm = sum(parts.values()) / 60
    sums = " + ".join(f"{n} {v:.0f} s" for n, v in parts.items())
    head = (
        f"{sums} = {warm:.1f} min (weights: {gb:.1f} GB ({how}) / {rate:.2f} GB/s ({why}); probe: one startupProbe period of "
        f"the workers); "
    )
    cites = "; ".join(f"{n}: {row['source']}" for n, row in ws["warm_seconds"].items()) + f"; weights: {ws['cache_read_source']}"
    warm_step = Step("worker-startup-warm", round(warm, 2), head + cites, after, "derived")
    cold = warm + float(ws["compile_cold_minutes"])
    cold_step = Step(
        "worker-startup",
        round(cold, 2),
        f"the warm start ({warm:.1f} min) + torch.compile {ws['compile_cold_minutes']} min: {ws['compile_cold_source']}; "
        + head
        + cites,
        after,
        "estimate",
    )
    return cold_step, warm_step


CAPACITIES = ("node-group", "karpenter")


def build_steps(
    *,
    mode: str,
    model: str,
    precision: Optional[str],
    cache_size: Optional[str],
    cache_storage: str = "efs",
    device_plugins: bool = False,
    platform: bool = False,
    sequential: bool = False,
    overrides: Optional[dict[str, float]] = None,
    storage_gb_s: Optional[tuple[float, str]] = None,
    capacity: str = "node-group",
    probe_period_s: float = UPSTREAM_PROBE_PERIOD_S,
    prepull: bool = False,
) -> dict[str, Step]:
    """The step graph of one ``up`` (see the module docstring). ``sequential``: the recipe runbook's
    order instead (download after the GPU nodes, plugins and platform). ``overrides``: minutes by step.
    ``capacity``: the GPU pools on managed node groups, or on Karpenter (GPU nodes launched once the NodePool exists,
    for its capacity placeholder).
    ``mode``: the cluster mode's name; where the mode creates its cluster (``ClusterMode.creates_cluster``) the graph
    starts with the EKS steps (VPC, control plane, node groups, add-ons, cache file system). ``probe_period_s``: the
    workers' startupProbe period (the kubelet sees a started worker within one). The warm worker start (compile-cache
    entry on the volume) is ``worker_steps`` of the same inputs; the graph ends with the cold one. ``prepull``: the
    program pre-pulls the worker image (stacks/serving/prepull.py): the pull starts when the GPU node joins and the
    worker start waits for it, the DGD and the plugins' pods (``pull_edges``); only where the mode creates its cluster
    (the pre-puller goes onto the stack's own GPU nodes, whose join is a step here)."""
    if capacity not in CAPACITIES:
        raise ValueError(f"capacity {capacity!r}: choose one of {', '.join(CAPACITIES)}")
    table = durations()["steps"]
    creates = CLUSTER_MODES[mode].creates_cluster
    karpenter = creates and capacity == "karpenter"

    def step(name: str, after: tuple[str, ...], key: Optional[str] = None) -> Step:
        row = table[key or name]
        return Step(name, float(row["minutes"]), row["source"], after, row.get("basis", ""))

    steps: list[Step] = []
    if creates:
        fs = "fsx-lustre" if cache_storage == "fsx-lustre" else "efs"
        # On Karpenter: the controller's roles, Pod Identity association, node access entry, interruption queue and rules
        # need the cluster only; its Helm release waits for the system nodes it runs on (components/cluster.py).
        aws_side = [step("karpenter-aws", ("eks-control-plane",))] if karpenter else []
        gpu = (
            step("karpenter", ("system-node-group", "karpenter-aws"))
            if karpenter
            else step("gpu-node-group", ("eks-control-plane",))
        )
        steps += [
            step("vpc", ()),
            step("eks-control-plane", ("vpc",)),
            step("system-node-group", ("eks-control-plane",)),
            *aws_side,
            gpu,
            step("eks-addons", ("system-node-group",)),
            step("cache-file-system", ("vpc",), fs),
            step("storage-class", ("eks-addons", "cache-file-system")),
        ]
        cache_deps: tuple[str, ...] = ("storage-class", "system-node-group")
        graph_deps: tuple[str, ...] = (gpu.name,)
        device_plugins = True
    else:
        cache_deps, graph_deps = (), ()
    if device_plugins:
        # The charts install beside the GPU nodes (from the system nodes on EKS); their pods start on each GPU node as it
        # joins, which the workers wait for (the pods step; on Karpenter after the node launch, below).
        steps.append(step("device-plugins", ("system-node-group",) if creates else ()))
        if karpenter:
            graph_deps = graph_deps + ("device-plugins",)
        else:
            steps.append(step("device-plugin-pods", graph_deps + ("device-plugins",)))
            graph_deps = graph_deps + ("device-plugin-pods",)
    if platform:
        # the operator chart needs the nodes it runs on, not the cache's storage (stacks/layers/platform.py)
        steps.append(step("dynamo-platform", ("system-node-group",) if creates else ()))
        graph_deps = graph_deps + ("dynamo-platform",)
    serving_after = tuple(dict.fromkeys(cache_deps + (graph_deps if sequential else ())))
    steps.append(step("serving-objects", serving_after))
    steps.append(download_step(model, precision, cache_size, ("serving-objects",), storage_gb_s))
    steps.append(
        Step(
            "dgd",
            0.0,
            "the DynamoGraphDeployment object; its pods start once it exists",
            ("model-download",) + graph_deps,
            "documented",
        )
    )
    if karpenter:
        # The pool's capacity placeholder Job comes with its NodePool (components/cluster.py): Karpenter launches the
        # nodes from there, while the platform and the serving objects are created; the DGD's pods bind once the nodes
        # joined and the plugins' pods started on them.
        steps.append(step("gpu-node-launch", ("karpenter",), "karpenter-node-launch"))
        steps.append(step("device-plugin-pods", ("gpu-node-launch", "device-plugins")))
    prepull = prepull and creates and not sequential  # the recipe runbook pulls for the scheduled worker
    pull_after, worker_after = pull_edges(karpenter, prepull)
    steps.append(image_pull_step(pull_after, prepull))
    cold, _ = worker_steps(model, precision, cache_size, storage_gb_s, probe_period_s, worker_after)
    steps.append(cold)
    out = {s.name: s for s in steps}
    for name, minutes in (overrides or {}).items():
        if name not in out:
            raise ValueError(f"no step {name!r}; steps: {', '.join(out)}")
        out[name].minutes = float(minutes)
    return out


def pull_edges(karpenter: bool, prepull: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(image pull after, worker start after). Without a pre-puller the kubelet pulls the image for the scheduled
    worker: after the DGD and (Karpenter; on a node group the DGD waits for them) the plugins' pods, and the worker
    starts after the pull. With one (stacks/serving/prepull.py, on the stack's own GPU nodes) the pull starts when the
    GPU node joins (``gpu-node-group``, or ``gpu-node-launch`` on Karpenter), beside the plugins' pods, and the worker
    starts once the pull, the DGD and the plugins' pods (the GPUs advertised) are done."""
    plugins: tuple[str, ...] = ("device-plugin-pods",) if karpenter else ()
    if not prepull:
        return ("dgd",) + plugins, ("image-pull",)
    return ("gpu-node-launch" if karpenter else "gpu-node-group",), ("image-pull", "dgd") + plugins


def worker_steps(
    model: str,
    precision: Optional[str],
    cache_size: Optional[str],
    storage_gb_s: Optional[tuple[float, str]] = None,
    probe_period_s: float = UPSTREAM_PROBE_PERIOD_S,
    after: tuple[str, ...] = ("image-pull",),
) -> tuple[Step, Step]:
    """(cold, warm) worker start of a target's checkpoint, after ``after`` (the image pull, and with a pre-puller the
    DGD and the plugins' pods: ``pull_edges``; ``worker_start_steps``)."""
    return worker_start_steps(checkpoint_gb(model, precision, cache_size), storage_gb_s, probe_period_s, after)


def probe_period(dgd: Optional[dict]) -> float:
    """The longest startupProbe period of the DGD's GPU worker containers (upstream's where none is set): a started
    worker is seen within one period."""
    from stacks.serving.startup_probe import DEFAULT_PERIOD_SECONDS

    periods = [
        float((c.get("startupProbe") or {}).get("periodSeconds", DEFAULT_PERIOD_SECONDS))
        for comp in ((dgd or {}).get("spec") or {}).get("components") or []
        for c in comp["podTemplate"]["spec"]["containers"]
        if c.get("startupProbe") and (c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")
    ]
    return max(periods, default=UPSTREAM_PROBE_PERIOD_S)


def duration_seconds(text: str) -> Optional[float]:
    """A NodePool duration (``10m``, ``1h30m``, ``90s``; karpenter.sh_nodepools.yaml pattern) in seconds; None for Never."""
    if text == "Never":
        return None
    parts = re.findall(r"([0-9]+)([smh])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"consolidateAfter {text!r}: expected e.g. 30s, 10m, 1h30m or Never")
    return float(sum(int(n) * {"s": 1, "m": 60, "h": 3600}[u] for n, u in parts))


def gpu_capacity(cluster: Any) -> tuple[str, Optional[float]]:
    """(capacity, consolidateAfter in seconds) of a cluster config's GPU pools: karpenter when any pool is on
    Karpenter (its consolidateAfter: the shortest of those pools; the stacks/cluster/karpenter.py default when unset)."""
    from stacks.config.eks import DEFAULT_CONSOLIDATE_AFTER

    pools = list(getattr(cluster, "gpu_pools", None) or ()) or [cluster]
    on = [p for p in pools if getattr(p, "capacity", "node-group") == "karpenter"]
    if not on:
        return "node-group", duration_seconds(DEFAULT_CONSOLIDATE_AFTER)
    after = [
        duration_seconds(
            getattr(p, "consolidate_after", None) or getattr(cluster, "consolidate_after", None) or DEFAULT_CONSOLIDATE_AFTER
        )
        for p in on
    ]
    known = [a for a in after if a is not None]
    return "karpenter", min(known) if known else None


def has_prepuller(program: Any) -> bool:
    """The program pre-pulls the timed entry's worker image onto its GPU nodes: its plan carries an image pre-puller
    (stacks/serving/prepull.py; planned where the cluster mode owns the GPU nodes)."""
    return program.serving is not None and program.serving.image_prepuller is not None


def timeline_for_program(
    program: Any, *, sequential: bool = False, overrides: Optional[dict[str, float]] = None, capacity: Optional[str] = None
) -> Timeline:
    """The timeline of a ``stacks.program.ProgramPlan`` (``capacity``: the stack's own unless named; the image pull
    starts at the GPU node's join where the program has a pre-puller, ``has_prepuller``)."""
    cluster, plan, mode = program.cluster, program.serving, program.mode
    t = plan.target
    size = (plan.cache_pvc or {}).get("spec", {}).get("resources", {}).get("requests", {}).get("storage")
    storage = None
    if mode.creates_cluster and getattr(cluster, "cache_storage", "efs") == "fsx-lustre":
        # PERSISTENT_2 throughput is per TiB of storage (FSx for Lustre user guide; FACTS.md)
        tib = cluster.fsx_storage_capacity_gib / 1024
        storage = (
            tib * cluster.fsx_throughput_per_tib / 1000,
            f"FSx {cluster.fsx_storage_capacity_gib} GiB x {cluster.fsx_throughput_per_tib} MB/s/TiB",
        )
    own, after_s = gpu_capacity(cluster) if mode.creates_cluster else ("node-group", None)
    probe = probe_period(plan.dgd)
    cap = capacity or own
    prepull = has_prepuller(program)  # planned only where the mode creates the cluster (stacks/program)
    steps = build_steps(
        storage_gb_s=storage,
        mode=cluster.mode,
        model=t.model,
        precision=t.precision,
        cache_size=size,
        cache_storage=getattr(cluster, "cache_storage", "efs"),
        device_plugins=mode.installs_device_plugins(cluster),
        platform=mode.installs_platform(cluster),
        sequential=sequential,
        overrides=overrides,
        capacity=cap,
        probe_period_s=probe,
        prepull=prepull,
    )
    _, warm = worker_steps(t.model, t.precision, size, storage, probe, steps["worker-startup"].after)
    finish, critical = schedule(steps)
    return Timeline(program.stack, t.id, cluster.mode, steps, finish, critical, cap, after_s, warm, prepull)


def _oneline(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def report(tl: Timeline, seq: Timeline, other: Optional[Timeline] = None) -> str:
    """``other``: the same stack on the other GPU capacity path (EKS), shown side by side."""
    cap = f", GPU capacity {tl.capacity}" if tl.creates_cluster else ""
    lines = [
        f"timeline: stack {tl.stack} (cluster.mode {tl.mode}{cap})",
        f"target {tl.target}; minutes, from an empty "
        f"{'account' if tl.creates_cluster else 'namespace on the existing cluster'} to a Ready DGD",
        "",
        "critical path:",
        f"  {'start':>6} {'end':>6} {'min':>6}  {'step':<20} basis/source",
    ]
    for n in tl.critical:
        s = tl.steps[n]
        row = f"  {tl.start(n):6.1f} {tl.finish[n]:6.1f} {s.minutes:6.1f}  {n:<20} "
        lines.append(wrap(f"{row}{s.basis}: {_oneline(s.source)}", hang=len(row)))
    lines.append(f"total: {tl.total:.1f} min")
    off = [n for n in tl.steps if n not in tl.critical]
    if off:
        lines += ["", "off the critical path (slack = how much longer it could take without delaying Ready):"]
        for n in off:
            s = tl.steps[n]
            lines.append(f"  {n:<20} {s.minutes:6.1f} min, ends {tl.finish[n]:6.1f}, slack {tl.slack(n):6.1f}")
            lines.append(wrap(f"      {s.basis}: {_oneline(s.source)}", hang=6))
    saved = seq.total - tl.total
    lines += [
        "",
        f"sequential recipe runbook (download after the GPU nodes, device plugins and platform): {seq.total:.1f} min; "
        f"running the download in parallel saves {saved:.1f} min",
    ]
    if other is not None:
        lines += ["", *capacity_report(tl, other)]
    # within 100 columns (the table rows are wrapped under their last column already)
    return "\n".join(wrap(one) for line in lines for one in line.split("\n"))


def gpu_launch(tl: Timeline) -> tuple[str, float]:
    """(step, minute) at which the GPU nodes start launching (and billing)."""
    name = "gpu-node-launch" if tl.capacity == "karpenter" else "gpu-node-group"
    return name, tl.start(name)


def pause_seconds(consolidate_after_s: Optional[float]) -> Optional[float]:
    """Seconds from an entry's last GPU pod gone to its Karpenter nodes deleted: consolidateAfter, then up to one
    disruption poll and the emptiness validation (stacks/registry/durations.yaml karpenter). None: consolidateAfter Never."""
    if consolidate_after_s is None:
        return None
    k = durations()["karpenter"]
    return consolidate_after_s + k["disruption_polling_s"] + k["emptiness_validation_s"]


# One leg of a path: a step, or steps that run side by side (the path waits for the longest).
Leg = Union[str, tuple[str, ...]]


def new_node_legs(launch: str, prepull: bool) -> tuple[Leg, ...]:
    """A new GPU node up to its worker's start: the node (``launch``: its step or durations.yaml key), then the plugins'
    pods and the image pull, one after the other, or side by side where the pre-puller pulls at the node's join."""
    if prepull:
        return (launch, ("device-plugin-pods", "image-pull"))
    return (launch, "device-plugin-pods", "image-pull")


def legs_minutes(legs: tuple[Leg, ...], minutes: Callable[[str], float]) -> float:
    """Minutes along ``legs``: a step's own, the longest of steps side by side."""
    return sum(minutes(leg) if isinstance(leg, str) else max(minutes(n) for n in leg) for leg in legs)


def leg_text(leg: Leg) -> str:
    return leg if isinstance(leg, str) else f"max({', '.join(leg)})"


def capacity_report(tl: Timeline, other: Timeline) -> list[str]:
    """The managed node group path and the Karpenter path of the same stack, side by side."""
    ng, kp = (tl, other) if tl.capacity == "node-group" else (other, tl)
    k = durations()["karpenter"]
    m = k["measured"]
    ng_step, ng_from = gpu_launch(ng)
    kp_step, kp_from = gpu_launch(kp)
    resume = legs_minutes((*new_node_legs("gpu-node-launch", kp.prepull), "worker-startup"), lambda n: kp.steps[n].minutes)
    node_to_worker = (
        "max(device plugins' pods, image pull from the node's join by the pre-puller)"
        if kp.prepull
        else "device plugins' pods + image pull"
    )
    after = kp.consolidate_after_s
    pause = pause_seconds(after)
    mine = lambda t: " (this stack)" if t is tl else ""  # noqa: E731
    out = [
        "GPU capacity, managed node group vs Karpenter (minutes from the start of `up`):",
        f"  {'path':<24} {'Ready':>6} {'GPU nodes from':>15}  GPU nodes billed before Ready",
        f"  {'node group' + mine(ng):<24} {ng.total:6.1f} {ng_from:15.1f}  {ng.total - ng_from:5.1f} min "
        f"({ng_step} runs beside the download)",
        f"  {'karpenter' + mine(kp):<24} {kp.total:6.1f} {kp_from:15.1f}  {kp.total - kp_from:5.1f} min "
        f"({kp_step}: nodes launch when the NodePool exists, for its capacity placeholder)",
        f"  capacity placeholder: Karpenter's GPU nodes launch {kp.finish['dgd'] - kp_from:.1f} min before the DGD exists; "
        f"if no worker comes (the DGD fails or is never applied), they are held until the placeholder Job's "
        f"activeDeadlineSeconds ({PLACEHOLDER_DEADLINE_S / 60:.0f} min) and go consolidateAfter"
        + (f" ({after:.0f} s)" if after is not None else " (Never: not at all)")
        + " later",
        # The node group's half is stacks/serving/autoscaling.py pause_pools (what `stacks cost` prices as paused).
        "  pause (every entry on the pool paused, or at replicas: 0): the node group goes to 0 nodes at the `up` "
        "that pauses it (desired and min size 0, max kept for the resume; a capacity reservation stays billed); "
        "Karpenter deletes its nodes "
        + (
            f"within {pause:.0f} s of the last GPU pod (consolidateAfter {after:.0f} s + {k['disruption_polling_s']} s polling + "
            f"{k['emptiness_validation_s']} s validation)"
            if pause is not None
            else "never (consolidateAfter: Never)"
        )
        + f"; measured with the real Karpenter in the simulated cluster: {max(m['pause_to_zero_nodes_s']):.1f} s at "
        f"consolidateAfter {m['consolidate_after_s']} s, pending pods bound within {max(m['pending_to_bound_s'])} s "
        f"(tests/test_karpenter_engine.py)",
        f"  resume on Karpenter: node launch + {node_to_worker} + worker start-up = {resume:.1f} min (the model cache "
        f"stays; no download)",
    ]
    return out


@dataclass(frozen=True)
class ServingPath:
    """One way to a Ready replica, in minutes, with a cold compile cache and with the entry it needs already on the
    volume (``worker-startup`` against ``worker-startup-warm``), and the target it is held to (None: no target)."""

    name: str
    steps: tuple[Leg, ...]
    cold: float
    warm: float
    target_cold: Optional[float] = None
    target_warm: Optional[float] = None


def serving_paths(own: Timeline, node_group: Timeline, karpenter: Timeline) -> list[ServingPath]:
    """The five paths to a serving replica: an empty account on a node group and on Karpenter (the whole ``up``), the
    resume of a paused entry (its nodes come back: the stack's own capacity), a scale-out onto free GPUs of a running
    node (the image is there), and a scale-out that needs a new node. ``own``: the stack's timeline (its capacity; with
    its pre-puller a new node pulls the image beside the plugins' pods, ``new_node_legs``)."""
    table, targets = durations()["steps"], durations()["targets"]
    assert own.warm_start is not None, "a program's timeline carries its warm worker start"
    cold, warm = own.steps["worker-startup"].minutes, own.warm_start.minutes
    launch = "karpenter-node-launch" if own.capacity == "karpenter" else "gpu-node-group"
    node = new_node_legs(launch, own.prepull)
    pull = own.steps["image-pull"].minutes

    def minutes(legs: tuple[Leg, ...]) -> float:
        return legs_minutes(legs, lambda n: pull if n == "image-pull" else float(table[n]["minutes"]))

    def up(tl: Timeline) -> tuple[float, float]:  # the worker start is the last step of the critical path
        return tl.total, tl.total - tl.steps["worker-startup"].minutes + warm

    ng, kp = up(node_group), up(karpenter)
    t_empty, t_resume, t_same = targets["empty-account"], targets["resume"], targets["scale-out-same-node"]
    return [
        ServingPath("empty account, node group", tuple(node_group.critical), *ng, t_empty.get("cold"), t_empty.get("warm")),
        ServingPath("empty account, Karpenter", tuple(karpenter.critical), *kp, t_empty.get("cold"), t_empty.get("warm")),
        ServingPath(
            f"resume a paused entry ({own.capacity})",
            (*node, "worker-startup"),
            minutes(node) + cold,
            minutes(node) + warm,
            t_resume.get("cold"),
            t_resume.get("warm"),
        ),
        ServingPath(
            "scale-out on a running node",
            ("image-cached", "worker-startup"),
            minutes(("image-cached",)) + cold,
            minutes(("image-cached",)) + warm,
            t_same.get("cold"),
            t_same.get("warm"),
        ),
        ServingPath(
            f"scale-out on a new node ({own.capacity})", (*node, "worker-startup"), minutes(node) + cold, minutes(node) + warm
        ),
    ]


def _against(value: float, target: Optional[float]) -> str:
    if target is None:
        return ""
    over = value - target
    return f" (target {target:g}: {'met' if over <= 0 else f'misses by {over:.1f}' if over >= 0.05 else f'misses by {over:.2f}'})"


def paths_report(paths: list[ServingPath], warm: Step) -> list[str]:
    """The five paths, cold and warm compile cache, each against its target; the steps each one sums. ``warm``: the
    warm worker start (its sum and sources are printed once). A resume and a scale-out onto a running node restart a
    component that ran with the same key, so their targets are on the warm start (durations.yaml ``targets``)."""
    out = [
        "paths to a serving replica (minutes; cold = the workers compile, warm = the compile-cache entry is on the "
        f"volume already; worker-startup-warm, {warm.basis}: " + _oneline(warm.source) + "):"
    ]
    for p in paths:
        # A target on the cold path is the bar for both (a warm start must not be slower than a cold target).
        warm_target = p.target_warm if p.target_warm is not None else p.target_cold
        out.append(
            f"  {p.name:<36} cold {p.cold:5.1f}{_against(p.cold, p.target_cold)}, warm {p.warm:5.1f}"
            f"{_against(p.warm, warm_target)}"
        )
        out.append(f"      {' + '.join(leg_text(leg) for leg in p.steps)}")
    return out


def cmd(args) -> int:
    from stacks.config.keys import ConfigError
    from stacks.program.render import program_for_stack

    program = program_for_stack(args.stack)
    if program.serving is None:  # a cluster-only stack (dynamo:serve: []): nothing reaches a Ready DGD
        raise ConfigError(
            f"timeline: stack {args.stack} serves nothing (a cluster-only stack, dynamo:serve: []); "
            "run it on a serving stack that uses this cluster (cluster.mode: stack)"
        )
    tl = timeline_for_program(program)
    other = None
    if tl.creates_cluster:
        other = timeline_for_program(program, capacity="node-group" if tl.capacity == "karpenter" else "karpenter")
    text = report(tl, timeline_for_program(program, sequential=True), other)
    if other is not None:
        ng, kp = (tl, other) if tl.capacity == "node-group" else (other, tl)
        assert tl.warm_start is not None
        text += "\n\n" + "\n".join(wrap(line) for line in paths_report(serving_paths(tl, ng, kp), tl.warm_start))
    print(text)
    return 0


def add_subparser(sub) -> None:
    p = sub.add_parser(
        "timeline",
        help="critical path of `pulumi up` to a Ready DGD, with a duration per step",
        description="The critical path of `pulumi up` of a committed stack to a Ready "
        "DynamoGraphDeployment: each step with its expected duration and the source of that "
        "figure (stacks/registry/durations.yaml).",
    )
    p.add_argument("--stack", required=True, metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    p.set_defaults(fn=cmd)


if __name__ == "__main__":  # pragma: no cover
    import argparse

    ap = argparse.ArgumentParser()
    add_subparser(ap.add_subparsers(dest="cmd", required=True))
    a = ap.parse_args()
    sys.exit(a.fn(a))
