"""The pods this program adds beside the DGD (model download / validate Jobs, the AIPerf benchmark Job) run hardened:
non-root, no privilege escalation, every capability dropped, the runtime's default seccomp profile and a read-only
root filesystem. These are the controls of the Kubernetes Pod Security Standards "restricted" profile
(https://kubernetes.io/docs/concepts/security/pod-security-standards: non-root, allowPrivilegeEscalation false,
capabilities drop ALL, seccompProfile RuntimeDefault), plus a read-only root filesystem.

What the images need (so that hardening does not break them):
- ``python:3.10-slim`` (Ultra and Motif-3 download/validate Jobs) has no USER (root) and ``pip install``s
  huggingface_hub at run time into /usr/local (docker-library/python 3.10/slim-bookworm/Dockerfile @00dce756:
  ``FROM debian:bookworm-slim``, ``ENV PATH /usr/local/bin:$PATH``, no USER). As uid 1000 pip falls back to a user
  install under ``$HOME/.local``, so HOME points at a writable emptyDir on /tmp, and ``$HOME/.local/bin`` goes first
  on PATH for the ``hf`` command Motif-3 runs (the rest of PATH is the image's: /usr/local/bin, then Debian's default).
- Every Job writes the model into the cache volume (HF_HOME is on it) and nothing else but temporary files: /tmp is
  an emptyDir. The cache volume is writable by uid 1000: EFS access points (this project's StorageClass,
  provisioningMode efs-ap) do every file operation as the access point's POSIX user ("The POSIX user ID used for
  all file system operations using this access point", AWS::EFS::AccessPoint PosixUser, CloudFormation user guide),
  and fsGroup makes volumes that support ownership management group-writable.

The DGD's workers keep exactly what upstream sets (fidelity), but for their compile caches (stacks/serving/compile_cache.py). The model-cache Jobs are compared with upstream too:
``stacks.cli.fidelity`` allows exactly the additions listed here and, with ``dynamo:modelRevision``, the revision pin
each download Job records (``stacks.catalog.builders.RevisionPin``), nothing else.
"""

from __future__ import annotations

import copy
from typing import Any

UID = 1000
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": UID,
    "runAsGroup": UID,
    "fsGroup": UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}
SCRATCH_VOLUME = {"name": "tmp", "emptyDir": {}}
SCRATCH_MOUNT = {"name": "tmp", "mountPath": "/tmp"}
HOME_ENV = {"name": "HOME", "value": "/tmp"}
# python:3.10-slim's PATH (ENV PATH /usr/local/bin:$PATH on debian:bookworm-slim's default) behind the user install's bin.
PYTHON_SLIM_PATH_ENV = {"name": "PATH", "value": "/tmp/.local/bin:/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"}


def _pip_user_install(image: str) -> bool:
    return image.split("@")[0].split(":")[0] in ("python", "docker.io/library/python", "library/python")


def added_env(container: dict) -> list[dict]:
    return [HOME_ENV] + ([PYTHON_SLIM_PATH_ENV] if _pip_user_install(container.get("image", "")) else [])


def harden_pod(pod: dict) -> dict:
    """The pod spec with the hardening added (in place, and returned). Fields upstream already sets keep their value
    when it is as strict (e.g. Motif-3's container seccompProfile); the listed ones are set."""
    sc = pod.setdefault("securityContext", {})
    for k, v in POD_SECURITY_CONTEXT.items():
        sc[k] = copy.deepcopy(v)
    names = {v.get("name") for v in pod.get("volumes") or []}
    if SCRATCH_VOLUME["name"] not in names:
        pod.setdefault("volumes", []).append(copy.deepcopy(SCRATCH_VOLUME))
    for c in pod.get("containers") or []:
        csc = c.setdefault("securityContext", {})
        for k, v in CONTAINER_SECURITY_CONTEXT.items():
            csc[k] = copy.deepcopy(v)
        if not any(m.get("mountPath") == "/tmp" for m in c.get("volumeMounts") or []):
            c.setdefault("volumeMounts", []).append(copy.deepcopy(SCRATCH_MOUNT))
        have = {e.get("name") for e in c.get("env") or []}
        for e in added_env(c):
            if e["name"] not in have:
                c.setdefault("env", []).append(copy.deepcopy(e))
    return pod


def harden_job(job: dict) -> dict:
    harden_pod(job["spec"]["template"]["spec"])
    return job


def hardening_problems(pod: dict) -> list[str]:
    """What a pod spec lacks of the hardening (empty when it has all of it)."""
    out = []
    sc = pod.get("securityContext") or {}
    for k, v in POD_SECURITY_CONTEXT.items():
        if sc.get(k) != v:
            out.append(f"securityContext.{k}: {sc.get(k)!r}, want {v!r}")
    for c in pod.get("containers") or []:
        csc = c.get("securityContext") or {}
        for k, v in CONTAINER_SECURITY_CONTEXT.items():
            if csc.get(k) != v:
                out.append(f"containers[{c.get('name')}].securityContext.{k}: {csc.get(k)!r}, want {v!r}")
    return out


def without_hardening(rendered: dict, upstream: dict) -> dict:
    """A rendered Job with exactly the hardening additions taken out where upstream lacks them, for the fidelity
    comparison. An addition with another value, or anything not listed, stays and shows as a difference."""
    if rendered.get("kind") != "Job" or upstream.get("kind") != "Job":
        return rendered
    out = copy.deepcopy(rendered)
    try:
        pod, up = out["spec"]["template"]["spec"], upstream["spec"]["template"]["spec"]
    except (KeyError, TypeError):
        return out
    _strip(pod, up, "securityContext", POD_SECURITY_CONTEXT)
    if isinstance(pod.get("volumes"), list) and SCRATCH_VOLUME not in (up.get("volumes") or []):
        pod["volumes"] = [v for v in pod["volumes"] if v != SCRATCH_VOLUME]
        if not pod["volumes"] and "volumes" not in up:
            del pod["volumes"]
    up_by_name = {c.get("name"): c for c in up.get("containers") or []}
    for c in pod.get("containers") or []:
        uc = up_by_name.get(c.get("name"), {})
        _strip(c, uc, "securityContext", CONTAINER_SECURITY_CONTEXT)
        if isinstance(c.get("volumeMounts"), list) and SCRATCH_MOUNT not in (uc.get("volumeMounts") or []):
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m != SCRATCH_MOUNT]
            if not c["volumeMounts"] and "volumeMounts" not in uc:
                del c["volumeMounts"]
        if isinstance(c.get("env"), list):
            up_env = uc.get("env") or []
            extra = [e for e in added_env(c) if e not in up_env]
            c["env"] = [e for e in c["env"] if e not in extra]
            if not c["env"] and "env" not in uc:
                del c["env"]
    return out


def _strip(obj: dict, up: dict, key: str, added: dict) -> None:
    sc = obj.get(key)
    if not isinstance(sc, dict):
        return
    usc = up.get(key) or {}
    for k, v in added.items():
        if k not in usc and sc.get(k) == v:
            del sc[k]
    if not sc and key not in up:
        del obj[key]
