"""Issue 13: the optional in-cluster AIPerf benchmark (stacks/benchmark.py, components/benchmark.py)."""
import pytest

from harness import run_program
from stacks import catalog
from stacks.benchmark import RESULT_BEGIN, SKIP_AWAIT, WORKLOADS, build_benchmark
from stacks.config import BenchmarkConfig, ConfigError, parse
from stacks.serving import build_plan
from stacks.versions import versions

TARGET = "lightning-vllm-disagg-h100-dspark"  # published row: concurrency 24, TTFT p50 2028.23 ms
RENDER = {"target": TARGET, "cluster": {"mode": "render", "renderDir": "/tmp/dynamo-bench-render"}}


def _env(job: dict) -> dict:
    return {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


def _plan(target: str, **cfg):
    return build_benchmark(build_plan(parse({"target": target})), BenchmarkConfig.model_validate({"enabled": True, **cfg}))


def test_job_carries_the_perf_row_and_workload():
    b = _plan(TARGET)
    env = _env(b.job)
    perf = catalog.targets()[TARGET].perf
    assert env["CONCURRENCY"] == str(perf.concurrency) == "24"
    assert env["REQUEST_COUNT"] == "240"  # 10 x concurrency
    assert (env["ISL"], env["OSL"]) == ("64000", "400")  # the Lightning perf README's 64k/400 agentic trace
    assert env["MODEL"] == "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"
    assert env["FRONTEND_URL"] == "http://vllm-disagg-h100-dspark-frontend.dynamo.svc.cluster.local:8000"
    ctr = b.job["spec"]["template"]["spec"]["containers"][0]
    assert ctr["image"] == versions()["images"]["aiperf"] and ctr["image"].endswith(":0.13.0")
    assert b.job["metadata"]["annotations"][SKIP_AWAIT] == "true"  # `up` does not wait for a long run
    assert b.job["spec"]["backoffLimit"] == 0
    assert RESULT_BEGIN in ctr["command"][-1] or env["RESULT_BEGIN"] == RESULT_BEGIN
    for flag in ("--concurrency \"$CONCURRENCY\"", "--isl \"$ISL\"", "--osl \"$OSL\"", "--extra-inputs ignore_eos:true", "--streaming"):
        assert flag in ctr["command"][-1], flag


def test_results_land_on_the_cache_volume():
    b = _plan(TARGET)
    spec = b.job["spec"]["template"]["spec"]
    assert spec["volumes"] == [{"name": "shared-model-cache", "persistentVolumeClaim": {"claimName": "shared-model-cache"}}]
    assert _env(b.job)["ARTIFACT_DIR"].startswith(spec["containers"][0]["volumeMounts"][0]["mountPath"] + "/aiperf/")


def test_chat_workload_and_request_count_override():
    t = next(t for t in catalog.targets().values() if t.model == "nemotron-3-ultra" and t.workload == "chat" and t.perf)
    b = _plan(t.id, requestCount=50)
    env = _env(b.job)
    assert (env["ISL"], env["OSL"]) == (str(WORKLOADS["chat"].isl), str(WORKLOADS["chat"].osl))
    assert env["CONCURRENCY"] == str(t.perf.concurrency) and env["REQUEST_COUNT"] == "50"


def test_target_without_a_published_row_still_runs():
    t = next(t for t in catalog.targets().values() if t.perf is None)
    b = _plan(t.id)
    assert b.perf is None and _env(b.job)["CONCURRENCY"] == "1"


@pytest.mark.parametrize("bench, key", [
    ({"requestCount": 10}, "benchmark.requestCount"),  # set while off
    ({"enabled": True, "tolerance": 1.5}, "benchmark.tolerance"),
    ({"enabled": True, "requestCount": 0}, "benchmark.requestCount"),
])
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
    assert env["CONCURRENCY"] == "24" and env["ISL"] == "64000" and env["OSL"] == "400"
    assert run.outputs["followBenchmark"] == "kubectl -n dynamo logs -f job/aiperf-vllm-disagg-h100-dspark"


def test_follow_commands_are_exported():
    run = run_program({"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}}, {"hfToken": "hf_x"})
    assert run.outputs["followDownload"] == "kubectl -n dynamo logs -f job/model-download"
    assert run.outputs["watchDgd"] == "kubectl -n dynamo get dgd vllm-disagg-h100-dspark -w"
    assert run.outputs["followKubeconfig"].startswith("aws eks update-kubeconfig --region us-east-1 --name ")
