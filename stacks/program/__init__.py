"""The program: spec -> every plan of a stack, for `pulumi up` and `render --stack`. May import every layer below it;
nothing below imports it.

The whole program as data: the parsed spec in, every plan out (Kubernetes and AWS objects as dicts).

``build_program`` is the one function ``__main__.py`` (``pulumi up``) and ``python -m stacks render --stack`` call:
``stacks.config.parse_spec`` checks the whole config once, then ``plan_program`` builds the plans from that spec
only, so both paths refuse the same configurations with the same message and show the same objects: what
``render`` shows is what ``up`` creates. Nothing here talks to a cluster or a cloud; the Pulumi components only
wire the result.

Where the objects go is the stack's cluster mode (``dynamo:cluster.mode``: render, kubeconfig, stack, eks), one module
each in stacks/modes/: ``plan_program`` looks the mode up in the one registry (``stacks.modes.registry.cluster_mode``;
afterwards ``ProgramPlan.mode``) and asks it how each entry is planned, how the entries' cluster plans combine, which layers,
device plugins and charts it installs, the Pod Security version, pause and the pools autoscaling must fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Optional

from stacks.serving.autoscaling import check_bounds, keda_specs, scaled_object
from stacks.serving.benchmark import BenchmarkPlan, build_benchmark, synthetic_speculative_dgd
from stacks.serving.prepull import image_prepuller
from stacks.config.keys import NS, ConfigError, StackConfig
from stacks.config.stack import EksCluster, KubeconfigCluster
from stacks.observe.observability import ObservabilityPlan, build_observability, dynamo_pod_monitors, prometheus_url
from stacks.layers import LayerPlan
from stacks.modes import ClusterMode, EntryPlan
from stacks.modes.registry import cluster_mode
from stacks.layers.benchmark import benchmark_layer
from stacks.layers.front_door import needs_load_balancer, plan_front_door
from stacks.layers.keda import plan_keda
from stacks.layers.platform import plan_device_plugins, plan_dra_driver, plan_dynamo_platform
from stacks.cluster.platform import GPU_PRESENT_LABELS
from stacks.layers.observability import observability_layer
from stacks.serving.serve import Entry, build_entries
from stacks.serving import PSS_PREFIX, REDACTED, ServingPlan, least_strict, plan_pods, pod_security_labels, pod_security_level
from stacks.config import ClusterConfig, ProgramSpec, ServeEntry, kubeconfig_path, parse_spec  # noqa: F401  (kubeconfig_path: re-export)


@dataclass
class ProgramPlan:
    """What one ``pulumi up`` of a stack creates, before any resource exists."""

    stack: str
    cfg: Optional[StackConfig]  # None: a cluster-only stack (``dynamo:serve: []``)
    cluster: ClusterConfig
    serving: Optional[ServingPlan]
    # The mode's plan of the cluster (ClusterMode.plan_cluster): stacks.cluster.ClusterPlan for mode eks,
    # stacks.cluster.ClusterStackPlan for mode stack, None where the mode plans no cluster
    cluster_plan: Optional[Any] = None
    # Layers ``up`` creates besides the serving objects, one line each (the cluster's, then each of ``layers``).
    other_layers: list[str] = field(default_factory=list)
    # The typed plans of two optional layers (None when off), which other plans read (KEDA the Prometheus URL, Pod
    # Security the Job's pod): stacks.observe.observability.ObservabilityPlan, stacks.serving.benchmark.BenchmarkPlan.
    # Their objects are those of their LayerPlans in ``layers`` (stacks/layers/observability.py, benchmark.py).
    observability: Optional[ObservabilityPlan] = None
    benchmark: Optional[BenchmarkPlan] = None
    # One per serving entry (``dynamo:serve``); a single-target stack has one, keyed ``dynamo``.
    entries: list[Entry] = field(default_factory=list)
    spec: ProgramSpec = field(kw_only=True)  # what the plans were built from
    # The optional layers in the one layer shape (stacks/layers), in order: the platform layer (``platform_layers``:
    # device plugins, the Dynamo platform) and KEDA (``demand_layers``), which serving objects wait for (``gates``: up
    # creates them first); observability and the benchmark (``optional_layers``); those of LAYER_PLANNERS. Each a
    # LayerPlan, wired by components/layer.py.
    layers: list[LayerPlan] = field(default_factory=list)

    @property
    def multi(self) -> bool:
        """A ``dynamo:serve`` stack (resources named by namespace and entry) rather than a single target."""
        return bool(self.entries) and self.entries[0].key != NS

    @property
    def mode(self) -> ClusterMode:
        """The stack's cluster mode (stacks/modes): what the cluster source means to the plans and the shells."""
        return cluster_mode(self.cluster)

    def device_plugin_fabrics(self) -> list[str]:
        """The fabrics whose device plugins the platform layer installs (the mode's ``device_plugin_fabrics``: on EKS
        the cluster's, EFA or none; on an existing cluster with ``installDevicePlugins`` every entry's)."""
        return self.mode.device_plugin_fabrics(self.cluster_plan, self.entries)

    def cluster_objects(self) -> list[dict]:
        """Kubernetes objects of the cluster layer that ``up`` creates for the serving namespaces: image pull
        Secrets (value redacted), the FSx PersistentVolume (its CSI source comes from the file system), the
        GB200 ComputeDomain."""
        cp = self.cluster_plan
        if cp is None:
            return []
        out = []
        if getattr(cp, "static_pv", None):
            out.append(cp.static_pv)
        for obj in cp.pull_secrets:
            out.append({**obj, "stringData": {".dockerconfigjson": REDACTED}})
        if getattr(cp, "compute_domain", None):
            out.append(cp.compute_domain)
        return out

    def autoscaling_shortfall(self, node_pools: Any) -> Optional[str]:
        """The autoscaling bounds against pools the program knows only at ``up`` (on a cluster stack its
        StackReference's ``nodePools`` Output; components/cluster_source.py checks it in the Output's apply, before any
        DGD): the message ``check_bounds`` gives on EKS (key, value, valid range), or None (the mode's
        ``autoscaling_shortfall``)."""
        return self.mode.autoscaling_shortfall(self.cluster, self.entries, node_pools)

    def objects(self) -> list[dict]:
        """The Kubernetes objects ``up`` registers (secrets redacted): the cluster layer's objects in the
        serving namespaces, every entry's serving objects (those entries share appear once), every optional layer's (``layers``)."""
        serving = (
            [o for e in self.entries for o in e.plan.objects()]
            if self.entries or self.serving is None
            else self.serving.objects()
        )
        return self.cluster_objects() + serving + [o for layer in self.layers for o in layer.objects]

    def layer_outputs(self) -> dict[str, Any]:
        """Every layer's stack outputs (e.g. frontDoorUrl, frontDoorSmokeTest)."""
        return {k: v for layer in self.layers for k, v in layer.outputs.items()}


def build_program(
    raw: dict[str, Any],
    stack: str,
    secret_keys: frozenset[str] = frozenset(),
    env: Optional[dict[str, str]] = None,
    aws_region: Optional[str] = None,
    secret_values: Optional[dict[str, Any]] = None,
) -> ProgramPlan:
    """Parse the stack config once (``stacks.config.parse_spec``: every key, the secrets' names and, where known,
    their values' shape) and plan from the result. Arguments as ``parse_spec`` takes them."""
    return plan_program(parse_spec(raw, stack, secret_keys, env=env, aws_region=aws_region, secret_values=secret_values))


def plan_program(spec: ProgramSpec) -> ProgramPlan:
    """Every plan of one stack, from its spec: the serving objects of each entry where the stack's cluster mode
    places them (``ClusterMode.plan_entry``: on EKS sized and placed for the cluster's instances), the cluster's plan
    (``ClusterMode.plan_cluster``: the entries' cluster plans combined), the optional layers, pause and autoscaling.
    The mode comes from the one registry (``stacks.modes.registry.cluster_mode``, ``ProgramPlan.mode``); everything
    below asks it instead of comparing mode names."""
    if spec.cluster_only:
        return cluster_only_program(spec)
    mode = cluster_mode(spec.cluster)
    planned: list[EntryPlan] = []  # each entry's plan on the mode, in the entries' order
    entries = build_entries(spec.entries, partial(_entry_plan, spec, mode, planned))
    part = mode.plan_cluster(spec, entries, planned)
    program = ProgramPlan(
        spec.stack,
        entries[0].cfg,
        part.cluster,
        entries[0].plan,
        part.cluster_plan,
        [x for x in part.layers if x],
        entries=entries,
        spec=spec,
    )
    cluster_layers = len(program.other_layers)
    program = optional_layers(program)  # the platform reads observability's Prometheus URL
    return pod_security(image_prepullers(planned_layers(demand_layers(platform_layers(program, cluster_layers)))))


def image_prepullers(program: ProgramPlan) -> ProgramPlan:
    """Each entry's image pre-puller (stacks/serving/prepull.py), from its final DGD (overrides, the pools' GPU pins,
    pause), where the stack's cluster mode creates the cluster and so owns its GPU nodes (``ClusterMode.creates_cluster``):
    not on a cluster other teams' workloads may share."""
    if program.mode.creates_cluster:
        for e in program.entries:
            e.plan.image_prepuller = image_prepuller(e.plan.dgd)
    return program


# The optional layers in the one layer shape, in the order up creates them: (config section, planner). A planner takes
# the spec, the serving entries and the cluster mode (a stacks.modes.ClusterMode), and returns a LayerPlan or None
# (off). Adding a layer is one line here (docs/architecture.md "Adding an optional layer").
LAYER_PLANNERS: list[tuple[str, Callable[[ProgramSpec, list[Entry], ClusterMode], Optional[LayerPlan]]]] = [
    ("frontDoor", lambda spec, entries, mode: plan_front_door(spec.front_door, entries, mode, spec.stack)),
]


def planned_layers(program: ProgramPlan) -> ProgramPlan:
    """Every layer of ``LAYER_PLANNERS`` that the spec turns on, after the serving plans are final; the load balancer
    controller the mode installs with the cluster when the front door has a load balancer (``ClusterMode.plan_load_balancer``:
    on EKS the AWS Load Balancer Controller, stacks/cluster/load_balancer.py)."""
    controller = program.mode.plan_load_balancer(program.cluster_plan) if needs_load_balancer(program.spec.front_door) else None
    if controller:
        program.other_layers.append(controller)
    for _key, planner in LAYER_PLANNERS:
        layer = planner(program.spec, program.entries, program.mode)
        if layer is not None:
            program.layers.append(layer)
            program.other_layers.append(layer.describe())
    return program


def pod_security_version(cluster: ClusterConfig) -> str:
    """The ``-version`` of the Pod Security labels, the mode's ``pod_security_version``. On the EKS cluster this stack
    creates, the plan knows the control plane's minor (``cluster.kubernetesVersion``), and the labels pin it
    (``v1.35``). Elsewhere (``kubeconfig``, a cluster stack read only at ``up``, ``render``) the plan does not know the
    cluster's version, and ``latest`` (the checks of the API server's own release) is the only value valid on every
    cluster (https://kubernetes.io/docs/concepts/security/pod-security-admission: ``<version>`` is a Kubernetes minor
    such as ``v1.35``, or ``latest``)."""
    return cluster_mode(cluster).pod_security_version(cluster)


def pod_security(program: ProgramPlan) -> ProgramPlan:
    """Pod Security admission labels on every Namespace the program creates, once the plans are final (overrides,
    fabric profiles, the benchmark Job, the entries that share a namespace). A serving namespace enforces the least
    strict level that admits every pod placed there (stacks.serving.pod_security_level of each DGD component's pod
    template, each download Job's and the benchmark Job's): ``privileged`` where a worker adds IPC_LOCK, SYS_RESOURCE
    or SYS_PTRACE or runs privileged (a fabric profile), ``baseline`` where every pod fits baseline; several entries
    in one namespace get the union, on the Namespace of the entry that creates it. Warn and audit are ``restricted``
    everywhere. The observability and front door namespaces carry the labels their builders chose; here every
    Namespace gets the version (``pod_security_version``)."""
    version = pod_security_version(program.cluster)
    levels: dict[str, list[str]] = {}
    for e in program.entries:
        ns = e.plan.dgd["metadata"]["namespace"]
        levels.setdefault(ns, []).extend(pod_security_level(spec, ann) for _, spec, ann in plan_pods(e.plan))
    if program.benchmark is not None:
        tmpl = program.benchmark.job["spec"]["template"]
        levels.setdefault(program.benchmark.namespace, []).append(
            pod_security_level(tmpl["spec"], (tmpl.get("metadata") or {}).get("annotations"))
        )
    for e in program.entries:
        if e.plan.namespace is not None:
            md = e.plan.namespace["metadata"]
            md["labels"] = {**(md.get("labels") or {}), **pod_security_labels(least_strict(levels[md["name"]]))}
    for obj in program.objects():
        labels = (obj["metadata"].get("labels") or {}) if obj.get("kind") == "Namespace" else {}
        for key in [k for k in labels if k.startswith(PSS_PREFIX) and k.endswith("-version")]:
            labels[key] = version
    return program


def _entry_plan(spec: ProgramSpec, mode: ClusterMode, planned: list[EntryPlan], entry: ServeEntry) -> ServingPlan:
    """One entry's serving plan where the stack's cluster is (``ClusterMode.plan_entry``: a cluster stack's cluster,
    whose pools are checked at `up`; the EKS cluster this stack creates; or the plain serving objects), its plan on
    the mode kept in ``planned`` for ``ClusterMode.plan_cluster``."""
    # Behind the front door the clients are other teams': the frontend's admin API is off, and their nvext stays out
    # unless frontDoor.clientNvext lets it in (stacks.serving.set_frontend_env).
    door = {"behind_door": spec.front_door.enabled, "client_nvext": spec.front_door.client_nvext}
    planned.append(mode.plan_entry(spec, entry, door))
    return planned[-1].serving


def cluster_only_program(spec: ProgramSpec) -> ProgramPlan:
    """A cluster-only stack (``dynamo:serve: []``, a mode whose config allows it: ``cluster.mode: eks``): EKS with the
    ``gpuPools`` node groups, storage, device plugins and the platform (``ClusterMode.plan_cluster_only``); serving
    stacks reference it (``cluster.mode: stack``)."""
    mode = cluster_mode(spec.cluster)
    part = mode.plan_cluster_only(spec)
    program = ProgramPlan(
        spec.stack, None, part.cluster, None, part.cluster_plan, [x for x in part.layers if x], entries=[], spec=spec
    )
    return platform_layers(program, len(program.other_layers))


def platform_layers(program: ProgramPlan, at: int) -> ProgramPlan:
    """The platform layer where the stack's mode installs it (stacks/layers/platform.py), first in ``layers`` and in
    ``other_layers`` after the cluster's ``at`` lines: the device plugins (EKS always; an existing cluster with
    ``installDevicePlugins``: ``ClusterMode.installs_device_plugins``) and the Dynamo platform (EKS by default,
    ``installPlatform``: ``ClusterMode.installs_platform``; an empty component beside the device plugins when the
    cluster runs its own operator). The operator learns observability's Prometheus URL (Planner, autoscaling). On EKS
    the RuntimeClass ``nvidia`` selects the GPU node groups' ``nvidia.com/gpu.present=true`` (``labels_gpu_nodes``)."""
    cluster, mode = program.cluster, program.mode
    plugins, platform = mode.installs_device_plugins(cluster), mode.installs_platform(cluster)
    dra = getattr(program.cluster_plan, "dra_driver", False)
    if not (plugins or platform or dra):
        return program
    layers: list[LayerPlan] = []
    if plugins:
        # the config's nvidiaStack (kubeconfig, eks); a mode whose config has none installs no NVIDIA stack
        nvidia: Optional[str] = getattr(cluster, "nvidia_stack", None)
        layers.append(
            plan_device_plugins(
                program.device_plugin_fabrics(),
                nvidia,
                runtime_class_node_selector=GPU_PRESENT_LABELS if mode.labels_gpu_nodes else None,
            )
        )
    endpoint = program.observability.prometheus_endpoint if program.observability else None
    layers.append(plan_dynamo_platform(install=platform, prometheus_endpoint=endpoint))
    if dra:  # an EKS plan whose GPU pools span NVLink domains (GB200)
        layers.append(plan_dra_driver())
    program.layers[:0] = layers
    program.other_layers[at:at] = [p.describe() for p in layers if p.charts or p.objects]
    return program


def optional_layers(program: ProgramPlan) -> ProgramPlan:
    """The ``dynamo:observability`` and ``dynamo:benchmark`` layers, both off by default: each a typed plan
    (``ProgramPlan.observability``, ``ProgramPlan.benchmark``, which KEDA, the Pod Security levels and the follow
    commands read) and its LayerPlan in ``ProgramPlan.layers`` (stacks/layers/observability.py, benchmark.py), ahead of
    the ``LAYER_PLANNERS`` layers. They are planned here, with the serving plans, rather than in ``LAYER_PLANNERS``:
    ``benchmark.syntheticAcceptance`` changes the DGD, and autoscaling (``demand_layers``) queries observability's
    Prometheus. Render mode cannot install Helm charts, so there only the dashboards and monitors are registered
    (rendered). A ``dynamo:serve`` stack reads both from its top level (entries cannot set them): see
    ``serve_optional_layers``."""
    if program.multi:
        return serve_optional_layers(program)
    spec, cluster, serving = program.spec, program.cluster, program.serving
    assert serving is not None, "a single-target stack serves its target's plan"
    if spec.observability.enabled:
        obs = build_observability(
            spec.observability,
            serving_namespace=serving.dgd["metadata"]["namespace"],
            dgd_name=serving.dgd["metadata"]["name"],
            nvidia_stack=_our_nvidia_stack(cluster),
        )
        _place_observability(program, obs)
    if spec.benchmark.enabled:
        if spec.benchmark.synthetic_acceptance:  # the DGD that up creates serves what the published rows measured
            serving.dgd = synthetic_speculative_dgd(serving.dgd, serving.target)
        program.benchmark = build_benchmark(serving, spec.benchmark)
        program.layers.append(benchmark_layer(program.benchmark))
    return program


def _our_nvidia_stack(cluster: ClusterConfig) -> Optional[str]:
    """The NVIDIA stack this program installs (its DCGM exporter is scraped), or None."""
    if not cluster_mode(cluster).installs_device_plugins(cluster):  # installed with the device plugins
        return None
    assert isinstance(cluster, (KubeconfigCluster, EksCluster)), "only modes with nvidiaStack install device plugins"
    return cluster.nvidia_stack


def _alert_rules(program: ProgramPlan, obs: ObservabilityPlan) -> None:
    """The stack's PrometheusRule (stacks/observe/alerts.py): a group per DGD its PodMonitors scrape, each with the TTFT
    bound of the target it serves, and the GPU group where DCGM is scraped."""
    from stacks.observe.alerts import ServedGraph, prometheus_rule, ttft_bound

    cfg = program.spec.observability.alerts
    if not cfg.enabled:
        return
    if program.multi:
        served = {(e.plan.dgd["metadata"]["namespace"], e.name): e.plan.target for e in program.entries}
    else:
        serving = program.serving
        assert serving is not None, "a single-target stack serves its target's plan"
        md = serving.dgd["metadata"]
        served = {(md["namespace"], md["name"]): serving.target}
    graphs = []
    for m in obs.monitors:
        md = m["metadata"]
        if m["kind"] == "PodMonitor" and md["name"].endswith("-frontend"):
            name, ns = md["name"][: -len("-frontend")], md["namespace"]
            t = served.get((ns, name))
            p50 = t.perf.ttft_p50_ms if t is not None and t.perf is not None else None
            graphs.append(
                ServedGraph(name, ns, f"{ns}/{name}-frontend", f"{ns}/{name}-worker", ttft_bound(p50, cfg.ttft_p99_seconds))
            )
    obs.monitors.append(
        prometheus_rule(
            obs.namespace,
            obs.monitor_labels,
            graphs,
            gpus=obs.dcgm != "none",
            error_ratio=cfg.error_ratio,
            queued=cfg.queued_requests,
        )
    )


def _place_observability(program: ProgramPlan, obs: ObservabilityPlan) -> None:
    """The final observability plan (its alert rules; no charts nor Alertmanager warnings in render mode) as the
    program's typed plan and its LayerPlan."""
    _alert_rules(program, obs)
    if not program.mode.installs_charts:
        obs.charts = []  # a render provider cannot install Helm charts
        obs.warnings = []  # nor Alertmanager, which the warnings are about
    elif obs.charts:
        program.other_layers.append("observability charts (" + ", ".join(c.chart for c in obs.charts) + ")")
    program.observability = obs
    program.layers.append(observability_layer(obs))


def serve_optional_layers(program: ProgramPlan) -> ProgramPlan:
    """The stack-wide ``dynamo:observability`` of a ``dynamo:serve`` stack: one install (the charts, the
    observability namespace, the DCGM monitor, the GPU dashboard) and, per entry, the PodMonitors of its DGD
    (named by the entry, which is unique in the stack, so two entries serving one DGD name in two namespaces
    do not collide); the serving dashboard offers every serving namespace (a Grafana custom variable is a
    comma-separated list of values: https://grafana.com/docs/grafana/latest/variables/manage-variable).
    ``dynamo:benchmark`` is refused there: the AIPerf Job measures one frontend against one target's
    published row, and a ``dynamo:serve`` stack has several."""
    obs_cfg, bench_cfg = program.spec.observability, program.spec.benchmark
    if bench_cfg.enabled:
        raise ConfigError(
            f"{NS}:benchmark.enabled: True is not built for {NS}:serve stacks (entries: "
            f"{', '.join(e.name for e in program.entries)}): its AIPerf Job measures one target's frontend against that "
            f"target's published row; benchmark one target from a single-target stack (its {NS}:target and "
            f"{NS}:benchmark), or remove {NS}:benchmark here"
        )
    if not obs_cfg.enabled:
        return program
    first = program.entries[0]
    namespaces = list(dict.fromkeys(e.plan.dgd["metadata"]["namespace"] for e in program.entries))
    obs = build_observability(
        obs_cfg,
        serving_namespace=namespaces[0],
        dgd_name=first.plan.dgd["metadata"]["name"],
        nvidia_stack=_our_nvidia_stack(program.cluster),
    )
    if obs.namespace_object is not None and obs.namespace in namespaces:
        obs.namespace_object = None  # a serving entry creates it
    entry_monitors = []
    for e in program.entries:
        md = e.plan.dgd["metadata"]
        for m in dynamo_pod_monitors(md["namespace"], md["name"], obs.monitor_labels):
            m["metadata"]["name"] = e.name + m["metadata"]["name"][len(md["name"]) :]
            entry_monitors.append(m)
    first_monitors = dynamo_pod_monitors(namespaces[0], first.plan.dgd["metadata"]["name"], obs.monitor_labels)
    obs.monitors = entry_monitors + obs.monitors[len(first_monitors) :]
    for cm in obs.dashboards:
        for key, text in list(cm["data"].items()):
            board = json.loads(text)
            for var in board.get("templating", {}).get("list", []):
                if var.get("name") == "namespace" and var.get("type") == "custom":
                    var["query"] = ",".join(namespaces)
            cm["data"][key] = json.dumps(board, indent=1, sort_keys=True)
    _place_observability(program, obs)
    return program


def demand_layers(program: ProgramPlan) -> ProgramPlan:
    """Pause and autoscaling (stacks/serving/autoscaling.py): managed GPU node groups whose entries are all paused go to 0
    nodes (``ClusterMode.pause_pools``); autoscaled components get a KEDA ScaledObject on their DGDSA, querying the
    observability layer's Prometheus (paused at 0 replicas while their entry is paused), after their maxReplicas are
    checked against the pool: before any resource where the mode knows the pools (``ClusterMode.autoscaling_pools``: on
    EKS the pools this stack creates); on a cluster stack (``mode: stack``) its pools are an Output, checked at ``up``
    before any DGD (``ProgramPlan.autoscaling_shortfall``); on any other cluster no pool is known and only the DGD's own
    bounds apply (1 <= minReplicas <= maxReplicas <= 100). Where the mode installs charts, the stack gets one KEDA layer
    (stacks/layers/keda.py), which every ScaledObject waits for."""
    mode, cp = program.mode, program.cluster_plan
    mode.pause_pools(cp, program.entries)
    scaled = [e for e in program.entries if e.plan.autoscaling]
    if not scaled:
        return program
    # KEDA's components get a ScaledObject on the stack's Prometheus; the Planner's (via: planner) neither: the Planner
    # is a DGD component, and in its load-based mode it reads no Prometheus (stacks/serving/autoscaling.py).
    keda = [e for e in scaled if keda_specs(e.plan.autoscaling)]
    url = None
    if keda and program.observability is not None:
        url = program.observability.prometheus_endpoint
    elif keda:
        obs = program.spec.observability
        where = f"{NS}:autoscaling" if keda[0].key == NS else f"{keda[0].key}.autoscaling"
        if not obs.enabled:
            raise ConfigError(
                f"{where}: needs {NS}:observability.enabled: true (the Prometheus its "
                f"ScaledObjects query for {', '.join(sorted(keda_specs(keda[0].plan.autoscaling)))})"
            )
        url = obs.prometheus_endpoint or prometheus_url(obs.namespace)
    pools = mode.autoscaling_pools(program.cluster, cp)
    if pools is not None:
        check_bounds(program.entries, pools)
    for e in keda:
        assert url is not None  # set above whenever an entry scales with KEDA
        e.plan.autoscalers = [
            scaled_object(e.plan.dgd, name, spec, url, paused=bool(e.cfg.paused))
            for name, spec in keda_specs(e.plan.autoscaling).items()
        ]
    if keda and mode.installs_charts:  # one KEDA per stack, after the layers the graphs wait for
        layer = plan_keda()
        program.layers.insert(sum(1 for x in program.layers if x.gates == "graphs"), layer)
        program.other_layers.append(layer.describe())
    return program


# --------------------------------------------------------------------------- what `pulumi destroy` keeps
# The items and the report live in stacks/program/retained.py (the program logs them at destroy time too); re-exported here.
from stacks.program.retained import retained_after_destroy, retained_report  # noqa: E402,F401
