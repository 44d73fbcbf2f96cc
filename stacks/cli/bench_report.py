"""``python -m stacks bench-report --stack NAME``: the benchmark Job's result against the target's published perf row.

Reads AIPerf's summary export ``profile_export_aiperf.json`` (aiperf 0.13.0,
``aiperf/common/models/export_models.py``: ``JsonExportData``, schema 1.4; every metric is a
``JsonMetricResult`` ``{unit, avg, p50, p90, ..., count}``; ``input_config`` is the run's configuration:
``datasets[0]`` ``{type: file, path, format: mooncake_trace, sampling, block_size, synthesis}`` for a trace replay
or ``{type: synthetic, prompts: {isl, osl}}``, ``phases`` with ``kind: warmup | profiling`` and their ``requests``
and ``concurrency``, ``endpoint`` with ``extra`` and ``use_server_token_count``) either from the benchmark Job's log
(``stacks/serving/benchmark.py`` prints its run manifest and the export between markers; ``kubectl logs job/aiperf-<dgd>``
with the stack's kubeconfig) or from ``--file``.

First it checks that the run is the published one (``workload_problems``): the same trace (file name, and from the
Job's manifest its SHA-256), the same request count (set, and counted valid + failed in the export) and concurrency
as the row, ``ignore_eos`` and server token counts, a DGD serving with the speculative-decoding acceptance the row
was measured with, and requests of the row's lengths: the export's measured ``input_sequence_length`` /
``output_sequence_length`` (over the successful requests) within ``LENGTH_TOLERANCE`` (25%) of the row's workload.
The expected lengths are data: the mean ``input_length`` / ``output_length`` of the replayed rows from the Job's
manifest (the Job computes them from the file whose SHA-256 it checked), or without one (``--file``) the pinned
trace's published statistics (``stacks.serving.benchmark.TRACE_LENGTHS``: the mean where upstream published it, else
the median, compared with the measured median). A name is not enough: a replay of another file under the published
name is refused for its lengths. A run that differs is not comparable: bench-report prints why and exits 2, without
a verdict.

Then it computes each figure the way the row's family defines it (``stacks.serving.benchmark.METHODS``):

- TTFT p50 (ms; ``time_to_first_token.p50``): lower is better, passes up to ``published x (1 + tolerance)``;
- tok/s/user (``output_token_throughput_per_user.p50``, the statistic upstream's Ultra runner reports; avg when
  there is no p50): passes from ``published x (1 - tolerance)``;
- output tok/s/GPU: Nemotron-3.5-Lightning's rows are ``concurrency x tok/s/user / GPUs`` (every row of its perf
  table satisfies it; tests/test_bench_report.py derives it), so the measured figure is the run's concurrency x
  the measured tok/s/user / the DGD's GPUs; Ultra and Motif-3 define it as ``output_token_throughput / GPUs``.
  Same rule as tok/s/user.

Exit code 0 when every compared figure passes (or the target has no published row: no verdict), 1 when one fails or
the run is incomplete, 2 when the run is not the published workload, or on a usage or config error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from stacks.serving.benchmark import LENGTH_TOLERANCE, MANIFEST_BEGIN, MANIFEST_END, PER_GPU_FROM_USER, RESULT_BEGIN, RESULT_END
from stacks.config.keys import ConfigError

_TIME_TO_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 0.001, "ns": 1e-6}


class ReportError(ValueError):
    """The AIPerf output is missing, malformed or not the expected format."""


@dataclass(frozen=True)
class Workload:
    """What the run replayed, from the export's ``input_config``."""

    dataset_type: Optional[str] = None  # "file" | "synthetic" | ...
    dataset_format: Optional[str] = None  # "mooncake_trace" for a trace replay
    trace_file: Optional[str] = None  # base name of the replayed file
    isl: Optional[float] = None  # synthetic prompts only
    osl: Optional[float] = None
    block_size: Optional[int] = None
    requests: Optional[int] = None  # profiling phase
    concurrency: Optional[int] = None
    ignore_eos: Optional[bool] = None
    server_token_count: Optional[bool] = None


@dataclass(frozen=True)
class Measured:
    ttft_p50_ms: Optional[float]
    output_tok_s: Optional[float]
    tok_s_per_user: Optional[float]
    tok_s_per_user_stat: str
    requests: Optional[float]
    errors: float
    complete: bool
    aiperf_version: Optional[str]
    schema_version: Optional[str]
    note: str = ""
    concurrency: Optional[int] = None  # input_config.phases[profiling].concurrency
    model: Optional[str] = None
    workload: Workload = field(default_factory=Workload)
    # Measured per-request token lengths: {"input" | "output": {"mean": avg, "p50": p50}} from the export's
    # input_sequence_length / output_sequence_length (server counts with --use-server-token-count).
    lengths: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    metric: str
    measured: Optional[float]
    published: Optional[float]
    better: str  # "lower" | "higher"
    limit: Optional[float]
    ok: Optional[bool]  # None: nothing to compare


def _metric(data: dict, key: str) -> Optional[dict]:
    m = data.get(key)
    if m is None:
        return None
    if not isinstance(m, dict) or "unit" not in m:
        raise ReportError(f"{key}: expected an AIPerf metric object with a 'unit', got {m!r}")
    return m


def parse_export(data: Any) -> Measured:
    """The figures bench-report compares, from a ``profile_export_aiperf.json`` document."""
    if not isinstance(data, dict) or not ("schema_version" in data or "aiperf_version" in data or "request_throughput" in data):
        raise ReportError("not an AIPerf profile_export_aiperf.json (no schema_version, aiperf_version or request_throughput)")
    ttft = _metric(data, "time_to_first_token")
    ttft_ms = None
    if ttft is not None and ttft.get("p50") is not None:
        unit = str(ttft["unit"]).lower()
        if unit not in _TIME_TO_MS:
            raise ReportError(f"time_to_first_token: unit {ttft['unit']!r} is not a time unit ({', '.join(_TIME_TO_MS)})")
        ttft_ms = float(ttft["p50"]) * _TIME_TO_MS[unit]
    out = _metric(data, "output_token_throughput")
    user = _metric(data, "output_token_throughput_per_user")
    user_val, user_stat = None, "-"
    if user is not None:
        for stat in ("p50", "avg"):
            if user.get(stat) is not None:
                user_val, user_stat = float(user[stat]), stat
                break
    reqs = _metric(data, "request_count")
    errs = _metric(data, "error_request_count")
    complete = data.get("is_complete") is not False and not data.get("was_cancelled")
    wl = parse_workload(data.get("input_config") or {})
    lengths = {}
    for side, key in (("input", "input_sequence_length"), ("output", "output_sequence_length")):
        metric = _metric(data, key)
        if metric is not None:
            lengths[side] = {stat: float(metric[k]) for stat, k in (("mean", "avg"), ("p50", "p50")) if metric.get(k) is not None}
    return Measured(
        ttft_p50_ms=ttft_ms,
        output_tok_s=float(out["avg"]) if out and out.get("avg") is not None else None,
        tok_s_per_user=user_val,
        tok_s_per_user_stat=user_stat,
        requests=float(reqs["avg"]) if reqs and reqs.get("avg") is not None else None,
        errors=float(errs["avg"]) if errs and errs.get("avg") is not None else 0.0,
        complete=complete,
        aiperf_version=data.get("aiperf_version"),
        schema_version=data.get("schema_version"),
        note=str(data.get("incomplete_reason") or ""),
        concurrency=wl.concurrency,
        model=_model(data),
        workload=wl,
        lengths=lengths,
    )


def parse_workload(cfg: dict) -> Workload:
    """The replayed workload from an export's ``input_config`` (aiperf 0.13.0 ``BenchmarkConfig``)."""
    datasets = cfg.get("datasets") or []
    ds = datasets[0] if datasets and isinstance(datasets[0], dict) else {}
    prompts = ds.get("prompts") or {}
    phase = next((p for p in cfg.get("phases") or [] if isinstance(p, dict) and p.get("kind") == "profiling"), {})
    endpoint = cfg.get("endpoint") or {}
    extra = endpoint.get("extra") or {}
    return Workload(
        dataset_type=ds.get("type"),
        dataset_format=ds.get("format"),
        trace_file=os.path.basename(ds["path"]) if ds.get("path") else None,
        isl=(prompts.get("isl") or {}).get("mean"),
        osl=(prompts.get("osl") or {}).get("mean"),
        block_size=ds.get("block_size"),
        requests=phase.get("requests") if isinstance(phase.get("requests"), int) else None,
        concurrency=phase.get("concurrency") if isinstance(phase.get("concurrency"), int) else None,
        ignore_eos=extra.get("ignore_eos") if "ignore_eos" in extra else None,
        server_token_count=endpoint.get("use_server_token_count"),
    )


def _model(data: dict) -> Optional[str]:
    items = ((data.get("input_config") or {}).get("models") or {}).get("items") or []
    return items[0].get("name") if items and isinstance(items[0], dict) else None


def workload_problems(m: Measured, bench: Any, manifest: Optional[dict] = None) -> list[str]:
    """Why the measured run is not the workload the target's published row was measured on (empty: it is).
    ``bench``: the stack's ``stacks.serving.benchmark.BenchmarkPlan`` (trace, method, published row and request count)."""
    perf, tr, wl = bench.perf, bench.trace, m.workload
    out = []
    if wl.dataset_format != "mooncake_trace":
        shape = (
            f"synthetic prompts of {wl.isl:g} input / {wl.osl:g} output tokens"
            if wl.isl is not None and wl.osl is not None
            else f"dataset {wl.dataset_type or '?'} {wl.dataset_format or ''}".rstrip()
        )
        out.append(
            f"input/output length: the run sent {shape}; the row replays the Mooncake trace {tr.file} "
            f"({tr.isl // 1000}k input / {tr.osl} output tokens)"
        )
    elif wl.trace_file not in tr.names:
        out.append(f"trace: the run replayed {wl.trace_file}; the row replays {tr.file}")
    if manifest is not None and manifest.get("trace_sha256") != tr.sha256:
        out.append(
            f"trace: the replayed file has sha256 {manifest.get('trace_sha256')} ({manifest.get('trace_rows')} rows), "
            f"not the published {tr.file} (sha256 {tr.sha256}, {tr.rows} rows)"
        )
    if perf is not None:
        if wl.concurrency != perf.concurrency:
            out.append(
                f"concurrency: the run used {wl.concurrency if wl.concurrency is not None else '?'}, the row {perf.concurrency}"
            )
        if wl.requests != bench.published_requests:
            out.append(
                f"request count: the run replayed {wl.requests if wl.requests is not None else '?'} requests, "
                f"the row {bench.published_requests}"
            )
        elif m.complete and m.requests is not None and m.requests + m.errors != wl.requests:
            # A complete AIPerf run accounts for every request it sent: valid (request_count) plus failed
            # (error_request_count), as the published rows do (e.g. 3,411 valid + 130 errors = 3,541).
            out.append(
                f"request count: the run was set to {wl.requests} requests but its export counts "
                f"{m.requests:g} valid and {m.errors:g} failed"
            )
    if wl.ignore_eos is not True:
        out.append("output length: the run did not set ignore_eos, so outputs end at EOS instead of the trace's output lengths")
    if wl.server_token_count is not True:
        out.append("token counts: the run counted tokens client-side; the row uses --use-server-token-count")
    if bench.method.block_size and wl.dataset_format == "mooncake_trace" and wl.block_size not in (None, bench.method.block_size):
        out.append(
            f"block size: the run synthesised prompts from {wl.block_size}-token blocks, the row from {bench.method.block_size}"
        )
    if bench.row_speculative and bench.speculative != bench.row_speculative:
        out.append(
            f"speculative decoding: the row was measured with {bench.row_speculative} acceptance (the recipe's "
            f"speculative-config-synthetic / TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS for benchmarking), "
            f"this DGD serves with {bench.speculative or 'none'} acceptance: set "
            f"`dynamo:benchmark.syntheticAcceptance: true` in the stack for the benchmark run (and back after)"
        )
    out += length_problems(m, bench, manifest)
    return out


def expected_lengths(bench: Any, manifest: Optional[dict] = None) -> dict[str, tuple[str, float, str]]:
    """The row's per-request lengths: {"input" | "output": (statistic, value, where it comes from)}. The Job's manifest
    (the means of the rows it replayed, computed from the file) when the file is the pinned trace; else the trace's
    published statistics (``TRACE_LENGTHS``), which cover the whole trace."""
    out: dict[str, tuple[str, float, str]] = {}
    tr = bench.trace
    replayed = manifest if manifest is not None and manifest.get("trace_sha256") == tr.sha256 else None
    for side in ("input", "output"):
        value = replayed.get(f"replayed_{side}_mean") if replayed is not None else None
        if replayed is not None and value is not None:
            out[side] = (
                "mean",
                float(value),
                f"mean {side}_length of the {replayed.get('request_count')} rows the Job "
                f"replayed from {tr.file}, from its run manifest",
            )
        elif side in bench.lengths:
            st = bench.lengths[side]
            rows = bench.published_requests or bench.request_count
            whole = "" if rows == tr.rows else f"; a statistic of the whole trace, the row replays its first {rows} rows"
            out[side] = (st.stat, st.value, f"{tr.file}: {st.source}{whole}")
    return out


def length_problems(m: Measured, bench: Any, manifest: Optional[dict] = None, tolerance: float = LENGTH_TOLERANCE) -> list[str]:
    """A measured input/output length more than ``tolerance`` (relative) from the row's workload, or not measured."""
    out = []
    for side, (stat, want, source) in expected_lengths(bench, manifest).items():
        got = (m.lengths.get(side) or {}).get(stat)
        label = "average" if stat == "mean" else "median"
        if got is None:
            out.append(
                f"{side} length: the export has no {side}_sequence_length {label}; the row's workload has "
                f"{want:,.0f} tokens ({source})"
            )
        elif abs(got - want) > tolerance * want:
            out.append(
                f"{side} length: the run's requests have a measured {label} of {got:,.0f} {side} tokens, the row's "
                f"workload {want:,.0f} ({source}); more than {tolerance:.0%} apart"
            )
    return out


def per_gpu(m: Measured, gpus: int, definition: str) -> Optional[float]:
    """The measured output tok/s/GPU by the row's definition (``stacks.serving.benchmark.PER_GPU_*``)."""
    if not gpus:
        return None
    if definition == PER_GPU_FROM_USER:
        if m.concurrency is None or m.tok_s_per_user is None:
            return None
        return m.concurrency * m.tok_s_per_user / gpus
    return m.output_tok_s / gpus if m.output_tok_s is not None else None


def compare(m: Measured, perf: Any, gpus: int, tolerance: float, definition: str = PER_GPU_FROM_USER) -> list[Row]:
    """One row per published figure; ``perf`` None (no published row): rows without a verdict."""
    rows = []
    for metric, measured, published, better in (
        ("TTFT p50 (ms)", m.ttft_p50_ms, getattr(perf, "ttft_p50_ms", None), "lower"),
        ("output tok/s/GPU", per_gpu(m, gpus, definition), getattr(perf, "output_tok_s_per_gpu", None), "higher"),
        (f"tok/s/user ({m.tok_s_per_user_stat})", m.tok_s_per_user, getattr(perf, "tok_s_per_user", None), "higher"),
    ):
        if published is None or measured is None:
            rows.append(Row(metric, measured, published, better, None, None))
            continue
        limit = published * (1 + tolerance) if better == "lower" else published * (1 - tolerance)
        ok = measured <= limit if better == "lower" else measured >= limit
        rows.append(Row(metric, measured, published, better, limit, ok))
    return rows


def verdict(m: Measured, rows: list[Row], has_perf: bool, problems: Optional[list[str]] = None) -> tuple[int, str]:
    if has_perf and problems:
        return 2, "REFUSED: not the published workload, no verdict:\n" + "\n".join(f"  - {p}" for p in problems)
    if not m.complete:
        return 1, f"FAIL: the AIPerf run is incomplete ({m.note or 'cancelled'}); its figures are not comparable"
    if not has_perf:
        return 0, "no verdict: this target has no published perf row"
    failed = [r.metric for r in rows if r.ok is False]
    compared = [r for r in rows if r.ok is not None]
    if not compared:
        return 1, "FAIL: none of the published figures is in the AIPerf output"
    if failed:
        return 1, f"FAIL: {', '.join(failed)} outside the tolerance"
    return 0, f"PASS: {len(compared)} figure(s) within the tolerance"


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.2f}"


def format_report(
    target: str,
    m: Measured,
    rows: list[Row],
    perf: Any,
    gpus: int,
    tolerance: float,
    parameters: Optional[dict] = None,
    problems: Optional[list[str]] = None,
    definition: str = PER_GPU_FROM_USER,
) -> tuple[int, str]:
    code, text = verdict(m, rows, perf is not None, problems)
    lines = [
        f"bench-report: target {target}, {gpus} GPU(s), tolerance {tolerance:.0%}, "
        f"aiperf {m.aiperf_version or '?'} (export schema {m.schema_version or '?'})"
    ]
    if parameters:
        lines.append("benchmark Job of this stack: " + ", ".join(f"{k}={v}" for k, v in parameters.items()))
    wl = m.workload
    replayed = (
        f"trace {wl.trace_file}"
        if wl.dataset_format == "mooncake_trace"
        else f"{wl.dataset_type or '?'} prompts"
        + (f" {wl.isl:g}/{wl.osl:g} tokens" if wl.isl is not None and wl.osl is not None else "")
    )
    lines.append(
        f"measured run: model {m.model or '?'}, {replayed}, concurrency {m.concurrency or '?'}, "
        f"{'-' if m.requests is None else int(m.requests)} valid requests, {int(m.errors)} errors"
    )
    lines.append(f"  {'metric':<22} {'measured':>12} {'published':>12} {'limit':>12}  result")
    for r in rows:
        res = "-" if r.ok is None or code == 2 else ("ok" if r.ok else "FAIL")
        bound = "" if r.limit is None else ("<=" if r.better == "lower" else ">=")
        lines.append(f"  {r.metric:<22} {_fmt(r.measured):>12} {_fmt(r.published):>12} {bound:>2}{_fmt(r.limit):>10}  {res}")
    if perf is not None:
        lines.append(
            f"published: {getattr(perf, 'source', '?')} (concurrency {getattr(perf, 'concurrency', '?')}); "
            f"output tok/s/GPU = {definition}"
        )
    lines.append(text)
    return code, "\n".join(lines)


def _between(text: str, begin: str, end: str) -> Optional[str]:
    start, stop = text.rfind(begin), text.rfind(end)
    return None if start < 0 or stop < start else text[start + len(begin) : stop]


def extract_from_log(text: str) -> dict:
    """The JSON document the benchmark Job printed between the markers."""
    body = _between(text, RESULT_BEGIN, RESULT_END)
    if body is None:
        raise ReportError(
            f"no AIPerf result in the Job log (markers {RESULT_BEGIN!r} ... {RESULT_END!r}); "
            "is the Job still running or did it fail? see `kubectl logs` of the Job"
        )
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise ReportError(f"the result in the Job log is not JSON: {e}") from None


def extract_manifest(text: str) -> Optional[dict]:
    """The run manifest (trace SHA-256, rows, request count) the Job printed, or None (an older Job)."""
    body = _between(text, MANIFEST_BEGIN, MANIFEST_END)
    if body is None:
        return None
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise ReportError(f"the run manifest in the Job log is not JSON: {e}") from None


def _kubeconfig(program: Any, stack: str) -> tuple[list[str], Optional[str]]:
    """kubectl arguments for the stack's cluster (and a temp file to delete)."""
    cluster, where = program.cluster, program.mode.kubeconfig_for_tools
    args: list[str] = []
    tmp = None
    if where == "file":
        path = cluster.kubeconfig_path or os.environ.get("KUBECONFIG")
        if path:
            args += ["--kubeconfig", os.path.expanduser(path)]
        if cluster.context:
            args += ["--context", cluster.context]
    elif where == "stack output":
        r = subprocess.run(
            ["pulumi", "stack", "output", "kubeconfig", "--show-secrets", "--stack", stack], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise ConfigError(
                f"--stack {stack}: cannot read its kubeconfig output ({r.stderr.strip()[:200]}); "
                "run from the project directory after `pulumi up`, or pass --file"
            )
        fd, tmp = tempfile.mkstemp(prefix="kubeconfig-")
        with os.fdopen(fd, "w") as f:
            f.write(r.stdout)
        args += ["--kubeconfig", tmp]
    else:
        raise ConfigError(f"--stack {stack}: cluster.mode render has no cluster to read results from; pass --file")
    return args, tmp


def cmd(args) -> int:
    from stacks.serving.benchmark import build_benchmark
    from stacks.catalog import gpus_needed
    from stacks.program.render import program_for_stack

    program = program_for_stack(args.stack)
    plan = program.serving
    bench = build_benchmark(plan, program.cfg.benchmark)
    tolerance = args.tolerance if args.tolerance is not None else program.cfg.benchmark.tolerance
    manifest = None
    try:
        if args.file:
            data = json.loads(Path(args.file).read_text())
        else:
            kargs, tmp = _kubeconfig(program, args.stack)
            try:
                r = subprocess.run(
                    ["kubectl", *kargs, "-n", bench.namespace, "logs", f"job/{bench.job_name}"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            finally:
                if tmp:
                    os.unlink(tmp)
            if r.returncode != 0:
                print(
                    f"error: kubectl logs job/{bench.job_name} -n {bench.namespace}: {r.stderr.strip()[:300]} "
                    f"(is dynamo:benchmark.enabled true and the Job created?)",
                    file=sys.stderr,
                )
                return 2
            data = extract_from_log(r.stdout)
            manifest = extract_manifest(r.stdout)
        measured = parse_export(data)
    except (ReportError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        from stacks.cli.shell import os_error_line

        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    gpus = gpus_needed(plan.dgd)
    definition = bench.method.per_gpu
    problems = workload_problems(measured, bench, manifest)
    rows = compare(measured, plan.target.perf, gpus, tolerance, definition)
    code, text = format_report(
        plan.target.id, measured, rows, plan.target.perf, gpus, tolerance, bench.parameters(), problems, definition
    )
    print(text)
    return code


def add_subparser(sub) -> None:
    from stacks.cli.shell import existing_file

    p = sub.add_parser(
        "bench-report",
        help="the in-cluster AIPerf result against the target's published perf row",
        description="Compare the stack's in-cluster AIPerf benchmark (the Job's log, or --file) with the "
        "published perf row of its target. Exit 0 within tolerance, 1 on a miss, 2 when the "
        "run is not the published workload or cannot be read.",
    )
    p.add_argument("--stack", required=True, metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    p.add_argument(
        "--file",
        metavar="JSON",
        type=existing_file("an AIPerf profile_export_aiperf.json"),
        help="a profile_export_aiperf.json to read instead of the Job's log",
    )
    p.add_argument("--tolerance", type=float, help="relative tolerance (default dynamo:benchmark.tolerance, 0.10)")
    p.set_defaults(fn=cmd)
