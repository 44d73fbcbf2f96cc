"""Issue 13: `python -m stacks timeline`: critical path of `pulumi up` with a duration and a source per step."""
import pytest

from harness import run_program
from stacks.__main__ import main
from stacks.render import program_for_stack
from stacks.cli.timeline import build_steps, durations, schedule, timeline_for_program

LIGHTNING = dict(model="nemotron-3.5-lightning", precision="nvfp4", cache_size="140Gi")


def test_every_duration_has_a_source_and_a_basis():
    for name, row in durations()["steps"].items():
        assert row["minutes"] >= 0 and row["source"].strip(), name
        assert row["basis"] in ("measured", "documented", "derived", "estimate"), name
    assert durations()["download"]["source"]


def test_h100_disagg_critical_path_runs_through_the_gpu_node_group():
    tl = timeline_for_program(program_for_stack("h100-disagg"))
    assert tl.critical == ["vpc", "eks-control-plane", "gpu-node-group", "device-plugins", "dgd", "image-pull", "worker-startup"]
    assert "model-download" not in tl.critical and tl.slack("model-download") > 0
    # the DGD waits for both: the download may take as long as the GPU branch still runs after it ends
    assert tl.slack("model-download") == pytest.approx(tl.finish["device-plugins"] - tl.finish["model-download"])
    assert tl.total == pytest.approx(sum(tl.steps[n].minutes for n in tl.critical))


def test_download_is_off_the_critical_path_when_shorter_than_the_gpu_node_group():
    """The program starts the download on the system nodes, beside the GPU node group: a download shorter than
    the GPU nodes costs nothing; a longer one becomes the critical path."""
    steps = build_steps(mode="eks", platform=True, overrides={"gpu-node-group": 20, "model-download": 10}, **LIGHTNING)
    finish, critical = schedule(steps)
    assert "model-download" not in critical and "gpu-node-group" in critical
    # the download ends before the GPU node group does
    assert finish["model-download"] < finish["gpu-node-group"]

    steps = build_steps(mode="eks", platform=True, overrides={"gpu-node-group": 20, "model-download": 40}, **LIGHTNING)
    finish, critical = schedule(steps)
    assert "model-download" in critical and "gpu-node-group" not in critical


def test_parallel_download_saves_against_the_sequential_runbook():
    kw = dict(mode="eks", platform=True, overrides={"gpu-node-group": 20, "model-download": 10}, **LIGHTNING)
    par = schedule(build_steps(**kw))[0]
    seq = schedule(build_steps(sequential=True, **kw))[0]
    saved = max(seq.values()) - max(par.values())
    # sequentially the download (and the serving objects before it) follow the GPU nodes, plugins and platform
    assert saved == pytest.approx(10 + durations()["steps"]["serving-objects"]["minutes"])


def test_download_is_checkpoint_size_over_throughput():
    steps = build_steps(mode="kubeconfig", model="nemotron-3-ultra", precision="nvfp4", cache_size="1200Gi")
    d = durations()["download"]
    gb = 550 * durations()["checkpoints"]["bytes_per_param"]["nvfp4"]
    assert steps["model-download"].minutes == pytest.approx(d["overhead_minutes"] + gb / d["throughput_gb_per_s"] / 60, abs=0.01)
    assert "550B params" in steps["model-download"].source
    # unknown parameter count: the cache PVC size is the (stated) upper bound
    motif = build_steps(mode="kubeconfig", model="motif-3", precision="nvfp4", cache_size="300Gi")["model-download"]
    assert "upper bound" in motif.source


def test_fsx_throughput_bounds_the_download_on_eks():
    program = program_for_stack("h100-disagg")
    small = program.cluster.model_copy(update={"cache_storage": "fsx-lustre", "fsx_storage_capacity_gib": 1200, "fsx_throughput_per_tib": 125})
    program.cluster = small
    step = timeline_for_program(program).steps["model-download"]
    assert "FSx 1200 GiB x 125 MB/s/TiB" in step.source


def test_cli_prints_critical_path_with_sources(capsys):
    assert main(["timeline", "--stack", "h100-disagg"]) == 0
    out = capsys.readouterr().out
    assert "critical path:" in out and "total:" in out and "saves" in out
    assert "easontechtalk.com" in out  # the EKS control plane's source
    assert "model-download" in out.split("off the critical path")[1]


def test_cli_ultra_b200_on_its_existing_cluster(capsys):
    assert main(["timeline", "--stack", "ultra-b200-agg"]) == 0
    out = capsys.readouterr().out
    crit = out.split("critical path:")[1].split("total:")[0]
    assert "model-download" in crit and "eks-control-plane" not in crit  # no cluster to create: the download leads
    assert "550B params" in crit and "huggingface_hub PR #2989" in crit


def _closure(run, urn: str) -> set[str]:
    by_urn = {r.urn: r for r in run.resources}
    seen, todo = set(), [urn]
    while todo:
        for d in by_urn[todo.pop()].dependencies:
            if d not in seen and d in by_urn:
                seen.add(d)
                todo.append(d)
    return seen


def test_timeline_edges_are_the_programs_dependencies():
    """The edges timeline assumes are the ones the program registers: the download Job does not wait for the GPU
    node group; the DGD waits for the download and the GPU node group."""
    run = run_program({"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}}, {"hfToken": "hf_x"})
    gpu = next(r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if "gpu" in r.name)
    system = next(r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if "system" in r.name)
    job = run.one("kubernetes:batch/v1:Job")
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    job_deps, dgd_deps = _closure(run, job.urn), _closure(run, dgd.urn)
    assert gpu.urn not in job_deps and system.urn in job_deps
    assert gpu.urn in dgd_deps and job.urn in dgd_deps
    steps = build_steps(mode="eks", platform=True, **LIGHTNING)
    assert "gpu-node-group" not in steps["serving-objects"].after and "system-node-group" in steps["serving-objects"].after
    assert {"model-download", "gpu-node-group"} <= set(steps["dgd"].after)
