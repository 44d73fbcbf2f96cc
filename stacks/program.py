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

from .config import NS, ConfigError, StackConfig, parse
from .providers import ClusterConfig, cluster_config
from .serving import ServingPlan, build_plan, select_target

# Secret keys the program reads (always through ``pulumi.Config.get_secret``), and where each is needed.
SECRET_KEYS = frozenset({"hfToken", "kubeconfig", "ngcApiKey", "imagePullSecret"})


@dataclass
class ProgramPlan:
    """What one ``pulumi up`` of a stack creates, before any resource exists."""

    stack: str
    cfg: StackConfig
    cluster: ClusterConfig
    serving: ServingPlan
    cluster_plan: Optional[Any] = None  # stacks.cluster.ClusterPlan for mode: eks
    # Layers ``up`` creates besides the serving objects (render --stack shows the serving layer only).
    other_layers: list[str] = field(default_factory=list)
    # issue 13: optional layers (None when off): stacks.observability.ObservabilityPlan, stacks.benchmark.BenchmarkPlan
    observability: Optional[Any] = None
    benchmark: Optional[Any] = None

    def objects(self) -> list[dict]:
        """The serving-layer Kubernetes objects, secrets redacted, exactly as ``up`` registers them."""
        extra = (self.observability.objects() if self.observability else []) + ([self.benchmark.job] if self.benchmark else [])
        return self.serving.objects() + extra


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


def check_secrets(raw: dict[str, Any], secret_keys: frozenset[str], cfg: StackConfig, cluster: ClusterConfig,
                  require_present: bool = True) -> None:
    """Secret keys must be Pulumi secrets, and the Secrets the serving objects name must be obtainable.
    ``require_present=False`` (render for review): committed stacks often leave the token to the
    environment that deploys them, so only its absence is not an error there."""
    for key in sorted(SECRET_KEYS & set(raw)):
        raise ConfigError(
            f"{NS}:{key}: is set in plain text; it must be a Pulumi secret: "
            f"`pulumi config rm {NS}:{key} && pulumi config set --secret {NS}:{key} <value>`"
        )
    has_token = "hfToken" in secret_keys
    if cfg.hf_token_secret_name and has_token:
        raise ConfigError(
            f"{NS}:hfTokenSecretName: {cfg.hf_token_secret_name!r} together with the secret {NS}:hfToken; "
            f"set one: the token (the stack creates the Secret) or the name of an existing Secret"
        )
    if require_present and not cfg.hf_token_secret_name and not has_token:
        raise ConfigError(
            f"{NS}:hfToken is not set: run `pulumi config set --secret {NS}:hfToken <token>` "
            f"or set {NS}:hfTokenSecretName to an existing Secret with key HF_TOKEN"
        )


def build_program(raw: dict[str, Any], stack: str, secret_keys: frozenset[str] = frozenset(),
                  env: Optional[dict[str, str]] = None, aws_region: Optional[str] = None) -> ProgramPlan:
    """Validate everything (serving keys, cluster keys, secrets) and build the objects.

    ``raw``: the plain ``dynamo:`` keys without the namespace; ``secret_keys``: the ``dynamo:``
    keys that are set as Pulumi secrets (their values are never needed here); ``env``: the
    environment of the ``up`` (None when rendering for review); ``aws_region``: the stack's ``aws:region``."""
    if aws_region:
        from .cluster import apply_aws_region

        raw = apply_aws_region(raw, aws_region)
    cfg = parse(raw)
    cluster = cluster_config(raw)
    check_secrets(raw, frozenset(secret_keys), cfg, cluster, require_present=env is not None)
    if cluster.mode == "render" and not (cluster.render_dir or "").strip():
        raise ConfigError(
            f"{NS}:cluster.renderDir: {cluster.render_dir!r} is empty; a render stack writes manifests to a directory "
            f"and never talks to a cluster: set it (default 'rendered') or choose cluster.mode kubeconfig or eks"
        )
    if cluster.mode == "kubeconfig":
        kubeconfig_path(cluster, frozenset(secret_keys), env)
    layers: list[str] = []
    if cluster.mode == "eks":
        from .cluster import plan_eks

        # Region, fabric, Secrets only this stack can create, serving objects with the instance's EFA per GPU, node
        # group sized from the final DGD, GB200 ComputeDomain claims, FSx claim binding (stacks/cluster.py).
        cluster, cluster_plan, serving = plan_eks(stack, cfg, cluster, raw, frozenset(secret_keys), aws_region=aws_region,
                                                  require_secrets=env is not None)
        storage = "StorageClass" if cluster_plan.storage_class else "PersistentVolume"
        layers = ["EKS cluster and node groups", f"model-cache file system and {storage}", "device plugins",
                  "image pull secrets" if cluster_plan.notes.get("pull_secrets") else "",
                  "NVIDIA DRA driver" if cluster_plan.dra_driver else "",
                  "ComputeDomain" if cluster_plan.compute_domain else "",
                  "Dynamo platform" if cluster.platform_wanted() else ""]
        return optional_layers(ProgramPlan(stack, cfg, cluster, serving, cluster_plan, [x for x in layers if x]))
    serving = build_plan(cfg)
    if cluster.mode == "kubeconfig":
        if cluster.install_device_plugins:
            layers.append("device plugins")
        if cluster.platform_wanted():
            layers.append("Dynamo platform")
    return optional_layers(ProgramPlan(stack, cfg, cluster, serving, None, layers))


def optional_layers(program: ProgramPlan) -> ProgramPlan:
    """issue 13: ``dynamo:observability`` and ``dynamo:benchmark`` plans, both off by default. Render mode
    cannot install Helm charts, so there only the dashboards and monitors are registered (rendered)."""
    cfg, cluster, serving = program.cfg, program.cluster, program.serving
    if cfg.observability.enabled:
        from .observability import build_observability

        ours = cluster.mode == "eks" or (cluster.mode == "kubeconfig" and cluster.install_device_plugins)
        obs = build_observability(cfg.observability, serving_namespace=serving.dgd["metadata"]["namespace"],
                                  dgd_name=serving.dgd["metadata"]["name"], nvidia_stack=cluster.nvidia_stack if ours else None)
        if cluster.mode == "render":
            obs.charts = []  # a render provider cannot install Helm charts
        elif obs.charts:
            program.other_layers.append("observability charts (" + ", ".join(c.chart for c in obs.charts) + ")")
        program.observability = obs
    if cfg.benchmark.enabled:
        from .benchmark import build_benchmark

        program.benchmark = build_benchmark(serving, cfg.benchmark)
    return program
