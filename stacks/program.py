"""The whole program as data: stack config in, every check done, the Kubernetes objects out.

``__main__.py`` (``pulumi up``) and ``python -m stacks render --stack`` both call
``build_program``, so they refuse the same configurations with the same message and
show the same objects: what ``render`` shows is what ``up`` creates. Nothing here
talks to a cluster or a cloud; the Pulumi components only wire the result.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from .config import NS, ConfigError, StackConfig, check_secret_keys, parse
from .serving import REDACTED
from .providers import ClusterConfig, cluster_config
from .serve import SERVE, Entry, build_entries
from .serving import ServingPlan, build_plan, select_target

# Secret keys the program reads (always through ``pulumi.Config.get_secret``), and where each is needed.
SECRET_KEYS = frozenset({"hfToken", "kubeconfig", "ngcApiKey", "imagePullSecret"})


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
    # Optional layers (None when off): stacks.observability.ObservabilityPlan, stacks.benchmark.BenchmarkPlan
    observability: Optional[Any] = None
    benchmark: Optional[Any] = None
    # One per serving entry (``dynamo:serve``); a single-target stack has one, keyed ``dynamo``.
    entries: list[Entry] = field(default_factory=list)

    @property
    def multi(self) -> bool:
        """A ``dynamo:serve`` stack (resources named by namespace and entry) rather than a single target."""
        return bool(self.entries) and self.entries[0].key != NS

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
        for obj in cp.notes.get("pull_secrets") or []:
            out.append({**obj, "stringData": {".dockerconfigjson": REDACTED}})
        if getattr(cp, "compute_domain", None):
            out.append(cp.compute_domain)
        return out

    def objects(self) -> list[dict]:
        """The Kubernetes objects ``up`` registers (secrets redacted): the cluster layer's objects in the
        serving namespaces, every entry's serving objects (those entries share appear once), the optional layers."""
        extra = (self.observability.objects() if self.observability else []) + ([self.benchmark.job] if self.benchmark else [])
        serving = [o for e in self.entries for o in e.plan.objects()] if self.entries or self.serving is None else self.serving.objects()
        return self.cluster_objects() + serving + extra


def kubeconfig_path(cluster: ClusterConfig, secret_keys: frozenset[str], env: Optional[dict[str, str]]) -> Optional[str]:
    """The kubeconfig file an existing-cluster stack uses (None: the secret ``dynamo:kubeconfig``).
    ``env=None`` (render, review): the file is not looked for, since it belongs to the machine
    that runs ``up`` (the local stack's kubeconfig exists only while the local control plane runs)."""
    if "kubeconfig" in secret_keys or env is None:
        return None
    path = cluster.kubeconfig_path or (env or {}).get("KUBECONFIG")
    if not path:
        raise ConfigError(
            f"{NS}:cluster.kubeconfigPath: cluster.mode is kubeconfig but none of {NS}:kubeconfig (secret), "
            f"{NS}:cluster.kubeconfigPath, KUBECONFIG is set"
        )
    first = os.path.expanduser(path.split(os.pathsep)[0])
    if not os.path.isfile(first):
        key = f"{NS}:cluster.kubeconfigPath" if cluster.kubeconfig_path else "KUBECONFIG"
        raise ConfigError(f"{key}: {path!r} is not a readable file; point it at a kubeconfig or set the secret {NS}:kubeconfig")
    return first


def check_plain_secrets(raw: dict[str, Any]) -> None:
    """Secret keys must be Pulumi secrets: a plain value is refused (its text is never repeated)."""
    for key in sorted(SECRET_KEYS & set(raw)):
        raise ConfigError(
            f"{NS}:{key}: is set in plain text; it must be a Pulumi secret: "
            f"`pulumi config rm {NS}:{key} && pulumi config set --secret {NS}:{key} <value>`"
        )


def check_secrets(secret_keys: frozenset[str], cfg: StackConfig, require_present: bool = True, single: bool = True) -> None:
    """The HF token Secret the serving objects name must be obtainable, one way only.
    ``require_present=False`` (render for review): committed stacks often leave the token to the
    environment that deploys them, so only its absence is not an error there. ``single``: in a
    ``dynamo:serve`` stack one namespace may use an existing Secret while another gets the token."""
    has_token = "hfToken" in secret_keys
    if single and cfg.hf_token_secret_name and has_token:
        raise ConfigError(
            f"{NS}:hfTokenSecretName: {cfg.hf_token_secret_name!r} together with the secret {NS}:hfToken; "
            f"set one: the token (the stack creates the Secret) or the name of an existing Secret"
        )
    if require_present and not cfg.hf_token_secret_name and not has_token:
        raise ConfigError(
            f"{NS}:hfToken is not set: run `pulumi config set --secret {NS}:hfToken <token>` "
            f"or set {NS}:hfTokenSecretName to an existing Secret with key HF_TOKEN"
        )


def check_unused_secrets(secret_keys: frozenset[str], program: "ProgramPlan") -> None:
    """A secret the stack never reads would be ignored silently, and two that fill the same Secret would leave one
    unused: refuse them (names only, never values). ``kubeconfig`` is read by ``cluster.mode: kubeconfig`` only;
    ``ngcApiKey``/``imagePullSecret`` only on a cluster this stack creates or reaches through a cluster stack (where it
    creates the ``imagePullSecrets``; one with no ``imagePullSecrets`` yet may keep the key for a later entry)."""
    pull = {"ngcApiKey", "imagePullSecret"} & secret_keys
    if len(pull) == 2:
        raise ConfigError(f"{NS}:ngcApiKey and {NS}:imagePullSecret: both are set, and both fill the same image pull "
                          f"Secret (one would be ignored); keep one: {NS}:ngcApiKey (nvcr.io) or {NS}:imagePullSecret "
                          f"(a whole .dockerconfigjson, any registry)")
    mode = program.cluster.mode
    if "kubeconfig" in secret_keys and mode != "kubeconfig":
        raise ConfigError(f"{NS}:kubeconfig: set as a secret, but cluster.mode is {mode!r}, which never reads it "
                          f"(only cluster.mode 'kubeconfig' does); remove it: `pulumi config rm {NS}:kubeconfig`")
    if pull and mode not in ("eks", "stack"):
        key = sorted(pull)[0]
        raise ConfigError(f"{NS}:{key}: set as a secret, but this stack never creates an image pull Secret (cluster.mode is "
                          f"{mode!r}: the cluster's own Secrets are named by {NS}:imagePullSecrets); remove it "
                          f"(`pulumi config rm {NS}:{key}`); only an EKS or cluster-stack stack creates pull Secrets from it")


def build_program(raw: dict[str, Any], stack: str, secret_keys: frozenset[str] = frozenset(),
                  env: Optional[dict[str, str]] = None, aws_region: Optional[str] = None,
                  secret_values: Optional[dict[str, Any]] = None) -> ProgramPlan:
    """Validate everything (serving keys of every entry, cluster keys, secrets) and build the objects.

    ``raw``: the plain ``dynamo:`` keys without the namespace; ``secret_keys``: the ``dynamo:``
    keys that are set as Pulumi secrets (their values are never needed here); ``env``: the
    environment of the ``up`` (None when rendering for review); ``aws_region``: the stack's ``aws:region``;
    ``secret_values``: the secrets' values where known (``up``: stacks.pulumi_config checks them the same way),
    checked for shape and never printed."""
    secret_keys = frozenset(secret_keys)
    if secret_values:
        from .config import check_secret_values

        check_secret_values(secret_values)
    if not isinstance(raw, dict):
        parse(raw)  # the ConfigError for a config that is not a mapping
    if aws_region:
        from .cluster import apply_aws_region

        raw = apply_aws_region(raw, aws_region)
    check_plain_secrets(raw)
    check_secret_keys(secret_keys)  # a secret the program never reads (a typo) would be ignored silently
    cluster = cluster_config(raw)
    if cluster.mode == "render" and not (cluster.render_dir or "").strip():
        raise ConfigError(
            f"{NS}:cluster.renderDir: {cluster.render_dir!r} is empty; a render stack writes manifests to a directory "
            f"and never talks to a cluster: set it (default 'rendered') or choose cluster.mode kubeconfig or eks"
        )
    if cluster.mode == "kubeconfig":
        kubeconfig_path(cluster, secret_keys, env)
    single, eks = SERVE not in raw, cluster.mode == "eks"
    if raw.get(SERVE) == [] and eks:
        program = cluster_only_program(raw, stack, cluster, aws_region)
        check_unused_secrets(secret_keys, program)
        return program
    configs: list[StackConfig] = []
    eks_plans: list[tuple] = []

    def build_one(entry_raw: dict[str, Any]) -> ServingPlan:
        cfg = parse(entry_raw)
        check_secrets(secret_keys, cfg, require_present=env is not None, single=single)
        configs.append(cfg)
        if cluster.mode == "stack":  # on a cluster stack's cluster: its pools are checked at `up` (StackReference)
            from .cluster import plan_on_cluster_stack

            ref_plan, serving = plan_on_cluster_stack(cfg, cluster, entry_raw, secret_keys, require_secrets=env is not None)
            eks_plans.append((cluster, ref_plan))
            return serving
        if not eks:
            return build_plan(cfg)
        from .cluster import plan_eks

        # Region, fabric, Secrets only this stack can create, serving objects with the instance's EFA per GPU, node
        # group sized from the final DGD, GB200 ComputeDomain claims, FSx claim binding (stacks/cluster.py).
        resolved, cluster_plan, serving = plan_eks(stack, cfg, cluster, entry_raw, secret_keys, aws_region=aws_region,
                                                   require_secrets=env is not None)
        eks_plans.append((resolved, cluster_plan))
        return serving

    entries = build_entries(raw, build_one)
    for entry, entry_cfg in zip(entries, configs):
        entry.cfg = entry_cfg
    cfg, serving, layers, cluster_plan = configs[0], entries[0].plan, [], None
    if eks:
        cluster = eks_plans[0][0]
        one_group = single and len(cluster.gpu_pools) <= 1  # more pools than the entry uses: build them all
        cluster_plan = eks_plans[0][1] if one_group else combined_cluster_plan(stack, cluster, entries, [cp for _, cp in eks_plans])
        storage = "StorageClass" if cluster_plan.storage_class else "PersistentVolume"
        layers = ["EKS cluster and node groups", f"model-cache file system and {storage}", "device plugins",
                  "NVIDIA DRA driver" if cluster_plan.dra_driver else "", _karpenter_layer(cluster_plan)]
    elif cluster.mode == "stack":
        from .cluster import combined_stack_plan

        cluster_plan = combined_stack_plan(cluster, entries, [cp for _, cp in eks_plans])
    elif cluster.mode == "kubeconfig" and cluster.install_device_plugins:
        layers.append("device plugins")
    if cluster.mode != "render" and cluster.platform_wanted():
        layers.append("Dynamo platform")
    program = ProgramPlan(stack, cfg, cluster, serving, cluster_plan, [x for x in layers if x], entries=entries)
    program = demand_layers(optional_layers(program, raw), raw)
    check_unused_secrets(secret_keys, program)
    return program


def _karpenter_layer(cluster_plan: Any) -> str:
    """The Karpenter install and its NodePools, when a GPU pool has capacity: karpenter (stacks/karpenter.py)."""
    kp = getattr(cluster_plan, "karpenter", None)
    return f"Karpenter {kp.helm.version} and NodePools {', '.join(p.name for p in kp.pools)}" if kp else ""


def combined_dgd(entries: list[Entry]) -> dict:
    """All entries' DGD components as one DGD, so the GPU node group is sized from the sum."""
    from .cluster import combined_dgd as combine

    return combine([(e.name, e.plan.dgd) for e in entries])


def combined_cluster_plan(stack: str, cluster, entries: list[Entry], plans: list) -> Any:
    """One EKS cluster for every entry: one GPU node group per GPU, each holding the sum of its entries' GPU and EFA
    requests (after replicas and overrides; stacks.cluster.build_pools_plan); pull secrets in every serving namespace."""
    from .cluster import build_pools_plan

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
        for obj in cp.notes.get("pull_secrets") or []:
            key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if key not in seen:
                seen.add(key)
                pulls.append(obj)
    merged.notes["pull_secrets"] = pulls
    return merged


def cluster_only_program(raw: dict[str, Any], stack: str, cluster: ClusterConfig, aws_region: Optional[str]) -> ProgramPlan:
    """A cluster-only stack (``dynamo:serve: []`` with ``cluster.mode: eks``): EKS with the ``gpuPools`` node groups,
    storage, device plugins and the platform; serving stacks reference it (``cluster.mode: stack``)."""
    from .cluster import build_cluster_only_plan, resolve_region
    from .serve import STACK_KEYS

    for key in sorted(raw):
        if key not in STACK_KEYS or key in ("observability", "benchmark"):
            raise ConfigError(f"{NS}:{key}: has no effect in a cluster-only stack ({NS}:serve: []), which serves nothing; "
                              f"set it on a serving stack (cluster.mode: stack) or add entries to {NS}:serve")
    cluster = resolve_region(cluster, raw.get("cluster") or {}, aws_region)
    plan = build_cluster_only_plan(stack, cluster)
    storage = "StorageClass" if plan.storage_class else "PersistentVolume"
    layers = ["EKS cluster and node groups", f"model-cache file system and {storage}", "device plugins",
              "NVIDIA DRA driver" if plan.dra_driver else "", _karpenter_layer(plan), "Dynamo platform" if cluster.platform_wanted() else ""]
    return ProgramPlan(stack, None, cluster, None, plan, [x for x in layers if x], entries=[])


def optional_layers(program: ProgramPlan, raw: Optional[dict[str, Any]] = None) -> ProgramPlan:
    """``dynamo:observability`` and ``dynamo:benchmark`` plans, both off by default. Render mode
    cannot install Helm charts, so there only the dashboards and monitors are registered (rendered).
    A ``dynamo:serve`` stack (``raw`` given) reads both from its top level (entries cannot set them):
    see ``serve_optional_layers``."""
    if program.multi:
        return serve_optional_layers(program, raw or {})
    cfg, cluster, serving = program.cfg, program.cluster, program.serving
    if cfg.observability.enabled:
        from .observability import build_observability

        obs = build_observability(cfg.observability, serving_namespace=serving.dgd["metadata"]["namespace"],
                                  dgd_name=serving.dgd["metadata"]["name"], nvidia_stack=_our_nvidia_stack(cluster))
        _place_observability(program, obs)
    if cfg.benchmark.enabled:
        from .benchmark import build_benchmark, synthetic_speculative_dgd

        if cfg.benchmark.synthetic_acceptance:  # the DGD that up creates serves what the published rows measured
            serving.dgd = synthetic_speculative_dgd(serving.dgd, serving.target)
        program.benchmark = build_benchmark(serving, cfg.benchmark)
    return program


def _our_nvidia_stack(cluster: ClusterConfig) -> Optional[str]:
    """The NVIDIA stack this program installs (its DCGM exporter is scraped), or None."""
    ours = cluster.mode == "eks" or (cluster.mode == "kubeconfig" and cluster.install_device_plugins)
    return cluster.nvidia_stack if ours else None


def _place_observability(program: ProgramPlan, obs: Any) -> None:
    if program.cluster.mode == "render":
        obs.charts = []  # a render provider cannot install Helm charts
    elif obs.charts:
        program.other_layers.append("observability charts (" + ", ".join(c.chart for c in obs.charts) + ")")
    program.observability = obs


def _stack_section(model: Any, raw: dict[str, Any], key: str) -> Any:
    """A stack-wide section of a ``dynamo:serve`` stack, validated like a single-target stack's."""
    from pydantic import ValidationError

    from .config import validation_error

    try:
        return model.model_validate(raw.get(key) or {})
    except ValidationError as e:
        raise validation_error(e, (key,), model) from None


def serve_optional_layers(program: ProgramPlan, raw: dict[str, Any]) -> ProgramPlan:
    """The stack-wide ``dynamo:observability`` of a ``dynamo:serve`` stack: one install (the charts, the
    observability namespace, the DCGM monitor, the GPU dashboard) and, per entry, the PodMonitors of its DGD
    (named by the entry, which is unique in the stack, so two entries serving one DGD name in two namespaces
    do not collide); the serving dashboard offers every serving namespace (a Grafana custom variable is a
    comma-separated list of values: https://grafana.com/docs/grafana/latest/variables/manage-variable).
    ``dynamo:benchmark`` is refused there: the AIPerf Job measures one frontend against one target's
    published row, and a ``dynamo:serve`` stack has several."""
    from .config import BenchmarkConfig, ObservabilityConfig

    obs_cfg = _stack_section(ObservabilityConfig, raw, "observability")
    bench_cfg = _stack_section(BenchmarkConfig, raw, "benchmark")
    if bench_cfg.enabled:
        raise ConfigError(
            f"{NS}:benchmark.enabled: True is not built for {NS}:serve stacks (entries: "
            f"{', '.join(e.name for e in program.entries)}): its AIPerf Job measures one target's frontend against that "
            f"target's published row; benchmark one target from a single-target stack (its {NS}:target and "
            f"{NS}:benchmark), or remove {NS}:benchmark here")
    if not obs_cfg.enabled:
        return program
    import json

    from .observability import build_observability, dynamo_pod_monitors

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


def demand_layers(program: ProgramPlan, raw: dict[str, Any]) -> ProgramPlan:
    """Pause and autoscaling (stacks/autoscaling.py): managed GPU node groups whose entries are all paused go to 0
    nodes; autoscaled components get a KEDA ScaledObject on their DGDSA, querying the observability layer's
    Prometheus, after their maxReplicas are checked against the pool (before any resource)."""
    from .autoscaling import PoolUse, check_bounds, keda_chart, pause_pools, scaled_object

    cp = program.cluster_plan
    if program.cluster.mode == "eks" and cp is not None:
        pause_pools(cp, program.entries)
    scaled = [e for e in program.entries if e.plan.notes.get("autoscaling")]
    if not scaled:
        return program
    if program.observability is not None:
        url = program.observability.prometheus_endpoint
    else:
        from .config import ObservabilityConfig
        from .observability import prometheus_url

        try:
            obs = ObservabilityConfig.model_validate(raw.get("observability") or {})
        except Exception:  # stacks.config.parse has reported it already for a single-target stack
            obs = ObservabilityConfig()
        where = f"{NS}:autoscaling" if scaled[0].key == NS else f"{scaled[0].key}.autoscaling"
        if not obs.enabled:
            raise ConfigError(f"{where}: needs {NS}:observability.enabled: true (the Prometheus its "
                              f"ScaledObjects query for {', '.join(sorted(scaled[0].plan.notes['autoscaling']))})")
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
    for e in scaled:
        e.plan.autoscalers = [scaled_object(e.plan.dgd, name, spec, url) for name, spec in e.plan.notes["autoscaling"].items()]
    if program.cluster.mode != "render":
        scaled[0].plan.notes["keda"] = keda_chart()
        program.other_layers.append("KEDA chart (autoscaling)")
    return program


def _pool_key(program: ProgramPlan, index: int, key: str = "nodes") -> str:
    """Where pool ``index``'s node count (``nodes``) or node limit (``maxNodes``) is configured."""
    if program.cluster.gpu_pools:
        return f"{NS}:cluster.gpuPools[{index}].{key}"
    return f"{NS}:cluster.{'gpuNodes' if key == 'nodes' else key}"


# --------------------------------------------------------------------------- what `pulumi destroy` keeps
# The items and the report live in stacks/retained.py (the program logs them at destroy time too); re-exported here.
from .retained import retained_after_destroy, retained_report  # noqa: E402,F401
