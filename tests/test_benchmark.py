"""The optional in-cluster AIPerf benchmark (stacks/serving/benchmark.py; its layer: stacks/layers/benchmark.py,
components/layer.py): the Job runs the published method of the target's family (trace replay, warm-up, block size,
server token counts, ignore_eos, request count and concurrency of the row), fetches the trace into the cache volume,
and the exported ``aiperf`` command is its command."""

import hashlib
import json
import os
import shlex
import subprocess
import sys

import pytest

from harness import run_program
from stacks import catalog
from stacks.serving.benchmark import (
    MANIFEST_BEGIN,
    METHODS,
    RESULT_BEGIN,
    SKIP_AWAIT,
    SPEC_KEY_SYNTHETIC,
    TRACE_STEP,
    TRTLLM_SYNTHETIC_ENV,
    build_benchmark,
    local_steps,
    published_requests,
    speculative_mode,
    synthetic_speculative_dgd,
    trace,
)
from stacks.config.keys import BenchmarkConfig, ConfigError, parse
from stacks.serving.outputs import next_steps
from stacks.serving import build_plan
from stacks.registry.versions import versions

TARGET = "lightning-vllm-disagg-h100-dspark"  # published row: concurrency 24, 3,541 requests, TTFT p50 2028.23 ms
RENDER = {"target": TARGET, "cluster": {"mode": "render", "renderDir": "/tmp/dynamo-bench-render"}}


def _ctr(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


def _env(job: dict) -> dict:
    return {e["name"]: e["value"] for e in _ctr(job)["env"]}


def _plan(target: str, **cfg):
    return build_benchmark(build_plan(parse({"target": target})), BenchmarkConfig.model_validate({"enabled": True, **cfg}))


def _aiperf_runs(script: str) -> list[list[str]]:
    """The ``aiperf profile`` command lines of the Job's script, in order."""
    return [shlex.split(line) for line in script.splitlines() if line.startswith("aiperf profile")]


def _flags(argv: list[str]) -> dict:
    out, i = {}, 2
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = True
            i += 1
    return out


def test_lightning_job_replays_the_published_trace_after_a_warm_up():
    """recipes/nemotron-3.5-lightning/perf/README.md: mooncake_trace replay, server token counts, ignore_eos, 1200 s
    timeout, the row's concurrency and request count; warm-up as upstream's Job for the same trace (kimi-k2.6)."""
    b = _plan(TARGET)
    env, script = _env(b.job), _ctr(b.job)["command"][-1]
    perf = catalog.targets()[TARGET].perf
    agentic = versions()["traces"]["agentic"]
    assert env["CONCURRENCY"] == str(perf.concurrency) == "24"
    assert env["REQUEST_COUNT"] == "3541" == str(agentic["rows"])  # the whole 15% trace, as the row
    assert env["TRACE_URL"] == agentic["url"] and env["TRACE_SHA256"] == agentic["sha256"]
    assert env["MODEL"] == env["TOKENIZER"] == "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"
    assert env["FRONTEND_URL"] == "http://vllm-disagg-h100-dspark-frontend.dynamo.svc.cluster.local:8000"
    warm, main = _aiperf_runs(script)
    w, f = _flags(warm), _flags(main)
    assert (w["--isl"], w["--osl"], w["--concurrency"], w["--request-count"]) == ("8000", "1000", "1", "5")
    assert f["--custom-dataset-type"] == "mooncake_trace" and f["--input-file"] == "$TRACE_FILE"
    assert f["--request-count"] == "$REQUEST_COUNT" and f["--concurrency"] == "$CONCURRENCY"
    assert f["--extra-inputs"] == "ignore_eos:true" and f["--use-server-token-count"] is True and f["--streaming"] is True
    assert f["--request-timeout-seconds"] == "1200" and f["--endpoint-type"] == "chat" and f["--tokenizer"] == "$TOKENIZER"
    assert f["--dataset-sampling-strategy"] == "sequential" and f["--no-fixed-schedule"] is True
    assert "--isl" not in f and "--osl" not in f  # lengths come from the trace
    assert "--prompt-input-tokens-block-size" not in f  # the Lightning README does not set it (mooncake default 512)
    ctr = _ctr(b.job)
    assert ctr["image"] == versions()["images"]["aiperf"] and ctr["image"].endswith(":0.13.0")
    assert b.job["metadata"]["annotations"][SKIP_AWAIT] == "true"  # `up` does not wait for a long run
    assert b.job["spec"]["backoffLimit"] == 0 and b.job["spec"]["activeDeadlineSeconds"] == 28800
    assert script.index("warm-up") < script.index("--custom-dataset-type") < script.index("$MANIFEST_BEGIN")
    assert env["RESULT_BEGIN"] == RESULT_BEGIN and env["MANIFEST_BEGIN"] == MANIFEST_BEGIN


def test_ultra_job_sets_the_block_size_and_its_trace_per_workload():
    """recipes/nemotron-3-ultra/perf/perf.yaml: --prompt-input-tokens-block-size 512, --workers-max = concurrency,
    trust-remote-code tokenizer; chat rows replay the chat trace; H200 Day-0 rows are 300-sample replays."""
    ultra = [t for t in catalog.targets().values() if t.model == "nemotron-3-ultra" and t.perf]
    seen = set()
    for t in ultra:
        b = _plan(t.id)
        env = _env(b.job)
        warm, main = _aiperf_runs(_ctr(b.job)["command"][-1])
        f = _flags(main)
        assert f["--prompt-input-tokens-block-size"] == "512" and f["--workers-max"] == "$CONCURRENCY"
        assert f["--tokenizer-trust-remote-code"] is True and f["--extra-inputs"] == "ignore_eos:true"
        assert _flags(warm)["--isl"] == "8000"
        tr = trace(t.workload)
        assert env["TRACE_FILE"].endswith("/aiperf/traces/" + tr.file) and tr.file.startswith(
            "nim_turbo_" + ("8k_1k" if t.workload == "chat" else "64k_400")
        )
        assert env["REQUEST_COUNT"] == str(300 if t.gpu == "h200" else tr.rows)
        assert env["CONCURRENCY"] == str(t.perf.concurrency)
        seen.add((t.gpu, t.workload))
    assert {("b200", "chat"), ("b200", "agentic"), ("h200", "chat"), ("h200", "agentic")} <= seen


def test_motif_job_warms_up_inside_the_replay_with_its_synthesis_caps():
    """recipes/motif-3/perf/perf.yaml: warmup 6 requests at concurrency 6, endpoint timeout 7200 s, synthesis caps."""
    t = next(t for t in catalog.targets().values() if t.model == "motif-3")
    b = _plan(t.id)
    runs = _aiperf_runs(_ctr(b.job)["command"][-1])
    assert len(runs) == 1
    f = _flags(runs[0])
    assert (f["--warmup-request-count"], f["--warmup-concurrency"]) == ("6", "6")
    assert (f["--synthesis-max-isl"], f["--synthesis-max-osl"]) == ("262144", "12000")
    assert f["--request-timeout-seconds"] == "7200" and f["--custom-dataset-type"] == "mooncake_trace"
    assert _env(b.job)["REQUEST_COUNT"] == "1805" and _env(b.job)["TRACE_FILE"].endswith(trace("chat").file)


def test_partial_published_runs_keep_their_request_count():
    assert published_requests(catalog.targets()["lightning-trtllm-agg-h100-mtp"]) == 500
    assert published_requests(catalog.targets()["lightning-vllm-disagg-b200-dspark"]) == 500  # PR #13021 table
    assert published_requests(catalog.targets()["lightning-vllm-disagg-b200-dspark-bf16"]) == 3541


def test_results_and_trace_live_on_the_cache_volume():
    b = _plan(TARGET)
    spec = b.job["spec"]["template"]["spec"]
    mount = spec["containers"][0]["volumeMounts"][0]["mountPath"]
    # The cache claim, and the hardened pod's /tmp emptyDir (stacks/serving/hardening.py)
    assert spec["volumes"] == [
        {"name": "shared-model-cache", "persistentVolumeClaim": {"claimName": "shared-model-cache"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    env = _env(b.job)
    assert env["ARTIFACT_DIR"].startswith(mount + "/aiperf/") and env["TRACE_FILE"].startswith(mount + "/aiperf/traces/")
    assert env["HF_HOME"] == mount  # the tokenizer from the cache the download Job filled
    # Every path the script touches comes from the env (a test rig remaps the mount and nothing else).
    assert mount not in _ctr(b.job)["command"][-1]


def test_request_count_override_and_its_bound():
    t = next(t for t in catalog.targets().values() if t.model == "nemotron-3-ultra" and t.workload == "chat" and t.perf)
    b = _plan(t.id, requestCount=50)
    assert _env(b.job)["REQUEST_COUNT"] == "50" and _env(b.job)["CONCURRENCY"] == str(t.perf.concurrency)
    with pytest.raises(ConfigError, match=r"dynamo:benchmark.requestCount: 1806 is more than the 1805 rows"):
        _plan(t.id, requestCount=1806)


def test_target_without_a_published_row_replays_the_whole_trace():
    t = next(t for t in catalog.targets().values() if t.perf is None and t.model == "nemotron-3-ultra")
    b = _plan(t.id)
    assert b.perf is None and _env(b.job)["CONCURRENCY"] == "1" and _env(b.job)["REQUEST_COUNT"] == str(b.trace.rows)


# --- the trace step of the Job, run for real (python3, as in the container) --------------------------------------


def _trace_step(tmp_path, env: dict) -> subprocess.CompletedProcess:
    base = {
        "TRACE_FILE": str(tmp_path / "cache/aiperf/traces/t.jsonl"),
        "REQUEST_COUNT": "2",
        "CONCURRENCY": "4",
        "MODEL": "m",
        "METHOD": "x",
        "WARMUP": "none",
        "SPECULATIVE": "none",
        "ARTIFACT_DIR": str(tmp_path / "cache/aiperf/run"),
        "MANIFEST_FILE": "run_manifest.json",
        "PATH": os.environ["PATH"],
    }
    return subprocess.run([sys.executable, "-c", TRACE_STEP], env={**base, **env}, capture_output=True, text=True, timeout=60)


def _trace_file(path, rows: int) -> str:
    path.write_text(
        "".join(json.dumps({"input_length": 600 + i, "output_length": 20, "hash_ids": [0, i + 1]}) + "\n" for i in range(rows))
    )
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_job_downloads_an_absent_trace_into_the_cache_and_checks_it(tmp_path):
    src = tmp_path / "upstream.jsonl"
    sha = _trace_file(src, 5)
    r = _trace_step(tmp_path, {"TRACE_URL": src.as_uri(), "TRACE_SHA256": sha})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cache/aiperf/traces/t.jsonl").read_bytes() == src.read_bytes()
    manifest = json.loads((tmp_path / "cache/aiperf/run/run_manifest.json").read_text())
    assert manifest["trace_sha256"] == sha and manifest["trace_rows"] == 5 and manifest["trace_published"] is True
    assert manifest["request_count"] == 2 and "replaying the first 2" in r.stdout
    # The mean lengths of the rows the replay sends (the first 2 of 600+i input / 20 output tokens), for bench-report.
    assert (manifest["replayed_input_mean"], manifest["replayed_output_mean"]) == (600.5, 20)


def test_job_manifest_has_no_length_means_for_rows_without_lengths(tmp_path):
    staged = tmp_path / "cache/aiperf/traces/t.jsonl"
    staged.parent.mkdir(parents=True)
    staged.write_text(
        json.dumps({"text_input": "hi", "output_length": 3}) + "\n" + json.dumps({"input_length": 5, "output_length": 3}) + "\n"
    )
    sha = hashlib.sha256(staged.read_bytes()).hexdigest()
    r = _trace_step(tmp_path, {"TRACE_URL": "x", "TRACE_SHA256": sha})
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "cache/aiperf/run/run_manifest.json").read_text())
    assert manifest["trace_rows"] == 2 and manifest["replayed_input_mean"] is None and manifest["replayed_output_mean"] is None


def test_job_refuses_a_download_with_another_checksum(tmp_path):
    src = tmp_path / "upstream.jsonl"
    _trace_file(src, 5)
    r = _trace_step(tmp_path, {"TRACE_URL": src.as_uri(), "TRACE_SHA256": "0" * 64})
    assert r.returncode != 0 and "TRACE_SHA_MISMATCH" in r.stderr
    assert not list((tmp_path / "cache/aiperf/traces").iterdir())  # nothing half-written left behind


def test_job_fails_clearly_when_the_trace_is_absent_and_cannot_be_fetched(tmp_path):
    r = _trace_step(tmp_path, {"TRACE_URL": (tmp_path / "nowhere.jsonl").as_uri(), "TRACE_SHA256": "0" * 64})
    assert r.returncode != 0
    assert "TRACE_MISSING" in r.stderr and str(tmp_path / "cache/aiperf/traces/t.jsonl") in r.stderr and "kubectl cp" in r.stderr


def test_job_uses_a_staged_trace_and_records_that_it_is_not_the_published_one(tmp_path):
    staged = tmp_path / "cache/aiperf/traces/t.jsonl"
    staged.parent.mkdir(parents=True)
    sha = _trace_file(staged, 3)
    r = _trace_step(tmp_path, {"TRACE_URL": "http://127.0.0.1:9/never-fetched", "TRACE_SHA256": "f" * 64})
    assert r.returncode == 0, r.stderr
    assert "NOT the published trace" in r.stdout
    manifest = json.loads((tmp_path / "cache/aiperf/run/run_manifest.json").read_text())
    assert manifest["trace_sha256"] == sha and manifest["trace_published"] is False
    too_many = _trace_step(tmp_path, {"TRACE_URL": "x", "TRACE_SHA256": sha, "REQUEST_COUNT": "4"})
    assert too_many.returncode != 0 and "REQUEST_COUNT 4 is more than the 3 rows" in too_many.stderr


# --- the exported command is the Job's command ------------------------------------------------------------------


def _one_target_per_benchmarked_family() -> list[str]:
    """From the catalog: for every model family with a benchmark method, its first target with a published row
    (else its first target)."""
    by_family: dict[str, list] = {}
    for t in sorted(catalog.targets().values(), key=lambda t: t.id):
        if t.model in METHODS:
            by_family.setdefault(t.model, []).append(t)
    return [next((t for t in ts if t.perf), ts[0]).id for _, ts in sorted(by_family.items())]


FAMILY_TARGETS = _one_target_per_benchmarked_family()


def test_every_benchmark_method_has_a_catalog_target():
    """The exported-command test below covers every family METHODS knows (so none is left out, e.g. Motif-3)."""
    assert {catalog.targets()[t].model for t in FAMILY_TARGETS} == set(METHODS)
    assert len(FAMILY_TARGETS) == len(METHODS)


@pytest.mark.parametrize("target", FAMILY_TARGETS)
def test_exported_aiperf_is_the_jobs_command_against_the_port_forward(target):
    serving = build_plan(parse({"target": target}))
    b = build_benchmark(serving, BenchmarkConfig.model_validate({"enabled": True}))
    env = _env(b.job)
    local = {
        "$MODEL": env["MODEL"],
        "$TOKENIZER": env["TOKENIZER"],
        "$FRONTEND_URL": "http://localhost:8000",
        "$TRACE_FILE": b.trace.file,
        "$REQUEST_COUNT": env["REQUEST_COUNT"],
        "$CONCURRENCY": env["CONCURRENCY"],
        "$ARTIFACT_DIR": f"aiperf-{serving.dgd['metadata']['name']}",
    }

    def subst(arg: str) -> str:
        for ref in sorted(local, key=len, reverse=True):
            arg = arg.replace(ref, local[ref])
        return arg

    job_runs = [[subst(a) for a in run] for run in _aiperf_runs(_ctr(b.job)["command"][-1])]
    raw = local_steps(serving.target, serving.dgd)
    assert next_steps(serving)["aiperf"] == " && ".join(raw)
    steps = [shlex.split(s) for s in raw]
    assert steps[0][:3] == ["{", "test", "-f"] and b.trace.url in steps[0] and b.trace.sha256 in raw[0]
    assert steps[1:] == job_runs
    main = _flags(steps[-1])
    # What the frontend needs to accept the requests and the published figures need to mean something.
    assert main["--tokenizer"] == env["MODEL"] and main["--extra-inputs"] == "ignore_eos:true"
    assert main["--use-server-token-count"] is True and main["--url"] == "http://localhost:8000"


# --- speculative decoding as the row was measured ---------------------------------------------------------------


def test_synthetic_speculative_config_is_what_the_recipe_names_for_benchmarking():
    vllm = build_plan(parse({"target": TARGET}))
    assert speculative_mode(vllm.dgd, vllm.configmaps) == "real"
    switched = synthetic_speculative_dgd(vllm.dgd, vllm.target)
    assert speculative_mode(switched, vllm.configmaps) == "synthetic" and speculative_mode(vllm.dgd, vllm.configmaps) == "real"
    keys = {
        e["valueFrom"]["configMapKeyRef"]["key"]
        for c in switched["spec"]["components"]
        if c["type"] != "frontend"
        for e in c["podTemplate"]["spec"]["containers"][0]["env"]
        if e["name"] == "SPECULATIVE_CONFIG"
    }
    assert keys == {SPEC_KEY_SYNTHETIC}
    assert SPEC_KEY_SYNTHETIC in vllm.configmaps[0]["data"]  # the key the switch selects exists
    trt = build_plan(parse({"target": "lightning-trtllm-agg-h100-mtp"}))
    assert speculative_mode(trt.dgd, trt.configmaps) == "real"
    env = {
        e["name"]: e.get("value")
        for c in synthetic_speculative_dgd(trt.dgd, trt.target)["spec"]["components"]
        if c["type"] != "frontend"
        for e in c["podTemplate"]["spec"]["containers"][0]["env"]
    }
    assert env[TRTLLM_SYNTHETIC_ENV] == "3.687"  # the Synthetic AL of the H100 MTP row
    b = _plan(TARGET)
    assert (b.speculative, b.row_speculative) == ("real", "synthetic") and _env(b.job)["SPECULATIVE"] == "real"


# --- config and wiring ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bench, key",
    [
        ({"requestCount": 10}, "benchmark.requestCount"),  # set while off
        ({"enabled": True, "tolerance": 1.5}, "benchmark.tolerance"),
        ({"enabled": True, "requestCount": 0}, "benchmark.requestCount"),
    ],
)
def test_bad_benchmark_config_names_the_key(bench, key):
    with pytest.raises(ConfigError, match=f"dynamo:{key}"):
        parse({"target": TARGET, "benchmark": bench})


def test_off_by_default():
    run = run_program(RENDER, {"hfToken": "hf_x"})
    assert not [r for r in run.resources if r.type.startswith("dynamo:benchmark")]
    assert all(not r.name.endswith("aiperf-vllm-disagg-h100-dspark") for r in run.resources)


def test_job_is_registered_after_the_dgd_with_the_perf_parameters():
    run = run_program({**RENDER, "benchmark": {"enabled": True}}, {"hfToken": "hf_x"})
    comp = run.one("dynamo:benchmark:Benchmark")
    job = next(r for r in run.by_type("kubernetes:batch/v1:Job") if r.parent == comp.urn)
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    assert dgd.urn in job.dependencies
    env = {e["name"]: e["value"] for e in job.inputs["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CONCURRENCY"] == "24" and env["REQUEST_COUNT"] == "3541" and env["TRACE_FILE"].endswith(trace("agentic").file)
    assert run.outputs["followBenchmark"] == "kubectl -n dynamo logs -f job/aiperf-vllm-disagg-h100-dspark"


def test_synthetic_acceptance_is_an_opt_in_that_changes_the_registered_dgd_and_nothing_else():
    """benchmark.syntheticAcceptance: the DGD that up registers serves the recipe's synthetic speculative config (as
    the published rows were measured), so the Job records it; without the key the DGD serves the real acceptance."""

    def workers_keys(run):
        dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment").inputs
        return {
            e["valueFrom"]["configMapKeyRef"]["key"]
            for c in dgd["spec"]["components"]
            if c["type"] != "frontend"
            for e in c["podTemplate"]["spec"]["containers"][0]["env"]
            if e["name"] == "SPECULATIVE_CONFIG"
        }

    def job_env(run):
        job = next(r for r in run.by_type("kubernetes:batch/v1:Job") if r.name.endswith("aiperf-vllm-disagg-h100-dspark"))
        return {e["name"]: e["value"] for e in job.inputs["spec"]["template"]["spec"]["containers"][0]["env"]}

    real = run_program({**RENDER, "benchmark": {"enabled": True}}, {"hfToken": "hf_x"})
    synthetic = run_program({**RENDER, "benchmark": {"enabled": True, "syntheticAcceptance": True}}, {"hfToken": "hf_x"})
    assert workers_keys(real) == {"speculative-config"} and job_env(real)["SPECULATIVE"] == "real"
    assert workers_keys(synthetic) == {SPEC_KEY_SYNTHETIC} and job_env(synthetic)["SPECULATIVE"] == "synthetic"
    assert sorted(r.urn for r in real.resources) == sorted(r.urn for r in synthetic.resources)
    with pytest.raises(ConfigError, match="benchmark.syntheticAcceptance"):
        parse({"target": TARGET, "benchmark": {"syntheticAcceptance": True}})  # set while the benchmark is off


def test_follow_commands_are_exported():
    run = run_program({"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}}, {"hfToken": "hf_x"})
    assert run.outputs["followDownload"] == "kubectl -n dynamo logs -f job/model-download"
    assert run.outputs["watchDgd"] == "kubectl -n dynamo get dgd vllm-disagg-h100-dspark -w"
    assert run.outputs["followKubeconfig"].startswith("aws eks update-kubeconfig --region us-east-1 --name ")


def test_exported_trace_step_keeps_a_staged_file_and_refuses_a_bad_download(tmp_path):
    """The first exported step, run by bash: a trace already in the working directory is used (no network);
    otherwise it is downloaded and checked, and a file with another SHA-256 is not kept."""
    serving = build_plan(parse({"target": TARGET}))
    fetch = local_steps(serving.target, serving.dgd)[0]
    name = trace("agentic").file
    (tmp_path / name).write_text("staged\n")
    assert subprocess.run(["bash", "-c", fetch], cwd=tmp_path, capture_output=True, timeout=30).returncode == 0
    (tmp_path / name).unlink()
    src = tmp_path / "elsewhere.jsonl"
    src.write_text("not the trace\n")
    bad = fetch.replace(shlex.quote(trace("agentic").url), src.as_uri())
    r = subprocess.run(["bash", "-c", bad], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "FAILED" in r.stdout and not (tmp_path / name).exists()
    good = bad.replace(trace("agentic").sha256, hashlib.sha256(src.read_bytes()).hexdigest())
    assert subprocess.run(["bash", "-c", good], cwd=tmp_path, capture_output=True, timeout=30).returncode == 0
    assert (tmp_path / name).read_bytes() == src.read_bytes()
