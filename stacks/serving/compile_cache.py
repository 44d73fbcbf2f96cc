"""Compile caches on the model-cache volume: no vLLM worker compiles the same thing twice.

Upstream's recipes keep vLLM's and Triton's caches in the container (``VLLM_CACHE_ROOT=/tmp/vllm-cache`` or
``/tmp/vllm``, ``TRITON_CACHE_DIR=/tmp/.triton-cache`` or ``/tmp/triton``, or their defaults under ``$HOME``), so every
new pod compiles again. ``apply_compile_cache`` points each vLLM GPU worker container's two variables at a directory on
the model-cache volume (the family's ``Cache.mount``, which every target already mounts):

    <mount>/compile-cache/<target id>/<component>/<key>/vllm     VLLM_CACHE_ROOT
    <mount>/compile-cache/<target id>/<component>/<key>/triton   TRITON_CACHE_DIR

``<key>`` is a short hash of what decides what gets compiled: the image, command and args, the container's and the
DGD's env (but for these two variables), the data of the ConfigMaps the container reads (engine and speculative
configs), the GPU model and the GPUs per pod. Different images, models, engine arguments or GPUs never share an entry;
replicas of one component (and restarts) do.

What the sources say:
- ``VLLM_CACHE_ROOT`` (default ``~/.cache/vllm``) holds vLLM's torch.compile cache, ``torch_compile_cache/<hash>/rank_<i>_<j>``;
  vLLM hashes "all the related configs (compute_hash ...), PyTorch configs ... and the model's forward function" into
  that directory name, so vLLM itself never loads an artifact for another config (https://docs.vllm.ai/en/latest/design/torch_compile/,
  "Compilation Cache"; the env vars that enter the key: ``vllm.envs.compile_factors``, https://docs.vllm.ai/en/latest/api/vllm/envs/).
  Our key is on top of vLLM's: it keeps targets, images and GPUs in separate trees (an image upgrade starts a new tree
  instead of growing an old one) and lets a cache be deleted per target and component.
- ``TRITON_CACHE_DIR`` holds the Triton kernels JIT-compiled at run time (e.g. the TRITON_ATTN attention backend some
  recipes select, fused MoE kernels); Triton keys each kernel by its source, options and target GPU.
- Concurrent first starts: vLLM takes no lock on the cache. Replicas starting together may each compile (the wasted
  work is the first start's only); vllm-project/vllm#24601 reported artifacts clobbered by concurrent writers, fixed by
  saving standalone_compile artifacts as single "binary" files written atomically (write + rename), the default since
  vllm-project/vllm#27616 (merged the week of 2025-11-07, so in vLLM 0.11.1 and later); a write lock
  (vllm-project/vllm#26521) was proposed and closed unmerged. vLLM's ``VLLM_COMPILE_CACHE_SAVE_FORMAT`` defaults to
  ``binary``, "Safe for multiple vllm serve processes accessing the same torch compile cache" (``unpacked`` is "NOT
  multiprocess safe"; vllm/envs.py), and the AOT-compile artifacts (on by default from torch 2.10) are saved atomically
  since vllm-project/vllm#35117. The recipes' images are far past that: Dynamo 1.4.x pins vLLM 0.26.0 and 1.5.0 pins
  0.28.0 (ai-dynamo/dynamo docs/fern/components/releases.data.ts; NVIDIA's Dynamo v1.5.0 compatibility page), and 1.2.0
  already pinned 0.20.1 (its pyproject.toml), so Ultra's 1.3.0 dev image is past it too. With vLLM 0.28.0, eight engines
  started together on one emptied cache all compiled and wrote it, five times over, without a failure
  (NovaSky-AI/SkyRL PR #2167). A later start reads the finished entries; an entry is only read back when vLLM's own
  hash matches (env vars that enter it: ``vllm.envs.compile_factors``; a key that drifts between pods is never shared,
  as ai-dynamo/dynamo#10695 reported).
- The DGD's ``spec.env`` "is prepended to every component's environment. Component-specific env entries with the same
  name take precedence" (DynamoGraphDeployment CRD v1beta1, ``spec.env``: /work/shared/reference/crds/
  nvidia.com_dynamographdeployments.yaml), so the container-level entries set here win over a DGD-level value
  (Ultra's ``SCRATCH_ENV``); an entry the container already has is replaced in place (one entry per name).
- Where a worker mounts the model cache read-only (Ultra: ``/opt/models``, ``readOnly: true``), the container also gets
  its own entry's directory of the same volume mounted writable at the same path
  (``subPath: compile-cache/<target id>/<component>/<key>``); the model and every other target's and component's
  compile caches stay read-only to it, so a worker that runs remote model code cannot plant compiled artifacts that
  another component loads. The kubelet creates a missing ``subPath`` directory, intermediate ones included, before it
  starts the container (Kubernetes documentation, "Volumes", "Using subPath").
- A read-only volume source makes every mount of it read-only: the kubelet mounts a ``persistentVolumeClaim`` with
  ``readOnly: true`` read-only once per pod and bind-mounts every ``volumeMounts`` entry from it, whatever the entry says
  ("readOnly: Will force the ReadOnly setting in VolumeMounts", PersistentVolumeClaimVolumeSource in the Kubernetes API
  reference, https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/volume/). Upstream's Ultra
  recipes set it on the claim too, so the writable ``compile-cache`` mount above would be read-only (on a fresh cache
  the kubelet cannot even create the subPath directory: CreateContainerConfigError). Where the step adds that mount to
  a pod whose claim source is read-only, it drops ``readOnly`` from the source and sets ``readOnly: true`` on every other
  mount of that volume in the pod, so that each of them stays exactly as read-only as upstream made it
  (``release_claim_source``).
- Where the recipe lets a worker read the model cache without writing to it, the step also mounts the model cache
  read-only in that container (``readOnly: true``), with the compile-cache directory writable as above, so that the
  worker (which runs model code, ``--trust-remote-code``) cannot change the model files every other replica and stack
  on the volume loads. The recipe allows it when both hold (``model_read_only``):
  - ``HF_HUB_OFFLINE=1``: huggingface_hub makes no HTTP call and resolves files from the local cache only
    (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables, ``HF_HUB_OFFLINE``);
  - transformers' remote-code module cache is off the volume: ``HF_MODULES_CACHE``, default ``$HF_HOME/modules``
    (transformers ``utils/hub.py``: ``os.getenv("HF_MODULES_CACHE", os.path.join(constants.HF_HOME, "modules"))``),
    where ``trust_remote_code`` copies the model's Python files before importing them.
  Lightning's vLLM workers qualify (offline, ``HF_MODULES_CACHE=/tmp/hf_modules``); Motif-3's do not (offline, but
  ``HF_HOME`` is the cache mount and no ``HF_MODULES_CACHE``: their remote code is written onto the volume), and keep
  the recipe's mount. The compile-cache directory stays writable and shared by the replicas of a component (keyed).

TensorRT-LLM targets get nothing: ``trtllm-serve`` (lightning_trtllm.py) does not read ``VLLM_CACHE_ROOT``, and
their engine configs turn on no torch.compile (``torch_compile_config`` unset), so there is no torch.compile cache to
move; the recipe's ``TRITON_CACHE_DIR=/tmp/.triton-cache`` is kept as upstream has it (moving it too is a possible
extension; it holds only the Triton kernels the engine JIT-compiles).

The DGD CRD also has ``components[].compilationCache`` (a PVC the operator mounts at a backend default path); it is not
used: it takes a PVC of its own, keys nothing by image or arguments, and leaves the paths to the operator's version.

Opt out per stack entry: ``dynamo:compileCache: {enabled: false}`` (the recipe's values are kept). ``stacks.cli.fidelity``
takes exactly these additions back out (``without_compile_cache``) and lists the containers that carry them.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Iterable, Mapping, Optional

OFFLINE_VAR = "HF_HUB_OFFLINE"  # huggingface_hub: "1" = no HTTP call, files from the local cache only
MODULES_VAR = "HF_MODULES_CACHE"  # transformers: where trust_remote_code writes the model's Python modules
HOME_VAR = "HF_HOME"  # the default of HF_MODULES_CACHE is $HF_HOME/modules
VLLM_VAR = "VLLM_CACHE_ROOT"
TRITON_VAR = "TRITON_CACHE_DIR"
VARS = (VLLM_VAR, TRITON_VAR)
SUBDIR = "compile-cache"
KEY_LENGTH = 12
RUNTIMES = ("vllm",)  # the runtimes whose workers read VLLM_CACHE_ROOT (TensorRT-LLM: see the module docstring)


def container_gpus(container: dict) -> int:
    """The GPUs a container asks for (its nvidia.com/gpu limit, else request; 0 for none)."""
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        n = (res.get(part) or {}).get("nvidia.com/gpu")
        if n:
            return int(n)
    return 0


def _configmap_names(container: dict, pod: dict) -> list[str]:
    names = {
        e["valueFrom"]["configMapKeyRef"]["name"]
        for e in container.get("env") or []
        if isinstance(e.get("valueFrom"), dict) and "configMapKeyRef" in e["valueFrom"]
    }
    names |= {s["configMapRef"]["name"] for s in container.get("envFrom") or [] if "configMapRef" in s}
    mounted = {m.get("name") for m in container.get("volumeMounts") or []}
    names |= {v["configMap"]["name"] for v in pod.get("volumes") or [] if "configMap" in v and v.get("name") in mounted}
    return sorted(names)


def cache_key(container: dict, pod: dict, spec_env: Iterable[dict], gpu: str, configmaps: Mapping[str, Optional[dict]]) -> str:
    """The short hash of what decides a container's compiled artifacts (the two cache variables left out)."""

    def env(entries):
        return [e for e in entries or [] if e.get("name") not in VARS]

    facts = {
        "image": container.get("image"),
        "command": container.get("command"),
        "args": container.get("args"),
        "env": env(container.get("env")),
        "envFrom": container.get("envFrom"),
        "specEnv": env(spec_env),
        "configMaps": {n: configmaps.get(n) for n in _configmap_names(container, pod)},
        "gpu": gpu,
        "gpus": container_gpus(container),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:KEY_LENGTH]


def cache_dir(mount: str, target_id: str, component: str, key: str) -> str:
    return f"{mount.rstrip('/')}/{SUBDIR}/{target_id}/{component}/{key}"


def _cache_volume(container: dict, mount: str) -> Optional[dict]:
    return next((m for m in container.get("volumeMounts") or [] if m.get("mountPath", "").rstrip("/") == mount.rstrip("/")), None)


def _mounted_cache(container: dict, mount: str) -> dict:
    """The model-cache mount of a container ``worker_containers`` gave (every one of them has it)."""
    vol = _cache_volume(container, mount)
    assert vol is not None, f"container {container.get('name')!r} does not mount {mount}"
    return vol


def writable_mount(volume: str, mount: str, entry_dir: str) -> dict:
    """The mount added where the model cache is read-only: the container's own compile-cache entry ``entry_dir``
    (``cache_dir``, under ``mount``), writable, at the path its two variables point under."""
    sub = entry_dir[len(mount.rstrip("/")) + 1 :]
    assert entry_dir.startswith(mount.rstrip("/") + "/") and sub.startswith(SUBDIR + "/"), (entry_dir, mount)
    return {"name": volume, "mountPath": entry_dir, "subPath": sub}


def is_writable_mount(m: dict) -> bool:
    """Whether ``m`` is a compile-cache entry mount ``writable_mount`` made."""
    return str(m.get("subPath", "")).startswith(SUBDIR + "/")


def _pod_mounts(pod: dict, volume: str) -> Iterable[dict]:
    """Every ``volumeMounts`` entry of ``volume`` in the pod's init containers and containers."""
    for part in ("initContainers", "containers"):
        for c in pod.get(part) or []:
            for m in c.get("volumeMounts") or []:
                if m.get("name") == volume:
                    yield m


def _claim_source(pod: dict, volume: str) -> Optional[dict]:
    """The ``persistentVolumeClaim`` source of the pod's volume ``volume`` (None: no such volume, or not a claim)."""
    for v in pod.get("volumes") or []:
        if v.get("name") == volume:
            source = v.get("persistentVolumeClaim")
            return source if isinstance(source, dict) else None
    return None


def release_claim_source(pod: dict, volume: str) -> bool:
    """Make the pod's compile-cache entry mounts of ``volume`` writable where the claim source forces every mount
    read-only: drop ``readOnly`` from the ``persistentVolumeClaim`` source and mark every other mount of the volume
    ``readOnly: true`` (module docstring). True when the source was changed."""
    source = _claim_source(pod, volume)
    if source is None or source.get("readOnly") is not True:
        return False
    for m in _pod_mounts(pod, volume):
        if not is_writable_mount(m):
            m["readOnly"] = True
    del source["readOnly"]
    return True


def effectively_read_only(pod: dict, m: dict) -> bool:
    """Whether the kubelet mounts ``m`` read-only: its own flag, or a read-only claim source of its volume."""
    source = _claim_source(pod, str(m.get("name")))
    return bool(m.get("readOnly")) or (source is not None and source.get("readOnly") is True)


def worker_containers(dgd: dict, runtime: str, mount: str) -> Iterable[tuple[dict, dict, dict]]:
    """``(component, pod spec, container)`` of every vLLM GPU worker container that mounts the model cache."""
    if runtime not in RUNTIMES:
        return
    for comp in dgd["spec"]["components"]:
        pod = (comp.get("podTemplate") or {}).get("spec") or {}
        for c in pod.get("containers") or []:
            if container_gpus(c) and _cache_volume(c, mount) is not None:
                yield comp, pod, c


def _env_entry(container: dict, spec_env: Iterable[dict], name: str) -> Optional[dict]:
    """The container's own env entry for ``name``, else the DGD's ``spec.env`` one (None: unset)."""
    for entries in (container.get("env") or [], spec_env or []):
        entry = next((e for e in entries if e.get("name") == name), None)
        if entry is not None:
            return entry
    return None


def _literal(entry: Optional[dict]) -> Optional[str]:
    """An env entry's literal value (None: unset, or set from a reference this plan cannot read)."""
    return None if entry is None or "value" not in entry else str(entry["value"])


def _under(path: str, mount: str) -> bool:
    return path.rstrip("/") == mount.rstrip("/") or path.startswith(mount.rstrip("/") + "/")


def model_read_only(container: dict, spec_env: Iterable[dict], mount: str) -> bool:
    """Whether the recipe lets the container read the model cache at ``mount`` without writing to it (module docstring):
    offline hub reads, and transformers' remote-code module cache off the volume."""
    if _literal(_env_entry(container, spec_env, OFFLINE_VAR)) != "1":
        return False
    modules = _literal(_env_entry(container, spec_env, MODULES_VAR))
    if modules is None:
        home = _env_entry(container, spec_env, HOME_VAR)
        if home is not None and "value" not in home:
            return False  # HF_HOME from a reference: where the modules go is unknown
        modules = f"{_literal(home) or '~/.cache/huggingface'}/modules"
    return not _under(modules, mount)


def expected(
    dgd: dict, target_id: str, runtime: str, gpu: str, mount: str, configmaps: Mapping[str, Optional[dict]]
) -> dict[tuple[str, str], dict]:
    """(component, container) -> the env values, the mount (or None) and whether the model-cache mount is made read-only,
    as the step sets them, computed from the DGD as it is (the key leaves the two variables out, so the DGD before or
    after the step gives the same)."""
    out = {}
    spec_env = dgd["spec"].get("env") or []
    for comp, pod, c in worker_containers(dgd, runtime, mount):
        base = cache_dir(mount, target_id, comp["name"], cache_key(c, pod, spec_env, gpu, configmaps))
        vol = _mounted_cache(c, mount)
        read_only = model_read_only(c, spec_env, mount)
        out[(comp["name"], c["name"])] = {
            "env": {VLLM_VAR: f"{base}/vllm", TRITON_VAR: f"{base}/triton"},
            "mount": writable_mount(vol["name"], mount, base) if effectively_read_only(pod, vol) or read_only else None,
            "read_only": read_only,
        }
    return out


def apply_compile_cache(
    dgd: dict, target_id: str, runtime: str, gpu: str, mount: str, configmaps: Mapping[str, Optional[dict]]
) -> list[str]:
    """Point every vLLM worker container's compile caches at the model-cache volume (in place); the
    ``component/container`` names changed, in order."""
    plan = expected(dgd, target_id, runtime, gpu, mount, configmaps)
    changed = []
    for comp, pod, c in list(worker_containers(dgd, runtime, mount)):
        want = plan[(comp["name"], c["name"])]
        env = c.setdefault("env", [])
        for name, value in want["env"].items():
            entry = next((e for e in env if e.get("name") == name), None)
            if entry is None:
                env.append({"name": name, "value": value})
            else:
                entry.clear()
                entry.update({"name": name, "value": value})
        if want["read_only"]:
            _mounted_cache(c, mount)["readOnly"] = True
        if want["mount"] and want["mount"] not in c["volumeMounts"]:
            c["volumeMounts"].append(copy.deepcopy(want["mount"]))
            release_claim_source(pod, want["mount"]["name"])
        changed.append(f"{comp['name']}/{c['name']}")
    return changed


def without_compile_cache(
    rendered: dict, upstream: dict, candidates: Iterable[tuple[str, str, str, str]], configmaps: Mapping[str, Optional[dict]]
) -> tuple[dict, int]:
    """A rendered DGD with exactly the step's additions taken back out where upstream lacks them, and the number of
    containers they were taken from. ``candidates``: ``(target id, runtime, gpu, mount)`` of the catalog targets that
    render this DGD; the additions must be those of one of them (the same paths, the same key), or nothing is taken
    out. A replaced entry gets upstream's entry back; anything else stays and shows as a difference."""
    if rendered.get("kind") != "DynamoGraphDeployment" or upstream.get("kind") != "DynamoGraphDeployment":
        return rendered, 0
    up_components = {comp.get("name"): comp for comp in (upstream.get("spec") or {}).get("components") or []}
    up_containers = {
        (comp.get("name"), c.get("name")): c
        for comp in (upstream.get("spec") or {}).get("components") or []
        for c in ((comp.get("podTemplate") or {}).get("spec") or {}).get("containers") or []
    }
    for tid, runtime, gpu, mount in candidates:
        out = copy.deepcopy(rendered)
        want = expected(out, tid, runtime, gpu, mount, configmaps)
        count = 0
        for comp, _pod, c in worker_containers(out, runtime, mount):
            w = want[(comp["name"], c["name"])]
            env = c.get("env") or []
            if not all({"name": k, "value": v} in env for k, v in w["env"].items()):
                continue
            if w["mount"] and w["mount"] not in (c.get("volumeMounts") or []):
                continue
            vol = _mounted_cache(c, mount)
            if w["read_only"] and vol.get("readOnly") is not True:
                continue
            uc = up_containers.get((comp["name"], c["name"]), {})
            up_env = uc.get("env") or []
            for k, v in w["env"].items():
                i = env.index({"name": k, "value": v})
                # Upstream's entry of that name at the same place is the one the step replaced; otherwise it was added.
                if i < len(up_env) and up_env[i].get("name") == k:
                    env[i] = copy.deepcopy(up_env[i])
                else:
                    del env[i]
            if not env and "env" not in uc:
                del c["env"]
            if w["mount"] and w["mount"] not in (uc.get("volumeMounts") or []):
                c["volumeMounts"].remove(w["mount"])
            if w["read_only"]:  # upstream's readOnly of that mount back (absent where upstream has none)
                up_vol = _cache_volume(uc, mount) or {}
                if "readOnly" in up_vol:
                    vol["readOnly"] = up_vol["readOnly"]
                else:
                    vol.pop("readOnly", None)
            count += 1
        if count:
            for comp in out["spec"]["components"]:
                _restore_claim_source(comp, up_components.get(comp.get("name"), {}))
            return out, count
    return rendered, 0


def _restore_claim_source(comp: dict, upstream_comp: dict) -> None:
    """Undo ``release_claim_source`` in one component (its compile-cache mounts already taken out): upstream's read-only
    claim source back, and the mounts' ``readOnly`` as upstream has them, where every mount of the volume is read-only."""
    pod = (comp.get("podTemplate") or {}).get("spec") or {}
    up_pod = (upstream_comp.get("podTemplate") or {}).get("spec") or {}
    up_sources = {v.get("name"): v.get("persistentVolumeClaim") or {} for v in up_pod.get("volumes") or []}
    up_mounts = {
        (c.get("name"), m.get("name"), m.get("mountPath")): m
        for part in ("initContainers", "containers")
        for c in up_pod.get(part) or []
        for m in c.get("volumeMounts") or []
    }
    for v in pod.get("volumes") or []:
        source = v.get("persistentVolumeClaim")
        if not isinstance(source, dict) or "readOnly" in source or up_sources.get(v.get("name"), {}).get("readOnly") is not True:
            continue
        if not all(m.get("readOnly") is True for m in _pod_mounts(pod, v["name"])):
            continue
        source["readOnly"] = True
        for part in ("initContainers", "containers"):
            for c in pod.get(part) or []:
                for m in c.get("volumeMounts") or []:
                    um = up_mounts.get((c.get("name"), m.get("name"), m.get("mountPath")))
                    if m.get("name") == v["name"] and um is not None and "readOnly" not in um:
                        m.pop("readOnly", None)


def recipe_values(container: dict) -> dict[str, Any]:
    """The container's own entries of the two variables (None where it has none)."""
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    return {k: env.get(k) for k in VARS}
