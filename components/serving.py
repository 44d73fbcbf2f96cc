"""Serving-layer ComponentResources: thin wiring of ``stacks.serving.build_plan`` objects.

Each component registers the objects the pure builder produced, with
``parent=self``, the dependencies that order them (namespace -> secret/PVC ->
download Job -> validate Job -> ConfigMap -> DGD), and ``register_outputs``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from stacks.serving import HF_TOKEN_KEY, ServingPlan
from stacks.catalog import gpus_needed

PKG = "dynamo"


def _meta(obj: dict) -> dict:
    return obj["metadata"]


def _opts(parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = (), **kw) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on), **kw)


class Namespace(pulumi.ComponentResource):
    """The namespace every serving object lives in (skipped when the namespace already exists)."""

    name: pulumi.Output[str]

    def __init__(self, name: str, obj: Optional[dict], namespace: str, opts: Optional[pulumi.ResourceOptions] = None,
                 retain_on_delete: bool = False):
        """``retain_on_delete``: deleting a namespace deletes the PVCs in it, so a protected model
        cache keeps its namespace too."""
        super().__init__(f"{PKG}:serving:Namespace", name, None, opts)
        self.resource = None
        if obj:
            self.resource = k8s.core.v1.Namespace(name, metadata=_meta(obj), opts=_opts(self, retain_on_delete=retain_on_delete))
            self.name = self.resource.metadata.apply(lambda m: m["name"] if isinstance(m, dict) else m.name)
        else:
            self.name = pulumi.Output.from_input(namespace)
        self.register_outputs({"name": self.name})


class HfTokenSecret(pulumi.ComponentResource):
    """The Hugging Face token as a Kubernetes Secret; the value stays a Pulumi secret end to end."""

    secret_name: pulumi.Output[str]

    def __init__(self, name: str, obj: Optional[dict], existing_name: str, token: Optional[pulumi.Input[str]],
                 opts: Optional[pulumi.ResourceOptions] = None, depends_on: Sequence[pulumi.Resource] = (),
                 redact: bool = False):
        """``redact``: render mode writes manifests to disk in plain text, so the Secret carries a
        placeholder there instead of the token (create the real Secret in the cluster yourself)."""
        super().__init__(f"{PKG}:serving:HfTokenSecret", name, None, opts)
        self.resource = None
        if obj is not None:
            if token is None:
                raise ValueError("dynamo:hfToken is not set: run `pulumi config set --secret dynamo:hfToken <token>` "
                                 "or set dynamo:hfTokenSecretName to an existing Secret")
            secret_token = pulumi.Output.secret(obj["stringData"][HF_TOKEN_KEY] if redact else token)
            self.resource = k8s.core.v1.Secret(
                name,
                metadata=_meta(obj),
                type=obj["type"],
                string_data={HF_TOKEN_KEY: secret_token},
                opts=_opts(self, depends_on, additional_secret_outputs=["stringData", "data"]),
            )
        self.secret_name = pulumi.Output.from_input(existing_name)
        self.register_outputs({"secretName": self.secret_name})


class ModelCache(pulumi.ComponentResource):
    """The shared model-cache PVC. It is expensive to fill, so by default it is retained on
    destroy and on replacement (``dynamo:storage.protect: false`` opts out)."""

    claim_name: pulumi.Output[str]

    def __init__(self, name: str, obj: Optional[dict], claim_name: str, protect: bool,
                 opts: Optional[pulumi.ResourceOptions] = None, depends_on: Sequence[pulumi.Resource] = ()):
        super().__init__(f"{PKG}:serving:ModelCache", name, None, opts)
        self.resource = None
        if obj is not None:
            self.resource = k8s.core.v1.PersistentVolumeClaim(
                name,
                metadata=_meta(obj),
                spec=obj["spec"],
                opts=_opts(self, depends_on, retain_on_delete=protect),
            )
        self.claim_name = pulumi.Output.from_input(claim_name)
        self.register_outputs({"claimName": self.claim_name})


class ModelDownload(pulumi.ComponentResource):
    """The Jobs that fill the cache (download, then validate where the model has one).
    Pulumi waits for each Job to complete unless waiting is switched off."""

    job_names: pulumi.Output[list]

    def __init__(self, name: str, jobs: list[dict], opts: Optional[pulumi.ResourceOptions] = None,
                 depends_on: Sequence[pulumi.Resource] = ()):
        super().__init__(f"{PKG}:serving:ModelDownload", name, None, opts)
        self.jobs: list[k8s.batch.v1.Job] = []
        previous: list[pulumi.Resource] = list(depends_on)
        for job in jobs:
            r = k8s.batch.v1.Job(
                f"{name}-{_meta(job)['name']}",
                metadata=_meta(job),
                spec=job["spec"],
                opts=_opts(self, previous),
            )
            self.jobs.append(r)
            previous = list(depends_on) + [r]
        self.job_names = pulumi.Output.from_input([_meta(j)["name"] for j in jobs])
        self.register_outputs({"jobNames": self.job_names})


class DynamoGraph(pulumi.ComponentResource):
    """One recipe target: its ConfigMap(s) and the DynamoGraphDeployment (nvidia.com/v1beta1).
    The DGD waits for the model download and, unless switched off, for its Ready condition."""

    dgd_name: pulumi.Output[str]
    frontend_service: pulumi.Output[str]
    gpus: pulumi.Output[int]

    def __init__(self, name: str, plan: ServingPlan, opts: Optional[pulumi.ResourceOptions] = None,
                 depends_on: Sequence[pulumi.Resource] = ()):
        super().__init__(f"{PKG}:serving:DynamoGraph", name, None, opts)
        self.configmaps = [
            k8s.core.v1.ConfigMap(f"{name}-{_meta(cm)['name']}", metadata=_meta(cm), data=cm.get("data"), opts=_opts(self, depends_on))
            for cm in plan.configmaps
        ]
        dgd = plan.dgd
        self.dgd = k8s.apiextensions.CustomResource(
            f"{name}-{_meta(dgd)['name']}",
            api_version=dgd["apiVersion"],
            kind=dgd["kind"],
            metadata=_meta(dgd),
            spec=dgd["spec"],
            opts=_opts(self, list(depends_on) + self.configmaps),
        )
        ns = _meta(dgd)["namespace"]
        self.dgd_name = pulumi.Output.from_input(_meta(dgd)["name"])
        self.frontend_service = pulumi.Output.from_input(f"{_meta(dgd)['name']}-frontend.{ns}.svc.cluster.local:8000")
        self.gpus = pulumi.Output.from_input(gpus_needed(dgd))
        self.register_outputs({"dgdName": self.dgd_name, "frontendService": self.frontend_service, "gpus": self.gpus})


class Serving(pulumi.ComponentResource):
    """Everything one recipe target needs in a cluster, in dependency order."""

    dgd_name: pulumi.Output[str]
    namespace: pulumi.Output[str]

    def __init__(self, name: str, plan: ServingPlan, hf_token: Optional[pulumi.Input[str]], protect_cache: bool,
                 opts: Optional[pulumi.ResourceOptions] = None, depends_on: Sequence[pulumi.Resource] = (),
                 graph_depends_on: Sequence[pulumi.Resource] = (), redact_secrets: bool = False):
        """``depends_on``: what the cache and download need (storage, system nodes);
        ``graph_depends_on``: what only the DGD needs (GPU nodes, device plugins, the Dynamo platform)."""
        super().__init__(f"{PKG}:serving:Serving", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns_name = _meta(plan.dgd)["namespace"]
        self.ns = Namespace(f"{name}-namespace", plan.namespace, ns_name, opts=child,
                            retain_on_delete=protect_cache and plan.cache_pvc is not None)
        base = list(depends_on) + ([self.ns.resource] if self.ns.resource else [])
        self.secret = HfTokenSecret(f"{name}-hf-token", plan.hf_secret, plan.hf_secret_name, hf_token, opts=child, depends_on=base,
                                    redact=redact_secrets)
        self.cache = ModelCache(f"{name}-model-cache", plan.cache_pvc, plan.claim_name, protect_cache, opts=child, depends_on=base)
        ready = base + [r for r in (self.secret.resource, self.cache.resource) if r]
        self.download = ModelDownload(f"{name}-model-download", plan.jobs, opts=child, depends_on=ready)
        self.graph = DynamoGraph(f"{name}-graph", plan, opts=child, depends_on=base + list(graph_depends_on) + self.download.jobs)
        self.dgd_name = self.graph.dgd_name
        self.namespace = self.ns.name
        self.register_outputs({"dgdName": self.dgd_name, "namespace": self.namespace})
