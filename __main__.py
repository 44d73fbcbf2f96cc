"""Pulumi program: stack config -> (cluster) -> Dynamo serving for one recipe target."""
import pulumi

from components.serving import Serving
from stacks.config import ConfigError, parse
from stacks.outputs import next_steps
from stacks.providers import kubernetes_provider
from stacks.pulumi_config import raw_config
from stacks.serving import build_plan

try:
    raw = raw_config()
    cfg = parse(raw)
    plan = build_plan(cfg)
except ConfigError as err:  # before any resource is registered
    raise pulumi.RunError(str(err)) from None

dynamo = pulumi.Config("dynamo")
provider = kubernetes_provider(raw, dynamo)
serving = Serving(
    "serving",
    plan,
    hf_token=None if cfg.hf_token_secret_name else dynamo.get_secret("hfToken"),
    protect_cache=cfg.storage.protect,
    opts=pulumi.ResourceOptions(provider=provider),
)
for key, value in next_steps(plan).items():
    pulumi.export(key, value)
