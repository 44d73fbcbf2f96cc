"""Benchmark (how `up` cost grows with the stack): `pulumi up` of 1, 8 and all catalog targets in one `dynamo:serve` stack on the
local kube-apiserver, against `kubectl apply --server-side` of the same objects.

Prints, per size: the objects, the wall time and the cost per object of each tool, and per tool the marginal cost per
object between consecutive sizes (what one more object costs once the stack is that big). Each `--variant` is one way
of running `pulumi up` (engine environment variables and flags), measured at every size in the same run as kubectl, so
compare ratios within one run: this machine's load moves the absolute figures.

Options that split the time (docs/performance.md says what each showed):
  --variant NAME[:ENV=VAL,...][:FLAG ...]   e.g. ``skip-checkpoints:PULUMI_SKIP_CHECKPOINTS=true``,
                                             ``serial::--parallel 1`` (default: ``default`` and ``skip-checkpoints``)
  --render         no cluster: the provider writes YAML files (program, language host, engine and state file only)
  --trace DIR      ``pulumi up --tracing file://DIR/<variant>-<n>-<rep>.trace`` (the engine's own spans; read with
                   ``PULUMI_DEBUG_COMMANDS=true pulumi convert-trace -g 5ms FILE > F.pprof; go tool pprof -top F.pprof``)
  --profile DIR    cProfile of the Python program (the language host's process) into DIR/<variant>-<n>-<rep>.prof
  --repeat R       every (size, variant) R times, interleaved; the median is printed
The engine's CPU profile is a variant flag: ``--variant 'cpu::--profiling DIR/up'``, then ``go tool pprof -top``.

Prints figures; asserts nothing. Needs the toolchain and control plane (`make setup`):
    PATH=.tools/bin:$PATH .venv/bin/python benchmarks/engine_scale.py [--sizes 1,8,68] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _project import scratch_project  # noqa: E402
from stacks import catalog  # noqa: E402
from stacks.program import build_program  # noqa: E402
from stacks.program.render import to_yaml  # noqa: E402

# The two ways of running `up` that `make bench` compares. PULUMI_SKIP_CHECKPOINTS is the engine's own switch
# (pulumi/pulumi sdk/go/common/env/env.go, v3.274.1: "Skip saving state checkpoints and only save the final
# deployment"); backend/snapshot.go's unsafeServiceLoop then writes the state once, when the update ends.
DEFAULT_VARIANTS = ("default", "skip-checkpoints:PULUMI_SKIP_CHECKPOINTS=true")

# A stand-in __main__.py for --profile: cProfile of the whole program process (its module body and the asyncio loop
# that sends the registrations), written when the process exits.
PROFILE_MAIN = """\
import atexit, cProfile, os, runpy
_prof = cProfile.Profile()
atexit.register(lambda: _prof.dump_stats(os.environ["BENCH_PROFILE_OUT"]))
_prof.enable()
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "program_main.py"), run_name="__main__")
"""


def serve_config(n: int, prefix: str, kubeconfig: Path, render_dir: Path | None = None) -> dict:
    """The first ``n`` catalog targets, each in a namespace of its own (different models cannot share one);
    ``render_dir``: the provider writes YAML there instead of calling a cluster (no API server in the loop)."""
    ids = sorted(catalog.targets())[:n]
    cluster = (
        {"mode": "render", "renderDir": str(render_dir)}
        if render_dir
        else {"mode": "kubeconfig", "kubeconfigPath": str(kubeconfig)}
    )
    return {
        "serve": [{"target": t, "namespace": f"{prefix}-{i}"} for i, t in enumerate(ids)],
        "wait": {"enabled": False},
        "storage": {"protect": False},
        "hfTokenSecretName": "hf-token-secret",
        "cluster": cluster,
    }


def parse_variant(spec: str) -> tuple[str, dict[str, str], list[str]]:
    """``NAME[:ENV=VAL,...][:FLAGS]`` -> (name, env, extra `pulumi up` flags)."""
    name, _, rest = spec.partition(":")
    env_part, _, flags = rest.partition(":")
    env = dict(kv.split("=", 1) for kv in env_part.split(",") if kv)
    return name, env, shlex.split(flags)


def marginal(pts: list[tuple[int, float]]) -> list[str]:
    return [
        f"{pts[i][0]}->{pts[i + 1][0]}: {(pts[i + 1][1] - pts[i][1]) / (pts[i + 1][0] - pts[i][0]) * 1000:.0f} ms/object"
        for i in range(len(pts) - 1)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=f"1,8,{len(catalog.targets())}", help="numbers of catalog targets (5 objects each)")
    ap.add_argument("--variant", action="append", help="NAME[:ENV=VAL,...][:FLAGS] (repeatable)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--trace", type=Path, help="directory for the engine's OpenTracing traces")
    ap.add_argument("--profile", type=Path, help="directory for cProfile dumps of the Python program")
    ap.add_argument("--no-kubectl", action="store_true", help="time pulumi only")
    ap.add_argument(
        "--render",
        action="store_true",
        help="no cluster: the provider renders YAML to a directory (program, language host, engine and state only; implies --no-kubectl)",
    )
    args = ap.parse_args()
    args.no_kubectl = args.no_kubectl or args.render
    sizes = [int(x) for x in args.sizes.split(",")]
    variants = [parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
    if not shutil.which("pulumi"):
        sys.exit("pulumi not on PATH: run `make setup` and put .tools/bin on PATH")
    for d in (args.trace, args.profile):
        if d:
            d.mkdir(parents=True, exist_ok=True)
    kube_dir = Path(tempfile.mkdtemp(prefix="bench-kube-"))
    env = {**os.environ, "KUBE_LOCAL_DIR": str(kube_dir), "KUBE_LOCAL_NO_SIM": "1"}
    if not args.render:
        subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "start"], check=True, env=env, stdout=subprocess.DEVNULL)
    kubeconfig = kube_dir / "kubeconfig"
    work = Path(tempfile.mkdtemp(prefix="bench-project-"))
    times: dict[tuple[str, int], list[float]] = {}
    objects: dict[int, int] = {}
    try:
        penv = scratch_project(work)
        if args.profile:
            (work / "__main__.py").rename(work / "program_main.py")
            (work / "__main__.py").write_text(PROFILE_MAIN)
        kubectl = ["kubectl", "--kubeconfig", str(kubeconfig)]
        run = 0
        for r in range(args.repeat):
            for n in sizes:
                for vname, venv, vflags in variants:
                    run += 1
                    stack = f"s{run}"
                    # Fresh stack and namespaces every run; nothing is destroyed (the cluster is thrown away at the end),
                    # so no run pays for an earlier one's teardown.
                    cfg = serve_config(n, f"p{run}", kubeconfig, work / f"rendered-{run}" if args.render else None)
                    objects[n] = len(build_program(cfg, stack, frozenset(), env=None).objects())
                    sub = {**penv, **venv}
                    if args.profile:
                        sub["BENCH_PROFILE_OUT"] = str(args.profile.resolve() / f"{vname}-{n}-{r}.prof")

                    def pulumi(*a, stack=stack, sub=sub):
                        res = subprocess.run(
                            ["pulumi", *a, "--stack", stack, "--non-interactive"],
                            cwd=work,
                            env=sub,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            text=True,
                        )
                        if res.returncode:
                            sys.exit(f"pulumi {' '.join(a[:2])} failed ({res.returncode}):\n{res.stdout[-3000:]}")

                    pulumi("stack", "init")
                    for k, v in cfg.items():
                        pulumi("config", "set", f"dynamo:{k}", v if isinstance(v, str) else json.dumps(v))
                    trace = ["--tracing", f"file://{args.trace.resolve()}/{vname}-{n}-{r}.trace"] if args.trace else []
                    t = time.perf_counter()
                    pulumi("up", "--yes", "--skip-preview", *trace, *vflags)
                    times.setdefault((vname, n), []).append(time.perf_counter() - t)
                    state = work / "state" / ".pulumi" / "stacks"
                    size = sum(f.stat().st_size for f in state.rglob(f"{stack}.json*") if f.suffix != ".bak")
                    print(
                        f"  run {run}: {n} targets, {objects[n]} objects, pulumi up [{vname}] {times[(vname, n)][-1]:.2f} s"
                        f" (state {size / 1e6:.2f} MB)",
                        file=sys.stderr,
                        flush=True,
                    )
                if not args.no_kubectl:
                    kcfg = serve_config(n, f"k{run}", kubeconfig)
                    manifest = work / f"objects-{run}.yaml"
                    manifest.write_text(to_yaml(build_program(kcfg, f"k{run}", frozenset(), env=None).objects()))
                    t = time.perf_counter()
                    subprocess.run(
                        kubectl + ["apply", "--server-side", "-f", str(manifest)], check=True, stdout=subprocess.DEVNULL
                    )
                    times.setdefault(("kubectl", n), []).append(time.perf_counter() - t)
                    print(
                        f"  run {run}: {n} targets, kubectl apply --server-side {times[('kubectl', n)][-1]:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        tools = [v[0] for v in variants] + ([] if args.no_kubectl else ["kubectl"])
        med = {k: statistics.median(v) for k, v in times.items()}
        label = {"kubectl": "kubectl apply --server-side"}
        print(f"\nmedian of {args.repeat}; cost per object = wall time / objects (start-up included)")
        print(f"{'targets':>7} {'objects':>7}  " + "  ".join(f"{label.get(t, 'pulumi up ' + t):>30}" for t in tools))
        for n in sizes:
            cells = [f"{med[(t, n)]:>7.2f} s {med[(t, n)] / objects[n] * 1000:>6.0f} ms/obj" for t in tools]
            print(f"{n:>7} {objects[n]:>7}  " + "  ".join(f"{c:>30}" for c in cells))
        print("\nmarginal cost per object between sizes (what one more object costs):")
        for t in tools:
            pts = [(objects[n], med[(t, n)]) for n in sizes]
            print(f"  {label.get(t, 'pulumi up ' + t)}: " + "; ".join(marginal(pts)))
        if not args.no_kubectl:
            big = sizes[-1]
            kub = med[("kubectl", big)] / objects[big]
            for t in tools[:-1]:
                print(
                    f"  at {objects[big]} objects, pulumi up [{t}] / kubectl per object: {med[(t, big)] / objects[big] / kub:.1f}x"
                )
    finally:
        if not args.render:
            subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "stop"], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(kube_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
