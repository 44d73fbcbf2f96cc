"""Typed stack configuration and target selection.

Everything a stack may set lives under the ``dynamo:`` namespace of its
``Pulumi.<stack>.yaml``. ``parse`` validates the raw mapping (unknown keys, bad
values and unqualified combinations all raise ``ConfigError`` naming the key,
the value and the valid choices) before the program registers any resource.

Value rules (each a pure function here, shared with ``stacks.cli.promote``):

- Kubernetes names: ``namespace`` is a DNS-1123 label (63 chars); Secret, claim and
  StorageClass names are DNS-1123 subdomains (253 chars)
  (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/).
- Sizes use the Kubernetes quantity grammar (``140Gi``, ``1.5Ti``, ``10G``, ``2e11``;
  k8s.io/apimachinery/pkg/api/resource/quantity.go); the model cache must be at least 1Gi.
- Images (``dynamo:images``) must be a valid reference (distribution/reference grammar: lowercase
  repository path, optional ``host[:port]/``, tag ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``, digest
  ``sha256:<64 hex>``) and pinned: a digest, or a tag that names a version. A tag is *moving*
  (refused) when it has no digit at all (``latest``, ``nightly``, ``main``, ``dev``, ``stable``...)
  or one of its ``-``/``_``/``.``-separated words is ``latest``, ``nightly``, ``edge``, ``head``,
  ``main``, ``master``, ``trunk`` or ``snapshot`` (``cuda12-latest``). Release candidates and dated
  pre-releases such as ``1.5.0-nemotron-3.5-lightning-dev.1`` are pinned.
- ``modelRevision`` is a git revision Hugging Face accepts: a commit, a tag or a branch, as a
  valid ref name (``git check-ref-format``: no ``..``, no component starting with ``.``, no
  ``//``, no space, ``~^:?*[\\`` or control characters, no ``@{``, no trailing ``/``, ``.`` or
  ``.lock``). Digits are accepted (``20250101``). Promotion additionally refuses branches.
"""

from __future__ import annotations

import difflib
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stacks import registry
from stacks.catalog import SELECT_ORDER, Target, families, targets

NS = "dynamo"


class ConfigError(ValueError):
    """Bad stack configuration; the message names the key, the value and the choices."""


def _camel(s: str) -> str:
    head, *rest = s.split("_")
    return head + "".join(p.title() for p in rest)


def _number_field(annotation: Any) -> bool:
    """A field that holds a number (int, float, or a Literal/Optional of them), not a boolean."""
    import typing

    if annotation in (int, float):
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return bool(args) and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
    return typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and any(
        _number_field(a) for a in args if a is not type(None)
    )


def number_problem(v: Any) -> Optional[str]:
    """Why a value given for a number is not one, or None. YAML ``true`` is not 1 and ``٣`` (a non-ASCII digit,
    which Python's ``int()`` would read as 3) is not 3: a number is an int, a float or ASCII digits."""
    if isinstance(v, bool):
        return f"{v!r} is a boolean, not a number"
    if isinstance(v, str) and not re.fullmatch(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", v.strip(), re.ASCII):
        return f"{v!r} is not a number (ASCII digits)"
    return None


class _Model(BaseModel):
    # Numbers given where a name or revision is expected (``namespace: 123`` in YAML) are the same
    # value Pulumi passes as the string "123": accept both alike. Stack files spell keys in camelCase only
    # (``parse`` validates with ``by_name=False``, so ``job_timeout`` is an unknown key there); Python code may
    # still build a model by field name.
    model_config = ConfigDict(
        extra="forbid", alias_generator=_camel, populate_by_name=True, frozen=True, defer_build=True, coerce_numbers_to_str=True
    )

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data: Any) -> Any:
        """pydantic's lax mode reads ``true`` as 1, non-ASCII digit strings as numbers, and ``"yes"``, ``"on"``,
        ``"y"`` or 1 as true: refuse them all. A boolean is YAML 1.2's ``true``/``false`` (what the Pulumi CLI and
        ``render --stack`` read; https://yaml.org/spec/1.2.2/#1032-tag-resolution)."""
        if isinstance(data, dict):
            for name, f in cls.model_fields.items():
                key = f.alias or name
                if key not in data:
                    continue
                why = number_problem(data[key]) if _number_field(f.annotation) else None
                if (
                    why is None
                    and f.annotation in (bool, Optional[bool])
                    and not isinstance(data[key], bool)
                    and not (data[key] is None and f.annotation == Optional[bool])
                ):
                    why = f"{_short(data[key])} is not a boolean; use true or false"
                if why:
                    raise _key_error(key, why)
        return data


def _key_error(key: str, message: str) -> ValueError:
    """A validator error for the sub-key ``key`` of the model being validated (see ``_error_text``)."""
    return ValueError(f"@{key}@{message}")


# --------------------------------------------------------------------------- value rules (pure)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def dns_label_problem(v: Any) -> Optional[str]:
    if not isinstance(v, str):
        return f"{v!r} is not a name"
    if not v or len(v) > 63 or not _DNS_LABEL.fullmatch(v):
        return f"{v!r} is not a valid DNS-1123 label (1-63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
    return None


# Namespaces the cluster itself owns: ``default`` and the ``kube-`` prefix are reserved for Kubernetes system use
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/#initial-namespaces: "Avoid creating
# namespaces with the prefix kube-, since it is reserved for Kubernetes system namespaces"). A stack that creates
# such a namespace would own it, and its destroy would delete it.
def reserved_namespace(v: Any) -> bool:
    return isinstance(v, str) and (v == "default" or v.startswith("kube-"))


def owned_namespace_problem(v: Any, key: str, create_key: str) -> Optional[str]:
    if reserved_namespace(v):
        return (
            f"{v!r} belongs to the cluster (default and kube-* are Kubernetes' own namespaces), so this stack must "
            f"not create or delete it: choose a namespace of its own, or set {create_key}: false to use it as is"
        )
    return None


def namespace_name(v: Any) -> Any:
    """A namespace name (DNS-1123 label), or ValueError saying why not (the validator of every ``namespace`` key)."""
    why = dns_label_problem(v)
    if why:
        raise ValueError(f"{why}: not a valid Kubernetes namespace name")
    return v


def dns_subdomain_problem(v: Any) -> Optional[str]:
    if not isinstance(v, str):
        return f"{v!r} is not a name"
    if not v or len(v) > 253 or not all(_DNS_LABEL.fullmatch(p) for p in v.split(".")):
        return (
            f"{v!r} is not a valid DNS-1123 subdomain (up to 253 lowercase letters, digits, '-' and '.', "
            "each part starting and ending with a letter or digit)"
        )
    return None


_QUANTITY = re.compile(r"([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[mkMGTPE]?)")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "m": Decimal("0.001"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
}


def quantity_bytes(text: Any) -> Decimal:
    """The value of a Kubernetes quantity (``140Gi`` -> 150323855360); ValueError if it is not one."""
    m = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity like 140Gi, 1.5Ti or 10G")
    sign, number, suffix = m.groups()
    try:
        n = Decimal(number)
        if suffix in _BINARY:
            n *= _BINARY[suffix]
        elif suffix[:1] in ("e", "E"):
            n = n.scaleb(int(suffix[1:]))
        else:
            n *= _DECIMAL[suffix]
    except (InvalidOperation, OverflowError, ValueError):
        raise ValueError(f"{text!r} is not a Kubernetes quantity like 140Gi, 1.5Ti or 10G") from None
    if n > 2**63 - 1:
        raise ValueError(f"{text!r} is larger than a Kubernetes quantity can be (2^63-1)")
    return -n if sign == "-" else n


MIN_CACHE_BYTES = 2**30


def url_problem(v: Any) -> Optional[str]:
    """Why a value is not a plain http(s) URL, or None: printable ASCII only (no NUL, no Unicode bidi controls
    such as U+202E, which make a URL display as something else), a host, and a TCP port 1-65535 (RFC 793)."""
    if not isinstance(v, str):
        return "is not a URL"
    if any(not (0x21 <= ord(c) <= 0x7E) for c in v):
        return "contains a control, space or non-ASCII character"
    m = re.fullmatch(r"https?://([^\s/:?#@]+)(?::([0-9]+))?(/\S*)?", v, re.ASCII)
    if not m:
        return "is not an http(s) URL"
    if m.group(2) is not None and not 1 <= int(m.group(2)) <= 65535:
        return f"has port {m.group(2)}, outside 1-65535"
    return None


_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}))?",
    re.ASCII,
)
MOVING_TAG_WORDS = frozenset({"latest", "nightly", "edge", "head", "main", "master", "trunk", "snapshot"})


def image_problem(ref: Any) -> Optional[str]:
    """Why an image reference is malformed or not pinned, or None (see the module docstring)."""
    if not isinstance(ref, str) or not ref:
        return "empty image reference"
    if ref != ref.strip() or any(c.isspace() for c in ref):
        return "contains whitespace"
    m = _IMAGE.fullmatch(ref)
    if not m:
        return "not a valid image reference (registry/repository[:tag][@sha256:digest], lowercase repository)"
    dom = m.group("domain")
    if dom and not ("." in dom or ":" in dom or dom == "localhost") and not re.fullmatch(_PATH_COMPONENT, dom):
        return "not a valid image reference (lowercase repository)"
    if len(m.group("name")) > 255:
        return "repository name longer than 255 characters"
    if m.group("digest"):
        return None
    tag = m.group("tag")
    if tag is None:
        return "no tag or digest (floats to latest)"
    words = {w.lower() for w in re.split(r"[-_.]", tag)}
    if not any(c.isdigit() for c in tag) or words & MOVING_TAG_WORDS:
        return f"tag {tag!r} is a moving tag"
    return None


_REF_BAD = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def revision_problem(rev: Any) -> Optional[str]:
    """Why a ``modelRevision`` is not a valid git revision name, or None (``git check-ref-format`` rules)."""
    if not isinstance(rev, str) or not rev:
        return "empty revision"
    if len(rev) > 255:
        return "longer than 255 characters"
    if _REF_BAD.search(rev) or "@{" in rev or rev == "@" or "//" in rev or ".." in rev:
        return "not a valid git revision name (no '..', '//', '@{', spaces or any of ~^:?*[\\)"
    if rev.startswith("/") or rev.endswith(("/", ".", ".lock")):
        return "not a valid git revision name (cannot start with '/' or end with '/', '.' or '.lock')"
    if any(p.startswith(".") or p.endswith(".lock") for p in rev.split("/")):
        return "not a valid git revision name (a path component starts with '.' or ends with '.lock')"
    return None


# Branch names a Hugging Face repository commonly has (its default branch is ``main``; ``refs/pr/<n>`` are the refs of
# its pull requests: https://huggingface.co/docs/huggingface_hub/guides/download, "revision" may be a branch name, a tag
# or a commit hash). A branch moves, so the stack would download a different checkpoint on a later `up`.
BRANCH_NAMES = frozenset({"main", "master", "head", "trunk", "dev", "develop", "nightly", "latest"})


def branch_problem(rev: Any) -> Optional[str]:
    """Why a ``modelRevision`` names a moving branch (refused on every model family), or None."""
    if not isinstance(rev, str):
        return None
    if rev.lower() in BRANCH_NAMES or rev.startswith(("refs/heads/", "refs/pr/", "refs/remotes/")):
        return "a branch, which moves (a later `up` would download another checkpoint)"
    return None


def duration_seconds(text: str) -> int:
    # ASCII digits only: ``\d`` (and int()) would read ``٣m`` or ``３m`` as 3 minutes.
    m = re.fullmatch(r"([0-9]+)(s|m|h)", text, re.ASCII) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a duration like 90s, 60m or 2h")
    n = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]
    if not 1 <= n <= 7 * 24 * 3600:
        raise ValueError(f"{text!r} is not between 1s and 168h")
    return n


# --------------------------------------------------------------------------- schema

MAX_REPLICAS = 100


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
        if v is not None:
            if quantity_bytes(v) < MIN_CACHE_BYTES:
                raise ValueError(f"{v!r} is smaller than the 1Gi a model cache needs (e.g. 140Gi, 1.5Ti, 10G)")
        return v

    @field_validator("class_name", "existing_claim")
    @classmethod
    def _names(cls, v):
        why = dns_subdomain_problem(v) if v is not None else None
        if why:
            raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _claim(self):
        if self.existing_claim:
            ignored = sorted(_camel(f) for f in self.model_fields_set & {"class_name", "size", "access_mode", "protect"})
            if ignored:
                raise _key_error(
                    ignored[0],
                    f"has no effect with storage.existingClaim {self.existing_claim!r} "
                    "(the stack does not own that claim); remove it",
                )
        return self


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

    @model_validator(mode="after")
    def _unused(self):
        for wait, timeout in (("job", "job_timeout"), ("dgd", "dgd_timeout")):
            if timeout in self.model_fields_set and not (self.enabled and getattr(self, wait)):
                raise _key_error(
                    _camel(timeout),
                    f"{getattr(self, timeout)!r} has no effect: the {wait} wait is off "
                    f"(wait.enabled={self.enabled}, wait.{wait}={getattr(self, wait)})",
                )
        return self


# --- observability and the benchmark helper: both optional, off by default; see stacks/observe/observability.py, stacks/serving/benchmark.py
def _off_keys_unused(model: ObservabilityConfig | BenchmarkConfig, section: str) -> None:
    """A key under a switched-off section would be ignored silently: refuse it."""
    if not model.enabled:
        extra = sorted(_camel(f) for f in model.model_fields_set - {"enabled"})
        if extra:
            raise _key_error(extra[0], f"has no effect: {section}.enabled is false; set {section}.enabled: true or remove it")


class SecretKeyRef(_Model):
    """A key of a Kubernetes Secret the user creates (its value never enters the stack)."""

    name: str
    key: str

    _name = field_validator("name")(classmethod(lambda cls, v: namespace_name(v)))


class AlertsConfig(_Model):
    """``dynamo:observability.alerts`` (stacks/observe/alerts.py): on with observability. ``webhookUrlSecret``: the
    Secret (in the observability namespace, created by you) whose key holds the URL Alertmanager posts alerts to
    (Slack, PagerDuty and Opsgenie all take webhooks); without it alerts stay in Alertmanager (port-forward to its
    Service to see them), and ``up`` says so. Thresholds: ``errorRatio`` (0-1), ``queuedRequests``, ``ttftP99Seconds`` (default
    from the target's published row)."""

    enabled: bool = True
    webhook_url_secret: Optional[SecretKeyRef] = None
    error_ratio: float = Field(default=0.05, gt=0, lt=1)
    queued_requests: int = Field(default=32, ge=1)
    ttft_p99_seconds: Optional[float] = Field(default=None, gt=0)


class ObservabilityConfig(_Model):
    """``prometheus: install`` (kube-prometheus-stack) or ``existing`` (``prometheusEndpoint``, and the
    ``monitorLabels`` that Prometheus selects); ``dcgm`` defaults to the match for ``cluster.nvidiaStack``."""

    enabled: bool = False
    prometheus: Literal["install", "existing"] = "install"
    prometheus_endpoint: Optional[str] = None
    monitor_labels: dict[str, str] = Field(default_factory=dict)
    namespace: str = "monitoring"
    create_namespace: bool = True
    dcgm: Optional[Literal["gpu-operator", "dcgm-exporter", "none"]] = None
    dashboards: bool = True
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)

    _ns = field_validator("namespace")(classmethod(lambda cls, v: namespace_name(v)))

    @field_validator("monitor_labels")
    @classmethod
    def _labels(cls, v):
        # Kubernetes label syntax (concepts/overview/working-with-objects/labels): [prefix/]name, name and value
        # at most 63 characters of alphanumerics, '-', '_', '.', starting and ending alphanumeric (value may be empty).
        part = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
        for key, value in v.items():
            prefix, _, name = key.rpartition("/")
            if (prefix and dns_subdomain_problem(prefix)) or not re.fullmatch(part, name):
                raise _key_error(
                    key, "is not a valid Kubernetes label key ([prefix/]name, name up to 63 alphanumerics, '-', '_', '.')"
                )
            if not re.fullmatch(f"{part}?", value):
                raise _key_error(key, f"{value!r} is not a valid Kubernetes label value (up to 63 alphanumerics, '-', '_', '.')")
        return v

    @field_validator("prometheus_endpoint")
    @classmethod
    def _url(cls, v):
        if v is not None:
            why = url_problem(v)
            if why:
                raise ValueError(f"{_short(v)} {why}; use an http(s) URL like http://prometheus.monitoring.svc:9090")
        return v

    @model_validator(mode="after")
    def _check(self):
        _off_keys_unused(self, "observability")
        why = (
            owned_namespace_problem(self.namespace, "namespace", "observability.createNamespace")
            if self.create_namespace
            else None
        )
        if why:
            raise _key_error("namespace", why)
        ref = self.alerts.webhook_url_secret if self.alerts.enabled else None
        if self.enabled and self.prometheus == "install" and self.create_namespace and ref is not None:
            # The webhook's Secret is the user's (mounted into Alertmanager: stacks/observe/observability.py), so it must
            # exist before `up`: it cannot, in a namespace the same `up` creates.
            raise _key_error(
                "alerts.webhookUrlSecret",
                f"Secret {ref.name!r} must exist in namespace {self.namespace!r} before `up`, but this stack creates that "
                "namespace (observability.createNamespace: true), so it cannot exist yet. Create the namespace and the "
                "Secret yourself and set observability.createNamespace: false, or remove webhookUrlSecret (alerts then "
                "stay in Alertmanager)",
            )
        if self.enabled and self.prometheus == "existing" and not self.prometheus_endpoint:
            raise _key_error(
                "prometheusEndpoint",
                "required with prometheus: existing (the URL of your Prometheus, "
                "e.g. http://prometheus-operated.monitoring.svc:9090)",
            )
        if self.prometheus == "install" and self.prometheus_endpoint:
            raise _key_error(
                "prometheusEndpoint",
                f"{self.prometheus_endpoint!r} has no effect with prometheus: install "
                "(the stack's own Prometheus is used); set prometheus: existing",
            )
        return self


class BenchmarkConfig(_Model):
    """An AIPerf Job against the target's frontend once the DGD exists, with its perf row's concurrency."""

    enabled: bool = False
    request_count: Optional[int] = Field(default=None, ge=1, le=100000)  # default: max(10 x concurrency, 100)
    tolerance: float = Field(default=0.10, gt=0, lt=1)  # relative; bench-report's pass/fail band
    # Serve with the recipe's synthetic speculative acceptance (its ``speculative-config-synthetic`` ConfigMap key, or
    # TensorRT-LLM's forced accepted tokens), as upstream does for the published rows. Off by default: synthetic
    # acceptance changes what the model answers, so a serving stack opts in for a benchmark run and turns it off after.
    synthetic_acceptance: bool = False

    @model_validator(mode="after")
    def _check(self):
        _off_keys_unused(self, "benchmark")
        return self


class NetworkPolicyConfig(_Model):
    """Optional NetworkPolicies in the serving namespace (stacks/serving/network_policy.py): deny by default, allow what Dynamo
    needs. ``ingressNamespaces``: namespaces whose pods may reach the frontend's HTTP port (of the serving
    namespace's own pods only the benchmark Job's may); ``monitoringNamespaces``: namespaces whose pods may scrape
    every component's ports (Prometheus);
    ``apiServerCidrs``: the networks the Kubernetes API server is reached at (its ``kubernetes`` Service's ClusterIP
    and endpoints), the only addresses Dynamo's pods may reach on 443/6443; on the EKS cluster this stack builds the
    program knows them (stacks/serving/network_policy.eks_api_server_cidrs), elsewhere unset means any address."""

    enabled: bool = False
    ingress_namespaces: tuple[str, ...] = ()
    monitoring_namespaces: tuple[str, ...] = ()
    api_server_cidrs: tuple[str, ...] = ()

    @field_validator("api_server_cidrs")
    @classmethod
    def _cidrs(cls, v):
        import ipaddress

        for c in v:
            try:
                ipaddress.ip_network(c)
            except ValueError:
                raise ValueError(f"{c!r} is not a CIDR block like 10.0.0.0/16 or 172.20.0.1/32") from None
        return v

    @field_validator("ingress_namespaces", "monitoring_namespaces")
    @classmethod
    def _names(cls, v):
        for n in v:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) or len(n) > 63:
                raise ValueError(f"{n!r} is not a namespace name (RFC 1123 label: lowercase letters, digits and '-', at most 63)")
        return v


class CompileCacheConfig(_Model):
    """vLLM's torch.compile cache and Triton's cache on the model-cache volume (stacks/serving/compile_cache.py), on by
    default; ``enabled: false`` keeps the recipe's in-container paths."""

    enabled: bool = True


class FastStartupProbeConfig(_Model):
    """GPU workers' startupProbe polled every 5 s within the recipe's own budget (stacks/serving/startup_probe.py), when
    ``enabled: true``. Off by default: the recipes' probes are upstream's, and the rendered DGD stays exactly upstream's
    apart from the listed compile-cache additions unless the stack asks for this one."""

    enabled: bool = False


class ModelLoaderConfig(_Model):
    """How the vLLM workers read the checkpoint from the model cache (stacks/serving/model_loader.py). ``format:
    runai-streamer`` starts them with vLLM's Run:ai Model Streamer (``--load-format runai_streamer``), which reads
    tensors from the cache volume on ``concurrency`` threads while it copies earlier ones to the GPUs; ``distributed:
    true`` lets each GPU of a tensor-parallel worker read its own part. Off by default (``format: default``, vLLM's
    own loader, as upstream's recipes run); vLLM targets only."""

    format: Literal["default", "runai-streamer"] = "default"
    concurrency: Optional[int] = Field(default=None, ge=1, le=256)
    distributed: Optional[bool] = None

    @model_validator(mode="after")
    def _check(self):
        if self.format == "default":
            extra = sorted(_camel(f) for f in self.model_fields_set - {"format"})
            if extra:
                raise _key_error(
                    extra[0], "has no effect with format: default (vLLM's own loader); set format: runai-streamer or remove it"
                )
        return self


class StackConfig(_Model):
    target: Optional[str] = None
    # The choices of every axis come from stacks/registry/__init__.py (the one registry of choices).
    model: registry.ModelId = registry.DEFAULT_MODEL
    runtime: Optional[registry.RuntimeId] = None
    gpu: Optional[registry.GpuId] = None
    topology: Optional[registry.TopologyId] = None
    shape: Optional[registry.ShapeId] = None
    spec: Optional[registry.SpecId] = None
    routing: Optional[registry.RoutingId] = None
    precision: Optional[registry.PrecisionId] = None
    context: Optional[registry.ContextId] = None
    workload: Optional[registry.WorkloadId] = None
    fabric: Optional[registry.FabricId] = None
    profile: Optional[registry.ProfileId] = None
    # Move a disaggregated target's KV transfer onto another fabric than its recipe's (e.g. an
    # InfiniBand recipe on EKS): see stacks/serving/fabric.py.
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
    replicas: dict[str, Any] = Field(default_factory=dict)
    wait: WaitConfig = Field(default_factory=WaitConfig)
    # Pin the downloaded checkpoint to a Hugging Face revision (a commit or tag), where the model's
    # download Job supports it; promotion refuses floating revisions such as "main".
    model_revision: Optional[str] = None
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)  # optional, off by default
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)  # optional, off by default
    network_policy: NetworkPolicyConfig = Field(default_factory=NetworkPolicyConfig)  # optional, off by default
    compile_cache: CompileCacheConfig = Field(default_factory=CompileCacheConfig)  # on by default; enabled: false opts out
    fast_startup_probe: FastStartupProbeConfig = Field(
        default_factory=FastStartupProbeConfig
    )  # off by default; enabled: true opts in
    model_loader: ModelLoaderConfig = Field(default_factory=ModelLoaderConfig)  # vLLM's own loader by default
    # Pause: every GPU worker component at 0 replicas (frontend and cache kept); stacks/serving/autoscaling.py.
    paused: bool = False
    # Per component: minReplicas, maxReplicas, metric, target (a KEDA ScaledObject on the component's DGDSA);
    # validated by stacks.serving.autoscaling.parse_autoscaling against the DGD's components.
    autoscaling: dict[str, Any] = Field(default_factory=dict)

    @field_validator("target")
    @classmethod
    def _target(cls, v):
        if v is not None and not v.strip():
            raise ValueError(f"{v!r} is empty; choose a catalog id (python -m stacks targets) or leave it out")
        return v

    _ns = field_validator("namespace")(classmethod(lambda cls, v: namespace_name(v)))

    @field_validator("hf_token_secret_name")
    @classmethod
    def _secret_name(cls, v):
        why = dns_subdomain_problem(v) if v is not None else None
        if why:
            raise ValueError(f"{why}: not a valid Kubernetes Secret name")
        return v

    @field_validator("image_pull_secrets")
    @classmethod
    def _pull_secrets(cls, v):
        for name in v:
            why = dns_subdomain_problem(name)
            if why:
                raise ValueError(f"{why}: not a valid Kubernetes Secret name")
        dup = sorted({n for n in v if v.count(n) > 1})
        if dup:
            raise ValueError(f"{dup[0]!r} is listed twice")
        return v

    @field_validator("images")
    @classmethod
    def _images(cls, v):
        for comp, ref in v.items():
            if not comp or not comp.strip():
                raise ValueError(f"component {comp!r} is empty; use a component name or '*' for every container")
            why = image_problem(ref)
            if why:
                raise _key_error(
                    comp,
                    f"{ref!r}: {why}; use a pinned image such as "
                    "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0 or one with @sha256:<digest>",
                )
        return v

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, v):
        out = {}
        for k, n in v.items():
            if isinstance(n, bool) or not isinstance(n, (int, float, str)):
                raise _key_error(k, f"{n!r} is not a whole number between 0 and {MAX_REPLICAS}")
            try:
                num = Decimal(str(n).strip())
            except InvalidOperation:
                raise _key_error(k, f"{n!r} is not a whole number between 0 and {MAX_REPLICAS}") from None
            if not num.is_finite() or num != num.to_integral_value() or not 0 <= num <= MAX_REPLICAS:
                raise _key_error(k, f"{n!r} is not a whole number between 0 and {MAX_REPLICAS}")
            out[k] = int(num)
        return out

    @field_validator("model_revision")
    @classmethod
    def _revision(cls, v):
        why = (revision_problem(v) or branch_problem(v)) if v is not None else None
        if why:
            raise ValueError(f"{v!r}: {why}; use a 40-hex commit or a tag such as v1.0")
        return v

    @model_validator(mode="after")
    def _combinations(self):
        why = owned_namespace_problem(self.namespace, "namespace", "createNamespace") if self.create_namespace else None
        if why:
            raise _key_error("namespace", why)
        if self.storage.access_mode == "ReadOnlyMany" and not self.storage.existing_claim:
            raise _key_error(
                "storage.accessMode",
                "'ReadOnlyMany': the download Job writes the model into the stack's own claim; "
                "choose ReadWriteMany (default), ReadWriteOnce or ReadWriteOncePod, or point "
                "storage.existingClaim at a filled read-only claim",
            )
        return self


# Keys the serving layer does not own here: secrets (read only through pulumi.Config.get_secret, checked by
# stacks.program) and the cluster (stacks.config.stack). Other namespaces' keys (aws:, kubernetes:) are not ours.
SECRET_KEYS = {"hfToken", "kubeconfig", "ngcApiKey", "imagePullSecret", "frontDoorApiKeys"}
CLUSTER_KEYS = {"cluster", "kubeconfig"}
# Stack-wide sections parsed beside the serving keys (stacks.config.parse_spec), never per entry: the front door.
FRONT_DOOR = "frontDoor"
STACK_SECTIONS = {FRONT_DOOR}


def check_secret_keys(secret_keys) -> None:
    """A ``dynamo:`` key set as a Pulumi secret that the program never reads (a typo such as ``hfTokn``, or a
    plain key stored with ``--secret``) would be ignored silently: refuse it, naming the key (never the value)."""
    for key in sorted(set(secret_keys) - SECRET_KEYS):
        plain = key in {(f.alias or n) for n, f in StackConfig.model_fields.items()} | CLUSTER_KEYS
        why = (
            f"is not a secret setting; set it without --secret (`pulumi config set {NS}:{key} ...`)"
            if plain
            else f"is not a setting{_did_you_mean(key, sorted(SECRET_KEYS))}"
        )
        raise ConfigError(f"{NS}:{key}: set as a Pulumi secret, but {why}; secret settings: {', '.join(sorted(SECRET_KEYS))}")


def _fmt_loc(loc: tuple) -> str:
    return NS + ":" + ".".join(str(p) for p in loc)


def _model_at(model: type[BaseModel], loc: tuple) -> Optional[type[BaseModel]]:
    """The pydantic model that holds the last key of ``loc`` (for the valid-keys list)."""
    for part in loc[:-1]:
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part or n == part), None)
        ann = getattr(field, "annotation", None) if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return model


def _did_you_mean(word: object, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _error_text(err: dict, root: Optional[type[BaseModel]] = None, skip: int = 0) -> str:
    """One line per pydantic error: ``dynamo:<key>: <why>`` with the value and the valid choices.
    ``root``/``skip``: the model validated and how many leading ``loc`` parts name where it sits."""
    loc = tuple(err["loc"])
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    m = re.match(r"@([^@]*)@(.*)", msg, re.S)
    if m:  # a model validator naming one of its keys
        loc, msg = loc + (m.group(1),), m.group(2)
    if msg.startswith(NS + ":"):  # the validator already named the key
        return msg
    key = _fmt_loc(loc)
    value = err.get("input")
    typ = err["type"]
    if typ == "extra_forbidden":
        model = _model_at(root or StackConfig, loc[skip:]) if loc[skip:] else None
        valid = sorted((f.alias or n) for n, f in model.model_fields.items()) if model else []
        hint = f"; valid keys here: {', '.join(valid)}{_did_you_mean(loc[-1], valid)}" if valid else ""
        return f"{key}: unknown key{hint}"
    if typ == "literal_error":
        expected = re.findall(r"'([^']*)'", err["ctx"]["expected"])
        return f"{key}: {_short(value)} is not valid; choose one of {err['ctx']['expected']}{_did_you_mean(value, expected)}"
    if typ in ("missing",):
        return f"{key}: required"
    if m or typ == "value_error":
        return f"{key}: {msg}"
    return f"{key}: {msg} (got {_short(value)})"


INVALID = "invalid stack config:\n  "  # the first line of a ConfigError that lists problems, a line each


def validation_error(e: ValidationError, prefix: tuple = (), root: Optional[type[BaseModel]] = None) -> ConfigError:
    errs = [dict(x, loc=prefix + tuple(x["loc"])) for x in e.errors()]
    return ConfigError(INVALID + "\n  ".join(_error_text(x, root, len(prefix)) for x in errs))


def combined_error(errors: list[ConfigError]) -> ConfigError:
    """One ConfigError for the problems of several independent parts of a stack (the cluster, each serving entry, the
    stack-wide sections), a line each, so one ``up`` or ``render`` names them all."""
    if len(errors) == 1:
        return errors[0]
    lines = [line for e in errors for line in (str(e)[len(INVALID) :].split("\n  ") if str(e).startswith(INVALID) else [str(e)])]
    return ConfigError(INVALID + "\n  ".join(lines))


def parse(raw: dict[str, Any]) -> StackConfig:
    """Validate the ``dynamo:`` mapping (without the namespace prefix, secrets already removed)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{NS}: the stack config is a {type(raw).__name__}, not a mapping of dynamo: keys")
    data = {k: v for k, v in raw.items() if k not in SECRET_KEYS | CLUSTER_KEYS | STACK_SECTIONS}
    try:
        cfg = StackConfig.model_validate(data, by_name=False)
    except ValidationError as e:
        raise validation_error(e) from None
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
        # An id upstream renamed finds its successor (stacks.catalog.Catalog); deprecation_warnings says so at `up`.
        if cfg.target not in cat:
            raise ConfigError(
                f"{NS}:target: {cfg.target!r} is not in the catalog{_did_you_mean(cfg.target, cat).replace(';', ' -', 1)}; "
                f"choose one of: {', '.join(sorted(cat))}"
            )
        t = cat[cfg.target]
        for axis in SELECT_ORDER:
            v = getattr(cfg, axis)
            if v is not None and (axis != "model" or "model" in cfg.model_fields_set) and t.axis(axis) != v:
                raise ConfigError(
                    f"{NS}:{axis}: {v!r} contradicts {NS}:target {t.id} ({axis}={t.axis(axis)}); "
                    f"remove {NS}:{axis} or the target (valid choice with this target: {t.axis(axis)!r})"
                )
        return t
    fam = next(f for f in families().values() if f.id == cfg.model)
    explicit = {a: getattr(cfg, a) for a in SELECT_ORDER[1:] if getattr(cfg, a) is not None}
    pool = list(fam.targets)
    chosen: dict[str, str] = {"model": cfg.model}
    for axis in SELECT_ORDER[1:]:
        values = sorted({val for t in pool if (val := t.axis(axis)) is not None})
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
        options = sorted({val for t in (compatible or pool) if (val := t.axis(axis)) is not None})
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
        raise ConfigError(
            f"{NS}: config matches {len(pool)} targets ({ids}); set more of {', '.join(SELECT_ORDER)} or dynamo:target"
        )
    return pool[0]


def deprecation_warnings(cfg: StackConfig) -> list[str]:
    """What ``up`` warns about the target a config names: a renamed id (it now deploys the successor under the new
    DGD and component names), a deprecated target (upstream dropped it; names the successor), or axes that select
    the successor of a renamed id (a stack created before the rename had the old DGD)."""
    from stacks.catalog import renamed, resolve

    if cfg.target:
        return [f"{NS}:target: {w}" for w in [resolve(cfg.target)[1]] if w]
    t = select_target(cfg)
    if t.successor or t.legacy:
        return [f"{NS}: {resolve(t.id)[1]} (selected by the config's axes)"]
    old = sorted(o for o, n in renamed().items() if n == t.id)
    if old:
        return [
            f"{NS}: the config selects {t.id} (DynamoGraphDeployment {t.dgd_name!r}), upstream's Dynamo 1.6 name of {old[0]}; "
            f"a stack created before deployed that target's DGD and replaces it now (the model cache is kept; "
            f"see README 'Upgrading Dynamo'); set {NS}:target: {t.id} to silence this warning"
        ]
    return []


def _hint(axis: str, chosen: dict, values: list[str]) -> str:
    if axis == "topology" and chosen.get("runtime") == "trtllm":
        return " (TensorRT-LLM is aggregated-only here)"
    if axis == "spec" and chosen.get("gpu") and chosen.get("topology"):
        return f" ({chosen['gpu'].upper()} {'disaggregated' if chosen['topology'] == 'disagg' else 'aggregated'} has {', '.join(values)} only)"
    return ""


# --------------------------------------------------------------------------- the protected model cache: immutable claim fields
#
# A PVC's spec is immutable after creation except ``resources.requests`` (which may only grow, and only where
# the StorageClass allows expansion): https://kubernetes.io/docs/concepts/storage/persistent-volumes/. The
# Kubernetes provider replaces a claim whose storageClassName, accessModes, selector or volumeName changes
# (pulumi-kubernetes provider/pkg/provider/diff.go, forceNew "PersistentVolumeClaim"), deleting it first
# because the name stays the same. On a protected cache (retainOnDelete) that delete leaves the claim in
# the cluster, and the create that follows is a server-side apply onto it: the API server refuses the
# changed spec, and every later ``up`` fails the same way. So components.serving.ModelCache ignores the
# immutable fields of a protected claim (the provider plans an update, never a replacement), records
# the requested ones in CACHE_SPEC_ANNOTATION (so a change does produce an update), and refuses that
# update in a before_update resource hook (also on preview) with ``cache_migration_error``.

CACHE_SPEC_ANNOTATION = "dynamo.nvidia.com/cache-claim-spec"
IMMUTABLE_CLAIM_FIELDS = (
    "storageClassName",
    "accessModes",
    "volumeMode",
    "volumeName",
    "selector",
    "dataSource",
    "dataSourceRef",
)
_CLAIM_KEYS = {
    "storageClassName": "storage.className",
    "accessModes": "storage.accessMode",
    "resources.requests.storage": "storage.size",
}


def claim_spec_summary(spec: dict) -> str:
    """The immutable part of a claim spec as stable text (the annotation's value)."""
    return json.dumps(
        {k: spec.get(k) for k in IMMUTABLE_CLAIM_FIELDS if spec.get(k) is not None}, sort_keys=True, separators=(",", ":")
    )


def _size_of(spec: Any) -> Optional[Decimal]:
    try:
        return quantity_bytes(((spec or {}).get("resources") or {}).get("requests", {}).get("storage"))
    except (ValueError, AttributeError):
        return None


def cache_claim_changes(old_spec: Optional[dict], new_spec: dict) -> list[tuple[str, Any, Any]]:
    """(field, old, new) for every change the API server refuses on an existing claim: an immutable field,
    or a smaller size. ``old_spec`` None (no previous claim): nothing."""
    if not isinstance(old_spec, dict):
        return []
    out = [(f, old_spec.get(f), new_spec.get(f)) for f in IMMUTABLE_CLAIM_FIELDS if old_spec.get(f) != new_spec.get(f)]
    old_size, new_size = _size_of(old_spec), _size_of(new_spec)
    if old_size is not None and new_size is not None and new_size < old_size:
        out.append(
            (
                "resources.requests.storage",
                old_spec["resources"]["requests"]["storage"],
                new_spec["resources"]["requests"]["storage"],
            )
        )
    return out


def cache_migration_error(changes: list[tuple[str, Any, Any]], claim: str, namespace: str) -> str:
    """What to do instead of changing the protected cache's claim in place."""
    what = "; ".join(
        f"{NS}:{_CLAIM_KEYS.get(f, 'storage (claim spec.' + f + ')')}: {old!r} -> {new!r}" for f, old, new in changes
    )
    return (
        f"{what}: the protected model-cache claim {namespace}/{claim} exists, and Kubernetes cannot change this on an "
        "existing claim (its class, access modes and volume are fixed, and it can only grow). Nothing was changed. "
        "To migrate: (1) new claim: keep the current value here, create the new claim yourself (and fill it, or let the "
        f"download Job do it), then set {NS}:storage.existingClaim to its name; or (2) opt out of protection and "
        f"start over: `pulumi config set --path {NS}:storage.protect false` with the current value, `pulumi up`, then "
        "change the value and `pulumi up` again (the old claim and its cached model are deleted and downloaded again)."
    )


# --------------------------------------------------------------------------- secret values and config namespaces
#
# Secret values are checked for shape where the program can read them (``pulumi up``: stacks.config.pulumi_config reads
# them from the Pulumi runtime), and never printed: a message names the key and what is wrong, not the value.
# ``render --stack`` sees only ciphertext (``secure: v1:...``) and says so.

# Config namespaces a stack file may hold besides dynamo: the providers the program uses, and Pulumi's own.
KNOWN_NAMESPACES = ("dynamo", "aws", "kubernetes", "pulumi", "eks")


def check_no_empty_values(raw: dict) -> None:
    """A top-level key written with no value (YAML ``gpu:``, ``gpu: ""`` or ``gpu: null``, which the Pulumi CLI hands to
    the program as "") is refused, naming every such key: read as unset, it would silently take the default (a GPU, a
    namespace, a model the reviewer did not see chosen). Removing the key is how a stack asks for the default. ``raw``:
    the plain keys without the namespace, as ``parse_spec`` takes them."""
    empty = sorted(k for k, v in raw.items() if isinstance(k, str) and (v is None or v == ""))
    if empty:
        raise ConfigError(
            "; ".join(f"{NS}:{k}: the value is empty, which would silently take the default" for k in empty)
            + f"; remove the key to take the default (`pulumi config rm {NS}:{empty[0]}`) or give it a value"
        )


def check_config_namespaces(keys) -> None:
    """A key whose namespace is a misspelling of ``dynamo`` (``dyanmo:gpu``) would be ignored silently (the program
    reads ``dynamo:`` keys only): refuse it, naming the key. Other namespaces (aws:, kubernetes:) are other programs'."""
    for key in sorted(k for k in keys if isinstance(k, str)):
        ns, sep, rest = key.partition(":")
        if not sep or ns == NS or ns in KNOWN_NAMESPACES:
            continue
        if difflib.get_close_matches(ns.lower(), [NS], n=1, cutoff=0.6) or ns.lower() == NS:
            raise ConfigError(
                f"{key}: {ns!r} is not this project's config namespace, so the program would never read "
                f"this key; did you mean '{NS}:{rest}'? (the project is {NS!r}; its keys are {NS}:<key>)"
            )
