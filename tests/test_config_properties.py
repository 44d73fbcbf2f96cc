"""Property-based tests (Hypothesis) over the stack config schema: whatever a stack sets, the program's
one builder (``stacks.program.build_program``, run by ``pulumi up`` and ``render --stack``) either
builds the objects or raises ``ConfigError``; never another exception, so a bad stack gets one message
naming the key instead of a traceback.

The inputs mix the schema's own keys and choices (so that deep paths are reached: valid targets, EKS
clusters, storage and waits) with wrong types, near-miss strings, huge numbers and unknown keys. The
runs are derandomized (same examples on every run) and keep no example database in the repository.
"""

from __future__ import annotations

import re

import typing
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stacks import catalog
from stacks.config.keys import ConfigError, StackConfig
from stacks.program import build_program
from stacks.config.stack import CLUSTER_VARIANTS
from stacks.program.render import program_for_stack

SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


def _aliases(model: type[BaseModel]) -> dict[str, Any]:
    return {(f.alias or n): f for n, f in model.model_fields.items()}


def _literals(annotation) -> list:
    out = []
    for a in typing.get_args(annotation) or ():
        if typing.get_origin(a) is typing.Literal:
            out += list(typing.get_args(a))
        else:
            out += _literals(a)
    if typing.get_origin(annotation) is typing.Literal:
        out += list(typing.get_args(annotation))
    return out


def _choices(model: type[BaseModel]) -> list:
    vals: list = []
    for f in model.model_fields.values():
        vals += _literals(f.annotation)
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            vals += _choices(ann)
    return vals


# The cluster's keys are its mode's: one pydantic variant per mode (stacks/config/stack.py).
CLUSTER_MODELS = list(CLUSTER_VARIANTS.values())

INTERESTING = (
    sorted({str(v) for v in _choices(StackConfig) + [c for m in CLUSTER_MODELS for c in _choices(m)]})
    + [
        "",
        " ",
        "-",
        "0",
        "-1",
        "1e400",
        "nan",
        "true",
        "null",
        "latest",
        "main",
        "refs/tags/../x",
        "a" * 300,
        "140Gi",
        "1.5Ti",
        "10G",
        "0Gi",
        "-5Gi",
        "2e11",
        "60m",
        "0s",
        "99999h",
        "dynamo",
        "Bad_NS",
        "123",
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0",
        "nvcr.io/x/y",
        "nvcr.io/x/y:latest ",
        "x@sha256:" + "a" * 64,
        "us-east-1",
        "us-east-1a",
        "us-west-2b",
        "mars-1",
        "cr-0123456789abcdef0",
        "banana",
        "10.0.0.0/16",
        "10.0.0.0/8",
        "1.33",
        "p5.48xlarge",
        "m7i.2xlarge",
        "/nonexistent/kc",
        "rendered",
        "Frontend",
        "agg",
        "*",
        "hf-token-secret",
    ]
    + sorted(catalog.targets())[:12]
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(INTERESTING),
    st.text(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(INTERESTING) | st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _mapping(model: type[BaseModel], depth: int = 0) -> st.SearchStrategy:
    """Dicts over the model's own keys (values: its choices, sub-models, or anything) plus the odd unknown key."""
    fields = _aliases(model)
    per_key = {}
    for key, f in fields.items():
        ann = f.annotation
        options = [values, st.sampled_from(INTERESTING)]
        lits = _literals(ann)
        if lits:
            options.append(st.sampled_from(lits))
        if isinstance(ann, type) and issubclass(ann, BaseModel) and depth < 2:
            options.append(_mapping(ann, depth + 1))
        per_key[key] = st.one_of(*options)
    known = st.fixed_dictionaries({}, optional=per_key)
    extra = st.dictionaries(st.text(min_size=1, max_size=10), values, max_size=1)
    return st.builds(lambda a, b: {**b, **a}, known, extra)


clusters = st.one_of(
    *[_mapping(m) for m in CLUSTER_MODELS],
    st.builds(
        lambda m, c: {**c, "mode": m},
        st.sampled_from(["render", "kubeconfig", "eks"]),
        st.one_of(*[_mapping(m) for m in CLUSTER_MODELS]),
    ),
    values,
)
configs = st.builds(
    lambda c, cl: {**c, **({"cluster": cl} if cl is not None else {})}, _mapping(StackConfig), st.none() | clusters
)


# Valid starting points (every committed stack, a sample of targets) with a few keys set to anything: this
# reaches the checks that only run once the rest of the config is right (EKS plans, overrides, waits).
def _committed_stacks() -> list[dict]:
    from stacks.program.render import REPO_ROOT, split_secrets, stack_raw_config

    out = []
    for p in sorted(REPO_ROOT.glob("Pulumi.*.yaml")):
        try:
            out.append(split_secrets(stack_raw_config(p.name[len("Pulumi.") : -len(".yaml")]))[0])
        except ConfigError:
            pass
    return out


BASES = _committed_stacks() + [{"target": t} for t in sorted(catalog.targets())[::5]]


def _path_values(model: type[BaseModel], prefix: str = "") -> dict[str, st.SearchStrategy]:
    out: dict[str, st.SearchStrategy] = {}
    for key, f in _aliases(model).items():
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(_path_values(ann, f"{prefix}{key}."))
        lits = _literals(ann)
        out[prefix + key] = st.one_of(values, st.sampled_from(INTERESTING), *([st.sampled_from(lits)] if lits else []))
    return out


PATHS = {**_path_values(StackConfig), **{k: v for m in CLUSTER_MODELS for k, v in _path_values(m, "cluster.").items()}}
for comp in ("*", "Frontend", "agg", "VllmDecodeWorker", "VllmPrefillWorker", "Nope"):
    PATHS[f"images.{comp}"] = st.one_of(st.sampled_from(INTERESTING), values)
    PATHS[f"replicas.{comp}"] = st.one_of(st.integers(-5, 200), values)
PATHS["cluster.mode"] = st.sampled_from(["render", "kubeconfig", "eks", "bad"])


def _set(raw: dict, path: str, value) -> dict:
    import copy

    out = copy.deepcopy(raw)
    parts = path.split(".")
    node = out
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    if value is _DELETE:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value
    return out


_DELETE = object()
mutation = st.sampled_from(sorted(PATHS)).flatmap(lambda p: st.tuples(st.just(p), st.one_of(PATHS[p], st.just(_DELETE))))


def _mutate(base: dict, muts: list) -> dict:
    for path, value in muts:
        base = _set(base, path, value)
    return base


mutated = st.builds(_mutate, st.sampled_from(BASES), st.lists(mutation, min_size=0, max_size=3))

# Several targets per stack (dynamo:serve entries with per-component overrides, stacks/serving/serve.py).
from stacks.serving.serve import ComponentOverride  # noqa: E402

overrides = st.dictionaries(
    st.sampled_from(["Frontend", "agg", "VllmDecodeWorker", "VllmPrefillWorker", "*", "x"]),
    st.one_of(_mapping(ComponentOverride), values),
    max_size=2,
)
entry_paths = {k: v for k, v in PATHS.items() if not k.startswith("cluster")}
entry_mutation = st.sampled_from(sorted(entry_paths)).flatmap(lambda p: st.tuples(st.just(p), entry_paths[p]))
entries = st.builds(
    lambda base, muts, name, ov: {
        **_mutate(base, muts),
        **({"name": name} if name is not None else {}),
        **({"overrides": ov} if ov else {}),
    },
    st.sampled_from([{"target": t} for t in sorted(catalog.targets())[::7]] + [{"gpu": "h100", "topology": "disagg"}]),
    st.lists(entry_mutation, max_size=2),
    st.none() | st.sampled_from(["a", "b", "Bad_Name", ""]),
    st.none() | overrides,
)
served = st.builds(
    lambda base, serve: {**{k: v for k, v in base.items() if k not in ("target",)}, "serve": serve},
    st.sampled_from(BASES),
    st.one_of(st.lists(entries, min_size=0, max_size=3), values),
)


secret_sets = st.sets(st.sampled_from(["hfToken", "kubeconfig", "ngcApiKey", "other"]), max_size=3)


NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def _only_config_errors(fn, *args, **kw):
    """``fn(*args)``: a ConfigError that names what to fix (a ``dynamo:`` key or the stack file), or a program whose
    every object is one the API server could take (apiVersion, kind, a valid name, a valid namespace when it has one)."""
    try:
        program = fn(*args, **kw)
    except ConfigError as e:
        msg = str(e)
        assert "dynamo:" in msg or "Pulumi." in msg, f"a config error that names no key nor stack file: {msg!r} for {args!r}"
        return None
    except Exception as e:  # noqa: BLE001 - the property: nothing but ConfigError escapes
        pytest.fail(f"{type(e).__name__} escaped for input {args!r}: {e}")
    for o in program.objects():
        meta = o.get("metadata") or {}
        assert o.get("apiVersion") and o.get("kind"), o
        assert isinstance(meta.get("name"), str) and len(meta["name"]) <= 253 and NAME.fullmatch(meta["name"]), (
            o.get("kind"),
            meta,
        )
        ns = meta.get("namespace")
        assert ns is None or (len(ns) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ns)), (o.get("kind"), meta)
    return program


@settings(max_examples=300, **SETTINGS)
@given(raw=configs, secrets=secret_sets)
def test_build_program_raises_only_config_errors(raw, secrets):
    _only_config_errors(build_program, raw, "prop", frozenset(secrets), env={})


@settings(max_examples=500, **SETTINGS)
@given(raw=mutated, secrets=secret_sets, env=st.sampled_from([None, {}]))
def test_valid_stacks_with_a_few_keys_changed_raise_only_config_errors(raw, secrets, env):
    _only_config_errors(
        build_program,
        raw,
        "prop",
        frozenset(secrets | {"hfToken"}) if "hfTokenSecretName" not in raw else frozenset(secrets - {"hfToken"}),
        env=env,
    )


@settings(max_examples=200, **SETTINGS)
@given(raw=served, env=st.sampled_from([None, {}]))
def test_serve_entries_with_overrides_raise_only_config_errors(raw, env):
    _only_config_errors(build_program, raw, "prop", frozenset({"hfToken", "ngcApiKey"}), env=env)


@settings(max_examples=150, **SETTINGS)
@given(raw=st.builds(lambda t, r: {"target": t, **r}, st.sampled_from(sorted(catalog.targets())), _mapping(StackConfig)))
def test_any_target_with_any_overrides_raises_only_config_errors(raw):
    raw["target"] = raw.get("target") if isinstance(raw.get("target"), str) else None
    _only_config_errors(build_program, raw, "prop", frozenset({"hfToken"}), env=None)


stack_docs = st.one_of(
    st.builds(lambda c: {"config": {f"dynamo:{k}": v for k, v in c.items()}}, configs),
    st.builds(lambda c: {"config": c}, values),
    values,
)


@settings(max_examples=150, **SETTINGS)
@given(doc=stack_docs)
@example(doc={"config": float("inf")})  # a refused number in place of the whole config: the message names the file
def test_render_stack_file_raises_only_config_errors(doc, tmp_path_factory):
    root = tmp_path_factory.mktemp("prop")
    (root / "Pulumi.prop.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    _only_config_errors(program_for_stack, "prop", root)


@settings(max_examples=80, **SETTINGS)
@given(text=st.text(max_size=200))
def test_render_stack_file_of_any_text_raises_only_config_errors(text, tmp_path_factory):
    root = tmp_path_factory.mktemp("prop")
    (root / "Pulumi.prop.yaml").write_text(text)
    _only_config_errors(program_for_stack, "prop", root)


# ---- Properties of the output (not only "nothing but ConfigError escapes") ----

TARGET_IDS = sorted(catalog.targets())
# EKS stacks the program sizes on its own node group (aws-efa and aggregated targets on the default instances).
EKS_BASES = [
    {"gpu": "h100", "topology": "disagg"},
    {"gpu": "h100", "topology": "agg"},
    {"gpu": "h200", "topology": "agg"},
    {"gpu": "b200", "topology": "agg"},
]
dns_names = st.from_regex(r"[a-z][a-z0-9-]{0,12}[a-z0-9]", fullmatch=True)


def _recipe_dgd(tid: str) -> dict:
    return next(o for o in catalog.recipe_objects(catalog.targets()[tid]) if o["kind"] == "DynamoGraphDeployment")


@st.composite
def replica_overrides(draw):
    tid = draw(st.sampled_from(TARGET_IDS))
    comps = [c["name"] for c in _recipe_dgd(tid)["spec"]["components"]]
    chosen = draw(st.lists(st.sampled_from(comps), min_size=1, max_size=len(comps), unique=True))
    return tid, {c: draw(st.integers(min_value=1, max_value=12)) for c in chosen}


@settings(max_examples=120, **SETTINGS)
@given(case=replica_overrides())
def test_a_replica_override_is_applied_to_the_component_it_names(case):
    """dynamo:replicas.<component>: n gives that DGD component n replicas and leaves every other one at the recipe's."""
    tid, reps = case
    recipe = {c["name"]: c.get("replicas", 1) for c in _recipe_dgd(tid)["spec"]["components"]}
    try:
        program = build_program({"target": tid, "replicas": reps}, "prop", frozenset({"hfToken"}), env=None)
    except ConfigError as e:  # a refusal names the key it refuses
        assert "dynamo:replicas" in str(e), str(e)
        return
    dgd = next(o for o in program.objects() if o.get("kind") == "DynamoGraphDeployment")
    got = {c["name"]: c.get("replicas", 1) for c in dgd["spec"]["components"]}
    assert got == {name: reps.get(name, n) for name, n in recipe.items()}


def _pod_specs(objects: list[dict]):
    """(namespace, pod spec) of every pod template in the objects (anything with a containers list)."""

    def walk(x, ns):
        if isinstance(x, dict):
            if isinstance(x.get("containers"), list):
                yield ns, x
            for v in x.values():
                yield from walk(v, ns)
        elif isinstance(x, list):
            for v in x:
                yield from walk(v, ns)

    for o in objects:
        yield from walk(o, (o.get("metadata") or {}).get("namespace"))


@st.composite
def pull_secret_stacks(draw):
    names = draw(st.lists(dns_names, max_size=3, unique=True))
    mode = draw(st.sampled_from(["render", "kubeconfig", "eks"]))
    base = dict(draw(st.sampled_from(EKS_BASES))) if mode == "eks" else {"target": draw(st.sampled_from(TARGET_IDS[::2]))}
    cluster = {"mode": mode, "region": "us-east-1"} if mode == "eks" else {"mode": mode}
    raw = {**base, "cluster": cluster, **({"imagePullSecrets": names} if names or draw(st.booleans()) else {})}
    if names and mode != "eks":  # the user's own pull Secrets live in a namespace they made (not one the stack creates)
        raw["createNamespace"] = False
    return raw


@settings(max_examples=80, **SETTINGS)
@given(raw=pull_secret_stacks())
def test_every_pull_secret_a_pod_names_is_created_or_declared_existing(raw):
    """Each imagePullSecrets name in any pod the plan holds is a Secret the plan creates in that namespace (EKS:
    from ngcApiKey) or one the stack declares existing (dynamo:imagePullSecrets on a cluster it does not create);
    the recipes' placeholder never survives."""
    secrets = {"hfToken", "ngcApiKey"} if raw["cluster"]["mode"] in ("eks", "stack") else {"hfToken"}  # ngcApiKey: EKS only
    program = build_program(raw, "prop", frozenset(secrets), env=None)
    objects = program.objects()
    created = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects if o.get("kind") == "Secret"}
    declared = set(raw.get("imagePullSecrets") or []) if raw["cluster"]["mode"] != "eks" else set()
    named = [(ns, s["name"]) for ns, spec in _pod_specs(objects) for s in spec.get("imagePullSecrets") or []]
    missing = [(ns, n) for ns, n in named if (ns, n) not in created and n not in declared]
    assert not missing, f"pods name pull secrets nobody creates or declares: {missing}"
    # every pod that pulls from NGC (nvcr.io) names exactly the declared secrets, none when none is declared
    want = set(raw.get("imagePullSecrets") or [])
    ngc = [
        (ns, spec)
        for ns, spec in _pod_specs(objects)
        if any(str(c.get("image", "")).startswith("nvcr.io/") for c in spec.get("containers") or [])
    ]
    assert ngc, "the plan holds pods that pull from nvcr.io"
    for ns, spec in ngc:
        assert {s["name"] for s in spec.get("imagePullSecrets") or []} == want, (ns, spec.get("imagePullSecrets"), want)


# Secret values a stack may hold, generated (long enough to be unambiguous in the output).
secret_values = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", min_size=16, max_size=40)


@settings(max_examples=6, **SETTINGS)
@given(
    hf=secret_values,
    ngc=secret_values,
    whole=st.none() | secret_values,
    base=st.sampled_from(
        [
            {"target": "lightning-vllm-disagg-h100-dspark", "cluster": {"mode": "render"}},
            {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}, "imagePullSecrets": ["ngc-secret"]},
        ]
    ),
)
def test_no_secret_value_appears_outside_a_secret(hf, ngc, whole, base):
    """The real program (__main__.py under Pulumi's mocks) with generated hfToken, ngcApiKey and imagePullSecret
    values: no value appears in plain text in any resource's inputs or in the stack outputs; inside a Secret only
    within Pulumi's secret envelope; and a render stack's Secret carries the redaction, not the value."""
    from harness import plain_occurrences, run_program, unwrap

    render = base["cluster"]["mode"] == "render"
    # One pull secret source, and only where the stack creates pull Secrets (both, or either on render, are refused).
    pull = (
        {}
        if render
        else ({"imagePullSecret": '{"auths":{"x":{"auth":"' + whole + '"}}}'} if whole else {"ngcApiKey": "ngc_" + ngc})
    )
    secrets = {"hfToken": "hf_" + hf, **pull}
    run = run_program(base, secrets, stack="prop")
    needles = [
        secrets["hfToken"],
        *([whole] if whole and not render else []),
        *([secrets["ngcApiKey"]] if "ngcApiKey" in secrets else []),
    ]
    for r in run.resources:
        for needle in needles:
            assert not plain_occurrences(r.raw_inputs, needle), f"{r.type} {r.name} holds a secret value in plain text"
            if render or r.type != "kubernetes:core/v1:Secret":  # outside a Secret: not even inside an envelope
                assert needle not in repr(unwrap(r.raw_inputs)), f"{r.type} {r.name} holds a secret value"
    for raw in run.raw_outputs:
        for needle in needles:
            assert not plain_occurrences(raw, needle)
    secrets_made = [r for r in run.resources if r.type == "kubernetes:core/v1:Secret"]
    assert secrets_made, "the stack creates its HF token Secret"
    if not render:  # the values do reach the cluster, in the Secrets only (so the search above looks at the right text)
        assert any(secrets["hfToken"] in repr(unwrap(r.raw_inputs)) for r in secrets_made)
        assert any((whole or secrets.get("ngcApiKey")) in repr(unwrap(r.raw_inputs)) for r in secrets_made)
    if render:
        from stacks.serving import REDACTED

        assert all(v == REDACTED for r in secrets_made for v in (r.inputs.get("stringData") or {}).values())


# =========================================================================== values that are not what they claim
# (booleans and non-ASCII digits as numbers, snake_case keys, URLs, secret values, cluster-owned namespaces): each
# generated bad value is refused with a ConfigError naming its key, and a secret's value never appears in a message.

_AGG = {"target": "lightning-vllm-agg-h100-dspark"}
_EKS = {"gpu": "h100", "topology": "agg", "cluster": {"mode": "eks", "region": "us-east-1"}}
# Where a number is read, as (config, key the message names) builders.
_NUMBER_KEYS = [
    (lambda v: {**_EKS, "cluster": {**_EKS["cluster"], "gpuNodes": v}}, "cluster.gpuNodes"),
    (lambda v: {**_EKS, "cluster": {**_EKS["cluster"], "systemNodes": v}}, "cluster.systemNodes"),
    (lambda v: {**_EKS, "cluster": {**_EKS["cluster"], "gpuPools": [{"gpu": "h100", "nodes": v}]}}, "cluster.gpuPools.0.nodes"),
    (
        lambda v: {**_EKS, "cluster": {**_EKS["cluster"], "fsxStorageCapacityGib": v, "cacheStorage": "fsx-lustre"}},
        "cluster.fsxStorageCapacityGib",
    ),
    (lambda v: {**_AGG, "benchmark": {"enabled": True, "requestCount": v}}, "benchmark.requestCount"),
    (lambda v: {**_AGG, "benchmark": {"enabled": True, "tolerance": v}}, "benchmark.tolerance"),
]
_non_ascii_digits = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


def _refusal(raw, secrets=frozenset({"hfToken"}), **kw) -> str:
    with pytest.raises(ConfigError) as e:
        build_program(raw, "prop", secrets, **kw)
    return str(e.value)


@settings(max_examples=40, **SETTINGS)
@given(where=st.sampled_from(_NUMBER_KEYS), value=st.booleans() | st.text(_non_ascii_digits, min_size=1, max_size=3))
def test_a_boolean_or_non_ascii_digits_is_never_a_number(where, value):
    build, key = where
    msg = _refusal(build(value))
    assert f"dynamo:{key}" in msg and repr(value) in msg, msg


@settings(max_examples=40, **SETTINGS)
@given(
    digits=st.text(_non_ascii_digits, min_size=1, max_size=3),
    unit=st.sampled_from("smh"),
    key=st.sampled_from(["jobTimeout", "dgdTimeout"]),
)
def test_durations_take_ascii_digits_only(digits, unit, key):
    assert f"dynamo:wait.{key}" in _refusal({**_AGG, "wait": {key: digits + unit}})


def _snake(name: str) -> str:
    import re

    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


@settings(max_examples=30, **SETTINGS)
@given(
    section=st.sampled_from(
        [("", StackConfig)] + [("cluster", m) for m in CLUSTER_MODELS if any(_snake(k) != k for k in _aliases(m))]
    ),
    data=st.data(),
)
def test_snake_case_spellings_are_unknown_keys(section, data):
    """Every camelCase key has one spelling: its snake_case form is an unknown key (no undeclared alias)."""
    where, model = section
    camel = sorted(k for k in _aliases(model) if _snake(k) != k)
    key = data.draw(st.sampled_from(camel))
    raw = {**_AGG, where: {"mode": "kubeconfig", _snake(key): "x"}} if where else {**_AGG, _snake(key): "x"}
    msg = _refusal(raw, frozenset({"hfToken", "kubeconfig"}))
    assert f"dynamo:{where + '.' if where else ''}{_snake(key)}: unknown key" in msg, msg


@settings(max_examples=40, **SETTINGS)
@given(port=st.integers(65536, 10**7) | st.just(0), bad=st.sampled_from(["", "\x00", "\u202e", "\u2066", " ", "\x7f", "é"]))
def test_prometheus_urls_are_plain_with_a_real_port(port, bad):
    obs = lambda url: {**_AGG, "observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": url}}  # noqa: E731
    assert "dynamo:observability.prometheusEndpoint" in _refusal(obs(f"http://prom.svc:{port}"))
    if bad:
        assert "dynamo:observability.prometheusEndpoint" in _refusal(obs(f"http://prom{bad}.svc:9090"))


@settings(max_examples=40, **SETTINGS)
@given(value=st.text(max_size=60), key=st.sampled_from(["hfToken", "imagePullSecret", "ngcApiKey"]))
def test_a_secret_value_is_checked_but_never_printed(value, key):
    """Any secret value: accepted, or refused naming its key; the value (when longer than the words of a message)
    never appears in the message."""
    raw = {**_EKS, "imagePullSecrets": ["ngc-secret"]} if key != "hfToken" else dict(_AGG)
    secrets = {"hfToken": "hf_propToken1", key: value}
    try:
        build_program(raw, "prop", frozenset(secrets), env=None, secret_values=secrets)
    except ConfigError as e:
        msg = str(e)
        assert f"dynamo:{key}" in msg, msg
        if len(value.strip()) >= 6:
            assert value not in msg, msg


@settings(max_examples=30, **SETTINGS)
@given(
    name=st.from_regex(r"kube-[a-z0-9]{1,20}", fullmatch=True) | st.just("default"),
    where=st.sampled_from(["namespace", "observability"]),
)
def test_cluster_owned_namespaces_are_never_created(name, where):
    raw = {**_AGG, "namespace": name} if where == "namespace" else {**_AGG, "observability": {"enabled": True, "namespace": name}}
    msg = _refusal(raw)
    assert f"dynamo:{where}" in msg and repr(name) in msg, msg
    off = (
        {**raw, "createNamespace": False}
        if where == "namespace"
        else {**_AGG, "observability": {"enabled": True, "namespace": name, "createNamespace": False}}
    )
    build_program(off, "prop", frozenset({"hfToken"}))  # using it as is (not created) stays allowed
