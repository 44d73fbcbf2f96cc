"""GPU workers' startup probes: readiness seen within seconds, the same start-up budget.

Upstream's recipes probe their GPU workers' start every 30 or 60 s (``httpGet /live`` on the system port 9090, e.g.
``periodSeconds: 30, timeoutSeconds: 20, failureThreshold: 120``), so a worker that is up is noticed up to one period
later. ``apply_fast_startup_probe`` rewrites the ``startupProbe`` of every GPU worker container (one that requests
``nvidia.com/gpu``; frontends and other CPU containers are left alone) whose ``periodSeconds`` is above
``FAST_PERIOD_SECONDS``:

    periodSeconds     FAST_PERIOD_SECONDS (5)
    timeoutSeconds    min(timeoutSeconds, 5)
    failureThreshold  ceil(periodSeconds x failureThreshold / 5)

and nothing else (``httpGet``, ``initialDelaySeconds``, ``successThreshold``, a probe-level grace period stay).

Why the total budget is the same:
- Kubernetes, "Configure Liveness, Readiness and Startup Probes"
  (https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/, "Protect
  slow starting containers with startup probes"): "The trick is to set up a startup probe with the same command, HTTP
  or TCP check, with a ``failureThreshold * periodSeconds`` long enough to cover the worst case startup time", and
  "Thanks to the startup probe, the application will have a maximum of 5 minutes (30 * 10 = 300s) to finish its
  startup." The same page, "Configure Probes": ``failureThreshold``: "After a probe fails ``failureThreshold`` times
  in a row, Kubernetes considers that the overall check has failed"; ``periodSeconds``: "How often (in seconds) to
  perform the probe"; ``timeoutSeconds``: "Number of seconds after which the probe times out".
- So the kubelet counts failures by attempts, not by time; an attempt lasts at most ``timeoutSeconds``; attempts start
  every ``periodSeconds`` (the kubelet's prober worker, kubernetes/kubernetes ``pkg/kubelet/prober/worker.go``
  ``run``, runs each probe to its end, then waits for the next tick of a ``periodSeconds`` ticker: an attempt longer
  than the period delays the next one). With the timeout cut to the period, every attempt ends within its period,
  attempts start every 5 s even when each one times out, and the ``failureThreshold``-th failure comes no later than
  ``initialDelaySeconds`` + 5 x the new threshold = ``initialDelaySeconds`` + the old period x threshold (the
  catalog's budgets, 1800 and 3600 s, are multiples of 5: exactly the same). ``initialDelaySeconds`` is not part of
  the budget computed here and is kept.
- What changes: a ready worker is seen at most 5 s after it answers (upstream: 30 or 60 s). The price: an answer that
  takes more than 5 s is now a failed attempt (upstream waited up to 20 s); during start-up that only postpones the
  success to a later attempt, but a worker whose probe endpoint always answered in 5-20 s would never pass. The
  kubelet sends 6 or 12 times as many probe requests to each starting worker (one small HTTP GET every 5 s).
- Absent fields take the API defaults (``periodSeconds`` 10, ``timeoutSeconds`` 1, ``failureThreshold`` 3: the same
  page, "Configure Probes"); every catalog worker probe sets all three.

Opt in per stack entry: ``dynamo:fastStartupProbe: {enabled: true}``; off, upstream's probes are kept.
``stacks.cli.fidelity`` takes exactly this change back out (``without_fast_startup_probe``: where the rendered probe
is ``fast_probe`` of upstream's, upstream's comes back) and counts the containers that carry it.
"""

from __future__ import annotations

import copy
import math
from typing import Iterable, Optional

from stacks.serving.compile_cache import container_gpus

FAST_PERIOD_SECONDS = 5
# The Probe API's defaults for absent fields (Kubernetes docs, "Configure Probes").
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_TIMEOUT_SECONDS = 1
DEFAULT_FAILURE_THRESHOLD = 3


def budget_seconds(probe: dict) -> int:
    """periodSeconds x failureThreshold: the time a startup probe allows (initialDelaySeconds not counted)."""
    return int(probe.get("periodSeconds", DEFAULT_PERIOD_SECONDS)) * int(probe.get("failureThreshold", DEFAULT_FAILURE_THRESHOLD))


def fast_probe(probe: dict) -> Optional[dict]:
    """The probe with a 5 s period and the same budget, or None where its period is 5 s or less already."""
    period = int(probe.get("periodSeconds", DEFAULT_PERIOD_SECONDS))
    if period <= FAST_PERIOD_SECONDS:
        return None
    out = copy.deepcopy(probe)
    out["periodSeconds"] = FAST_PERIOD_SECONDS
    timeout = int(probe.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS))
    if "timeoutSeconds" in probe or timeout > FAST_PERIOD_SECONDS:
        out["timeoutSeconds"] = min(timeout, FAST_PERIOD_SECONDS)
    out["failureThreshold"] = math.ceil(budget_seconds(probe) / FAST_PERIOD_SECONDS)
    return out


def worker_containers(dgd: dict) -> Iterable[tuple[dict, dict]]:
    """``(component, container)`` of every GPU container of the DGD that has a startupProbe."""
    for comp in (dgd.get("spec") or {}).get("components") or []:
        for c in ((comp.get("podTemplate") or {}).get("spec") or {}).get("containers") or []:
            if container_gpus(c) and isinstance(c.get("startupProbe"), dict):
                yield comp, c


def apply_fast_startup_probe(dgd: dict) -> list[str]:
    """Give every GPU worker container's startupProbe a 5 s period within the same budget (in place); the
    ``component/container`` names changed, in order."""
    changed = []
    for comp, c in worker_containers(dgd):
        fast = fast_probe(c["startupProbe"])
        if fast is not None:
            c["startupProbe"] = fast
            changed.append(f"{comp.get('name')}/{c.get('name')}")
    return changed


def without_fast_startup_probe(rendered: dict, upstream: dict) -> tuple[dict, int]:
    """A rendered DGD with upstream's startupProbe back in every GPU container whose probe is exactly ``fast_probe`` of
    upstream's, and the number of such containers; any other probe stays and shows as a difference."""
    if rendered.get("kind") != "DynamoGraphDeployment" or upstream.get("kind") != "DynamoGraphDeployment":
        return rendered, 0
    up = {
        (comp.get("name"), c.get("name")): c
        for comp in (upstream.get("spec") or {}).get("components") or []
        for c in ((comp.get("podTemplate") or {}).get("spec") or {}).get("containers") or []
    }
    out = copy.deepcopy(rendered)
    count = 0
    for comp, c in worker_containers(out):
        probe = (up.get((comp.get("name"), c.get("name"))) or {}).get("startupProbe")
        if isinstance(probe, dict) and fast_probe(probe) == c["startupProbe"]:
            c["startupProbe"] = copy.deepcopy(probe)
            count += 1
    return (out, count) if count else (rendered, 0)
