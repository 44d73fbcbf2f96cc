"""`python -m stacks timeline`: critical path of `pulumi up` with a duration and a source per step."""

import pytest

from harness import run_program
from stacks.__main__ import main
from stacks.program.render import program_for_stack
from stacks.cli.timeline import build_steps, durations, legs_minutes, schedule, serving_paths, timeline_for_program

LIGHTNING = dict(model="nemotron-3.5-lightning", precision="nvfp4", cache_size="140Gi")


def test_every_duration_has_a_source_and_a_basis():
    for name, row in durations()["steps"].items():
        assert row["minutes"] >= 0 and row["source"].strip(), name
        assert row["basis"] in ("measured", "documented", "derived", "estimate"), name
    assert durations()["download"]["source"]


def test_h100_disagg_critical_path_is_the_longest_branch_into_the_dgd():
    """The DGD waits for three branches that start from the control plane: the GPU nodes (and their plugins' pods), the
    model download (after the storage), and the Dynamo platform (after the system nodes, not the storage). The worker
    starts after the DGD and the image pull (pulled by the pre-puller from the GPU node's join); the critical path runs
    through whichever ends last."""
    tl = timeline_for_program(program_for_stack("h100-disagg"))
    assert tl.steps["dgd"].after == ("model-download", "gpu-node-group", "device-plugin-pods", "dynamo-platform")
    assert tl.steps["dynamo-platform"].after == ("system-node-group",)
    assert tl.steps["worker-startup"].after == ("image-pull", "dgd")
    last = max(tl.steps["dgd"].after, key=lambda n: tl.finish[n])
    into_worker = max(tl.steps["worker-startup"].after, key=lambda n: tl.finish[n])
    assert tl.critical[-2:] == [into_worker, "worker-startup"]
    if into_worker == "dgd":  # the branch into the DGD that ends last is on the path
        assert last in tl.critical
    assert tl.critical[:2] == ["vpc", "eks-control-plane"]
    # the plugins install from the system nodes, beside the GPU node group: only their pods on the new node wait for it
    assert tl.steps["device-plugins"].after == ("system-node-group",) and "device-plugins" not in tl.critical
    ends = [b for b in tl.steps["dgd"].after if all(b not in s.after for n, s in tl.steps.items() if n != "dgd")]
    assert ends == ["model-download", "device-plugin-pods", "dynamo-platform"]
    for branch in ends:  # every branch's last step has exactly the slack to the one that ends last
        assert tl.slack(branch) == pytest.approx(tl.finish[last] - tl.finish[branch]), branch
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
    small = program.cluster.model_copy(
        update={"cache_storage": "fsx-lustre", "fsx_storage_capacity_gib": 1200, "fsx_throughput_per_tib": 125}
    )
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
    # The image pre-puller exists before any node group or storage, so its pull starts when a GPU node joins.
    (prepuller,) = [r for r in run.by_type("kubernetes:apps/v1:DaemonSet") if r.name.endswith("-image-prepull")]
    waits = _closure(run, prepuller.urn)
    node_groups = {r.urn for r in run.by_type("aws:eks/nodeGroup:NodeGroup")}
    storage = {r.urn for r in run.resources if "StorageClass" in r.type or "FileSystem" in r.type or "PersistentVolume" in r.type}
    assert not (waits & node_groups) and not (waits & storage) and dgd.urn not in waits and job.urn not in waits
    assert build_steps(mode="eks", platform=True, prepull=True, **LIGHTNING)["image-pull"].after == ("gpu-node-group",)


# ---------------------------------------------------------------------------------------------- GPU capacity paths
def test_karpenter_path_launches_gpu_nodes_when_the_nodepool_exists():
    """On Karpenter there is no GPU node group: the controller comes after the system nodes, and the GPU nodes launch
    once the NodePool exists (for the pool's capacity placeholder Job, created with it), while the platform, the serving
    objects and the DGD are created; without a pre-puller the workers' image pull waits for both the DGD and the nodes."""
    from stacks.cli.timeline import gpu_launch

    # GPU nodes that take longer than the other branches, so that their path is the critical one on both
    kw = dict(mode="eks", platform=True, overrides={"gpu-node-group": 20}, **LIGHTNING)
    ng = build_steps(**kw)
    kw["overrides"] = {"gpu-node-launch": 20}
    kp = build_steps(capacity="karpenter", **kw)
    assert "gpu-node-group" not in kp and "karpenter" in kp and "gpu-node-launch" not in ng and "karpenter-aws" not in ng
    assert kp["karpenter-aws"].after == ("eks-control-plane",)
    assert kp["karpenter"].after == ("system-node-group", "karpenter-aws")
    assert kp["gpu-node-launch"].after == ("karpenter",)
    assert kp["device-plugin-pods"].after == ("gpu-node-launch", "device-plugins")
    assert kp["image-pull"].after == ("dgd", "device-plugin-pods")
    assert "karpenter" in kp["dgd"].after and "gpu-node-launch" not in kp["dgd"].after
    fn, cn = schedule(ng)
    fk, ck = schedule(kp)
    assert "gpu-node-launch" in ck and "gpu-node-group" in cn
    start = lambda steps, fin, n: fin[n] - steps[n].minutes  # noqa: E731
    assert start(kp, fk, "gpu-node-launch") == pytest.approx(fk["karpenter"]) and fk["karpenter"] < fk["dgd"]  # before the DGD
    assert start(kp, fk, "gpu-node-launch") > start(ng, fn, "gpu-node-group")  # the controller comes first
    # Launching with the NodePool instead of with the DGD's Pending pods saves what lies between them.
    after_dgd = build_steps(capacity="karpenter", **kw)
    after_dgd["gpu-node-launch"].after = ("dgd",)
    assert schedule(after_dgd)[0]["worker-startup"] - fk["worker-startup"] == pytest.approx(fk["dgd"] - fk["karpenter"])
    with pytest.raises(ValueError, match="capacity 'spot'"):
        build_steps(capacity="spot", **kw)
    # Outside EKS the capacity changes nothing (no node groups of ours).
    assert (
        build_steps(mode="kubeconfig", capacity="karpenter", **LIGHTNING).keys()
        == build_steps(mode="kubeconfig", **LIGHTNING).keys()
    )
    assert gpu_launch(type("T", (), {"capacity": "karpenter", "start": lambda self, n: start(kp, fk, n)})()) == (
        "gpu-node-launch",
        pytest.approx(fk["karpenter"]),
    )


def test_pause_time_is_consolidate_after_plus_karpenters_polling_and_validation():
    from stacks.cli.timeline import duration_seconds, pause_seconds

    assert duration_seconds("10m") == 600 and duration_seconds("1h30m") == 5400 and duration_seconds("Never") is None
    for bad in ("10 m", "5d", "", "1.5h"):
        with pytest.raises(ValueError, match="consolidateAfter"):
            duration_seconds(bad)
    k = durations()["karpenter"]
    assert pause_seconds(600) == 600 + k["disruption_polling_s"] + k["emptiness_validation_s"]
    assert pause_seconds(None) is None
    # The real Karpenter's measured pause (tests/test_karpenter_engine.py) stays within the bound at its setting.
    m = k["measured"]
    assert max(m["pause_to_zero_nodes_s"]) <= pause_seconds(m["consolidate_after_s"]) + 20


def test_cli_shows_node_group_and_karpenter_paths_side_by_side(capsys):
    assert main(["timeline", "--stack", "h100-disagg"]) == 0
    out = capsys.readouterr().out.split("GPU capacity, managed node group vs Karpenter")[1]
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith(("node group", "karpenter"))}
    assert "(this stack)" in rows["node"] and "(this stack)" not in rows["karpenter"]
    flat = " ".join(out.split())  # the report wraps at 100 columns
    assert "consolidateAfter 600 s" in flat  # the default of stacks/cluster/karpenter.py: a node-group stack moved to Karpenter
    assert "tests/test_karpenter_engine.py" in flat and "resume on Karpenter" in flat


def test_karpenter_timeline_of_a_stack_with_its_pool_on_karpenter():
    from stacks.cli.timeline import report

    program = program_for_stack("h100-disagg")
    program.cluster = program.cluster.model_copy(update={"capacity": "karpenter", "consolidate_after": "2m"})
    tl = timeline_for_program(program)
    assert tl.capacity == "karpenter" and tl.consolidate_after_s == 120
    assert "gpu-node-launch" in tl.critical and "gpu-node-group" not in tl.steps
    other = timeline_for_program(program, capacity="node-group")
    text = report(tl, timeline_for_program(program, sequential=True), other)
    assert "GPU capacity karpenter" in text.splitlines()[0]
    assert "consolidateAfter 120 s" in " ".join(text.split())  # the report wraps at 100 columns


def test_karpenter_timeline_edges_are_the_programs_dependencies():
    """With the GPU pool on Karpenter the program has no GPU node group; the DGD waits for the download and the
    NodePool, the download does not wait for the NodePool, and the pool's capacity placeholder Job waits for the
    NodePool only, not for the platform, the download or the DGD; Karpenter's AWS resources wait for no node, its
    release for them and the system nodes (the timeline's karpenter-aws and karpenter edges)."""
    run = run_program(
        {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks", "capacity": "karpenter", "maxNodes": 2}},
        {"hfToken": "hf_x"},
    )
    groups = [r.name for r in run.by_type("aws:eks/nodeGroup:NodeGroup")]
    assert groups and all("system" in g for g in groups), groups  # the system group only: no GPU node group
    pool = run.one("kubernetes:karpenter.sh/v1:NodePool")
    jobs = {r.name.rsplit("-", 1)[-1]: r for r in run.by_type("kubernetes:batch/v1:Job")}
    placeholder = jobs.pop("placeholder")
    (job,) = jobs.values()  # the model download
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    assert pool.urn in _closure(run, dgd.urn) and job.urn in _closure(run, dgd.urn)
    assert pool.urn not in _closure(run, job.urn)
    waits = _closure(run, placeholder.urn)
    assert pool.urn in waits and not {job.urn, dgd.urn} & waits and placeholder.urn not in _closure(run, dgd.urn)
    assert not any("platform" in u for u in waits), sorted(waits)
    # The controller's release waits for the system nodes and the add-ons made before them, none made after them (the
    # timeline's karpenter step follows the system node group, not the add-ons).
    (release,) = [r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.name.endswith("-karpenter")]
    addons = {r.inputs["addonName"]: r.urn for r in run.by_type("aws:eks/addon:Addon")}
    before = _closure(run, release.urn)
    assert addons["vpc-cni"] in before and addons["eks-pod-identity-agent"] in before
    assert not {addons[a] for a in ("coredns", "kube-proxy", "aws-efs-csi-driver")} & before, sorted(before)
    # Karpenter's AWS side (roles, Pod Identity association, node access entry, queue, rules) waits for no node group:
    # it is made beside the system nodes (karpenter-aws, after the control plane); the release waits for it too.
    (system,) = run.by_type("aws:eks/nodeGroup:NodeGroup")
    aws_side = [r for r in run.resources if r.type.startswith("aws:") and "-karpenter" in r.name]
    kinds = {r.type.split(":")[-1] for r in aws_side}
    assert {"Role", "Policy", "PodIdentityAssociation", "AccessEntry", "Queue", "EventRule", "EventTarget"} <= kinds, kinds
    for r in aws_side:
        assert system.urn not in _closure(run, r.urn), r.name
    assert system.urn in before
    assert {
        r.urn for r in aws_side if r.type.split(":")[-1] in ("PodIdentityAssociation", "AccessEntry", "EventTarget")
    } <= before
    assert pool.urn not in before and release.urn in _closure(run, pool.urn)
    steps = build_steps(mode="eks", platform=True, capacity="karpenter", **LIGHTNING)
    assert steps["karpenter-aws"].after == ("eks-control-plane",)
    assert steps["karpenter"].after == ("system-node-group", "karpenter-aws")
    assert "karpenter" not in steps["serving-objects"].after and {"model-download", "karpenter"} <= set(steps["dgd"].after)
    assert steps["gpu-node-launch"].after == ("karpenter",)


def test_cli_refuses_a_cluster_only_stack_in_one_line(capsys):
    """A cluster-only stack serves nothing: timeline says so with exit 2 instead of a traceback."""
    assert main(["timeline", "--stack", "h100-cluster"]) == 2
    err = capsys.readouterr().err
    assert "h100-cluster serves nothing" in err and len(err.strip().splitlines()) == 1


def test_pause_line_is_what_the_paused_plan_does(capsys):
    """The node-group half of the pause line against the program's own pause (stacks/serving/autoscaling.py
    pause_pools): the stack with every entry paused, as `stacks cost` prices it, has its GPU node groups at the desired
    and min size the line states; the stack as committed has GPU nodes to lose."""
    import re

    from stacks.cli.cost import paused_raw
    from stacks.program import build_program
    from stacks.program.render import split_secrets, stack_aws_region, stack_raw_config

    name = "h100-disagg"
    plain, secret = split_secrets(stack_raw_config(name))
    running = build_program(plain, name, secret, aws_region=stack_aws_region(name))
    paused = build_program(paused_raw(plain), name, secret, aws_region=stack_aws_region(name))

    def size(plan):
        return {
            (p.name, p.nodegroup["scaling_config"]["desired_size"], p.nodegroup["scaling_config"]["min_size"])
            for p in plan.cluster_plan.gpu_pools
            if (p.nodegroup or {}).get("scaling_config")
        }

    assert size(running) and all(d > 0 for _, d, _ in size(running))
    ((desired, min_size),) = {(d, m) for _, d, m in size(paused)}
    assert main(["timeline", "--stack", name]) == 0
    out = " ".join(capsys.readouterr().out.split())
    m = re.search(r"pause \(every entry on the pool paused, or at replicas: 0\): (.*?); Karpenter", out)
    assert m, f"no pause line for the node group: {out}"
    line = m.group(1)
    assert f"the node group goes to {desired} nodes" in line
    assert f"desired and min size {desired}" in line and min_size == desired
    assert "keeps its GPU nodes" not in out


def test_five_paths_sum_their_steps_and_are_held_to_their_targets(capsys):
    """Each path is the sum of its steps' durations (the registry's, the derived image pull and worker start), warm
    differs from cold by the compile only, a resume and a same-node scale-out are held to their targets on the warm
    start (the component ran with the same key), and the CLI prints every path with its target verdict."""
    program = program_for_stack("h100-disagg")
    ng, kp = timeline_for_program(program, capacity="node-group"), timeline_for_program(program, capacity="karpenter")
    paths = serving_paths(ng, ng, kp)
    table, targets = durations()["steps"], durations()["targets"]
    assert len(paths) == 5
    assert (paths[0].cold, paths[1].cold) == (ng.total, kp.total)
    saved = ng.steps["worker-startup"].minutes - ng.warm_start.minutes
    assert saved == pytest.approx(durations()["worker_start"]["compile_cold_minutes"], abs=0.01)
    for p in paths:
        assert p.warm == pytest.approx(p.cold - saved), p.name
        assert p.steps[-1] == "worker-startup"
    own = {**{n: r["minutes"] for n, r in table.items()}, **{n: s.minutes for n, s in ng.steps.items()}}
    for p in paths[2:]:
        assert p.cold == pytest.approx(legs_minutes(p.steps, own.__getitem__)), p.name
    assert "image-pull" not in paths[3].steps and "gpu-node-group" in paths[4].steps  # same node: no pull, no launch
    # a new node (resume, scale-out) pulls the image beside the plugins' pods: the program pre-pulls it
    assert ng.prepull and paths[2].steps == paths[4].steps == (
        "gpu-node-group",
        ("device-plugin-pods", "image-pull"),
        "worker-startup",
    )
    assert (paths[0].target_cold, paths[0].target_warm) == (targets["empty-account"]["cold"], targets["empty-account"]["warm"])
    assert (paths[2].target_cold, paths[2].target_warm) == (None, targets["resume"]["warm"])
    assert main(["timeline", "--stack", "h100-disagg"]) == 0
    out = capsys.readouterr().out
    for p in paths:
        assert p.name in out
    flat = " ".join(out.split())  # the report wraps at 100 columns
    row = flat.split("scale-out on a running node", 1)[1].split(" + worker-startup", 1)[0]
    bar = targets["scale-out-same-node"]["warm"]
    verdict = "met" if paths[3].warm <= bar else f"misses by {paths[3].warm - bar:.1f}"
    assert f"cold {paths[3].cold:.1f}, warm {paths[3].warm:.1f} (target {bar:g}: {verdict})" in row, row


def test_image_pull_is_the_image_size_at_the_measured_parallel_pull_rate():
    """The worker image's pull: its size at the rate of AWS's measured parallel pull (bytes over seconds), about half
    the default pull's time; every GPU node pulls that way (FastImagePull in the node groups' NodeConfig)."""
    from stacks.cli.timeline import image_pull_step

    im = durations()["image"]
    step = image_pull_step(("dgd",))
    assert step.minutes * 60 == pytest.approx(im["gigabytes"] * 1e9 * im["measured_parallel_s"] / im["measured_bytes"], abs=1)
    assert im["measured_parallel_s"] < im["measured_default_s"] and step.basis == "derived"


def test_warm_worker_start_follows_the_checkpoint_the_storage_and_the_probe():
    """The warm start grows with the checkpoint read from the cache (Ultra's is 18 times Lightning's), is faster from
    a faster file system, and the probe adds one period: the fast startup probe's 5 s against upstream's 30 s."""
    from stacks.cli.timeline import worker_steps

    ws = durations()["worker_start"]
    fixed = sum(r["seconds"] for r in ws["warm_seconds"].values())
    _, light = worker_steps("nemotron-3.5-lightning", "nvfp4", None, None, 30)
    _, ultra = worker_steps("nemotron-3-ultra", "nvfp4", None, None, 30)
    per_b = durations()["checkpoints"]["bytes_per_param"]["nvfp4"]
    assert light.minutes * 60 == pytest.approx(fixed + 30 + 30 * per_b / ws["cache_read_gb_per_s"], abs=1)
    assert ultra.minutes * 60 == pytest.approx(fixed + 30 + 550 * per_b / ws["cache_read_gb_per_s"], abs=1)
    _, fsx = worker_steps("nemotron-3-ultra", "nvfp4", None, (6.0, "FSx"), 30)
    _, fast = worker_steps("nemotron-3-ultra", "nvfp4", None, None, 5)
    assert fsx.minutes < ultra.minutes and ultra.minutes - fast.minutes == pytest.approx(25 / 60, abs=0.01)


def test_probe_period_is_read_from_the_stacks_workers():
    """The timeline reads the rendered DGD's GPU worker startupProbe period: the recipe's, or 5 s with the fast probe."""
    from stacks.cli.timeline import probe_period
    from stacks.program import build_program

    recipe = build_program({"target": "lightning-vllm-agg-h100-dspark"}, "t", frozenset({"hfToken"})).entries[0].plan.dgd
    fast = (
        build_program(
            {"target": "lightning-vllm-agg-h100-dspark", "fastStartupProbe": {"enabled": True}}, "t", frozenset({"hfToken"})
        )
        .entries[0]
        .plan.dgd
    )
    periods = {
        c["startupProbe"]["periodSeconds"]
        for comp in recipe["spec"]["components"]
        for c in comp["podTemplate"]["spec"]["containers"]
        if c.get("startupProbe") and (c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")
    }
    assert probe_period(recipe) == max(periods) and probe_period(fast) == 5


# ---------------------------------------------------------------------------------------------- image pre-puller
@pytest.mark.parametrize("capacity", ["node-group", "karpenter"])
def test_prepull_starts_the_image_pull_when_the_gpu_node_joins(capacity):
    """With the pre-puller (stacks/serving/prepull.py) the image pull follows the GPU node's join, beside the plugins'
    pods, and the worker start waits for the pull, the DGD and (Karpenter; on a node group the DGD waits for them) the
    plugins' pods; without it the pull follows the DGD (and on Karpenter the plugins' pods) and the worker the pull."""
    kw = dict(mode="eks", platform=True, capacity=capacity, **LIGHTNING)
    karpenter = capacity == "karpenter"
    node = "gpu-node-launch" if karpenter else "gpu-node-group"
    plugins = ("device-plugin-pods",) if karpenter else ()
    pre = build_steps(prepull=True, **kw)
    assert pre["image-pull"].after == (node,)
    assert pre["worker-startup"].after == ("image-pull", "dgd", *plugins)
    assert "stacks/serving/prepull.py" in pre["image-pull"].source and "node joins" in pre["image-pull"].source
    if not karpenter:
        assert "device-plugin-pods" in pre["dgd"].after  # the worker waits for the plugins' pods through the DGD
    old = build_steps(**kw)
    assert old["image-pull"].after == ("dgd", *plugins)
    assert old["worker-startup"].after == ("image-pull",)
    assert "prepull.py" not in old["image-pull"].source
    assert {n: s.after for n, s in old.items()} == {n: s.after for n, s in build_steps(prepull=False, **kw).items()}
    # the same durations: the pull moves earlier, never later, and the worker starts no later
    (fp, _), (fo, _) = schedule(pre), schedule(old)
    assert fp["image-pull"] < fo["image-pull"] and fp["worker-startup"] <= fo["worker-startup"]
    start = fp["worker-startup"] - pre["worker-startup"].minutes
    assert start == pytest.approx(max(fp[n] for n in pre["worker-startup"].after))
    # the recipe runbook has no pre-puller: its graph pulls for the scheduled worker
    assert build_steps(prepull=True, sequential=True, **kw)["image-pull"].after == ("dgd", *plugins)


def test_prepull_needs_a_gpu_node_of_the_stack():
    """A mode that does not create its cluster has no GPU node join to start from (and plans no pre-puller): the graph
    is the one without."""
    on = build_steps(mode="kubeconfig", device_plugins=True, prepull=True, **LIGHTNING)
    off = build_steps(mode="kubeconfig", device_plugins=True, **LIGHTNING)
    assert {n: s.after for n, s in on.items()} == {n: s.after for n, s in off.items()}
    assert on["image-pull"].after == ("dgd",) and on["worker-startup"].after == ("image-pull",)


def test_timeline_prepulls_where_the_programs_entries_carry_a_prepuller():
    """The timeline reads the pre-puller from the program: an eks stack whose entries carry one pulls from the GPU
    node's join; the same program without it, and a kubeconfig stack, keep the pull after the DGD."""
    from stacks.cli.timeline import has_prepuller
    from stacks.config.stack import KubeconfigCluster

    program = program_for_stack("h100-disagg")
    assert program.entries and all(e.plan.image_prepuller is not None for e in program.entries)
    assert has_prepuller(program)
    tl = timeline_for_program(program)
    assert tl.prepull and tl.steps["image-pull"].after == ("gpu-node-group",)
    assert tl.steps["worker-startup"].after == ("image-pull", "dgd")
    assert tl.warm_start is not None and tl.warm_start.after == tl.steps["worker-startup"].after
    kp = timeline_for_program(program, capacity="karpenter")
    assert kp.prepull and kp.steps["image-pull"].after == ("gpu-node-launch",)

    for e in program.entries:
        e.plan.image_prepuller = None
    assert not has_prepuller(program)
    off = timeline_for_program(program)
    assert not off.prepull and off.steps["image-pull"].after == ("dgd",)
    assert off.steps["worker-startup"].after == ("image-pull",)

    kube = next(
        n for n in ("ultra-b200-agg", "motif3-b200-disagg") if isinstance(program_for_stack(n).cluster, KubeconfigCluster)
    )
    kprog = program_for_stack(kube)
    assert kprog.cluster.mode == "kubeconfig" and not has_prepuller(kprog)
    ktl = timeline_for_program(kprog)
    assert not ktl.prepull and ktl.steps["image-pull"].after == ("dgd",)


@pytest.mark.parametrize("capacity", ["node-group", "karpenter"])
def test_h100_disagg_meets_the_time_to_serving_targets(capacity):
    """Every path with a target in durations.yaml ``targets`` meets it, from the stack's own graph on either GPU
    capacity path (a warm start is held to the cold target where the path has no warm one)."""
    program = program_for_stack("h100-disagg")
    ng, kp = timeline_for_program(program, capacity="node-group"), timeline_for_program(program, capacity="karpenter")
    own = ng if capacity == "node-group" else kp
    paths = serving_paths(own, ng, kp)
    targets = durations()["targets"]
    held = {p.name: (p.target_cold, p.target_warm) for p in paths if (p.target_cold, p.target_warm) != (None, None)}
    assert len(held) == len(targets) + 1  # the empty account twice (node group, Karpenter), each other target once
    for p in paths:
        if p.target_cold is not None:
            assert p.cold <= p.target_cold, (p.name, p.cold, p.target_cold)
        warm_target = p.target_warm if p.target_warm is not None else p.target_cold
        if warm_target is not None:
            assert p.warm <= warm_target, (p.name, p.warm, warm_target)
    # the resume on this capacity is a node, the plugins' pods beside the pre-pulled image, then the worker
    launch = "karpenter-node-launch" if capacity == "karpenter" else "gpu-node-group"
    assert paths[2].steps == (launch, ("device-plugin-pods", "image-pull"), "worker-startup")


def test_karpenter_steps_come_from_durations():
    """The Karpenter path's AWS side and controller carry the registry's durations and sources; the GPU nodes launch
    after the controller, which waits for the system nodes and the AWS side."""
    table = durations()["steps"]
    steps = build_steps(mode="eks", platform=True, capacity="karpenter", **LIGHTNING)
    for name in ("karpenter-aws", "karpenter"):
        assert steps[name].minutes == table[name]["minutes"] and steps[name].source == table[name]["source"], name
        assert steps[name].basis == table[name]["basis"]
    finish, _ = schedule(steps)
    assert finish["karpenter-aws"] - steps["karpenter-aws"].minutes == pytest.approx(finish["eks-control-plane"])
    begin = max(finish["system-node-group"], finish["karpenter-aws"])
    assert finish["karpenter"] == pytest.approx(begin + table["karpenter"]["minutes"])
    assert finish["gpu-node-launch"] == pytest.approx(finish["karpenter"] + table["karpenter-node-launch"]["minutes"])
