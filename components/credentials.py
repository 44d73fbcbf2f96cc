"""Before any resource: do the cluster credentials work? One cheap authenticated read (``kubectl get --raw /api``,
the API server's discovery document, which Kubernetes' default RBAC grants to authenticated users only through
``system:discovery``; an invalid or expired token is refused with 401 before authorization:
https://kubernetes.io/docs/reference/access-authn-authz/authentication/ "rejected with 401"), run on every ``up`` and
``preview``. Without it, a stack whose objects are all unchanged exits 0 on an expired token: the provider makes no
call when nothing differs, so a preview gate stays green until the day a change is needed.

A kubeconfig file is read where it lies; the secret ``dynamo:kubeconfig`` is written to a private temporary file for
kubectl and removed afterwards. Neither is ever logged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from typing import Iterator, Optional

from stacks.config.keys import NS

TIMEOUT_S = 15


def mocked() -> bool:
    """Whether the program runs under the SDK's mocks (unit tests): there is no cluster to ask."""
    from pulumi.runtime.mocks import MockMonitor
    from pulumi.runtime.settings import get_monitor

    return isinstance(get_monitor(), MockMonitor)


@contextmanager
def _kubeconfig_file(path: Optional[str], text: Optional[str]) -> Iterator[str]:
    """The kubeconfig to hand kubectl: the file at ``path`` where it lies, or ``text`` in a private temporary file that is
    removed afterwards."""
    if path is not None:
        yield path
        return
    fd, tmp = tempfile.mkstemp(prefix="dynamo-kubeconfig-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text or "")
        yield tmp
    finally:
        os.unlink(tmp)


def credentials_problem(
    kubeconfig: Optional[str], context: Optional[str], source: str, path: Optional[str] = None, kubectl: Optional[str] = None
) -> Optional[str]:
    """None when an authenticated read works; else the one-line reason with the fix. The kubeconfig is the file at
    ``path`` (read where it lies, so its relative certificate and exec paths resolve as kubectl resolves them), or the
    text ``kubeconfig`` (written to a private temporary file for the check); ``source`` names it in the message."""
    kubectl = kubectl or shutil.which("kubectl")
    if kubectl is None:
        import pulumi

        pulumi.log.warn(
            f"{NS}:cluster: kubectl is not on PATH, so the credentials of {source} were not checked before the "
            f"update; an expired token shows only when something changes"
        )
        return None
    with _kubeconfig_file(path, kubeconfig) as config:
        cmd = [
            kubectl,
            "--kubeconfig",
            config,
            *(["--context", context] if context else []),
            "get",
            "--raw",
            "/api",
            f"--request-timeout={TIMEOUT_S}s",
        ]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S + 5)
        except (OSError, subprocess.SubprocessError) as e:
            return _message(source, context, f"kubectl did not answer: {e}")
        if r.returncode == 0:
            return None
        lines = [x for x in r.stderr.replace(config, source).splitlines() if x.strip()]
        return _message(source, context, lines[-1] if lines else f"kubectl exited {r.returncode}")


def _message(source: str, context: Optional[str], seen: str) -> str:
    ctx = f" (context {context})" if context else " (its current context)"
    return (
        f"{NS}:cluster: the cluster credentials of {source}{ctx} do not work: an authenticated read "
        f"(`kubectl get --raw /api`) answered: {seen.strip()[:300]}. Nothing was changed; renew the credentials "
        f"(a new token, `aws eks update-kubeconfig`, or a fresh {NS}:kubeconfig) and run again"
    )


DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def storage_class_warnings(claims: list[tuple[str, str, Optional[str]]], classes: list[dict]) -> list[str]:
    """What a cache claim will wait for in vain, known before any resource: a claim naming a StorageClass the cluster
    lacks, or naming none on a cluster without a default class, is left Pending by the PersistentVolume controller
    until a matching PersistentVolume exists (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#class-1:
    "A PVC with its storageClassName set equal to "" is always interpreted to be requesting a PV with no class"; with no
    default class a claim without one binds only to a PV without a class). ``claims``: (config key, claim, class or
    None); ``classes``: the cluster's StorageClass objects."""
    names = sorted(c["metadata"]["name"] for c in classes)
    default = [
        c["metadata"]["name"] for c in classes if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
    ]
    have = f"the cluster's classes: {', '.join(names)}" if names else "the cluster has no StorageClass"
    out = []
    for key, claim, cls in claims:
        key = f"{key}." if ":" in key else f"{key}:"  # dynamo:serve[1].storage... or, single-target, dynamo:storage...
        if cls and cls not in names:
            out.append(
                f"{key}storage.className: {cls!r} is not a StorageClass of this cluster ({have}); the cache claim "
                f"{claim} stays Pending until a PersistentVolume of that class exists"
            )
        elif not cls and not default:
            out.append(
                f"{key}storage.className: not set, and the cluster has no default StorageClass ({have}); the cache "
                f"claim {claim} binds only to a PersistentVolume you create; set {key}storage.className"
            )
    return out


def cluster_storage_classes(
    kubeconfig_path: Optional[str], kubeconfig: Optional[str], context: Optional[str], kubectl: Optional[str] = None
) -> Optional[list[dict]]:
    """The cluster's StorageClasses (None when they cannot be read: the warning is then left out)."""
    import json

    kubectl = kubectl or shutil.which("kubectl")
    if kubectl is None:
        return None
    with _kubeconfig_file(kubeconfig_path, kubeconfig) as config:
        try:
            r = subprocess.run(
                [
                    kubectl,
                    "--kubeconfig",
                    config,
                    *(["--context", context] if context else []),
                    "get",
                    "storageclasses",
                    "-o",
                    "json",
                    f"--request-timeout={TIMEOUT_S}s",
                ],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S + 5,
            )
            return json.loads(r.stdout).get("items", []) if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
