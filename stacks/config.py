"""Typed stack configuration and target selection.

Everything a stack may set lives under the ``dynamo:`` namespace of its
``Pulumi.<stack>.yaml``. ``load`` validates the raw mapping (unknown keys, bad
values and unqualified combinations all raise ``ConfigError`` naming the key,
the value and the valid choices) before the program registers any resource.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .catalog import SELECT_ORDER, Target, families, targets

NS = "dynamo"


class ConfigError(ValueError):
    """Bad stack configuration; the message names the key, the value and the choices."""


def _camel(s: str) -> str:
    head, *rest = s.split("_")
    return head + "".join(p.title() for p in rest)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=_camel, populate_by_name=True, frozen=True)


class StorageConfig(_Model):
    """The model cache. ``existing_claim`` reuses a PVC the stack does not own."""

    class_name: Optional[str] = None
    size: Optional[str] = None
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"] = "ReadWriteMany"
    existing_claim: Optional[str] = None
    # Keep the cache when the stack is destroyed or the PVC would be replaced. Opt out with protect: false.
    protect: bool = True

    @field_validator("size")
    @classmethod
    def _size(cls, v):
        import re

        if v is not None and not re.fullmatch(r"[0-9]+(Ki|Mi|Gi|Ti|Pi)", v):
            raise ValueError(f"{v!r} is not a Kubernetes quantity like 140Gi")
        return v


class WaitConfig(_Model):
    """Readiness waits: the download Job's completion and the DGD's Ready condition.
    ``enabled: false`` turns every wait off (clusters without GPU nodes, tests); ``job``/``dgd`` one each."""

    enabled: bool = True
    job: bool = True
    dgd: bool = True
    job_timeout: str = "60m"
    dgd_timeout: str = "60m"

    @field_validator("job_timeout", "dgd_timeout")
    @classmethod
    def _duration(cls, v):
        duration_seconds(v)
        return v


def duration_seconds(text: str) -> int:
    import re

    m = re.fullmatch(r"(\d+)(s|m|h)", text)
    if not m:
        raise ValueError(f"{text!r} is not a duration like 90s, 60m or 2h")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


class StackConfig(_Model):
    target: Optional[str] = None
    model: Literal["nemotron-3.5-lightning", "nemotron-3-ultra", "motif-3"] = "nemotron-3.5-lightning"
    runtime: Optional[Literal["vllm", "trtllm"]] = None
    gpu: Optional[Literal["h100", "h200", "b200", "gb200"]] = None
    topology: Optional[Literal["agg", "disagg"]] = None
    shape: Optional[Literal["1P1D", "1P2D", "2P1D", "3P1D"]] = None
    spec: Optional[Literal["mtp", "dflash", "dspark", "none"]] = None
    routing: Optional[Literal["single", "kv", "round-robin"]] = None
    precision: Optional[Literal["nvfp4", "bf16"]] = None
    context: Optional[Literal["256k", "1m"]] = None
    workload: Optional[Literal["agentic", "chat"]] = None
    fabric: Optional[Literal["aws-efa", "infiniband", "gke-rdma", "nscale", "none"]] = None
    profile: Optional[Literal["refresh", "day0", "generic", "nscale", "current", "legacy"]] = None
    # Move a disaggregated target's KV transfer onto another fabric than its recipe's (e.g. an
    # InfiniBand recipe on EKS): see stacks/fabric.py.
    fabric_profile: Optional[Literal["aws-efa"]] = None

    namespace: str = "dynamo"
    create_namespace: bool = True
    storage: StorageConfig = Field(default_factory=StorageConfig)
    # Name of an existing Secret with key HF_TOKEN; otherwise the secret config dynamo:hfToken is used.
    hf_token_secret_name: Optional[str] = None
    image_pull_secrets: tuple[str, ...] = ()
    # Image overrides: key "*" for every container, or a component name (Frontend, agg, VllmDecodeWorker...).
    images: dict[str, str] = Field(default_factory=dict)
    # Replica overrides per DGD component name.
    replicas: dict[str, int] = Field(default_factory=dict)
    wait: WaitConfig = Field(default_factory=WaitConfig)
    # Pin the downloaded checkpoint to a Hugging Face revision (a commit or tag), where the model's
    # download Job supports it; promotion refuses floating revisions such as "main".
    model_revision: Optional[str] = None

    @field_validator("namespace")
    @classmethod
    def _ns(cls, v):
        import re

        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v):
            raise ValueError(f"{v!r} is not a valid Kubernetes namespace name (lowercase letters, digits, '-')")
        return v

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, v):
        for k, n in v.items():
            if n < 0:
                raise ValueError(f"replicas[{k}] must be >= 0, got {n}")
        return v


# Keys the serving layer owns; other namespaces' keys (aws:, kubernetes:) are not ours to check.
SECRET_KEYS = {"hfToken"}
CLUSTER_KEYS = {"cluster", "kubeconfig"}


def _fmt_loc(loc: tuple) -> str:
    return NS + ":" + ".".join(str(p) for p in loc)


def _error_text(err: dict) -> str:
    key = _fmt_loc(err["loc"])
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        return f"{key}: unknown key (value {value!r})"
    if err["type"] == "literal_error":
        return f"{key}: {value!r} is not valid; choose one of {err['ctx']['expected']}"
    return f"{key}: {err['msg']} (got {value!r})"


def parse(raw: dict[str, Any]) -> StackConfig:
    """Validate the ``dynamo:`` mapping (without the namespace prefix, secrets already removed)."""
    data = {k: v for k, v in raw.items() if k not in SECRET_KEYS | CLUSTER_KEYS}
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError("invalid stack config:\n  " + "\n  ".join(_error_text(x) for x in e.errors())) from None
    select_target(cfg)  # unqualified combinations fail here, before any resource exists
    return cfg


def _defaults(fam_defaults: dict, axis: str, chosen: dict) -> tuple:
    """Preferred values for an axis, best first: a value, a tuple of values, or a per-GPU mapping."""
    d = fam_defaults.get(axis)
    if isinstance(d, dict):
        d = d.get(chosen.get("gpu"))
    if d is None:
        return ()
    return tuple(d) if isinstance(d, (tuple, list)) else (d,)


def select_target(cfg: StackConfig) -> Target:
    """The one catalog target the config names, or a ConfigError listing the qualified choices."""
    cat = targets()
    if cfg.target:
        if cfg.target not in cat:
            raise ConfigError(f"{NS}:target: {cfg.target!r} is not in the catalog; choose one of: {', '.join(sorted(cat))}")
        t = cat[cfg.target]
        for axis in SELECT_ORDER:
            v = getattr(cfg, axis)
            if v is not None and axis != "model" and t.axis(axis) != v:
                raise ConfigError(f"{NS}:{axis}: {v!r} contradicts target {t.id} ({axis}={t.axis(axis)})")
        return t
    fam = next(f for f in families().values() if f.id == cfg.model)
    explicit = {a: getattr(cfg, a) for a in SELECT_ORDER[1:] if getattr(cfg, a) is not None}
    pool = list(fam.targets)
    chosen: dict[str, str] = {"model": cfg.model}
    for axis in SELECT_ORDER[1:]:
        values = sorted({t.axis(axis) for t in pool if t.axis(axis) is not None})
        want = explicit.get(axis)
        if want is not None:
            narrowed = [t for t in pool if t.axis(axis) == want]
            if not narrowed:
                where = ", ".join(f"{k}={v}" for k, v in chosen.items())
                raise ConfigError(
                    f"{NS}:{axis}: {want!r} is not qualified for {where}; qualified choices: {', '.join(values) or 'none'}{_hint(axis, chosen, values)}"
                )
            pool = narrowed
            chosen[axis] = want
            continue
        # Defaults only choose among targets that still honour every key the user did set.
        compatible = [t for t in pool if all(t.axis(a) == v for a, v in explicit.items())]
        options = sorted({t.axis(axis) for t in (compatible or pool) if t.axis(axis) is not None})
        for d in _defaults(fam.defaults, axis, chosen):
            if d in options:
                pool = [t for t in pool if t.axis(axis) == d]
                chosen[axis] = d
                break
        else:
            if len(options) == 1:
                pool = [t for t in pool if t.axis(axis) == options[0]]
                chosen[axis] = options[0]
    if len(pool) != 1:
        ids = ", ".join(sorted(t.id for t in pool))
        raise ConfigError(f"{NS}: config matches {len(pool)} targets ({ids}); set more of {', '.join(SELECT_ORDER)} or dynamo:target")
    return pool[0]


def _hint(axis: str, chosen: dict, values: list[str]) -> str:
    if axis == "topology" and chosen.get("runtime") == "trtllm":
        return " (TensorRT-LLM is aggregated-only here)"
    if axis == "spec" and chosen.get("gpu") and chosen.get("topology"):
        return f" ({chosen['gpu'].upper()} {'disaggregated' if chosen['topology'] == 'disagg' else 'aggregated'} has {', '.join(values)} only)"
    return ""
