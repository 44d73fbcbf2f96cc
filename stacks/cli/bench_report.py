"""``python -m stacks bench-report --stack NAME``: measured against published, with a verdict.

Reads AIPerf's summary export ``profile_export_aiperf.json`` (aiperf 0.13.0,
``aiperf/common/models/export_models.py``: ``JsonExportData``, schema 1.4; every metric is a
``JsonMetricResult`` ``{unit, avg, p50, p90, ..., count}``) either from the benchmark Job's log
(``stacks/benchmark.py`` prints it between markers; ``kubectl logs job/aiperf-<dgd>`` with the
stack's kubeconfig) or from ``--file``. Compares with the target's published perf row:

- TTFT p50 (ms; ``time_to_first_token.p50``): lower is better, passes up to ``published x (1 + tolerance)``;
- output tok/s/GPU (``output_token_throughput.avg`` / the DGD's GPUs): passes from ``published x (1 - tolerance)``;
- tok/s/user (``output_token_throughput_per_user``, p50 where present, else avg): same rule.

Exit code 0 when every compared figure passes (or the target has no published row: no verdict),
1 when one fails or the run is incomplete, 2 on a usage or config error.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..benchmark import RESULT_BEGIN, RESULT_END
from ..config import ConfigError

_TIME_TO_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 0.001, "ns": 1e-6}


class ReportError(ValueError):
    """The AIPerf output is missing, malformed or not the expected format."""


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
    return Measured(
        ttft_p50_ms=ttft_ms,
        output_tok_s=float(out["avg"]) if out and out.get("avg") is not None else None,
        tok_s_per_user=user_val, tok_s_per_user_stat=user_stat,
        requests=float(reqs["avg"]) if reqs and reqs.get("avg") is not None else None,
        errors=float(errs["avg"]) if errs and errs.get("avg") is not None else 0.0,
        complete=complete, aiperf_version=data.get("aiperf_version"), schema_version=data.get("schema_version"),
        note=str(data.get("incomplete_reason") or ""),
        concurrency=_profiling_concurrency(data), model=_model(data),
    )


def _profiling_concurrency(data: dict) -> Optional[int]:
    for phase in ((data.get("input_config") or {}).get("phases") or []):
        if isinstance(phase, dict) and phase.get("kind") == "profiling" and isinstance(phase.get("concurrency"), int):
            return phase["concurrency"]
    return None


def _model(data: dict) -> Optional[str]:
    items = ((data.get("input_config") or {}).get("models") or {}).get("items") or []
    return items[0].get("name") if items and isinstance(items[0], dict) else None


def compare(m: Measured, perf: Any, gpus: int, tolerance: float) -> list[Row]:
    """One row per published figure; ``perf`` None (no published row): rows without a verdict."""
    out_per_gpu = m.output_tok_s / gpus if m.output_tok_s is not None and gpus else None
    rows = []
    for metric, measured, published, better in (
        ("TTFT p50 (ms)", m.ttft_p50_ms, getattr(perf, "ttft_p50_ms", None), "lower"),
        ("output tok/s/GPU", out_per_gpu, getattr(perf, "output_tok_s_per_gpu", None), "higher"),
        (f"tok/s/user ({m.tok_s_per_user_stat})", m.tok_s_per_user, getattr(perf, "tok_s_per_user", None), "higher"),
    ):
        if published is None or measured is None:
            rows.append(Row(metric, measured, published, better, None, None))
            continue
        limit = published * (1 + tolerance) if better == "lower" else published * (1 - tolerance)
        ok = measured <= limit if better == "lower" else measured >= limit
        rows.append(Row(metric, measured, published, better, limit, ok))
    return rows


def verdict(m: Measured, rows: list[Row], has_perf: bool) -> tuple[int, str]:
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


def format_report(target: str, m: Measured, rows: list[Row], perf: Any, gpus: int, tolerance: float, parameters: Optional[dict] = None) -> tuple[int, str]:
    code, text = verdict(m, rows, perf is not None)
    lines = [f"bench-report: target {target}, {gpus} GPU(s), tolerance {tolerance:.0%}, "
             f"aiperf {m.aiperf_version or '?'} (export schema {m.schema_version or '?'})"]
    if parameters:
        lines.append("benchmark Job of this stack: " + ", ".join(f"{k}={v}" for k, v in parameters.items()))
    lines.append(f"measured run: model {m.model or '?'}, concurrency {m.concurrency or '?'}, "
                 f"{'-' if m.requests is None else int(m.requests)} valid requests, {int(m.errors)} errors")
    if perf is not None and m.concurrency is not None and m.concurrency != getattr(perf, "concurrency", None):
        lines.append(f"warning: measured at concurrency {m.concurrency}, published at {perf.concurrency}: not like for like")
    lines.append(f"  {'metric':<22} {'measured':>12} {'published':>12} {'limit':>12}  result")
    for r in rows:
        res = "-" if r.ok is None else ("ok" if r.ok else "FAIL")
        bound = "" if r.limit is None else ("<=" if r.better == "lower" else ">=")
        lines.append(f"  {r.metric:<22} {_fmt(r.measured):>12} {_fmt(r.published):>12} {bound:>2}{_fmt(r.limit):>10}  {res}")
    if perf is not None:
        lines.append(f"published: {getattr(perf, 'source', '?')} (concurrency {getattr(perf, 'concurrency', '?')})")
        lines.append("note: the published rows replay a Mooncake trace with ~90% KV reuse; synthetic prompts have none, "
                     "so a higher TTFT than published is expected from the in-cluster Job")
    lines.append(text)
    return code, "\n".join(lines)


def extract_from_log(text: str) -> dict:
    """The JSON document the benchmark Job printed between the markers."""
    start, end = text.rfind(RESULT_BEGIN), text.rfind(RESULT_END)
    if start < 0 or end < start:
        raise ReportError(f"no AIPerf result in the Job log (markers {RESULT_BEGIN!r} ... {RESULT_END!r}); "
                          "is the Job still running or did it fail? see `kubectl logs` of the Job")
    body = text[start + len(RESULT_BEGIN):end]
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise ReportError(f"the result in the Job log is not JSON: {e}") from None


def _kubeconfig(program: Any, stack: str) -> tuple[list[str], Optional[str]]:
    """kubectl arguments for the stack's cluster (and a temp file to delete)."""
    cluster = program.cluster
    args: list[str] = []
    tmp = None
    if cluster.mode == "kubeconfig":
        path = cluster.kubeconfig_path or os.environ.get("KUBECONFIG")
        if path:
            args += ["--kubeconfig", os.path.expanduser(path)]
        if cluster.context:
            args += ["--context", cluster.context]
    elif cluster.mode == "eks":
        r = subprocess.run(["pulumi", "stack", "output", "kubeconfig", "--show-secrets", "--stack", stack],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ConfigError(f"--stack {stack}: cannot read its kubeconfig output ({r.stderr.strip()[:200]}); "
                              "run from the project directory after `pulumi up`, or pass --file")
        fd, tmp = tempfile.mkstemp(prefix="kubeconfig-")
        with os.fdopen(fd, "w") as f:
            f.write(r.stdout)
        args += ["--kubeconfig", tmp]
    else:
        raise ConfigError(f"--stack {stack}: cluster.mode render has no cluster to read results from; pass --file")
    return args, tmp


def cmd(args) -> int:
    from ..benchmark import build_benchmark
    from ..catalog import gpus_needed
    from ..render import program_for_stack

    program = program_for_stack(args.stack)
    plan = program.serving
    bench = build_benchmark(plan, program.cfg.benchmark)
    tolerance = args.tolerance if args.tolerance is not None else program.cfg.benchmark.tolerance
    try:
        if args.file:
            data = json.loads(Path(args.file).read_text())
        else:
            kargs, tmp = _kubeconfig(program, args.stack)
            try:
                r = subprocess.run(["kubectl", *kargs, "-n", bench.namespace, "logs", f"job/{bench.job_name}"],
                                   capture_output=True, text=True, timeout=120)
            finally:
                if tmp:
                    os.unlink(tmp)
            if r.returncode != 0:
                print(f"error: kubectl logs job/{bench.job_name} -n {bench.namespace}: {r.stderr.strip()[:300]} "
                      f"(is dynamo:benchmark.enabled true and the Job created?)", file=sys.stderr)
                return 2
            data = extract_from_log(r.stdout)
        measured = parse_export(data)
    except (ReportError, OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    gpus = gpus_needed(plan.dgd)
    rows = compare(measured, plan.target.perf, gpus, tolerance)
    code, text = format_report(plan.target.id, measured, rows, plan.target.perf, gpus, tolerance, bench.parameters())
    print(text)
    return code


def add_subparser(sub) -> None:
    p = sub.add_parser("bench-report", help="the in-cluster AIPerf result against the target's published perf row (exit 1 on a miss)")
    p.add_argument("--stack", required=True)
    p.add_argument("--file", help="a profile_export_aiperf.json to read instead of the Job's log")
    p.add_argument("--tolerance", type=float, help="relative tolerance (default dynamo:benchmark.tolerance, 0.10)")
    p.set_defaults(fn=cmd)
