"""Release: ``python -m stacks promote``.

``promote`` copies the release-pinned keys (target selection, ``fabricProfile``, images, model
revision) from one stack file to another, keeping the destination's environment keys (namespace,
cluster, replicas, storage, secrets...) and its comments. It refuses floating or invalid values
(an image that ``stacks.config.keys.image_problem`` rejects: no tag, a moving tag such as ``latest``,
``nightly`` or ``main``, whitespace; a model revision that is not a valid git name or is a branch)
and a result the program would reject (``stacks.program.build_program``), before printing anything.
Into a staging or production stack (``environment``: a name ending ``-staging`` or ``-prod``, the rule CI applies in
``.github/stack_kind.py``) it records digests, not tags: every DGD container image must carry ``@sha256:<64 hex>``,
whether ``dynamo:images`` names it or the catalog's default does, and ``modelRevision`` must be set (unset, the download
Job fetches the default branch). It cannot resolve a tag to a digest itself (no registry access): the message names the
key, the value and the form to write.
Its output never carries a plain-text value of a secret-looking key (``hfToken``, ``kubeconfig``,
``*token*``, ``*password*``...): such lines are shown redacted. What the promotion changes in the rendered objects is
shown with ``diff_objects`` (stacks/cli/review.py).

Hand-written on purpose, after measuring the library against it: a ruamel.yaml round trip for ``promoted_text`` saved
2 lines (``_chunks`` stays for redaction) but left the comment above a removed release key behind (24 of 240 pairs of
committed stacks), as ruamel attaches a comment to the key before it.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any, Optional

import yaml

from stacks.cli.review import REPO_ROOT, diff_objects, stack_names
from stacks.config.keys import NS, SECRET_KEYS, ConfigError, image_problem, revision_problem
from stacks.registry import yaml_text

# Keys that belong to an environment and are never copied.
ENV_KEYS = frozenset(
    {
        "namespace",
        "createNamespace",
        "cluster",
        "replicas",
        "storage",
        "hfTokenSecretName",
        "imagePullSecrets",
        "kubeconfig",
        "hfToken",
        "wait",
        "observability",
        "benchmark",
        # capacity of an environment (stacks/serving/autoscaling.py): staging may be paused while prod serves
        "paused",
        "autoscaling",
        # which namespaces may reach the frontend and scrape it differs per environment
        "networkPolicy",
        # where the workers' compile caches live is the environment's storage (stacks/serving/compile_cache.py)
        "compileCache",
    }
)
# Keys a release pins and promotion copies: what selects and shapes the DGD. Every StackConfig key is
# either here or in ENV_KEYS (a test keeps it so), and nothing else is copied: a key the program does
# not know would make the destination fail.
SELECTION_KEYS = (
    "target",
    "model",
    "runtime",
    "gpu",
    "topology",
    "shape",
    "spec",
    "routing",
    "precision",
    "context",
    "workload",
    "fabric",
    "profile",
)
# fastStartupProbe and modelLoader shape the DGD's workers as the recipe keys do: staging and prod run the probes and the
# loader they were promoted with.
RELEASE_KEYS = frozenset(SELECTION_KEYS + ("fabricProfile", "images", "modelRevision", "fastStartupProbe", "modelLoader"))

_HEX40 = re.compile(r"[0-9a-f]{40}")
# A version tag (v1.2, 1.2.0-rc1, refs/tags/v1.2) or a number (20250101): a name a release does not move.
_VERSION_TAG = re.compile(r"(refs/tags/)?(v?\d+(\.\d+)*([-+.][0-9A-Za-z.-]+)?)")
# Key names whose values are secrets wherever they appear (a plain-text value is never printed).
_SECRET_NAME = re.compile(r"(token|secret|passw|credential|api[-_]?key|private[-_]?key|kubeconfig)", re.IGNORECASE)
_NOT_SECRET = frozenset({"hfTokenSecretName", "imagePullSecrets"})


def environment(stack: str) -> str:
    """``prod``, ``staging`` or ``dev``: the environment a stack belongs to, by its name, as CI decides it
    (``.github/stack_kind.py`` ``environment``; tests/test_review.py keeps the two in step)."""
    return "prod" if stack.endswith("-prod") else "staging" if stack.endswith("-staging") else "dev"


class PromotionError(ValueError):
    """A floating value or a stack that cannot be promoted; the message names the key and value."""


def image_floating(ref: Any) -> Optional[str]:
    """Why an image reference floats or is invalid (no tag, a moving tag, whitespace), or None when it
    is pinned: the same rule the program applies (``stacks.config.keys.image_problem``)."""
    return image_problem(ref)


def revision_floating(rev: Any) -> Optional[str]:
    """Why a model revision floats, or None for a 40-hex commit, a version tag (``v1.2``,
    ``refs/tags/v1.2``) or a number (``20250101``)."""
    if isinstance(rev, int) and not isinstance(rev, bool):
        rev = str(rev)
    why = revision_problem(rev)
    if why:
        return why
    if _HEX40.fullmatch(rev) or _VERSION_TAG.fullmatch(rev):
        return None
    return "a branch or moving name; pin a 40-hex commit or a version tag"


def secret_like(key: str) -> bool:
    """A key whose value must never be printed in plain text (``hfToken``, ``kubeconfig``, ``*password*``...)."""
    last = str(key).rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    return last not in _NOT_SECRET and (last in SECRET_KEYS or bool(_SECRET_NAME.search(last)))


def _is_secure(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == {"secure"}


REDACTED_PLAIN = "<redacted: plain-text value of a secret key; store it with `pulumi config set --secret`>"


def redact_text(text: str) -> str:
    """The stack file with every plain-text value of a secret-looking key replaced (``secure:`` values kept)."""
    head, entries, tail = _chunks(text)
    out: list[str] = []
    for key, chunk in entries:
        if key and secret_like(key):
            try:
                value = (yaml_text.load("config:\n" + chunk) or {}).get("config", {}).get(key)
            except yaml.YAMLError:
                value = None
            if not _is_secure(value):
                lines = chunk.splitlines(keepends=True)
                first = next(i for i, ln in enumerate(lines) if ln.startswith("  ") and not ln.lstrip().startswith("#"))
                out.append("".join(lines[:first]) + f"  {lines[first].split(':', 1)[0].strip()}: {REDACTED_PLAIN}\n")
                continue
        out.append(_redact_nested(chunk))
    return "".join(head) + "".join(out) + "".join(_redact_nested(t) for t in tail)


_LINE = re.compile(r"^(\s*-?\s*)(['\"]?)([^\s'\":#][^'\":]*)\2:(\s+)(\S.*)$")


def _redact_nested(chunk: str) -> str:
    """Line by line: ``key: value`` lines (at any depth) whose key is secret-looking and whose value is
    not ``secure:`` get the value redacted; a following block (``|``) is dropped."""
    out: list[str] = []
    skip_indent: Optional[int] = None
    for ln in chunk.splitlines(keepends=True):
        indent = len(ln) - len(ln.lstrip())
        if skip_indent is not None:
            if ln.strip() and indent > skip_indent:
                continue
            skip_indent = None
        m = _LINE.match(ln.rstrip("\n"))
        if m and secret_like(m.group(3)) and not m.group(5).startswith(("secure:", "{secure:")):
            if m.group(5).strip() in ("|", ">", "|-", ">-", "|+", ">+"):
                skip_indent = indent
            out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{m.group(2)}:{m.group(4)}{REDACTED_PLAIN}\n")
        elif m is None and ln.rstrip().endswith(":") and (key_match := _LINE_KEY.match(ln)) and secret_like(key_match.group(1)):
            skip_indent = indent  # a nested mapping under a secret-looking key: drop its lines
            out.append(ln.rstrip("\n") + f" {REDACTED_PLAIN}\n")
        else:
            out.append(ln)
    return "".join(out)


_LINE_KEY = re.compile(r"^\s*-?\s*['\"]?([^\s'\":#][^'\":]*)['\"]?:\s*$")


def floating_values(cfg: dict[str, Any]) -> list[str]:
    """Messages for every floating release value in a ``dynamo:`` mapping (namespace stripped)."""
    bad: list[str] = []
    images = cfg.get("images") or {}
    if not isinstance(images, dict):
        return [f"{NS}:images = {images!r} is not a mapping of component to image"]
    for comp, img in images.items():
        why = image_floating(img)
        if why:
            bad.append(f"{NS}:images.{comp} = {img!r}: {why}; pin a fixed tag or a digest (@sha256:...)")
    rev = cfg.get("modelRevision")
    if rev is not None:
        for k, v in rev.items() if isinstance(rev, dict) else [(None, rev)]:
            why = revision_floating(v)
            if why:
                key = f"{NS}:modelRevision" + (f".{k}" if k is not None else "")
                bad.append(f"{key} = {v!r} is floating: {why}")
    for key in sorted(RELEASE_KEYS):
        v = cfg.get(key)
        if isinstance(v, dict) and "secure" in v:
            bad.append(f"{NS}:{key} is a secret (encrypted per stack) and cannot be copied; set it on the target stack")
    return bad


def _digest_fix(key: str, ref: str) -> str:
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    return (
        f"set {key}: {name}@sha256:<64 hex> (or {name}:{tag}@sha256:<64 hex>); promote cannot resolve a tag "
        f"to its digest (it has no registry access): read it where the registry is reachable, e.g. "
        f"`crane digest {ref}` or `docker buildx imagetools inspect {ref}`"
    )


def _entry_key_prefix(e) -> str:
    """How the stack file names an entry's keys: ``dynamo:`` for a single-target stack, ``dynamo:serve[<name>].``."""
    return f"{NS}:" if e.key == NS else f"{NS}:serve[{e.name}]."


def unguarded_release(program, env: str) -> list[str]:
    """Messages for what a ``staging``/``prod`` stack on the EKS cluster it creates would leave open: an entry without
    ``networkPolicy.enabled`` (every pod reaches every other and any address), and a public Kubernetes API endpoint
    open to any address (EKS's default ``publicAccessCidrs``, docs/deploy-aws.md "Cluster access")."""
    bad: list[str] = []
    if not program.mode.creates_cluster:
        return bad
    for e in program.entries:
        if not e.cfg.network_policy.enabled:
            prefix = _entry_key_prefix(e)
            bad.append(
                f"{prefix}networkPolicy.enabled is not true: a {env} stack restricts what each Dynamo pod may reach; "
                f"set {prefix}networkPolicy: {{enabled: true}}"
            )
    cluster = program.cluster
    if cluster.endpoint_access == "public" and "0.0.0.0/0" in cluster.public_access_cidrs:
        bad.append(
            f"{NS}:cluster.publicAccessCidrs is {list(cluster.public_access_cidrs)}: a {env} stack's Kubernetes API "
            f"endpoint accepts connections from any address; list your networks and the deploy runners' egress "
            f"(e.g. [203.0.113.0/24]) or set {NS}:cluster.endpointAccess: private"
        )
    return bad


def unpinned_release(program, env: str, entries: Optional[set] = None) -> list[str]:
    """Messages for what a ``staging``/``prod`` stack would run without a pin: each DGD container image without a
    digest (named by the ``dynamo:images`` key that sets it, or that would), and an entry without ``modelRevision``.
    ``entries``: in a ``dynamo:serve`` stack, the names of the entries promoted (the others are not checked)."""
    bad: list[str] = []
    for e in program.entries:
        if entries is not None and e.name not in entries:
            continue
        prefix = _entry_key_prefix(e)
        images = dict(e.cfg.images or {})
        for comp in e.plan.dgd["spec"]["components"]:
            for c in comp["podTemplate"]["spec"]["containers"]:
                ref = c.get("image", "")
                if "@" in ref:
                    continue
                set_by = comp["name"] if comp["name"] in images else "*" if "*" in images else None
                key = f"{prefix}images.{set_by or comp['name']}"
                what = (
                    f"{key} = {ref!r} is a tag without a digest"
                    if set_by
                    else f"{key} is not set, so {comp['name']} runs the catalog's {ref!r}, a tag without a digest"
                )
                msg = f"{what}: a {env} stack records image digests; {_digest_fix(key, ref)}"
                if msg not in bad:
                    bad.append(msg)
        if not e.cfg.model_revision:
            bad.append(
                f"{prefix}modelRevision is not set: the download Job fetches the model's default branch, which moves; "
                f"a {env} stack records the checkpoint: set it to a 40-hex commit (or a version tag)"
            )
    return bad


def _key_of(full: str) -> Optional[str]:
    return full[len(NS) + 1 :] if full.startswith(NS + ":") else None


def _chunks(text: str) -> tuple[list[str], list[tuple[Optional[str], str]], list[str]]:
    """Split a stack file into (lines before ``config:``, config entries as (full key, text), lines after).
    Comments and blank lines before an entry belong to it."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"config:\s*(#.*)?$", ln)), None)
    if start is None:
        return lines, [], []
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    head, body, tail = lines[: start + 1], lines[start + 1 : end], lines[end:]
    entries: list[tuple[Optional[str], str]] = []
    pending = ""
    for ln in body:
        m = re.match(r"  ([^\s#-]\S*?):(\s|$)", ln)
        if m:
            entries.append((m.group(1).strip("'\""), pending + ln))
            pending = ""
        elif not ln.strip() or ln.lstrip().startswith("#"):
            pending += ln
        elif entries:
            k, t = entries[-1]
            entries[-1] = (k, t + pending + ln)
            pending = ""
        else:
            pending += ln
    if pending:
        entries.append((None, pending))
    return head, entries, tail


def promoted_text(src_text: str, dst_text: str) -> str:
    """The destination stack file with the source's release-pinned entries (verbatim) and its own
    environment and other entries and comments."""
    _, src_entries, _ = _chunks(src_text)
    head, dst_entries, tail = _chunks(dst_text)
    release = [(k, t) for k, t in src_entries if k and _key_of(k) in RELEASE_KEYS]
    for _, t in release:
        if not t.endswith("\n"):
            raise PromotionError("source stack file does not end with a newline")
    keep = [(k, t) for k, t in dst_entries if not (k and _key_of(k) in RELEASE_KEYS)]
    out = "".join(head) + "".join(t for _, t in release) + "".join(t for _, t in keep) + "".join(tail)
    return out


def _config(text: str, name: str = "stack file") -> dict[str, Any]:
    try:
        data = yaml_text.load(text) or {}
    except yaml.YAMLError as e:
        raise PromotionError(f"{name} is not valid YAML: {e}") from None
    cfg = data.get("config") if isinstance(data, dict) else data
    if cfg is None:
        return {}
    if not isinstance(cfg, dict):
        raise PromotionError(
            f"{name}: {'config' if isinstance(data, dict) else 'the file'} is a {type(cfg).__name__}, "
            f"not a mapping of {NS}:<key> entries"
        )
    return cfg


def _dynamo(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k[len(NS) + 1 :]: v for k, v in cfg.items() if isinstance(k, str) and k.startswith(NS + ":")}


def plan_promotion(src: str, dst: str, root: Path = REPO_ROOT) -> tuple[str, str]:
    """(old text, new text) of the destination stack file; raises PromotionError on floating values."""
    from stacks.program.render import stack_file

    sp, dp = stack_file(src, root), stack_file(dst, root)
    for name, p in ((src, sp), (dst, dp)):
        if not p.is_file():
            raise PromotionError(f"stack {name!r} has no {p.name}; committed stacks: {', '.join(stack_names(root))}")
    if sp == dp:
        raise PromotionError("--from and --to name the same stack")
    src_text, dst_text = sp.read_text(), dp.read_text()
    src_cfg = _dynamo(_config(src_text, sp.name))
    dst_cfg = _dynamo(_config(dst_text, dp.name))
    release = {k: v for k, v in src_cfg.items() if k in RELEASE_KEYS}
    bad = floating_values(release)
    serve = promoted_serve(src, dst, src_cfg, dst_cfg) if "serve" in src_cfg or "serve" in dst_cfg else None
    if serve is not None:
        for entry in serve:
            bad += [b.replace(f"{NS}:", f"{NS}:serve[{entry['name']}].", 1) for b in floating_values(entry)]
    if bad:
        raise PromotionError(f"refusing to promote {src} -> {dst}:\n  " + "\n  ".join(bad))
    new_text = promoted_text(src_text, dst_text)
    if serve is not None:
        new_text = replace_entry(new_text, f"{NS}:serve", serve)
    # The text edit must mean exactly: destination's non-release keys + source's release keys (+ merged entries).
    want = {k: v for k, v in _config(dst_text).items() if _key_of(k) not in RELEASE_KEYS}
    want.update({f"{NS}:{k}": v for k, v in release.items()})
    if serve is not None:
        want[f"{NS}:serve"] = serve
    got = _config(new_text)
    if got != want:
        raise PromotionError(f"internal: promoted {dp.name} does not parse to the expected config: {got!r} != {want!r}")
    ami = promoted_ami_release(src, dst, src_cfg, dst_cfg)
    if ami is not None:
        new_text = set_cluster_key(new_text, "amiReleaseVersion", ami)
        want[f"{NS}:cluster"] = {**dst_cfg["cluster"], "amiReleaseVersion": ami}
        got = _config(new_text)
        if got != want:
            raise PromotionError(f"internal: promoted {dp.name} does not parse to the expected config: {got!r} != {want!r}")
    env = environment(dst)
    if env != "dev":
        try:
            program = _program_raw(_dynamo(got), dst)
        except ConfigError:
            program = None  # cmd_promote refuses a result that would not deploy, with the program's own message
        promoted = {e["name"] for e in src_cfg["serve"]} if serve is not None else None
        bad = (unpinned_release(program, env, promoted) + unguarded_release(program, env)) if program is not None else []
        if bad:
            raise PromotionError(f"refusing to promote {src} -> {dst}:\n  " + "\n  ".join(bad))
    return dst_text, new_text


def promoted_ami_release(src: str, dst: str, src_cfg: dict[str, Any], dst_cfg: dict[str, Any]) -> Optional[str]:
    """The AMI release an EKS destination takes from the source: the source's ``cluster.amiReleaseVersion``, else the
    release this commit pins for the source's Kubernetes version (what the source runs). None when the destination
    builds no EKS cluster. So a staging or prod stack's nodes move to a new AMI only by a promotion, never because the
    registry's pin moved. Refused when the two stacks run different Kubernetes versions (a release is per version)."""
    from stacks.config.eks import ami_release_versions
    from stacks.registry.versions import versions

    dst_cluster, src_cluster = dst_cfg.get("cluster"), src_cfg.get("cluster") or {}
    if not isinstance(dst_cluster, dict) or dst_cluster.get("mode") != "eks" or not isinstance(src_cluster, dict):
        return None
    default = str(versions()["eks"]["kubernetesVersion"])
    src_k8s, dst_k8s = str(src_cluster.get("kubernetesVersion", default)), str(dst_cluster.get("kubernetesVersion", default))
    ami = src_cluster.get("amiReleaseVersion") or ami_release_versions().get(src_k8s)
    if ami is None:
        return None  # the source's own config is refused with its reason when it runs
    if not str(ami).startswith(dst_k8s + "."):
        raise PromotionError(
            f"refusing to promote {src} -> {dst}: {src}'s AMI release {ami} is for Kubernetes {src_k8s}, and {dst} "
            f"runs {dst_k8s} ({NS}:cluster.kubernetesVersion); bring {dst} to {src_k8s} first (docs/deploy-aws.md, "
            f'"Upgrading Kubernetes")'
        )
    return str(ami)


def set_cluster_key(text: str, key: str, value: str) -> str:
    """``text`` with ``dynamo:cluster``'s ``key`` set to ``value`` in place (the line replaced, or added after ``mode:``),
    every other line and comment of the stack file as it was."""
    head, entries, tail = _chunks(text)
    out = []
    for k, chunk in entries:
        if k == f"{NS}:cluster":
            lines = chunk.splitlines(keepends=True)
            line = f"    {key}: {value}\n"
            at = next((i for i, ln in enumerate(lines) if re.match(rf"    {key}:", ln)), None)
            if at is not None:
                lines[at] = line
            else:
                mode = next(i for i, ln in enumerate(lines) if re.match(r"    mode:", ln))
                lines.insert(mode + 1, line)
            chunk = "".join(lines)
        out.append((k, chunk))
    return "".join(head) + "".join(c for _, c in out) + "".join(tail)


# In a dynamo:serve entry, what a release changes (what runs) as opposed to where and how much it runs.
ENTRY_RELEASE_KEYS = RELEASE_KEYS | {"overrides"}


def promoted_serve(src: str, dst: str, src_cfg: dict[str, Any], dst_cfg: dict[str, Any]) -> list[dict]:
    """The destination's ``dynamo:serve`` entries with each entry's release keys (target or axes, images,
    modelRevision, fabricProfile, overrides) taken from the source entry of the same ``name``; its
    environment keys (namespace, replicas, storage, wait...) stay. Entries are matched by name, so every
    entry of both stacks needs one; an entry only the source has must first be added to the destination
    with its environment keys (promotion never invents a namespace), one only the destination has stays."""
    entries: dict[str, list[dict]] = {}
    for name, cfg in ((src, src_cfg), (dst, dst_cfg)):
        serve = cfg.get("serve")
        if not isinstance(serve, list):
            raise PromotionError(
                f"stack {name!r} has no {NS}:serve list; both stacks of a promotion must use {NS}:serve, or neither"
            )
        for i, e in enumerate(serve):
            if not isinstance(e, dict) or not e.get("name"):
                raise PromotionError(f"stack {name!r}: {NS}:serve[{i}] has no name; promotion matches entries by name")
        entries[name] = serve
    by_name = {e["name"]: e for e in entries[src]}
    missing = sorted(set(by_name) - {e["name"] for e in entries[dst]})
    if missing:
        raise PromotionError(
            f"{NS}:serve entries {', '.join(missing)} of {src!r} are not in {dst!r}: add them there first "
            f"with their namespace (and replicas), then promote"
        )
    out = []
    for e in entries[dst]:
        s = by_name.get(e["name"])
        if s is None:
            out.append(dict(e))
            continue
        merged = {k: v for k, v in e.items() if k not in ENTRY_RELEASE_KEYS}
        merged.update({k: v for k, v in s.items() if k in ENTRY_RELEASE_KEYS})
        out.append({"name": e["name"], **{k: v for k, v in merged.items() if k != "name"}})
    return out


def replace_entry(text: str, full_key: str, value: Any) -> str:
    """``text`` with the config entry ``full_key`` rewritten as YAML (its leading comments kept)."""
    head, entries, tail = _chunks(text)
    out = []
    for k, t in entries:
        if k == full_key:
            lines = t.splitlines(keepends=True)
            lead = [ln for ln in lines[: next(i for i, ln in enumerate(lines) if ln.startswith(f"  {full_key}:"))]]
            body = yaml.safe_dump({full_key: value}, sort_keys=False, default_flow_style=False, width=4096)
            t = "".join(lead) + "".join("  " + ln for ln in body.splitlines(keepends=True))
        out.append((k, t))
    return "".join(head) + "".join(t for _, t in out) + "".join(tail)


def _program_raw(raw: dict[str, Any], stack: str):
    """The program ``pulumi up`` of ``stack`` would run from this config: the same ``build_program`` (every serving,
    cluster and secret check) that ``up`` and ``render --stack`` run."""
    from stacks.program import build_program
    from stacks.program.render import split_secrets

    plain, secret = split_secrets(raw)
    return build_program(plain, stack, secret)


def _render_raw(raw: dict[str, Any], stack: str) -> list[dict]:
    """The serving objects ``pulumi up`` of ``stack`` would create from this config."""
    return _program_raw(raw, stack).objects()


def cmd_promote(args) -> int:
    from stacks.program.render import stack_file

    root = Path(args.root or REPO_ROOT).resolve()
    try:
        old_text, new_text = plan_promotion(args.src, args.dst, root)
    except PromotionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    path = stack_file(args.dst, root)
    # Refuse a result the program would reject before printing anything (a promotion that cannot deploy).
    try:
        after = _render_raw(_dynamo(_config(new_text)), args.dst)
    except ConfigError as e:
        print(f"error: promoted {path.name} would not deploy: {e}", file=sys.stderr)
        return 2
    if old_text == new_text:
        print(f"{path.name}: already at {args.src}'s release; nothing to promote")
        return 0
    print(f"## {path.name}\n```diff")
    old_shown, new_shown = redact_text(old_text), redact_text(new_text)
    sys.stdout.writelines(
        difflib.unified_diff(old_shown.splitlines(True), new_shown.splitlines(True), f"a/{path.name}", f"b/{path.name}")
    )
    print("```\n")
    try:
        before = _render_raw(_dynamo(_config(old_text)), args.dst)
    except ConfigError as e:  # the destination may not render yet (e.g. a first promotion)
        before = []
        print(f"(the current {path.name} does not render: {e})")
    lines = diff_objects({f"stack {args.dst}": before}, {f"stack {args.dst}": after})
    print("## rendered objects")
    print("\n".join(lines) if lines else "(no change to the rendered objects)")
    if args.yes:
        path.write_text(new_text)
        print(f"\nwrote {path.name}")
    else:
        print(f"\ndry run: re-run with --yes to write {path.name}")
    return 0


def add_subparser(sub) -> None:
    p = sub.add_parser(
        "promote",
        help="copy release-pinned config (selection, images, revisions) from one stack to another",
        description="Copy the release-pinned keys (target selection, images, model revision) from one "
        "committed stack file to another, keeping the destination's environment keys; "
        "prints the file and rendered-object diff (a dry run unless --yes).",
    )
    p.add_argument("--from", dest="src", required=True, metavar="STACK", help="the stack whose release to copy, e.g. staging")
    p.add_argument("--to", dest="dst", required=True, metavar="STACK", help="the stack file to update, e.g. prod")
    p.add_argument("--yes", action="store_true", help="write the destination stack file (default: dry run)")
    p.add_argument("--root", default=None, help="directory with the Pulumi.<stack>.yaml files (default: the repo)")
    p.set_defaults(fn=cmd_promote)
