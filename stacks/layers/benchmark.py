"""The benchmark layer (``dynamo:benchmark``) in the one layer shape: ``benchmark_layer`` turns the typed
``stacks.serving.benchmark.BenchmarkPlan`` (the AIPerf Job of ``build_benchmark``) into the ``LayerPlan`` that
components/layer.py creates, component ``dynamo:benchmark:Benchmark``.

The typed plan stays the program's (``ProgramPlan.benchmark``): the Pod Security level of the serving namespace, the
follow commands and ``bench-report`` read it. The Job waits for the DGD (``after: graphs``; with the DGD wait on,
Pulumi creates it only once the DGD is Ready) and carries ``pulumi.com/skipAwait``, so ``up`` does not wait for the
run to finish. Its resource name is ``benchmark-<job name>`` (its URN's, so it never changes).
"""

from __future__ import annotations

from stacks.layers import LayerPlan
from stacks.serving.benchmark import BenchmarkPlan

KEY = "benchmark"


def benchmark_layer(bench: BenchmarkPlan) -> LayerPlan:
    """The LayerPlan of a ``BenchmarkPlan``: its Job (the plan's own dict) after the DGD."""
    return LayerPlan(
        key=KEY,
        kind="Benchmark",
        title=f"benchmark (AIPerf Job {bench.job_name})",
        objects=[bench.job],
        names={0: f"{KEY}-{bench.job_name}"},
        after="graphs",
    )
