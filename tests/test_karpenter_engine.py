"""The real Karpenter launches and removes the GPU nodes of a serving stack on the simulated cluster, and the real HPA
controller, writing the DGD scaling adapter's scale subresource, is what adds and removes them when the stack scales.

Karpenter v1.13.0 (sigs.k8s.io/karpenter, its KWOK cloud provider: ``tools/karpenter.sh``) runs against this module's
own local control plane (``tools/kube-local.sh``: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok,
the Dynamo CRDs of the pinned platform), with the instance types of stacks/registry/gpus.py priced from
stacks/registry/prices.yaml (``stacks.cli.kwok_instances.kwok_instance_types``) and the GPU pool's NodePool pointed at
a KWOKNodeClass (``stacks.cli.karpenter_sim``).

The stack is the committed example ``h100-karpenter`` (Lightning H100 disaggregated, its GPU pool on Karpenter, decode
workers autoscaled 1-8), built by the same ``build_program`` as ``pulumi up``, with the pool's ``consolidateAfter``
set short for the test. Its NodePool is the one stacks/cluster/karpenter.py plans. The cluster starts with the system node
group only (KWOK nodes of the EKS plan's system group) and no GPU node. The stack's DGD is created as planned, with the
DynamoGraphDeploymentScalingAdapter (DGDSA) the operator makes for the autoscaled component, and the
HorizontalPodAutoscaler KEDA makes of the planned ScaledObject. The pods are the Dynamo operator's pods of the DGD
(``stacks.cli.simulate.operator_pod_intents``):

- as planned (decode workers at minReplicas), the workers stay Pending until Karpenter launches the nodes ``stacks
  cost`` counts for the minimum (instance type and capacity type as planned), and the real scheduler binds every pod.
  The HPA reads the adapter's scale and, with no metric to read (no KEDA metrics server here), changes nothing;
- the stack's ``autoscaling.minReplicas`` raised to its maxReplicas: the HPA (the real controller of
  kube-controller-manager, which raises a target below minReplicas without any metric) writes the adapter's
  ``/scale``, the adapter's replicas go to the DGD and its pods, and Karpenter adds the nodes ``stacks cost`` counts for
  the maximum;
- ``autoscaling.maxReplicas`` lowered back to the minimum: the HPA lowers the adapter, the pods go, and Karpenter's
  emptiness consolidation removes the emptied node;
- paused (the program's own pause: ``paused: true``, the other worker components at 0 replicas in the DGD and the
  ScaledObject's ``paused-replicas: "0"``, which KEDA writes to the adapter's ``/scale``), the operator carries the
  adapter's 0 to the DGD and deletes the pods, and Karpenter removes every node within consolidateAfter plus its
  disruption polling and validation (stacks/registry/durations.yaml ``karpenter``);
- resumed (KEDA writes minReplicaCount to the adapter's ``/scale``, which the HPA does not do from 0), the nodes of the
  minimum come back.

Two parts are stand-ins, labelled where they are defined: ``keda_hpa`` and ``keda_scale`` (the KEDA operator does not
run here: the HPA KEDA would build from the planned ScaledObject, and KEDA's own writes to the adapter's ``/scale`` on
pause and resume) and ``OperatorStandIn`` (the Dynamo operator does not run here: it
propagates the adapter's replicas to the DGD as the operator's DGDSA controller does, and makes the DGD's pods).
Everything that scales (the HPA controller, the scale subresource, the scheduler, Karpenter) is the real one.

The pool's capacity placeholder (stacks/cluster/karpenter.py ``capacity_placeholder``) runs here as planned too: its Job
alone has Karpenter launch the nodes the workers fill, the workers (Pending while those nodes boot) bind to them and no
further NodeClaim appears, where the textbook GPU-holding placeholder beside it costs extra nodes.

Node counts and timings are printed (``-s``).
"""

from __future__ import annotations

import copy
import re
import shutil
import threading
import time
from urllib.parse import quote

import pytest

from conftest import missing, need_tool
from local_cluster import control_plane
from stacks.registry import yaml_text

STACK = "h100-karpenter"
TARGET = "lightning-vllm-agg-h100-mtp"  # the unit tests' target (no stack needed)
RUN = "karpenter"
NODE_CLASS = "gpu"
# The pool's dynamo:cluster consolidateAfter for the test (the stack's own is 10m).
CONSOLIDATE_AFTER = "2s"
MAX_NODES = 4
LAUNCH_BOUND_S = 60
SLACK_S = 30  # node drain and termination, and this 2-core machine under `make test`'s parallel groups
# The HPA controller of kube-local's kube-controller-manager (k8s.io/kubernetes v1.33.13, the tools/kube/go.mod pin;
# its --controllers='*,...' includes horizontalpodautoscaling) handles an HPA once per
# --horizontal-pod-autoscaler-sync-period, which kube-local leaves at its default 15s (pkg/controller/podautoscaler/
# config/v1alpha1/defaults.go): every add or update is queued with that delay (horizontal.go enqueueHPA: "Requests are
# always added to queue with resyncPeriod delay"; rate_limiters.go NewDefaultHPARateLimiter, a fixed interval).
# reconcileAutoscaler takes the target's current replicas from its scale's spec.replicas and, before any metric:
# above maxReplicas -> maxReplicas ("Current number of replicas above Spec.MaxReplicas"), below minReplicas ->
# minReplicas ("... below Spec.MinReplicas"), at 0 -> nothing ("ScalingDisabled"); only inside [min, max] does it read
# the metrics. A rescale is a Scales().Update of the target's scale subresource, an event SuccessfulRescale
# "New size: <n>; reason: <reason>" from component horizontal-pod-autoscaler, and status currentReplicas/desiredReplicas
# (setStatus).
HPA_SYNC_S = 15
HPA_BOUND_S = 2 * HPA_SYNC_S + SLACK_S
# The field manager the API server records for the HPA controller's writes: the prefix of its user agent before the
# first "/" (k8s.io/apiserver pkg/endpoints/handlers/create.go prefixFromUserAgent; client-go rest AddUserAgent:
# "kube-controller-manager/<version> ... /horizontal-pod-autoscaler").
KCM_MANAGER = "kube-controller-manager"
OPERATOR_MANAGER = "dynamo-operator-stand-in"  # the field manager of OperatorStandIn's writes


def _target_dgd():
    from stacks import catalog

    t = catalog.targets()[TARGET]
    return t, next(o for o in catalog.recipe_objects(t) if o["kind"] == "DynamoGraphDeployment")


def karpenter_plan(dgd: dict | None = None):
    """The EKS plan of the Lightning H100 agg target with its GPU pool on Karpenter (``capacity: karpenter``), and
    that pool (stacks/cluster/karpenter.py: NodePool, offerings, nodes needed)."""
    from stacks.cluster import EksConfig, build_cluster_plan

    t, recipe = _target_dgd()
    cfg = EksConfig(capacity="karpenter", max_nodes=MAX_NODES, consolidate_after=CONSOLIDATE_AFTER)
    plan = build_cluster_plan("sim", cfg, t, dgd=dgd or recipe)
    assert plan.karpenter is not None and len(plan.karpenter.pools) == 1
    return plan, plan.karpenter.pools[0]


def stack_programs(consolidate_after: str = CONSOLIDATE_AFTER, autoscaling: dict | None = None):
    """The example stack's program and its paused program (as `stacks cost` builds them), the pool's consolidateAfter
    set to ``consolidate_after``; ``autoscaling``: keys set in the stack's ``autoscaling.<component>`` entries."""
    from stacks.cli.cost import paused_raw
    from stacks.program import build_program
    from stacks.program.render import split_secrets, stack_aws_region, stack_raw_config

    plain, secret = split_secrets(stack_raw_config(STACK))
    plain = copy.deepcopy(plain)
    pools = [p for p in plain["cluster"]["gpuPools"] if p.get("capacity") == "karpenter"]
    assert len(pools) == 1, plain["cluster"]
    pools[0]["consolidateAfter"] = consolidate_after
    for comp, keys in (autoscaling or {}).items():
        plain["autoscaling"][comp].update(keys)
    region = stack_aws_region(STACK)
    return (
        build_program(plain, STACK, secret, aws_region=region),
        build_program(paused_raw(plain), STACK, secret, aws_region=region),
    )


@pytest.fixture(scope="module")
def karpenter(tmp_path_factory):
    """Own control plane + node lifecycle controller + Karpenter with the KWOK provider; the system nodes created."""
    from stacks.cli.karpenter_sim import KarpenterSim, karpenter_paths, region_prices
    from stacks.cli.simulate import Simulator, eks_groups, node_objects

    need_tool("kubectl")
    if not shutil.which("go"):
        missing("go not on PATH", "install Go; tools/karpenter.sh builds Karpenter from the Go module proxy")
    t0 = time.monotonic()
    built: dict = {}  # Karpenter is built (or found in the cache) while the control plane starts
    th = threading.Thread(target=lambda: built.update(paths=karpenter_paths()))
    th.start()
    state = tmp_path_factory.mktemp("kube-karpenter")
    # With the Dynamo CRDs (DGD, DGDSA): installed before kube-controller-manager starts, so the HPA controller's
    # discovery knows the adapter's scale subresource from its first sync.
    with control_plane(state, crds=True):
        th.join()
        if "paths" not in built:
            pytest.fail("tools/karpenter.sh build failed (see the thread's exception above)")
        binary, crds = built["paths"]
        program, paused = stack_programs()
        cplan = program.cluster_plan
        pool = cplan.karpenter.pools[0]
        k = KarpenterSim(
            state / "kubeconfig",
            state / "karpenter",
            zones=tuple(sorted({o["zone"] for o in pool.offerings()})),
            prices=region_prices(cplan.region),
        )
        # The operator's pods live in the DGD's namespace.
        sim = Simulator(state / "kubeconfig", namespace=program.entries[0].plan.dgd["metadata"]["namespace"])
        try:
            k.install_crds(crds)
            k.start_node_lifecycle()
            ready_s = k.start(binary)
            sim.ensure_namespace()
            system = [g for g in eks_groups(cplan) if g.name == "system"]
            sim.create_nodes(node_objects(system, RUN), RUN)
            print(
                f"\n[karpenter] control plane + Karpenter ready in {time.monotonic() - t0:.1f}s (Karpenter /readyz after {ready_s:.1f}s)"
            )
            yield {
                "k": k,
                "sim": sim,
                "program": program,
                "paused": paused,
                "pool": pool,
                "logs": state / "karpenter",
                "kubeconfig": state / "kubeconfig",
            }
        finally:
            sim.close()
            k.stop()


def set_pods(sim, dgd: dict) -> list[str]:
    """Make the run's pods those the operator runs for ``dgd``: create the missing ones, delete (at once) the ones it
    no longer has, as the operator does when a component's replicas change."""
    from stacks.cli.simulate import operator_pod_intents

    intents = operator_pod_intents(dgd)
    want = {i.pod["metadata"]["name"] for i in intents}
    have = set()
    for p in sim.pods(RUN):
        name = p["metadata"]["name"]
        if name in want:
            have.add(name)
        else:
            sim.request("DELETE", f"/api/v1/namespaces/{sim.namespace}/pods/{name}?gracePeriodSeconds=0", ok_missing=True)
    refused = sim.submit([i for i in intents if i.pod["metadata"]["name"] not in have], RUN)
    assert not refused, refused
    return sorted(want)


def _gpu_pods(pods: list[dict]) -> list[dict]:
    return [
        p
        for p in pods
        if any("nvidia.com/gpu" in (c.get("resources") or {}).get("requests", {}) for c in p["spec"]["containers"])
    ]


# ---------------------------------------------------------------------------------------------- stand-ins
DGD_PLURAL = "dynamographdeployments"
DGDSA_PLURAL = "dynamographdeploymentscalingadapters"
HPA_API = "autoscaling/v2"


def keda_hpa(so: dict) -> dict:
    """STAND-IN for the KEDA operator (which does not run here): the HorizontalPodAutoscaler it makes of a ScaledObject.

    kedacore/keda v2.21.0 (the pinned chart's version, stacks/registry/versions.yaml ``charts.keda``),
    controllers/keda/hpa.go: ``newHPAForScaledObject`` (minReplicas ``GetHPAMinReplicas``: minReplicaCount when above 0,
    else 1; maxReplicas ``GetHPAMaxReplicas``: maxReplicaCount; scaleTargetRef: the ScaledObject's target; labels name,
    version, part-of, managed-by keda-operator, then the ScaledObject's own labels over them; no behavior unless
    ``advanced`` sets one), ``getHPAName`` (``keda-hpa-<scaledobject>``), ``getScaledObjectMetricSpecs`` (each external
    metric selected by ``scaledobject.keda.sh/name: <scaledobject>``); pkg/scalers/prometheus_scaler.go
    ``GetMetricSpecForScaling`` (an External metric ``s<trigger index>-prometheus`` whose target is the threshold,
    pkg/scalers/scaler.go ``GenerateMetricNameWithIndex``, ``GetMetricTargetType``: AverageValue when no metricType).
    KEDA also sets the ScaledObject as the HPA's controller owner; the ScaledObject is not created here (no KEDA CRD on
    this cluster), so this HPA has no owner. Its external metric is served by KEDA's metrics server, which does not run
    here either: the HPA can read no metric, which is the point (see the test)."""
    from stacks.registry.charts import chart_pin

    md, spec = so["metadata"], so["spec"]
    assert so["kind"] == "ScaledObject" and not spec.get("advanced"), so
    name = f"keda-hpa-{md['name']}"
    metrics = []
    for i, t in enumerate(spec["triggers"]):
        assert t["type"] == "prometheus" and not t.get("metricType"), t  # the only trigger the stacks plan
        metrics.append(
            {
                "type": "External",
                "external": {
                    "metric": {
                        "name": f"s{i}-prometheus",
                        "selector": {"matchLabels": {"scaledobject.keda.sh/name": md["name"]}},
                    },
                    "target": {"type": "AverageValue", "averageValue": t["metadata"]["threshold"]},
                },
            }
        )
    labels = {
        "app.kubernetes.io/name": re.sub(r"[^A-Za-z0-9]+$", "", name[:63]),
        "app.kubernetes.io/version": chart_pin("keda")["version"],
        "app.kubernetes.io/part-of": md["name"],
        "app.kubernetes.io/managed-by": "keda-operator",
        **(md.get("labels") or {}),
    }
    ref = spec["scaleTargetRef"]
    return {
        "apiVersion": HPA_API,
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": md["namespace"], "labels": labels},
        "spec": {
            "minReplicas": spec["minReplicaCount"] if spec.get("minReplicaCount", 0) > 0 else 1,
            "maxReplicas": spec["maxReplicaCount"],
            "scaleTargetRef": {"apiVersion": ref["apiVersion"], "kind": ref["kind"], "name": ref["name"]},
            "metrics": metrics,
        },
    }


class OperatorStandIn:
    """STAND-IN for the Dynamo operator (which does not run here), as a loop on its own API connection:

    - ``create``: the DGD as planned (what ``pulumi up`` applies) and the DGDSA the operator creates for a component
      with ``scalingAdapter`` (ai-dynamo/dynamo deploy/operator/internal/controller/dgd_scaling_adapters_reconciler.go
      @ 0670f73ac484046772a5dceb2043a9a9d7eae681: name ``generateAdapterName`` = ``<dgd>-<lower(component)>``, labels
      DGD name and component, ``dgdRef`` to the DGD and component, the DGD as controller owner, ``spec.replicas`` seeded
      from the component's replicas only on create: "it owns subsequent changes");
    - each pass, the DGDSA controller (deploy/operator/internal/controller/
      dynamographdeploymentscalingadapter_controller.go @ 0fddc01b37244c4cfa5bcfd1c2e4f1a577ee833c ``Reconcile``): when
      the component still has ``scalingAdapter`` and its replicas (1 when unset) differ from the adapter's
      ``spec.replicas``, the DGD's component gets the adapter's replicas ("DGDSA is the source of truth") and the
      adapter's ``status.lastScaleTime`` is set; then ``status.replicas`` = ``spec.replicas`` and ``status.selector`` =
      ``buildPodSelector`` (the DGD-name and component pod labels, as ``labels.SelectorFromSet(...).String()``, keys
      sorted) - the scale subresource's statusReplicasPath and labelSelectorPath;
    - each pass, the DGD's pods: the operator's pods of the planned DGD at the component replicas stored in the DGD
      (``set_pods``: new replicas created, removed ones deleted).

    Errors end the loop and are kept in ``errors`` (``check`` raises them)."""

    def __init__(self, kubeconfig, planned_dgd: dict, component: str, interval: float = 0.3):
        from stacks.cli.simulate import Simulator
        from stacks.serving.autoscaling import DGDSA_API, adapter_name

        self.planned, self.component, self.interval = copy.deepcopy(planned_dgd), component, interval
        md = planned_dgd["metadata"]
        self.ns, self.dgd_name = md["namespace"], md["name"]
        self.api = Simulator(kubeconfig, namespace=self.ns)
        base = f"/apis/{DGDSA_API}/namespaces/{self.ns}"
        self.dgd_path = f"/apis/{planned_dgd['apiVersion']}/namespaces/{self.ns}/{DGD_PLURAL}"
        self.adapter = adapter_name(self.dgd_name, component)
        self.adapter_path = f"{base}/{DGDSA_PLURAL}/{self.adapter}"
        self.scaled: list[tuple[int, int]] = []  # (from, to) of every DGD update
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def selector(self) -> str:
        from stacks.serving.operator import LABEL_COMPONENT, LABEL_DGD_NAME

        return ",".join(f"{k}={v}" for k, v in sorted({LABEL_DGD_NAME: self.dgd_name, LABEL_COMPONENT: self.component}.items()))

    def create(self) -> dict:
        from stacks.serving.autoscaling import DGDSA_API, DGDSA_KIND
        from stacks.serving.operator import LABEL_COMPONENT, LABEL_DGD_NAME

        fm = f"?fieldManager={OPERATOR_MANAGER}"
        dgd = self.api.request("POST", f"{self.dgd_path}{fm}", self.planned)
        comp = next(c for c in dgd["spec"]["components"] if c["name"] == self.component)
        assert comp.get("scalingAdapter") == {}, comp  # the planned opt-in survives the CRD's schema
        return self.api.request(
            "POST",
            f"/apis/{DGDSA_API}/namespaces/{self.ns}/{DGDSA_PLURAL}{fm}",
            {
                "apiVersion": DGDSA_API,
                "kind": DGDSA_KIND,
                "metadata": {
                    "name": self.adapter,
                    "namespace": self.ns,
                    "labels": {LABEL_DGD_NAME: self.dgd_name, LABEL_COMPONENT: self.component},
                    "ownerReferences": [
                        {
                            "apiVersion": dgd["apiVersion"],
                            "kind": dgd["kind"],
                            "name": self.dgd_name,
                            "uid": dgd["metadata"]["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "dgdRef": {"name": self.dgd_name, "componentName": self.component},
                    "replicas": int(comp.get("replicas", 1)),
                },
            },
        )

    def reconcile(self, sim) -> None:
        from stacks.cli.simulate import KubeError

        fm = f"?fieldManager={OPERATOR_MANAGER}"
        adapter = self.api.request("GET", self.adapter_path)
        dgd = self.api.request("GET", f"{self.dgd_path}/{self.dgd_name}")
        comp = next(c for c in dgd["spec"]["components"] if c["name"] == self.component)
        want = int(adapter["spec"]["replicas"])
        status = dict(adapter.get("status") or {})
        try:
            if comp.get("scalingAdapter") is not None and int(comp.get("replicas", 1)) != want:
                before = int(comp.get("replicas", 1))
                comp["replicas"] = want
                dgd = self.api.request("PUT", f"{self.dgd_path}/{self.dgd_name}{fm}", dgd)
                self.scaled.append((before, want))
                status["lastScaleTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status.update(replicas=want, selector=self.selector())
            if status != (adapter.get("status") or {}):
                self.api.request("PUT", f"{self.adapter_path}/status{fm}", {**adapter, "status": status})
        except KubeError as e:
            if e.status != 409:  # a write raced the HPA's (or ours): the next pass reads again
                raise
            return
        replicas = {c["name"]: c.get("replicas", 1) for c in dgd["spec"]["components"]}
        desired = copy.deepcopy(self.planned)
        for c in desired["spec"]["components"]:
            c["replicas"] = replicas[c["name"]]
        set_pods(sim, desired)

    def start(self) -> None:
        def loop():
            try:
                while not self._stop.is_set():
                    self.reconcile(self.api)
                    self._stop.wait(self.interval)
            except BaseException as e:  # noqa: BLE001 - kept and raised by check() in the test's thread
                self.errors.append(e)

        self._thread = threading.Thread(target=loop, name="operator-stand-in", daemon=True)
        self._thread.start()

    def check(self) -> None:
        if self.errors:
            raise AssertionError(f"operator stand-in failed: {self.errors[0]!r}") from self.errors[0]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            assert not self._thread.is_alive(), "operator stand-in did not stop"
        self.api.close()


def wait_seen(what: str, timeout: float, probe, check=lambda: None):
    """Until ``probe()`` returns ``(True, seen)``; at the timeout raise with the last ``seen``. ``check`` runs first on
    every poll (the operator stand-in's errors end the wait at once)."""
    from stacks.cli.karpenter_sim import wait_until

    last: dict = {}

    def poll():
        check()
        done, last["seen"] = probe()
        return last["seen"] if done else None

    try:
        return wait_until(what, timeout, poll, interval=0.5)
    except TimeoutError:
        raise TimeoutError(f"{what}: not after {timeout:.0f}s; last seen: {last.get('seen')!r}"[:4000]) from None


def replicas_owners(obj: dict) -> set[tuple[str, str, str]]:
    """(manager, operation, subresource) of every managedFields entry that owns ``spec.replicas``."""
    return {
        (m["manager"], m["operation"], m.get("subresource", ""))
        for m in obj["metadata"].get("managedFields") or []
        if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    }


KEDA_MANAGER = "keda-operator"  # the field manager of keda_scale's writes (KEDA's own user agent prefix)


def keda_scale(sim, adapter_path: str, replicas: int) -> None:
    """STAND-IN for KEDA's writes outside its HPA (the KEDA operator does not run here): the target's scale set to
    ``replicas`` through its /scale subresource, as ``updateScaleOnScaleTarget`` does (kedacore/keda
    pkg/scaling/executor/scale_scaledobjects.go: ``Scales().Update``). KEDA does so when a ScaledObject gets
    ``autoscaling.keda.sh/paused-replicas`` ("will scale your current workload to specified amount of replicas and
    pause autoscaling", KEDA docs, Scaling Deployments: pausing autoscaling), and in ``RequestScale`` when its
    triggers are inactive and the target is below ``minReplicaCount`` (as after a resume from 0), which the HPA
    itself leaves alone (at 0 replicas it reports ScalingDisabled)."""
    scale = sim.request("GET", f"{adapter_path}/scale")
    scale["spec"]["replicas"] = replicas
    sim.request("PUT", f"{adapter_path}/scale?fieldManager={KEDA_MANAGER}", scale)


def apply_replicas(sim, op: "OperatorStandIn", dgd: dict, skip: str) -> None:
    """What `pulumi up` changes in the live DGD when the stack is paused or resumed: the replicas of every component
    but the autoscaled one (``skip``, whose replicas the adapter owns), retried when a write of the operator
    stand-in races it."""
    from stacks.cli.simulate import KubeError

    want = {c["name"]: int(c.get("replicas", 1)) for c in dgd["spec"]["components"] if c["name"] != skip}
    for _ in range(20):
        live = sim.request("GET", f"{op.dgd_path}/{op.dgd_name}")
        for c in live["spec"]["components"]:
            if c["name"] in want:
                c["replicas"] = want[c["name"]]
        try:
            sim.request("PUT", f"{op.dgd_path}/{op.dgd_name}?fieldManager=pulumi-kubernetes", live)
            return
        except KubeError as e:
            if e.status != 409:
                raise
            time.sleep(0.2)
    raise AssertionError(f"the DGD's replicas could not be applied: {want}")


@pytest.mark.engine
def test_the_hpa_scaling_the_dgd_adapter_adds_and_removes_karpenter_nodes_and_pause_removes_them_all(karpenter):
    from stacks.cli.simulate import operator_pod_intents
    from stacks.serving.autoscaling import adapter_name
    from stacks.cli.cost import load_prices, pool_costs
    from stacks.cli.timeline import duration_seconds, pause_seconds
    from stacks.registry.gpus import INSTANCES
    from stacks.cli.kwok_instances import kwok_node_pool

    k, sim, program, pool = karpenter["k"], karpenter["sim"], karpenter["program"], karpenter["pool"]
    entry = program.entries[0]
    ((comp, spec),) = entry.plan.autoscaling.items()  # the decode workers, 1-8
    (so,) = entry.plan.autoscalers
    dgd_name, ns = entry.plan.dgd["metadata"]["name"], entry.plan.dgd["metadata"]["namespace"]
    assert so["spec"]["scaleTargetRef"]["name"] == adapter_name(dgd_name, comp)
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (spec.min_replicas, spec.max_replicas)
    # The node counts `python -m stacks cost` prices: at minReplicas, at maxReplicas, paused.
    cost = next(c for c in pool_costs(program, karpenter["paused"], load_prices()) if c.pool == pool.name)
    assert (cost.nodes_min, cost.nodes_paused) == (pool.nodes_needed, 0) and cost.nodes_max > cost.nodes_min
    node_pool = kwok_node_pool(pool.nodepool, NODE_CLASS)
    assert node_pool["spec"]["disruption"]["consolidateAfter"] == CONSOLIDATE_AFTER
    name = node_pool["metadata"]["name"]
    pause_bound = pause_seconds(duration_seconds(CONSOLIDATE_AFTER)) + SLACK_S
    timeline: list[tuple[float, str, int]] = []
    t0 = time.monotonic()

    def mark(what: str, nodes: list[dict]):
        timeline.append((round(time.monotonic() - t0, 1), what, len(nodes)))
        print(f"[karpenter] t={timeline[-1][0]:5.1f}s {what}: {len(nodes)} node(s) in NodePool {name}")

    def pods_of(names):
        return lambda: [p for p in sim.pods(RUN) if p["metadata"]["name"] in set(names)]

    def bound_on_karpenter(names, nodes: list[dict]):
        pods = pods_of(names)()
        assert len(pods) == len(names) and all(p["spec"].get("nodeName") for p in pods)
        gpu = _gpu_pods(pods)
        assert gpu and {p["spec"]["nodeName"] for p in gpu} <= {n["metadata"]["name"] for n in nodes}
        assert all(n["metadata"]["labels"]["node.kubernetes.io/instance-type"] == pool.instance_type for n in nodes)
        assert all(n["metadata"]["labels"]["karpenter.sh/capacity-type"] == pool.capacity_type for n in nodes)

    k.apply_node_class(NODE_CLASS)
    k.apply_node_pool(node_pool)
    mark("NodePool applied, no GPU node", k.nodes(name))
    assert k.nodes(name) == [] and k.node_claims(name) == []

    # 1. The stack applied: its DGD as planned (decode workers at minReplicas), the operator's adapter for them, and
    #    the HPA KEDA makes of the planned ScaledObject.
    op = OperatorStandIn(karpenter["kubeconfig"], entry.plan.dgd, comp)
    hpa_path = f"/apis/{HPA_API}/namespaces/{ns}/horizontalpodautoscalers"
    adapter = op.create()
    assert adapter["spec"]["replicas"] == spec.min_replicas
    hpa = sim.request("POST", hpa_path, keda_hpa(so))
    hpa_name = hpa["metadata"]["name"]
    op.start()
    try:

        def state():
            a = sim.request("GET", op.adapter_path)
            h = sim.request("GET", f"{hpa_path}/{hpa_name}")
            d = sim.request("GET", f"{op.dgd_path}/{dgd_name}")
            return {
                "adapter": a["spec"]["replicas"],
                "adapter_status": a.get("status"),
                "owners": replicas_owners(a),
                "dgd": next(c.get("replicas", 1) for c in d["spec"]["components"] if c["name"] == comp),
                "hpa": {kk: (h.get("status") or {}).get(kk) for kk in ("currentReplicas", "desiredReplicas")},
                "conditions": {
                    c["type"]: (c["status"], c.get("reason")) for c in (h.get("status") or {}).get("conditions") or []
                },
                "hpa_spec": (h["spec"]["minReplicas"], h["spec"]["maxReplicas"]),
                "stand_in_scaled": list(op.scaled),
            }

        def dgd_replicas() -> int:
            d = sim.request("GET", f"{op.dgd_path}/{dgd_name}")
            return next(int(c.get("replicas", 1)) for c in d["spec"]["components"] if c["name"] == comp)

        def rescales():
            sel = quote(f"involvedObject.kind=HorizontalPodAutoscaler,involvedObject.name={hpa_name}")
            evs = sim.request("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector={sel}").get("items", [])
            return [(e["source"].get("component"), e["message"]) for e in evs if e["reason"] == "SuccessfulRescale"]

        def planned_names(replicas: int):
            d = copy.deepcopy(entry.plan.dgd)
            next(c for c in d["spec"]["components"] if c["name"] == comp)["replicas"] = replicas
            return sorted(i.pod["metadata"]["name"] for i in operator_pod_intents(d))

        def update_hpa(scaled_object: dict) -> None:
            """What KEDA does when the ScaledObject changes (controllers/keda/hpa.go updateHPAIfNeeded)."""
            want = keda_hpa(scaled_object)
            cur = sim.request("GET", f"{hpa_path}/{hpa_name}")
            want["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            sim.request("PUT", f"{hpa_path}/{hpa_name}", want)

        def hpa_scaled_to(n: int) -> dict:
            """Until the adapter (spec and the status the operator writes after the DGD), the DGD and the HPA's
            desiredReplicas are at ``n``; what was seen then."""
            return wait_seen(
                f"the HPA writes {n} to the adapter's scale and the operator to the DGD",
                HPA_BOUND_S,
                lambda: (
                    lambda s: (
                        s["adapter"] == s["dgd"] == s["hpa"]["desiredReplicas"] == n
                        and (s["adapter_status"] or {}).get("replicas") == n,
                        s,
                    )
                )(state()),
                op.check,
            )

        names = planned_names(spec.min_replicas)
        nodes = k.wait_nodes(name, cost.nodes_min, LAUNCH_BOUND_S, pods=lambda: (op.check(), pods_of(names)())[1])
        mark("stack applied (DGD, adapter, HPA) at minReplicas, every pod bound", nodes)
        bound_on_karpenter(names, nodes)
        n0 = nodes[0]
        assert n0["status"]["allocatable"]["nvidia.com/gpu"] == str(pool.gpus_per_node)
        assert n0["metadata"]["labels"]["nvidia.com/gpu.product"] == INSTANCES[pool.instance_type].product  # the pool's labels
        # The offering's price (stacks/registry/prices.yaml via the instance-types file) is on the node (the KWOK
        # provider's eks-node-viewer/instance-price label).
        assert float(n0["metadata"]["labels"]["eks-node-viewer/instance-price"]) == pytest.approx(cost.price["usd_per_hour"])
        # The HPA has read the adapter's scale (AbleToScale) and, with no metric to read, changed nothing: replicas
        # inside [min, max] are left to the metrics (horizontal.go reconcileAutoscaler), and there are none here.
        seen = wait_seen(
            "the HPA reads the adapter's scale",
            HPA_BOUND_S,
            lambda: (
                lambda s: (s["conditions"].get("AbleToScale", ("",))[0] == "True" and "ScalingActive" in s["conditions"], s)
            )(state()),
            op.check,
        )
        assert seen["conditions"]["AbleToScale"] == ("True", "SucceededGetScale"), seen
        assert seen["conditions"]["ScalingActive"][0] == "False", seen  # no external metrics API: no metric
        assert seen["hpa"]["currentReplicas"] == seen["adapter"] == seen["dgd"] == spec.min_replicas, seen
        assert seen["adapter_status"] == {"replicas": spec.min_replicas, "selector": op.selector()}, seen
        assert seen["owners"] == {(OPERATOR_MANAGER, "Update", "")} and rescales() == [] and op.scaled == [], seen

        # 2. The stack's autoscaling.minReplicas raised to its maxReplicas: the ScaledObject's minReplicaCount, and the
        #    HPA KEDA keeps in step with it (updateHPAIfNeeded). Only the HPA writes the adapter.
        up = stack_programs(autoscaling={comp: {"minReplicas": spec.max_replicas}})[0].entries[0].plan.autoscalers[0]
        assert up["spec"]["minReplicaCount"] == spec.max_replicas > spec.min_replicas
        update_hpa(up)
        t_hpa = time.monotonic()
        seen = hpa_scaled_to(spec.max_replicas)
        print(f"[karpenter] HPA rescaled the adapter {time.monotonic() - t_hpa:.1f}s after its minReplicas changed: {seen}")
        assert seen["owners"] == {(KCM_MANAGER, "Update", "scale")}, seen  # the replicas were written through /scale
        assert (
            seen["hpa_spec"] == (spec.max_replicas, spec.max_replicas) and seen["adapter_status"]["replicas"] == spec.max_replicas
        )
        assert (spec.min_replicas, spec.max_replicas) in op.scaled
        assert (
            "horizontal-pod-autoscaler",
            f"New size: {spec.max_replicas}; reason: Current number of replicas below Spec.MinReplicas",
        ) in rescales()
        names = planned_names(spec.max_replicas)
        nodes = k.wait_nodes(name, cost.nodes_max, LAUNCH_BOUND_S, pods=lambda: (op.check(), pods_of(names)())[1])
        mark("HPA scaled the adapter to maxReplicas, every pod bound", nodes)
        bound_on_karpenter(names, nodes)

        # 3. maxReplicas lowered to the stack's minReplicas: the HPA lowers the adapter, the emptied node goes.
        down = stack_programs(autoscaling={comp: {"minReplicas": spec.min_replicas, "maxReplicas": spec.min_replicas}})[0]
        down = down.entries[0].plan.autoscalers[0]
        assert down["spec"]["maxReplicaCount"] == spec.min_replicas
        update_hpa(down)
        seen = hpa_scaled_to(spec.min_replicas)
        assert seen["owners"] == {(KCM_MANAGER, "Update", "scale")} and (spec.max_replicas, spec.min_replicas) in op.scaled, seen
        assert (
            "horizontal-pod-autoscaler",
            f"New size: {spec.min_replicas}; reason: Current number of replicas above Spec.MaxReplicas",
        ) in rescales()
        names = planned_names(spec.min_replicas)
        t_in = time.monotonic()
        nodes = k.wait_nodes(name, cost.nodes_min, pause_bound, pods=lambda: (op.check(), pods_of(names)())[1])
        mark(f"HPA scaled the adapter back to minReplicas, emptied node consolidated ({time.monotonic() - t_in:.1f}s)", nodes)
        bound_on_karpenter(names, nodes)
        assert len(sim.pods(RUN)) == len(names)
        # Every change of the DGD's replicas came from the adapter, and every change of the adapter from the HPA.
        assert op.scaled == [(spec.min_replicas, spec.max_replicas), (spec.max_replicas, spec.min_replicas)]

        # 4. Paused: `up` applies the paused DGD (its components without an adapter at 0; the adapter's component
        #    replicas are the adapter's) and the paused ScaledObject; KEDA, seeing its paused-replicas annotation,
        #    deletes its HPA and writes that count to the adapter's /scale (keda_scale); the operator carries the
        #    adapter's 0 to the DGD and deletes the pods, and Karpenter consolidates the emptied nodes.
        paused_plan = karpenter["paused"].entries[0].plan
        (paused_so,) = paused_plan.autoscalers
        paused_replicas = int(paused_so["metadata"]["annotations"]["autoscaling.keda.sh/paused-replicas"])
        assert paused_replicas == 0
        apply_replicas(sim, op, paused_plan.dgd, skip=comp)
        sim.request("DELETE", f"{hpa_path}/{hpa_name}")
        keda_scale(sim, op.adapter_path, paused_replicas)
        wait_seen(
            "the operator carries the paused adapter to the DGD and removes the GPU pods",
            HPA_BOUND_S,
            lambda: (lambda d, pods: (d == 0 and not _gpu_pods(pods), (d, [p["metadata"]["name"] for p in pods])))(
                dgd_replicas(), sim.pods(RUN)
            ),
            op.check,
        )
        t_pause = time.monotonic()
        nodes = k.wait_nodes(name, cost.nodes_paused, pause_bound, pods=lambda: (op.check(), sim.pods(RUN))[1])
        took = time.monotonic() - t_pause
        mark(f"paused, nodes consolidated ({took:.1f}s after the last GPU pod; bound {pause_bound:.0f}s)", nodes)
        assert k.node_claims(name) == []
        frontend = sim.pods(RUN)
        assert frontend and all(p["spec"].get("nodeName") for p in frontend)  # the frontend stays
        assert sim.request("GET", op.adapter_path)["spec"]["replicas"] == 0

        # 5. Resumed: `up` applies the planned DGD's other components and the ScaledObject without the annotation;
        #    KEDA's scale loop, its target below minReplicaCount, writes minReplicaCount to the adapter's /scale, and
        #    the nodes of the minimum come back.
        apply_replicas(sim, op, entry.plan.dgd, skip=comp)
        keda_scale(sim, op.adapter_path, so["spec"]["minReplicaCount"])
        names = planned_names(spec.min_replicas)
        nodes = k.wait_nodes(name, cost.nodes_min, LAUNCH_BOUND_S, pods=lambda: (op.check(), pods_of(names)())[1])
        mark("resumed at minReplicas", nodes)
        bound_on_karpenter(names, nodes)
    finally:
        op.stop()
    op.check()
    # The pause and the resume reached the DGD through the adapter as well.
    assert op.scaled[2:] == [(spec.min_replicas, 0), (0, spec.min_replicas)], op.scaled

    counts = [c for _, _, c in timeline]
    print("[karpenter] node counts:", " -> ".join(map(str, counts)), "| timeline:", timeline)
    assert counts == [0, cost.nodes_min, cost.nodes_max, cost.nodes_min, 0, cost.nodes_min]
    # The launches created exactly these NodeClaims: none failed or left over.
    assert len(k.node_claims(name)) == cost.nodes_min


# ---------------------------------------------------------------------------------------------- without a cluster
def test_instance_types_file_carries_the_gpu_catalog_in_the_kwok_provider_format():
    from stacks.registry.gpus import HOSTS, INSTANCES
    from stacks.cli.kwok_instances import kwok_instance_types

    types = {t["name"]: t for t in kwok_instance_types(["us-east-1a", "us-east-1b"], prices={"p5.48xlarge": 55.04})}
    assert set(types) == set(INSTANCES)
    p5 = types["p5.48xlarge"]
    assert p5["resources"] == {
        "cpu": "192",
        "memory": "2048Gi",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "ephemeral-storage": f"{8 * 3840 * 10**9 // 2**30}Gi",
        "vpc.amazonaws.com/efa": "32",
    }
    assert p5["architecture"] == "amd64" and p5["operatingSystems"] == ["linux"]
    assert [(o["Price"], [r["values"] for r in o["Requirements"]]) for o in p5["offerings"]] == [
        (55.04, [["on-demand"], ["us-east-1a"]]),
        (55.04, [["on-demand"], ["us-east-1b"]]),
    ]
    gb200 = types["p6e-gb200.36xlarge"]
    assert gb200["architecture"] == "arm64" and gb200["resources"]["vpc.amazonaws.com/efa"] == "8"
    assert "ephemeral-storage" not in gb200["resources"]  # its instance store is not counted in stacks/registry/gpus.py HOSTS
    # Every figure comes from stacks/registry/gpus.py: a change there changes the file.
    for name, t in types.items():
        assert t["resources"]["nvidia.com/gpu"] == str(INSTANCES[name].gpus_per_node)
        assert t["resources"]["memory"] == f"{HOSTS[name].memory_gib}Gi"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"zones": []}, "zones"),
        ({"zones": ["us-east-1a"], "capacity_types": ["preemptible"]}, "capacity_types"),
        ({"zones": ["us-east-1a"], "instance_types": ["m7i.2xlarge"]}, "not in the GPU catalog"),
    ],
)
def test_instance_types_file_refuses_bad_input(kwargs, message):
    from stacks.cli.kwok_instances import kwok_instance_types

    with pytest.raises(ValueError, match=message):
        kwok_instance_types(**kwargs)


def test_kwok_node_pool_swaps_only_the_node_class():
    from stacks.cli.kwok_instances import kwok_node_pool

    planned = karpenter_plan()[1].nodepool
    pool = kwok_node_pool(planned, "gpu", consolidate_after="2s")
    assert pool["spec"]["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.kwok.sh",
        "kind": "KWOKNodeClass",
        "name": "gpu",
    }
    assert pool["spec"]["disruption"]["consolidateAfter"] == "2s"
    for part in ("limits", "template"):
        if part == "template":
            a = {k: v for k, v in pool["spec"]["template"]["spec"].items() if k != "nodeClassRef"}
            b = {k: v for k, v in planned["spec"]["template"]["spec"].items() if k != "nodeClassRef"}
            assert a == b
        else:
            assert pool["spec"][part] == planned["spec"][part]
    with pytest.raises(ValueError, match="NodePool"):
        kwok_node_pool({"kind": "EC2NodeClass"}, "gpu")


def test_karpenter_pin_agrees_with_its_go_module():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    pins = yaml_text.load((root / "stacks" / "registry" / "versions.yaml").read_text())
    gomod = (root / "tools" / "karpenter" / "go.mod").read_text()
    assert re.search(
        rf"^\s*(require\s+)?sigs\.k8s\.io/karpenter {re.escape(pins['toolchain']['karpenter'])}( //.*)?$", gomod, re.M
    )
    # The EKS chart's core is the one the simulated cluster runs.
    assert pins["charts"]["karpenter"]["core"] == pins["toolchain"]["karpenter"]


@pytest.mark.engine
def test_the_efa_pools_ec2nodeclass_is_admitted_by_the_pinned_crd_and_its_mistakes_are_refused(karpenter):
    """The EC2NodeClass CRD of karpenter-provider-aws at the chart's version (Go module proxy) on this control plane:
    its CEL rules (a primary ``interface`` at card 0 / device 0, at most one ``efa-only`` per card) run on the real API
    server. The disaggregated H100 stack's EFA pool is admitted; the two layouts the rules exist for are refused."""
    import json
    import subprocess

    from harness import go_module_dir
    from stacks.registry.versions import versions
    from test_karpenter import _efa_pool

    crd = (
        go_module_dir("github.com/aws/karpenter-provider-aws", f"v{versions()['charts']['karpenter']['version']}")
        / "pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml"
    )
    kc = ["kubectl", "--kubeconfig", str(karpenter["kubeconfig"])]
    subprocess.run([*kc, "apply", "--server-side", "-f", str(crd)], check=True, capture_output=True, text=True)
    subprocess.run(
        [*kc, "wait", "--for=condition=Established", "--timeout=60s", "crd/ec2nodeclasses.karpenter.k8s.aws"],
        check=True,
        capture_output=True,
        text=True,
    )
    _, pool = _efa_pool()
    assert pool.ec2nodeclass["spec"]["networkInterfaces"]

    def create(obj: dict) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*kc, "create", "--dry-run=server", "-o", "name", "-f", "-"], input=json.dumps(obj), capture_output=True, text=True
        )

    ok = create(pool.ec2nodeclass)
    assert ok.returncode == 0, ok.stderr
    efa_primary = copy.deepcopy(pool.ec2nodeclass)
    efa_primary["spec"]["networkInterfaces"][0]["interfaceType"] = "efa-only"
    r = create(efa_primary)
    assert r.returncode != 0 and "must include a primary interface with interfaceType='interface'" in r.stderr, r.stderr
    two_on_one_card = copy.deepcopy(pool.ec2nodeclass)
    two_on_one_card["spec"]["networkInterfaces"].append({"networkCardIndex": 0, "deviceIndex": 2, "interfaceType": "efa-only"})
    r = create(two_on_one_card)
    assert r.returncode != 0 and "at most one efa device per network card" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------- capacity placeholders
PLACEHOLDER_RUN = "placeholder"
# The KWOK node class's registration delay: the in-flight window in which the DGD's workers turn Pending while the
# placeholders' nodes still boot (on EKS minutes: stacks/registry/durations.yaml gpu-node-launch).
PLACEHOLDER_BOOT = "15s"
PLACEHOLDER_DEADLINE_S = 30  # the Job's activeDeadlineSeconds for the test (the plan's is 45 min)


@pytest.mark.engine
def test_the_capacity_placeholder_has_karpenter_launch_the_nodes_the_workers_then_use_and_no_more(karpenter):
    """The pool's placeholder Job, as planned, alone makes Karpenter launch the nodes the stack's workers fill (two, the
    decode workers at their maximum); the workers, created while those nodes are still in flight (the usual order on
    EKS), bind to the same nodes beside the placeholders, and no further NodeClaim appears; at its deadline the Job
    ends (DeadlineExceeded) without a new pod, and the nodes stay for the workers.

    Beside it, in its own NodePool, the textbook overprovisioning placeholder (one node's GPUs per pod, no
    anti-affinity) in the same order: Karpenter's simulation packs the Pending workers onto the in-flight NodeClaims
    and launches new ones for the placeholders - the extra GPU nodes stacks/cluster/karpenter.py avoids."""
    from stacks.cli.kwok_instances import kwok_node_pool
    from stacks.cli.simulate import PodIntent, operator_pod_intents
    from stacks.cluster.karpenter import NODEPOOL_LABEL, PLACEHOLDER_LABEL

    k, sim = karpenter["k"], karpenter["sim"]
    entry = karpenter["program"].entries[0]
    ((comp, spec),) = entry.plan.autoscaling.items()
    program = stack_programs(autoscaling={comp: {"minReplicas": spec.max_replicas}})[0]
    cplan = program.cluster_plan
    pool = cplan.karpenter.pools[0]
    planned = pool.placeholder
    nodes = planned["spec"]["parallelism"]
    assert nodes == planned["spec"]["completions"] == pool.nodes_needed == 2, planned["spec"]
    workers = [i for i in operator_pod_intents(program.entries[0].plan.dgd) if _gpu_pods([i.pod])]
    k.apply(
        f"/apis/{'karpenter.kwok.sh'}/v1alpha1/kwoknodeclasses",
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "booting"},
            "spec": {"nodeRegistrationDelay": PLACEHOLDER_BOOT},
        },
    )
    sim.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", cplan.karpenter.priority_class)
    jobs_path = f"/apis/batch/v1/namespaces/{planned['metadata']['namespace']}/jobs"

    def variant(name: str, textbook: bool) -> dict:
        """A NodePool ``name`` as planned (on the booting node class) and its placeholder Job: the plan's, or the
        textbook one."""
        np = kwok_node_pool(pool.nodepool, "booting")
        np["metadata"]["name"] = name
        k.apply_node_pool(np)
        job = copy.deepcopy(planned)
        job["metadata"]["name"] = f"capacity-placeholder-{name}"
        job["spec"]["activeDeadlineSeconds"] = PLACEHOLDER_DEADLINE_S
        tmpl = job["spec"]["template"]
        for labels in (job["metadata"]["labels"], tmpl["metadata"]["labels"]):
            labels[PLACEHOLDER_LABEL] = name
        pod = tmpl["spec"]
        pod["nodeSelector"] = {NODEPOOL_LABEL: name}
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"] = {
            "matchLabels": {PLACEHOLDER_LABEL: name}
        }
        if textbook:
            del pod["affinity"]
            gpus = {"nvidia.com/gpu": str(pool.gpus_per_node)}
            pod["containers"][0]["resources"] = {"requests": gpus, "limits": gpus}
        return sim.request("POST", jobs_path, job)

    def placeholder_pods(name: str) -> list[dict]:
        sel = quote(f"{PLACEHOLDER_LABEL}={name}")
        return sim.request("GET", f"/api/v1/namespaces/{planned['metadata']['namespace']}/pods?labelSelector={sel}")["items"]

    ours, textbook = "placeholder-planned", "placeholder-textbook"
    t0 = time.monotonic()
    for name in (ours, textbook):
        variant(name, textbook=name == textbook)
    claims = {
        n: wait_seen(
            f"{nodes} NodeClaims of {n} from its placeholders alone",
            LAUNCH_BOUND_S,
            lambda n=n: (lambda c: (len(c) == nodes, [x["metadata"]["name"] for x in c]))(k.node_claims(n)),
        )
        for n in (ours, textbook)
    }
    t_claims = time.monotonic() - t0
    assert all(not (x.get("status") or {}).get("nodeName") for n in (ours, textbook) for x in k.node_claims(n)), (
        "registered before the workers came"
    )
    assert not any(p["spec"].get("nodeName") for n in (ours, textbook) for p in placeholder_pods(n))
    # The DGD's GPU workers, Pending while the nodes boot: each set selects its NodePool.
    submitted: dict[str, list[str]] = {}
    for name in (ours, textbook):
        intents = []
        for j, i in enumerate(workers):
            pod = copy.deepcopy(i.pod)
            pod["metadata"]["name"] = f"{name}-{i.component.lower()}-{j}"
            pod["spec"].setdefault("nodeSelector", {})[NODEPOOL_LABEL] = name
            intents.append(PodIntent(i.component, i.replica, pod))
        assert not sim.submit(intents, PLACEHOLDER_RUN)
        submitted[name] = [i.pod["metadata"]["name"] for i in intents]
    most = {ours: 0, textbook: 0}
    seen_pods: dict[str, set[str]] = {ours: set(), textbook: set()}

    def settled():
        for n in (ours, textbook):
            most[n] = max(most[n], len(k.node_claims(n)))
            seen_pods[n] |= {p["metadata"]["uid"] for p in placeholder_pods(n)}
        pods = {p["metadata"]["name"]: p for p in sim.pods(PLACEHOLDER_RUN)}
        ours_bound = [pods[w]["spec"].get("nodeName") for w in submitted[ours] if w in pods]
        tb_bound = [pods[w]["spec"].get("nodeName") for w in submitted[textbook] if w in pods]
        done = all(ours_bound) and all(tb_bound) and len(ours_bound) == len(tb_bound) == len(workers)
        return done, {
            "most": dict(most),
            "ours_bound": len([b for b in ours_bound if b]),
            "textbook_bound": len([b for b in tb_bound if b]),
        }

    wait_seen("every worker bound", LAUNCH_BOUND_S + SLACK_S, settled)
    t_bound = time.monotonic() - t0
    pods = {p["metadata"]["name"]: p for p in sim.pods(PLACEHOLDER_RUN)}
    claim_nodes = {(x.get("status") or {}).get("nodeName") for x in k.node_claims(ours) if x["metadata"]["name"] in claims[ours]}
    assert {pods[w]["spec"]["nodeName"] for w in submitted[ours]} == claim_nodes, (claim_nodes, claims)
    assert {
        p["spec"].get("nodeName") for p in placeholder_pods(ours)
    } == claim_nodes  # one placeholder per node, beside the workers
    assert [x["metadata"]["name"] for x in k.node_claims(ours)] == claims[ours]  # no NodeClaim but the placeholders'
    print(
        f"\n[placeholder] {nodes} NodeClaims {t_claims:.1f}s after the Job; every worker bound at {t_bound:.1f}s; "
        f"NodeClaims at most: planned {most[ours]}, textbook {most[textbook]}"
    )

    # The Job ends and no pod replaces its pods. On EKS the pause containers run until the deadline (the Job fails with
    # DeadlineExceeded and its pods are terminated); kwok's default stages complete every running pod a Job owns at
    # once (sigs.k8s.io/kwok@v0.8.0 kustomize/stage/pod/fast/pod-complete.yaml), so here it ends Complete, after each
    # placeholder ran on its node. Either way the workers keep the nodes.
    def job_ended(name: str):
        job = sim.request("GET", f"{jobs_path}/capacity-placeholder-{name}")
        conds = {
            c["type"]: c.get("reason") for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
        }
        live = [p for p in placeholder_pods(name) if p["status"].get("phase") in ("Pending", "Running")]
        seen_pods[name] |= {p["metadata"]["uid"] for p in placeholder_pods(name)}
        most[name] = max(most[name], len(k.node_claims(name)))
        return bool({"Complete", "Failed"} & set(conds)) and not live, {"conditions": conds, "live": len(live)}

    wait_seen("the planned placeholder Job ends", PLACEHOLDER_DEADLINE_S + SLACK_S, lambda: job_ended(ours))
    t_end = time.monotonic() - t0
    assert len(seen_pods[ours]) == nodes  # never a replacement pod (backoffLimit 0, restartPolicy Never)
    assert all(p["spec"].get("nodeName") in claim_nodes for p in placeholder_pods(ours))
    assert [x["metadata"]["name"] for x in k.node_claims(ours)] == claims[ours] and most[ours] == nodes
    pods = {p["metadata"]["name"]: p for p in sim.pods(PLACEHOLDER_RUN)}
    assert {pods[w]["spec"]["nodeName"] for w in submitted[ours]} == claim_nodes
    print(
        f"[placeholder] Job ended at {t_end:.1f}s; its pods: {len(seen_pods[ours])}; "
        f"NodeClaims at most: planned {most[ours]}, textbook {most[textbook]}"
    )
    # The textbook placeholder, in the same order, cost extra GPU nodes.
    assert most[textbook] > nodes, most
    for name in (ours, textbook):  # leave the cluster as found: pods, Jobs and NodePools (Karpenter removes the nodes)
        for w in submitted[name]:
            sim.request("DELETE", f"/api/v1/namespaces/{sim.namespace}/pods/{w}?gracePeriodSeconds=0", ok_missing=True)
        sim.request("DELETE", f"{jobs_path}/capacity-placeholder-{name}?propagationPolicy=Background", ok_missing=True)
        sim.request("DELETE", f"/apis/karpenter.sh/v1/nodepools/{name}", ok_missing=True)
