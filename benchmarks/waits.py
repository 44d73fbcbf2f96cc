"""Benchmark (opt-in, long): how long each wait of `pulumi up` lasts when what it waits for never
happens, on the local control plane (no nodes, no operator, no volume provisioner).

- the download Job (dynamo:wait.jobTimeout, default here 5m) in a namespace where no Pod can be created;
- the DGD Ready condition (dynamo:wait.dgdTimeout, default here 5m);
- the model-cache PVC on an Immediate-binding class that nothing provisions (the provider's fixed 5 minutes).

They run side by side as three stacks; the figures are the time from the object's creation to the end of
`up`, and the whole `up`. Prints figures and the last lines of each error; asserts nothing (test_engine.py
asserts the bound with a 3-minute Job and a 75-second DGD wait in `make test`).

    PATH=.tools/bin:$PATH .venv/bin/python benchmarks/waits.py [--timeout 5m]
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _project import scratch_project  # noqa: E402

TARGET = "lightning-vllm-agg-h100-dspark"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", default="5m", help="jobTimeout and dgdTimeout (the PVC's 5 minutes are fixed)")
    args = ap.parse_args()
    if not shutil.which("pulumi"):
        sys.exit("pulumi not on PATH: run `make setup` and put .tools/bin on PATH")

    kube_dir = Path(tempfile.mkdtemp(prefix="bench-waits-kube-"))
    env = {**os.environ, "KUBE_LOCAL_DIR": str(kube_dir)}
    subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "start"], check=True, env=env, stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="bench-waits-project-"))
    try:
        bench(args.timeout, str(kube_dir / "kubeconfig"), work)
    finally:
        subprocess.run([str(ROOT / "tools" / "kube-local.sh"), "stop"], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


def bench(timeout: str, kubeconfig: str, work: Path) -> None:
    def kubectl(*a, input=None, check=True):
        return subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, *a], capture_output=True, text=True, input=input, check=check
        )

    classes = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "bench-wffc"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "bench-immediate"},
            "provisioner": "example.com/nothing-provisions-this",
            "volumeBindingMode": "Immediate",
        },
    ]
    for sc in classes:
        kubectl("apply", "-f", "-", input=json.dumps(sc))
    cases = {
        "job": ({"enabled": True, "dgd": False, "jobTimeout": timeout}, "bench-wffc", ("job", "model-download")),
        "dgd": ({"enabled": True, "job": False, "dgdTimeout": timeout}, "bench-wffc", ("dgd", "vllm-agg-h100-dspark")),
        "pvc": ({"enabled": True}, "bench-immediate", ("pvc", "shared-model-cache")),
    }
    penv = scratch_project(work, DYNAMO_REFERENCE=str(ROOT.parent / "shared" / "reference"))
    results: dict[str, dict] = {}

    def pulumi(stack: str, *a, check=True):
        r = subprocess.run(
            ["pulumi", *a, "--stack", stack, "--non-interactive"], cwd=work, env=penv, capture_output=True, text=True
        )
        if check and r.returncode:
            sys.exit(f"pulumi {' '.join(a)} --stack {stack}: {r.stderr.strip()}")
        return r

    for case, (wait, sc, _) in cases.items():  # stack files are written one at a time; only the `up`s overlap
        ns = f"bench-wait-{case}"
        kubectl("create", "namespace", ns, check=False)
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-pods", "namespace": ns},
            "spec": {"hard": {"pods": "0"}},
        }
        kubectl("apply", "-f", "-", input=json.dumps(quota))
        stack = f"bench-{case}"
        subprocess.run(
            ["pulumi", "stack", "init", stack, "--non-interactive"], cwd=work, env=penv, check=True, capture_output=True
        )
        cfg = {
            "target": TARGET,
            "namespace": ns,
            "createNamespace": "false",
            "wait": wait,
            "storage": {"className": sc},
            "cluster": {"mode": "kubeconfig", "kubeconfigPath": kubeconfig},
        }
        for k, v in cfg.items():
            pulumi(stack, "config", "set", f"dynamo:{k}", v if isinstance(v, str) else json.dumps(v))
        pulumi(stack, "config", "set", "--secret", "dynamo:hfToken", "hf_BENCH_not_a_token")

    def run(case: str) -> None:
        _, _, (res, name) = cases[case]
        ns, stack = f"bench-wait-{case}", f"bench-{case}"
        t0 = time.time()
        r = pulumi(stack, "up", "--yes", "--skip-preview", check=False)
        end = time.time()
        created = kubectl("get", res, name, "-n", ns, "-o", "jsonpath={.metadata.creationTimestamp}", check=False).stdout.strip()
        waited = end - calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ")) if created else float("nan")
        tail = [ln for ln in (r.stdout + r.stderr).splitlines() if "error:" in ln or ln.startswith("      ")]
        results[case] = {"up": end - t0, "waited": waited, "rc": r.returncode, "tail": tail[:12]}
        pulumi(stack, "destroy", "--yes", check=False)

    threads = [threading.Thread(target=run, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for case, r in results.items():
        print(f"{case}: up {r['up']:.0f} s, waited {r['waited']:.0f} s after the object was created, exit {r['rc']}")
        for line in r["tail"]:
            print(f"    {line}")


if __name__ == "__main__":
    main()
