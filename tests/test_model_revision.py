"""``dynamo:modelRevision`` pins what every model family downloads.

Each download Job records how it takes a revision (``builders.RevisionPin`` on its ``DownloadJob``); the families and
targets below come from the catalog, not from a list written here. Without a revision the Jobs are upstream's (the
fidelity check, tests/test_fidelity.py, compares them). The pinned scripts are run here against stand-ins of
huggingface_hub's ``snapshot_download`` and of the ``hf download`` CLI that write the cache the way huggingface_hub does
(src/huggingface_hub/_snapshot_download.py: a ref ``refs/<revision>`` only for a branch or tag, none for a commit):
after a pinned download, the cache's ``refs/main``, which the workers read with ``HF_HUB_OFFLINE=1``, names the pinned
commit.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stacks import catalog
from stacks.catalog.builders import REVISION_ENV
from stacks.program.render import render_config

REVISION = "0123456789abcdef0123456789abcdef01234567"
# One target per model and set of cache Jobs: every download Job the catalog renders.
BY_JOBS = {}
for _t in sorted(catalog.targets().values(), key=lambda t: t.id):
    BY_JOBS.setdefault((_t.model, _t.cache_jobs), _t)
TARGETS = sorted(t.id for t in BY_JOBS.values())


def _jobs(objs):
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "Job"}


def _env(job):
    return [e for c in job["spec"]["template"]["spec"]["containers"] for e in c.get("env") or []]


def test_every_model_family_downloads_a_pinned_revision():
    assert catalog.revision_models() == sorted(catalog.families())
    for fam in catalog.families().values():
        assert any(getattr(b, "revision", None) is not None for b in fam.cache_job_builders.values()), fam.id


@pytest.mark.parametrize("tid", TARGETS)
def test_the_revision_reaches_each_download_job_and_only_with_it(tid):
    t = catalog.targets()[tid]
    pins = catalog.revision_pins(t)
    assert pins, f"{tid}: no cache Job takes dynamo:modelRevision"
    plain, pinned = _jobs(render_config({"target": tid})), _jobs(render_config({"target": tid, "modelRevision": REVISION}))
    assert plain.keys() == pinned.keys() == set(t.cache_jobs)
    fam = catalog.families()[t.model]
    for name in t.cache_jobs:
        built = fam.cache_job_builders[name]()["spec"]["template"]["spec"]["containers"][0]
        plain_c = plain[name]["spec"]["template"]["spec"]["containers"][0]
        assert plain_c["args"] == built["args"]  # without a revision: the catalog's (upstream's) script
        assert not any(e["name"] == REVISION_ENV for e in _env(plain[name]))
        if name in pins:
            assert {"name": REVISION_ENV, "value": REVISION} in _env(pinned[name])
            assert all("MODEL_REVISION" in a for a in pinned[name]["spec"]["template"]["spec"]["containers"][0]["args"])
        else:
            assert pinned[name] == plain[name]  # e.g. Ultra's validate Job


def _stub_hub(tmp_path: Path) -> Path:
    """A huggingface_hub stand-in: snapshot_download(repo_id, revision) fills $HF_HOME/hub like the real one."""
    d = tmp_path / "stub"
    (d / "huggingface_hub").mkdir(parents=True)
    (d / "huggingface_hub" / "__init__.py").write_text(
        textwrap.dedent("""
        import hashlib, os, re
        from pathlib import Path

        def _commit(repo_id, revision):
            if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
                return revision
            return hashlib.sha1(f"{repo_id}@{revision or 'main'}".encode()).hexdigest()

        def snapshot_download(repo_id, revision=None, **_):
            with open(os.environ["CALLS"], "a") as f:
                f.write(f"{repo_id} {revision}\\n")
            revision = revision or "main"
            repo = Path(os.environ["HF_HOME"]) / "hub" / ("models--" + repo_id.replace("/", "--"))
            commit = _commit(repo_id, revision)
            (repo / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
            if revision != commit:  # a branch or tag: store a ref (none for a commit)
                (repo / "refs" / revision).parent.mkdir(parents=True, exist_ok=True)
                (repo / "refs" / revision).write_text(commit)
            return str(repo / "snapshots" / commit)
    """)
    )
    return d


def _main_commit(repo_id):
    return hashlib.sha1(f"{repo_id}@main".encode()).hexdigest()


def _container(tid, revision):
    job = next(iter(_jobs(render_config({"target": tid, "modelRevision": revision})).values()))
    return job["spec"]["template"]["spec"]["containers"][0]


def _refs_main(hf_home: Path, repo_id: str) -> str:
    return (hf_home / "hub" / ("models--" + repo_id.replace("/", "--")) / "refs" / "main").read_text()


def test_lightning_pinned_download_points_refs_main_at_the_pinned_commit(tmp_path):
    c = _container("lightning-vllm-agg-h100-dspark", REVISION)
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    hf_home, calls = tmp_path / "cache", tmp_path / "calls"
    base = env["BASE_MODEL"]
    # an earlier unpinned download left the base model's main behind
    old = hf_home / "hub" / ("models--" + base.replace("/", "--"))
    (old / "refs").mkdir(parents=True)
    (old / "refs" / "main").write_text("f" * 40)
    run_env = {**os.environ, **env, "HF_HOME": str(hf_home), "CALLS": str(calls), "PYTHONPATH": str(_stub_hub(tmp_path))}
    assert c["command"] == ["python3", "-c"]
    out = subprocess.run([sys.executable, "-c", c["args"][0]], env=run_env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert calls.read_text().splitlines() == [f"{base} {REVISION}", f"{env['DFLASH_MODEL']} None", f"{env['DSPARK_MODEL']} None"]
    assert _refs_main(hf_home, base) == REVISION
    for draft in ("DFLASH_MODEL", "DSPARK_MODEL"):  # the drafts stay on their default branch
        assert _refs_main(hf_home, env[draft]) == _main_commit(env[draft])


HF_STUB = """#!{python}
import hashlib, os, re, sys
from pathlib import Path
args = sys.argv[1:]
assert args[0] == "download", args
name, rest = args[1], args[2:]
revision = rest[rest.index("--revision") + 1] if "--revision" in rest else "main"
commit = revision if re.fullmatch(r"[0-9a-f]{{40}}", revision) else hashlib.sha1(f"{{name}}@{{revision}}".encode()).hexdigest()
repo = Path(os.environ["HF_HOME"]) / "hub" / ("models--" + name.replace("/", "--"))
(repo / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
if revision != commit:
    (repo / "refs" / revision).parent.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
print(repo / "snapshots" / commit)
"""


@pytest.mark.parametrize("revision", [REVISION, "v1.0"])
def test_motif_pinned_download_points_refs_main_at_the_pinned_commit(tmp_path, revision):
    c = _container("motif3-vllm-agg-b200-chat", revision)
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    bin_dir, hf_home = tmp_path / "bin", tmp_path / "cache"
    bin_dir.mkdir()
    for name, text in (("hf", HF_STUB.format(python=sys.executable)), ("pip", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IEXEC)
    assert c["command"] == ["sh", "-c"]
    run_env = {**os.environ, **env, "HF_HOME": str(hf_home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", c["args"][0]], env=run_env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    want = revision if revision == REVISION else hashlib.sha1(f"{env['MODEL_NAME']}@{revision}".encode()).hexdigest()
    assert _refs_main(hf_home, env["MODEL_NAME"]) == want


def test_motif_pinned_download_fails_when_the_revision_is_not_there(tmp_path):
    """A short or unknown revision that leaves no snapshot of that name stops the Job instead of serving another one."""
    c = _container("motif3-vllm-agg-b200-chat", "v1.0")
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("hf", "pip"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")  # downloads nothing
        (bin_dir / name).chmod(0o755)
    run_env = {**os.environ, **env, "HF_HOME": str(tmp_path / "cache"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", c["args"][0]], env=run_env, capture_output=True, text=True)
    assert out.returncode != 0
    assert not (tmp_path / "cache" / "hub" / ("models--" + env["MODEL_NAME"].replace("/", "--")) / "refs" / "main").exists()
