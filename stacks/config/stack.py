"""The whole stack's spec, re-exported by ``stacks.config`` (whose docstring says what it is): the cluster source
(``dynamo:cluster``), the serving entries (``dynamo:serve``), what is known of the secrets (names only), the
stack-wide sections, and ``parse_spec``, which reads them all in one pass. It is a module of its own, loaded on first
use, because it reads the EKS keys (``stacks.config.eks``): ``stacks.config.keys`` (all that ``render --target``
and ``render --all`` parse) is then imported without them.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, ClassVar, Literal, Optional, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stacks.config.eks import EksConfig, NvidiaStack, apply_aws_region, resolve_region
from stacks.config.front_door import API_KEYS_SECRET, FrontDoorConfig
from stacks.config.keys import (
    FRONT_DOOR,
    NS,
    SECRET_KEYS,
    BenchmarkConfig,
    ConfigError,
    ObservabilityConfig,
    StackConfig,
    _key_error,
    INVALID,
    _Model,
    _short,
    check_no_empty_values,
    combined_error,
    check_secret_keys,
    parse,
    quantity_bytes,
    validation_error,
)
from stacks.config.secret_values import check_secret_values

# --------------------------------------------------------------------------- the cluster source (dynamo:cluster)

MODES = ("render", "kubeconfig", "eks", "stack")
# A stack name as StackReference takes it: org/project/stack (Pulumi Cloud: the org or user; a DIY backend: the
# literal "organization"), or the bare stack name on a legacy DIY backend (Pulumi automation docs,
# fullyQualifiedStackName: "legacy DIY backends ... only use the stack name").
_STACK_REF = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9][-A-Za-z0-9_.]*")


class ClusterVariant:
    """What one cluster mode's config means, as class attributes of its variant (one pydantic model per mode, below,
    holding that mode's keys and nothing else): ``READS_KUBECONFIG``, it reads the secret ``dynamo:kubeconfig`` (else
    ``kubeconfigPath`` or KUBECONFIG); ``CREATES_PULL_SECRETS``, the stack creates the image pull Secrets from
    ``dynamo:ngcApiKey``/``imagePullSecret``; ``CLUSTER_ONLY``, a stack may serve nothing (``dynamo:serve: []``) and
    build the cluster alone. What the mode means to the plans is its ``stacks.modes.ClusterMode`` (stacks/modes/)."""

    READS_KUBECONFIG: ClassVar[bool] = False
    CREATES_PULL_SECRETS: ClassVar[bool] = False
    CLUSTER_ONLY: ClassVar[bool] = False

    @classmethod
    def keys(cls) -> frozenset[str]:
        """The ``dynamo:cluster`` keys this mode reads, as written in the stack file (camelCase)."""
        fields = cls.model_fields  # type: ignore[attr-defined]  # every variant is also a pydantic model
        return frozenset(f.alias or name for name, f in fields.items()) - {"mode"}


def _not_blank(v: Optional[str], what: str = "") -> Optional[str]:
    if v is not None and (not v.strip() or v != v.strip() or "\x00" in v):
        raise ValueError(f"{v!r} is empty or has surrounding whitespace{what}")
    return v


class RenderCluster(ClusterVariant, _Model):
    """``mode: render``: manifests written to ``renderDir``; no cluster, no credentials, no Helm charts."""

    mode: Literal["render"] = "render"
    render_dir: str = "rendered"

    @field_validator("render_dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        return _not_blank(v, "; a render stack writes its manifests to this directory and never talks to a cluster") or v


class KubeconfigCluster(ClusterVariant, _Model):
    """``mode: kubeconfig``: an existing cluster (secret ``dynamo:kubeconfig``, else ``kubeconfigPath``/KUBECONFIG, and
    ``context``). ``installDevicePlugins``: the device plugins of the entries' fabrics and the NVIDIA stack
    (``nvidiaStack``) too; ``installPlatform``: the Dynamo platform (such clusters usually have it)."""

    READS_KUBECONFIG: ClassVar[bool] = True

    mode: Literal["kubeconfig"]
    kubeconfig_path: Optional[str] = None
    context: Optional[str] = None
    install_device_plugins: bool = False
    nvidia_stack: NvidiaStack = "device-plugin"
    install_platform: Optional[bool] = None

    @field_validator("kubeconfig_path", "context")
    @classmethod
    def _names(cls, v: Optional[str]) -> Optional[str]:
        return _not_blank(v)

    @model_validator(mode="after")
    def _plugins(self):
        if "nvidia_stack" in self.model_fields_set and not self.install_device_plugins:
            raise _key_error(
                "nvidiaStack",
                f"{self.nvidia_stack!r} has no effect without installDevicePlugins: true (the "
                "cluster's own NVIDIA stack is used); set installDevicePlugins: true or remove it",
            )
        return self


class StackCluster(ClusterVariant, _Model):
    """``mode: stack``: the cluster of a cluster-only stack, read through a StackReference at ``up``."""

    CREATES_PULL_SECRETS: ClassVar[bool] = True

    mode: Literal["stack"]
    stack: Optional[str] = None

    @model_validator(mode="after")
    def _stack_name(self):
        """``stack``: set, and a stack name as StackReference takes it."""
        stack = self.stack
        if not stack:
            raise _key_error(
                "stack",
                "not set; cluster.mode stack serves on the cluster of a cluster-only stack: "
                "set cluster.stack to its name, e.g. org/dynamo/h100-cluster",
            )
        if not _STACK_REF.fullmatch(stack):
            raise _key_error(
                "stack",
                f"{stack!r} is not a stack name org/project/stack (e.g. org/dynamo/h100-cluster; "
                "a DIY backend's org is 'organization') or a bare stack name (legacy DIY backends)",
            )
        # Pulumi limits stack (and project) names to 100 characters (pulumi/pulumi pkg/backend/diy store.go:
        # "stack names are limited to 100 characters and may only contain alphanumeric, hyphens, underscores, or periods").
        long = [p for p in stack.split("/") if len(p) > 100]
        if long:
            raise _key_error(
                "stack",
                f"{stack[:40]!r}... has a name part of {len(long[0])} characters; Pulumi stack and "
                "project names are at most 100 characters (org/project/stack)",
            )
        return self


class EksCluster(ClusterVariant, EksConfig):
    """``mode: eks``: the EKS cluster this stack creates (the EKS keys: ``stacks.config.eks.EksConfig``), with the
    Dynamo platform unless ``installPlatform: false``."""

    CREATES_PULL_SECRETS: ClassVar[bool] = True
    CLUSTER_ONLY: ClassVar[bool] = True

    mode: Literal["eks"]
    install_platform: Optional[bool] = None


# A stack's cluster config: its mode's variant.
ClusterConfig = Union[RenderCluster, KubeconfigCluster, StackCluster, EksCluster]
ClusterSource = Annotated[ClusterConfig, Field(discriminator="mode")]
CLUSTER_VARIANTS: dict[str, type] = {get_args(c.model_fields["mode"].annotation)[0]: c for c in get_args(ClusterConfig)}


class _Mode(_Model):
    """``cluster.mode`` alone, read first: it decides which variant reads the other keys."""

    model_config = ConfigDict(extra="ignore")
    mode: Literal["render", "kubeconfig", "eks", "stack"] = "render"


def cluster_variant(mode: str) -> Any:
    """The variant (a ``ClusterVariant`` pydantic model) of a mode name."""
    return CLUSTER_VARIANTS[mode]


def cluster_config(raw: dict[str, Any]) -> ClusterConfig:
    """``dynamo:cluster`` as its mode's variant. A key of another mode would be ignored silently (``region`` on a render
    stack): it is refused, naming the modes that read it; every problem of the section is reported at once."""
    value = raw.get("cluster")
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(
            f"{NS}:cluster: {value!r} is not a mapping; set cluster.mode to one of {', '.join(repr(m) for m in MODES)} "
            "with its keys, e.g. {mode: render, renderDir: rendered}"
        )
    try:
        mode = _Mode.model_validate(value, by_name=False).mode
    except ValidationError as e:
        raise validation_error(e, ("cluster",), _Mode) from None
    variant = cluster_variant(mode)
    errors, own = [], {}
    for key, v in value.items():
        readers = [m for m in MODES if key in cluster_variant(m).keys()]
        if key == "mode" or key in variant.keys() or not readers:
            own[key] = v  # its own keys, and unknown ones (refused below, with the mode's valid keys)
        else:
            errors.append(
                ConfigError(
                    f"{INVALID}{NS}:cluster.{key}: {_short(v)} has no effect with cluster.mode {mode!r}; it applies to "
                    f"mode {' or '.join(repr(m) for m in readers)}"
                )
            )
    try:
        checked = variant.model_validate(own, by_name=False)  # camelCase keys only, as in the stack file
    except ValidationError as e:
        errors.append(validation_error(e, ("cluster",), variant))
    if errors:
        raise combined_error(errors)
    return checked


# --------------------------------------------------------------------------- serving entries (dynamo:serve)

SERVE = "serve"
# Keys that belong to the stack, not to an entry.
STACK_KEYS = frozenset(
    {
        "cluster",
        "kubeconfig",
        "hfToken",
        "ngcApiKey",
        "imagePullSecret",
        SERVE,
        "observability",
        "benchmark",
        FRONT_DOOR,
        API_KEYS_SECRET,
    }
)
ENTRY_ONLY = frozenset({"name", "overrides"})
_NOT_PER_ENTRY = ("cluster", "hfToken", "kubeconfig", "ngcApiKey", "imagePullSecret", SERVE, FRONT_DOOR, API_KEYS_SECRET)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ArgsOverride(_Strict):
    """Engine arguments: ``set`` replaces a flag's value (the flag must exist), ``append`` adds tokens,
    ``remove`` drops a flag and its value."""

    set: dict[str, str] = Field(default_factory=dict)
    append: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)

    @field_validator("set", "remove")
    @classmethod
    def _flags(cls, v):
        for flag in v:
            if not str(flag).startswith("-"):
                raise ValueError(f"{flag!r} is not a flag (flags start with '-')")
        return v


class ResourcesOverride(_Strict):
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)

    @field_validator("limits", "requests")
    @classmethod
    def _quantities(cls, v):
        for k, q in v.items():
            if isinstance(q, bool):
                raise ValueError(f"{k}: {q!r} is a boolean, not a quantity")
            try:
                n = quantity_bytes(str(q))
                if n < 0:
                    raise ValueError(f"{q!r} is negative")
            except ValueError as e:
                raise ValueError(f"{k}: {e}") from None
            # Extended resources (a domain-prefixed name such as nvidia.com/gpu or vpc.amazonaws.com/efa) are counted in
            # whole units: the API server refuses a quantity whose milli-value is not a multiple of 1000
            # (kubernetes/kubernetes pkg/apis/core/helper/helpers.go IsIntegerResourceName: every extended resource;
            # pkg/apis/core/validation ValidateResourceQuantityValue: "must be an integer").
            if "/" in str(k) and not str(k).startswith("kubernetes.io/") and n != n.to_integral_value():
                raise ValueError(
                    f"{k}: {q!r} is not a whole number; {k} is an extended resource, counted in whole units "
                    f"(a GPU cannot be split by a request); use 0, 1, 2..."
                )
        return v


class ComponentOverride(_Strict):
    args: ArgsOverride = Field(default_factory=ArgsOverride)
    env: dict[str, str] = Field(default_factory=dict)
    resources: ResourcesOverride = Field(default_factory=ResourcesOverride)

    @field_validator("env")
    @classmethod
    def _env_names(cls, v):
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v


class ServeEntry(BaseModel):
    """One serving entry as parsed: where its errors point, its validated serving keys, and what only its plan can check
    (``name`` defaults to its DGD's name; ``overrides`` are checked against its target's components)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)

    key: str  # "dynamo:serve[1]" (or "dynamo" for a single-target stack)
    config: StackConfig
    name: Any = None  # the configured name (checked with the plan's default)
    named: bool = False  # whether ``name`` is set (else the DGD's name)
    overrides: Any = None  # the raw ``overrides`` mapping (component names are the target's)
    raw: dict[str, Any]  # the entry's keys with the stack's defaults merged in (what the plain-secret checks read)


def entry_prefix(message: str, key: str) -> str:
    """Point a ConfigError about per-entry keys at the entry: ``dynamo:gpu`` -> ``dynamo:serve[1].gpu``."""
    skip = "|".join(_NOT_PER_ENTRY)
    return re.sub(rf"(?<![\w.\[]){NS}:(?!(?:{skip})\b)(?=[A-Za-z])", f"{key}.", message.replace(f"{NS}: ", f"{key}: "))


def entry_configs(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(error key, entry config)`` per entry: the stack's top-level serving keys are the defaults."""
    entries = raw.get(SERVE)
    if "name" in raw:  # an entry's name; at the top level it would name nothing (or every entry alike)
        raise ConfigError(
            f"{NS}:name: {raw['name']!r} names a {NS}:serve entry and has no effect at the top level; "
            f"set it inside an entry ({NS}:serve[0].name), or remove it (a single-target stack is named by its stack)"
        )
    defaults = {k: v for k, v in raw.items() if k not in STACK_KEYS}
    if entries is None:
        return [(NS, dict(raw))]
    mode = raw["cluster"].get("mode") if isinstance(raw.get("cluster"), dict) else None
    if entries == [] and mode in MODES and cluster_variant(mode).CLUSTER_ONLY:
        return []  # a cluster-only stack (parse_spec checks it sets nothing to serve)
    if not isinstance(entries, list) or not entries:
        raise ConfigError(
            f"{NS}:{SERVE}: {entries!r} is not a non-empty list of serving entries (each a mapping with target or axes); "
            f"an empty list is a cluster-only stack, which needs {NS}:cluster.mode: eks"
        )
    out = []
    for i, e in enumerate(entries):
        key = f"{NS}:{SERVE}[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{key}: {e!r} is not a mapping (target or axes, namespace, replicas, images, overrides...)")
        bad = sorted(set(e) & STACK_KEYS)
        if bad:
            raise ConfigError(f"{key}.{bad[0]}: is a stack-wide key; set it once at the top level ({NS}:{bad[0]})")
        merged = {**defaults, **e}
        for sub in ("storage", "wait"):  # mappings merge key by key
            if isinstance(defaults.get(sub), dict) and isinstance(e.get(sub), dict):
                merged[sub] = {**defaults[sub], **e[sub]}
        merged.update({k: raw[k] for k in ("cluster",) if k in raw})
        out.append((key, merged))
    return out


def serve_entries(raw: dict[str, Any], check=None) -> list[ServeEntry]:
    """Every entry's serving keys validated (``stacks.config.keys.parse``, errors pointed at the entry); ``check(entry)``
    runs the stack's own checks on each (the HF token's presence) in the same pass."""
    out, errors = [], []
    for key, cfg_raw in entry_configs(raw):
        body = {k: v for k, v in cfg_raw.items() if k not in ENTRY_ONLY}
        try:
            entry = ServeEntry(
                key=key,
                config=parse(body),
                name=cfg_raw.get("name"),
                named="name" in cfg_raw,
                overrides=cfg_raw.get("overrides"),
                raw=body,
            )
            if check is not None:
                check(entry)
        except ConfigError as e:
            errors.append(ConfigError(entry_prefix(str(e), key) if key != NS else str(e)))
            continue
        out.append(entry)
    if errors:  # every entry's problems at once
        raise combined_error(errors) from None
    return out


# --------------------------------------------------------------------------- secrets (names only; values never needed)


def check_plain_secrets(raw: dict[str, Any]) -> None:
    """Secret keys must be Pulumi secrets: a plain value is refused (its text is never repeated)."""
    for key in sorted(SECRET_KEYS & set(raw)):
        raise ConfigError(
            f"{NS}:{key}: is set in plain text; it must be a Pulumi secret: "
            f"`pulumi config rm {NS}:{key} && pulumi config set --secret {NS}:{key} <value>`"
        )


def check_secrets(secret_keys: frozenset[str], cfg: StackConfig, require_present: bool = True, single: bool = True) -> None:
    """The HF token Secret the serving objects name must be obtainable, one way only.
    ``require_present=False`` (render for review): committed stacks often leave the token to the
    environment that deploys them, so only its absence is not an error there. ``single``: in a
    ``dynamo:serve`` stack one namespace may use an existing Secret while another gets the token."""
    has_token = "hfToken" in secret_keys
    if single and cfg.hf_token_secret_name and has_token:
        raise ConfigError(
            f"{NS}:hfTokenSecretName: {cfg.hf_token_secret_name!r} together with the secret {NS}:hfToken; "
            f"set one: the token (the stack creates the Secret) or the name of an existing Secret"
        )
    if require_present and not cfg.hf_token_secret_name and not has_token:
        raise ConfigError(
            f"{NS}:hfToken is not set: run `pulumi config set --secret {NS}:hfToken <token>` "
            f"or set {NS}:hfTokenSecretName to an existing Secret with key HF_TOKEN"
        )


def check_secrets_in_created_namespaces(cfg: StackConfig, creates_pull_secrets: bool) -> None:
    """A Secret the stack reads but does not make must exist before ``up``; in a namespace the same ``up`` creates
    (``createNamespace: true``) it cannot, so refuse the pair, naming both keys. A namespace that already exists is the
    user's (it holds their Secret), and a stack that "creates" it adopts it: the Kubernetes provider's server-side apply
    create upserts an existing object (pulumi-kubernetes 4.25 ``await.go``: "we always send a PATCH request during
    creates with SSA enabled"), so its later destroy would delete the user's namespace with their Secret in it."""
    if not cfg.create_namespace:
        return
    theirs = [(f"{NS}:hfTokenSecretName", f"{cfg.hf_token_secret_name!r} names a Secret")] if cfg.hf_token_secret_name else []
    if cfg.image_pull_secrets and not creates_pull_secrets:
        theirs.append((f"{NS}:imagePullSecrets", f"{list(cfg.image_pull_secrets)!r} names Secrets"))
    for key, value in theirs:
        raise ConfigError(
            f"{key}: {value} that must exist in namespace {cfg.namespace!r} before `up`, but this stack creates that "
            f"namespace ({NS}:createNamespace: true), so none can exist yet. Either create the namespace and the "
            f"Secrets yourself and set {NS}:createNamespace: false (the namespace is then yours, and destroy "
            f"leaves it), or let the stack make the Secret"
            + (
                f": remove {key} and run `pulumi config set --secret {NS}:hfToken <token>`"
                if key.endswith("hfTokenSecretName")
                else f" on a cluster it creates (cluster.mode eks or stack, from {NS}:ngcApiKey)"
            )
        )


def check_unused_secrets(secret_keys: frozenset[str], mode: str) -> None:
    """A secret the stack never reads would be ignored silently, and two that fill the same Secret would leave one
    unused: refuse them (names only, never values). ``kubeconfig`` is read by ``cluster.mode: kubeconfig`` only;
    ``ngcApiKey``/``imagePullSecret`` only on a cluster this stack creates or reaches through a cluster stack (where it
    creates the ``imagePullSecrets``; one with no ``imagePullSecrets`` yet may keep the key for a later entry)."""
    pull = {"ngcApiKey", "imagePullSecret"} & secret_keys
    if len(pull) == 2:
        raise ConfigError(
            f"{NS}:ngcApiKey and {NS}:imagePullSecret: both are set, and both fill the same image pull "
            f"Secret (one would be ignored); keep one: {NS}:ngcApiKey (nvcr.io) or {NS}:imagePullSecret "
            f"(a whole .dockerconfigjson, any registry)"
        )
    if "kubeconfig" in secret_keys and not cluster_variant(mode).READS_KUBECONFIG:
        raise ConfigError(
            f"{NS}:kubeconfig: set as a secret, but cluster.mode is {mode!r}, which never reads it "
            f"(only cluster.mode 'kubeconfig' does); remove it: `pulumi config rm {NS}:kubeconfig`"
        )
    if pull and not cluster_variant(mode).CREATES_PULL_SECRETS:
        key = sorted(pull)[0]
        raise ConfigError(
            f"{NS}:{key}: set as a secret, but this stack never creates an image pull Secret (cluster.mode is "
            f"{mode!r}: the cluster's own Secrets are named by {NS}:imagePullSecrets); remove it "
            f"(`pulumi config rm {NS}:{key}`); only an EKS or cluster-stack stack creates pull Secrets from it"
        )


def check_front_door_secrets(door: FrontDoorConfig, secret_keys: frozenset[str], require_present: bool = True) -> None:
    """The API keys are read only with ``frontDoor.auth.mode: apiKeys``: refuse them unused, and require them there
    (when rendering for review they may be left to the environment that deploys, like the HF token)."""
    key = f"{NS}:{API_KEYS_SECRET}"
    wants = door.enabled and door.auth.mode == "apiKeys"
    if API_KEYS_SECRET in secret_keys and not wants:
        raise ConfigError(
            f"{key}: set as a secret, but {NS}:frontDoor.auth.mode is not 'apiKeys' (or the front door is off), "
            f"so nothing reads it; set frontDoor.auth.mode: apiKeys, or `pulumi config rm {key}`"
        )
    if wants and require_present and API_KEYS_SECRET not in secret_keys:
        raise ConfigError(
            f"{key} is not set: {NS}:frontDoor.auth.mode apiKeys needs one key per client, e.g. "
            f"`pulumi config set --secret --path '{key}.team-a' \"$(openssl rand -hex 32)\"`"
        )


def kubeconfig_path(cluster: ClusterConfig, secret_keys: frozenset[str], env: Optional[dict[str, str]]) -> Optional[str]:
    """The kubeconfig file an existing-cluster stack uses (None: the secret ``dynamo:kubeconfig``).
    ``env=None`` (render, review): the file is not looked for, since it belongs to the machine
    that runs ``up`` (the local stack's kubeconfig exists only while the local control plane runs)."""
    if "kubeconfig" in secret_keys or env is None:
        return None
    own = cluster.kubeconfig_path if isinstance(cluster, KubeconfigCluster) else None  # the variant with the key
    path = own or (env or {}).get("KUBECONFIG")
    if not path:
        raise ConfigError(
            f"{NS}:cluster.kubeconfigPath: cluster.mode is kubeconfig but none of {NS}:kubeconfig (secret), "
            f"{NS}:cluster.kubeconfigPath, KUBECONFIG is set"
        )
    first = os.path.expanduser(path.split(os.pathsep)[0])
    if not os.path.isfile(first):
        key = f"{NS}:cluster.kubeconfigPath" if own else "KUBECONFIG"
        raise ConfigError(f"{key}: {path!r} is not a readable file; point it at a kubeconfig or set the secret {NS}:kubeconfig")
    return first


# --------------------------------------------------------------------------- the whole spec


class ProgramSpec(BaseModel):
    """One stack's configuration, every key checked: what the planning layers read (and nothing else)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)

    stack: str
    cluster: ClusterSource
    entries: list[ServeEntry]  # empty: a cluster-only stack (``dynamo:serve: []``, EKS)
    single: bool  # no ``dynamo:serve``: one target, named by the stack
    secret_keys: frozenset[str]  # the ``dynamo:`` keys set as Pulumi secrets (names only)
    require_secrets: bool  # False when rendering for review (secrets left to the deploying environment)
    kubeconfig_file: Optional[str] = None  # mode kubeconfig without the secret: the file ``up`` reads
    aws_region: Optional[str] = None
    # Stack-wide sections: a single-target stack's own; a dynamo:serve stack's top level (entries cannot set them).
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    front_door: FrontDoorConfig = Field(default_factory=FrontDoorConfig)

    @property
    def cluster_only(self) -> bool:
        return not self.entries

    @property
    def multi(self) -> bool:
        return not self.single


def _stack_section(model: Any, raw: dict[str, Any], key: str) -> Any:
    """A stack-wide section of a ``dynamo:serve`` stack, validated like a single-target stack's."""
    try:
        return model.model_validate(raw.get(key) or {})
    except ValidationError as e:
        raise validation_error(e, (key,), model) from None


def parse_spec(
    raw: dict[str, Any],
    stack: str,
    secret_keys: frozenset[str] = frozenset(),
    env: Optional[dict[str, str]] = None,
    aws_region: Optional[str] = None,
    secret_values: Optional[dict[str, Any]] = None,
) -> ProgramSpec:
    """Validate everything a stack sets, in one pass, before any plan: secrets (names; values where known, never
    printed), the cluster source, every serving entry, the stack-wide sections.

    ``raw``: the plain ``dynamo:`` keys without the namespace; ``secret_keys``: the ``dynamo:`` keys that are set
    as Pulumi secrets; ``env``: the environment of the ``up`` (None when rendering for review); ``aws_region``: the
    stack's ``aws:region``; ``secret_values``: the secrets' values where known (``up``: stacks.config.pulumi_config)."""
    secret_keys = frozenset(secret_keys)
    if secret_values:
        check_secret_values(secret_values)
    if not isinstance(raw, dict):
        parse(raw)  # the ConfigError for a config that is not a mapping
    check_no_empty_values(raw)  # an empty value would silently take the default
    if aws_region:
        raw = apply_aws_region(raw, aws_region)
    check_plain_secrets(raw)
    check_secret_keys(secret_keys)  # a secret the program never reads (a typo) would be ignored silently
    try:
        cluster = cluster_config(raw)
    except ConfigError as cluster_error:  # report the entries' problems with the cluster's, when they have any
        errors = [cluster_error]
        if raw.get(SERVE) != []:
            try:
                serve_entries(raw)
            except ConfigError as e:
                errors.append(e)
        raise combined_error(errors) from None
    if isinstance(cluster, RenderCluster) and not (cluster.render_dir or "").strip():
        raise ConfigError(
            f"{NS}:cluster.renderDir: {cluster.render_dir!r} is empty; a render stack writes manifests to a directory "
            f"and never talks to a cluster: set it (default 'rendered') or choose cluster.mode kubeconfig or eks"
        )
    kubeconfig_file = kubeconfig_path(cluster, secret_keys, env) if cluster.READS_KUBECONFIG else None
    single = SERVE not in raw
    common = dict(
        stack=stack,
        single=single,
        secret_keys=secret_keys,
        require_secrets=env is not None,
        kubeconfig_file=kubeconfig_file,
        aws_region=aws_region,
    )
    if raw.get(SERVE) == [] and cluster.CLUSTER_ONLY:  # a cluster-only stack
        for key in sorted(raw):
            if key not in STACK_KEYS or key in ("observability", "benchmark", FRONT_DOOR):
                raise ConfigError(
                    f"{NS}:{key}: has no effect in a cluster-only stack ({NS}:serve: []), which serves nothing; "
                    f"set it on a serving stack (cluster.mode: stack) or add entries to {NS}:serve"
                )
        assert isinstance(cluster, EksCluster), "only the eks variant builds a cluster alone (CLUSTER_ONLY)"
        cluster = resolve_region(cluster, raw.get("cluster") or {}, aws_region)
        check_front_door_secrets(FrontDoorConfig(), secret_keys)  # a cluster-only stack has no door: its keys are unused
        check_unused_secrets(secret_keys, cluster.mode)
        return ProgramSpec(cluster=cluster, entries=[], **common)

    def check(entry: ServeEntry) -> None:
        check_secrets(secret_keys, entry.config, require_present=env is not None, single=single)
        check_secrets_in_created_namespaces(entry.config, cluster.CREATES_PULL_SECRETS)

    entries = serve_entries(raw, check)
    if single:
        observability, benchmark = entries[0].config.observability, entries[0].config.benchmark
    else:
        observability = _stack_section(ObservabilityConfig, raw, "observability")
        benchmark = _stack_section(BenchmarkConfig, raw, "benchmark")
    front_door = _stack_section(FrontDoorConfig, raw, FRONT_DOOR)
    check_front_door_secrets(front_door, secret_keys, require_present=env is not None)
    check_unused_secrets(secret_keys, cluster.mode)
    return ProgramSpec(
        cluster=cluster, entries=entries, observability=observability, benchmark=benchmark, front_door=front_door, **common
    )
