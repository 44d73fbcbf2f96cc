"""Benchmark (how `up` cost grows with the stack): `pulumi up` of 1, 8 and all catalog targets in one `dynamo:serve` stack on the
local kube-apiserver, against `kubectl apply --server-side` of the same objects. Prints, for each tool,
the wall time per size, the fixed start-up (``time = start-up + objects x marginal`` through the two smallest
sizes) and the marginal cost per object between consecutive sizes.

Prints figures; asserts nothing. Needs the toolchain and control plane (`make setup`):
    PATH=.tools/bin:$PATH .venv/bin/python benchmarks/engine_scale.py [--sizes 1,8,68]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
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
from stacks.render import to_yaml  # noqa: E402


def serve_config(n: int, prefix: str, kubeconfig: Path) -> dict:
    """The first ``n`` catalog targets, each in a namespace of its own (different models cannot share one)."""
    ids = sorted(catalog.targets())[:n]
    return {
        "serve": [{"target": t, "namespace": f"{prefix}-{i}"} for i, t in enumerate(ids)],
        "wait": {"enabled": False},
        "storage": {"protect": False},
        "hfTokenSecretName": "hf-token-secret",
        "cluster": {"mode": "kubeconfig", "kubeconfigPath": str(kubeconfig)},
    }


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``t = a + b * n``: (fixed start-up a in s, marginal b in s per object)."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx else 0.0
    return my - b * mx, b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=f"1,8,{len(catalog.targets())}")
    sizes = [int(x) for x in ap.parse_args().sizes.split(",")]
    if not shutil.which("pulumi"):
        sys.exit("pulumi not on PATH: run `make setup` and put .tools/bin on PATH")
    kube_dir = Path(tempfile.mkdtemp(prefix="bench-kube-"))
    env = {**os.environ, "KUBE_LOCAL_DIR": str(kube_dir), "KUBE_LOCAL_NO_SIM": "1"}
    subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "start"], check=True, env=env, stdout=subprocess.DEVNULL)
    kubeconfig = kube_dir / "kubeconfig"
    work = Path(tempfile.mkdtemp(prefix="bench-project-"))
    pulumi_pts, kubectl_pts = [], []
    try:
        penv = scratch_project(work)
        kubectl = ["kubectl", "--kubeconfig", str(kubeconfig)]
        print(f"{'targets':>7} {'objects':>7} {'pulumi up':>10} {'kubectl':>9} {'ratio':>6}")
        for n in sizes:
            stack = f"scale{n}"

            def pulumi(*args, stack=stack):
                subprocess.run(["pulumi", *args, "--stack", stack, "--non-interactive"], cwd=work, env=penv, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            subprocess.run(["pulumi", "stack", "init", stack, "--non-interactive"], cwd=work, env=penv, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cfg = serve_config(n, f"p{n}", kubeconfig)
            for k, v in cfg.items():
                pulumi("config", "set", f"dynamo:{k}", v if isinstance(v, str) else json.dumps(v))
            objs = build_program(cfg, stack, frozenset(), env=None).objects()
            t = time.perf_counter()
            pulumi("up", "--yes", "--skip-preview")
            up_s = time.perf_counter() - t

            kcfg = serve_config(n, f"k{n}", kubeconfig)
            kobjs = build_program(kcfg, stack, frozenset(), env=None).objects()
            manifest = work / f"objects-{n}.yaml"
            manifest.write_text(to_yaml(kobjs))
            t = time.perf_counter()
            subprocess.run(kubectl + ["apply", "--server-side", "-f", str(manifest)], check=True, stdout=subprocess.DEVNULL)
            apply_s = time.perf_counter() - t
            print(f"{n:>7} {len(objs):>7} {up_s:>9.2f}s {apply_s:>8.2f}s {up_s / apply_s:>5.1f}x", flush=True)
            pulumi_pts.append((len(objs), up_s))
            kubectl_pts.append((len(kobjs), apply_s))
            pulumi("destroy", "--yes")
            subprocess.run(kubectl + ["delete", "-f", str(manifest), "--wait=false"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, pts in (("pulumi up", pulumi_pts), ("kubectl apply --server-side", kubectl_pts)):
            a, b = fit(pts[:2])  # the two smallest sizes: start-up, before any growth effect
            segs = ", ".join(f"{pts[i][0]}->{pts[i + 1][0]} objects: {(pts[i + 1][1] - pts[i][1]) / (pts[i + 1][0] - pts[i][0]) * 1000:.0f} ms"
                             for i in range(len(pts) - 1))
            print(f"{name}: fixed start-up {a:.2f} s; marginal per object {segs}")
    finally:
        subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "stop"], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(kube_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
