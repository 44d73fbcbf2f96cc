"""GPU capacity that follows demand, as pure functions: pause and resume, and DGD autoscaling.

Pause (``paused: true`` on an entry or a single-target stack): every GPU worker component of the DGD goes to
0 replicas; the frontend (no GPU), the namespace, the HF token Secret, the model cache and its download Job stay.
``python -m stacks``/``pulumi up`` with ``paused`` removed brings the configured replicas back. A managed node group
whose entries are all paused (or all at ``replicas: 0``) goes to desired 0 / min 0 and keeps its maximum, so a
pause and the resume that follows change only replica and node counts (``pause_pools``). EKS managed node groups take
minSize and desiredSize 0 with a maxSize of at least 1 (aws/containers-roadmap#724, "Managed Nodes scale to 0",
closed as shipped; eksctl-io/eksctl#3793: "desiredCapacity: 0, minSize: 0, maxSize: 1 // EKS API requires maxSize
> 0"), which is why the maximum is kept and never 0. The DGD CRD of the pinned platform
(dynamo-platform 1.6.0) allows it: ``spec.components[].replicas`` is ``minimum: 0`` (../shared/reference/crds/
nvidia.com_dynamographdeployments.yaml, v1beta1), and Dynamo's autoscaling guide says "The DGDSA and operator accept
a replica count of 0".

What a paused entry answers: when every worker of a model is gone "the frontend removes the model from /v1/models
because no live ModelDeploymentCard remains. Requests for the model return HTTP 404" (Dynamo autoscaling guide,
"Scale-to-Zero Limitation": https://docs.nvidia.com/dynamo/zh-CN/v1.3.0/kubernetes-deployment/operate/autoscaling and
https://docs.nvidia.com/dynamo/zh-CN/dev/knowledge-base/kubernetes/kubernetes-operator/autoscaling.md).

Autoscaling (``autoscaling: {<component>: {minReplicas, maxReplicas, metric, target}}``), facts it relies on:

- DynamoGraphDeploymentScalingAdapter (DGDSA, ``nvidia.com``, short name ``dgdsa``): one per component that opts in.
  In the v1beta1 DGD the pinned CRD says: ``scalingAdapter`` "opts this component into the DGDSA. Setting it (even as
  an empty object, ``scalingAdapter: {}``) creates a DGDSA that owns the ``replicas`` field so that external
  autoscalers (HPA/KEDA/Planner) can drive scaling via the Scale subresource; omit the field to opt out"
  (nvidia.com_dynamographdeployments.yaml). The operator deletes the adapter of a component whose ``ScalingAdapter``
  is nil and names the others ``fmt.Sprintf("%s-%s", dgdName, strings.ToLower(componentName))``, seeding
  ``spec.replicas`` from the component's replicas (ai-dynamo/dynamo
  deploy/operator/internal/controller/dgd_scaling_adapters_reconciler.go @ 0670f73ac484046772a5dceb2043a9a9d7eae681,
  ``generateAdapterName``, ``reconcile``). The DGDSA CRD (nvidia.com_dynamographdeploymentscalingadapters.yaml)
  serves v1alpha1 (deprecated) and v1beta1 (storage); ``spec.replicas`` (``minimum: 0``) and the ``scale``
  subresource (``specReplicasPath: .spec.replicas``, ``statusReplicasPath: .status.replicas``,
  ``labelSelectorPath: .status.selector``).
- Because the adapter owns the component's replicas, the Pulumi DGD ignores ``spec.components[i].replicas`` of an
  autoscaled component after creation (components/serving.py), or every ``up`` would undo the autoscaler.
- KEDA ScaledObject ``keda.sh/v1alpha1``: ``scaleTargetRef`` {apiVersion, kind, name}, ``minReplicaCount``,
  ``maxReplicaCount`` ("minReplicaCount must be less than or equal to maxReplicaCount", a CEL rule of the CRD),
  ``triggers[].type: prometheus`` with metadata ``serverAddress``, ``query``, ``threshold`` (kedacore/keda v2.21.0
  config/crd/bases/keda.sh_scaledobjects.yaml and pkg/scalers/prometheus_scaler.go, module
  github.com/kedacore/keda/v2@v2.21.0 from the Go module proxy). Dynamo's guide drives the DGDSA with exactly this
  (ai-dynamo/dynamo docs/kubernetes/autoscaling.md @ 0d322d0f4ee796d3768cccf3b02f7dcad42c2a63, "KEDA with Prometheus").
- HPA autoscaling/v2 on Dynamo metrics needs an external-metrics adapter (Prometheus Adapter: same guide, "HPA with
  Custom Metrics"), which this project does not install: KEDA is its metrics adapter (it serves external.metrics.k8s.io
  and creates the HPA itself), so ScaledObjects are what is rendered.
- Metrics: the frontend's ``dynamo_frontend_queued_requests``, ``dynamo_frontend_inflight_requests`` (gauges) and
  ``dynamo_frontend_time_to_first_token_seconds`` (histogram), as the observability layer's dashboard names them
  (stacks.serving.metrics.DYNAMO_METRICS) and the guide recommends them for scaling; series carry ``namespace`` and
  ``dynamo_namespace`` (``<namespace>-<dgd>``, the PodMonitor's relabel; stacks.serving.operator.dynamo_namespace).
- Minimum 1: "when every worker for a model scales to zero ... Requests for the model return HTTP 404 and do not
  provide a model-specific demand signal ... keep at least one replica ... minReplicaCount: 1 for KEDA" (guide,
  "Scale-to-Zero Limitation"), so ``minReplicas: 0`` is refused (pause is ``paused: true``).
- ``via: planner``: the Dynamo Planner, in its load-based mode, drives the components instead of KEDA (below).

The Dynamo Planner (``via: planner``), facts it relies on (the pinned Dynamo 1.6.1: the ai-dynamo 1.6.1 wheel of the
serving rig, ``dynamo/planner/``, which is what the ``dynamo-planner`` image runs):

- Its optimization targets: "throughput (default): Uses static thresholds on queue depth and KV cache utilization. No
  SLA targets or profiling needed", ``latency`` the same "with more aggressive thresholds", ``load`` "user-defined
  prefill queue token thresholds and decode KV utilization thresholds", ``sla`` the AIConfigurator performance model
  with TTFT/ITL targets; "When optimization_target is throughput, latency, or load, load-based scaling is
  automatically enabled and throughput-based scaling is disabled" (Planner Guide,
  https://docs.nvidia.com/dynamo/v1.6.0/knowledge-base/modular-components/planner/planner-guide and the wheel's
  ``config/planner_config.py`` ``PlannerConfig._validate_config``: a target other than ``sla`` sets
  ``enable_load_scaling`` and clears ``enable_throughput_scaling``). Load-based scaling "Uses ForwardPassMetrics (FPM)
  from the Dynamo event plane" and "does not require profiling data" (the wheel's ``dynamo/planner/README.md``); its
  builtin proposer needs only FPM and worker counts, and queries Prometheus only under ``sla``
  (``plugins/orchestrator/engine_adapter.py`` ``_register_builtin_plugins``: ``needs`` gains
  ``observations.traffic`` only when ``optimization_target == "sla"``). So ``throughput`` (the default) and
  ``latency`` are offered; ``sla`` needs profiling data (an AIC perf model or a profiler's sweep, "Integration with
  Profiler" in the guide) that the catalog's recipes do not carry, and ``load`` needs four thresholds this stack does
  not take: both are refused. The workers publish FPM when ``DYN_FORWARDPASS_METRIC_PORT`` is set
  (``dynamo/vllm/main.py`` ``setup_fpm_relay``), which the operator puts on worker containers (``20380`` in its
  graph tests, ai-dynamo/dynamo stored index id 66509744193; "the operator-injected port", index id 55228124998).
- The KV Router: the Planner overview lists for load-based scaling "Requires the KV Router. Load-based scaling relies
  on per-worker engine metrics (active prefill tokens, active KV blocks) published by the KV Router ... Other routing
  strategies (round-robin, random) do not emit these metrics" and a feature matrix with "Any (round-robin, random,
  etc.) | ... | Not supported" (ai-dynamo/dynamo docs/.../planner/README.md, stored index id 52102429038). The 1.6.1
  wheel's README says instead that load-based scaling does not require "the KV Router"; this stack keeps the
  documented condition: ``via: planner`` only on a catalog target whose ``routing`` is ``kv``
  (``stacks.catalog.targets()``), others are refused naming the KV-routed targets of the model.
- How it is deployed in a DGD: a component ``type: planner`` running ``python3 -m dynamo.planner --config <JSON>``
  (the wheel's ``dynamo/planner/__main__.py`` ``_parse_config``: ``--config`` is its only flag, "JSON string or path to
  a JSON/YAML config file", validated as ``PlannerConfig``) in the ``nvcr.io/nvidia/ai-dynamo/dynamo-planner:<version>``
  image ("Dynamo >= 1.1.0: use the dedicated planner image", ai-dynamo/dynamo
  examples/backends/vllm/deploy/v1beta1/disagg_planner.yaml @ 14a3b0d9132c9194daefae989364777c191ee559, whose
  Planner has ``"environment": "kubernetes", "backend": "vllm"``). ``PlannerConfig`` fields used here (the wheel's
  ``config/planner_config.py`` and ``config/defaults.py``): ``environment`` (``kubernetes``), ``backend`` (``vllm``,
  ``sglang``, ``trtllm``, ``mocker``), ``mode`` (``disagg``, ``prefill``, ``decode``, ``agg``), ``optimization_target``,
  ``enable_load_scaling``/``enable_throughput_scaling``, ``pre_deployment_sweeping_mode`` (``none``: no bootstrap
  data), ``min_endpoint`` (agg; "prefill_min_endpoint and decode_min_endpoint are not supported when mode='agg'"),
  ``prefill_min_endpoint``/``decode_min_endpoint`` (ge 1), ``max_gpu_budget`` ("Maximum total GPUs the planner may
  allocate", default 8; the Planner has no per-component maximum, so the components' ``maxReplicas`` x GPUs per
  replica, which ``check_bounds`` fits to the pool, is its budget).
- Which components it scales: it finds the prefill and decode roles by the components' ``type`` (``prefill``,
  ``decode``; the decode role falls back to the one component of ``type: worker`` when there is exactly one), and two
  of one role are an error (the wheel's ``monitoring/dgd_services.py`` ``get_component_from_type_or_name``). So a DGD
  whose workers are all ``type: worker`` (more than one) cannot be planned, and is refused.
- It scales "using Scale subresource when DGDSA exists" (``<dgd-name>-<lowercase-service-name>``) and falls back to
  patching the DGD (the wheel's ``connectors/clients/kubernetes_api.py`` ``update_service_replicas``); the scaled
  components opt into their DGDSA (``scalingAdapter: {}``) as on the KEDA path, and Pulumi leaves their replicas to it.
- RBAC: the operator runs a planner component's pods as ``planner-serviceaccount`` (ai-dynamo/dynamo
  deploy/operator/internal/dynamo/component_planner.go @ 6d0496d5f430f94711f3d5012f67311c7754c5f4,
  ``GetBasePodSpec``) and, in cluster-wide mode (the platform's ``namespaceRestriction.enabled: false``,
  stacks/cluster/platform.py), creates that ServiceAccount with its ClusterRole binding in the DGD's namespace
  (``EnsureServiceAccountWithRBAC``, the DGD controller, stored index id 2512389583); the admission webhook lets that
  account change a DGD's replicas (``CanModifyDGDReplicas``, index id 65891008559). The stack creates no RBAC.
- No KEDA ScaledObject is made for a planned component, and it needs no ``dynamo:observability`` Prometheus (the
  load-based Planner reads none, above).
- Pause: KEDA's pause holds a component at 0 through its adapter; the Planner has no such pause and would scale a
  paused component back up, so ``paused: true`` with ``via: planner`` is refused (use ``via: keda`` to pause).

Pausing an autoscaled component (``paused: true`` with ``autoscaling``): its ScaledObject stays and is paused the KEDA
way, with the annotation ``autoscaling.keda.sh/paused-replicas: "0"`` (``PAUSED_REPLICAS``). What each pause
annotation does, in the pinned KEDA (module github.com/kedacore/keda/v2@v2.21.0, commit 626ded5d7831, from the Go
module proxy):

- ``autoscaling.keda.sh/paused-replicas: "<n>"``: ``NeedToBePausedByAnnotation`` is true as soon as it is present
  (apis/keda/v1alpha1/scaledobject_types.go), so the reconciler's ``handlePause`` stops the scale loop, deletes the
  HPA and ``scaleTargetToPausedCount`` writes ``n`` to the target's Scale subresource, "scales the target directly
  to the paused replica count" (controllers/keda/scaledobject_controller.go). Here the target is the DGDSA, whose
  controller then writes its ``spec.replicas`` into the DGD component ("Update DGD if replicas changed (DGDSA is the
  source of truth)": ai-dynamo/dynamo deploy/operator/internal/controller/
  dynamographdeploymentscalingadapter_controller.go @ 0fddc01b37244c4cfa5bcfd1c2e4f1a577ee833c, ``Reconcile``), and
  the operator removes the component's pods. So ``"0"`` takes the component to 0 replicas although the Pulumi DGD
  ignores that component's replicas after creation.
- ``autoscaling.keda.sh/paused: "true"`` alone also stops the loop and deletes the HPA, but ``scaleTargetToPausedCount``
  is a no-op without a count: "paused=true without specific count — freeze at current replicas, nothing to scale"
  (same file). The workers (and their GPUs) would keep running, so it is not used.

Resume (``paused`` removed): the ScaledObject loses the annotation; the reconciler marks it unpaused and recreates the
HPA and the scale loop. With the adapter at 0 the HPA does nothing (an HPA whose target is at 0 replicas stops
adjusting it: Kubernetes' "implicit maintenance-mode deactivation", which KEDA's executor cites at its fallback case);
KEDA's own loop brings it back (pkg/scaling/executor/scale_scaledobjects.go ``RequestScale``): an active
trigger goes through ``scaleFromZeroOrIdle`` to ``minReplicaCount`` (1 if unset), an inactive one through "ScaleTarget
replicas count is less than minimum replica count" to ``minReplicaCount``. Both need the Prometheus query to answer:
on a trigger error without ``fallback`` KEDA marks the ScaledObject not Ready and leaves the replicas as they are, so
the component stays at 0 until Prometheus answers. ``minReplicas`` is at least 1 (above), so a resumed component comes
back to at least ``minReplicas``; the KEDA pause is on the ScaledObject only, so pausing and resuming change no
resource but the DGD (its non-autoscaled GPU components' replicas), the ScaledObject's annotations and the node counts.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stacks.config.keys import NS, ConfigError
from stacks.serving.operator import LABEL_DGD_NAME

DGDSA_API = "nvidia.com/v1beta1"
DGDSA_KIND = "DynamoGraphDeploymentScalingAdapter"
SCALED_OBJECT_API = "keda.sh/v1alpha1"
KEDA_KEY = "keda"  # stacks/registry/versions.yaml charts.keda
KEDA_NAMESPACE = "keda"
MAX_REPLICAS = 100  # as dynamo:replicas (stacks.config.keys.MAX_REPLICAS)
# KEDA's pause with a replica count (apis/keda/v1alpha1/scaledobject_types.go PausedReplicasAnnotation, v2.21.0): the
# target is scaled to the count and autoscaling stops until the annotation is removed (module docstring).
PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
METRICS = ("queue-depth", "inflight", "ttft")
GPU = "nvidia.com/gpu"
VIAS = ("keda", "planner")
# The Dynamo Planner (module docstring): its image at the pinned Dynamo release (the rig's ai-dynamo 1.6.1 wheel, whose
# dynamo/planner/ this configuration is checked against), its component, and the optimization targets it runs here.
PLANNER_IMAGE = "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.6.1"
PLANNER_COMPONENT = "Planner"
PLANNER_TYPE = "planner"
PLANNER_TARGETS = ("throughput", "latency")  # load-based; "sla" needs profiling data, "load" thresholds
PLANNER_BACKENDS = ("vllm", "sglang", "trtllm", "mocker")  # PlannerConfig.backend
KEDA_ONLY = {"metric": "metric", "target": "target", "polling_interval": "pollingInterval", "cooldown_period": "cooldownPeriod"}


def adapter_name(dgd_name: str, component: str) -> str:
    """The DGDSA the operator creates for ``component`` (``generateAdapterName``)."""
    return f"{dgd_name}-{component.lower()}"


def gpus_per_replica(comp: dict) -> int:
    """GPUs one replica of a DGD component asks for (limits win over requests, as the scheduler counts them),
    times its node count for a multinode component."""
    n = 0
    for c in (comp.get("podTemplate") or {}).get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        v = {**(res.get("requests") or {}), **(res.get("limits") or {})}.get(GPU)
        n += int(v or 0)
    nodes = int(((comp.get("multinode") or {}).get("nodeCount")) or 1)
    return n * nodes


def gpu_components(dgd: dict) -> list[str]:
    """The components that hold GPUs (workers, prefill, decode); the frontend holds none."""
    return [c["name"] for c in dgd["spec"]["components"] if gpus_per_replica(c)]


# --------------------------------------------------------------------------- config


class ComponentAutoscaling(BaseModel):
    """``autoscaling.<component>``: ``via`` is ``keda`` (the default) or ``planner`` (the Dynamo Planner, load-based).
    KEDA: ``metric`` is ``queue-depth`` (requests waiting in the frontend's queue, summed over the DGD's frontends),
    ``inflight`` (requests in flight) or ``ttft`` (p95 time to first token over 2 minutes, in seconds); ``target`` is
    the value per replica KEDA aims for (its ``threshold``). Planner: ``optimizationTarget`` ``throughput`` (default)
    or ``latency``; the Planner picks its own signals, so the KEDA keys are refused there."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)
    min_replicas: int = Field(alias="minReplicas", default=1)
    max_replicas: int = Field(alias="maxReplicas")
    metric: Optional[Literal["queue-depth", "inflight", "ttft"]] = None
    target: Optional[float] = Field(default=None, gt=0)
    via: Literal["keda", "planner"] = "keda"
    optimization_target: Optional[str] = Field(alias="optimizationTarget", default=None)
    polling_interval: int = Field(alias="pollingInterval", default=15, ge=1, le=3600)
    cooldown_period: int = Field(alias="cooldownPeriod", default=300, ge=0, le=86400)

    @model_validator(mode="after")
    def _bounds(self):
        if self.min_replicas < 1:
            raise ValueError(
                f"@minReplicas@{self.min_replicas} is not allowed: with no worker the frontend drops the model "
                "(HTTP 404) and no demand signal can scale it back (Dynamo autoscaling guide, Scale-to-Zero "
                f"Limitation); valid range 1-{self.max_replicas}; to stop the GPUs set paused: true"
            )
        if not 1 <= self.max_replicas <= MAX_REPLICAS:
            raise ValueError(f"@maxReplicas@{self.max_replicas} is outside the valid range 1-{MAX_REPLICAS}")
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"@minReplicas@{self.min_replicas} is above maxReplicas {self.max_replicas}; valid range 1-{self.max_replicas}"
            )
        if self.via == "keda":
            for field in ("metric", "target"):
                if getattr(self, field) is None:
                    raise ValueError(f"@{field}@required")
            if self.optimization_target is not None:
                raise ValueError(
                    f"@optimizationTarget@{self.optimization_target!r} is a Dynamo Planner setting; it needs "
                    "via: planner (KEDA scales on metric and target)"
                )
            return self
        # via: planner (module docstring): load-based only, the Planner's own signals
        for field, key in KEDA_ONLY.items():
            if field in self.model_fields_set:
                raise ValueError(
                    f"@{key}@{getattr(self, field)!r} is a KEDA setting; with via: planner the Dynamo "
                    "Planner scales on its own load signals (forward-pass metrics: queue depth, KV cache "
                    f"utilization); remove {key}, or choose via: keda"
                )
        ot = self.optimization_target or PLANNER_TARGETS[0]
        if ot == "sla":
            raise ValueError(
                "@via@'planner' in the Planner's SLA mode (optimizationTarget: 'sla') is not available: SLA "
                "scaling needs profiling data (an AIConfigurator perf model or the profiler's sweep, Dynamo "
                "Planner Guide) that the catalog's recipes do not carry; valid optimizationTarget with "
                f"via: planner: {', '.join(PLANNER_TARGETS)} (load-based, no profiling), or via: keda"
            )
        if ot not in PLANNER_TARGETS:
            why = (
                " needs the Planner's prefill queue-token and decode KV-utilization thresholds, which this stack does not take"
                if ot == "load"
                else " is not a Planner optimization target"
            )
            raise ValueError(f"@optimizationTarget@{ot!r}{why}; valid choices: {', '.join(PLANNER_TARGETS)}")
        return self

    @property
    def planner_target(self) -> str:
        return self.optimization_target or PLANNER_TARGETS[0]


def _akey(key: str) -> str:
    """``dynamo:autoscaling`` for a single-target stack, ``dynamo:serve[i].autoscaling`` for an entry."""
    return f"{NS}:autoscaling" if key == NS else f"{key}.autoscaling"


def parse_autoscaling(raw: Any, components: list[str], gpu_comps: list[str], key: str = NS) -> dict[str, ComponentAutoscaling]:
    """Validate ``<key>.autoscaling`` against the DGD's components; ConfigError naming key, value and choices."""
    if not raw:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{_akey(key)}: {raw!r} is not a mapping of component name to {{minReplicas, maxReplicas, metric, target}}"
        )
    out = {}
    for comp, body in raw.items():
        where = f"{_akey(key)}.{comp}"
        if comp not in components:
            raise ConfigError(f"{where}: component {comp!r} is not in this target; GPU components: {', '.join(gpu_comps)}")
        if comp not in gpu_comps:
            raise ConfigError(f"{where}: {comp!r} holds no GPU (a frontend); autoscale a GPU component: {', '.join(gpu_comps)}")
        try:
            out[comp] = ComponentAutoscaling.model_validate(body if isinstance(body, dict) else {"_": body})
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if msg.startswith("@"):
                sub, _, msg = msg[1:].partition("@")
                raise ConfigError(f"{where}.{sub}: {msg}") from None
            if err["type"] == "extra_forbidden":
                msg = (
                    "unknown key; valid keys: minReplicas, maxReplicas, metric, target, via, pollingInterval, "
                    "cooldownPeriod, optimizationTarget"
                )
            elif err["type"] == "literal_error":
                msg = f"{err.get('input')!r} is not valid; choose one of {err['ctx']['expected']}"
            elif err["type"] == "missing":
                msg = "required"
            else:
                msg = f"{msg} (got {err.get('input')!r})"
            raise ConfigError(f"{where}.{loc}: {msg}") from None
    return out


# --------------------------------------------------------------------------- the DGD (pure, in place)


def keda_specs(specs: Optional[dict]) -> dict[str, ComponentAutoscaling]:
    """The components KEDA drives (a ScaledObject each); the others are the Planner's."""
    return {n: s for n, s in (specs or {}).items() if s.via == "keda"}


def planner_specs(specs: Optional[dict]) -> dict[str, ComponentAutoscaling]:
    return {n: s for n, s in (specs or {}).items() if s.via == "planner"}


def planner_roles(dgd: dict) -> tuple[dict[str, str], str]:
    """The Planner's role (``prefill``/``decode``/``agg``) of each component it can find in ``dgd``, as its Kubernetes
    connector finds them (``get_component_from_type_or_name``, module docstring), and why the others are not found."""
    comps = dgd["spec"]["components"]
    by_type: dict[str, list[str]] = {}
    for c in comps:
        by_type.setdefault(c.get("type") or "", []).append(c["name"])
    roles: dict[str, str] = {}
    notes = []
    for role in ("prefill", "decode"):
        names = by_type.get(role, [])
        if len(names) == 1:
            roles[names[0]] = role
        elif names:
            notes.append(f"{len(names)} components of type {role} ({', '.join(names)}), one of a role is the Planner's limit")
    workers = by_type.get("worker", [])
    if len(workers) == 1 and not by_type.get("decode") and not by_type.get("prefill"):
        roles[workers[0]] = "agg"
    elif workers:
        notes.append(
            f"type worker component{'s' if len(workers) > 1 else ''} {', '.join(workers)} "
            "(the Planner takes one type worker component, aggregated, and only without prefill/decode types)"
        )
    return roles, "; ".join(notes)


@lru_cache(maxsize=1)
def planner_targets() -> dict[str, Any]:
    """Catalog targets the Planner may drive (DGD name -> Target): KV-routed (``routing: kv``, module docstring), with
    at least one GPU component whose role the Planner can find. Derived from ``stacks.catalog.targets()``."""
    from stacks import catalog

    out = {}
    for t in {id(t): t for t in catalog.targets().values()}.values():
        if t.routing != "kv" or t.runtime not in PLANNER_BACKENDS:
            continue
        dgd = next(o for o in catalog.recipe_objects(t) if o["kind"] == "DynamoGraphDeployment")
        if set(planner_roles(dgd)[0]) & set(gpu_components(dgd)):
            out[t.dgd_name] = t
    return out


def _catalog_target(dgd: dict):
    from stacks import catalog

    name = dgd["metadata"]["name"]
    return next((t for t in {id(t): t for t in catalog.targets().values()}.values() if t.dgd_name == name), None)


def planner_config(dgd: dict, specs: dict[str, ComponentAutoscaling], roles: dict[str, str], backend: str) -> dict:
    """The ``PlannerConfig`` (``--config``) of the Planner that drives ``specs`` (module docstring: field names and
    rules of the pinned 1.6.1 wheel's ``config/planner_config.py``)."""
    comps = {c["name"]: c for c in dgd["spec"]["components"]}
    mine = {roles[n]: s for n, s in specs.items()}
    mode = "agg" if "agg" in mine else "disagg" if {"prefill", "decode"} <= set(mine) else next(iter(mine))
    cfg: dict[str, Any] = {
        "environment": "kubernetes",
        "backend": backend,
        "mode": mode,
        "optimization_target": next(iter(specs.values())).planner_target,
        "enable_load_scaling": True,
        "enable_throughput_scaling": False,
        "pre_deployment_sweeping_mode": "none",
        "max_gpu_budget": sum(s.max_replicas * gpus_per_replica(comps[n]) for n, s in specs.items()),
    }
    if mode == "agg":
        cfg["min_endpoint"] = mine["agg"].min_replicas
    for role in ("prefill", "decode"):
        if role in mine:
            cfg[f"{role}_min_endpoint"] = mine[role].min_replicas
    return cfg


def planner_component(config: dict) -> dict:
    """The DGD's Planner: ``type: planner``, ``python3 -m dynamo.planner --config <JSON>`` (module docstring). CPU only
    (the operator sets ``NVIDIA_VISIBLE_DEVICES=void`` on it: component_planner.go)."""
    return {
        "name": PLANNER_COMPONENT,
        "type": PLANNER_TYPE,
        "replicas": 1,
        "podTemplate": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": PLANNER_IMAGE,
                        "command": ["python3", "-m", "dynamo.planner"],
                        "args": ["--config", json.dumps(config, sort_keys=True, separators=(",", ":"))],
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
                    }
                ]
            }
        },
    }


def _check_planner(dgd: dict, paused: bool, specs: dict[str, ComponentAutoscaling]) -> tuple[dict[str, str], str]:
    """Refuse ``via: planner`` where the Planner cannot run here, naming the key, the value, why and the choices."""
    first = next(iter(specs))
    where = f"{NS}:autoscaling.{first}.via"
    t = _catalog_target(dgd)
    eligible = planner_targets()
    if t is None or t.dgd_name not in eligible:
        same = sorted(e.id for e in eligible.values() if t is not None and e.model == t.model)
        why = (
            "it is not a catalog target"
            if t is None
            else f"its routing is {t.routing!r} and the Planner's load-based scaling needs the KV Router's per-worker load "
            "(Dynamo Planner overview, 'Requires the KV Router')"
            if t.routing != "kv"
            else f"the Planner finds no role among its GPU components ({planner_roles(dgd)[1]})"
        )
        alt = f"; KV-routed targets of {t.model} it can drive: {', '.join(same)}" if same else ""
        raise ConfigError(
            f"{where}: 'planner' is not available for {t.id if t else dgd['metadata']['name']}: {why}; "
            f"valid choices here: keda{alt}"
        )
    roles, note = planner_roles(dgd)
    for name in specs:
        if name not in roles:
            raise ConfigError(
                f"{NS}:autoscaling.{name}.via: 'planner' cannot drive {name!r}: {note or 'no Planner role'}; "
                f"valid choices: keda, or via: planner on {', '.join(sorted(set(roles) & set(gpu_components(dgd))))}"
            )
    targets = {s.planner_target for s in specs.values()}
    if len(targets) > 1:
        raise ConfigError(
            f"{NS}:autoscaling.{first}.optimizationTarget: one Planner drives {', '.join(specs)}, so they "
            f"take one optimizationTarget; got {', '.join(sorted(targets))}"
        )
    if paused:
        raise ConfigError(
            f"{where}: 'planner' with paused: true is not possible: the Planner would scale the paused "
            "components back up (it has no pause; KEDA's holds a component at 0 through its adapter); "
            "valid choices for a paused entry: keda"
        )
    if any(c["name"] == PLANNER_COMPONENT for c in dgd["spec"]["components"]):
        raise ConfigError(f"{where}: 'planner': the target already has a {PLANNER_COMPONENT!r} component")
    return roles, t.runtime


def apply_to_dgd(dgd: dict, paused: bool, specs: dict[str, ComponentAutoscaling]) -> dict[str, int]:
    """Pause: every GPU component to 0 replicas (returns the replicas it had). Autoscaling: the component opts into
    its DGDSA (``scalingAdapter: {}``) and starts at its replicas clamped to [minReplicas, maxReplicas]; with
    ``via: planner`` the DGD gains the Planner that drives them (after the checks of ``_check_planner``)."""
    planned = planner_specs(specs)
    if planned:
        roles, backend = _check_planner(dgd, paused, planned)
        config = planner_config(dgd, planned, roles, backend)
    before = {}
    for comp in dgd["spec"]["components"]:
        spec = specs.get(comp["name"])
        if spec is not None:
            comp["scalingAdapter"] = {}
            comp["replicas"] = min(max(int(comp.get("replicas", 1)), spec.min_replicas), spec.max_replicas)
        if paused and gpus_per_replica(comp):
            before[comp["name"]] = int(comp.get("replicas", 1))
            comp["replicas"] = 0
    if planned:
        dgd["spec"]["components"].append(planner_component(config))
    return before


def unpaused_dgd(dgd: dict, before: dict[str, int]) -> dict:
    """The DGD as it runs when resumed (the replicas ``apply_to_dgd`` recorded)."""
    out = copy.deepcopy(dgd)
    for comp in out["spec"]["components"]:
        if comp["name"] in before:
            comp["replicas"] = before[comp["name"]]
    return out


def at_max(dgd: dict, specs: dict[str, ComponentAutoscaling]) -> dict:
    """The DGD with every autoscaled component at its maxReplicas (what the pool must hold)."""
    out = copy.deepcopy(dgd)
    for comp in out["spec"]["components"]:
        if comp["name"] in specs:
            comp["replicas"] = specs[comp["name"]].max_replicas
    return out


def metric_query(metric: str, namespace: str, dynamo_ns: str) -> str:
    """The PromQL KEDA evaluates for ``metric`` over one DGD's frontends."""
    from stacks.serving.metrics import DYNAMO_METRICS as M

    sel = f'namespace="{namespace}",dynamo_namespace="{dynamo_ns}"'
    if metric == "queue-depth":
        return f"sum({M['queued']}{{{sel}}})"
    if metric == "inflight":
        return f"sum({M['inflight']}{{{sel}}})"
    return f"histogram_quantile(0.95, sum by (le) (rate({M['ttft']}_bucket{{{sel}}}[2m])))"


def scaled_object(dgd: dict, component: str, spec: ComponentAutoscaling, prometheus_url: str, paused: bool = False) -> dict:
    """The KEDA ScaledObject that drives ``component``'s DGDSA from the observability layer's Prometheus; ``paused``:
    held at 0 replicas by KEDA (``PAUSED_REPLICAS: "0"``, see the module docstring) until a later ``up`` removes it."""
    from stacks.serving.operator import dynamo_namespace

    assert spec.metric is not None, "via: keda requires metric (ComponentAutoscaling checks it)"
    md = dgd["metadata"]
    target = adapter_name(md["name"], component)
    meta = {
        "name": target,
        "namespace": md["namespace"],
        "labels": {"app.kubernetes.io/part-of": "dynamo", LABEL_DGD_NAME: md["name"]},
    }
    if paused:
        meta["annotations"] = {PAUSED_REPLICAS: "0"}
    return {
        "apiVersion": SCALED_OBJECT_API,
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": DGDSA_API, "kind": DGDSA_KIND, "name": target},
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.max_replicas,
            "pollingInterval": spec.polling_interval,
            "cooldownPeriod": spec.cooldown_period,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": metric_query(spec.metric, md["namespace"], dynamo_namespace(dgd)),
                        "threshold": f"{spec.target:g}",
                    },
                }
            ],
        },
    }


def keda_chart():
    """KEDA's chart (pinned in stacks/registry/versions.yaml charts.keda), in its own namespace, with its defaults."""
    from stacks.registry.charts import helm_spec as _helm

    return _helm(KEDA_KEY, "keda", KEDA_NAMESPACE, {})


# --------------------------------------------------------------------------- pools


@dataclass
class PoolUse:
    """GPUs one pool must hold at most: per entry key, its components' GPUs (autoscaled ones at maxReplicas)."""

    gpu: str
    key: str  # where the pool's size is configured
    capacity: int  # GPUs the pool can hold (nodes x GPUs per node, or its GPU limit)
    what: str  # "2 x p5.48xlarge" or "NodePool limit 4 x p5.48xlarge"
    nodes: int = 0  # its node count (limit); 0: GPUs only
    node_capacity: Optional[dict] = None  # what one node offers (GPUs, EFA devices): the replicas are packed onto nodes


def _resumed(plan) -> dict:
    """An entry's DGD as it runs once resumed (itself when not paused): bounds are checked against it, so a paused
    entry is refused exactly what its resume would be."""
    return unpaused_dgd(plan.dgd, plan.paused)


def check_bounds(entries: list, pools: dict[str, PoolUse]) -> None:
    """GPUs per replica x maxReplicas (plus every other GPU replica on the pool, as resumed) must fit the pool, before
    any resource: a ConfigError naming the autoscaling key, its value and the valid range."""
    by_gpu: dict[str, list] = {}
    for e in entries:
        by_gpu.setdefault(e.plan.target.gpu, []).append(e)
    for gpu, members in by_gpu.items():
        pool = pools.get(gpu)
        if pool is None:
            continue
        fixed = sum(
            gpus_per_replica(c) * int(c.get("replicas", 1))
            for e in members
            for c in _resumed(e.plan)["spec"]["components"]
            if c["name"] not in e.plan.autoscaling
        )
        scaled = [
            (e, name, spec, gpus_per_replica(next(c for c in e.plan.dgd["spec"]["components"] if c["name"] == name)))
            for e in members
            for name, spec in e.plan.autoscaling.items()
        ]
        total = fixed + sum(per * spec.max_replicas for _, _, spec, per in scaled)
        if not scaled:
            continue
        e, name, spec, per = scaled[-1]
        if total <= pool.capacity:
            _check_packing(members, pool, e, name, spec)
            continue
        others = total - per * spec.max_replicas
        hi = (pool.capacity - others) // per
        raise ConfigError(
            f"{_akey(e.key)}.{name}.maxReplicas: {spec.max_replicas} x {per} GPUs"
            + (f" plus the pool's other {others} GPUs" if others else "")
            + f" need {total} {gpu} GPUs; the pool ({pool.key}) holds {pool.capacity} ({pool.what}); valid range "
            f"{spec.min_replicas}-{max(hi, 0)}" + (f", or raise {pool.key}" if hi < spec.max_replicas else "")
        )


def _check_packing(members: list, pool: PoolUse, e: Any, name: str, spec: ComponentAutoscaling) -> None:
    """Every replica at maxReplicas packed on the pool's nodes (GPUs and EFA devices per node, first fit as the node
    group is sized: stacks.catalog.fit.pack) must fit its node count."""
    from stacks.catalog.fit import pack

    capacity = pool.node_capacity
    if not pool.nodes or not capacity:
        return

    def nodes_at(top: int) -> int:
        comps = []
        for m in members:
            specs = dict(m.plan.autoscaling)
            dgd = at_max(_resumed(m.plan), specs)
            if m is e:
                for c in dgd["spec"]["components"]:
                    if c["name"] == name:
                        c["replicas"] = top
            comps += dgd["spec"]["components"]
        return pack({"spec": {"components": comps}}, capacity)[0]

    need = nodes_at(spec.max_replicas)
    if need <= pool.nodes:
        return
    hi = max((n for n in range(spec.min_replicas, spec.max_replicas) if nodes_at(n) <= pool.nodes), default=0)
    raise ConfigError(
        f"{_akey(e.key)}.{name}.maxReplicas: {spec.max_replicas}: the pool's replicas at their maximum need {need} "
        f"nodes (GPUs and EFA devices per node); the pool ({pool.key}) holds {pool.what}; valid range "
        f"{spec.min_replicas}-{hi}, or raise {pool.key}"
    )


def cluster_stack_pools(node_pools: list[dict], stack: str) -> dict[str, PoolUse]:
    """The pools of a cluster stack (``cluster.mode: stack``), from the ``nodePools`` it exports
    (stacks.cluster.node_pools: per pool its GPU, instance type, ``count`` and per-node ``allocatable``): a node group
    holds ``count`` nodes, a Karpenter pool (``capacity: karpenter``) at most ``count`` (its ``maxNodes``: the pool's
    node count is its limit, stacks/cluster/pools.py). The first pool of a GPU is the one the entries run on, as
    ``stacks.cluster.capacity_shortfall`` takes it; the list is in the cluster stack's ``gpuPools`` order."""
    out: dict[str, PoolUse] = {}
    for i, p in enumerate(node_pools):
        gpu = p["gpu"]  # every exported pool names its GPU (stacks.cluster.node_pools)
        if gpu in out:
            continue
        alloc = {k: int(v) for k, v in (p.get("allocatable") or {}).items()}
        n, itype = int(p.get("count") or 0), p.get("instanceType")
        karpenter = p.get("capacity") == "karpenter"
        key = f"{NS}:cluster.gpuPools[{i}].{'maxNodes' if karpenter else 'nodes'} of {stack}"
        out[gpu] = PoolUse(
            gpu, key, n * alloc.get(GPU, 0), f"NodePool limit {n} x {itype}" if karpenter else f"{n} x {itype}", n, alloc
        )
    return out


def pause_pools(cluster_plan: Any, entries: list) -> list[str]:
    """Managed node groups whose entries hold no GPU replica (all paused, or all at replicas 0): desired and min 0,
    max kept at what the resumed entries need (so pause and resume change only node counts). Returns their names.
    Karpenter pools are left as they are: their NodePool stays, and with no pending GPU pod Karpenter launches nothing
    and consolidates the empty nodes away after the pool's consolidateAfter (stacks/cluster/karpenter.py)."""
    from stacks.catalog.fit import pack

    out = []
    by_gpu: dict[str, list] = {}
    for e in entries:
        by_gpu.setdefault(e.plan.target.gpu, []).append(e)
    for pool in getattr(cluster_plan, "gpu_pools", None) or []:
        members = by_gpu.get(pool.gpu)
        sc = (pool.nodegroup or {}).get("scaling_config")
        if not members or sc is None or getattr(pool, "capacity", "node-group") == "karpenter":
            continue  # a Karpenter pool registers no node group: consolidation removes its empty nodes
        if any(gpus_per_replica(c) * int(c.get("replicas", 1)) for e in members for c in e.plan.dgd["spec"]["components"]):
            continue
        resumed = {
            "spec": {"components": [c for e in members for c in unpaused_dgd(e.plan.dgd, e.plan.paused)["spec"]["components"]]}
        }
        need, _ = pack(resumed, pool.node_shape.capacity)
        sc.update({"desired_size": 0, "min_size": 0, "max_size": max(int(sc["max_size"]), need, 1)})
        pool.node_shape.count = 0
        out.append(pool.name)
    return out


def at_min_dgd(plan) -> dict:
    """An entry's DGD with every autoscaled component at its minReplicas (the fewest GPUs it holds while serving)."""
    specs = plan.autoscaling
    out = copy.deepcopy(plan.dgd)
    for comp in out["spec"]["components"]:
        if comp["name"] in specs:
            comp["replicas"] = specs[comp["name"]].min_replicas
    return out
