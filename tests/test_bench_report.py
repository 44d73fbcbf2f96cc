"""Issue 13: bench-report on recorded AIPerf 0.13.0 output (tests/fixtures/aiperf-0.13.0-dynamo-mocker, a real run)."""
import copy
import json
from pathlib import Path

import pytest

from stacks import catalog
from stacks.__main__ import main
from stacks.cli.bench_report import ReportError, compare, extract_from_log, format_report, parse_export, verdict
from stacks.catalog.model import Perf

FIX = Path(__file__).parent / "fixtures" / "aiperf-0.13.0-dynamo-mocker"
EXPORT = FIX / "profile_export_aiperf.json"


@pytest.fixture(scope="module")
def data():
    return json.loads(EXPORT.read_text())


def test_parses_the_recorded_export(data):
    m = parse_export(data)
    assert (m.schema_version, m.aiperf_version) == ("1.4", "0.13.0")
    assert m.ttft_p50_ms == pytest.approx(data["time_to_first_token"]["p50"]) and data["time_to_first_token"]["unit"] == "ms"
    assert m.output_tok_s == pytest.approx(data["output_token_throughput"]["avg"])
    assert m.tok_s_per_user == pytest.approx(data["output_token_throughput_per_user"]["p50"]) and m.tok_s_per_user_stat == "p50"
    assert m.requests == 40 and m.errors == 0 and m.complete


def _row_around(m, gpus: int, factor: float) -> Perf:
    """A published row ``factor`` times better than the measured figures."""
    return Perf(concurrency=4, ttft_p50_ms=m.ttft_p50_ms / factor, output_tok_s_per_gpu=m.output_tok_s / gpus * factor,
                tok_s_per_user=m.tok_s_per_user * factor, source="test row")


def test_passes_within_tolerance(data):
    m = parse_export(data)
    rows = compare(m, _row_around(m, 2, 1.05), gpus=2, tolerance=0.10)
    assert [r.ok for r in rows] == [True, True, True]
    code, text = format_report("t", m, rows, _row_around(m, 2, 1.05), 2, 0.10)
    assert code == 0 and "PASS" in text


def test_fails_outside_tolerance(data):
    m = parse_export(data)
    perf = _row_around(m, 2, 1.25)
    rows = compare(m, perf, gpus=2, tolerance=0.10)
    assert [r.ok for r in rows] == [False, False, False]
    code, text = format_report("t", m, rows, perf, 2, 0.10)
    assert code == 1 and "FAIL: TTFT p50 (ms), output tok/s/GPU, tok/s/user (p50) outside the tolerance" in text


def test_ttft_passes_when_lower_and_throughput_fails_when_lower(data):
    m = parse_export(data)
    perf = Perf(concurrency=4, ttft_p50_ms=m.ttft_p50_ms * 3, output_tok_s_per_gpu=m.output_tok_s * 10,
                tok_s_per_user=m.tok_s_per_user, source="x")
    ok = {r.metric: r.ok for r in compare(m, perf, gpus=1, tolerance=0.1)}
    assert ok == {"TTFT p50 (ms)": True, "output tok/s/GPU": False, "tok/s/user (p50)": True}


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
    assert verdict(m, rows, False) == (0, "no verdict: this target has no published perf row")


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


def test_reads_the_recorded_job_log():
    text = (FIX / "benchmark-job.log").read_text()
    m = parse_export(extract_from_log(text))
    assert m.requests == 20 and m.complete
    with pytest.raises(ReportError, match="no AIPerf result"):
        extract_from_log(text.split("=== BEGIN")[0])


def test_cli_fails_against_the_published_h100_row(capsys):
    """The mocker is far from an H100's published figures: exit 1 and say which figures missed."""
    code = main(["bench-report", "--stack", "h100-disagg", "--file", str(EXPORT)])
    out = capsys.readouterr().out
    assert code == 1
    assert "published: " in out and "FAIL" in out
    assert "warning: measured at concurrency 4, published at 24" in out  # the recorded run is not like for like
    perf = catalog.targets()["lightning-vllm-disagg-h100-dspark"].perf
    assert f"{perf.output_tok_s_per_gpu:,.2f}" in out


def test_cli_without_published_row_exits_zero(capsys):
    code = main(["bench-report", "--stack", "ultra-b200-agg", "--file", str(EXPORT)])
    assert code == 0 and "no verdict" in capsys.readouterr().out


def test_cli_refuses_a_file_that_is_not_aiperf(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"a": 1}')
    assert main(["bench-report", "--stack", "h100-disagg", "--file", str(bad)]) == 2
    assert "not an AIPerf" in capsys.readouterr().err
