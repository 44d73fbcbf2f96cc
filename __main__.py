"""Pulumi program: stack config -> cluster source (render, an existing cluster, a cluster stack's, or a new EKS
cluster) -> Dynamo serving for the stack's recipe targets -> optional observability and benchmark -> the optional layers
(the front door).

The whole config is parsed and planned before any resource (``stacks.program.build_program``, the same function
``python -m stacks render --stack`` runs). A cluster-only stack (``dynamo:serve: []``) stops after the platform and
exports what serving stacks on it read (``cluster.mode: stack``): kubeconfig (secret), nodePools, storageClassName,
clusterName, region."""
import os

import pulumi

from components.benchmark import Benchmark
from components.cluster_source import cluster_source
from components.layer import Layer
from components.observability import Observability
from components.serving_layer import ServingLayer
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.config.pulumi_config import raw_config, secret_config_keys

try:
    program = build_program(raw_config(), pulumi.get_stack(), secret_config_keys(), env=dict(os.environ),
                            aws_region=pulumi.Config("aws").get("region"))
except ConfigError as err:
    raise pulumi.RunError(str(err)) from None

cluster = cluster_source(program)  # provider, what storage and GPU workloads wait for, cluster outputs
serving = ServingLayer(program, cluster)  # one Serving per namespace, with its pull Secrets and ComputeDomain

if program.observability is not None:
    Observability("observability", program.observability, opts=pulumi.ResourceOptions(provider=cluster.provider),
                  depends_on=cluster.storage_ready + cluster.gpu_ready)
if program.benchmark is not None:
    Benchmark("benchmark", program.benchmark, opts=pulumi.ResourceOptions(provider=cluster.provider),
              depends_on=[serving.serving.graph.dgd])

for plan in program.layers:  # the optional layers in the one layer shape (stacks/layers): the front door
    Layer(plan, opts=pulumi.ResourceOptions(provider=cluster.provider), depends_on=[*serving.servings.values(), *cluster.layers_ready],
          redact_secrets=program.cluster.mode == "render")

for key, value in {**cluster.exports(), **serving.exports(), **program.layer_outputs()}.items():
    pulumi.export(key, value)
