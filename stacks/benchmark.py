"""Pure builder for the optional in-cluster benchmark (``dynamo:benchmark``): one AIPerf Job.

The Job runs the pinned AIPerf image (``images.aiperf`` in ``stacks/versions.yaml``, the image
upstream's Motif-3 perf Job runs) against the DGD's frontend Service with the target's published
perf row: its concurrency, and the input/output lengths of the workload the row was measured on
(``WORKLOADS``). It first waits for the frontend to list the served model (``/v1/models``, as the
upstream Ultra perf Job does), so it is correct with the DGD wait off too; Pulumi creates it after
the DGD (``components/benchmark.py``) and does not wait for it to finish (``skipAwait``: a run takes
many minutes).

Where the results land: AIPerf writes its artifacts to the model-cache volume
(``<mount>/aiperf/<dgd>/``, as upstream's Motif-3 Job does), and the Job prints
``profile_export_aiperf.json`` to its log between ``RESULT_BEGIN``/``RESULT_END``, so
``python -m stacks bench-report --stack NAME`` reads it with ``kubectl logs job/<name>`` (no
RBAC, no extra pod). The Job keeps its finished pod (no ``ttlSecondsAfterFinished``).

Known difference from the published figures: the recipes replay a Mooncake trace with ~90% KV
reuse (perf README), whose files are not in the images; this Job sends synthetic prompts of the
same mean lengths, which have no prefix reuse, so TTFT is expected to be higher than published.
bench-report says so next to the verdict.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .versions import image

RESULT_FILE = "profile_export_aiperf.json"
RESULT_BEGIN = "=== BEGIN profile_export_aiperf.json ==="
RESULT_END = "=== END profile_export_aiperf.json ==="
SKIP_AWAIT = "pulumi.com/skipAwait"


@dataclass(frozen=True)
class Workload:
    name: str
    isl: int
    osl: int
    source: str


WORKLOADS = {
    "agentic": Workload("agentic", 64000, 400, "64k input / 400 output tokens: recipes/nemotron-3.5-lightning/perf/README.md "
                        "(trace 64k_400_90kv_agent_new_noschedule_short_15perc), Ultra trace nim_turbo_64k_400_90kv_agent"),
    "chat": Workload("chat", 8000, 1000, "8k input / 1k output tokens: Ultra chat trace nim_turbo_8k_1k_70kv_chat "
                     "(recipes/nemotron-3-ultra/perf/README.md) and Motif-3's 8k_1k_70kv_chat trace (recipes/motif-3/perf/perf.yaml)"),
}
# Which workload each model's published rows use (where the target does not name one).
MODEL_WORKLOAD = {"nemotron-3.5-lightning": "agentic", "nemotron-3-ultra": "agentic", "motif-3": "chat"}


def workload_of(target: Any) -> Workload:
    return WORKLOADS[getattr(target, "workload", None) or MODEL_WORKLOAD.get(target.model, "chat")]


@dataclass
class BenchmarkPlan:
    job: dict
    job_name: str
    namespace: str
    model: str
    frontend_url: str
    concurrency: int
    request_count: int
    workload: Workload
    tolerance: float
    perf: Optional[Any] = None  # the target's stacks.catalog.model.Perf row, or None (report without a verdict)
    notes: dict = field(default_factory=dict)

    def parameters(self) -> dict:
        return {"concurrency": self.concurrency, "requestCount": self.request_count, "isl": self.workload.isl,
                "osl": self.workload.osl, "model": self.model, "url": self.frontend_url}


SCRIPT = r"""set -euo pipefail
python3 - <<'PY'
import json, os, sys, time, urllib.request
url, model = os.environ["FRONTEND_URL"] + "/v1/models", os.environ["MODEL"]
for attempt in range(720):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            if any(m.get("id") == model for m in json.load(r).get("data", [])):
                sys.exit(0)
    except Exception as e:
        print(f"waiting for {model} at {url}: {e}", flush=True)
    time.sleep(5)
sys.exit(f"{model} is not served at {url} after 60 min")
PY
mkdir -p "$ARTIFACT_DIR"
aiperf profile --model "$MODEL" --tokenizer "$MODEL" --url "$FRONTEND_URL" --endpoint-type chat --streaming \
  --concurrency "$CONCURRENCY" --request-count "$REQUEST_COUNT" \
  --isl "$ISL" --isl-stddev 0 --osl "$OSL" --osl-stddev 0 --extra-inputs ignore_eos:true --use-server-token-count \
  --random-seed 42 --request-timeout-seconds 1200 --ui-type none --artifact-dir "$ARTIFACT_DIR"
echo "$RESULT_BEGIN"
cat "$ARTIFACT_DIR/$RESULT_FILE"
echo
echo "$RESULT_END"
"""


def _served_model(dgd: dict) -> str:
    from .outputs import _served_model as served

    return served(dgd)


def build_benchmark(serving: Any, cfg: Any) -> BenchmarkPlan:
    """The AIPerf Job for a ``stacks.serving.ServingPlan``; ``cfg``: ``stacks.config.BenchmarkConfig``."""
    t, dgd = serving.target, serving.dgd
    ns, dgd_name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
    perf = t.perf
    concurrency = perf.concurrency if perf else 1
    requests = cfg.request_count or max(concurrency * 10, 100)
    wl = workload_of(t)
    model = _served_model(dgd)
    url = f"http://{dgd_name}-frontend.{ns}.svc.cluster.local:8000"
    job_name = f"aiperf-{dgd_name}"[:63].rstrip("-")
    # Run where the download Jobs run (the system nodes on EKS), with the cache volume they fill.
    dl = serving.jobs[0]["spec"]["template"]["spec"] if serving.jobs else {}
    dl_ctr = (dl.get("containers") or [{}])[0]
    mount = next((m["mountPath"] for m in dl_ctr.get("volumeMounts") or [] if m.get("name") == "shared-model-cache"), "/model-cache")
    artifact_dir = f"{mount}/aiperf/{dgd_name}"
    env = [
        {"name": "MODEL", "value": model},
        {"name": "FRONTEND_URL", "value": url},
        {"name": "CONCURRENCY", "value": str(concurrency)},
        {"name": "REQUEST_COUNT", "value": str(requests)},
        {"name": "ISL", "value": str(wl.isl)},
        {"name": "OSL", "value": str(wl.osl)},
        {"name": "ARTIFACT_DIR", "value": artifact_dir},
        {"name": "RESULT_FILE", "value": RESULT_FILE},
        {"name": "RESULT_BEGIN", "value": RESULT_BEGIN},
        {"name": "RESULT_END", "value": RESULT_END},
        {"name": "HF_HOME", "value": f"{mount}/aiperf/hf"},  # the tokenizer, fetched once onto the cache volume
    ]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{
            "name": "aiperf", "image": image("aiperf"), "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/bash", "-c", SCRIPT], "env": env,
            "envFrom": [{"secretRef": {"name": serving.hf_secret_name}}],  # gated tokenizers need the token
            "volumeMounts": [{"name": "shared-model-cache", "mountPath": mount}],
            "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
        }],
        "volumes": [{"name": "shared-model-cache", "persistentVolumeClaim": {"claimName": serving.claim_name}}],
    }
    for key in ("nodeSelector", "tolerations", "imagePullSecrets"):
        if dl.get(key):
            pod[key] = dl[key]
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": job_name, "namespace": ns,
            "labels": {"app.kubernetes.io/name": "aiperf", "app.kubernetes.io/part-of": "dynamo-benchmark",
                       "nvidia.com/dynamo-graph-deployment-name": dgd_name},
            "annotations": {SKIP_AWAIT: "true", "dynamo.nvidia.com/target": t.id,
                            "dynamo.nvidia.com/perf-source": perf.source if perf else "none"},
        },
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 6 * 3600, "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": "aiperf", "app.kubernetes.io/part-of": "dynamo-benchmark"}},
            "spec": pod}},
    }
    return BenchmarkPlan(job=job, job_name=job_name, namespace=ns, model=model, frontend_url=url, concurrency=concurrency,
                         request_count=requests, workload=wl, tolerance=cfg.tolerance, perf=perf,
                         notes={"workloadSource": wl.source})
