"""Benchmark ComponentResource: the AIPerf Job of ``stacks.serving.benchmark.build_benchmark``, after the DGD.

The Job replays the Mooncake trace of the target's published perf row (fetched into the model-cache volume when
absent) with that family's published AIPerf method; see ``stacks/serving/benchmark.py``. ``depends_on`` is the DGD (with the
DGD wait on, Pulumi creates the Job only once the DGD is Ready); the Job carries ``pulumi.com/skipAwait`` so ``up``
does not wait for the run to finish. Outputs: the Job's name and its parameters (concurrency, request count, trace).
"""
from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from stacks.serving.benchmark import BenchmarkPlan

PKG = "dynamo"


class Benchmark(pulumi.ComponentResource):
    job_name: pulumi.Output[str]
    parameters: pulumi.Output[dict]

    def __init__(self, name: str, plan: BenchmarkPlan, opts: Optional[pulumi.ResourceOptions] = None,
                 depends_on: Sequence[pulumi.Resource] = ()):
        super().__init__(f"{PKG}:benchmark:Benchmark", name, None, opts)
        self.job = k8s.batch.v1.Job(
            f"{name}-{plan.job_name}",
            metadata=plan.job["metadata"],
            spec=plan.job["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
        )
        self.job_name = pulumi.Output.from_input(plan.job_name)
        self.parameters = pulumi.Output.from_input(plan.parameters())
        self.register_outputs({"jobName": self.job_name, "parameters": self.parameters})
