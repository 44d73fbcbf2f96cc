"""Serving plans: the DGD, cache, download and benchmark Jobs, waits, hardening, autoscaling, network policy
(Kubernetes objects as data). May import the registry, the catalog and the spec.

Pure builder for the serving layer: config in, Kubernetes objects out.

The Pulumi components (components/serving.py) and ``python -m stacks render``
both call ``build_plan``, so what the command shows is what ``pulumi up`` creates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from stacks import catalog
from stacks.serving import waits
from stacks.catalog import k8s
from stacks.catalog.model import Target
from stacks.config.keys import NS, ConfigError, StackConfig, duration_seconds, parse, select_target
from stacks.serving.hardening import harden_job

REDACTED = "<redacted: Pulumi secret>"
HF_TOKEN_KEY = "HF_TOKEN"

WAIT_FOR_READY = "pulumi.com/waitFor"
TIMEOUT = "pulumi.com/timeoutSeconds"
SKIP_AWAIT = "pulumi.com/skipAwait"


@dataclass
class ServingPlan:
    target: Target
    namespace: Optional[dict]
    hf_secret: Optional[dict]  # token value is REDACTED here; the component injects the secret Output
    cache_pvc: Optional[dict]
    jobs: list[dict]  # in run order: download(s), then validate
    configmaps: list[dict]
    dgd: dict
    hf_secret_name: str = k8s.HF_SECRET
    claim_name: str = k8s.CACHE_PVC
    # Per autoscaled component its ComponentAutoscaling (stacks/serving/autoscaling.py); per paused component the
    # replicas it had (dynamo:paused), which a resume restores
    autoscaling: dict[str, Any] = field(default_factory=dict)
    paused: dict[str, Any] = field(default_factory=dict)
    # KEDA ScaledObjects driving the DGD's scaling adapters (stacks/serving/autoscaling.py; filled by stacks.program)
    autoscalers: list[dict] = field(default_factory=list)
    # Optional NetworkPolicies of the namespace (dynamo:networkPolicy, stacks/serving/network_policy.py)
    network_policies: list[dict] = field(default_factory=list)
    # The DaemonSet that pulls the GPU workers' image onto each of their nodes as it joins (stacks/serving/prepull.py;
    # planned by the cluster mode that owns the GPU nodes, else None)
    image_prepuller: Optional[dict] = None
    # What `preview` and `up` print about this plan (pulumi.log.warn in components/serving.py); never an object
    warnings: list[str] = field(default_factory=list)

    def objects(self) -> list[dict]:
        out = [o for o in (self.namespace, self.hf_secret, self.cache_pvc) if o]
        prepull = [self.image_prepuller] if self.image_prepuller else []
        return out + self.network_policies + prepull + self.jobs + self.configmaps + [self.dgd] + self.autoscalers


def _dicts(x: Any) -> list[dict]:
    """Every mapping in ``x`` (a tree of dicts and lists, as YAML gives), outermost first."""
    out: list[dict] = []
    todo = [x]
    while todo:
        y = todo.pop()
        if isinstance(y, dict):
            out.append(y)
            todo.extend(v for v in y.values() if isinstance(v, (dict, list)))
        elif isinstance(y, list):
            todo.extend(v for v in y if isinstance(v, (dict, list)))
    return out


def _tree_copy(x: Any) -> Any:
    """A copy of a tree of dicts and lists (the recipe's objects, as YAML gives them) whose scalars are immutable:
    what ``copy.deepcopy`` makes of it, without the memo, which such a tree does not need."""
    if isinstance(x, dict):
        return {k: _tree_copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_tree_copy(v) for v in x]
    return x


def _set_pull_secrets(dicts: list[dict], names: tuple[str, ...]) -> None:
    """``dynamo:imagePullSecrets`` replace the recipe's placeholder; pod specs of recipes that name none
    (Ultra, Motif-3) get them too, so the key is never ignored. ``dicts``: an object's mappings (``_dicts``)."""
    for d in dicts:
        if d.get("imagePullSecrets") == [{"name": k8s.PLACEHOLDER_PULL_SECRET}]:
            if names:
                d["imagePullSecrets"] = [{"name": n} for n in names]
            else:
                del d["imagePullSecrets"]
        elif names and isinstance(d.get("containers"), list) and "imagePullSecrets" not in d:
            d["imagePullSecrets"] = [{"name": n} for n in names]


def _rename_refs(dicts: list[dict], *, own_claim: str, claim: str, hf_secret: str) -> None:
    """Point every reference to the model's own cache claim (``own_claim``, whatever the model calls it) at ``claim``,
    and every reference to the HF token Secret at ``hf_secret``. ``dicts``: an object's mappings (``_dicts``)."""
    for d in dicts:
        pvc = d.get("persistentVolumeClaim")
        if isinstance(pvc, dict) and pvc.get("claimName") == own_claim:
            pvc["claimName"] = claim
        ref = d.get("secretRef")
        if isinstance(ref, dict) and ref.get("name") == k8s.HF_SECRET:
            ref["name"] = hf_secret
        skr = d.get("secretKeyRef")
        if isinstance(skr, dict) and skr.get("name") == k8s.HF_SECRET:
            skr["name"] = hf_secret


def component_names(dgd: dict) -> list[str]:
    return [c["name"] for c in dgd["spec"]["components"]]


# Dynamo's switches for a frontend that untrusted clients reach (docs/guides/security, "Frontend extensions and admin
# API"; lib/runtime config environment_names: truthy values 1/true/yes/on):
# - DYN_DISABLE_FRONTEND_NVEXT: the frontend drops a request's ``nvext`` and ignores the routing-override headers, so no
#   client picks its worker ("In a multi-tenant or untrusted-client setting, set DYN_DISABLE_FRONTEND_NVEXT=1");
# - DYN_DISABLE_FRONTEND_ADMIN_API: no ``GET``/``POST /busy_threshold``, with which any client could set the load at
#   which the frontend refuses every team's requests with 503.
# Measured on the 1.6.1 frontend (tests/test_front_door_rig.py): with them a body's nvext.backend_instance_id or
# decode_worker_id does not pin a worker, and POST /busy_threshold answers 404 (200 without).
NO_CLIENT_NVEXT = {"name": "DYN_DISABLE_FRONTEND_NVEXT", "value": "1"}
NO_ADMIN_API = {"name": "DYN_DISABLE_FRONTEND_ADMIN_API", "value": "1"}


def set_frontend_env(dgd: dict, entries: list[dict]) -> None:
    """Every frontend component's containers get ``entries`` (replacing values of the same names the recipe may set)."""
    names = {e["name"] for e in entries}
    for comp in dgd["spec"]["components"]:
        if comp.get("type") == "frontend":
            for c in comp["podTemplate"]["spec"]["containers"]:
                c["env"] = [e for e in c.get("env") or [] if e.get("name") not in names] + [dict(e) for e in entries]


def build_plan(
    cfg: StackConfig,
    *,
    default_storage_class: Optional[str] = None,
    job_node_selector: Optional[dict] = None,
    efa_per_gpu: Optional[int] = None,
    api_server_cidrs: tuple[str, ...] = (),
    behind_door: bool = False,
    client_nvext: bool = True,
) -> ServingPlan:
    """``default_storage_class``: the class the cluster layer created (used when storage.className is unset);
    ``behind_door``: other teams' clients reach the frontend (``frontDoor.enabled``): its admin API is off
    (``NO_ADMIN_API``); ``client_nvext``: false when those clients may not send ``nvext`` (``frontDoor.clientNvext``
    false): the frontend drops it and the routing headers (``NO_CLIENT_NVEXT``);
    ``job_node_selector``: where the download Jobs run (the EKS system node group);
    ``api_server_cidrs``: where the cluster layer knows the Kubernetes API server is (the NetworkPolicies' 443/6443
    rule; ``networkPolicy.apiServerCidrs`` takes precedence, neither: any address);
    ``efa_per_gpu``: EFA devices per GPU of the cluster's instance type (default: the GPU's default instance, stacks/registry/gpus.py)."""
    t = select_target(cfg)
    ns = cfg.namespace
    recipe = _tree_copy(catalog.recipe_objects(t))
    cache = _tree_copy(catalog.cache_objects(t, cfg.storage.size))
    pvc, jobs = cache[0], cache[1:]
    configmaps = [d for d in recipe if d["kind"] == "ConfigMap"]
    dgd = next(d for d in recipe if d["kind"] == "DynamoGraphDeployment")

    own_claim = pvc["metadata"]["name"]  # the model's own cache PVC (per model: catalog.cache_claim)
    claim = cfg.storage.existing_claim or own_claim
    hf_name = cfg.hf_token_secret_name or k8s.HF_SECRET
    pvc["spec"]["accessModes"] = [cfg.storage.access_mode]
    if cfg.storage.class_name or default_storage_class:
        pvc["spec"]["storageClassName"] = cfg.storage.class_name or default_storage_class
    else:
        pvc["spec"].pop("storageClassName", None)  # the cluster's default StorageClass

    # Component overrides: images and replicas, by DGD component name.
    names = component_names(dgd)
    for section, keys in (("images", list(cfg.images)), ("replicas", list(cfg.replicas))):
        for key in keys:
            if key not in names and not (key == "*" and section == "images"):
                raise ConfigError(
                    f"{NS}:{section}.{key}: component {key!r} is not in {t.id}; components: {', '.join(names)}"
                    + (" (or '*' for every container)" if section == "images" else "")
                )
    for comp in dgd["spec"]["components"]:
        image = cfg.images.get(comp["name"], cfg.images.get("*"))
        if image:
            for c in comp["podTemplate"]["spec"]["containers"]:
                c["image"] = image
        if comp["name"] in cfg.replicas:
            comp["replicas"] = cfg.replicas[comp["name"]]
    # Pause and autoscaling (stacks/serving/autoscaling.py): GPU components to 0 replicas; autoscaled ones opt into their DGDSA.
    # A paused autoscaled component keeps its ScaledObject, which KEDA pauses at 0 replicas (autoscaling.PAUSED_REPLICAS).
    scaling: dict = {}
    paused: dict = {}
    if cfg.paused or cfg.autoscaling:
        from stacks.serving.autoscaling import apply_to_dgd, gpu_components, parse_autoscaling

        scaling = parse_autoscaling(cfg.autoscaling, names, gpu_components(dgd))
        paused = apply_to_dgd(dgd, cfg.paused, scaling)

    if cfg.model_revision:
        # Each download Job that takes a revision says how (catalog data: builders.RevisionPin, the departure from upstream
        # the fidelity check allows); without dynamo:modelRevision the Jobs stay upstream's and fetch the default branch.
        pins = catalog.revision_pins(t)
        for job in jobs:
            if job["metadata"]["name"] in pins:
                pins[job["metadata"]["name"]].apply(job, cfg.model_revision)
        if not pins:
            raise ConfigError(
                f"{NS}:modelRevision: {cfg.model_revision!r} cannot be applied: the {t.model} download Job takes no revision "
                f"(supported: {', '.join(catalog.revision_models())})"
            )
    if cfg.fabric_profile:
        from stacks.serving.fabric import apply_profile
        from stacks.registry.gpus import efa_per_gpu as _efa_per_gpu

        try:
            apply_profile(dgd, cfg.fabric_profile, t.id, efa_per_gpu if efa_per_gpu is not None else _efa_per_gpu(t.gpu))
        except ValueError as e:  # a FabricError, or a GPU registered without instance data (no EFA figure), named by shape_for
            raise ConfigError(f"{NS}:fabricProfile: {cfg.fabric_profile!r}: {e}") from None
    if behind_door:
        set_frontend_env(dgd, [NO_ADMIN_API] + ([] if client_nvext else [NO_CLIENT_NVEXT]))
    wait = cfg.wait
    job_timeout = duration_seconds(wait.job_timeout)
    dgd_timeout = duration_seconds(wait.dgd_timeout)
    if not wait.enabled and not cfg.storage.existing_claim:
        pvc["metadata"].setdefault("annotations", {})[SKIP_AWAIT] = "true"  # no waiting for Bound either
    for job in jobs:
        harden_job(job)  # non-root, no capabilities, read-only root (stacks/serving/hardening.py; fidelity allows exactly these)
        if job_node_selector:
            job["spec"]["template"]["spec"]["nodeSelector"] = dict(job_node_selector)
        ann = job["metadata"].setdefault("annotations", {})
        if wait.enabled and wait.job:
            ann.update(waits.job_annotations(job_timeout))  # waitFor: a fixed deadline (see stacks/serving/waits.py)
        else:
            ann[SKIP_AWAIT] = "true"
    dgd_ann = dgd["metadata"].setdefault("annotations", {})
    if wait.enabled and wait.dgd:
        dgd_ann.update(waits.dgd_annotations(dgd_timeout))
    else:
        dgd_ann[SKIP_AWAIT] = "true"

    namespaced = jobs + configmaps + [dgd] + ([] if cfg.storage.existing_claim else [pvc])
    for obj in namespaced:
        obj["metadata"]["namespace"] = ns
        dicts = _dicts(obj)  # before the pull secrets are set: their new mappings hold no reference to rename
        _set_pull_secrets(dicts, cfg.image_pull_secrets)
        _rename_refs(dicts, own_claim=own_claim, claim=claim, hf_secret=hf_name)
    if cfg.compile_cache.enabled:
        # After the DGD's other edits (images, fabric, references): the cache key is taken from the containers as they
        # run. vLLM's and Triton's caches on the model-cache volume, keyed (stacks/serving/compile_cache.py).
        from stacks.serving.compile_cache import apply_compile_cache

        apply_compile_cache(
            dgd,
            t.id,
            t.runtime,
            t.gpu,
            catalog.family_of(t).cache.mount,
            {cm["metadata"]["name"]: cm.get("data") for cm in configmaps},
        )
    if cfg.model_loader.format != "default":
        # The vLLM workers read the checkpoint with the Run:ai Model Streamer (stacks/serving/model_loader.py).
        from stacks.serving.model_loader import apply_model_loader

        apply_model_loader(dgd, cfg.model_loader, t.id, t.runtime)
    if cfg.fast_startup_probe.enabled:
        # GPU workers' startupProbe every 5 s, the recipe's period x failureThreshold kept (stacks/serving/startup_probe.py).
        from stacks.serving.startup_probe import apply_fast_startup_probe

        apply_fast_startup_probe(dgd)

    secret = None
    if not cfg.hf_token_secret_name:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": k8s.HF_SECRET, "namespace": ns},
            "type": "Opaque",
            "stringData": {HF_TOKEN_KEY: REDACTED},
        }
    namespace: Optional[dict[str, Any]] = (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} if cfg.create_namespace else None
    )
    policies, warnings = [], []
    if cfg.network_policy.enabled:
        from stacks.serving.network_policy import benchmark_job_name, network_policies

        clients = [benchmark_job_name(dgd)] if cfg.benchmark.enabled else []
        job_names = [j["metadata"]["name"] for j in jobs] + clients
        api_cidrs = cfg.network_policy.api_server_cidrs or api_server_cidrs
        policies = network_policies(
            dgd,
            job_names,
            cfg.network_policy.ingress_namespaces,
            cfg.network_policy.monitoring_namespaces,
            api_cidrs,
            frontend_clients=clients,
        )
        if not api_cidrs:
            warnings.append(
                f"{NS}:networkPolicy.apiServerCidrs is unset, so the pods of {dgd['metadata']['name']} in {ns} may reach any "
                f"address on TCP 443/6443 (the Kubernetes API server's ports); list the networks of this cluster's "
                f"API server (`kubectl get endpoints kubernetes -n default` and the `kubernetes` Service's ClusterIP)"
            )
    plan = ServingPlan(
        target=t,
        namespace=namespace,
        hf_secret=secret,
        cache_pvc=None if cfg.storage.existing_claim else pvc,
        jobs=jobs,
        configmaps=configmaps,
        dgd=dgd,
        hf_secret_name=hf_name,
        claim_name=claim,
        autoscaling=dict(scaling or {}),
        paused=dict(paused or {}),
        network_policies=policies,
        warnings=warnings,
    )
    if namespace is not None:  # this plan's own pods; stacks.program.pod_security unions a namespace's entries and the benchmark
        namespace["metadata"]["labels"] = pod_security_labels(
            least_strict(pod_security_level(s, a) for _, s, a in plan_pods(plan))
        )
    return plan


def render_config(raw: dict[str, Any]) -> list[dict]:
    """The serving objects of a raw ``dynamo:`` mapping of serving keys (no cluster, no stack around it), in the order
    they are applied: what ``render --target`` prints. Here, beside ``build_plan``, and not in the program layer, so
    ``render --target`` and ``render --all`` load only the spec's serving keys and this layer
    (``stacks.program.render`` re-exports both names)."""
    return build_plan(parse(raw)).objects()


def render_target(target_id: str) -> list[dict]:
    """A catalog target's serving objects, with every other key at its default."""
    return render_config({"target": target_id})


# --------------------------------------------------------------------------- Pod Security Standards
# Pod Security admission (https://kubernetes.io/docs/concepts/security/pod-security-admission, "Pod Security Admission
# labels for namespaces"): a namespace labelled ``pod-security.kubernetes.io/<MODE>: <LEVEL>`` and
# ``pod-security.kubernetes.io/<MODE>-version: <VERSION>`` has its pods checked against that level of the Pod Security
# Standards as that Kubernetes minor defined it (``v1.35``, or ``latest``). MODE ``enforce`` rejects a violating pod,
# ``audit`` records the violation in the audit event, ``warn`` returns it to the client as a warning; the modes are
# independent, so a namespace enforces the level its pods need and warns and audits at ``restricted``, as
# https://kubernetes.io/docs/tasks/configure-pod-container/enforce-standards-namespace-labels does. The levels, least to
# most strict, and each level's controls: https://kubernetes.io/docs/concepts/security/pod-security-standards.
PSS_PREFIX = "pod-security.kubernetes.io/"
PSS_LEVELS = ("privileged", "baseline", "restricted")  # least to most strict; each admits every pod the next admits
PSS_WARN_AUDIT = "restricted"
# Baseline "Capabilities": adding any capability outside this list is refused (IPC_LOCK, SYS_RESOURCE, SYS_PTRACE are not in it).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# Baseline "Sysctls": the safe set (the 1.32+ list; the admission's own code, k8s.io/pod-security-admission
# policy/check_sysctls.go, grows it by version, and every list and rule here is that package's at v0.33).
BASELINE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
BASELINE_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# Restricted "Volume Types": only these.
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim", "projected", "secret"}
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _containers(spec: dict) -> list[dict]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers") for c in spec.get(key) or []]


def pod_security_violations(spec: dict, level: str, annotations: Optional[dict] = None) -> list[str]:
    """What in a pod spec (and its annotations) the Pod Security Standards ``level`` forbids: the controls of the
    Pod Security Standards page, baseline's for ``baseline``, baseline's and restricted's for ``restricted``;
    ``privileged`` forbids nothing."""
    if level not in PSS_LEVELS:
        raise ValueError(f"Pod Security level {level!r}: one of {', '.join(PSS_LEVELS)}")
    if level == "privileged":
        return []
    out: list[str] = []
    psc = spec.get("securityContext") or {}
    ctrs = _containers(spec)
    scs = [(c.get("name"), c.get("securityContext") or {}) for c in ctrs]
    # baseline
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"{key}: true")
    for where, sc in [("pod", psc)] + scs:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where}: windowsOptions.hostProcess")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in BASELINE_SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"{where}: seLinuxOptions {se}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where}: seccompProfile Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where}: appArmorProfile Unconfined")
    for name, sc in scs:
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        extra = sorted(set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES)
        if extra:
            out.append(f"{name}: capabilities.add {extra}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{name}: procMount {sc['procMount']}")
    for c in ctrs:
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{c.get('name')}: hostPort")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"volume {v.get('name')}: hostPath")
    for s in psc.get("sysctls") or []:
        if s.get("name") not in BASELINE_SYSCTLS:
            out.append(f"sysctl {s.get('name')}")
    for k, v in (annotations or {}).items():
        if k.startswith(APPARMOR_ANNOTATION) and v and v != "runtime/default" and not v.startswith("localhost/"):
            out.append(f"annotation {k}: {v}")
    if level == "baseline":
        return out
    # restricted
    for v in spec.get("volumes") or []:
        kinds = [k for k in v if k != "name"]
        if any(k not in RESTRICTED_VOLUMES for k in kinds):
            out.append(f"volume {v.get('name')}: {', '.join(kinds)}")
    if psc.get("runAsUser") == 0:
        out.append("pod: runAsUser 0")
    if psc.get("runAsNonRoot") is False:
        out.append("pod: runAsNonRoot false")
    linux = (spec.get("os") or {}).get("name") != "windows"  # a Windows pod is exempt from the three Linux-only controls
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    for name, sc in scs:
        if linux and sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation not false")
        if not (sc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is None)):
            out.append(f"{name}: runAsNonRoot not true")
        if sc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        if linux and not pod_seccomp and (sc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile not RuntimeDefault or Localhost")
        caps = sc.get("capabilities") or {}
        if linux and "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities.drop lacks ALL")
        if linux and set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: capabilities.add {sorted(set(caps['add']) - {'NET_BIND_SERVICE'})}")
    return out


def pod_security_level(spec: dict, annotations: Optional[dict] = None) -> str:
    """The strictest Pod Security Standards level that admits the pod."""
    return next(lvl for lvl in reversed(PSS_LEVELS) if not pod_security_violations(spec, lvl, annotations))


def least_strict(levels) -> str:
    """The level that admits every pod of the given levels (the least strict of them); ``restricted`` for none."""
    return min(levels, key=PSS_LEVELS.index, default=PSS_LEVELS[-1])


def pod_security_labels(enforce: Optional[str], version: str = "latest") -> dict[str, str]:
    """A namespace's Pod Security admission labels: ``enforce`` (None: no enforce label, the cluster's default
    applies), warn and audit at ``restricted``, all at ``version``."""
    out = {f"{PSS_PREFIX}enforce": enforce, f"{PSS_PREFIX}enforce-version": version} if enforce else {}
    for mode in ("warn", "audit"):
        out[f"{PSS_PREFIX}{mode}"] = PSS_WARN_AUDIT
        out[f"{PSS_PREFIX}{mode}-version"] = version
    return out


def plan_pods(plan: ServingPlan) -> list[tuple[str, dict, dict]]:
    """``(name, pod spec, annotations)`` of every pod template of an entry's plan: the DGD's components, as the
    operator runs them from ``podTemplate``, the download Jobs' and the image pre-puller's."""
    out = []
    for comp in plan.dgd["spec"]["components"]:
        tmpl = comp.get("podTemplate") or {}
        out.append((comp["name"], tmpl.get("spec") or {}, (tmpl.get("metadata") or {}).get("annotations") or {}))
    for job in plan.jobs:
        tmpl = job["spec"]["template"]
        out.append((job["metadata"]["name"], tmpl["spec"], (tmpl.get("metadata") or {}).get("annotations") or {}))
    if plan.image_prepuller:
        tmpl = plan.image_prepuller["spec"]["template"]
        out.append(
            (plan.image_prepuller["metadata"]["name"], tmpl["spec"], (tmpl.get("metadata") or {}).get("annotations") or {})
        )
    return out
