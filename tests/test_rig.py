"""The product's own commands against the real Dynamo frontend and mocker workers (tests/rig.py), GPU-free.

For the first aggregated and the first disaggregated Lightning vLLM target of the catalog (and, for the benchmark Job,
the first aggregated target of every other benchmarked family), the rig serves the DGD ``build_plan`` renders, and these
run against it, taken from the product at run time:

- the stack output ``smokeTest`` (stacks/serving/outputs.py), verbatim except the frontend address;
- the stack output ``aiperf`` (its request count bounded), verbatim except the frontend address;
- the benchmark Job's container (stacks/serving/benchmark.py ``build_benchmark``: its command and env as rendered, a small
  ``dynamo:benchmark.requestCount`` set in the stack config), with only the frontend URL changed and the cache
  volume's mount path remapped to a temporary directory; the trace the Job replays is put where its env says.

Each rig starts once per module (``rigs`` fixture); timings are printed (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rig import RigError, layout_hf_cache, rig_env_dir, start_rig, tokenizer_file
from stacks import catalog
from stacks.config.keys import parse
from stacks.serving.outputs import next_steps
from stacks.serving import build_plan
from stacks.registry.versions import versions

ROOT = Path(__file__).resolve().parent.parent
# How the exported commands address the frontend: through `kubectl port-forward svc/<dgd>-frontend 8000:8000`.
PORT_FORWARD_URL = re.compile(r"(?:https?://)?localhost:8000")
JOB_REQUESTS = 4  # dynamo:benchmark.requestCount for the Job run (the published runs replay hundreds to thousands)
CLI_REQUESTS = 4  # the exported aiperf command's --request-count, bounded
STEP_TIMEOUT = 240
# A worker's request counter on its system server: work_handler.REQUESTS_TOTAL ("requests_total") with the
# component prefix, per endpoint label dynamo_endpoint (ai-dynamo 1.5.0 and 1.6.1 wheels, dynamo/prometheus_names.py; seen on
# the mocker's /metrics as dynamo_component_requests_total{dynamo_endpoint="generate",...}).
REQUESTS_METRIC = "dynamo_component_requests_total"


LIGHTNING = "nemotron-3.5-lightning"


def _first(topology: str, model: str = LIGHTNING) -> str:
    """The first vLLM target of the catalog of this model with this topology."""
    for t in catalog.targets().values():
        if t.model == model and t.runtime == "vllm" and t.topology == topology:
            return t.id
    raise AssertionError(f"the catalog has no {model} vLLM {topology} target")


TARGETS = [_first("agg"), _first("disagg")]


def _other_families() -> list[str]:
    """The first aggregated vLLM target of every other model family with a benchmark method: their Jobs differ from
    Lightning's (Ultra: input block size, --workers-max, remote-code tokenizer; Motif-3: the chat trace, an in-replay
    warm-up, synthesis bounds), so each is run for real, not only compared as text."""
    from stacks.serving.benchmark import METHODS

    return [_first("agg", model) for model in METHODS if model != LIGHTNING]


# The benchmark Job's script runs for these (the exported commands, the same as the Job's by tests/test_benchmark.py,
# for TARGETS).
JOB_TARGETS = TARGETS + _other_families()


class _Rigs:
    """The rigs, in two waves: TARGETS' together on first use, the other families' (Job only) together when the first
    of them is asked for (after the Lightning runs, so that at most about four aiperf processes share this 2-core
    machine with the other test groups). Each rig's long product commands (the exported aiperf command and the
    benchmark Job) start in background threads as soon as it serves: their minutes of aiperf start-up and replay
    overlap each other and the quick tests. Stopped at module end."""

    def __init__(self, tmp_path_factory, stack) -> None:
        self.tmp, self.stack = tmp_path_factory, stack
        self.pool = ThreadPoolExecutor(max_workers=len(TARGETS) + 2 * len(JOB_TARGETS))
        self.rigs: dict = {}
        self.jobs: dict = {}

    def _start(self, target: str):
        plan = build_plan(parse({"target": target}))
        t0 = time.monotonic()
        rig = self.stack.enter_context(start_rig(plan.dgd, self.tmp.mktemp(f"rig-{target}")))
        print(
            f"\n[rig] {target}: started in {time.monotonic() - t0:.1f}s "
            f"({', '.join(f'{p.component_type}:{p.name}' for p in rig.pods)})"
        )
        # The long runs start right away; the tests below wait for their results.
        if target in TARGETS:
            self.jobs[("aiperf", target)] = self.pool.submit(_exported_aiperf, plan, rig, self.tmp.mktemp("aiperf"))
        self.jobs[("job", target)] = self.pool.submit(_benchmark_job, target, rig, self.tmp.mktemp("job"))
        return plan, rig

    def __call__(self, target: str):
        if target not in self.rigs:
            wave = TARGETS if target in TARGETS else [t for t in JOB_TARGETS if t not in TARGETS]
            # ExitStack.enter_context from worker threads: each rig's exit runs in the fixture's teardown.
            self.rigs.update({t: self.pool.submit(self._start, t) for t in wave})
        return self.rigs[target].result()

    def result(self, kind: str, target: str):
        self(target)
        return self.jobs[(kind, target)].result()


@pytest.fixture(scope="module")
def rigs(tmp_path_factory):
    stack = contextlib.ExitStack()
    session = _Rigs(tmp_path_factory, stack)
    try:
        yield session
    finally:
        stack.close()  # the rigs go first, so a run still going (a failed or interrupted session) ends at once
        session.pool.shutdown(wait=True, cancel_futures=True)


def _point_at(command: str, rig) -> str:
    """The command with the port-forward address replaced by the rig's frontend (nothing else changed)."""
    out, n = PORT_FORWARD_URL.subn(
        lambda m: rig.frontend_url if m.group(0).startswith("http") else rig.frontend_url.removeprefix("http://"), command
    )
    assert n >= 1, f"no localhost:8000 address in the exported command (the rig cannot point it anywhere): {command}"
    return out


def _run(command: str, env: dict, cwd: Path, what: str, timeout: float = STEP_TIMEOUT) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    print(f"[rig] {what}: exit {proc.returncode} in {time.monotonic() - t0:.1f}s")
    return proc


def _export_ok(data: dict, requested: int, where: str) -> None:
    """Every requested request completed and none failed, by bench-report's own reading of the export."""
    from stacks.cli.bench_report import parse_export

    m = parse_export(data)
    errors = (
        {k: v for k, v in (data.get("error_summary") or {}).items()}
        if isinstance(data.get("error_summary"), dict)
        else data.get("error_summary")
    )
    assert m.complete, f"{where}: run incomplete: {m.note}"
    assert m.errors == 0 and m.requests == requested, (
        f"{where}: {m.requests} valid requests and {m.errors} errors of {requested} requested; errors: {errors}"
    )


# ---- the pins ---------------------------------------------------------------------------------------------------


def test_rig_pins_match_the_manifest():
    """tools/rig/pyproject.toml (what tools/rig.sh installs) pins what stacks/registry/versions.yaml says, and the Dynamo pin
    is on the platform's release line (the dynamo-platform chart's major.minor, at the same or a newer patch: the 1.6
    chart is 1.6.0, the newest 1.6 wheels are 1.6.1)."""
    deps = tomllib.loads((ROOT / "tools/rig/pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(d.split("==", 1) for d in deps)
    rig = versions()["rig"]
    chart = [int(x) for x in versions()["charts"]["dynamo-platform"]["version"].split(".")]
    assert pins["ai-dynamo"] == rig["ai-dynamo"]
    wheel = [int(x) for x in rig["ai-dynamo"].split(".")]
    assert wheel[:2] == chart[:2] and wheel[2] >= chart[2], (rig["ai-dynamo"], chart)
    assert pins["ai-dynamo-runtime"] == rig["ai-dynamo-runtime"] == rig["ai-dynamo"]
    assert pins["aiperf"] == rig["aiperf"] == versions()["images"]["aiperf"].rsplit(":", 1)[1]
    name, version = rig["tokenizer-wheel"].split("==")
    assert pins[name] == version


def test_the_lock_excludes_aisimulate_and_the_env_has_none():
    lock = (ROOT / "tools/rig/uv.lock").read_text()
    assert re.search(r'(?m)^excludes = \["aisimulate"\]$', lock), "uv.lock does not record the aisimulate exclusion"
    env = rig_env_dir()
    assert not list(env.glob("lib/python3*/site-packages/aisimulate*")), "aisimulate got installed"


def test_hf_cache_layout_serves_the_tokenizer_offline(tmp_path):
    """The laid-out cache resolves offline by model id through transformers (what AIPerf and the mocker load)."""
    env = rig_env_dir()
    layout_hf_cache(tmp_path, "org/some-model", tokenizer_file(env))
    code = (
        "from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained('org/some-model'); "
        "p = t.apply_chat_template([{'role': 'user', 'content': 'Hello there'}], add_generation_prompt=True, tokenize=False); "
        "print(len(t), len(t.encode(p, add_special_tokens=False)), repr(t.decode(t.encode('Hello, world!', add_special_tokens=False))))"
    )
    out = subprocess.run(
        [str(env / "bin/python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    vocab, chat_len, text = out.stdout.split()[0], out.stdout.split()[1], out.stdout.split(None, 2)[2].strip()
    assert int(vocab) >= 65000 and int(chat_len) > 3 and text == "'Hello, world!'"


# ---- the product's commands against the real frontend -----------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_rig_runs_the_operator_pods_of_the_dgd(rigs, target):
    """One process per pod the operator makes (frontend, and worker or prefill + decode replicas); each listens
    where its pod's named port says, and each worker's system server serves Prometheus metrics."""
    import urllib.request

    plan, rig = rigs(target)
    types = sorted(p.component_type for p in rig.pods)
    want = sorted(c["type"] for c in plan.dgd["spec"]["components"] for _ in range(int(c.get("replicas", 1))))
    assert types == want
    topology = catalog.targets()[target].topology
    assert set(types) == ({"frontend", "worker"} if topology == "agg" else {"frontend", "prefill", "decode"})
    for pod in rig.pods:
        assert pod.labels["nvidia.com/dynamo-component-type"] == pod.component_type
        assert pod.labels["nvidia.com/dynamo-graph-deployment-name"] == plan.dgd["metadata"]["name"]
        port = pod.ports["http" if pod.component_type == "frontend" else "system"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        assert r.status == 200 and "dynamo_" in body, f"{pod.name}: no dynamo_ metrics on :{port}/metrics"


@pytest.mark.parametrize("target", TARGETS)
def test_exported_smoke_test_gets_a_completion(rigs, target, tmp_path):
    plan, rig = rigs(target)
    command = _point_at(next_steps(plan)["smokeTest"], rig)
    # curl's config file adds the status line without touching the command (curl reads $CURL_HOME/.curlrc).
    (tmp_path / ".curlrc").write_text('write-out = "\\nHTTP_STATUS=%{http_code}\\n"\n')
    proc = _run(command, {**rig.env, "CURL_HOME": str(tmp_path)}, tmp_path, f"{target} smokeTest")
    body, _, status = proc.stdout.rpartition("HTTP_STATUS=")
    assert proc.returncode == 0 and status.strip() == "200", (
        f"smokeTest: exit {proc.returncode}, HTTP {status.strip()!r}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}\n"
        f"command: {command}\n{rig.log_tail(15)}"
    )
    reply = json.loads(body)
    content = reply["choices"][0]["message"].get("content") or ""
    assert reply["model"] == rig.model and content.strip(), f"empty completion: {reply}"


def _bounded(command: str, n: int) -> str:
    """Every ``--request-count N`` of the command lowered to at most ``n``, and its ``--concurrency`` and
    ``--workers-max`` with it: a run of ``n`` requests has at most ``n`` in flight, and AIPerf starts one worker
    process per concurrent request when ``--workers-max`` names the concurrency (its help: "Any value provided will
    still be capped by the concurrency value ... but not by the max cap"), so a published row's 128 would start 128
    processes on this 2-core machine."""

    def lower(m: re.Match) -> str:
        value = m.group(3).strip("'\"")
        return f"{m.group(1)}{m.group(2)}{min(int(value), n) if value.isdigit() else n}"

    out, k = re.subn(r"(--request-count)(\s+|=)(\S+)", lower, command)
    assert k >= 1, f"the exported aiperf command sets no --request-count: {command}"
    return re.sub(r"(--concurrency|--workers-max|--max-workers)(\s+|=)(\S+)", lower, out)


def _bounded_env(job_env: dict[str, str], n: int) -> dict[str, str]:
    """The benchmark Job's env with its CONCURRENCY lowered to at most ``n`` requests (see ``_bounded``)."""
    c = job_env.get("CONCURRENCY")
    return {**job_env, "CONCURRENCY": str(min(int(c), n))} if c and c.isdigit() else job_env


def _exported_aiperf(plan, rig, workdir: Path) -> dict:
    """Run the stack output ``aiperf`` (address changed, request count bounded) in ``workdir``; its last export."""
    from stacks.serving.benchmark import workload_of

    target = plan.target.id
    exported = next_steps(plan)["aiperf"]
    commands = list(exported.values()) if isinstance(exported, dict) else [exported]
    # The trace the command replays, where it looks for it first (its working directory): there is no network here
    # to fetch the published one, so a trace of the same shape is staged, as a user with the file at hand would.
    trace = workload_of(plan.target)
    if any(trace.file in (c or "") for c in commands):
        _mooncake_trace(workdir / trace.file, CLI_REQUESTS, trace.isl, trace.osl)
    for i, command in enumerate(c for c in commands if c):
        command = _point_at(command, rig) if "localhost:8000" in command else command
        if "aiperf profile" in command:
            command = _bounded(command, CLI_REQUESTS)
        proc = _run(command, rig.env, workdir, f"{target} exported aiperf step {i}")
        assert proc.returncode == 0, (
            f"exported aiperf step {i} failed (exit {proc.returncode}):\ncommand: {command}\n"
            f"{proc.stdout[-2500:]}\n{proc.stderr[-2500:]}"
        )
    exports = sorted(workdir.rglob("profile_export_aiperf.json"), key=lambda p: p.stat().st_mtime)
    assert exports, f"no profile_export_aiperf.json under {workdir}"
    return json.loads(exports[-1].read_text())


@pytest.mark.parametrize("target", TARGETS)
def test_exported_aiperf_command_has_every_request_valid(rigs, target):
    _export_ok(rigs.result("aiperf", target), CLI_REQUESTS, f"{target} exported aiperf")


def _mooncake_trace(path: Path, rows: int, isl: int, osl: int, block: int = 512, reuse: float = 0.9) -> None:
    """A Mooncake-format trace of the published shape (rows of ``isl`` input / ``osl`` output tokens, ``reuse`` of
    each prompt's blocks shared with the others): aiperf's ``mooncake_trace`` rows are ``input_length``,
    ``output_length`` and ``hash_ids`` (one id per ``block`` tokens; equal ids are equal prompt blocks)."""
    blocks = -(-isl // block)
    shared = int(blocks * reuse)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in range(rows):
            ids = list(range(shared)) + [shared + r * blocks + b for b in range(blocks - shared)]
            f.write(json.dumps({"input_length": isl, "output_length": osl, "hash_ids": ids}) + "\n")


def _benchmark_job(target: str, rig, tmp_path: Path) -> dict:
    """Run the benchmark Job's container as rendered (URL and mount remapped) in ``tmp_path``; the export it printed."""
    from stacks.serving.benchmark import RESULT_BEGIN, build_benchmark
    from stacks.cli.bench_report import extract_from_log

    cfg = parse({"target": target, "benchmark": {"enabled": True, "requestCount": JOB_REQUESTS}})
    bench = build_benchmark(build_plan(cfg), cfg.benchmark)
    ctr = bench.job["spec"]["template"]["spec"]["containers"][0]
    mount = ctr["volumeMounts"][0]["mountPath"]
    volume = tmp_path / "model-cache"
    volume.mkdir()

    def remap(value: str) -> str:
        return value.replace(bench.frontend_url, rig.frontend_url).replace(mount, str(volume))

    assert all("value" in e for e in ctr["env"]), f"env from references the rig cannot resolve: {ctr['env']}"
    job_env = _bounded_env({e["name"]: remap(e["value"]) for e in ctr["env"]}, JOB_REQUESTS)
    assert rig.frontend_url in job_env.values(), f"the Job's env names no frontend URL {bench.frontend_url}"
    argv = [remap(a) for a in ctr["command"] + (ctr.get("args") or [])]
    # What the cache volume holds in a cluster: the served model's tokenizer (HF cache under HF_HOME, as the download
    # Job leaves it) and, where the Job replays a trace, the trace file (the Job fetches it when absent; here there is
    # no network, so the file is staged, as the Job's docs allow).
    if "HF_HOME" in job_env:
        layout_hf_cache(Path(job_env["HF_HOME"]), job_env.get("TOKENIZER", bench.model), tokenizer_file(rig_env_dir()))
    if "TRACE_FILE" in job_env:
        _mooncake_trace(Path(job_env["TRACE_FILE"]), JOB_REQUESTS, bench.trace.isl, bench.trace.osl)
    env = {**rig.env, **job_env}
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=STEP_TIMEOUT * 2)
    print(f"[rig] {target} benchmark Job script: exit {proc.returncode} in {time.monotonic() - t0:.1f}s")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the Job's script failed (exit {proc.returncode}):\n{log[-4000:]}\n{rig.log_tail(10)}"
    assert RESULT_BEGIN in proc.stdout
    return extract_from_log(proc.stdout)


@pytest.mark.parametrize("target", JOB_TARGETS)
def test_benchmark_job_script_has_every_request_valid(rigs, target):
    _export_ok(rigs.result("job", target), JOB_REQUESTS, f"{target} benchmark Job")


@pytest.mark.parametrize("target", TARGETS)
def test_every_worker_served_requests(rigs, target):
    """After the commands above, every worker process (in a disaggregated graph: prefill and decode) has served
    requests, by its own Prometheus counter: the frontend really routed through each role."""
    import urllib.request

    plan, rig = rigs(target)
    for kind in ("aiperf", "job"):
        with contextlib.suppress(Exception):
            rigs.result(kind, target)  # their own tests report their failures
    for pod in rig.pods:
        if pod.component_type == "frontend":
            continue
        with urllib.request.urlopen(f"http://127.0.0.1:{pod.ports['system']}/metrics", timeout=10) as r:
            text = r.read().decode()
        served = sum(
            float(line.rsplit(None, 1)[1])
            for line in text.splitlines()
            if line.startswith(REQUESTS_METRIC + "{") and 'dynamo_endpoint="generate"' in line
        )
        assert served > 0, (
            f"{pod.name} ({pod.component_type}) served no requests: {REQUESTS_METRIC}{{dynamo_endpoint='generate'}} is 0"
        )


def test_start_rig_reports_what_it_saw_when_a_worker_cannot_start(tmp_path):
    """A wait ends with the process's own last words, not a bare timeout."""
    plan = build_plan(parse({"target": TARGETS[0]}))
    dgd = json.loads(json.dumps(plan.dgd))
    worker = next(c for c in dgd["spec"]["components"] if c["type"] != "frontend")
    worker["podTemplate"]["spec"]["containers"][0]["args"] += ["--block-size", "not-a-number"]
    t0 = time.monotonic()
    with pytest.raises(RigError, match=r"(?s)exited.*block.size"):
        with start_rig(dgd, tmp_path, timeout=60):
            pass
    assert time.monotonic() - t0 < 60


def test_a_high_concurrency_row_runs_on_the_rig_with_as_many_workers_as_requests():
    """A published row of concurrency 128 with ``--workers-max`` (as Ultra's perf commands carry) becomes a run of
    CLI_REQUESTS requests with that many in flight and that many AIPerf workers at most."""
    cmd = "aiperf profile --concurrency 128 --workers-max 128 --request-count 1280 --url x"
    out = _bounded(cmd, CLI_REQUESTS)
    assert (
        out == f"aiperf profile --concurrency {CLI_REQUESTS} --workers-max {CLI_REQUESTS} --request-count {CLI_REQUESTS} --url x"
    )
    assert _bounded("aiperf profile --concurrency=2 --request-count=3", 4) == "aiperf profile --concurrency=2 --request-count=3"
    assert _bounded_env({"CONCURRENCY": "128", "MODEL": "m"}, JOB_REQUESTS) == {"CONCURRENCY": str(JOB_REQUESTS), "MODEL": "m"}
