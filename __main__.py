"""Pulumi program: stack config -> cluster source (render, an existing cluster, a cluster stack's, or a new EKS
cluster) -> the layers the serving objects wait for (device plugins, the Dynamo platform, KEDA) -> Dynamo serving for
the stack's recipe targets -> the other optional layers (observability, the benchmark, the front door); each layer a
``stacks.layers.LayerPlan`` created by the one generic component (components/layer.py).

The whole config is parsed and planned before any resource (``stacks.program.build_program``, the same function
``python -m stacks render --stack`` runs). A cluster-only stack (``dynamo:serve: []``) stops after the platform and
exports what serving stacks on it read (``cluster.mode: stack``): kubeconfig (secret), nodePools, storageClassName,
clusterName, region."""

import os

import pulumi

from components.cluster_source import cluster_source
from components.layer import create_layers, gate
from components.serving_layer import ServingLayer
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.config.pulumi_config import raw_config, secret_config_keys

try:
    program = build_program(
        raw_config(),
        pulumi.get_stack(),
        secret_config_keys(),
        env=dict(os.environ),
        aws_region=pulumi.Config("aws").get("region"),
    )
except ConfigError as err:
    raise pulumi.RunError(str(err)) from None

cluster = cluster_source(program)  # provider, what storage and GPU workloads wait for, cluster outputs
redact = program.mode.redacts_secrets
# The layers serving objects wait for (LayerPlan.gates), each after the readiness point its plan names (LayerPlan.after).
first = create_layers(program.layers, cluster, redact_secrets=redact)
cluster.gpu_ready = cluster.gpu_ready + gate(first, "graphs")  # the DGDs (and the layers after the cluster) wait for them
serving = ServingLayer(program, cluster, autoscalers_after=gate(first, "autoscalers"))  # one Serving per namespace
create_layers(program.layers, cluster, serving, redact_secrets=redact)  # every other layer

for key, value in {**cluster.exports(), **serving.exports(), **program.layer_outputs()}.items():
    pulumi.export(key, value)
