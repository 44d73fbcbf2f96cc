"""``helm_release``: one ``helm.v3.Release`` from a pure ``HelmSpec`` (stacks/registry/charts.py), the one way the
shell installs a chart (the layers' charts, components/layer.py; the NVIDIA DRA driver, components/cluster_source.py). The platform layer (device plugins, the Dynamo platform) is a layer of the program:
stacks/layers/platform.py, created by components/layer.py.

Note: ``helm.v3.Release`` needs a reachable cluster; it cannot be rendered by a provider in
``render_yaml_to_directory`` mode.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from stacks.registry.charts import HelmSpec

HELM_TIMEOUT_SECONDS = 900


def helm_release(name: str, spec: HelmSpec, opts: pulumi.ResourceOptions, create_namespace: bool = True) -> k8s.helm.v3.Release:
    """One ``helm.v3.Release`` from a pure ``HelmSpec``; it waits for the chart's workloads to be ready."""
    return k8s.helm.v3.Release(
        name,
        name=spec.name,
        chart=spec.chart,
        version=spec.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=spec.repo),
        namespace=spec.namespace,
        create_namespace=create_namespace,
        values=spec.values,
        timeout=HELM_TIMEOUT_SECONDS,
        opts=opts,
    )
