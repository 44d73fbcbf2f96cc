"""Where the serving objects go (``dynamo:cluster``): parsed by ``stacks.spec`` (the cluster source, a union on
``cluster.mode``); kept under this name for the tools that read a stack's cluster keys."""
from stacks.spec import MODES, ClusterConfig, ClusterSource, cluster_config  # noqa: F401
