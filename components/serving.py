"""Serving-layer ComponentResources: thin wiring of ``stacks.serving.build_plan`` objects.

Each component registers the objects the pure builder produced, with
``parent=self``, the dependencies that order them (namespace -> secret/PVC ->
download Job -> validate Job -> ConfigMap -> DGD), and ``register_outputs``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi.resource_hooks import ResourceHookBinding

from stacks.serving import HF_TOKEN_KEY, ServingPlan
from stacks.catalog import gpus_needed
from stacks.serving import waits as _waits
from stacks.program.retained import TEARDOWN_ENV, TEARDOWN_HINT
from components.hooks import program_hooks

PKG = "dynamo"


def _meta(obj: dict) -> dict:
    return obj["metadata"]


# What a resource waits for: resources, or Outputs that fail when a wait did (``_fail_if_job_failed``).
DependsOn = Sequence[pulumi.Input[pulumi.Resource]]


def _opts(parent: pulumi.Resource, depends_on: DependsOn = (), **kw) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on), **kw)


Probe = Callable[[_waits.Wait], Optional[str]]


def _pull_secret_data(value: Optional[pulumi.Input[str]]) -> dict[str, pulumi.Output[str]]:
    """An image pull Secret's stringData: ``ServingArgs.pull_secret``, which is set wherever there are pull Secrets."""
    assert value is not None, "image pull Secrets to create without their .dockerconfigjson"
    return {".dockerconfigjson": pulumi.Output.secret(value)}


def kubectl_probe(kubeconfig_path: Optional[str], context: Optional[str] = None) -> Optional[Probe]:
    """What a failed wait saw last, read with ``kubectl get -o json`` (best effort, 20 s at most).
    Only with a kubeconfig file (cluster.mode kubeconfig); None elsewhere, and the message then
    carries the command to look instead."""
    if not kubeconfig_path:
        return None

    def probe(wait: _waits.Wait) -> Optional[str]:
        import json
        import subprocess

        cmd = [
            "kubectl",
            "--kubeconfig",
            kubeconfig_path,
            *(["--context", context] if context else []),
            "get",
            f"{wait.resource}/{wait.name}",
            "-n",
            wait.namespace,
            "-o",
            "json",
        ]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                return f"kubectl get failed: {r.stderr.strip()[:200]}"
            return _waits.seen_from_object(wait.kind, json.loads(r.stdout))
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            return f"kubectl get failed: {e}"

    return probe


def _wait_opts(wait: Optional[_waits.Wait], annotations: dict, probe: Optional[Probe], announce: bool) -> dict:
    """Resource options for an awaited object: ``customTimeouts`` equal to its ``timeoutSeconds`` annotation, and
    ``on_error``, what the program's error hook says when it fails: what was awaited, what was seen last and how to look
    (components/hooks.py binds it under a fixed name, see ``_guarded``)."""
    if wait is None:
        return {}
    if announce and not pulumi.runtime.is_dry_run():
        pulumi.log.info(wait.announce())

    def on_error(errors: list[str]) -> None:
        seen = probe(wait) if probe else None
        pulumi.log.error(wait.failed(errors, seen))  # no resource: logged synchronously

    kw: dict = {"on_error": on_error}
    timeout = _waits.custom_timeout(annotations)
    if timeout:
        kw["custom_timeouts"] = pulumi.CustomTimeouts(create=timeout, update=timeout)
    return kw


def _fail_if_job_failed(wait: Optional[_waits.Wait], job: dict, resource: k8s.batch.v1.Job) -> Optional[pulumi.Output]:
    """An Output that raises once the Job's wait ended on ``Failed=True`` (the waitFor condition
    accepts Complete or Failed), so what depends on it (the next Job, the DGD) is never created."""
    if wait is None:
        return None
    md = _meta(job)

    def check(args):
        urn, status = args
        msg = _waits.job_failure(wait, md["name"], md["namespace"], status, urn)
        if msg and os.environ.get(TEARDOWN_ENV) != "1":  # a teardown must not stop on it (stacks/program/retained.py)
            raise pulumi.RunError(f"{msg}\n  {TEARDOWN_HINT}")
        return None

    return pulumi.Output.all(resource.urn, resource.status).apply(check)


def _guarded(kw: dict, name: str, api_version: str, kind: str, metadata: dict, kept: bool = False) -> dict:
    """Resource options ``kw`` with the program's hooks bound (components/hooks.py): the guard against deleting an object
    this run declares as another resource; for a retained object, the message that says what was kept; for an awaited
    one (``kw["on_error"]`` from ``_wait_opts``), what its failed wait saw."""
    kw = dict(kw)
    on_error = kw.pop("on_error", None)
    kw["hooks"] = program_hooks().bind(name, api_version, kind, metadata, kept=kept, on_error=on_error, hooks=kw.get("hooks"))
    return kw


class Namespace(pulumi.ComponentResource):
    """The namespace every serving object lives in (skipped when the namespace already exists)."""

    name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        obj: Optional[dict],
        namespace: str,
        opts: Optional[pulumi.ResourceOptions] = None,
        retain_on_delete: bool = False,
    ):
        """``retain_on_delete``: deleting a namespace deletes the PVCs in it, so a protected model
        cache keeps its namespace too."""
        super().__init__(f"{PKG}:serving:Namespace", name, None, opts)
        self.resource = None
        if obj:
            kw = _guarded({}, name, "v1", "Namespace", _meta(obj), kept=retain_on_delete)
            self.resource = k8s.core.v1.Namespace(
                name, metadata=_meta(obj), opts=_opts(self, retain_on_delete=retain_on_delete, **kw)
            )
            self.name = self.resource.metadata.apply(lambda m: m["name"] if isinstance(m, dict) else m.name)
        else:
            self.name = pulumi.Output.from_input(namespace)
        self.register_outputs({"name": self.name})


class HfTokenSecret(pulumi.ComponentResource):
    """The Hugging Face token as a Kubernetes Secret; the value stays a Pulumi secret end to end."""

    secret_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        obj: Optional[dict],
        existing_name: str,
        token: Optional[pulumi.Input[str]],
        opts: Optional[pulumi.ResourceOptions] = None,
        depends_on: Sequence[pulumi.Resource] = (),
        redact: bool = False,
    ):
        """``redact``: render mode writes manifests to disk in plain text, so the Secret is rendered without its data
        there (create the real Secret in the cluster yourself)."""
        super().__init__(f"{PKG}:serving:HfTokenSecret", name, None, opts)
        self.resource = None
        if obj is not None:
            if token is None:
                raise ValueError(
                    "dynamo:hfToken is not set: run `pulumi config set --secret dynamo:hfToken <token>` "
                    "or set dynamo:hfTokenSecretName to an existing Secret"
                )
            # Render mode writes the Secret without its data (create it in the cluster yourself): the Kubernetes provider
            # treats any Secret data as secret and would warn that the rendered file "contains a secret value in
            # plaintext" even for a placeholder (pulumi-kubernetes provider.go Check, yamlRenderMode).
            self.resource = k8s.core.v1.Secret(
                name,
                metadata=_meta(obj),
                type=obj["type"],
                string_data=None if redact else {HF_TOKEN_KEY: pulumi.Output.secret(token)},
                opts=_opts(
                    self,
                    depends_on,
                    additional_secret_outputs=["stringData", "data"],
                    **_guarded({}, name, "v1", "Secret", _meta(obj)),
                ),
            )
        self.secret_name = pulumi.Output.from_input(existing_name)
        self.register_outputs({"secretName": self.secret_name})


def claim_spec_guard(obj: dict) -> Callable[..., None]:
    """The ``before_update`` check of a protected cache claim: raises ConfigError with the migration
    message when the previous inputs' immutable spec differs from ``obj``'s (stacks.config.keys: the provider would
    replace the claim, and on a protected claim that replacement fails on this and every later ``up``)."""
    from stacks.config.keys import ConfigError, cache_claim_changes, cache_migration_error

    spec, md = obj["spec"], _meta(obj)

    def refuse(args) -> None:
        changes = cache_claim_changes((args.old_inputs or {}).get("spec"), spec)
        if changes:
            raise ConfigError(cache_migration_error(changes, md["name"], md.get("namespace", "")))

    return refuse


def protected_claim(name: str, obj: dict) -> tuple[dict, list[str], pulumi.ResourceHook]:
    """A protected (retained) cache claim: (metadata with the requested immutable spec recorded, so that a
    change is an update, the ``ignore_changes`` that keep the provider from planning a replacement, which
    would fail on the retained claim, and the ``claim_spec_guard`` hook, which also runs on preview)."""
    from stacks.config.keys import CACHE_SPEC_ANNOTATION, IMMUTABLE_CLAIM_FIELDS, claim_spec_summary

    md = _meta(obj)
    meta = {**md, "annotations": {**(md.get("annotations") or {}), CACHE_SPEC_ANNOTATION: claim_spec_summary(obj["spec"])}}
    hook = pulumi.ResourceHook(f"{name}-claim-spec", claim_spec_guard(obj), pulumi.ResourceHookOptions(on_dry_run=True))
    return meta, [f"spec.{f}" for f in IMMUTABLE_CLAIM_FIELDS], hook


class ModelCache(pulumi.ComponentResource):
    """The shared model-cache PVC. It is expensive to fill, so by default it is retained on
    destroy and on replacement (``dynamo:storage.protect: false`` opts out)."""

    claim_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        obj: Optional[dict],
        claim_name: str,
        protect: bool,
        opts: Optional[pulumi.ResourceOptions] = None,
        depends_on: Sequence[pulumi.Resource] = (),
        wait: Optional[_waits.Wait] = None,
        probe: Optional[Probe] = None,
        announce: bool = True,
    ):
        super().__init__(f"{PKG}:serving:ModelCache", name, None, opts)
        self.resource = None
        if obj is not None:
            kw = _wait_opts(wait, _meta(obj).get("annotations") or {}, probe, announce)
            meta = _meta(obj)
            if protect:  # an immutable change would fail every `up` on the retained claim: refuse it instead
                meta, kw["ignore_changes"], hook = protected_claim(name, obj)
                binding = kw.setdefault("hooks", ResourceHookBinding())
                binding.before_update = list(binding.before_update or []) + [hook]
            self.resource = k8s.core.v1.PersistentVolumeClaim(
                name,
                metadata=meta,
                spec=obj["spec"],
                opts=_opts(
                    self,
                    depends_on,
                    retain_on_delete=protect,
                    **_guarded(kw, name, "v1", "PersistentVolumeClaim", meta, kept=protect),
                ),
            )
        self.claim_name = pulumi.Output.from_input(claim_name)
        self.register_outputs({"claimName": self.claim_name})


class ModelDownload(pulumi.ComponentResource):
    """The Jobs that fill the cache (download, then validate where the model has one).
    Pulumi waits for each Job to complete unless waiting is switched off."""

    job_names: pulumi.Output[list]

    def __init__(
        self,
        name: str,
        jobs: list[dict],
        opts: Optional[pulumi.ResourceOptions] = None,
        depends_on: Sequence[pulumi.Resource] = (),
        waits: Optional[dict] = None,
        probe: Optional[Probe] = None,
        announce: bool = True,
    ):
        """``waits``: ``stacks.serving.waits.waits_of`` for the plan; a Job with a wait fails `up` when it
        ends Failed (``checks``: depend on them, not only on ``jobs``)."""
        super().__init__(f"{PKG}:serving:ModelDownload", name, None, opts)
        self.jobs: list[k8s.batch.v1.Job] = []
        self.checks: list[pulumi.Output] = []
        previous: list = list(depends_on)
        for job in jobs:
            wait = (waits or {}).get(("Job", _meta(job)["name"]))
            rname = f"{name}-{_meta(job)['name']}"
            r = k8s.batch.v1.Job(
                rname,
                metadata=_meta(job),
                spec=job["spec"],
                opts=_opts(
                    self,
                    previous,
                    **_guarded(
                        _wait_opts(wait, _meta(job).get("annotations") or {}, probe, announce),
                        rname,
                        "batch/v1",
                        "Job",
                        _meta(job),
                    ),
                ),
            )
            self.jobs.append(r)
            check = _fail_if_job_failed(wait, job, r)
            self.checks += [check] if check is not None else []
            previous = list(depends_on) + [r] + ([check] if check is not None else [])
        self.job_names = pulumi.Output.from_input([_meta(j)["name"] for j in jobs])
        self.register_outputs({"jobNames": self.job_names})


class DynamoGraph(pulumi.ComponentResource):
    """One recipe target: its ConfigMap(s) and the DynamoGraphDeployment (nvidia.com/v1beta1).
    The DGD waits for the model download and, unless switched off, for its Ready condition."""

    dgd_name: pulumi.Output[str]
    frontend_service: pulumi.Output[str]
    gpus: pulumi.Output[int]

    def __init__(
        self,
        name: str,
        plan: ServingPlan,
        opts: Optional[pulumi.ResourceOptions] = None,
        depends_on: DependsOn = (),
        wait: Optional[_waits.Wait] = None,
        probe: Optional[Probe] = None,
        announce: bool = True,
        autoscaler_depends_on: DependsOn = (),
    ):
        """``autoscaler_depends_on``: what the ScaledObjects wait for besides the DGD (the KEDA layer's chart)."""
        super().__init__(f"{PKG}:serving:DynamoGraph", name, None, opts)
        self.configmaps = [
            k8s.core.v1.ConfigMap(
                f"{name}-{_meta(cm)['name']}",
                metadata=_meta(cm),
                data=cm.get("data"),
                opts=_opts(self, depends_on, **_guarded({}, f"{name}-{_meta(cm)['name']}", "v1", "ConfigMap", _meta(cm))),
            )
            for cm in plan.configmaps
        ]
        dgd = plan.dgd
        # An autoscaled component's replicas belong to its scaling adapter after creation (stacks/serving/autoscaling.py).
        scaled = [i for i, c in enumerate(dgd["spec"]["components"]) if c["name"] in plan.autoscaling]
        self.dgd = k8s.apiextensions.CustomResource(
            f"{name}-{_meta(dgd)['name']}",
            api_version=dgd["apiVersion"],
            kind=dgd["kind"],
            metadata=_meta(dgd),
            spec=dgd["spec"],
            opts=_opts(
                self,
                [*depends_on, *self.configmaps],
                **_guarded(
                    _wait_opts(wait, _meta(dgd).get("annotations") or {}, probe, announce),
                    f"{name}-{_meta(dgd)['name']}",
                    dgd["apiVersion"],
                    dgd["kind"],
                    _meta(dgd),
                ),
                **({"ignore_changes": [f"spec.components[{i}].replicas" for i in scaled]} if scaled else {}),
            ),
        )
        self.autoscalers = []
        if plan.autoscalers:
            self.autoscalers = [
                k8s.apiextensions.CustomResource(
                    f"{name}-scaledobject-{_meta(so)['name']}",
                    api_version=so["apiVersion"],
                    kind=so["kind"],
                    metadata=_meta(so),
                    spec=so["spec"],
                    opts=_opts(
                        self,
                        [self.dgd, *autoscaler_depends_on],
                        **_guarded({}, f"{name}-scaledobject-{_meta(so)['name']}", so["apiVersion"], so["kind"], _meta(so)),
                    ),
                )
                for so in plan.autoscalers
            ]
        ns = _meta(dgd)["namespace"]
        self.dgd_name = pulumi.Output.from_input(_meta(dgd)["name"])
        self.frontend_service = pulumi.Output.from_input(f"{_meta(dgd)['name']}-frontend.{ns}.svc.cluster.local:8000")
        self.gpus = pulumi.Output.from_input(gpus_needed(dgd))
        self.register_outputs({"dgdName": self.dgd_name, "frontendService": self.frontend_service, "gpus": self.gpus})


@dataclass(frozen=True)
class ServingArgs:
    """What one ``Serving`` (one namespace) is built from.

    ``plan``: the namespace's first entry's serving plan (its namespace, Secret, cache, Jobs and DGD);
    ``hf_token``: the Hugging Face token (a Pulumi secret) when the plan creates the token Secret;
    ``protect_cache``: dynamo:storage.protect, which keeps the cache claim (and its namespace) on delete;
    ``depends_on``: what the cache and download need (storage, system nodes);
    ``graph_depends_on``: what only the DGD needs (GPU nodes, device plugins, the Dynamo platform);
    ``autoscaler_depends_on``: what the KEDA ScaledObjects wait for besides their DGD (the KEDA layer's chart);
    ``redact_secrets``: render mode writes manifests in plain text, so the Secrets are rendered without data; it waits
    for nothing, so it announces no waits;
    ``probe``: how a failed wait reads what it saw last (``kubectl_probe``; None: the message gives the command);
    ``graphs``: ``(suffix, plan, aliases)`` per DGD in this namespace, ``aliases`` the graph's names in the stack's
    other form (stacks/program/names.py); None: ``plan``'s own, as ``graph``, without aliases;
    ``pull_secrets``: ``(resource name, Secret, aliases)`` per image pull Secret this stack creates in the namespace (a
    cluster it creates or a cluster stack's: nothing else can have made them), filled from ``pull_secret`` (a
    .dockerconfigjson, a Pulumi secret);
    ``compute_domain``: the GB200 ComputeDomain the DGD's workers claim.
    The pull Secrets and the ComputeDomain are top-level resources (no parent): a parent is part of a resource's URN,
    and these keep the URNs live stacks hold for them."""

    plan: ServingPlan
    hf_token: Optional[pulumi.Input[str]]
    protect_cache: bool
    depends_on: Sequence[pulumi.Resource] = ()
    graph_depends_on: Sequence[pulumi.Resource] = ()
    autoscaler_depends_on: Sequence[pulumi.Resource] = ()
    redact_secrets: bool = False
    probe: Optional[Probe] = None
    graphs: Optional[Sequence[tuple[str, ServingPlan, Sequence[str]]]] = None
    pull_secrets: Sequence[tuple[str, dict, Sequence[str]]] = ()
    pull_secret: Optional[pulumi.Input[str]] = None
    compute_domain: Optional[dict] = None

    def graph_plans(self) -> list[tuple[str, ServingPlan, Sequence[str]]]:
        """``graphs``, or the plan's own graph named ``graph`` without aliases."""
        return list(self.graphs) if self.graphs is not None else [("graph", self.plan, ())]


class Serving(pulumi.ComponentResource):
    """Everything one recipe target needs in a cluster, in dependency order (``ServingArgs`` says what from)."""

    dgd_name: pulumi.Output[str]
    namespace: pulumi.Output[str]

    def __init__(self, name: str, args: ServingArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(f"{PKG}:serving:Serving", name, None, opts)
        plan, probe = args.plan, args.probe
        child = pulumi.ResourceOptions(parent=self)
        ns_name = _meta(plan.dgd)["namespace"]
        self.ns = Namespace(
            f"{name}-namespace",
            plan.namespace,
            ns_name,
            opts=child,
            retain_on_delete=args.protect_cache and plan.cache_pvc is not None,
        )
        base = list(args.depends_on) + ([self.ns.resource] if self.ns.resource else [])
        top = pulumi.ResourceOptions(provider=opts.provider if opts else None)  # no parent: the URNs they always had
        # The DGD waits for the image pull Secrets: its pods would otherwise fail ErrImagePull before they exist.
        self.pull_secrets = [
            k8s.core.v1.Secret(
                rname,
                metadata=obj["metadata"],
                type=obj["type"],
                string_data=_pull_secret_data(args.pull_secret),
                opts=pulumi.ResourceOptions.merge(
                    top,
                    pulumi.ResourceOptions(
                        depends_on=[self.ns.resource] if self.ns.resource else [],
                        additional_secret_outputs=["stringData", "data"],
                        aliases=[pulumi.Alias(name=a) for a in aliases] or None,
                        **_guarded({}, rname, "v1", "Secret", obj["metadata"]),
                    ),
                ),
            )
            for rname, obj, aliases in args.pull_secrets
        ]
        graph_depends_on = list(args.graph_depends_on) + self.pull_secrets
        self.secret = HfTokenSecret(
            f"{name}-hf-token",
            plan.hf_secret,
            plan.hf_secret_name,
            args.hf_token,
            opts=child,
            depends_on=base,
            redact=args.redact_secrets,
        )
        waits = _waits.waits_of(plan)
        announce = not args.redact_secrets
        self.cache = ModelCache(
            f"{name}-model-cache",
            plan.cache_pvc,
            plan.claim_name,
            args.protect_cache,
            opts=child,
            depends_on=base,
            wait=waits.get(("PersistentVolumeClaim", plan.claim_name)),
            probe=probe,
            announce=announce,
        )
        # Optional NetworkPolicies (dynamo:networkPolicy, stacks/serving/network_policy.py): in place before the Jobs and the DGD start.
        graphs = args.graph_plans()
        for w in dict.fromkeys(w for _, p, _ in graphs for w in p.warnings):
            pulumi.log.warn(w, resource=self)
        policies = {_meta(np_)["name"]: np_ for _, p, _ in graphs for np_ in p.network_policies}
        self.network_policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-netpol-{pname}",
                metadata=_meta(np_),
                spec=np_["spec"],
                opts=_opts(
                    self, base, **_guarded({}, f"{name}-netpol-{pname}", "networking.k8s.io/v1", "NetworkPolicy", _meta(np_))
                ),
            )
            for pname, np_ in policies.items()
        ]
        # The image pre-pullers (stacks/serving/prepull.py): after the namespace and the pull Secrets they name only (not
        # the storage, not the GPU nodes), so they exist before the GPU nodes join and each pulls the workers' image then.
        self.image_prepullers = [
            k8s.apps.v1.DaemonSet(
                f"{name}-{suffix}-image-prepull",
                metadata=_meta(p.image_prepuller),
                spec=p.image_prepuller["spec"],
                opts=_opts(
                    self,
                    [*([self.ns.resource] if self.ns.resource else []), *self.pull_secrets],
                    # the graph's names in the stack's other form, as its DGD's
                    aliases=[pulumi.Alias(name=f"{a}-image-prepull") for a in aliases] or None,
                    **_guarded({}, f"{name}-{suffix}-image-prepull", "apps/v1", "DaemonSet", _meta(p.image_prepuller)),
                ),
            )
            for suffix, p, aliases in graphs
            if p.image_prepuller
        ]
        ready = base + [r for r in (self.secret.resource, self.cache.resource) if r] + self.network_policies
        self.download = ModelDownload(
            f"{name}-model-download", plan.jobs, opts=child, depends_on=ready, waits=waits, probe=probe, announce=announce
        )
        self.graphs = []
        for suffix, p, aliases in graphs:
            self.graphs.append(
                DynamoGraph(
                    f"{name}-{suffix}",
                    p,
                    opts=pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(name=a) for a in aliases] or None),
                    depends_on=[*base, *graph_depends_on, *self.download.jobs, *self.download.checks, *self.network_policies],
                    wait=_waits.waits_of(p).get(("DynamoGraphDeployment", _meta(p.dgd)["name"])),
                    probe=probe,
                    announce=announce,
                    autoscaler_depends_on=args.autoscaler_depends_on,
                )
            )
        self.graph = self.graphs[0]
        self.compute_domain = None
        if args.compute_domain:
            cd = args.compute_domain
            self.compute_domain = k8s.apiextensions.CustomResource(
                "compute-domain",
                api_version=cd["apiVersion"],
                kind=cd["kind"],
                metadata=cd["metadata"],
                spec=cd["spec"],
                opts=pulumi.ResourceOptions.merge(
                    top,
                    pulumi.ResourceOptions(
                        depends_on=([self.ns.resource] if self.ns.resource else []) + list(graph_depends_on),
                        # Its CRD makes the spec immutable (self == oldSelf): a live ComputeDomain keeps the spec it was
                        # created with (one written before numNodes became 0 keeps its count, which the driver then only
                        # reports against); the API server would refuse any change of it mid-`up`.
                        ignore_changes=["spec"],
                        **_guarded({}, "compute-domain", cd["apiVersion"], cd["kind"], cd["metadata"]),
                    ),
                ),
            )
        self.dgd_name = self.graph.dgd_name
        self.namespace = self.ns.name
        self.register_outputs({"dgdName": self.dgd_name, "namespace": self.namespace})
