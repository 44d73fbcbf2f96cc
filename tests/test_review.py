"""``python -m stacks diff`` (semantic per-object diff between git refs) and ``python -m stacks promote``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stacks.cli import promote, review
from stacks.__main__ import main as cli
from stacks.cli.promote import floating_values, plan_promotion, PromotionError
from stacks.cli.review import diff_objects
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- pure core


def _dgd(args, replicas=1, image="img:1.0", name="g"):
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name},
        "spec": {
            "components": [
                {
                    "name": "Frontend",
                    "replicas": 1,
                    "podTemplate": {
                        "spec": {"containers": [{"name": "main", "image": image, "args": ["-m", "dynamo.frontend"]}]}
                    },
                },
                {
                    "name": "agg",
                    "replicas": replicas,
                    "podTemplate": {"spec": {"containers": [{"name": "main", "image": image, "args": args}]}},
                },
            ]
        },
    }


ARGS = ["-m", "dynamo.vllm", "--model", "m", "--max-num-seqs", "512", "--enable-prefix-caching"]


def test_equal_is_empty():
    objs = {"stack a": [_dgd(ARGS)], "target t": [{"kind": "Namespace", "metadata": {"name": "x"}}]}
    assert diff_objects(objs, yaml_text.load(yaml.safe_dump(objs))) == []


def test_changed_flag_by_component_and_container_name():
    new = ARGS[:5] + ["256"] + ARGS[6:]
    lines = diff_objects({"stack a": [_dgd(ARGS)]}, {"stack a": [_dgd(new)]})
    assert lines == [
        "### stack a",
        "- **changed** `DynamoGraphDeployment/g`",
        "  - `spec.components[agg].podTemplate.spec.containers[main].args: - --max-num-seqs 512 + --max-num-seqs 256`",
        "",
    ]


def test_added_removed_flags_scalars_and_objects_in_stable_order():
    old = {"target b": [_dgd(ARGS), {"kind": "ConfigMap", "metadata": {"name": "old"}}], "stack a": [_dgd(ARGS)]}
    new = {
        "target b": [
            _dgd(ARGS + ["--async-scheduling"], replicas=2, image="img:1.1"),
            {"kind": "Secret", "metadata": {"name": "new"}},
        ],
        "stack a": [_dgd(ARGS)],
        "stack c": [{"kind": "Namespace", "metadata": {"name": "c"}}],
    }
    text = "\n".join(diff_objects(old, new))
    assert text.index("### stack c") < text.index("### target b")
    assert "### stack a" not in text
    assert "- **removed** `ConfigMap/old`" in text and "- **added** `Secret/new`" in text
    assert "`spec.components[agg].replicas: 1 -> 2`" in text
    assert "`spec.components[Frontend].podTemplate.spec.containers[main].image: img:1.0 -> img:1.1`" in text
    assert "`spec.components[agg].podTemplate.spec.containers[main].args: + --async-scheduling`" in text
    assert diff_objects(old, new) == diff_objects(old, new)


def test_multiline_text_shows_changed_lines():
    old = {"stack a": [{"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"cfg": '{\n  "a": 1,\n  "b": 2\n}'}}]}
    new = {"stack a": [{"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"cfg": '{\n  "a": 1,\n  "b": 3\n}'}}]}
    lines = diff_objects(old, new)
    assert "  - `data.cfg: (text changed)`" in lines
    assert '    -  "b": 2' in lines and '    +  "b": 3' in lines


NS_OBJ = {"kind": "Namespace", "metadata": {"name": "x"}}
MOVES = {"old-id": ("new-id", "renamed upstream"), "dep-id": ("succ-id", "deprecated; successor")}
DGD_TARGETS = {"old-dgd": {"old-id"}, "new-dgd": {"new-id"}, "dep-dgd": {"dep-id"}, "succ-dgd": {"succ-id"}}


def test_renamed_target_is_one_group_with_the_field_differences():
    old = {"target old-id": [NS_OBJ, _dgd(ARGS, name="old-dgd")]}
    new = {"target new-id": [NS_OBJ, _dgd(ARGS, replicas=2, name="new-dgd")]}
    assert diff_objects(old, new, MOVES, DGD_TARGETS) == [
        "### target old-id -> new-id",
        "- **renamed** target `old-id` -> `new-id`: renamed upstream",
        "- **renamed** `DynamoGraphDeployment/old-dgd` -> `DynamoGraphDeployment/new-dgd` (target `old-id` -> `new-id`: renamed upstream)",
        "  - `metadata.name: old-dgd -> new-dgd`",
        "  - `spec.components[agg].replicas: 1 -> 2`",
        "",
    ]
    # a diff that runs backwards pairs them too, in its own direction
    assert diff_objects(new, old, MOVES, DGD_TARGETS)[:2] == [
        "### target new-id -> old-id",
        "- **renamed** target `new-id` -> `old-id`: renamed upstream",
    ]
    # without the catalog's moves the same objects are a removal and an addition
    text = "\n".join(diff_objects(old, new))
    assert "### target old-id\ngroup removed" in text and "### target new-id\ngroup added" in text and "renamed" not in text


def test_stack_moving_from_a_deprecated_target_to_its_successor_pairs_the_dgds():
    old = {"stack s": [NS_OBJ, _dgd(ARGS, name="dep-dgd"), _dgd(ARGS, name="other")]}
    new = {"stack s": [NS_OBJ, _dgd(ARGS + ["--async-scheduling"], name="succ-dgd"), _dgd(ARGS, name="another")]}
    assert diff_objects(old, new, MOVES, DGD_TARGETS) == [
        "### stack s",
        "- **renamed** `DynamoGraphDeployment/dep-dgd` -> `DynamoGraphDeployment/succ-dgd` (target `dep-id` -> `succ-id`: deprecated; successor)",
        "  - `metadata.name: dep-dgd -> succ-dgd`",
        "  - `spec.components[agg].podTemplate.spec.containers[main].args: + --async-scheduling`",
        "- **removed** `DynamoGraphDeployment/other`",  # DGDs of targets that are not a move stay apart
        "- **added** `DynamoGraphDeployment/another`",
        "",
    ]
    # a DGD of a target that is not the old id's successor is not paired with it
    wrong = {"stack s": [NS_OBJ, _dgd(ARGS, name="new-dgd")]}
    assert "renamed" not in "\n".join(diff_objects(old, wrong, MOVES, DGD_TARGETS))


def test_catalog_moves_are_the_catalogs_renames_and_successors():
    from stacks.catalog import renamed, targets

    moves = review.catalog_moves(ROOT)
    want = {old: new for old, new in renamed().items()}
    want.update({t.id: t.successor for t in targets().values() if t.successor})
    assert want and {k: v[0] for k, v in moves.items()} == want
    assert review.catalog_moves(ROOT / "tests") == {}  # a tree without the catalog: no moves, no error


# --------------------------------------------------------------------------- between two commits

DEPRECATED, SUCCESSOR = "ultra-vllm-agg-b200-agentic-256k-mtp", "ultra-vllm-agg-b200-agentic-256K-kv-router"
IGNORE = {".git", ".venv", ".tools", ".pulumi-state", ".pytest_cache", "rendered", "render", "__pycache__"}


def _git(repo: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def two_commits(tmp_path_factory):
    """A fresh repo holding this working tree plus a stack on a deprecated Ultra target (commit 1), and one
    Lightning vLLM flag changed and that stack moved to the target's successor (commit 2)."""
    repo = tmp_path_factory.mktemp("review") / "repo"
    shutil.copytree(ROOT, repo, ignore=lambda d, names: [n for n in names if n in IGNORE or n.endswith(".pyc")], symlinks=True)
    ultra = (ROOT / "Pulumi.ultra-b200-agg.yaml").read_text()
    assert ultra.count("config:\n") == 1
    moving = repo / "Pulumi.ultra-moving.yaml"
    moving.write_text(ultra.replace("config:\n", f"config:\n  dynamo:target: {DEPRECATED}\n"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    cat = repo / "stacks" / "catalog" / "lightning.py"
    old = '_vllm("disagg-h200-dspark", "h200", "disagg", "dspark", "nvfp4", 1, 1.83, perf='
    src = cat.read_text()
    assert src.count(old) == 1, "the fixture edits the disagg-h200-dspark entry; update the test if it moved"
    cat.write_text(src.replace(old, old.replace("1.83, perf=", '1.83, max_num_seqs="16", perf=')))
    moving.write_text(moving.read_text().replace(DEPRECATED, SUCCESSOR))
    _git(repo, "commit", "-q", "-am", "h200 disagg dspark: --max-num-seqs 16; ultra-moving on the successor")
    head = _git(repo, "rev-parse", "HEAD")
    return repo, base, head


def _diff(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stacks", "diff", "--repo", str(repo), *args], cwd=ROOT, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def head_diff(two_commits):
    """``stacks diff`` from commit 1 to commit 2, run once (it renders everything twice) for the tests that read it."""
    repo, base, head = two_commits
    return _diff(repo, "--base", base, "--head", head)


def test_one_flag_change_shows_only_that_flag_for_the_affected_target_and_stack(head_diff):
    r = head_diff
    assert r.returncode == 0, r.stderr
    groups = re.findall(r"^### (.+)$", r.stdout, re.M)
    assert groups == ["stack h200-disagg", "stack ultra-moving", "target lightning-vllm-disagg-h200-dspark"], r.stdout
    for g in (groups[0], groups[2]):
        block = r.stdout.split(f"### {g}\n", 1)[1].split("\n\n", 1)[0].splitlines()
        # The flag moves each changed worker's compile caches to a new key (stacks/serving/compile_cache.py): both
        # variables, the same target and component directory; nothing else but the flag.
        cache = re.compile(
            r"  - `spec\.components\[(\w+)\]\.podTemplate\.spec\.containers\[main\]\.env\[(VLLM_CACHE_ROOT|TRITON_CACHE_DIR)\]"
            r"\.value: (/model-cache/compile-cache/lightning-vllm-disagg-h200-dspark/\1/)(\w+)/(\w+) -> \3(\w+)/\5`$"
        )
        moved = [m for m in map(cache.match, block) if m]
        assert sorted((m.group(1), m.group(2)) for m in moved) == sorted(
            (w, v) for w in ("VllmPrefillWorker", "VllmDecodeWorker") for v in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR")
        ), r.stdout
        assert all(m.group(4) != m.group(6) for m in moved)
        # This target's workers mount the model cache read-only, so each one's writable mount is its own entry
        # directory: its mount path and subPath move to the same new key as the variables, and nothing else of it.
        mount = re.compile(
            r"  - `spec\.components\[(\w+)\]\.podTemplate\.spec\.containers\[main\]\.volumeMounts\[\d+\]\.(mountPath|subPath)"
            r": ((?:/model-cache/)?)(compile-cache/lightning-vllm-disagg-h200-dspark/\1/)(\w+) -> \3\4(\w+)`$"
        )
        keys = {(m.group(1), m.group(4), m.group(6)) for m in moved}
        mounts = [m for m in map(mount.match, block) if m]
        assert {(m.group(1), m.group(5), m.group(6)) for m in mounts} <= keys, r.stdout
        assert sorted((m.group(1), m.group(2)) for m in mounts) == sorted(
            (w, f) for w in ("VllmPrefillWorker", "VllmDecodeWorker") for f in ("mountPath", "subPath")
        ), r.stdout
        rest = [line for line in block if not cache.match(line) and not mount.match(line)]
        assert rest == [
            "- **changed** `DynamoGraphDeployment/vllm-disagg-h200-dspark`",
            "  - `spec.components[VllmPrefillWorker].podTemplate.spec.containers[main].args: - --max-num-seqs 32 + --max-num-seqs 16`",
            "  - `spec.components[VllmDecodeWorker].podTemplate.spec.containers[main].args: - --max-num-seqs 32 + --max-num-seqs 16`",
        ], r.stdout


def test_stack_moving_to_the_successor_of_its_deprecated_target_is_one_renamed_entry(head_diff):
    from stacks.catalog import targets

    r = head_diff
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("### stack ultra-moving\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # The two targets' pods may need different Pod Security levels: then the namespace's enforce label changes too, and
    # nothing else of it; every other line is the one renamed DGD entry.
    entries = [i for i, ln in enumerate(lines) if ln.startswith("- **")] + [len(lines)]
    parts = [lines[a:b] for a, b in zip(entries, entries[1:])]
    others = [p for p in parts if not p[0].startswith("- **renamed** `DynamoGraphDeployment/")]
    for p in others:
        assert p[0].startswith("- **changed** `Namespace/") and all("pod-security.kubernetes.io/" in ln for ln in p[1:]), p
    block = next(p for p in parts if p not in others)
    assert len(parts) == len(others) + 1
    old, new = targets()[DEPRECATED].dgd_name, targets()[SUCCESSOR].dgd_name
    assert block[0] == (
        f"- **renamed** `DynamoGraphDeployment/{old}` -> `DynamoGraphDeployment/{new}` (target `{DEPRECATED}` -> "
        f"`{SUCCESSOR}`: deprecated, upstream dropped it; the new one is its successor)"
    ), r.stdout
    assert f"  - `metadata.name: {old} -> {new}`" in block
    assert len(block) > 2 and all(ln.startswith(("  - `", "    ")) for ln in block[1:]), block  # one entry: its field lines
    assert "**removed**" not in "\n".join(block) and "**added**" not in "\n".join(block)


def test_no_change_says_so_and_exit_0(two_commits):
    repo, base, head = two_commits
    r = _diff(repo, "--base", head)  # head: the clone's working tree, which is at `head`
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("no changes") and r.stdout.count("\n") == 1 and "###" not in r.stdout, r.stdout


def test_bad_ref_fails_cleanly(two_commits):
    repo, _, _ = two_commits
    r = _diff(repo, "--base", "no-such-ref")
    assert r.returncode == 2 and "no-such-ref" in r.stderr


# --------------------------------------------------------------------------- promotion


@pytest.fixture
def stacks_dir(tmp_path):
    for name in ("h100-disagg", "h100-disagg-staging", "h100-disagg-prod"):
        shutil.copy(ROOT / f"Pulumi.{name}.yaml", tmp_path)
    return tmp_path


def _set_release(path: Path, **release):
    """Rewrite a stack's release keys the way a developer would edit the dev stack."""
    text = path.read_text()
    for k, v in release.items():
        line = (
            f"  dynamo:{k}: {v}\n"
            if not isinstance(v, dict)
            else f"  dynamo:{k}:\n" + "".join(f"    {json.dumps(a)}: {b}\n" for a, b in v.items())
        )
        text = text.replace("config:\n", "config:\n" + line, 1)
    path.write_text(text)


ENV = ("namespace", "createNamespace", "cluster", "replicas", "storage", "hfTokenSecretName", "imagePullSecrets", "wait")


def _cfg(path: Path) -> dict:
    return {k.split(":", 1)[1]: v for k, v in yaml_text.load(path.read_text())["config"].items()}


REVISION = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "@sha256:" + "d" * 64
RUNTIME = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1-nemotron-3.5-lightning-dev.2"


def _pin_release(path: Path) -> None:
    """What a release into staging or prod carries: every image by digest and the model's commit."""
    _set_release(
        path,
        images={"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-nemotron-3.5-lightning-dev.1" + DIGEST},
        modelRevision=REVISION,
    )


def test_clean_promotion_copies_release_keys_and_keeps_environment(stacks_dir, capsys):
    dev, stg = stacks_dir / "Pulumi.h100-disagg.yaml", stacks_dir / "Pulumi.h100-disagg-staging.yaml"
    _set_release(
        dev,
        images={"*": RUNTIME + DIGEST, "VllmDecodeWorker": "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "e" * 64},
        modelRevision=REVISION,
    )
    # staging has a stale override that the release no longer carries
    _set_release(stg, images={"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0@sha256:" + "a" * 64})
    before_text, before = stg.read_text(), _cfg(stg)

    old, new = plan_promotion("h100-disagg", "h100-disagg-staging", stacks_dir)
    assert old == before_text
    got = {k.split(":", 1)[1]: v for k, v in yaml_text.load(new)["config"].items()}
    src = _cfg(dev)
    for k in promote.RELEASE_KEYS:
        assert got.get(k) == src.get(k), k
    for k in ENV:
        assert got.get(k) == before.get(k), k
    header = [ln for ln in before_text.splitlines() if ln.startswith("#")]
    assert new.splitlines()[: len(header)] == header  # comments at the top kept
    assert stg.read_text() == before_text  # planning writes nothing

    # through the CLI: dry run, then --yes; the revision reaches the Lightning download Job
    assert cli(["promote", "--from", "h100-disagg", "--to", "h100-disagg-staging", "--root", str(stacks_dir)]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and stg.read_text() == before_text
    assert '+    "VllmDecodeWorker": nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:' + "e" * 64 in out
    assert (
        "`spec.components[Frontend].podTemplate.spec.containers[main].image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0@sha256:"
        in out
    )
    assert REVISION in out and "MODEL_REVISION" in out
    assert cli(["promote", "--from", "h100-disagg", "--to", "h100-disagg-staging", "--root", str(stacks_dir), "--yes"]) == 0
    after = _cfg(stg)
    assert after["images"] == {
        "*": RUNTIME + DIGEST,
        "VllmDecodeWorker": "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "e" * 64,
    }
    assert after["modelRevision"] == REVISION
    assert {k: after.get(k) for k in ENV} == {k: before.get(k) for k in ENV}
    # idempotent
    assert cli(["promote", "--from", "h100-disagg", "--to", "h100-disagg-staging", "--root", str(stacks_dir)]) == 0
    assert "nothing to promote" in capsys.readouterr().out


@pytest.mark.parametrize(
    "key,value,needle",
    [
        (
            "images",
            {"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"},
            "dynamo:images.Frontend = 'nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest'",
        ),
        (
            "images",
            {"*": "registry.example.com:5000/dynamo/vllm-runtime"},
            "dynamo:images.* = 'registry.example.com:5000/dynamo/vllm-runtime': no tag or digest",
        ),
        ("modelRevision", "main", "dynamo:modelRevision = 'main' is floating"),
        # floating values that look pinned: moving tags other than latest, trailing whitespace, a revision that escapes refs/tags
        ("images", {"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:nightly"}, "tag 'nightly' is a moving tag"),
        ("images", {"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:main"}, "tag 'main' is a moving tag"),
        ("images", {"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:dev"}, "tag 'dev' is a moving tag"),
        ("images", {"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:cuda12-latest"}, "tag 'cuda12-latest' is a moving tag"),
        ("images", {"Frontend": '"nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest "'}, "contains whitespace"),
        ("images", {"Frontend": '""'}, "empty image reference"),
        (
            "modelRevision",
            "refs/tags/../heads/main",
            "dynamo:modelRevision = 'refs/tags/../heads/main' is floating: not a valid git revision name",
        ),
        ("modelRevision", "refs/heads/main", "dynamo:modelRevision = 'refs/heads/main' is floating"),
    ],
)
def test_floating_value_is_refused(stacks_dir, capsys, key, value, needle):
    _set_release(stacks_dir / "Pulumi.h100-disagg.yaml", **{key: value})
    prod = stacks_dir / "Pulumi.h100-disagg-staging.yaml"
    before = prod.read_text()
    rc = cli(["promote", "--from", "h100-disagg", "--to", "h100-disagg-staging", "--root", str(stacks_dir), "--yes"])
    assert rc != 0
    assert needle in capsys.readouterr().err
    assert prod.read_text() == before


@pytest.mark.parametrize("dst", ["h100-disagg-staging", "h100-disagg-prod"])
def test_promotion_to_staging_or_prod_refuses_an_image_given_only_by_tag(stacks_dir, capsys, dst):
    """Into staging or prod, promotion records digests: an image set by tag, or a component left to the catalog's
    tag, is refused with the key, the value and the digest form to write; promote cannot resolve the tag itself."""
    dev, path = stacks_dir / "Pulumi.h100-disagg.yaml", stacks_dir / f"Pulumi.{dst}.yaml"
    _set_release(dev, images={"VllmDecodeWorker": RUNTIME}, modelRevision=REVISION)
    before = path.read_text()
    rc = cli(["promote", "--from", "h100-disagg", "--to", dst, "--root", str(stacks_dir), "--yes"])
    out, err = capsys.readouterr()
    assert rc == 1 and out == "" and path.read_text() == before
    env = dst.rsplit("-", 1)[1]
    assert (
        f"dynamo:images.VllmDecodeWorker = '{RUNTIME}' is a tag without a digest: a {env} stack records image digests; "
        "set dynamo:images.VllmDecodeWorker: nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:<64 hex> "
        f"(or {RUNTIME}@sha256:<64 hex>)"
    ) in err
    assert "no registry access" in err
    catalog_tag = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-nemotron-3.5-lightning-dev.1"
    for comp in ("Frontend", "VllmPrefillWorker"):  # left to the catalog, whose image is a tag
        assert f"dynamo:images.{comp} is not set, so {comp} runs the catalog's '{catalog_tag}', a tag without a digest" in err
    # the same release by digest is promoted
    dev.write_text(dev.read_text().replace(f'    "VllmDecodeWorker": {RUNTIME}\n', f'    "*": {RUNTIME}{DIGEST}\n'))
    assert cli(["promote", "--from", "h100-disagg", "--to", dst, "--root", str(stacks_dir), "--yes"]) == 0, (
        capsys.readouterr().err
    )
    assert _cfg(path)["images"] == {"*": RUNTIME + DIGEST}


def test_promotion_to_staging_or_prod_refuses_a_model_without_a_revision(stacks_dir, capsys):
    dev = stacks_dir / "Pulumi.h100-disagg.yaml"
    _set_release(dev, images={"*": RUNTIME + DIGEST})
    with pytest.raises(
        PromotionError, match=r"dynamo:modelRevision is not set: the download Job fetches the model's default branch"
    ):
        plan_promotion("h100-disagg", "h100-disagg-prod", stacks_dir)
    # a dev-level destination is not a release: tags and the default branch are promoted as before
    shutil.copy(dev, stacks_dir / "Pulumi.h100-disagg-copy.yaml")
    (stacks_dir / "Pulumi.h100-disagg-copy.yaml").write_text(dev.read_text().replace(DIGEST, ""))
    plan_promotion("h100-disagg-copy", "h100-disagg", stacks_dir)


@pytest.mark.parametrize("dst", ["h100-disagg-staging", "h100-disagg-prod"])
def test_promotion_to_staging_or_prod_refuses_an_open_network(stacks_dir, capsys, dst):
    """A release stack on the EKS cluster it creates keeps NetworkPolicies on and its API endpoint off the open internet;
    the committed staging and prod files do (EKS's own default publicAccessCidrs is 0.0.0.0/0)."""
    dev, path = stacks_dir / "Pulumi.h100-disagg.yaml", stacks_dir / f"Pulumi.{dst}.yaml"
    _pin_release(dev)
    committed = path.read_text()
    assert (
        "  dynamo:networkPolicy:\n    enabled: true\n" in committed and "    publicAccessCidrs: [203.0.113.0/24]\n" in committed
    )
    plan_promotion("h100-disagg", dst, stacks_dir)  # as committed: promoted
    path.write_text(
        committed.replace("  dynamo:networkPolicy:\n    enabled: true\n", "").replace(
            "    publicAccessCidrs: [203.0.113.0/24]\n", ""
        )
    )
    before = path.read_text()
    rc = cli(["promote", "--from", "h100-disagg", "--to", dst, "--root", str(stacks_dir), "--yes"])
    err = capsys.readouterr().err
    env = dst.rsplit("-", 1)[1]
    assert rc == 1 and path.read_text() == before
    assert f"dynamo:networkPolicy.enabled is not true: a {env} stack restricts what each Dynamo pod may reach" in err
    assert (
        f"dynamo:cluster.publicAccessCidrs is ['0.0.0.0/0']: a {env} stack's Kubernetes API endpoint accepts connections from any address"
        in err
    )
    # a private endpoint needs no public ranges
    path.write_text(committed.replace("    publicAccessCidrs: [203.0.113.0/24]\n", "    endpointAccess: private\n"))
    plan_promotion("h100-disagg", dst, stacks_dir)


def test_promotion_carries_the_ami_release_the_source_runs(stacks_dir):
    """A staging or prod node moves to a new AMI only by a promotion: promote writes the source's AMI release (its own
    amiReleaseVersion, or the one this commit pins for its Kubernetes version) into the destination's cluster, every
    other line of that block as it was; a source on another Kubernetes version is refused."""
    dev, stg, prod = (stacks_dir / f"Pulumi.{n}.yaml" for n in ("h100-disagg", "h100-disagg-staging", "h100-disagg-prod"))
    _pin_release(dev)
    # the committed chain is at release v20260714 (awslabs/amazon-eks-ami CHANGELOG.md: Kubernetes 1.35 -> 1.35.6-20260714)
    assert _cfg(stg)["cluster"]["amiReleaseVersion"] == _cfg(prod)["cluster"]["amiReleaseVersion"] == "1.35.6-20260714"
    _, new = plan_promotion("h100-disagg", "h100-disagg-staging", stacks_dir)
    assert new.count("amiReleaseVersion") == 1 and yaml_text.load(new)["config"]["dynamo:cluster"] == _cfg(stg)["cluster"]
    # staging (at dev's release keys) on an older AMI: promoting dev (at this commit's pin) moves it, only that line changes
    stg.write_text(new.replace("amiReleaseVersion: 1.35.6-20260714", "amiReleaseVersion: 1.35.5-20260601"))
    old, new = plan_promotion("h100-disagg", "h100-disagg-staging", stacks_dir)
    changed = [(a, b) for a, b in zip(old.splitlines(), new.splitlines()) if a != b]
    assert len(old.splitlines()) == len(new.splitlines())
    assert changed == [("    amiReleaseVersion: 1.35.5-20260601", "    amiReleaseVersion: 1.35.6-20260714")], changed
    # staging's own release goes on to prod, whatever this commit pins
    stg.write_text(new.replace("1.35.6-20260714", "1.35.5-20260601"))
    _, new = plan_promotion("h100-disagg-staging", "h100-disagg-prod", stacks_dir)
    assert yaml_text.load(new)["config"]["dynamo:cluster"]["amiReleaseVersion"] == "1.35.5-20260601"
    # without the line in the destination, it is added after mode:
    prod.write_text(prod.read_text().replace("    amiReleaseVersion: 1.35.6-20260714\n", ""))
    _, new = plan_promotion("h100-disagg-staging", "h100-disagg-prod", stacks_dir)
    assert "    mode: eks\n    amiReleaseVersion: 1.35.5-20260601\n" in new
    # a destination on another Kubernetes version cannot take the release
    prod.write_text(
        prod.read_text().replace("    mode: eks\n", '    mode: eks\n    kubernetesVersion: "1.34"\n    upgradePolicy: EXTENDED\n')
    )
    with pytest.raises(
        PromotionError, match=r"AMI release 1.35.5-20260601 is for Kubernetes 1.35, and h100-disagg-prod runs 1.34"
    ):
        plan_promotion("h100-disagg-staging", "h100-disagg-prod", stacks_dir)


def test_environment_is_the_rule_ci_applies():
    import importlib.util

    spec = importlib.util.spec_from_file_location("stack_kind", ROOT / ".github" / "stack_kind.py")
    stack_kind = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stack_kind)
    names = [p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml")] + [
        "a-prod",
        "a-staging",
        "prod",
        "a-production",
    ]
    assert {n: promote.environment(n) for n in names} == {n: stack_kind.environment(n) for n in names}
    assert {promote.environment(n) for n in names} == {"dev", "staging", "prod"}


def test_pinned_values_are_not_floating():
    assert (
        floating_values(
            {
                "images": {"a": "nvcr.io/x/y:1.4.0", "b": "nvcr.io/x/y@sha256:" + "b" * 64, "c": "host:5000/y:1.0"},
                "modelRevision": {"nvidia/m": "0123456789abcdef0123456789abcdef01234567", "nvidia/d": "v1.2.0"},
            }
        )
        == []
    )
    assert floating_values({"modelRevision": "20250101"}) == []  # a number names a tag, not a branch
    assert floating_values({"modelRevision": 20250101}) == []


def test_environment_keys_never_copied(stacks_dir):
    dev, prod = stacks_dir / "Pulumi.h100-disagg.yaml", stacks_dir / "Pulumi.h100-disagg-prod.yaml"
    # the dev stack sets every environment key differently from prod
    dev.write_text(
        dev.read_text() + "  dynamo:replicas:\n    Frontend: 9\n  dynamo:wait:\n    enabled: false\n"
        "  dynamo:hfTokenSecretName: dev-token\n  dynamo:createNamespace: false\n"
    )
    _pin_release(dev)
    before = _cfg(prod)
    _, new = plan_promotion("h100-disagg", "h100-disagg-prod", stacks_dir)
    got = {k.split(":", 1)[1]: v for k, v in yaml_text.load(new)["config"].items()}
    assert {k: got.get(k) for k in promote.ENV_KEYS} == {k: before.get(k) for k in promote.ENV_KEYS}
    assert got["cluster"]["capacityReservationId"] == before["cluster"]["capacityReservationId"]


def test_unknown_stack_is_refused(stacks_dir):
    with pytest.raises(PromotionError, match="no Pulumi.nope.yaml"):
        plan_promotion("h100-disagg", "nope", stacks_dir)


def test_committed_promotion_examples_are_at_the_dev_release():
    """The committed chain carries the dev stack's release keys; it names images by the catalog's tags and no model
    revision, so promoting it into staging or prod is refused until the dev stack records digests and a commit."""
    dev = _cfg(ROOT / "Pulumi.h100-disagg.yaml")
    for env in ("staging", "prod"):
        got = _cfg(ROOT / f"Pulumi.h100-disagg-{env}.yaml")
        assert {k: got.get(k) for k in promote.RELEASE_KEYS} == {k: dev.get(k) for k in promote.RELEASE_KEYS}
        with pytest.raises(PromotionError) as e:
            plan_promotion("h100-disagg", f"h100-disagg-{env}", ROOT)
        for comp in ("Frontend", "VllmPrefillWorker", "VllmDecodeWorker"):
            assert f"dynamo:images.{comp} is not set" in str(e.value)
        assert "dynamo:modelRevision is not set" in str(e.value)


# --------------------------------------------------------------------------- promotion edge cases (unknown keys, fabricProfile, secrets)

CANARY = "hf_CANARY_promote_4b1e"


def test_every_config_key_is_release_or_environment():
    from stacks.config.keys import StackConfig

    keys = {f.alias or n for n, f in StackConfig.model_fields.items()}
    assert keys <= promote.RELEASE_KEYS | promote.ENV_KEYS, keys - (promote.RELEASE_KEYS | promote.ENV_KEYS)
    assert promote.RELEASE_KEYS <= keys  # nothing the program would reject as an unknown key is copied


def test_chart_versions_are_not_copied_and_fabric_profile_is(stacks_dir, capsys):
    dev, stg = stacks_dir / "Pulumi.h100-disagg.yaml", stacks_dir / "Pulumi.h100-disagg-staging.yaml"
    _set_release(dev, chartVersions={"dynamo-platform": "1.5.0"}, fabricProfile="aws-efa")
    _pin_release(dev)
    # the h100 disagg recipe is on EFA already: the profile is accepted and changes nothing but the key
    _, new = plan_promotion("h100-disagg", "h100-disagg-staging", stacks_dir)
    got = {k.split(":", 1)[1]: v for k, v in yaml_text.load(new)["config"].items()}
    assert "chartVersions" not in got
    assert got["fabricProfile"] == "aws-efa"
    # and the other way round: a destination's fabricProfile the source no longer has is removed,
    # so "already at release" means the same DGD
    _set_release(stg, fabricProfile="aws-efa")
    dev.write_text(dev.read_text().replace("  dynamo:fabricProfile: aws-efa\n", ""))
    _, new = plan_promotion("h100-disagg", "h100-disagg-staging", stacks_dir)
    assert "fabricProfile" not in new


def test_promotion_the_program_would_reject_is_refused_before_printing(stacks_dir, capsys):
    dev, stg = stacks_dir / "Pulumi.h100-disagg.yaml", stacks_dir / "Pulumi.h100-disagg-staging.yaml"
    _set_release(dev, images={"NoSuchWorker": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0"})
    before = stg.read_text()
    rc = cli(["promote", "--from", "h100-disagg", "--to", "h100-disagg-staging", "--root", str(stacks_dir), "--yes"])
    out, err = capsys.readouterr()
    assert rc == 2 and "'NoSuchWorker'" in err and "would not deploy" in err
    assert out == "" and stg.read_text() == before


def test_plain_text_secret_in_destination_is_never_printed(stacks_dir, capsys):
    dev, stg = stacks_dir / "Pulumi.h100-disagg.yaml", stacks_dir / "Pulumi.h100-disagg-staging.yaml"
    _set_release(dev, images={"VllmDecodeWorker": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0"})
    stg.write_text(stg.read_text() + f"  dynamo:hfToken: {CANARY}\n")
    rc = cli(["promote", "--from", "h100-disagg", "--to", "h100-disagg-staging", "--root", str(stacks_dir)])
    out, err = capsys.readouterr()
    assert rc != 0 and "dynamo:hfToken" in err and "plain text" in err
    assert CANARY not in out + err


def test_redact_text_hides_plain_secret_values_and_keeps_secure_ones():
    text = (
        "# hfToken: comments are kept\n"
        "config:\n"
        f"  dynamo:hfToken: {CANARY}\n"
        "  dynamo:kubeconfig: |\n"
        f"    users: [{{name: a, user: {{token: {CANARY}}}}}]\n"
        "  dynamo:ngcApiKey:\n"
        "    secure: v1:abc\n"
        "  dynamo:hfTokenSecretName: hf-token-secret\n"
        "  dynamo:cluster:\n"
        "    mode: eks\n"
        f"    password: {CANARY}\n"
        "  aws:secretKey:\n"
        f"    nested: {CANARY}\n"
    )
    shown = promote.redact_text(text)
    assert CANARY not in shown
    assert "secure: v1:abc" in shown and "dynamo:hfTokenSecretName: hf-token-secret" in shown and "mode: eks" in shown
    assert shown.count(promote.REDACTED_PLAIN) == 4
    assert promote.redact_text("config:\n  dynamo:gpu: h100\n") == "config:\n  dynamo:gpu: h100\n"


@pytest.mark.parametrize("text", ["- a\n- b\n", "config:\n  - dynamo:gpu: h100\n", "config: [\n"])
def test_stack_file_that_is_not_a_mapping_is_a_clean_error(stacks_dir, capsys, text):
    (stacks_dir / "Pulumi.h100-disagg-staging.yaml").write_text(text)
    for a, b in (("h100-disagg", "h100-disagg-staging"), ("h100-disagg-staging", "h100-disagg")):
        rc = cli(["promote", "--from", a, "--to", b, "--root", str(stacks_dir)])
        err = capsys.readouterr().err
        assert rc == 1 and "Pulumi.h100-disagg-staging.yaml" in err and "Traceback" not in err


def test_multi_target_stacks_are_not_promoted_silently(stacks_dir, capsys):
    stg = stacks_dir / "Pulumi.h100-disagg-staging.yaml"
    stg.write_text(stg.read_text() + "  dynamo:serve:\n    - target: lightning-vllm-agg-h100-dspark\n")
    rc = cli(["promote", "--from", "h100-disagg", "--to", "h100-disagg-staging", "--root", str(stacks_dir)])
    assert rc == 1 and "dynamo:serve" in capsys.readouterr().err


# --------------------------------------------------------------------------- did you mean (unknown stack / target)


def test_unknown_stack_or_target_gets_did_you_mean(capsys):
    from stacks.program.render import stack_raw_config
    from stacks.config.keys import ConfigError

    with pytest.raises(ConfigError, match=r"has no Pulumi\.h100-disag\.yaml; did you mean 'h100-disagg'\?"):
        stack_raw_config("h100-disag")
    rc = cli(["simulate", "--target", "lightning-vllm-agg-h100-dspak"])
    assert rc != 0 and "did you mean 'lightning-vllm-agg-h100-dspark'?" in capsys.readouterr().err


def _serve_stack(path: Path, serve: list, top: str = "") -> None:
    path.write_text(
        "# comment kept\nconfig:\n"
        + top
        + "  # entries below\n"
        + "  "
        + yaml.safe_dump({"dynamo:serve": serve}, sort_keys=False).replace("\n", "\n  ").rstrip()
        + "\n"
    )


def test_serve_stacks_promote_release_keys_per_entry_by_name(tmp_path, capsys):
    """Promotion works on dynamo:serve (several-entry) stacks: per entry (matched by name) the release keys come from
    the source; namespace, replicas and other environment keys stay; an entry only the destination has stays."""
    top = "  dynamo:hfTokenSecretName: hf-token-secret\n  dynamo:createNamespace: false\n"
    _serve_stack(
        tmp_path / "Pulumi.s-dev.yaml",
        [
            {
                "name": "chat",
                "target": "lightning-vllm-disagg-h100-dspark",
                "namespace": "dev",
                "images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1-x.2" + DIGEST},
                "modelRevision": REVISION,
                "overrides": {"VllmDecodeWorker": {"args": {"set": {"--max-num-seqs": "64"}}}},
            }
        ],
        top,
    )
    _serve_stack(
        tmp_path / "Pulumi.s-prod.yaml",
        [
            {"name": "chat", "target": "lightning-vllm-agg-h100-dspark", "namespace": "prod", "replicas": {"Frontend": 2}},
            {"name": "legacy", "target": "lightning-vllm-agg-h100-mtp", "namespace": "prod-legacy"},
        ],
        top,
    )
    rc = cli(["promote", "--from", "s-dev", "--to", "s-prod", "--root", str(tmp_path), "--yes"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    text = (tmp_path / "Pulumi.s-prod.yaml").read_text()
    assert text.startswith("# comment kept\n") and "  # entries below\n" in text
    chat, legacy = yaml_text.load(text)["config"]["dynamo:serve"]
    assert chat == {
        "name": "chat",
        "namespace": "prod",
        "replicas": {"Frontend": 2},
        "target": "lightning-vllm-disagg-h100-dspark",
        "images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1-x.2" + DIGEST},
        "modelRevision": REVISION,
        "overrides": {"VllmDecodeWorker": {"args": {"set": {"--max-num-seqs": "64"}}}},
    }
    assert legacy == {"name": "legacy", "target": "lightning-vllm-agg-h100-mtp", "namespace": "prod-legacy"}
    assert "max-num-seqs" in out  # the rendered-object diff shows the override reaching prod
    # the entry only prod has (legacy, catalog tags) is not promoted, so it is not checked; a promoted entry by tag is
    _serve_stack(
        tmp_path / "Pulumi.s-dev.yaml",
        [{"name": "chat", "target": "lightning-vllm-disagg-h100-dspark", "namespace": "dev", "modelRevision": REVISION}],
        top,
    )
    assert cli(["promote", "--from", "s-dev", "--to", "s-prod", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "dynamo:serve[chat].images.VllmDecodeWorker is not set" in err and "serve[legacy]" not in err


@pytest.mark.parametrize(
    "dst_serve, needle",
    [
        (
            [{"name": "other", "target": "lightning-vllm-agg-h100-dspark", "namespace": "p"}],
            "are not in 's-prod': add them there first",
        ),
        ([{"target": "lightning-vllm-agg-h100-dspark", "namespace": "p"}], "dynamo:serve[0] has no name"),
    ],
)
def test_serve_promotion_refuses_what_it_cannot_match(tmp_path, capsys, dst_serve, needle):
    _serve_stack(tmp_path / "Pulumi.s-dev.yaml", [{"name": "chat", "target": "lightning-vllm-agg-h100-dspark", "namespace": "d"}])
    _serve_stack(tmp_path / "Pulumi.s-prod.yaml", dst_serve)
    assert cli(["promote", "--from", "s-dev", "--to", "s-prod", "--root", str(tmp_path)]) == 1
    assert needle in capsys.readouterr().err


def test_serve_promotion_refuses_a_floating_image_in_an_entry(tmp_path, capsys):
    _serve_stack(
        tmp_path / "Pulumi.s-dev.yaml",
        [
            {
                "name": "chat",
                "target": "lightning-vllm-agg-h100-dspark",
                "namespace": "d",
                "images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"},
            }
        ],
    )
    _serve_stack(
        tmp_path / "Pulumi.s-prod.yaml", [{"name": "chat", "target": "lightning-vllm-agg-h100-dspark", "namespace": "p"}]
    )
    assert cli(["promote", "--from", "s-dev", "--to", "s-prod", "--root", str(tmp_path)]) == 1
    assert "dynamo:serve[chat].images.*" in capsys.readouterr().err
