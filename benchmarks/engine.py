"""Benchmark: program evaluation time, `pulumi preview` / `pulumi up` wall time for the dev stack's
target applied to the local kube-apiserver, and the same objects with `kubectl apply --server-side`.

Prints figures; asserts nothing. Needs the toolchain and control plane (`make setup`):
    PATH=.tools/bin:$PATH .venv/bin/python benchmarks/engine.py
"""

from __future__ import annotations

import json
import os
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
from stacks.program.render import render_config, render_stack, stack_raw_config, to_yaml  # noqa: E402


def timed(fn, n=1):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    if not shutil.which("pulumi"):
        sys.exit("pulumi not on PATH: run `make setup` and put .tools/bin on PATH")
    eval_s = timed(lambda: render_stack("dev"), n=5)
    print(f"program evaluation (config -> plan -> objects, dev stack): {eval_s * 1000:.1f} ms (median of 5)")

    kube_dir = Path(tempfile.mkdtemp(prefix="bench-kube-"))
    env = {**os.environ, "KUBE_LOCAL_DIR": str(kube_dir)}
    subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "start"], check=True, env=env, stdout=subprocess.DEVNULL)
    kubeconfig = kube_dir / "kubeconfig"
    work = Path(tempfile.mkdtemp(prefix="bench-project-"))
    try:
        penv = scratch_project(work)
        raw = stack_raw_config("dev")
        raw.update(
            {
                "namespace": "bench-pulumi",
                "wait": {"enabled": False},
                "hfTokenSecretName": "hf-token-secret",
                "cluster": {"mode": "kubeconfig", "kubeconfigPath": str(kubeconfig)},
            }
        )
        raw.pop("hfToken", None)

        def pulumi(*args):
            subprocess.run(
                ["pulumi", *args, "--stack", "bench", "--non-interactive"],
                cwd=work,
                env=penv,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

        subprocess.run(
            ["pulumi", "stack", "init", "bench", "--non-interactive"], cwd=work, env=penv, check=True, stdout=subprocess.DEVNULL
        )
        for k, v in raw.items():
            pulumi("config", "set", f"dynamo:{k}", v if isinstance(v, str) else json.dumps(v))
        preview_s = timed(lambda: pulumi("preview"))
        up_s = timed(lambda: pulumi("up", "--yes", "--skip-preview"))
        preview_again_s = timed(lambda: pulumi("preview"))

        objs = render_config({**raw, "namespace": "bench-kubectl"})
        manifest = work / "objects.yaml"
        manifest.write_text(to_yaml(objs))
        kubectl = ["kubectl", "--kubeconfig", str(kubeconfig), "apply", "--server-side", "-f", str(manifest)]
        apply_s = timed(lambda: subprocess.run(kubectl, check=True, stdout=subprocess.DEVNULL))
        pulumi("destroy", "--yes", "--run-program")  # the kept cache's delete hooks need the program
        print(f"objects: {len(objs)}")
        print(f"pulumi preview (empty stack): {preview_s:.2f} s")
        print(f"pulumi up (create):           {up_s:.2f} s")
        print(f"pulumi preview (no changes):  {preview_again_s:.2f} s")
        print(f"kubectl apply --server-side:  {apply_s:.2f} s")
        print(f"ratio pulumi up / kubectl apply: {up_s / apply_s:.1f}x")
    finally:
        subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "stop"], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(kube_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
