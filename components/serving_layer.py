"""The serving layer of a stack: one ``Serving`` per namespace, with what each needs from the stack's secrets.

Names follow what identifies the objects in the cluster (the namespace and the DGD's name: stacks/program/names.py),
never the entries' order or their ``name``, so adding, removing or renaming an entry touches only its own objects, and
the single-target form and the ``dynamo:serve`` form answer to each other's names (aliases both ways). The program's
hooks are registered here on every run (components/hooks.py). Each Serving gets the HF token when one of its entries needs the stack's token
Secret, and on a cluster this stack creates (or a cluster stack's) the image pull Secrets of its namespace and the
GB200 ComputeDomain. Also logged here, before any resource is created: renamed or deprecated targets (the warning
names the successor) and the commands to follow a long ``up``, which ``exports()`` returns with the next steps.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pulumi

from components.cluster_source import ClusterSource
from components.serving import Serving, ServingArgs, kubectl_probe
from stacks.cluster import dockerconfigjson
from stacks.config.keys import NS, deprecation_warnings
from stacks.serving.outputs import follow_commands, kubectl_for, next_steps
from stacks.program import ProgramPlan
from stacks.program.names import pull_secret_name, serving_names
from components.hooks import program_hooks


def pull_secret_value(config: pulumi.Config) -> pulumi.Output:
    """The .dockerconfigjson of the image pull Secrets: ``dynamo:imagePullSecret`` as is, or nvcr.io's from
    ``dynamo:ngcApiKey`` (both Pulumi secrets; ``stacks.config`` refuses both set at once)."""
    given = config.get_secret("imagePullSecret")
    return given if given is not None else config.require_secret("ngcApiKey").apply(dockerconfigjson)


class ServingLayer:
    """Every entry's serving objects on the cluster source's provider (see the module docstring)."""

    def __init__(self, program: ProgramPlan, source: ClusterSource, autoscalers_after: Sequence[pulumi.Resource] = ()):
        """``autoscalers_after``: what every ScaledObject waits for besides its DGD (the layers gating the autoscalers,
        components/layer.py ``gate``)."""
        self.program = program
        config = pulumi.Config(NS)
        cp, multi = program.cluster_plan, program.multi
        hf_token = config.get_secret("hfToken") if any(e.plan.hf_secret for e in program.entries) else None
        # A mode's cluster plan (where it has one) holds the pull Secrets (and ComputeDomain) this stack creates.
        pulls = list(cp.pull_secrets) if cp is not None else []
        pull = pull_secret_value(config) if pulls else None
        cd = getattr(cp, "compute_domain", None)
        program_hooks()  # registered on every run, whatever it declares (components/hooks.py)
        names = serving_names(program)  # names and their other-form aliases (stacks/program/names.py)
        first_ns = names[0].namespace if names else None
        self.servings: dict[str, Serving] = {}
        for sn in names:
            ns, first = sn.namespace, sn.entries[0]
            self.servings[ns] = Serving(
                sn.name,
                ServingArgs(
                    first.plan,
                    hf_token=hf_token,
                    protect_cache=first.cfg.storage.protect,
                    depends_on=source.storage_ready,
                    graph_depends_on=source.gpu_ready,
                    autoscaler_depends_on=autoscalers_after,
                    redact_secrets=program.mode.redacts_secrets,
                    probe=kubectl_probe(source.kubeconfig_file, source.context) if source.kubeconfig_file else None,
                    graphs=[(g.suffix, g.entry.plan, g.aliases) for g in sn.graphs],
                    pull_secrets=[
                        (n, o, a)
                        for o in pulls
                        if o["metadata"]["namespace"] == ns
                        for n, a in [pull_secret_name(o["metadata"], first_ns)]
                    ],
                    pull_secret=pull,
                    compute_domain=cd if cd and cd["metadata"]["namespace"] == ns else None,
                ),
                opts=pulumi.ResourceOptions(provider=source.provider, aliases=[pulumi.Alias(name=a) for a in sn.aliases] or None),
            )
        self.serving: Optional[Serving] = next(iter(self.servings.values()), None)  # None: a cluster-only stack
        for entry in program.entries:
            for warning in deprecation_warnings(entry.cfg):
                pulumi.log.warn(f"{entry.key}: {warning}" if multi else warning)
        plan = program.serving
        self.kubectl = kubectl_for(program.cluster)
        self.follow = (
            follow_commands(plan, cp if program.mode.creates_cluster else None, program.benchmark, self.kubectl) if plan else {}
        )
        for key, value in self.follow.items():
            pulumi.log.info(f"{key}: {value}")

    def exports(self) -> dict[str, Any]:
        """What to do next: per entry (``entries``) in a ``dynamo:serve`` stack, else the target's own keys; then the
        commands to follow the ``up``."""
        program = self.program
        if program.multi:
            out = {"entries": {e.name: next_steps(e.plan, self.kubectl) for e in program.entries}}
        else:
            out = next_steps(program.serving, self.kubectl) if program.serving is not None else {}
        return {**out, **self.follow}
