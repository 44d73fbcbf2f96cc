"""bench-report on recorded AIPerf 0.13.0 output (tests/fixtures/aiperf-0.13.0-*, real runs against the Dynamo
frontend and mocker, and one export derived from them in the published workload's shape): each figure by the
published definition of the row's family, and a run that is not the published workload (trace, lengths, request
count, concurrency, speculative acceptance) refused with exit 2."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from stacks import catalog
from stacks.__main__ import main
from stacks.serving.benchmark import (
    LENGTH_TOLERANCE,
    METHODS,
    PER_GPU_FROM_THROUGHPUT,
    PER_GPU_FROM_USER,
    TRACE_LENGTHS,
    build_benchmark,
    synthetic_speculative_dgd,
    trace,
)
from stacks.catalog import gpus_needed
from stacks.catalog.model import Perf
from stacks.cli.bench_report import (
    ReportError,
    compare,
    expected_lengths,
    extract_from_log,
    extract_manifest,
    format_report,
    parse_export,
    verdict,
    workload_problems,
)
from stacks.program import build_program
from stacks.registry.versions import versions
from stacks.config.keys import BenchmarkConfig, parse
from stacks.serving import build_plan

FIXTURES = Path(__file__).parent / "fixtures"
FIX = FIXTURES / "aiperf-0.13.0-dynamo-mocker"  # synthetic 512/64-token prompts (the Job's former workload)
EXPORT = FIX / "profile_export_aiperf.json"
TRACE_LOG = FIXTURES / "aiperf-0.13.0-mooncake-trace" / "benchmark-job.log"  # the Job's script replaying a trace
TRACE_TARGET = "lightning-vllm-agg-h100-dspark"  # the target that recorded run was rendered for (1 GPU, concurrency 20)
# The recorded trace replay in the published workload's shape (request count, lengths): derived, see its README.
SHAPED = FIXTURES / "aiperf-0.13.0-published-shape"
MATCHING = SHAPED / "profile_export_aiperf.json"


@pytest.fixture(scope="module")
def data():
    return json.loads(EXPORT.read_text())


@pytest.fixture(scope="module")
def trace_log():
    return TRACE_LOG.read_text()


def _bench(target: str, synthetic: bool = False, **cfg):
    serving = build_plan(parse({"target": target}))
    if synthetic:  # the DGD as upstream benchmarks it (speculative-config-synthetic)
        serving = dataclasses.replace(serving, dgd=synthetic_speculative_dgd(serving.dgd, serving.target))
    return build_benchmark(serving, BenchmarkConfig.model_validate({"enabled": True, **cfg})), serving


@pytest.fixture()
def matching():
    return json.loads(MATCHING.read_text())


def _bench_report_cli(monkeypatch, tmp_path, export: dict, synthetic: bool = True) -> int:
    """``bench-report --stack s --file <export>`` for a stack serving TRACE_TARGET with the benchmark on (and, with
    ``synthetic``, dynamo:benchmark.syntheticAcceptance: true), built by the same build_program as a committed stack."""
    cfg = {
        "target": TRACE_TARGET,
        "cluster": {"mode": "render", "renderDir": str(tmp_path / "render")},
        "benchmark": {"enabled": True, "syntheticAcceptance": synthetic},
    }
    monkeypatch.setattr("stacks.program.render.program_for_stack", lambda name: build_program(cfg, name))
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(json.dumps(export))
    return main(["bench-report", "--stack", "s", "--file", str(path)])


# --- the published definition of output tok/s/GPU, derived from the rows -------------------------------------------


def _rows():
    for t in catalog.targets().values():
        if t.perf is not None:
            yield t, gpus_needed(build_plan(parse({"target": t.id})).dgd)


def _identity_holds(perf: Perf, gpus: int) -> bool:
    """concurrency x tok/s/user / GPUs equals the published output tok/s/GPU within the tables' rounding (2 decimals
    on tok/s/user, scaled by concurrency / GPUs, plus the rounding of the published figure itself)."""
    derived = perf.concurrency * perf.tok_s_per_user / gpus
    return abs(derived - perf.output_tok_s_per_gpu) <= perf.concurrency * 0.005 / gpus + 0.005 + 1e-9


def test_output_tok_s_per_gpu_definition_is_derived_from_the_perf_rows():
    """Every Lightning row satisfies output tok/s/GPU = concurrency x tok/s/user / GPUs, so that is its definition and
    bench-report computes it so; Ultra's Day-0 rows do not (their figure is TPS/GPU), and bench-report divides the
    measured output throughput there. A catalog row that breaks its family's rule fails here."""
    by_family: dict[str, list[bool]] = {}
    for t, gpus in _rows():
        assert gpus > 0, t.id
        by_family.setdefault(t.model, []).append(_identity_holds(t.perf, gpus))
    assert len(by_family["nemotron-3.5-lightning"]) >= 40 and all(by_family["nemotron-3.5-lightning"])
    assert not any(by_family["nemotron-3-ultra"])  # e.g. B200 agentic MTP: 20 x 80.6 / 4 = 403.0, published 310.8
    for family, holds in by_family.items():
        derived = PER_GPU_FROM_USER if all(holds) else PER_GPU_FROM_THROUGHPUT
        assert METHODS[family].per_gpu == derived, family


def _published_motif_rows() -> list[dict[str, float]]:
    """The Motif-3 baseline table of the reference's perf-tables.md (no catalog target carries it: it was measured
    with round-robin routing, while the catalog's Motif-3 targets route by KV), as numbers by column name."""
    from stacks.cli import fidelity

    text = (fidelity.recipes_dir() / "perf-tables.md").read_text()
    section = text.split("## 6. Motif-3", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:  # after the header and its |---| line
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append({k: float(v) for k, v in zip(head, cells) if k != "Layout"})
    return rows


@pytest.mark.needs_reference
def test_motif_definition_is_derived_from_its_published_table():
    """Motif-3's published output tok/s/GPU is the output throughput / GPUs on every row, and not concurrency x user
    tok/s / GPUs, so bench-report divides the measured output throughput for that family."""
    rows = _published_motif_rows()
    assert len(rows) >= 6
    for r in rows:
        assert abs(r["Output tok/s"] / r["GPUs"] - r["Output tok/s/GPU"]) <= 0.01, r
        assert abs(r["Concurrency"] * r["User tok/s mean"] / r["GPUs"] - r["Output tok/s/GPU"]) > 1.0, r
    assert METHODS["motif-3"].per_gpu == PER_GPU_FROM_THROUGHPUT


def test_a_matching_result_is_computed_by_the_published_formula(matching):
    """The export in the published shape (derived from the recorded trace replay: request count and lengths of the
    row's workload), on a DGD serving the synthetic acceptance: no refusal, and output tok/s/GPU = the run's
    concurrency x measured tok/s/user / GPUs (not AIPerf's output_token_throughput / GPUs)."""
    bench, serving = _bench(TRACE_TARGET, synthetic=True)
    m = parse_export(matching)
    assert workload_problems(m, bench) == []
    gpus = gpus_needed(serving.dgd)
    assert gpus == 1 and m.concurrency == 20
    rows = compare(m, bench.perf, gpus, 0.10, bench.method.per_gpu)
    per_gpu = next(r for r in rows if r.metric == "output tok/s/GPU")
    assert per_gpu.measured == pytest.approx(20 * m.tok_s_per_user / gpus)
    assert per_gpu.measured != pytest.approx(m.output_tok_s / gpus)  # the figure the old report used differs
    # Against a row a little below the measured figures: PASS, exit 0.
    row = Perf(
        concurrency=20,
        ttft_p50_ms=m.ttft_p50_ms * 1.05,
        output_tok_s_per_gpu=per_gpu.measured / 1.05,
        tok_s_per_user=m.tok_s_per_user / 1.05,
        source="test row",
    )
    code, text = format_report(
        TRACE_TARGET,
        m,
        compare(m, row, gpus, 0.10, bench.method.per_gpu),
        row,
        gpus,
        0.10,
        problems=workload_problems(m, bench),
        definition=bench.method.per_gpu,
    )
    assert code == 0 and "PASS: 3 figure(s)" in text and "concurrency x tok/s/user / GPUs" in text


def test_ultra_rows_divide_the_output_throughput(trace_log):
    m = parse_export(extract_from_log(trace_log))
    rows = compare(m, Perf(8, None, 1.0, 1.0, "x"), 8, 0.1, PER_GPU_FROM_THROUGHPUT)
    assert rows[1].measured == pytest.approx(m.output_tok_s / 8)


# --- refusals: not the published workload --------------------------------------------------------------------------


def test_result_with_another_input_length_is_refused_with_exit_2(capsys):
    """The recorded synthetic 512/64-token run against the H100 disagg row (64k/400 trace): exit 2 and the reason."""
    code = main(["bench-report", "--stack", "h100-disagg", "--file", str(EXPORT)])
    out = capsys.readouterr().out
    assert code == 2
    assert "REFUSED: not the published workload" in out
    assert (
        "input/output length: the run sent synthetic prompts of 512 input / 64 output tokens; the row replays the "
        "Mooncake trace nim_turbo_64k_400_90kv_agent_new_noschedule_short_15perc.jsonl (64k input / 400 output tokens)" in out
    )
    assert "concurrency: the run used 4, the row 24" in out and "request count: the run replayed 40 requests, the row 3541" in out
    assert "input length: the run's requests have a measured median of 523 input tokens, the row's workload 67,585" in out
    assert "output length: the run's requests have a measured average of 64 output tokens, the row's workload 2,455" in out
    # The committed stack serves the real acceptance: the refusal names the key that switches it.
    assert "`dynamo:benchmark.syntheticAcceptance: true`" in out
    assert "PASS" not in out and "FAIL" not in out


def test_the_recorded_lengths_are_refused_under_the_published_trace_name(monkeypatch, tmp_path, trace_log, capsys):
    """The recorded replay (about 1,054 input / 20 output tokens per request) named its file like the published trace;
    given the published request count and concurrency, and served with the synthetic acceptance, only its lengths
    differ from the row's (64k/400 agentic trace): still exit 2, the lengths named, no verdict."""
    bench, _ = _bench(TRACE_TARGET, synthetic=True)
    recorded = extract_from_log(trace_log)
    d = copy.deepcopy(recorded)
    d["input_config"]["phases"][0]["requests"] = bench.published_requests
    d["request_count"]["avg"] = float(bench.published_requests)
    assert (recorded["input_sequence_length"]["avg"], recorded["output_sequence_length"]["avg"]) == pytest.approx(
        (1054.33, 19.83), abs=0.01
    )
    assert _bench_report_cli(monkeypatch, tmp_path, d) == 2
    out = capsys.readouterr().out
    assert "REFUSED: not the published workload" in out and "PASS" not in out and "FAIL" not in out
    reasons = [line.strip()[2:] for line in out.splitlines() if line.startswith("  - ")]
    assert [r.split(":")[0] for r in reasons] == ["input length", "output length"], reasons
    assert "measured median of 1,004 input tokens" in reasons[0] and "measured average of 20 output tokens" in reasons[1]


def test_the_recorded_trace_replay_is_refused_for_its_trace_count_and_speculative_config(trace_log):
    bench, _ = _bench(TRACE_TARGET, requestCount=6)
    m = parse_export(extract_from_log(trace_log))
    manifest = extract_manifest(trace_log)
    assert manifest["trace_rows"] == 12 and manifest["trace_published"] is False and manifest["request_count"] == 6
    problems = workload_problems(m, bench, manifest)
    assert any(p.startswith("trace: the replayed file has sha256 0509ea0b") for p in problems)
    assert "request count: the run replayed 6 requests, the row 3541" in problems
    spec = next(p for p in problems if p.startswith("speculative decoding: the row was measured with synthetic acceptance"))
    assert "`dynamo:benchmark.syntheticAcceptance: true`" in spec
    # Its 12-row trace is not the published one: its lengths are refused too (against the published statistics,
    # since the manifest's file is not the pinned trace).
    assert any(p.startswith("input length: the run's requests have a measured median of 1,004") for p in problems)
    assert any(p.startswith("output length: the run's requests have a measured average of 20") for p in problems)
    assert not any(p.startswith(("input/output length", "concurrency")) for p in problems)  # those match


def _lengths(d: dict, side: str, factor: float) -> None:
    key = f"{side}_sequence_length"
    d[key] = {k: v * factor if isinstance(v, float) and k != "count" else v for k, v in d[key].items()}


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda d: d["input_config"]["endpoint"]["extra"].pop("ignore_eos"), "output length: the run did not set ignore_eos"),
        (
            lambda d: d["input_config"]["endpoint"].pop("use_server_token_count"),
            "token counts: the run counted tokens client-side",
        ),
        (
            lambda d: d["input_config"]["datasets"][0].update(path="/x/8k_1k_70kv_chat_new_noschedule_short_15perc.jsonl"),
            "trace: the run replayed 8k_1k_70kv_chat_new_noschedule_short_15perc.jsonl",
        ),
        (lambda d: d["input_config"]["phases"][0].update(concurrency=8), "concurrency: the run used 8, the row 20"),
        (
            lambda d: d["input_config"]["phases"][0].update(requests=500),
            "request count: the run replayed 500 requests, the row 3541",
        ),
        (
            lambda d: d["request_count"].update(avg=6.0),
            "request count: the run was set to 3541 requests but its export counts 6 valid and 0 failed",
        ),
        (
            lambda d: d.update(
                request_count={**d["request_count"], "avg": 3411.0}, error_request_count={"unit": "requests", "avg": 129.0}
            ),
            "request count: the run was set to 3541 requests but its export counts 3411 valid and 129 failed",
        ),
        (lambda d: _lengths(d, "input", 0.5), "input length: the run's requests have a measured median of 33,792 input tokens"),
        (
            lambda d: _lengths(d, "output", 1.5),
            "output length: the run's requests have a measured average of 3,683 output tokens",
        ),
    ],
)
def test_each_workload_difference_is_named(matching, edit, reason):
    bench, _ = _bench(TRACE_TARGET, synthetic=True)
    edit(matching)
    problems = workload_problems(parse_export(matching), bench)
    assert len(problems) == 1 and problems[0].startswith(reason), problems


@pytest.mark.parametrize("side, other", [("input", "output"), ("output", "input")])
def test_only_one_length_differs_and_the_cli_refuses_with_exit_2(monkeypatch, tmp_path, capsys, matching, side, other):
    """Everything of the published workload but one length, set to the recorded run's (a mocker trace of ~1k/20-token
    rows): exit 2, and the one reason is that length, measured vs expected."""
    recorded = extract_from_log(TRACE_LOG.read_text())
    matching[f"{side}_sequence_length"] = recorded[f"{side}_sequence_length"]
    assert _bench_report_cli(monkeypatch, tmp_path, matching) == 2
    out = capsys.readouterr().out
    reasons = [line.strip()[2:] for line in out.splitlines() if line.startswith("  - ")]
    assert len(reasons) == 1 and reasons[0].startswith(f"{side} length: the run's requests have a measured "), reasons
    want = {"input": "67,585", "output": "2,455"}[side]
    assert f"the row's workload {want} (nim_turbo_64k_400_90kv_agent_new_noschedule_short_15perc.jsonl:" in reasons[0]
    assert f"more than {LENGTH_TOLERANCE:.0%} apart" in reasons[0] and f"{other} length" not in out
    assert "REFUSED" in out and "PASS" not in out and "FAIL" not in out


def test_the_matching_export_is_not_refused_by_the_cli(monkeypatch, tmp_path, capsys, matching):
    """The same export through the CLI: judged (the mocker's figures against the real row: a verdict, not a refusal)."""
    code = _bench_report_cli(monkeypatch, tmp_path, matching)
    out = capsys.readouterr().out
    assert code in (0, 1) and "REFUSED" not in out and ("PASS" in out or "FAIL" in out)
    assert _bench_report_cli(monkeypatch, tmp_path, matching, synthetic=False) == 2  # real acceptance: refused
    assert "`dynamo:benchmark.syntheticAcceptance: true`" in capsys.readouterr().out


def test_lengths_come_from_the_jobs_manifest_when_its_trace_is_the_pinned_one(matching):
    """With the Job's manifest (the means of the replayed rows, computed from the file it checked) the expected lengths
    are those means; a manifest of another file does not count (its trace is refused anyway)."""
    bench, _ = _bench(TRACE_TARGET, synthetic=True)
    m = parse_export(matching)
    manifest = {
        "trace_sha256": bench.trace.sha256,
        "request_count": 3541,
        "replayed_input_mean": m.lengths["input"]["mean"],
        "replayed_output_mean": m.lengths["output"]["mean"] * 2,
    }
    exp = expected_lengths(bench, manifest)
    assert exp["input"][:2] == ("mean", pytest.approx(m.lengths["input"]["mean"])) and "run manifest" in exp["input"][2]
    problems = workload_problems(m, bench, manifest)
    assert len(problems) == 1 and problems[0].startswith("output length: the run's requests have a measured average of 2,455")
    assert "from its run manifest" in problems[0]
    other = {**manifest, "trace_sha256": "0" * 64}
    assert {s: e[0] for s, e in expected_lengths(bench, other).items()} == {"input": "p50", "output": "mean"}


def test_the_length_statistics_cover_every_pinned_trace_and_the_tolerance_tells_them_apart():
    """Every trace the Job can replay has published length statistics, and the two pinned traces are further apart than
    LENGTH_TOLERANCE in each length, so a replay of the other trace is refused for its lengths."""
    pinned = {w: trace(w) for w in versions()["traces"]}
    assert {t.sha256 for t in pinned.values()} == set(TRACE_LENGTHS)
    agentic, chat = (TRACE_LENGTHS[pinned[w].sha256] for w in ("agentic", "chat"))
    for side in ("input", "output"):
        a, c = agentic[side].value, chat[side].value
        assert abs(a - c) > LENGTH_TOLERANCE * max(a, c), side
    # The published "64k input / 400 output" shape is the medians: the nominal figures are near them, not the mean.
    assert abs(agentic["input"].value - pinned["agentic"].isl) < 0.1 * pinned["agentic"].isl and agentic["input"].stat == "p50"
    assert agentic["output"].stat == "mean" and agentic["output"].value > 5 * pinned["agentic"].osl


def test_the_matching_fixture_is_the_recorded_run_with_only_the_documented_fields_changed(trace_log, matching):
    """tests/fixtures/aiperf-0.13.0-published-shape is what its derive.py makes from the recorded log, and differs from
    the recorded export only in the request count, the dataset path and the two length metrics."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("derive", SHAPED / "derive.py")
    derive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derive)
    recorded = extract_from_log(trace_log)
    assert derive.derive(recorded) == matching
    changed = {k for k in set(recorded) | set(matching) if recorded.get(k) != matching.get(k)}
    assert changed == {"input_config", "input_sequence_length", "output_sequence_length", "request_count"}
    assert (recorded["request_count"]["avg"], matching["request_count"]["avg"]) == (6, 3541)
    rc, mc = recorded["input_config"], matching["input_config"]
    assert {k for k in rc if rc[k] != mc[k]} == {"phases", "datasets"}
    assert mc["phases"][0]["concurrency"] == rc["phases"][0]["concurrency"] == 20


def test_a_refused_run_is_never_passed(data):
    """Figures far better than the row do not turn a different workload into a PASS."""
    m = parse_export(data)
    row = Perf(concurrency=4, ttft_p50_ms=m.ttft_p50_ms * 100, output_tok_s_per_gpu=1.0, tok_s_per_user=1.0, source="x")
    rows = compare(m, row, 1, 0.1)
    assert all(r.ok for r in rows)
    code, text = verdict(m, rows, True, ["trace: another one"])
    assert code == 2 and text.startswith("REFUSED")


# --- parsing --------------------------------------------------------------------------------------------------------


def test_parses_the_recorded_export(data):
    m = parse_export(data)
    assert (m.schema_version, m.aiperf_version) == ("1.4", "0.13.0")
    assert m.ttft_p50_ms == pytest.approx(data["time_to_first_token"]["p50"]) and data["time_to_first_token"]["unit"] == "ms"
    assert m.output_tok_s == pytest.approx(data["output_token_throughput"]["avg"])
    assert m.tok_s_per_user == pytest.approx(data["output_token_throughput_per_user"]["p50"]) and m.tok_s_per_user_stat == "p50"
    assert m.requests == 40 and m.errors == 0 and m.complete
    assert (m.workload.dataset_type, m.workload.isl, m.workload.osl, m.workload.requests) == ("synthetic", 512.0, 64.0, 40)


def test_parses_the_trace_replay_from_the_job_log(trace_log):
    m = parse_export(extract_from_log(trace_log))
    wl = m.workload
    assert (wl.dataset_type, wl.dataset_format, wl.trace_file) == (
        "file",
        "mooncake_trace",
        "nim_turbo_64k_400_90kv_agent_new_noschedule_short_15perc.jsonl",
    )
    assert (wl.requests, wl.concurrency, wl.ignore_eos, wl.server_token_count) == (6, 20, True, True)
    assert m.requests == 6 and m.errors == 0 and m.complete


def test_fails_outside_tolerance(data):
    m = parse_export(data)
    perf = Perf(
        concurrency=4,
        ttft_p50_ms=m.ttft_p50_ms / 1.25,
        output_tok_s_per_gpu=4 * m.tok_s_per_user * 1.25,
        tok_s_per_user=m.tok_s_per_user * 1.25,
        source="test row",
    )
    rows = compare(m, perf, gpus=1, tolerance=0.10)
    assert [r.ok for r in rows] == [False, False, False]
    code, text = format_report("t", m, rows, perf, 1, 0.10)
    assert code == 1 and "FAIL: TTFT p50 (ms), output tok/s/GPU, tok/s/user (p50) outside the tolerance" in text


def test_row_without_ttft_compares_the_rest(data):
    m = parse_export(data)
    perf = Perf(concurrency=4, ttft_p50_ms=None, output_tok_s_per_gpu=1.0, tok_s_per_user=1.0, source="x")
    rows = compare(m, perf, gpus=1, tolerance=0.1)
    assert rows[0].ok is None and rows[1].ok and rows[2].ok
    assert verdict(m, rows, True)[0] == 0


def test_no_published_row_reports_without_verdict(data):
    m = parse_export(data)
    rows = compare(m, None, gpus=1, tolerance=0.1)
    assert all(r.ok is None for r in rows)
    assert verdict(m, rows, False, ["ignored without a row"]) == (0, "no verdict: this target has no published perf row")


def test_incomplete_run_fails(data):
    d = copy.deepcopy(data)
    d["is_complete"], d["incomplete_reason"] = False, "record-stall watchdog fired"
    m = parse_export(d)
    assert verdict(m, compare(m, None, 1, 0.1), False)[0] == 1


def test_seconds_are_converted_and_bad_units_refused(data):
    d = copy.deepcopy(data)
    d["time_to_first_token"] = {**d["time_to_first_token"], "unit": "s", "p50": 0.25}
    assert parse_export(d).ttft_p50_ms == pytest.approx(250)
    d["time_to_first_token"]["unit"] = "tokens"
    with pytest.raises(ReportError, match="not a time unit"):
        parse_export(d)
    with pytest.raises(ReportError, match="not an AIPerf"):
        parse_export({"hello": 1})


def test_reads_the_recorded_job_logs(trace_log):
    text = (FIX / "benchmark-job.log").read_text()
    m = parse_export(extract_from_log(text))
    assert m.requests == 20 and m.complete and extract_manifest(text) is None  # a Job from before the manifest
    with pytest.raises(ReportError, match="no AIPerf result"):
        extract_from_log(text.split("=== BEGIN")[0])
    assert extract_manifest(trace_log)["trace_file"] == "nim_turbo_64k_400_90kv_agent_new_noschedule_short_15perc.jsonl"


def test_cli_without_published_row_exits_zero(capsys):
    code = main(["bench-report", "--stack", "ultra-b200-agg", "--file", str(EXPORT)])
    assert code == 0 and "no verdict" in capsys.readouterr().out


def test_cli_refuses_a_file_that_is_not_aiperf(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"a": 1}')
    assert main(["bench-report", "--stack", "h100-disagg", "--file", str(bad)]) == 2
    assert "not an AIPerf" in capsys.readouterr().err


def test_a_request_count_below_the_trace_length_replayed_its_first_rows(trace_log):
    """The recorded Job (requestCount 6 of a 12-row trace): with ignore_eos and server token counts, the output lengths
    are exactly those of the trace's first 6 rows, and the input lengths those rows' plus the chat template's few tokens."""
    rows = [json.loads(line) for line in (TRACE_LOG.parent / "trace.jsonl").read_text().splitlines()]
    first, rest = rows[:6], rows[6:]
    d = extract_from_log(trace_log)
    assert d["input_config"]["datasets"][0]["entries"] == 6 and d["output_sequence_length"]["count"] == 6
    osl = d["output_sequence_length"]["avg"]
    assert osl == pytest.approx(sum(r["output_length"] for r in first) / 6)
    assert osl != pytest.approx(sum(r["output_length"] for r in rest) / 6)
    overhead = d["input_sequence_length"]["avg"] - sum(r["input_length"] for r in first) / 6
    assert 0 <= overhead < 32
