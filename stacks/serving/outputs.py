"""Stack outputs that tell the user what to do next (pure, from the serving plan)."""

from __future__ import annotations

import json
import shlex
from typing import Sequence

from stacks import catalog
from stacks.serving.benchmark import local_command, served_model
from stacks.serving import ServingPlan


def kubectl_for(cluster) -> tuple[str, ...]:
    """``kubectl`` as the printed commands must run it to reach the stack's cluster: with the stack's own kubeconfig
    file and context where the stack names them (``cluster.kubeconfigPath``, ``cluster.context``; the local stack's
    kubeconfig is not the user's), else plain (KUBECONFIG, the user's current context, or EKS's
    ``aws eks update-kubeconfig`` that ``followKubeconfig`` prints). Words, quoted where they are joined."""
    from stacks.config.stack import KubeconfigCluster

    words = ["kubectl"]
    if isinstance(cluster, KubeconfigCluster):
        if cluster.kubeconfig_path:
            words += ["--kubeconfig", cluster.kubeconfig_path]
        if cluster.context:
            words += ["--context", cluster.context]
    return tuple(words)


def command(*words: str) -> str:
    """A command a user pastes into a shell, quoted from its parts: a value with shell metacharacters (a served model
    name, a path with a space) stays one word and runs nothing."""
    return shlex.join(words)


def smoke_test_body(model: str, max_tokens: int = 64) -> str:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": max_tokens})


def next_steps(plan: ServingPlan, kubectl: Sequence[str] = ("kubectl",)) -> dict:
    t, dgd = plan.target, plan.dgd
    ns, name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
    svc = f"{name}-frontend"
    model = served_model(dgd)
    out = {
        "target": t.id,
        "upstreamRecipe": t.upstream or "-",
        "experimental": t.experimental,
        "namespace": ns,
        "dgdName": name,
        "frontendService": f"{svc}.{ns}.svc.cluster.local:8000",
        "portForward": command(*kubectl, "-n", ns, "port-forward", f"svc/{svc}", "8000:8000"),
        "smokeTest": command(
            "curl",
            "-s",
            "localhost:8000/v1/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            smoke_test_body(model),
        ),
        # The benchmark Job's own steps (stacks/serving/benchmark.py builds both from the same functions), against the
        # port-forward: fetch the published trace if absent, warm up, replay it at the published concurrency.
        "aiperf": local_command(t, dgd),
        "gpusNeeded": catalog.gpus_needed(dgd),
    }
    if t.perf:
        out["expectedPerf"] = {
            "concurrency": t.perf.concurrency,
            "ttftP50Ms": t.perf.ttft_p50_ms,
            "outputTokPerSecPerGpu": t.perf.output_tok_s_per_gpu,
            "tokPerSecPerUser": t.perf.tok_s_per_user,
            "source": t.perf.source,
        }
    return out


def follow_commands(plan: ServingPlan, cluster_plan=None, benchmark=None, kubectl: Sequence[str] = ("kubectl",)) -> dict:
    """Commands to follow a long ``up`` (a download or a DGD can take many minutes). ``__main__.py`` logs them as soon as the program is
    evaluated (before any resource is created) and exports them: the download Job's log, the DGD's
    Ready column, and the benchmark Job's log when there is one. On EKS, the first command writes the
    new cluster's kubeconfig (it works as soon as the control plane exists)."""
    ns = plan.dgd["metadata"]["namespace"]
    out: dict = {}
    if cluster_plan is not None:
        out["followKubeconfig"] = command(
            "aws", "eks", "update-kubeconfig", "--region", cluster_plan.region, "--name", cluster_plan.name
        )
    if plan.jobs:
        out["followDownload"] = command(*kubectl, "-n", ns, "logs", "-f", f"job/{plan.jobs[0]['metadata']['name']}")
    out["watchDgd"] = command(*kubectl, "-n", ns, "get", "dgd", plan.dgd["metadata"]["name"], "-w")
    if benchmark is not None:
        out["followBenchmark"] = command(*kubectl, "-n", benchmark.namespace, "logs", "-f", f"job/{benchmark.job_name}")
    return out
