"""Benchmark: the simulated GPU cluster (KWOK nodes and the real kube-scheduler, no GPU needed).

Prints, asserts nothing:
- control-plane start (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) in a fresh state dir;
- the time to simulate every catalog target on the default cluster shape of its GPU (create the KWOK nodes,
  submit the approximated operator pods, wait for the real scheduler's decisions, clean up), total and per target;
- the wall time of the simulated-cluster engine tests, whole process (`pytest -m engine -k simulated`).

Needs the toolchain (`make setup`):  PATH=.tools/bin:$PATH .venv/bin/python benchmarks/simulate.py [--no-engine]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stacks import catalog  # noqa: E402
from stacks.cli.simulate import Simulator, run, target_scenario  # noqa: E402


def main() -> None:
    kube_dir = Path(tempfile.mkdtemp(prefix="bench-sim-"))
    env = {**os.environ, "KUBE_LOCAL_DIR": str(kube_dir)}
    script = str(ROOT / "tools" / "kube-local.sh")
    t0 = time.perf_counter()
    subprocess.run([script, "start"], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"control plane start (fresh state dir, incl. CRDs, scheduler, kwok): {time.perf_counter() - t0:.1f} s")
    sim = Simulator(kube_dir / "kubeconfig")
    per: list[float] = []
    pods = nodes = pending = 0
    try:
        t_all = time.perf_counter()
        for tid, t in sorted(catalog.targets().items()):
            t1 = time.perf_counter()
            sc = target_scenario(t, run_id="bench")
            res = run(sim, sc.nodes, sc.intents, sc.runtime_classes, "bench", timeout=30)
            per.append(time.perf_counter() - t1)
            pods += len(res.placements)
            nodes += res.nodes
            pending += len(res.pending())
        total = time.perf_counter() - t_all
        print(
            f"simulate all {len(per)} targets: {total:.1f} s ({nodes} nodes, {pods} pods, {pending} pending); "
            f"per target median {statistics.median(per) * 1000:.0f} ms, max {max(per) * 1000:.0f} ms"
        )
    finally:
        sim.close()
        subprocess.run([script, "stop"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if "--no-engine" in sys.argv:
        return
    t2 = time.perf_counter()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/test_engine.py",
            "-m",
            "engine",
            "-k",
            "simulated",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"simulated-cluster engine tests, whole process: {time.perf_counter() - t2:.1f} s ({last})")
    if r.returncode:
        print("\n".join(line[:300] for line in r.stdout.splitlines() if line.startswith("E ")))


if __name__ == "__main__":
    main()
