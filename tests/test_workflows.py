"""The GitHub Actions workflows lint clean with actionlint (built from the Go module proxy by tools/actionlint.sh),
and the lint does catch a broken workflow."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "actionlint.sh"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed: tools/actionlint.sh builds actionlint from the Go module proxy")


def _lint(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, files)], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"pr.yml", "main.yml"}


def test_workflows_lint_clean():
    r = _lint(*WORKFLOWS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == ""


def test_broken_workflow_is_flagged(tmp_path):
    wf = tmp_path / ".github" / "workflows" / "broken.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(
        "on: pull_request\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: ubuntu-latest\n"
        "    needs: no-such-job\n"
        "    steps:\n"
        "      - run: echo ${{ github.event.pull_request.title }}\n"
        "      - uses: actions/checkout@v4\n"
        "        with: {fetch-depht: 0}\n"
    )
    r = _lint(wf)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no-such-job" in r.stdout
    assert "fetch-depht" in r.stdout


def _load(name: str) -> dict:
    # PyYAML reads the `on:` key as True
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def test_pr_workflow_shape():
    wf = _load("pr.yml")
    jobs = wf["jobs"]
    assert set(jobs) >= {"changed-stacks", "preview", "manifest-diff", "test"}
    pulumi = next(s for s in jobs["preview"]["steps"] if s.get("uses", "").startswith("pulumi/actions@"))
    assert pulumi["uses"] == "pulumi/actions@v6"
    assert pulumi["with"]["command"] == "preview" and pulumi["with"]["diff"] is True
    assert pulumi["with"]["comment-on-pr"] is True and pulumi["with"]["edit-pr-comment"] is True
    run = "\n".join(s.get("run", "") for s in jobs["manifest-diff"]["steps"])
    assert "python -m stacks diff --base \"origin/$BASE_REF\"" in run
    assert "secrets." not in yaml.safe_dump(jobs["manifest-diff"])  # credential-free
    assert any(s.get("run") == "make test" for s in jobs["test"]["steps"])


def test_main_workflow_promotes_behind_environments():
    jobs = _load("main.yml")["jobs"]
    assert jobs["staging"]["environment"] == "staging" and jobs["prod"]["environment"] == "prod"
    assert "staging" in jobs["prod"]["needs"] and "dev" in jobs["staging"]["needs"]
    for job in ("staging", "prod"):
        text = yaml.safe_dump(jobs[job])
        assert "python -m stacks promote" in text and "command: up" in text


def test_actions_pinned_by_major_version():
    for wf in WORKFLOWS:
        for job in yaml.safe_load(wf.read_text())["jobs"].values():
            for step in job.get("steps", []):
                if "uses" in step:
                    assert step["uses"].rsplit("@", 1)[1].startswith("v"), (wf.name, step["uses"])
                    assert "." not in step["uses"].rsplit("@", 1)[1], (wf.name, step["uses"])


def test_a_push_never_deploys_a_gpu_stack():
    """issue 8 finding 13: every `pulumi up` on a GPU (EKS) stack needs a manual run with deploy: true."""
    wf = _load("main.yml")
    assert "workflow_dispatch" in wf[True] and wf[True]["workflow_dispatch"]["inputs"]["deploy"]["type"] == "boolean"
    manual = "github.event_name == 'workflow_dispatch' && inputs.deploy"
    for name, job in wf["jobs"].items():
        for step in job.get("steps", []):
            if step.get("uses", "").startswith("pulumi/actions@") and step["with"]["command"] == "up":
                cond = f"{job.get('if', '')} {step.get('if', '')}"
                assert manual in cond, (name, cond)
                if manual not in job.get("if", ""):  # the dev job: render stacks up on push, EKS stacks only by hand
                    assert step["if"] == f"steps.kind.outputs.eks != 'true' || ({manual})", (name, step["if"])
    for name in ("staging", "prod", "record"):
        assert manual in wf["jobs"][name]["if"], name


@pytest.mark.parametrize("path", sorted(ROOT.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_the_eks_detection_step_reads_the_stack_file(path, tmp_path):
    import os

    step = next(s for s in _load("main.yml")["jobs"]["dev"]["steps"] if s.get("id") == "kind")
    out = tmp_path / "out"
    env = {**os.environ, "STACK": path.name.split(".")[1], "GITHUB_OUTPUT": str(out)}
    r = subprocess.run(["bash", "-c", step["run"]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cfg = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    want = (cfg.get("dynamo:cluster") or {}).get("mode") == "eks"
    assert out.read_text().strip() == f"eks={str(want).lower()}"
