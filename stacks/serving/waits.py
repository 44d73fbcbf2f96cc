"""How `pulumi up` waits for the serving objects, and what it says when a wait ends badly (pure).

Why the download Job is awaited through ``pulumi.com/waitFor`` and not the provider's built-in Job
await (pulumi-kubernetes 4.25.0, ``provider/pkg/await``):

- ``job.go`` ``jobInitAwaiter.Await`` selects on ``time.After(timeout)`` *inside* its event loop, so
  every Job or Pod event re-arms the timer. Its events come from shared informers that resync every
  minute (``informers/factory.go``: ``resyncInterval := 1 * time.Minute``) and deliver every Job in
  the namespace, so a timeout of 60 s or more never fires: a Job that never completed kept `up`
  waiting past 1128 s with ``jobTimeout: 180s``. ``customTimeouts`` does not help: the engine only passes it to
  the provider as ``req.Timeout`` (``pkg/resource/deploy/step.go``), where it feeds the same timer.
- When an object carries ``pulumi.com/waitFor``, ``await.go`` ``Creation``/``Update`` skip the
  built-in awaiter and wait on the condition under ``context.WithTimeout(ctx, timeout)``: a fixed
  deadline that events do not move. The DGD's ``condition=Ready`` wait already used that path.
- The Job's condition is "finished": ``Complete`` or ``Failed`` is True (a JSONPath filter, RFC 9535
  ``||``). A failed download therefore ends the wait at once instead of running into the timeout,
  and the program turns a ``Failed`` status into an error (``job_failure``) before the DGD.
- The PVC wait (``untilCoreV1PersistentVolumeClaimReady``) polls with a fixed 5-minute limit of its
  own (``watcher.WatchUntil(pvcReady, 5*time.Minute)``); it ignores ``timeoutSeconds`` and
  ``customTimeouts``. It ends at once on a WaitForFirstConsumer class (Pending is its goal there).

Annotations: https://www.pulumi.com/docs/iac/clouds/kubernetes/guides/await-logic/ (``pulumi.com/waitFor``,
``pulumi.com/timeoutSeconds``, ``pulumi.com/skipAwait``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from stacks.config.keys import NS

WAIT_FOR = "pulumi.com/waitFor"
TIMEOUT = "pulumi.com/timeoutSeconds"
SKIP_AWAIT = "pulumi.com/skipAwait"

# The Job is finished when its Complete or its Failed condition is True (first match wins).
JOB_FINISHED = 'jsonpath={.status.conditions[?(@.type=="Complete" || @.type=="Failed")].status}=True'
DGD_READY = "condition=Ready"
PVC_TIMEOUT_SECONDS = 300  # fixed in pulumi-kubernetes 4.25.0 (awaiters.go), not configurable


def job_annotations(timeout_seconds: int) -> dict[str, str]:
    return {WAIT_FOR: JOB_FINISHED, TIMEOUT: str(timeout_seconds)}


def dgd_annotations(timeout_seconds: int) -> dict[str, str]:
    return {WAIT_FOR: DGD_READY, TIMEOUT: str(timeout_seconds)}


def custom_timeout(annotations: Mapping[str, str]) -> Optional[str]:
    """The ``customTimeouts`` create/update value matching an object's ``timeoutSeconds`` annotation
    (the provider prefers ``customTimeouts``, so the two must agree); None when nothing waits."""
    if annotations.get(SKIP_AWAIT) == "true" or TIMEOUT not in annotations:
        return None
    return f"{int(annotations[TIMEOUT])}s"


def human(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


@dataclass(frozen=True)
class Wait:
    """One wait `up` performs: on which object, for what, how long, and which config key sets it."""

    kind: str  # Job, DynamoGraphDeployment, PersistentVolumeClaim
    name: str
    namespace: str
    goal: str
    timeout_seconds: int
    key: str  # the config key that sets the timeout (or why it is fixed)

    @property
    def resource(self) -> str:
        return {"Job": "job", "DynamoGraphDeployment": "dynamographdeployment", "PersistentVolumeClaim": "pvc"}[self.kind]

    @property
    def describe(self) -> str:
        return f"kubectl describe {self.resource}/{self.name} -n {self.namespace}"

    def announce(self) -> str:
        """Printed when the program runs, before any wait: a cancelled or stuck `up` has the command on screen."""
        return (
            f"when it creates or updates {self.kind} {self.namespace}/{self.name}, `up` waits up to "
            f"{human(self.timeout_seconds)} ({self.key}) for it {self.goal}; to look meanwhile: {self.describe}"
        )

    def failed(self, errors: Iterable[str], seen: Optional[str] = None) -> str:
        """The message when the wait (or the create/update under it) failed; ``errors`` newest first."""
        errors = [e for e in errors if e]
        last = _provider_reason(errors[0]) if errors else "no error text"
        low = last.lower()
        timed_out = any(s in low for s in ("timed out", "timeout occurred", "deadline exceeded"))
        cancelled = not timed_out and any(s in low for s in ("context canceled", "operation was cancelled"))
        what = f"{self.kind} {self.namespace}/{self.name} {self.goal}"
        if timed_out:
            head = f"gave up waiting for {what} after {human(self.timeout_seconds)} ({self.key})"
        elif cancelled:
            head = f"stopped waiting for {what}: the update was cancelled"
        else:
            head = f"waiting for {what} failed"
        lines = [f"{head}.", f"  provider: {last}"]
        lines.append(f"  last seen: {seen}" if seen else "  last seen: not available here; the command below shows it")
        lines.append(f"  look: {self.describe}")
        if self.kind == "Job":
            lines.append(f"        kubectl logs job/{self.name} -n {self.namespace}")
        if timed_out or cancelled:
            hint = f" (raise {self.key} if it only needs longer)" if self.key.endswith("Timeout") else ""
            lines.append(f"  the object stays in the cluster; the next `pulumi up` waits for it again{hint}")
        return "\n".join(lines)


def _provider_reason(text: str) -> str:
    """The provider's reasons on one line, without the engine's multierror framing
    ("1 error occurred:" and "* " bullets) or the long URN preamble."""
    import re

    marker = "failed to fully initialize or become live: "
    lines = [ln.strip().removeprefix("* ").strip() for ln in text.splitlines()]
    lines = [
        ln.split(marker, 1)[1] if marker in ln else ln for ln in lines if ln and not re.fullmatch(r"\d+ errors? occurred:", ln)
    ]
    return "; ".join(lines) or text.strip()


def waits_of(plan: Any) -> dict[tuple[str, str], Wait]:
    """Every wait ``plan`` (a stacks.serving.ServingPlan) sets, by (kind, name)."""
    out: dict[tuple[str, str], Wait] = {}
    for job in plan.jobs:
        ann = job["metadata"].get("annotations") or {}
        if ann.get(SKIP_AWAIT) != "true":
            md = job["metadata"]
            out[("Job", md["name"])] = Wait(
                "Job",
                md["name"],
                md["namespace"],
                "to finish (condition Complete or Failed)",
                int(ann[TIMEOUT]),
                f"{NS}:wait.jobTimeout",
            )
    dgd_md = plan.dgd["metadata"]
    ann = dgd_md.get("annotations") or {}
    if ann.get(SKIP_AWAIT) != "true":
        out[("DynamoGraphDeployment", dgd_md["name"])] = Wait(
            "DynamoGraphDeployment",
            dgd_md["name"],
            dgd_md["namespace"],
            "to be Ready (condition Ready=True)",
            int(ann[TIMEOUT]),
            f"{NS}:wait.dgdTimeout",
        )
    pvc = plan.cache_pvc
    if pvc is not None and (pvc["metadata"].get("annotations") or {}).get(SKIP_AWAIT) != "true":
        md = pvc["metadata"]
        out[("PersistentVolumeClaim", md["name"])] = Wait(
            "PersistentVolumeClaim",
            md["name"],
            md["namespace"],
            "to be Bound (Pending is enough on a WaitForFirstConsumer class)",
            PVC_TIMEOUT_SECONDS,
            "fixed by pulumi-kubernetes; dynamo:wait.enabled: false skips it",
        )
    return out


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def conditions_text(status: Any) -> str:
    conds = _get(status, "conditions") or []
    parts = []
    for c in conds:
        text = f"{_get(c, 'type')}={_get(c, 'status')}"
        reason, message = _get(c, "reason"), _get(c, "message")
        if reason or message:
            text += f" ({': '.join(str(x) for x in (reason, message) if x)})"
        parts.append(text)
    return "; ".join(parts) if parts else "no conditions"


def job_seen(status: Any) -> str:
    counts = ", ".join(f"{k} {_get(status, k) or 0}" for k in ("active", "succeeded", "failed"))
    return f"pods {counts}; {conditions_text(status)}"


def job_failure(wait: Optional[Wait], name: str, namespace: str, status: Any, urn: str = "") -> Optional[str]:
    """The error for a download Job whose wait ended on ``Failed=True`` (None when it did not fail)."""
    for c in _get(status, "conditions") or []:
        if _get(c, "type") == "Failed" and str(_get(c, "status")) == "True":
            describe = wait.describe if wait else f"kubectl describe job/{name} -n {namespace}"
            retry = f"pulumi up --replace '{urn}'" if urn else "pulumi up --replace <the Job's URN>"
            return (
                f"download Job {namespace}/{name} failed: {job_seen(status)}.\n"
                f"  look: {describe}\n"
                f"        kubectl logs job/{name} -n {namespace}\n"
                f"  after fixing the cause (token, model access, storage), run the download again: {retry}"
            )
    return None


def seen_from_object(kind: str, obj: Mapping[str, Any]) -> str:
    """A one-line summary of a live object's status (``kubectl get -o json``) for the failure message."""
    status = obj.get("status") or {}
    if kind == "Job":
        return job_seen(status)
    if kind == "PersistentVolumeClaim":
        phase = status.get("phase") or "unknown"
        sc = (obj.get("spec") or {}).get("storageClassName")
        if sc:
            return f"phase {phase}, storage class {sc}"
        # The live claim names no class: the DefaultStorageClass admission plugin writes the cluster's default class into
        # a claim that names none, so none here means the cluster had no default class when the claim was created, and
        # the claim waits for a PersistentVolume without a class (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#class-1).
        return (
            f"phase {phase}, no storage class: the cluster has no default StorageClass, so nothing provisions this claim; "
            f"set {NS}:storage.className to a class of the cluster (kubectl get storageclass), or mark one default "
            f'(annotation storageclass.kubernetes.io/is-default-class: "true") and replace the claim'
        )
    state = status.get("state")
    return (f"state {state}; " if state else "") + conditions_text(status)
