"""Pure builder for the optional in-cluster benchmark (``dynamo:benchmark``): one AIPerf Job that runs the
published benchmark method of the target's model family.

What upstream runs, per family (``METHODS``; every flag below was checked against ``aiperf profile --help``
of aiperf 0.13.0, the version of ``images.aiperf``):

- Nemotron-3.5-Lightning: ``recipes/nemotron-3.5-lightning/perf/README.md`` (ai-dynamo/dynamo 182ecdfc, and
  b08b769c in shared/reference): replay of the 15% Mooncake agentic trace (3,541 rows, 64k input / 400 output,
  90% KV reuse) with ``--custom-dataset-type mooncake_trace --num-requests <Requests> --endpoint-type chat
  --streaming --use-server-token-count --extra-inputs ignore_eos:true --request-timeout-seconds 1200`` at the
  row's concurrency. That README names no warm-up; the Job upstream that replays this trace (its home,
  ``recipes/kimi-k2.6/perf/perf.yaml``, ai-dynamo/dynamo 01cadb10) first sends 5 synthetic 8000/1000-token
  requests at concurrency 1, and so does this Job.
- Nemotron-3-Ultra (Day-0 rows): ``recipes/nemotron-3-ultra/perf/perf.yaml`` (shared/reference, the Day-0
  "raw trace-replay" Job): the same warm-up, then the chat or agentic 15% trace with
  ``--prompt-input-tokens-block-size 512 --use-server-token-count --extra-inputs ignore_eos:true
  --random-seed 42 --request-timeout-seconds 1200 --workers-max <concurrency> --tokenizer-trust-remote-code``.
- Motif-3: ``recipes/motif-3/perf/perf.yaml`` (an AIPerf 0.13.0 config file): the chat 15% trace read
  sequentially with synthesis caps ``max_isl 262144`` / ``max_osl 12000``, a warm-up phase of 6 requests at
  concurrency 6, endpoint timeout 7200 s, server token counts and ``ignore_eos``.

Every family also passes ``--dataset-sampling-strategy sequential`` (the trace default, explicit so a request
count below the trace length replays its first N rows, as upstream's ``NUM_REQUESTS`` does) and
``--no-fixed-schedule`` (aiperf 0.13.0 switches a trace whose first row has a timestamp to fixed-schedule
mode, ``aiperf/config/flags/_converter_profiling.py`` ``_maybe_auto_promote_trace``, which would ignore the
concurrency the published row was measured at; the published traces are "noschedule", so this changes nothing
for them). With a trace, aiperf 0.13.0 loads only the first ``--request-count`` rows (its ``input_config``
records ``entries: N``). Ultra's block size 512 is also aiperf 0.13.0's ``mooncake_trace`` default
(``--prompt-input-tokens-block-size`` help), so Lightning's runs, which do not set it, use the same.

Upstream files read: ai-dynamo/dynamo ``recipes/nemotron-3.5-lightning/perf/README.md`` @182ecdfc,
``recipes/kimi-k2.6/perf/perf.yaml`` @01cadb10 and ``README.md`` @5324137f ("Change the SPECULATIVE_CONFIG variable
to point to key: speculative-config-synthetic" before benchmarking); wxsms/dynamo
``recipes/nemotron-3-ultra/perf/runner.configmap.yaml`` @42f43d22 (trace URL and SHA-256); the Day-0 Ultra
``perf/perf.yaml``, Motif-3 ``perf/perf.yaml`` and ``vllm/disagg-b200-chat/README.md`` at the commits listed in
shared/reference/dynamo-recipes/INDEX.md.

The published rows were measured with the synthetic speculative-decoding acceptance the recipes name "for
benchmarking" (vLLM: ConfigMap key ``speculative-config-synthetic``, ``recipes/nemotron-3.5-lightning/vllm/
README.md`` "Synthetic acceptance configuration"; TRT-LLM: env ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS``,
commented in ``trtllm/*-mtp/deploy.yaml``). ``speculative_mode`` reads which one a DGD serves with;
``synthetic_speculative_dgd`` returns the DGD switched to it; bench-report refuses to compare a run whose
DGD does not serve the way the row was measured.

The trace (Git LFS upstream, megabytes) is not in the image: the Job downloads it into the model-cache
volume (``<mount>/aiperf/traces/<file>``, ``TRACE_FILE``) from the URL pinned in ``stacks/registry/versions.yaml``
(``traces``) when the file is absent, checks its SHA-256, and refuses a request count above its row count.
A file already at ``TRACE_FILE`` is used as is (staged by hand, e.g. ``kubectl cp``); its SHA-256 and row
count go into the run manifest the Job prints, and bench-report refuses a trace that is not the pinned one. The
manifest also has the mean ``input_length`` / ``output_length`` of the rows the replay sends (the first
``REQUEST_COUNT``), computed from the file: bench-report compares the run's measured lengths with them, or, without
a manifest (``--file``), with the trace's published statistics (``TRACE_LENGTHS``).

Where the results land: AIPerf writes its artifacts to the model-cache volume (``<mount>/aiperf/<dgd>/``, as
upstream's Motif-3 Job does), and the Job prints the run manifest and ``profile_export_aiperf.json`` to its log
between markers, so ``python -m stacks bench-report --stack NAME`` reads them with ``kubectl logs
job/<name>`` (no RBAC, no extra pod). It first waits for the frontend to list the served model
(``/v1/models``, as upstream's perf Jobs do), so it is correct with the DGD wait off too; Pulumi creates
it after the DGD (its layer in the one layer shape, stacks/layers/benchmark.py) and does not wait for it to finish
(``skipAwait``).
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Optional

from stacks.config.keys import ConfigError
from stacks.registry.versions import image, versions
from stacks.serving.operator import LABEL_DGD_NAME

RESULT_FILE = "profile_export_aiperf.json"
RESULT_BEGIN = "=== BEGIN profile_export_aiperf.json ==="
RESULT_END = "=== END profile_export_aiperf.json ==="
MANIFEST_FILE = "run_manifest.json"
MANIFEST_BEGIN = "=== BEGIN run_manifest.json ==="
MANIFEST_END = "=== END run_manifest.json ==="
SKIP_AWAIT = "pulumi.com/skipAwait"
# A full 3,541-row replay with ignore_eos runs for hours: upstream's trace-replay Jobs allow 8 h
# (recipes/nemotron-3-ultra/perf/perf.yaml and recipes/kimi-k2.6/perf/perf.yaml: activeDeadlineSeconds 28800).
DEADLINE_SECONDS = 28800

# How a family's published "output tok/s/GPU" is defined (bench-report computes the measured figure the same way).
PER_GPU_FROM_USER = "concurrency x tok/s/user / GPUs"
PER_GPU_FROM_THROUGHPUT = "output_token_throughput / GPUs"

# The keys of the speculative-decoding config a vLLM recipe selects through env SPECULATIVE_CONFIG.
SPEC_KEY, SPEC_KEY_SYNTHETIC = "speculative-config", "speculative-config-synthetic"
# TRT-LLM's benchmark-only acceptance (commented in recipes/nemotron-3.5-lightning/trtllm/agg-*-mtp/deploy.yaml:
# "Benchmark-only synthetic acceptance length for max_draft_len=7. # - name: TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS").
TRTLLM_SYNTHETIC_ENV = "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"


@dataclass(frozen=True)
class Trace:
    """A pinned Mooncake trace (``stacks/registry/versions.yaml`` ``traces``)."""

    workload: str
    file: str
    url: str
    sha256: str
    rows: int
    isl: int  # nominal input / output shape the recipes state
    osl: int
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.file, *self.aliases)


@dataclass(frozen=True)
class LengthStat:
    """A published statistic of a pinned trace's per-request token lengths (``input_length`` / ``output_length``)."""

    stat: str  # "mean" | "p50"
    value: float
    source: str


# What is known offline about the lengths of each pinned trace (keyed by its SHA-256, so a statistic is tied to the
# file it was measured on). The traces are Git LFS files upstream and are not in this repository; these are the
# figures upstream published. bench-report compares a run's measured input/output lengths with them (the mean where
# it is published, else the median), and with the exact means of the replayed rows where the Job's manifest has them.
TRACE_LENGTHS: dict[str, dict[str, LengthStat]] = {
    # Agentic 15% trace (3,541 rows): the ai-dynamo/dynamo issue "recipes/deepseek-v4/perf: default benchmark Job
    # cannot complete within its own activeDeadlineSeconds" (ai-dynamo/dynamo, opened 2026-08-10),
    # table "Trace statistic (15% subset)": input_length p50 67,585; output_length p50 399, mean 2,455, total
    # 8,694,196 over 3,541 requests (8,694,196 / 3,541 = 2,455.3). The "64k input / 400 output" of the perf READMEs
    # are these medians. Consistent: recipes/qwen3.5-122b/perf/results_kv_vs_roundrobin_AL2.925.csv (same trace,
    # 3,411 completed) 640.29 output tok/s / 0.28 req/s = ~2,290 output tokens per completed request. The mean input
    # length is not published: the median stands for it.
    "f20d3f2bc83dd1306cda659fbe34e7c4d85ca5497626c98bc0b1c4d2211379d0": {
        "input": LengthStat("p50", 67585, "input_length median of the 3,541 rows (upstream's trace statistics)"),
        "output": LengthStat("mean", 8694196 / 3541, "8,694,196 output tokens / 3,541 rows (upstream's trace statistics)"),
    },
    # Chat 15% trace (1,805 rows): recipes/motif-3/perf/results/disagg-round-robin-b200-2026-10-08/comparison.csv
    # (ai-dynamo/dynamo 3fada0a9; provenance.json trace_sha256 = this pin), a full replay with server token counts and
    # ignore_eos: 1,767 successful requests (38 beyond the context limit rejected) with 50,854,753 prompt tokens and
    # 1,768,554 output tokens. Means over the successful rows, prompt tokens as Motif-3's chat template counts them.
    "b1221bca72b69f842897f339624306a84857f1b55ea0d866525f94d9ceb9b871": {
        "input": LengthStat(
            "mean",
            50854753 / 1767,
            "50,854,753 prompt tokens / 1,767 successful requests of a full replay "
            "(recipes/motif-3/perf/results/disagg-round-robin-b200-2026-10-08/comparison.csv)",
        ),
        "output": LengthStat(
            "mean",
            1768554 / 1767,
            "1,768,554 output tokens / 1,767 successful requests of a full replay "
            "(recipes/motif-3/perf/results/disagg-round-robin-b200-2026-10-08/comparison.csv)",
        ),
    },
}
# How far a run's measured length may be from the row's workload before bench-report refuses it (relative). The
# measured figure is over the successful requests only (rows beyond the context limit fail: 130 of the agentic
# trace's 3,541 for Lightning, and the qwen3.5 figures above put its completed rows ~7% under the all-rows mean), and
# input counts add the chat template's tokens; another workload is much further off (the two pinned traces differ
# by more than 2x in both lengths; tests/test_bench_report.py checks that this tolerance tells them apart).
LENGTH_TOLERANCE = 0.25


def trace(workload: str) -> Trace:
    t = versions()["traces"][workload]
    return Trace(
        workload, t["file"], t["url"], t["sha256"], int(t["rows"]), int(t["isl"]), int(t["osl"]), tuple(t.get("aliases") or ())
    )


@dataclass(frozen=True)
class Warmup:
    """``separate``: its own aiperf run of synthetic prompts before the replay; otherwise a warm-up phase of the
    replay itself (``--warmup-request-count`` / ``--warmup-concurrency``)."""

    requests: int
    concurrency: int
    separate: bool
    isl: Optional[int] = None
    osl: Optional[int] = None


@dataclass(frozen=True)
class Method:
    family: str
    source: str
    warmup: Optional[Warmup]
    request_timeout: int
    per_gpu: str  # PER_GPU_FROM_USER | PER_GPU_FROM_THROUGHPUT
    block_size: Optional[int] = None
    workers_max: bool = False  # --workers-max <concurrency>
    trust_remote_code: bool = False
    synthesis_max: Optional[tuple[int, int]] = None  # --synthesis-max-isl / --synthesis-max-osl
    default_workload: str = "agentic"


KIMI_WARMUP = Warmup(requests=5, concurrency=1, separate=True, isl=8000, osl=1000)
METHODS = {
    # Lightning's output tok/s/GPU = concurrency x tok/s/user / GPUs: every row of its perf README satisfies it
    # (tests/test_bench_report.py derives it from the catalog's rows).
    "nemotron-3.5-lightning": Method(
        "nemotron-3.5-lightning",
        "recipes/nemotron-3.5-lightning/perf/README.md (warm-up: recipes/kimi-k2.6/perf/perf.yaml)",
        KIMI_WARMUP,
        request_timeout=1200,
        per_gpu=PER_GPU_FROM_USER,
    ),
    # Ultra's "System output tok/s/GPU" = TPS/GPU (nemotron-3-ultra/README.md Day-0 table notes; the runner computes
    # tps_per_gpu = output_token_throughput / GPU_COUNT, recipes/nemotron-3-ultra/perf/runner.configmap.yaml).
    "nemotron-3-ultra": Method(
        "nemotron-3-ultra",
        "recipes/nemotron-3-ultra/perf/perf.yaml (Day-0 raw trace replay)",
        KIMI_WARMUP,
        request_timeout=1200,
        per_gpu=PER_GPU_FROM_THROUGHPUT,
        block_size=512,
        workers_max=True,
        trust_remote_code=True,
    ),
    # Motif-3: "Per-GPU system throughput divides by all ... participating GPUs" (motif-3/vllm/disagg-b200-chat/README.md);
    # its results table: Output tok/s/GPU = Output tok/s / GPUs.
    "motif-3": Method(
        "motif-3",
        "recipes/motif-3/perf/perf.yaml",
        Warmup(requests=6, concurrency=6, separate=False),
        request_timeout=7200,
        per_gpu=PER_GPU_FROM_THROUGHPUT,
        trust_remote_code=True,
        synthesis_max=(262144, 12000),
        default_workload="chat",
    ),
}

# Rows whose published run replayed fewer than the whole trace (the perf tables' "Requests" column; every other
# row replayed all of it). Lightning: recipes/nemotron-3.5-lightning/perf/README.md at b08b769 ("Requests 500") and
# at 70d2ef4 (PR #13021); Ultra Day-0: "H200 rows: 300-sample replay" (nemotron-3-ultra/README.md at bd126e06), taken
# as the trace's first 300 rows, which is what the Day-0 Job replays for NUM_REQUESTS=300 ("the first N trace rows").
# Targets without a row (e.g. Ultra's Refresh profiles) replay the whole trace at concurrency 1, for the record.
PARTIAL_ROWS = {
    ("nemotron-3.5-lightning/perf/README.md@b08b769", "nemotron-3.5-lightning/trtllm/agg-h100-mtp/deploy.yaml"): 500,
    ("nemotron-3.5-lightning/perf/README.md@70d2ef4", "nemotron-3.5-lightning/vllm/disagg-b200-dspark/deploy.yaml"): 500,
    ("nemotron-3.5-lightning/perf/README.md@70d2ef4", "nemotron-3.5-lightning/trtllm/agg-b200/deploy.yaml"): 500,
    ("nemotron-3.5-lightning/perf/README.md@70d2ef4", "nemotron-3.5-lightning/trtllm/agg-b200-mtp/deploy.yaml"): 500,
    ("nemotron-3.5-lightning/perf/README.md@70d2ef4", "nemotron-3.5-lightning/trtllm/agg-gb200/deploy.yaml"): 500,
    ("nemotron-3.5-lightning/perf/README.md@70d2ef4", "nemotron-3.5-lightning/trtllm/agg-gb200-mtp/deploy.yaml"): 500,
}
ULTRA_DAY0_PARTIAL = {"h200": 300}


def method_of(target: Any) -> Method:
    try:
        return METHODS[target.model]
    except KeyError:
        raise ConfigError(
            f"dynamo:benchmark: no published benchmark method for model {target.model!r}; known: {', '.join(sorted(METHODS))}"
        ) from None


def workload_of(target: Any) -> Trace:
    return trace(getattr(target, "workload", None) or method_of(target).default_workload)


def published_requests(target: Any) -> int:
    """How many trace rows the target's published run replayed (the whole trace unless the table says otherwise)."""
    rows = workload_of(target).rows
    perf = target.perf
    if perf is None:
        return rows
    if (perf.source, target.upstream) in PARTIAL_ROWS:
        return PARTIAL_ROWS[(perf.source, target.upstream)]
    if target.model == "nemotron-3-ultra" and target.gpu in ULTRA_DAY0_PARTIAL:
        return ULTRA_DAY0_PARTIAL[target.gpu]
    return rows


# --- speculative decoding: which acceptance the DGD serves with ------------------------------------------------


def _worker_containers(dgd: dict):
    for c in dgd["spec"]["components"]:
        if c.get("type") == "frontend":
            continue
        for ctr in c["podTemplate"]["spec"]["containers"]:
            yield c, ctr


def speculative_mode(dgd: dict, configmaps: Sequence[dict] = ()) -> Optional[str]:
    """``synthetic`` / ``real`` (``mixed`` if workers differ) for a DGD with speculative decoding, None without.
    vLLM selects the ConfigMap key in env SPECULATIVE_CONFIG; TRT-LLM MTP has ``speculative_config:`` in the engine
    config (a ConfigMap of the serving plan) and is synthetic only with env TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS."""
    trtllm_mtp = any("speculative_config:" in str(v) for cm in configmaps for v in (cm.get("data") or {}).values())
    modes = set()
    for _, ctr in _worker_containers(dgd):
        env = {e["name"]: e for e in ctr.get("env") or []}
        ref = ((env.get("SPECULATIVE_CONFIG") or {}).get("valueFrom") or {}).get("configMapKeyRef") or {}
        if ref.get("key") in (SPEC_KEY, SPEC_KEY_SYNTHETIC):
            modes.add("synthetic" if ref["key"] == SPEC_KEY_SYNTHETIC else "real")
        elif TRTLLM_SYNTHETIC_ENV in env:
            modes.add("synthetic")
        elif trtllm_mtp:
            modes.add("real")
    if len(modes) > 1:
        return "mixed"
    return next(iter(modes), None)


def row_speculative_mode(target: Any) -> Optional[str]:
    """How the published row was measured: synthetic acceptance wherever the target has speculative decoding and a
    synthetic configuration upstream (Lightning's tables list its "Synthetic AL" per row; Ultra Day-0 has none)."""
    if target.perf is None or target.spec == "none" or target.model == "nemotron-3-ultra":
        return None
    return "synthetic"


def synthetic_speculative_dgd(dgd: dict, target: Any) -> dict:
    """A copy of the DGD serving with the synthetic acceptance upstream benchmarks with (see module docstring)."""
    out = copy.deepcopy(dgd)
    for _, ctr in _worker_containers(out):
        for e in ctr.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("configMapKeyRef") or {}
            if e["name"] == "SPECULATIVE_CONFIG" and ref.get("key") == SPEC_KEY:
                ref["key"] = SPEC_KEY_SYNTHETIC
        if target.runtime == "trtllm" and target.spec == "mtp":
            from stacks.catalog.lightning_trtllm import MTP_DRAFT

            env = ctr.setdefault("env", [])
            if not any(e["name"] == TRTLLM_SYNTHETIC_ENV for e in env):
                env.append({"name": TRTLLM_SYNTHETIC_ENV, "value": MTP_DRAFT[target.gpu][1]})
    return out


# --- the aiperf commands (one function for the Job and the exported command) -----------------------------------


def profile_args(
    method: Method, *, model: str, tokenizer: str, url: str, trace_file: str, requests: str, concurrency: str, artifact_dir: str
) -> list[str]:
    """``aiperf profile`` arguments of the trace replay (values are literals or shell references like ``"$MODEL"``)."""
    args = [
        "aiperf",
        "profile",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--input-file",
        trace_file,
        "--custom-dataset-type",
        "mooncake_trace",
        "--dataset-sampling-strategy",
        "sequential",
        "--no-fixed-schedule",
        "--request-count",
        requests,
        "--concurrency",
        concurrency,
    ]
    if method.warmup and not method.warmup.separate:
        args += ["--warmup-request-count", str(method.warmup.requests), "--warmup-concurrency", str(method.warmup.concurrency)]
    if method.block_size:
        args += ["--prompt-input-tokens-block-size", str(method.block_size)]
    if method.synthesis_max:
        args += ["--synthesis-max-isl", str(method.synthesis_max[0]), "--synthesis-max-osl", str(method.synthesis_max[1])]
    args += [
        "--use-server-token-count",
        "--extra-inputs",
        "ignore_eos:true",
        "--random-seed",
        "42",
        "--request-timeout-seconds",
        str(method.request_timeout),
    ]
    if method.workers_max:
        args += ["--workers-max", concurrency]
    if method.trust_remote_code:
        args += ["--tokenizer-trust-remote-code"]
    return args + ["--ui-type", "none", "--artifact-dir", artifact_dir]


def warmup_args(method: Method, *, model: str, tokenizer: str, url: str, artifact_dir: str) -> Optional[list[str]]:
    """The separate warm-up run (upstream: ``--isl 8000 --osl 1000 --concurrency 1 --request-count 5``), or None."""
    w = method.warmup
    if w is None or not w.separate:
        return None
    args = [
        "aiperf",
        "profile",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--isl",
        str(w.isl),
        "--osl",
        str(w.osl),
        "--concurrency",
        str(w.concurrency),
        "--request-count",
        str(w.requests),
        "--random-seed",
        "42",
    ]
    if method.trust_remote_code:
        args += ["--tokenizer-trust-remote-code"]
    return args + ["--ui-type", "none", "--artifact-dir", artifact_dir]


def shell(args: list[str]) -> str:
    """One command line; arguments that are shell references (``"$X"`` / ``"$X/y"``) stay double-quoted."""
    return " ".join(a if a.startswith('"$') else shlex.quote(a) for a in args)


def local_steps(target: Any, dgd: dict, url: str = "http://localhost:8000") -> list[str]:
    """The Job's steps with literal values, for a user with a port-forward: fetch the trace into the working
    directory when absent (checking its SHA-256), the warm-up, then the replay with the published request count
    and concurrency. ``stacks/serving/outputs.py`` exports them joined with ``&&`` (``local_command``)."""
    m, tr = method_of(target), workload_of(target)
    model = served_model(dgd)
    name = dgd["metadata"]["name"]
    c = target.perf.concurrency if target.perf else 1
    main = profile_args(
        m,
        model=model,
        tokenizer=model,
        url=url,
        trace_file=tr.file,
        requests=str(published_requests(target)),
        concurrency=str(c),
        artifact_dir=f"aiperf-{name}",
    )
    warm = warmup_args(m, model=model, tokenizer=model, url=url, artifact_dir=f"aiperf-{name}/warmup")
    part = shlex.quote(tr.file + ".part")
    fetch = (
        f"{{ test -f {shlex.quote(tr.file)} || {{ curl -fL -o {part} {shlex.quote(tr.url)} && "
        f"echo '{tr.sha256}  {tr.file}.part' | sha256sum -c - && mv {part} {shlex.quote(tr.file)}; }}; }}"
    )
    return [fetch] + ([shell(warm)] if warm else []) + [shell(main)]


def local_command(target: Any, dgd: dict, url: str = "http://localhost:8000") -> str:
    return " && ".join(local_steps(target, dgd, url))


# The trace step of the Job: fetch into the cache volume when absent, verify, count, write the run manifest.
TRACE_STEP = r"""import hashlib, json, os, sys, urllib.request
path, url, want = os.environ["TRACE_FILE"], os.environ["TRACE_URL"], os.environ["TRACE_SHA256"]
requests = int(os.environ["REQUEST_COUNT"])

def sha256(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

if not os.path.isfile(path):
    print(f"TRACE_FETCH {path} is absent: downloading {url}", flush=True)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    part = path + ".part"
    try:
        urllib.request.urlretrieve(url, part)
    except Exception as e:
        sys.exit(f"TRACE_MISSING {path} is absent and downloading {url} failed ({e}). Put the trace there "
                 f"(sha256 {want}) through a pod that mounts the model-cache claim (kubectl cp), or fix the URL.")
    got = sha256(part)
    if got != want:
        os.unlink(part)
        sys.exit(f"TRACE_SHA_MISMATCH {url} downloaded sha256 {got}, expected {want}")
    os.replace(part, path)
got = sha256(path)
rows, sums, lengths_ok = 0, {"input_length": 0, "output_length": 0}, True
with open(path, "rb") as f:
    for line in f:
        if not line.strip():
            continue
        if rows < requests and lengths_ok:  # the lengths of the rows the replay sends (the first REQUEST_COUNT)
            try:
                row = json.loads(line)
                for k in sums:
                    sums[k] += int(row[k])
            except (ValueError, KeyError, TypeError):
                lengths_ok = False
        rows += 1
if rows == 0:
    sys.exit(f"TRACE_EMPTY {path} has no rows")
if requests > rows:
    sys.exit(f"REQUEST_COUNT {requests} is more than the {rows} rows of {path}: the replay would repeat rows "
             f"(lower dynamo:benchmark.requestCount to at most {rows})")
published = got == want
print(f"TRACE_OK {path} sha256={got} rows={rows} replaying the first {requests}"
      + ("" if published else f" -- NOT the published trace (sha256 {want}); bench-report will refuse to compare"), flush=True)
manifest = {"trace_file": os.path.basename(path), "trace_sha256": got, "trace_rows": rows, "trace_published": published,
            "request_count": requests, "concurrency": int(os.environ["CONCURRENCY"]), "model": os.environ["MODEL"],
            "method": os.environ["METHOD"], "warmup": os.environ["WARMUP"], "speculative": os.environ["SPECULATIVE"],
            "replayed_input_mean": sums["input_length"] / requests if lengths_ok and requests <= rows else None,
            "replayed_output_mean": sums["output_length"] / requests if lengths_ok and requests <= rows else None}
os.makedirs(os.environ["ARTIFACT_DIR"], exist_ok=True)
with open(os.path.join(os.environ["ARTIFACT_DIR"], os.environ["MANIFEST_FILE"]), "w") as f:
    json.dump(manifest, f, indent=1)
"""

WAIT_STEP = r"""import json, os, sys, time, urllib.request
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
"""

ENV_REFS = {
    "model": '"$MODEL"',
    "tokenizer": '"$TOKENIZER"',
    "url": '"$FRONTEND_URL"',
    "trace_file": '"$TRACE_FILE"',
    "requests": '"$REQUEST_COUNT"',
    "concurrency": '"$CONCURRENCY"',
    "artifact_dir": '"$ARTIFACT_DIR"',
}


def job_script(method: Method) -> str:
    """The Job's bash script: wait for the model, fetch/verify the trace, warm up, replay, print manifest and export."""
    main = profile_args(method, **ENV_REFS)
    warm = warmup_args(method, **{k: ENV_REFS[k] for k in ("model", "tokenizer", "url")}, artifact_dir='"$ARTIFACT_DIR/warmup"')
    lines = ["set -euo pipefail", "python3 - <<'PY'", WAIT_STEP.rstrip(), "PY", "python3 - <<'PY'", TRACE_STEP.rstrip(), "PY"]
    if warm:
        lines += ['echo "warm-up: $WARMUP"', shell(warm)]
    lines += [
        shell(main),
        'echo "$MANIFEST_BEGIN"',
        'cat "$ARTIFACT_DIR/$MANIFEST_FILE"',
        "echo",
        'echo "$MANIFEST_END"',
        'echo "$RESULT_BEGIN"',
        'cat "$ARTIFACT_DIR/$RESULT_FILE"',
        "echo",
        'echo "$RESULT_END"',
    ]
    return "\n".join(lines) + "\n"


@dataclass
class BenchmarkPlan:
    job: dict
    job_name: str
    namespace: str
    model: str
    frontend_url: str
    concurrency: int
    request_count: int
    trace: Trace
    method: Method
    tolerance: float
    perf: Optional[Any] = None  # the target's stacks.catalog.model.Perf row, or None (report without a verdict)
    published_requests: Optional[int] = None  # rows the published run replayed (None: no published row)
    speculative: Optional[str] = None  # how the DGD serves: synthetic / real / mixed / None
    row_speculative: Optional[str] = None  # how the published row was measured

    @property
    def workload(self) -> Trace:
        return self.trace

    @property
    def lengths(self) -> dict[str, LengthStat]:
        """The published length statistics of the pinned trace (``TRACE_LENGTHS``; empty when none are known)."""
        return TRACE_LENGTHS.get(self.trace.sha256, {})

    def parameters(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "requestCount": self.request_count,
            "trace": self.trace.file,
            "isl": self.trace.isl,
            "osl": self.trace.osl,
            "model": self.model,
            "url": self.frontend_url,
        }


def served_model(dgd: dict) -> str:
    """The model name clients ask for: a worker's --served-model-name (else --model), else the DGD's SERVED_MODEL_NAME."""
    for c in dgd["spec"]["components"]:
        if c.get("type") == "frontend":
            continue
        for ctr in c["podTemplate"]["spec"]["containers"]:
            for flag in ("--served-model-name", "--model"):
                args = (ctr.get("command") or []) + (ctr.get("args") or [])
                for i, a in enumerate(args):
                    if a == flag and i + 1 < len(args):
                        return args[i + 1]
                    if isinstance(a, str) and a.startswith(flag + "="):
                        return a.split("=", 1)[1]
    for e in dgd["spec"].get("env") or []:
        if e.get("name") == "SERVED_MODEL_NAME":
            return e.get("value", "")
    return ""


def build_benchmark(serving: Any, cfg: Any) -> BenchmarkPlan:
    """The AIPerf Job for a ``stacks.serving.ServingPlan``; ``cfg``: ``stacks.config.keys.BenchmarkConfig``."""
    t, dgd = serving.target, serving.dgd
    ns, dgd_name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
    method, tr = method_of(t), workload_of(t)
    perf = t.perf
    concurrency = perf.concurrency if perf else 1
    published = published_requests(t)
    requests = cfg.request_count or published
    if requests > tr.rows:
        raise ConfigError(
            f"dynamo:benchmark.requestCount: {requests} is more than the {tr.rows} rows of the {tr.workload} "
            f"trace {tr.file}; choose 1..{tr.rows} (default {published}, the published run)"
        )
    model = served_model(dgd)
    url = f"http://{dgd_name}-frontend.{ns}.svc.cluster.local:8000"
    job_name = f"aiperf-{dgd_name}"[:63].rstrip("-")
    # Run where the download Jobs run (the system nodes on EKS), with the cache volume they fill.
    dl = serving.jobs[0]["spec"]["template"]["spec"] if serving.jobs else {}
    dl_ctr = (dl.get("containers") or [{}])[0]
    mount = next(
        (m["mountPath"] for m in dl_ctr.get("volumeMounts") or [] if m.get("name") == "shared-model-cache"), "/model-cache"
    )
    spec_mode = speculative_mode(dgd, serving.configmaps)
    warm = method.warmup
    env = [
        {"name": "MODEL", "value": model},
        # The tokenizer of the served model, from the cache the download Job filled (HF_HOME = the mount, as the
        # download Job and upstream's Kimi-K2.6 / Motif-3 perf Jobs set it); fetched with the token if absent.
        {"name": "TOKENIZER", "value": model},
        {"name": "FRONTEND_URL", "value": url},
        {"name": "CONCURRENCY", "value": str(concurrency)},
        {"name": "REQUEST_COUNT", "value": str(requests)},
        {"name": "TRACE_FILE", "value": f"{mount}/aiperf/traces/{tr.file}"},
        {"name": "TRACE_URL", "value": tr.url},
        {"name": "TRACE_SHA256", "value": tr.sha256},
        {"name": "ARTIFACT_DIR", "value": f"{mount}/aiperf/{dgd_name}"},
        {"name": "METHOD", "value": method.source},
        {
            "name": "WARMUP",
            "value": "none"
            if warm is None
            else (
                f"{warm.requests} synthetic {warm.isl}/{warm.osl}-token requests at concurrency {warm.concurrency}"
                if warm.separate
                else f"{warm.requests} trace requests at concurrency {warm.concurrency} (warm-up phase)"
            ),
        },
        {"name": "SPECULATIVE", "value": spec_mode or "none"},
        {"name": "MANIFEST_FILE", "value": MANIFEST_FILE},
        {"name": "MANIFEST_BEGIN", "value": MANIFEST_BEGIN},
        {"name": "MANIFEST_END", "value": MANIFEST_END},
        {"name": "RESULT_FILE", "value": RESULT_FILE},
        {"name": "RESULT_BEGIN", "value": RESULT_BEGIN},
        {"name": "RESULT_END", "value": RESULT_END},
        {"name": "HF_HOME", "value": mount},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "aiperf",
                "image": image("aiperf"),
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-c", job_script(method)],
                "env": env,
                "envFrom": [{"secretRef": {"name": serving.hf_secret_name}}],  # gated tokenizers need the token
                "volumeMounts": [{"name": "shared-model-cache", "mountPath": mount}],
                "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
            }
        ],
        "volumes": [{"name": "shared-model-cache", "persistentVolumeClaim": {"claimName": serving.claim_name}}],
    }
    for key in ("nodeSelector", "tolerations", "imagePullSecrets"):
        if dl.get(key):
            pod[key] = dl[key]
    # Non-root, no capabilities, read-only root with /tmp and HOME on an emptyDir (stacks/serving/hardening.py); AIPerf writes
    # its artifacts to ARTIFACT_DIR on the cache volume.
    from stacks.serving.hardening import harden_pod

    harden_pod(pod)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": ns,
            "labels": {
                "app.kubernetes.io/name": "aiperf",
                "app.kubernetes.io/part-of": "dynamo-benchmark",
                LABEL_DGD_NAME: dgd_name,
            },
            "annotations": {
                SKIP_AWAIT: "true",
                "dynamo.nvidia.com/target": t.id,
                "dynamo.nvidia.com/perf-source": perf.source if perf else "none",
            },
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "aiperf", "app.kubernetes.io/part-of": "dynamo-benchmark"}},
                "spec": pod,
            },
        },
    }
    return BenchmarkPlan(
        job=job,
        job_name=job_name,
        namespace=ns,
        model=model,
        frontend_url=url,
        concurrency=concurrency,
        request_count=requests,
        trace=tr,
        method=method,
        tolerance=cfg.tolerance,
        perf=perf,
        published_requests=published if perf else None,
        speculative=spec_mode,
        row_speculative=row_speculative_mode(t),
    )
