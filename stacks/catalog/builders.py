"""Recipe builders: DGD components, recipes and model-cache Jobs built from data.

Every model family describes its frontend and workers as ``Component`` values (image,
command, args, env, GPUs per worker, extended resources such as EFA or RDMA devices, memory,
shared memory, probes, placement, pull secrets, the model cache claim and where it is
mounted) and its download Job as a ``DownloadJob``. ``Component.build()`` and
``DownloadJob.build()`` turn them into the Kubernetes fragments upstream writes; the vLLM and
TensorRT-LLM recipes of Lightning, Ultra and Motif are all built this way.

A model that needs no code at all uses ``Recipe``: components whose strings carry
``{placeholders}`` filled from the target (``{repo}``, ``{gpus}``, ``{label}``, ``{dgd}``, any
target field or param), plus an optional ConfigMap. See docs/adding-a-model-or-gpu.md and
tests/test_data_model.py.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from stacks import registry
from stacks.catalog import k8s


@dataclass(frozen=True)
class Cache:
    """A family's model cache: the PVC's name (also the volume name), where pods mount it, its labels.

    ``storage_class`` is the placeholder upstream writes (``your-storage-class-name``), replaced by
    ``dynamo:storage.className`` or the cluster's class; ``read_only_mount``/``read_only_volume``:
    whether upstream marks the mount or the claim read-only (None: the key is absent).
    """

    claim: str = k8s.CACHE_PVC
    mount: str = "/model-cache"
    size: str = "100Gi"
    storage_class: Optional[str] = k8s.PLACEHOLDER_STORAGE_CLASS
    labels: Mapping[str, str] = field(default_factory=dict)
    read_only_mount: Optional[bool] = None
    read_only_volume: Optional[bool] = None

    def volume(self) -> dict:
        return k8s.pvc_volume(self.claim, self.claim, self.read_only_volume)

    def volume_mount(self, read_only: Optional[bool] = None) -> dict:
        return k8s.mount(self.claim, self.mount, self.read_only_mount if read_only is None else read_only)

    def pvc(self, size: Optional[str] = None) -> dict:
        obj = k8s.pvc(self.claim, size or self.size, storage_class=self.storage_class)
        if self.labels:
            obj["metadata"]["labels"] = dict(self.labels)
        return obj


def shm(size: str, name: str = "dshm") -> tuple[dict, dict]:
    """A memory-backed ``/dev/shm`` (volume, mount) pair."""
    return k8s.shm_volume(size, name), k8s.mount(name, "/dev/shm")


def empty_dir(name: str, path: str, medium: Optional[str] = None) -> tuple[dict, dict]:
    return {"name": name, "emptyDir": {"medium": medium} if medium else {}}, k8s.mount(name, path)


def _env_list(env: Any) -> list[dict]:
    if isinstance(env, Mapping):
        return k8s.envs(dict(env))
    return [dict(e) for e in env]


def _copy(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_copy(v) for v in x]
    return x


@dataclass(frozen=True)
class Component:
    """One DGD component (frontend or worker) and its ``main`` container, as data.

    ``gpus``: ``nvidia.com/gpu`` requested and limited; ``devices``: other extended resources,
    requested and limited alike (``vpc.amazonaws.com/efa``, ``rdma/ib``...); ``requests``: requests
    only (memory, ephemeral-storage); ``resources``: the whole block, for components without GPUs
    (``{}`` where upstream writes an empty one). ``volumes``: (volume, mount) pairs after the model
    cache. ``affinity``: a GPU id or node label, as required node affinity on ``nvidia.com/gpu.product``.
    """

    name: str
    type: str
    image: str
    command: Sequence[str] = ("python3",)
    args: Sequence[str] = ()
    env: Any = ()  # a mapping (name -> value or entry) or a list of env entries
    replicas: Any = 1
    gpus: Any = 0
    devices: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, str] = field(default_factory=dict)
    resources: Optional[Mapping] = None
    shm: Optional[str] = None  # sharedMemorySize
    cache: Optional[Cache] = Cache()
    cache_read_only: Optional[bool] = None
    volumes: Sequence[tuple[dict, dict]] = ()
    working_dir: Optional[str] = None
    security: Optional[Mapping] = None
    startup_probe: Optional[Mapping] = None
    readiness_probe: Optional[Mapping] = None
    ports: Sequence[Mapping] = ()
    env_from_secret: Optional[str] = None  # e.g. k8s.HF_SECRET
    pull_secrets: bool = True  # the placeholder pull secret upstream writes
    affinity: Optional[str] = None
    node_selector: Optional[Mapping[str, str]] = None
    tolerations: Sequence[Mapping] = ()
    runtime_class: Optional[str] = None
    pod_labels: Optional[Mapping[str, str]] = None
    pod_annotations: Optional[Mapping[str, str]] = None
    runtime_version: Optional[str] = None  # runtimeVersionOverride
    image_pull_policy: Optional[str] = "IfNotPresent"

    def container(self) -> dict:
        c: dict[str, Any] = {"name": "main", "image": self.image}
        if self.image_pull_policy:
            c["imagePullPolicy"] = self.image_pull_policy
        if self.working_dir:
            c["workingDir"] = self.working_dir
        c["command"] = list(self.command)
        c["args"] = list(self.args)
        env = _env_list(self.env)
        if env:
            c["env"] = env
        if self.env_from_secret:
            c["envFrom"] = [{"secretRef": {"name": self.env_from_secret}}]
        if self.gpus:
            gpus = {"nvidia.com/gpu": str(self.gpus)}
            c["resources"] = {"requests": {**gpus, **self.devices, **self.requests}, "limits": {**gpus, **self.devices}}
        elif self.resources is not None:
            c["resources"] = _copy(self.resources)
        if self.security is not None:
            c["securityContext"] = _copy(self.security)
        if self.ports:
            c["ports"] = _copy(self.ports)
        if self.startup_probe is not None:
            c["startupProbe"] = _copy(self.startup_probe)
        if self.readiness_probe is not None:
            c["readinessProbe"] = _copy(self.readiness_probe)
        mounts = ([self.cache.volume_mount(self.cache_read_only)] if self.cache else []) + [dict(m) for _, m in self.volumes]
        if mounts:
            c["volumeMounts"] = mounts
        return c

    def build(self) -> dict:
        pod: dict[str, Any] = {}
        if self.pull_secrets:
            pod["imagePullSecrets"] = k8s.pull_secrets()
        if self.runtime_class:
            pod["runtimeClassName"] = self.runtime_class
        if self.affinity:
            pod["affinity"] = k8s.gpu_affinity(
                registry.GPUS[self.affinity].label if self.affinity in registry.GPUS else self.affinity
            )
        if self.node_selector is not None:
            pod["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            pod["tolerations"] = _copy(self.tolerations)
        pod["containers"] = [self.container()]
        volumes = ([self.cache.volume()] if self.cache else []) + [dict(v) for v, _ in self.volumes]
        if volumes:
            pod["volumes"] = volumes
        comp: dict[str, Any] = {"name": self.name, "type": self.type, "replicas": int(self.replicas)}
        if self.runtime_version:
            comp["runtimeVersionOverride"] = self.runtime_version
        if self.shm:
            comp["sharedMemorySize"] = self.shm
        template: dict[str, Any] = {}
        meta = {k: dict(v) for k, v in (("labels", self.pod_labels), ("annotations", self.pod_annotations)) if v is not None}
        if meta:
            template["metadata"] = meta
        template["spec"] = pod
        comp["podTemplate"] = template
        return comp


REVISION_ENV = "MODEL_REVISION"


@dataclass(frozen=True)
class RevisionPin:
    """How a download Job takes ``dynamo:modelRevision``: the env var ``MODEL_REVISION`` appended to its container,
    and, where upstream's script reads none, ``edits``: (upstream text, pinned text) pairs, each upstream text found
    exactly once in the script. It is applied only when a revision is set (``apply``), so the Job rendered without one
    is upstream's, byte for byte; ``undo`` takes exactly this departure back out for the fidelity check
    (``stacks.cli.fidelity``), and anything else stays a difference.
    """

    edits: tuple[tuple[str, str], ...] = ()

    def script(self, text: str) -> str:
        """``text`` with every edit made; an upstream text that is not there exactly once is an error (the upstream
        script changed: the pin must be written again, never silently dropped)."""
        for old, new in self.edits:
            if text.count(old) != 1:
                raise ValueError(f"revision pin: {old!r} is in the download script {text.count(old)} times, not once")
            text = text.replace(old, new)
        return text

    def apply(self, job: dict, revision: str) -> dict:
        """The Job (in place, and returned) downloading ``revision``."""
        for c in job["spec"]["template"]["spec"]["containers"]:
            c["args"] = [self.script(a) for a in c.get("args") or []]
            c.setdefault("env", []).append({"name": REVISION_ENV, "value": str(revision)})
        return job

    def undo(self, rendered: dict, upstream: dict) -> bool:
        """Take the pin out of ``rendered`` (a copy of the Job, changed in place) where it is exactly this pin applied
        to ``upstream``'s container: its args edited as listed and one ``MODEL_REVISION`` env entry upstream lacks.
        True when it did."""
        try:
            pod, upod = rendered["spec"]["template"]["spec"], upstream["spec"]["template"]["spec"]
        except (KeyError, TypeError):
            return False
        ups = {c.get("name"): c for c in upod.get("containers") or []}
        done = False
        for c in pod.get("containers") or []:
            uc = ups.get(c.get("name"))
            if uc is None or not isinstance(c.get("env"), list):
                continue
            added = [
                e for e in c["env"] if isinstance(e, dict) and e.get("name") == REVISION_ENV and e not in (uc.get("env") or [])
            ]
            try:
                pinned = [self.script(a) for a in uc.get("args") or []]
            except ValueError:
                continue
            if len(added) != 1 or c.get("args") != pinned:
                continue
            c["args"] = list(uc.get("args") or [])
            c["env"].remove(added[0])
            if not c["env"] and "env" not in uc:
                del c["env"]
            done = True
        return done


@dataclass(frozen=True)
class DownloadJob:
    """A no-GPU Job that fills (or checks) the model cache: ``command`` + ``script`` in ``image``.

    ``hf_token``: the HF token Secret as ``envFrom``; ``labels``: on the Job and its pods;
    ``pod_labels``: on the pods only; ``spec``: extra Job spec fields (completions, deadline...);
    ``revision``: how the Job takes ``dynamo:modelRevision`` (None: it downloads no model, or cannot be pinned).
    """

    name: str
    image: str
    script: str
    cache: Cache = Cache()
    command: Sequence[str] = ("python3", "-c")
    container: Optional[str] = None  # container name (default: the Job name)
    env: Mapping[str, Any] = field(default_factory=dict)
    hf_token: bool = True
    read_only: Optional[bool] = None
    backoff_limit: int = 3
    spec: Mapping[str, Any] = field(default_factory=dict)
    labels: Optional[Mapping[str, str]] = None
    pod_labels: Optional[Mapping[str, str]] = None
    security: Optional[Mapping] = None
    resources: Optional[Mapping] = None
    pull_secrets: bool = False
    image_pull_policy: Optional[str] = None
    revision: Optional[RevisionPin] = None

    def build(self) -> dict:
        c: dict[str, Any] = {"name": self.container or self.name, "image": self.image}
        if self.image_pull_policy:
            c["imagePullPolicy"] = self.image_pull_policy
        c["command"] = list(self.command)
        if self.security is not None:
            c["securityContext"] = _copy(self.security)
        if self.hf_token:
            c["envFrom"] = [{"secretRef": {"name": k8s.HF_SECRET}}]
        if self.env:
            c["env"] = k8s.envs(dict(self.env))
        c["args"] = [self.script]
        if self.resources is not None:
            c["resources"] = _copy(self.resources)
        c["volumeMounts"] = [self.cache.volume_mount(self.read_only)]
        pod: dict[str, Any] = {"restartPolicy": "Never"}
        if self.pull_secrets:
            pod["imagePullSecrets"] = k8s.pull_secrets()
        pod["containers"] = [c]
        pod["volumes"] = [k8s.pvc_volume(self.cache.claim, self.cache.claim)]
        template: dict[str, Any] = {}
        pod_labels = {**(self.labels or {}), **(self.pod_labels or {})}
        if pod_labels:
            template["metadata"] = {"labels": pod_labels}
        template["spec"] = pod
        meta: dict[str, Any] = {"name": self.name}
        if self.labels:
            meta["labels"] = dict(self.labels)
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"backoffLimit": self.backoff_limit, **_copy(self.spec), "template": template},
        }

    def __call__(self) -> dict:
        return self.build()


# --------------------------------------------------------------------------- recipes as pure data

_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def _fill(x: Any, ctx: Mapping[str, Any]) -> Any:
    """``{name}`` placeholders filled from ``ctx`` (unknown names and JSON braces are left alone)."""
    if isinstance(x, str):
        return _PLACEHOLDER.sub(lambda m: str(ctx[m.group(1)]) if m.group(1) in ctx else m.group(0), x)
    if isinstance(x, Mapping):
        return {_fill(k, ctx): _fill(v, ctx) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_fill(v, ctx) for v in x)
    return x


def context(t, **extra) -> dict[str, Any]:
    """What a data recipe may name: every target field and param, ``dgd``, ``label``, ``gpu_arch``, ``image``,
    and for an xPyD ``shape`` ``prefill_replicas``/``decode_replicas``."""
    ctx = {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if isinstance(getattr(t, f.name), (str, int, float))}
    g = registry.GPUS.get(t.gpu)
    ctx.update(dgd=t.dgd_name, label=g.label if g else t.gpu, gpu_arch=g.arch if g else "amd64", image=t.image or "")
    m = re.fullmatch(r"(\d+)P(\d+)D", t.shape or "", re.I)
    if m:  # xPyD: the prefill and decode replicas
        ctx.update(prefill_replicas=int(m.group(1)), decode_replicas=int(m.group(2)))
    ctx.update(extra)
    ctx.update({k: v for k, v in t.params.items() if isinstance(v, (str, int, float))})
    return ctx


@dataclass(frozen=True)
class Recipe:
    """A whole recipe as data: a ConfigMap (``configmap``: its data, optional) and a DGD of ``components``.

    Strings in the components, the ConfigMap and the labels may name ``{placeholders}`` (see ``context``);
    ``gpus`` and ``replicas`` may be placeholders too. ``vars``: family constants (``repo``...).
    A target's ``params`` override ``vars``. ``dgd_labels``: True for the usual name/part-of labels,
    or the labels. Use it as a family builder: ``builders={"vllm-agg": Recipe(...)}``.
    """

    framework: str
    components: Sequence[Component]
    configmap: Optional[Mapping[str, str]] = None
    vars: Mapping[str, Any] = field(default_factory=dict)
    dgd_labels: Any = True
    configmap_name: str = "{dgd}-config"
    configmap_labels: Optional[Mapping[str, str]] = None

    def __call__(self, t) -> list[dict]:
        ctx = context(t, **self.vars)
        comps = []
        for c in self.components:
            filled = {f.name: _fill(getattr(c, f.name), ctx) for f in dataclasses.fields(c) if f.name != "cache"}
            filled["gpus"] = int(filled["gpus"] or 0)
            filled["replicas"] = int(filled["replicas"])
            comps.append(dataclasses.replace(c, **filled).build())
        out = []
        if self.configmap is not None:
            cm = k8s.configmap(_fill(self.configmap_name, ctx), _fill(dict(self.configmap), ctx))
            if self.configmap_labels is not None:
                cm["metadata"]["labels"] = _fill(dict(self.configmap_labels), ctx)
            out.append(cm)
        dgd = k8s.dgd(t.dgd_name, self.framework, comps, with_labels=self.dgd_labels is True)
        if isinstance(self.dgd_labels, Mapping):
            dgd["metadata"]["labels"] = _fill(dict(self.dgd_labels), ctx)
        out.append(dgd)
        return out
