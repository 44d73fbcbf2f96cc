"""The program: spec -> every plan of a stack, for `pulumi up` and `render --stack`. May import every layer below it;
nothing below imports it.

The whole program as data: the parsed spec in, every plan out (Kubernetes and AWS objects as dicts).

``build_program`` is the one function ``__main__.py`` (``pulumi up``) and ``python -m stacks render --stack`` call:
``stacks.config.parse_spec`` checks the whole config once, then ``plan_program`` builds the plans from that spec
only, so both paths refuse the same configurations with the same message and show the same objects: what
``render`` shows is what ``up`` creates. Nothing here talks to a cluster or a cloud; the Pulumi components only
wire the result.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Optional

from stacks.serving.autoscaling import PoolUse, check_bounds, cluster_stack_pools, keda_chart, keda_specs, pause_pools, scaled_object
from stacks.serving.benchmark import build_benchmark, synthetic_speculative_dgd
from stacks.cluster.load_balancer import plan_load_balancer_controller
from stacks.cluster.platform import fabrics_objects
from stacks.cluster import build_cluster_only_plan, build_pools_plan, combined_stack_plan, plan_eks, plan_on_cluster_stack
from stacks.config.keys import NS, ConfigError, StackConfig
from stacks.observe.observability import build_observability, dynamo_pod_monitors, prometheus_url
from stacks.layers import LayerPlan
from stacks.layers.front_door import needs_load_balancer, plan_front_door
from stacks.serving.serve import Entry, build_entries
from stacks.serving import (PSS_PREFIX, REDACTED, ServingPlan, build_plan, least_strict, plan_pods, pod_security_labels,
                            pod_security_level)
from stacks.config import ClusterConfig, ProgramSpec, ServeEntry, kubeconfig_path, parse_spec  # noqa: F401  (kubeconfig_path: re-export)


@dataclass
class ProgramPlan:
    """What one ``pulumi up`` of a stack creates, before any resource exists."""

    stack: str
    cfg: Optional[StackConfig]  # None: a cluster-only stack (``dynamo:serve: []``)
    cluster: ClusterConfig
    serving: Optional[ServingPlan]
    # stacks.cluster.ClusterPlan for mode: eks; stacks.cluster.ClusterStackPlan for mode: stack
    cluster_plan: Optional[Any] = None
    # Layers ``up`` creates besides the serving objects (render --stack shows the serving layer only).
    other_layers: list[str] = field(default_factory=list)
    # Optional layers (None when off): stacks.observe.observability.ObservabilityPlan, stacks.serving.benchmark.BenchmarkPlan
    observability: Optional[Any] = None
    benchmark: Optional[Any] = None
    # One per serving entry (``dynamo:serve``); a single-target stack has one, keyed ``dynamo``.
    entries: list[Entry] = field(default_factory=list)
    spec: Optional[ProgramSpec] = None  # what the plans were built from
    # The optional layers in the one layer shape (stacks/layers): each a LayerPlan, wired by components/layer.py.
    layers: list[LayerPlan] = field(default_factory=list)

    @property
    def multi(self) -> bool:
        """A ``dynamo:serve`` stack (resources named by namespace and entry) rather than a single target."""
        return bool(self.entries) and self.entries[0].key != NS

    def device_plugin_fabrics(self) -> list[str]:
        """The fabrics whose device plugins the platform layer installs: on EKS the cluster's (EFA or none); on an
        existing cluster with ``installDevicePlugins`` every entry's (its ``fabricProfile``, else its target's), each
        once, so a stack serving an InfiniBand and an EFA target installs both plugins."""
        if self.cluster.mode == "eks":
            return ["aws-efa" if self.cluster_plan.efa else "none"]
        return list(dict.fromkeys(e.cfg.fabric_profile or e.plan.target.fabric for e in self.entries))

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
        """``cluster.mode: stack``: the autoscaling bounds against the cluster stack's pools, which the program knows only
        as its StackReference's ``nodePools`` Output (components/cluster_source.py checks it in the Output's apply,
        before any DGD). The message ``check_bounds`` gives on EKS (key, value, valid range), or None when they fit
        (or nothing is autoscaled, or the pools are not a list: ``capacity_shortfall`` reports that)."""
        if self.cluster.mode != "stack" or not isinstance(node_pools, list) or not all(isinstance(p, dict) for p in node_pools):
            return None
        try:
            check_bounds(self.entries, cluster_stack_pools(node_pools, self.cluster.stack))
        except ConfigError as e:
            return str(e)
        return None

    def objects(self) -> list[dict]:
        """The Kubernetes objects ``up`` registers (secrets redacted): the cluster layer's objects in the
        serving namespaces, every entry's serving objects (those entries share appear once), the optional layers."""
        extra = (self.observability.objects() if self.observability else []) + ([self.benchmark.job] if self.benchmark else [])
        serving = [o for e in self.entries for o in e.plan.objects()] if self.entries or self.serving is None else self.serving.objects()
        return self.cluster_objects() + serving + extra + [o for layer in self.layers for o in layer.objects]

    def layer_outputs(self) -> dict[str, Any]:
        """Every layer's stack outputs (e.g. frontDoorUrl, frontDoorSmokeTest)."""
        return {k: v for layer in self.layers for k, v in layer.outputs.items()}


def build_program(raw: dict[str, Any], stack: str, secret_keys: frozenset[str] = frozenset(),
                  env: Optional[dict[str, str]] = None, aws_region: Optional[str] = None,
                  secret_values: Optional[dict[str, Any]] = None) -> ProgramPlan:
    """Parse the stack config once (``stacks.config.parse_spec``: every key, the secrets' names and, where known,
    their values' shape) and plan from the result. Arguments as ``parse_spec`` takes them."""
    return plan_program(parse_spec(raw, stack, secret_keys, env=env, aws_region=aws_region, secret_values=secret_values))


def plan_program(spec: ProgramSpec) -> ProgramPlan:
    """Every plan of one stack, from its spec: the serving objects of each entry (on EKS sized and placed for the
    cluster's instances), the cluster's plan, the optional layers, pause and autoscaling."""
    if spec.cluster_only:
        return cluster_only_program(spec)
    cluster, mode = spec.cluster, spec.cluster.mode
    per_entry: list[tuple] = []  # (cluster, its plan for the entry): eks ClusterPlan, stack ClusterStackPlan
    entries = build_entries(spec.entries, partial(_entry_plan, spec, per_entry))
    cfg, serving, layers, cluster_plan = entries[0].cfg, entries[0].plan, [], None
    if mode == "eks":
        cluster = per_entry[0][0]  # may carry the region from aws:region
        one_group = spec.single and len(cluster.gpu_pools) <= 1  # more pools than the entry uses: build them all
        cluster_plan = per_entry[0][1] if one_group else combined_cluster_plan(spec.stack, cluster, entries, [cp for _, cp in per_entry])
        layers = _eks_layers(cluster_plan)
    elif mode == "stack":
        cluster_plan = combined_stack_plan(cluster, entries, [cp for _, cp in per_entry])
    elif mode == "kubeconfig" and cluster.install_device_plugins:
        layers.append("device plugins")
        fabrics = list(dict.fromkeys(e.cfg.fabric_profile or e.plan.target.fabric for e in entries))
        try:
            fabrics_objects(fabrics)
        except ValueError as err:
            raise ConfigError(f"{NS}:cluster.installDevicePlugins: {err} (entries: "
                              f"{', '.join(f'{e.key} on {e.cfg.fabric_profile or e.plan.target.fabric}' for e in entries)}); "
                              f"serve them from separate clusters, or install the plugins yourself (installDevicePlugins: false)") from None
    if mode != "render" and cluster.platform_wanted():
        layers.append("Dynamo platform")
    program = ProgramPlan(spec.stack, cfg, cluster, serving, cluster_plan, [x for x in layers if x], entries=entries, spec=spec)
    return pod_security(planned_layers(demand_layers(optional_layers(program))))


# The optional layers in the one layer shape, in the order up creates them: (config section, planner). A planner takes
# the spec, the serving entries and the cluster mode, and returns a LayerPlan or None (off). Adding a layer is one line
# here (docs/architecture.md "Adding an optional layer").
LAYER_PLANNERS: list[tuple[str, Callable[[ProgramSpec, list[Entry], str], Optional[LayerPlan]]]] = [
    ("frontDoor", lambda spec, entries, mode: plan_front_door(spec.front_door, entries, mode, spec.stack)),
]


def planned_layers(program: ProgramPlan) -> ProgramPlan:
    """Every layer of ``LAYER_PLANNERS`` that the spec turns on, after the serving plans are final; on EKS, the AWS Load
    Balancer Controller with the cluster when the front door has a load balancer (stacks/cluster/load_balancer.py)."""
    if needs_load_balancer(program.spec.front_door) and program.cluster.mode == "eks":
        cp = program.cluster_plan
        cp.load_balancer_controller = plan_load_balancer_controller(cp.name, cp.region)
        program.other_layers.append(f"AWS Load Balancer Controller {cp.load_balancer_controller.helm.version} (front door NLB)")
    for _key, planner in LAYER_PLANNERS:
        layer = planner(program.spec, program.entries, program.cluster.mode)
        if layer is not None:
            program.layers.append(layer)
            program.other_layers.append(layer.describe())
    return program


def pod_security_version(cluster: ClusterConfig) -> str:
    """The ``-version`` of the Pod Security labels. On the EKS cluster this stack creates, the plan knows the control
    plane's minor (``cluster.kubernetesVersion``), and the labels pin it (``v1.35``): the checks are those of the
    Kubernetes release the stack was planned for, so a control plane upgraded out of band (whose admission may check
    more at ``latest``) cannot start refusing the workers before the plan moves the pin with ``kubernetesVersion`` in
    the same ``up``. Elsewhere (``kubeconfig``, a cluster stack read only at ``up``, ``render``) the plan does not
    know the cluster's version, and ``latest`` (the checks of the API server's own release) is the only value valid on
    every cluster (https://kubernetes.io/docs/concepts/security/pod-security-admission: ``<version>`` is a Kubernetes
    minor such as ``v1.35``, or ``latest``)."""
    if cluster.mode == "eks" and getattr(cluster, "kubernetes_version", None):
        return f"v{cluster.kubernetes_version}"
    return "latest"


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
            pod_security_level(tmpl["spec"], (tmpl.get("metadata") or {}).get("annotations")))
    for e in program.entries:
        if e.plan.namespace is not None:
            md = e.plan.namespace["metadata"]
            md["labels"] = {**(md.get("labels") or {}), **pod_security_labels(least_strict(levels[md["name"]]))}
    for obj in program.objects():
        labels = (obj["metadata"].get("labels") or {}) if obj.get("kind") == "Namespace" else {}
        for key in [k for k in labels if k.startswith(PSS_PREFIX) and k.endswith("-version")]:
            labels[key] = version
    return program


def _entry_plan(spec: ProgramSpec, per_entry: list, entry: ServeEntry) -> ServingPlan:
    """One entry's serving plan where the stack's cluster is: a cluster stack's cluster (its pools are checked at
    `up`, StackReference), the EKS cluster this stack creates (region, fabric, Secrets only this stack can create,
    EFA per GPU of the instance, node group sized from the final DGD, GB200 ComputeDomain claims, FSx claim
    binding: stacks/cluster/plan.py plan_eks), or any other cluster (the plain serving objects)."""
    cfg, cluster = entry.config, spec.cluster
    # Behind the front door the clients are other teams': the frontend's admin API is off, and their nvext stays out
    # unless frontDoor.clientNvext lets it in (stacks.serving.set_frontend_env).
    door = {"behind_door": spec.front_door.enabled, "client_nvext": spec.front_door.client_nvext}
    if cluster.mode == "stack":
        ref_plan, serving = plan_on_cluster_stack(cfg, cluster, entry.raw, spec.secret_keys, require_secrets=spec.require_secrets,
                                                  door=door)
        per_entry.append((cluster, ref_plan))
        return serving
    if cluster.mode == "eks":
        resolved, cluster_plan, serving = plan_eks(spec.stack, cfg, cluster, entry.raw, spec.secret_keys, aws_region=spec.aws_region,
                                                   require_secrets=spec.require_secrets, door=door)
        per_entry.append((resolved, cluster_plan))
        return serving
    return build_plan(cfg, **door)


def _eks_layers(plan: Any) -> list[str]:
    storage = "StorageClass" if plan.storage_class else "PersistentVolume"
    return ["EKS cluster and node groups", f"model-cache file system and {storage}", "device plugins",
            "NVIDIA DRA driver" if plan.dra_driver else "", _karpenter_layer(plan)]


def _karpenter_layer(cluster_plan: Any) -> str:
    """The Karpenter install and its NodePools, when a GPU pool has capacity: karpenter (stacks/cluster/karpenter.py)."""
    kp = getattr(cluster_plan, "karpenter", None)
    return f"Karpenter {kp.helm.version} and NodePools {', '.join(p.name for p in kp.pools)}" if kp else ""


def combined_cluster_plan(stack: str, cluster, entries: list[Entry], plans: list) -> Any:
    """One EKS cluster for every entry: one GPU node group per GPU, each holding the sum of its entries' GPU and EFA
    requests (after replicas and overrides; stacks.cluster.build_pools_plan); pull secrets in every serving namespace."""
    for e, cp in zip(entries, plans):
        if cp.compute_domain:
            raise ConfigError(f"{e.key}: {e.plan.target.id} spans GPU nodes of one NVLink domain (a ComputeDomain); "
                              f"serve it from a stack of its own")
    owners = [e for e in entries if e.plan.cache_pvc is not None]
    if plans[0].static_pv and len(owners) > 1:
        raise ConfigError(f"{owners[1].key}: FSx for Lustre binds the stack's file system to one cache claim; entries with "
                          f"different checkpoints need {NS}:cluster.cacheStorage: efs")
    groups: dict[str, tuple] = {}
    for e, cp in zip(entries, plans):
        groups.setdefault(e.plan.target.gpu, (e.plan.target.gpu, [], cp.gpu_nodegroup["taints"][0]))[1].append((e.key, e.name, e.plan.dgd))
    merged = build_pools_plan(stack, cluster, list(groups.values()), protect_cache=all(e.cfg.storage.protect for e in entries))
    # no entry's workers span nodes (checked above); the sum spanning nodes needs no ComputeDomain
    if merged.static_pv and owners:
        merged.static_pv["spec"]["claimRef"] = {"namespace": owners[0].plan.dgd["metadata"]["namespace"], "name": owners[0].plan.claim_name}
    seen, pulls = set(), []
    for cp in plans:
        for obj in cp.pull_secrets:
            key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if key not in seen:
                seen.add(key)
                pulls.append(obj)
    merged.pull_secrets = pulls
    return merged


def cluster_only_program(spec: ProgramSpec) -> ProgramPlan:
    """A cluster-only stack (``dynamo:serve: []`` with ``cluster.mode: eks``): EKS with the ``gpuPools`` node groups,
    storage, device plugins and the platform; serving stacks reference it (``cluster.mode: stack``)."""
    plan = build_cluster_only_plan(spec.stack, spec.cluster)
    layers = _eks_layers(plan) + ["Dynamo platform" if spec.cluster.platform_wanted() else ""]
    return ProgramPlan(spec.stack, None, spec.cluster, None, plan, [x for x in layers if x], entries=[], spec=spec)


def optional_layers(program: ProgramPlan) -> ProgramPlan:
    """``dynamo:observability`` and ``dynamo:benchmark`` plans, both off by default. Render mode
    cannot install Helm charts, so there only the dashboards and monitors are registered (rendered).
    A ``dynamo:serve`` stack reads both from its top level (entries cannot set them): see ``serve_optional_layers``."""
    if program.multi:
        return serve_optional_layers(program)
    spec, cluster, serving = program.spec, program.cluster, program.serving
    if spec.observability.enabled:
        obs = build_observability(spec.observability, serving_namespace=serving.dgd["metadata"]["namespace"],
                                  dgd_name=serving.dgd["metadata"]["name"], nvidia_stack=_our_nvidia_stack(cluster))
        _place_observability(program, obs)
    if spec.benchmark.enabled:
        if spec.benchmark.synthetic_acceptance:  # the DGD that up creates serves what the published rows measured
            serving.dgd = synthetic_speculative_dgd(serving.dgd, serving.target)
        program.benchmark = build_benchmark(serving, spec.benchmark)
    return program


def _our_nvidia_stack(cluster: ClusterConfig) -> Optional[str]:
    """The NVIDIA stack this program installs (its DCGM exporter is scraped), or None."""
    ours = cluster.mode == "eks" or (cluster.mode == "kubeconfig" and cluster.install_device_plugins)
    return cluster.nvidia_stack if ours else None


def _alert_rules(program: ProgramPlan, obs: Any) -> None:
    """The stack's PrometheusRule (stacks/observe/alerts.py): a group per DGD its PodMonitors scrape, each with the TTFT
    bound of the target it serves, and the GPU group where DCGM is scraped."""
    from stacks.observe.alerts import ServedGraph, prometheus_rule, ttft_bound

    cfg = program.spec.observability.alerts
    if not cfg.enabled:
        return
    if program.multi:
        served = {(e.plan.dgd["metadata"]["namespace"], e.name): e.plan.target for e in program.entries}
    else:
        md = program.serving.dgd["metadata"]
        served = {(md["namespace"], md["name"]): program.serving.target}
    graphs = []
    for m in obs.monitors:
        md = m["metadata"]
        if m["kind"] == "PodMonitor" and md["name"].endswith("-frontend"):
            name, ns = md["name"][: -len("-frontend")], md["namespace"]
            t = served.get((ns, name))
            p50 = t.perf.ttft_p50_ms if t is not None and t.perf is not None else None
            graphs.append(ServedGraph(name, ns, f"{ns}/{name}-frontend", f"{ns}/{name}-worker", ttft_bound(p50, cfg.ttft_p99_seconds)))
    obs.monitors.append(prometheus_rule(obs.namespace, obs.monitor_labels, graphs, gpus=obs.dcgm != "none",
                                        error_ratio=cfg.error_ratio, queued=cfg.queued_requests))


def _place_observability(program: ProgramPlan, obs: Any) -> None:
    _alert_rules(program, obs)
    if program.cluster.mode == "render":
        obs.charts = []  # a render provider cannot install Helm charts
        obs.warnings = []  # nor Alertmanager, which the warnings are about
    elif obs.charts:
        program.other_layers.append("observability charts (" + ", ".join(c.chart for c in obs.charts) + ")")
    program.observability = obs


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
            f"{NS}:benchmark), or remove {NS}:benchmark here")
    if not obs_cfg.enabled:
        return program
    first = program.entries[0]
    namespaces = list(dict.fromkeys(e.plan.dgd["metadata"]["namespace"] for e in program.entries))
    obs = build_observability(obs_cfg, serving_namespace=namespaces[0], dgd_name=first.plan.dgd["metadata"]["name"],
                              nvidia_stack=_our_nvidia_stack(program.cluster))
    if obs.namespace_object is not None and obs.namespace in namespaces:
        obs.namespace_object = None  # a serving entry creates it
    entry_monitors = []
    for e in program.entries:
        md = e.plan.dgd["metadata"]
        for m in dynamo_pod_monitors(md["namespace"], md["name"], obs.monitor_labels):
            m["metadata"]["name"] = e.name + m["metadata"]["name"][len(md["name"]):]
            entry_monitors.append(m)
    first_monitors = dynamo_pod_monitors(namespaces[0], first.plan.dgd["metadata"]["name"], obs.monitor_labels)
    obs.monitors = entry_monitors + obs.monitors[len(first_monitors):]
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
    nodes; autoscaled components get a KEDA ScaledObject on their DGDSA, querying the observability layer's
    Prometheus (paused at 0 replicas while their entry is paused), after their maxReplicas are checked against the pool:
    before any resource on EKS (the pools this stack creates); on a cluster stack (``mode: stack``) its pools are an
    Output, checked at ``up`` before any DGD (``ProgramPlan.autoscaling_shortfall``); on any other cluster no pool is
    known and only the DGD's own bounds apply (1 <= minReplicas <= maxReplicas <= 100)."""
    cp = program.cluster_plan
    if program.cluster.mode == "eks" and cp is not None:
        pause_pools(cp, program.entries)
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
            raise ConfigError(f"{where}: needs {NS}:observability.enabled: true (the Prometheus its "
                              f"ScaledObjects query for {', '.join(sorted(keda_specs(keda[0].plan.autoscaling)))})")
        url = obs.prometheus_endpoint or prometheus_url(obs.namespace)
    if program.cluster.mode == "eks" and cp is not None:
        pools = {}
        for i, p in enumerate(cp.gpu_pools):
            if getattr(p, "capacity", "node-group") == "karpenter":  # the NodePool's node (and GPU) limit
                n = int(p.karpenter["max_nodes"])
                pools[p.gpu] = PoolUse(p.gpu, _pool_key(program, i, "maxNodes"), n * p.shape.gpus_per_node,
                                       f"NodePool limit {n} x {p.shape.instance_type}", n, p.node_shape.capacity)
            elif (p.nodegroup or {}).get("scaling_config"):
                n = int(p.nodegroup["scaling_config"]["max_size"])
                pools[p.gpu] = PoolUse(p.gpu, _pool_key(program, i), n * p.shape.gpus_per_node, f"{n} x {p.shape.instance_type}",
                                       n, p.node_shape.capacity)
        check_bounds(program.entries, pools)
    for e in keda:
        e.plan.autoscalers = [scaled_object(e.plan.dgd, name, spec, url, paused=bool(e.cfg.paused))
                              for name, spec in keda_specs(e.plan.autoscaling).items()]
    if keda and program.cluster.mode != "render":
        keda[0].plan.keda = keda_chart()
        program.other_layers.append("KEDA chart (autoscaling)")
    return program


def _pool_key(program: ProgramPlan, index: int, key: str = "nodes") -> str:
    """Where pool ``index``'s node count (``nodes``) or node limit (``maxNodes``) is configured."""
    if program.cluster.gpu_pools:
        return f"{NS}:cluster.gpuPools[{index}].{key}"
    return f"{NS}:cluster.{'gpuNodes' if key == 'nodes' else key}"


# --------------------------------------------------------------------------- what `pulumi destroy` keeps
# The items and the report live in stacks/program/retained.py (the program logs them at destroy time too); re-exported here.
from stacks.program.retained import retained_after_destroy, retained_report  # noqa: E402,F401
