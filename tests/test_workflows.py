"""The GitHub Actions workflows: pipeline rules (credentials by environment, one passphrase per environment, deploys
only from main, release ups that apply the plan their approver saw after the commit's tests, actions pinned by commit),
which stacks a pull request may preview and which a push may deploy (from each stack file's cluster.mode), a record
step that proposes main's own result as a pull request instead of pushing main, the repository settings docs/ci.md
names, and a clean actionlint (built from the Go module proxy by tools/actionlint.sh).

The rule checks are plain functions run on the workflows' text. Each of them is also run on the workflows as they
were before these rules (tests/fixtures/workflows-unhardened/) and on small mutations of today's files, and must
flag them: the checks can fail.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import need_tool
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "actionlint.sh"
CI_TOOLS = ROOT / "tools" / "ci-tools.sh"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
UNHARDENED = ROOT / "tests" / "fixtures" / "workflows-unhardened"

MAIN_REF = "refs/heads/main"
DEPLOY_ENVIRONMENTS = {"dev", "staging", "prod"}
PREVIEW_ENVIRONMENT = "preview"
# The release environments' previews (main only, no reviewers): the saved plan their environment's approver reads.
RELEASE_PREVIEW = {"staging": "staging-preview", "prod": "prod-preview"}
PREVIEW_ENVIRONMENTS = {PREVIEW_ENVIRONMENT, *RELEASE_PREVIEW.values()}
# One passphrase per environment (docs/ci.md): dev-level stacks (the PR preview and dev), staging, prod. A job may
# reference only its own environment's; a PR job never the staging or prod one.
ENV_PASSPHRASE = {
    "preview": "PULUMI_DEV_CONFIG_PASSPHRASE",
    "dev": "PULUMI_DEV_CONFIG_PASSPHRASE",
    "staging-preview": "PULUMI_STAGING_CONFIG_PASSPHRASE",
    "staging": "PULUMI_STAGING_CONFIG_PASSPHRASE",
    "prod-preview": "PULUMI_PROD_CONFIG_PASSPHRASE",
    "prod": "PULUMI_PROD_CONFIG_PASSPHRASE",
}
RELEASE_PASSPHRASES = {"PULUMI_STAGING_CONFIG_PASSPHRASE", "PULUMI_PROD_CONFIG_PASSPHRASE"}
# Names of the deploy credentials (docs/ci.md): they may appear only in jobs of the deploy environments.
DEPLOY_SECRETS = {"PULUMI_ACCESS_TOKEN"}
DEPLOY_VARS = {"AWS_ROLE_ARN"}
# Events whose jobs run code from a pull request (the PR's head or merge commit, or a fork's).
PR_EVENTS = {
    "pull_request",
    "pull_request_target",
    "pull_request_review",
    "pull_request_review_comment",
    "issue_comment",
    "workflow_run",
    "merge_group",
}
MUTATING_PULUMI = {"up", "update", "destroy", "refresh", "import"}

SHA_PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$")
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*['\"]?(?P<ref>[^\s'\"#]+)['\"]?\s*(?P<comment>#.*)?$")
VERSION_COMMENT = re.compile(r"^#\s*v\d+(?:\.\d+){0,2}\b")


# --------------------------------------------------------------------------- the rules (pure functions of the text)


def _triggers(wf: dict) -> set[str]:
    on = wf.get(True, wf.get("on"))  # PyYAML reads the `on:` key as True
    if isinstance(on, str):
        return {on}
    return set(on or ())


def _env_name(job: dict) -> str | None:
    env = job.get("environment")
    return env.get("name") if isinstance(env, dict) else env


def _permissions(wf: dict, job: dict):
    return job["permissions"] if "permissions" in job else wf.get("permissions")


def pin_violations(text: str) -> list[str]:
    """Every `uses:` names a full commit SHA and carries its version in a comment (`# vX.Y.Z`)."""
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        if "uses:" not in line.split("#", 1)[0]:
            continue
        m = USES_LINE.match(line)
        if not m:
            bad.append(f"line {n}: cannot read `uses:` (flow style?): {line.strip()}")
            continue
        ref = m["ref"]
        if ref.startswith("./"):
            continue  # an action in this repository: pinned by the checkout itself
        if ref.startswith("docker://"):
            if not re.search(r"@sha256:[0-9a-f]{64}$", ref):
                bad.append(f"line {n}: {ref} is not pinned by digest")
            continue
        if not SHA_PINNED.match(ref):
            bad.append(f"line {n}: {ref} is not pinned to a full 40-hex commit SHA")
        elif not (m["comment"] and VERSION_COMMENT.match(m["comment"])):
            bad.append(f"line {n}: {ref} has no version comment (`# vX.Y.Z`)")
    return bad


def credential_violations(text: str) -> list[str]:
    """Credentials (secrets other than GITHUB_TOKEN, `id-token: write`) only in a job that names an environment; deploy
    credentials only in the dev/staging/prod environments; a job that runs PR code never in a deploy environment."""
    wf = yaml_text.load(text)
    pr_code = bool(_triggers(wf) & PR_EVENTS)
    bad = []
    for name, job in (wf.get("jobs") or {}).items():
        body = yaml.safe_dump(job)
        secrets = set(re.findall(r"secrets\.([A-Za-z_][A-Za-z0-9_]*)", body)) - {"GITHUB_TOKEN"}
        if job.get("secrets") == "inherit":
            secrets.add("<inherit>")
        perms = _permissions(wf, job)
        id_token = perms == "write-all" or (isinstance(perms, dict) and perms.get("id-token") == "write")
        deploy_names = {s for s in secrets if s in DEPLOY_SECRETS} | {
            v for v in re.findall(r"vars\.([A-Za-z_][A-Za-z0-9_]*)", body) if v in DEPLOY_VARS
        }
        env = _env_name(job)
        what = ", ".join(sorted(secrets | ({"id-token: write"} if id_token else set())))
        who = "runs PR code and " if pr_code else ""
        if (secrets or id_token) and not env:
            bad.append(f"job {name} {who}holds credentials ({what}) outside an environment")
        if pr_code and env in DEPLOY_ENVIRONMENTS:
            bad.append(f"job {name} runs PR code in the deploy environment {env}")
        if pr_code and env in RELEASE_PREVIEW.values():
            bad.append(f"job {name} runs PR code in the release environment {env}")
        for s in sorted(s for s in secrets if "PASSPHRASE" in s):
            if s != ENV_PASSPHRASE.get(env):
                bad.append(
                    f"job {name} decrypts with {s} in environment {env}: "
                    f"{'that environment has none' if env not in ENV_PASSPHRASE else 'its own is ' + ENV_PASSPHRASE[env]}"
                )
        if deploy_names and env not in DEPLOY_ENVIRONMENTS:
            bad.append(
                f"job {name} uses deploy credentials ({', '.join(sorted(deploy_names))}) outside "
                f"the {sorted(DEPLOY_ENVIRONMENTS)} environments"
            )
        if (secrets or id_token) and env and env not in DEPLOY_ENVIRONMENTS | PREVIEW_ENVIRONMENTS:
            bad.append(f"job {name} holds credentials in an environment docs/ci.md does not describe: {env}")
    return bad


def _deploys(job: dict) -> bool:
    for step in job.get("steps") or []:
        uses = step.get("uses", "")
        if uses.startswith("pulumi/actions@") and str((step.get("with") or {}).get("command")) in MUTATING_PULUMI:
            return True
        run = step.get("run", "")
        if re.search(r"\bpulumi\s+(up|update|destroy|refresh|import)\b", run) or re.search(r"\bgit\b[^\n#]*\spush\b", run):
            return True
    return False


def _refuses_other_refs(job: dict) -> bool:
    """A job that fails (exit 1) unless the ref is main: a run step that compares the ref with refs/heads/main."""
    for step in job.get("steps") or []:
        run = step.get("run", "")
        if MAIN_REF in run and re.search(r"\bexit\s+1\b", run) and ("github.ref" in yaml.safe_dump(step) or "GITHUB_REF" in run):
            return True
    return False


def _upstream(jobs: dict, name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        needs = jobs[todo.pop()].get("needs") or []
        for n in [needs] if isinstance(needs, str) else needs:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def ref_violations(text: str) -> list[str]:
    """A workflow that deploys or pushes runs it only from main: on push only for main; on a dispatch (any ref can
    be chosen) every such job checks `github.ref == 'refs/heads/main'` itself and needs a job that fails otherwise."""
    wf = yaml_text.load(text)
    on = wf.get(True, wf.get("on"))
    triggers = _triggers(wf)
    jobs = wf.get("jobs") or {}
    deployers = [n for n, j in jobs.items() if _deploys(j)]
    bad = []
    if not deployers:
        return bad
    if "push" in triggers:
        branches = ((on or {}).get("push") or {}).get("branches") if isinstance(on, dict) else None
        if branches != ["main"]:
            bad.append(f"deploy jobs {deployers} run on a push to {branches or 'any branch'}, not only main")
    if triggers & ({"workflow_dispatch", "repository_dispatch", "workflow_call", "schedule"} | PR_EVENTS):
        guards = {n for n, j in jobs.items() if _refuses_other_refs(j)}
        for name in deployers:
            cond = str(jobs[name].get("if", ""))
            if not re.search(r"github\.ref\s*==\s*'refs/heads/main'", cond):
                bad.append(f"job {name} deploys or pushes without checking github.ref == '{MAIN_REF}' in its if")
            if not (_upstream(jobs, name) & guards):
                bad.append(f"job {name} deploys or pushes without needing a job that fails on a ref other than main")
    return bad


def _needs(job: dict) -> set[str]:
    needs = job.get("needs") or []
    return {needs} if isinstance(needs, str) else set(needs)


def _pulumi_steps(job: dict, commands: set[str]) -> list[dict]:
    return [
        s
        for s in job.get("steps") or []
        if str(s.get("uses", "")).startswith("pulumi/actions@") and str((s.get("with") or {}).get("command")) in commands
    ]


def _uses(step: dict, action: str) -> bool:
    return str(step.get("uses", "")).startswith(action + "@")


def _plan_file(step: dict) -> str:
    return str((step.get("with") or {}).get("plan") or "").replace("${{ github.workspace }}/", "")


def release_violations(text: str) -> list[str]:
    """Every job that runs a mutating Pulumi command needs the job that runs the commit's tests (`make test`). In the
    approval-gated environments (staging, prod) the `up` applies a saved plan (`plan:`, pulumi up --plan) that a
    preview job of that environment's preview environment saved (pulumi preview --save-plan) and passed to it as an
    artifact together with the stack file it previewed; the approved job itself promotes nothing, so what it applies
    is what the approver read."""
    wf = yaml_text.load(text)
    jobs = wf.get("jobs") or {}
    tests = {n for n, j in jobs.items() if any(re.search(r"\bmake test\b", s.get("run", "")) for s in j.get("steps") or [])}
    bad = []
    for name, job in jobs.items():
        ups = _pulumi_steps(job, MUTATING_PULUMI)
        if not ups:
            continue
        needs, env, steps = _needs(job), _env_name(job), job.get("steps") or []
        if not needs & tests:
            bad.append(
                f"job {name} runs pulumi {ups[0]['with']['command']} without needing the commit's tests (a job that runs make test)"
            )
        if env not in RELEASE_PREVIEW:
            continue
        if any("stacks promote" in s.get("run", "") for s in steps):
            bad.append(f"job {name} promotes after the approval: its up applies config nobody previewed")
        previews = [n for n in needs if n in jobs and _env_name(jobs[n]) == RELEASE_PREVIEW[env]]
        if not previews:
            bad.append(f"job {name} does not need a preview job in the {RELEASE_PREVIEW[env]} environment")
        for up in ups:
            plan, stack = _plan_file(up), str(up["with"].get("stack-name"))
            if not plan:
                bad.append(f"job {name} runs pulumi {up['with']['command']} of {stack} without a saved plan (plan:)")
                continue
            before = steps[: steps.index(up)]
            downloaded = {str((s.get("with") or {}).get("name")) for s in before if _uses(s, "actions/download-artifact")}
            handed = False
            for p in previews:
                psteps = jobs[p].get("steps") or []
                saved = [
                    s
                    for s in _pulumi_steps(jobs[p], {"preview"})
                    if _plan_file(s) == plan and str(s["with"].get("stack-name")) == stack
                ]
                for s in saved:
                    for u in psteps[psteps.index(s) + 1 :]:
                        w = u.get("with") or {}
                        paths = [line.strip() for line in str(w.get("path", "")).splitlines()]
                        if (
                            _uses(u, "actions/upload-artifact")
                            and plan in paths
                            and f"Pulumi.{stack}.yaml" in paths
                            and str(w.get("name")) in downloaded
                        ):
                            handed = True
            if not handed:
                bad.append(
                    f"job {name} applies {plan}, which no {RELEASE_PREVIEW[env]} preview of {stack} saved and "
                    f"passed to it as an artifact with the stack file it previewed"
                )
    return bad


# Actions that download a tool without checking it against a checksum we pin (tools/ci-tools.sh replaces them).
UNCHECKED_DOWNLOADERS = {
    "astral-sh/setup-uv",
    "actions/setup-go",
    "actions/setup-python",
    "actions/setup-node",
    "pulumi/setup-pulumi",
    "pulumi/action-install-pulumi-cli",
}


def download_violations(text: str) -> list[str]:
    """Every binary a job runs is checked before it runs (docs/ci.md, "Downloads"): no action that downloads a tool
    unchecked; pulumi/actions only after `tools/ci-tools.sh pulumi` (which puts the CLI built from the Go module proxy
    on the PATH, so the action finds the pinned version and downloads none) and with automatic plugin downloads off;
    no curl/wget without a sha256 check, no `pulumi plugin install` without --checksum, no pip without
    --require-hashes, no `uv sync` without --locked."""
    wf = yaml_text.load(text) or {}
    bad = []
    for name, job in (wf.get("jobs") or {}).items():
        env = {**(wf.get("env") or {}), **(job.get("env") or {})}
        installed = False
        for step in job.get("steps") or []:
            uses = str(step.get("uses", "")).split("@", 1)[0]
            run = str(step.get("run", ""))
            if uses in UNCHECKED_DOWNLOADERS:
                bad.append(f"job {name}: {uses} downloads a tool without checking a pinned checksum")
            if uses == "pulumi/actions":
                if not installed:
                    bad.append(
                        f"job {name}: pulumi/actions runs before tools/ci-tools.sh pulumi, so it downloads the Pulumi CLI unchecked"
                    )
                step_env = {**env, **(step.get("env") or {})}
                if str(step_env.get("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "")).lower() != "true":
                    bad.append(f"job {name}: pulumi/actions runs with automatic plugin downloads on")
            for line in run.splitlines():
                code = re.sub(r"(^|\s)#.*", "", line)
                if re.search(r"\b(curl|wget)\b", code) and not re.search(r"sha256sum -c|shasum -a 256 -c", run):
                    bad.append(f"job {name}: downloads without a sha256 check: {code.strip()}")
                if re.search(r"\bpulumi plugin install\b", code) and "--checksum" not in code:
                    bad.append(f"job {name}: pulumi plugin install without --checksum: {code.strip()}")
                if re.search(r"\bpip3? install\b", code) and "--require-hashes" not in code:
                    bad.append(f"job {name}: pip install without --require-hashes: {code.strip()}")
                if re.search(r"\buv sync\b", code) and "--locked" not in code:
                    bad.append(f"job {name}: uv sync without --locked: {code.strip()}")
                if re.search(r"\buvx\b|\buv (tool|pip) ", code):
                    bad.append(f"job {name}: uv fetches a package outside uv.lock: {code.strip()}")
            if re.search(r"ci-tools\.sh pulumi\b", run):
                installed = True
    return bad


def all_violations(text: str) -> list[str]:
    return (
        pin_violations(text)
        + credential_violations(text)
        + ref_violations(text)
        + release_violations(text)
        + download_violations(text)
    )


def _jobs_running(command: str) -> set[tuple[str, str]]:
    """(workflow, job) of every job with a step whose `run` contains ``command``."""
    return {
        (wf.name, name)
        for wf in WORKFLOWS
        for name, job in yaml_text.load(wf.read_text())["jobs"].items()
        if any(command in str(s.get("run", "")) for s in job.get("steps") or [])
    }


def _text(name: str) -> str:
    return (ROOT / ".github" / "workflows" / name).read_text()


# --------------------------------------------------------------------------- today's workflows keep the rules


@pytest.mark.parametrize("wf", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_keeps_the_pipeline_rules(wf):
    assert all_violations(wf.read_text()) == []


def test_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"pr.yml", "main.yml"}


def test_ci_installs_the_makefiles_uv():
    """tools/ci-tools.sh installs the Makefile's uv, at the Makefile's path, from the pin in versions.yaml."""
    from stacks.registry.versions import versions

    want = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)[1]
    assert versions()["toolchain"]["ci-uv"] == want
    assert re.fullmatch(r"[0-9a-f]{64}", versions()["toolchain"]["ci-uv-sha256"])
    assert 'dir="$CACHE/uv-$ver"' in CI_TOOLS.read_text()  # the Makefile's $(CACHE)/uv-$(UV_VERSION)
    syncs = [
        (wf.name, name)
        for wf in WORKFLOWS
        for name, job in yaml_text.load(wf.read_text())["jobs"].items()
        if any("uv sync" in s.get("run", "") for s in job.get("steps") or [])
    ]
    assert syncs and [j for j in syncs if j not in _jobs_running("ci-tools.sh uv")] == []


def test_preview_is_read_only_and_deploys_are_in_their_environments():
    pr = yaml_text.load(_text("pr.yml"))["jobs"]["preview"]
    body = yaml.safe_dump(pr)
    assert pr["environment"] == PREVIEW_ENVIRONMENT
    assert "vars.AWS_PREVIEW_ROLE_ARN" in body and "secrets.PULUMI_PREVIEW_ACCESS_TOKEN" in body
    assert "vars.AWS_ROLE_ARN" not in body and "secrets.PULUMI_ACCESS_TOKEN" not in body
    main = yaml_text.load(_text("main.yml"))["jobs"]
    assert {j: _env_name(main[j]) for j in ("dev", "staging", "prod")} == {"dev": "dev", "staging": "staging", "prod": "prod"}


# --------------------------------------------------------------------------- the rules catch the old workflows


def test_unhardened_workflows_are_flagged():
    """The workflows before these rules: unpinned actions, preview and dev with credentials outside an environment,
    deploys and the record push without a ref check."""
    pr, main = (UNHARDENED / "pr.yml").read_text(), (UNHARDENED / "main.yml").read_text()
    pins = pin_violations(pr) + pin_violations(main)
    assert len(pins) == 31 and all("not pinned to a full 40-hex commit SHA" in v for v in pins), pins
    creds = credential_violations(pr)
    assert (
        "job preview runs PR code and holds credentials (PULUMI_ACCESS_TOKEN, PULUMI_CONFIG_PASSPHRASE, id-token: write) outside an environment"
        in creds
    )
    assert (
        "job preview uses deploy credentials (AWS_ROLE_ARN, PULUMI_ACCESS_TOKEN) outside the ['dev', 'prod', 'staging'] environments"
        in creds
    )
    assert any(v.startswith("job dev holds credentials") for v in credential_violations(main))
    refs = ref_violations(main)
    for job in ("dev", "staging", "prod", "record"):
        assert f"job {job} deploys or pushes without checking github.ref == 'refs/heads/main' in its if" in refs, refs
        assert f"job {job} deploys or pushes without needing a job that fails on a ref other than main" in refs


def _mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new)


@pytest.mark.parametrize(
    "name, old, new, expect",
    [
        ("pr.yml", "@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2", "@v4", "is not pinned to a full 40-hex commit SHA"),
        (
            "pr.yml",
            "@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2",
            "@11bd71901bbe5b1630ceea73d27597364c9af683",
            "has no version comment",
        ),
        ("main.yml", "@8e5e406f4007fca908480587cb9893c07090f58d", "@8e5e406f", "is not pinned to a full 40-hex commit SHA"),
        ("pr.yml", "    environment: preview\n", "", "job preview runs PR code and holds credentials"),
        ("pr.yml", "secrets.PULUMI_PREVIEW_ACCESS_TOKEN", "secrets.PULUMI_ACCESS_TOKEN", "job preview uses deploy credentials"),
        ("pr.yml", "vars.AWS_PREVIEW_ROLE_ARN", "vars.AWS_ROLE_ARN", "job preview uses deploy credentials"),
        (
            "pr.yml",
            "    environment: preview\n",
            "    environment: prod\n",
            "job preview runs PR code in the deploy environment prod",
        ),
        (
            "pr.yml",
            "  manifest-diff:\n    # No credentials",
            "  manifest-diff:\n    env:\n      T: ${{ secrets.NPM_TOKEN }}\n    # No credentials",
            "job manifest-diff runs PR code and holds credentials (NPM_TOKEN)",
        ),
        ("main.yml", "    environment: dev\n", "", "job dev holds credentials"),
        (
            "main.yml",
            "    if: github.ref == 'refs/heads/main' && github.event_name == 'workflow_dispatch' && inputs.deploy\n    runs-on: ubuntu-latest\n    environment: prod",
            "    if: github.event_name == 'workflow_dispatch' && inputs.deploy\n    runs-on: ubuntu-latest\n    environment: prod",
            "job prod deploys or pushes without checking github.ref == 'refs/heads/main'",
        ),
        (
            "main.yml",
            "  chains:\n    needs: ref-check\n",
            "  chains:\n",
            "without needing a job that fails on a ref other than main",
        ),
        ("main.yml", "    branches: [main]\n", "    branches: [main, 'release/*']\n", "run on a push to"),
        (
            "main.yml",
            "    needs: [chains, prod]\n    if: github.ref == 'refs/heads/main' && ",
            "    needs: [chains, prod]\n    if: ",
            "job record deploys or pushes without checking github.ref",
        ),
        # one passphrase per environment; none in a PR job but the dev-level one
        (
            "pr.yml",
            "secrets.PULUMI_DEV_CONFIG_PASSPHRASE",
            "secrets.PULUMI_PROD_CONFIG_PASSPHRASE",
            "job preview decrypts with PULUMI_PROD_CONFIG_PASSPHRASE in environment preview",
        ),
        (
            "pr.yml",
            "secrets.PULUMI_DEV_CONFIG_PASSPHRASE",
            "secrets.PULUMI_CONFIG_PASSPHRASE",
            "job preview decrypts with PULUMI_CONFIG_PASSPHRASE in environment preview",
        ),
        (
            "pr.yml",
            "    environment: preview\n",
            "    environment: prod-preview\n",
            "job preview runs PR code in the release environment prod-preview",
        ),
        (
            "main.yml",
            "secrets.PULUMI_PROD_CONFIG_PASSPHRASE",
            "secrets.PULUMI_STAGING_CONFIG_PASSPHRASE",
            "job prod decrypts with PULUMI_STAGING_CONFIG_PASSPHRASE in environment prod",
        ),
        # the approved up applies the previewed stack file and plan, after the tests
        (
            "main.yml",
            "          plan: ${{ github.workspace }}/plan-${{ matrix.stack }}-staging.json\n        env:\n          PULUMI_ACCESS_TOKEN: ${{ secrets.PULUMI_ACCESS_TOKEN }}",
            "        env:\n          PULUMI_ACCESS_TOKEN: ${{ secrets.PULUMI_ACCESS_TOKEN }}",
            "job staging runs pulumi up of ${{ matrix.stack }}-staging without a saved plan",
        ),
        (
            "main.yml",
            "    needs: [chains, staging-preview, test]\n",
            "    needs: [chains, dev, test]\n",
            "job staging does not need a preview job in the staging-preview environment",
        ),
        (
            "main.yml",
            "          name: plan-${{ matrix.stack }}-prod\n      - uses: aws-actions",
            "          name: promoted-${{ matrix.stack }}-staging\n      - uses: aws-actions",
            "job prod applies plan-${{ matrix.stack }}-prod.json, which no prod-preview preview",
        ),
        (
            "main.yml",
            "          name: plan-${{ matrix.stack }}-staging\n      - uses: aws-actions",
            '          name: plan-${{ matrix.stack }}-staging\n      - run: .venv/bin/python -m stacks promote --from "$STACK" --to "$STACK-staging" --yes\n      - uses: aws-actions',
            "job staging promotes after the approval",
        ),
        (
            "main.yml",
            "    needs: [chains, prod-preview, test]\n",
            "    needs: [chains, prod-preview]\n",
            "job prod runs pulumi up without needing the commit's tests",
        ),
        (
            "main.yml",
            "    needs: [chains, test]\n",
            "    needs: chains\n",
            "job dev runs pulumi up without needing the commit's tests",
        ),
        # every download is checked against a pin
        (
            "pr.yml",
            "      - name: uv from PyPI, checked against its pinned sha256 (tools/ci-tools.sh)\n        run: tools/ci-tools.sh uv\n",
            '      - uses: astral-sh/setup-uv@e92bafb6253dcd438e0484186d7669ea7a8ca1cc # v6.4.3\n        with:\n          version: "0.13.9"\n',
            "job changed-stacks: astral-sh/setup-uv downloads a tool without checking a pinned checksum",
        ),
        (
            "main.yml",
            "      - name: Go from the Go module proxy, checked against sum.golang.org (tools/ci-tools.sh)\n        run: main/tools/ci-tools.sh go\n",
            '      - uses: actions/setup-go@3041bf56c941b39c61721a86cd11f3bb1338122a # v5.2.0\n        with:\n          go-version: "1.26.8"\n',
            "job test: actions/setup-go downloads a tool without checking a pinned checksum",
        ),
        (
            "pr.yml",
            '        run: tools/ci-tools.sh pulumi "$STACK"\n',
            '        run: echo "$STACK"\n',
            "job preview: pulumi/actions runs before tools/ci-tools.sh pulumi",
        ),
        (
            "main.yml",
            '  PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: "true"\n',
            "",
            "job prod: pulumi/actions runs with automatic plugin downloads on",
        ),
        (
            "main.yml",
            '        run: tools/ci-tools.sh pulumi "$STACK"\n',
            '        run: |\n          tools/ci-tools.sh pulumi "$STACK"\n          pulumi plugin install resource aws 7.51.1\n',
            "job dev: pulumi plugin install without --checksum",
        ),
        (
            "pr.yml",
            "        run: tools/ci-tools.sh go\n",
            "        run: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -xz\n",
            "job preview: downloads without a sha256 check",
        ),
        ("drift.yml", "      - run: uv sync --locked\n", "      - run: uv sync\n", "job drift: uv sync without --locked"),
    ],
)
def test_a_broken_rule_is_flagged(name, old, new, expect):
    assert all_violations(_text(name)) == []
    bad = all_violations(_mutate(_text(name), old, new))
    assert any(expect in v for v in bad), bad


def test_the_ref_check_step_refuses_other_refs(tmp_path):
    step = yaml_text.load(_text("main.yml"))["jobs"]["ref-check"]["steps"][0]
    for ref, rc in ((MAIN_REF, 0), ("refs/heads/feature", 1), ("refs/tags/v1.0.0", 1), ("refs/heads/main-old", 1)):
        r = subprocess.run(["bash", "-c", step["run"]], env={**os.environ, "REF": ref}, capture_output=True, text=True)
        assert r.returncode == rc, (ref, r.stdout, r.stderr)
        if rc:
            assert f"refusing to run the deploy workflow on {ref}" in r.stdout


# --------------------------------------------------------------------------- GitHub expressions, evaluated

_EXPR_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||!|\(|\))|(?P<name>[A-Za-z_][A-Za-z0-9_.-]*))")


def evaluate(expr, context: dict):
    """A GitHub expression of the forms these workflows use in `if:` and `env:` (context names, 'strings', true/false,
    ==, !=, !, &&, ||, parentheses), with GitHub's semantics for them: && and || yield an operand, a name the context
    does not hold is ''. A `secrets.NAME` evaluates to the marker "<secret NAME>"."""
    expr = str(expr).strip()
    m = re.fullmatch(r"\$\{\{(.*)\}\}", expr, re.S)
    expr, out, pos = (m[1] if m else expr).strip(), [], 0
    while pos < len(expr):
        t = _EXPR_TOKEN.match(expr, pos)
        assert t and t.end() > pos, f"cannot read {expr[pos:]!r} in {expr!r}"
        pos = t.end()
        if t["str"] is not None:
            out.append(repr(t["str"][1:-1].replace("''", "'")))
        elif t["op"]:
            out.append({"&&": " and ", "||": " or ", "!": " not "}.get(t["op"], t["op"]))
        else:
            out.append({"true": "True", "false": "False"}.get(t["name"]) or f"_v({t['name']!r})")

    def value(name):
        return f"<secret {name[len('secrets.') :]}>" if name.startswith("secrets.") else context.get(name, "")

    return eval("".join(out), {"__builtins__": {}}, {"_v": value})  # noqa: S307 - only the tokens read above


def test_the_expression_evaluator_reads_what_github_reads():
    ctx = {"github.event_name": "push", "inputs.deploy": "", "steps.kind.outputs.render": "false"}
    assert evaluate("${{ steps.kind.outputs.render == 'true' && 'x' || secrets.S }}", ctx) == "<secret S>"
    assert (
        evaluate("steps.kind.outputs.render == 'true' && 'x' || secrets.S", {**ctx, "steps.kind.outputs.render": "true"}) == "x"
    )
    assert not evaluate("github.event_name == 'workflow_dispatch' && inputs.deploy", ctx)
    assert evaluate("!(github.event_name == 'workflow_dispatch' && inputs.deploy)", ctx)
    assert evaluate(
        "github.event_name == 'workflow_dispatch' && inputs.deploy",
        {"github.event_name": "workflow_dispatch", "inputs.deploy": True},
    )


# --------------------------------------------------------------------------- which stacks a PR previews, with which secrets


def _stack_files() -> list[Path]:
    return sorted(ROOT.glob("Pulumi.*.yaml"))


def _stack(path: Path) -> str:
    return path.name[len("Pulumi.") : -len(".yaml")]


def _cluster_mode(path: Path) -> str:
    cluster = ((yaml_text.load(path.read_text()) or {}).get("config") or {}).get("dynamo:cluster")
    if cluster is None:
        return "render"  # stacks/config: cluster.mode defaults to render
    return str(cluster.get("mode", "render")) if isinstance(cluster, dict) else "<not a mapping>"


def _stack_environment(stack: str) -> str:
    return "prod" if stack.endswith("-prod") else "staging" if stack.endswith("-staging") else "dev"


def _pr_previewable(path: Path) -> bool:
    """A PR previews a dev-level stack whose cluster it creates or reads from another stack (render, eks, stack); not
    staging or prod (their previews run on main, in their own environment), not kubeconfig stacks (dynamo:kubeconfig in
    their config is an existing cluster's credential)."""
    return _stack_environment(_stack(path)) == "dev" and _cluster_mode(path) in {"render", "eks", "stack"}


def _changed_stacks(tmp_path: Path, touched: list[str]) -> list[str]:
    """Run the changed-stacks `select` step in a clone whose PR touches these files, as on the runner."""
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    _git(tmp_path, "clone", "-q", str(origin), str(work))
    _git(work, "checkout", "-q", "-b", "main")
    for f in _stack_files():
        shutil.copy(f, work / f.name)
    shutil.copytree(ROOT / ".github", work / ".github")
    (work / "components").mkdir()
    (work / "components" / "x.py").write_text("x = 1\n")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "base")
    _git(work, "push", "-q", "origin", "main")
    _git(work, "checkout", "-q", "-b", "pr")
    for f in touched:
        with open(work / f, "a") as fh:
            fh.write("# touched\n")
    _git(work, "commit", "-qam", "pr")
    (work / ".venv").symlink_to(ROOT / ".venv")  # the job's `uv sync --locked`
    step = next(s for s in _load("pr.yml")["jobs"]["changed-stacks"]["steps"] if s.get("id") == "select")
    out, summary = tmp_path / "out", tmp_path / "summary"
    env = {
        **os.environ,
        "BASE_REF": "main",
        "GITHUB_OUTPUT": str(out),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    r = subprocess.run(["bash", "-c", step["run"]], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(re.search(r"^stacks=(.*)$", out.read_text(), re.M)[1])


def test_a_pr_previews_only_the_dev_level_stacks_it_may_decrypt(tmp_path):
    """A code change previews every stack a PR may decrypt, and nothing else: no staging or prod stack (the `preview`
    environment holds only the dev-level passphrase), no kubeconfig stack (its config holds a cluster credential)."""
    got = _changed_stacks(tmp_path, ["components/x.py"])
    want = [_stack(f) for f in _stack_files() if _pr_previewable(f)]
    leaked = {s: (_stack_environment(s), _cluster_mode(ROOT / f"Pulumi.{s}.yaml")) for s in set(got) - set(want)}
    assert not leaked, f"a PR would preview (and decrypt) {leaked} with the preview environment's passphrase"
    assert got == want
    assert "dev" in got and "h100-disagg" in got


@pytest.mark.parametrize("stack", ["h100-disagg-prod", "h100-disagg-staging", "motif3-b200-disagg"])
def test_a_pr_touching_only_a_stack_it_may_not_decrypt_previews_nothing(stack, tmp_path):
    assert _changed_stacks(tmp_path, [f"Pulumi.{stack}.yaml"]) == []


def test_a_pr_touching_a_dev_level_stack_previews_it(tmp_path):
    assert _changed_stacks(tmp_path, ["Pulumi.h100-disagg.yaml"]) == ["h100-disagg"]


def _jobs_with_env():
    for wf in ("pr.yml", "main.yml"):
        for name, job in _load(wf)["jobs"].items():
            yield wf, name, job, _env_name(job)


def test_each_environment_decrypts_with_its_own_passphrase():
    """Every Pulumi step of a job in an environment gets that environment's passphrase for a stack that is not a
    render stack; no job names another environment's, or one shared by all of them."""
    found = {}
    for wf, name, job, env in _jobs_with_env():
        for step in _pulumi_steps(job, MUTATING_PULUMI | {"preview"}):
            value = (step.get("env") or {}).get("PULUMI_CONFIG_PASSPHRASE")
            got = evaluate(value, {"steps.kind.outputs.render": "false"}) if value else None
            found[f"{wf}:{name}"] = (env, got)
    want = {k: (env, f"<secret {ENV_PASSPHRASE.get(env)}>") for k, (env, _) in found.items()}
    assert found == want
    assert {env for env, _ in found.values()} >= {"preview", "dev", "staging", "prod", "staging-preview", "prod-preview"}


def _makefile_passphrase() -> str:
    return re.search(r"^export PULUMI_CONFIG_PASSPHRASE \?= (\S+)", (ROOT / "Makefile").read_text(), re.M)[1]


@pytest.mark.parametrize("wf, job", [("pr.yml", "preview"), ("main.yml", "dev")])
def test_render_stacks_use_the_public_local_passphrase(wf, job):
    """The committed dev salt is the Makefile's public passphrase's, so a render stack (no cloud, no cluster, no real
    secret) gets that one; every other stack gets the environment's secret, which can then be a real one."""
    for step in _pulumi_steps(_load(wf)["jobs"][job], MUTATING_PULUMI | {"preview"}):
        value = step["env"]["PULUMI_CONFIG_PASSPHRASE"]
        assert evaluate(value, {"steps.kind.outputs.render": "true"}) == _makefile_passphrase(), value
        assert evaluate(value, {"steps.kind.outputs.render": "false"}) == "<secret PULUMI_DEV_CONFIG_PASSPHRASE>", value


def test_pr_jobs_never_reach_a_release_environment_or_its_secrets():
    for name, job in _load("pr.yml")["jobs"].items():
        body = yaml.safe_dump(job)
        assert _env_name(job) not in DEPLOY_ENVIRONMENTS | set(RELEASE_PREVIEW.values()), name
        assert not [s for s in RELEASE_PASSPHRASES | DEPLOY_SECRETS if f"secrets.{s}" in body], name
        assert "vars.AWS_ROLE_ARN" not in body, name


def test_release_stacks_are_previewed_and_deployed_only_in_their_environments():
    """Staging and prod stacks are previewed on main in staging-preview / prod-preview (main only, their own read-only
    role and passphrase) and applied in staging / prod."""
    seen = {}
    for wf, name, job, env in _jobs_with_env():
        for step in _pulumi_steps(job, MUTATING_PULUMI | {"preview"}):
            stack = str(step["with"]["stack-name"])
            for release in RELEASE_PREVIEW:
                if stack.endswith(f"-{release}"):
                    seen.setdefault(release, set()).add((str(step["with"]["command"]), env, wf))
    assert seen == {
        "staging": {("preview", "staging-preview", "main.yml"), ("up", "staging", "main.yml")},
        "prod": {("preview", "prod-preview", "main.yml"), ("up", "prod", "main.yml")},
    }


# --------------------------------------------------------------------------- approvals: the plan the approver saw, after the tests


def test_release_ups_apply_the_plan_the_approver_saw():
    """Behind each approval: a preview job saved a plan of the promoted stack file and showed it in its job summary;
    the approved job downloads both and applies that plan (`pulumi up --plan`); it promotes nothing itself."""
    assert release_violations(_text("main.yml")) == []
    jobs = _load("main.yml")["jobs"]
    for env, preview_env in RELEASE_PREVIEW.items():
        (up_job,) = [n for n, j in jobs.items() if _env_name(j) == env]
        (preview_job,) = [n for n, j in jobs.items() if _env_name(j) == preview_env]
        assert preview_job in _needs(jobs[up_job])
        (saved,) = _pulumi_steps(jobs[preview_job], {"preview"})
        assert saved["with"].get("comment-on-summary") is True and saved["with"].get("diff") is True
        assert any("python -m stacks promote" in s.get("run", "") for s in jobs[preview_job]["steps"])
        (up,) = _pulumi_steps(jobs[up_job], {"up"})
        assert _plan_file(up) == _plan_file(saved) != ""


def test_release_rule_flags_an_up_nobody_previewed():
    bad = release_violations((UNHARDENED / "main.yml").read_text())
    for job in ("staging", "prod"):
        assert f"job {job} promotes after the approval: its up applies config nobody previewed" in bad, bad
        assert f"job {job} does not need a preview job in the {RELEASE_PREVIEW[job]} environment" in bad, bad
        assert f"job {job} runs pulumi up of ${{{{ matrix.stack }}}}-{job} without a saved plan (plan:)" in bad, bad
    assert "job dev runs pulumi up without needing the commit's tests (a job that runs make test)" in bad, bad


def test_deploys_need_the_commits_tests():
    """main.yml runs the PR workflow's test job on the commit it deploys, and every job that changes a stack needs it."""
    main, pr = _load("main.yml")["jobs"], _load("pr.yml")["jobs"]
    assert "test" in main and main["test"]["steps"] == pr["test"]["steps"]
    deployers = [n for n, j in main.items() if _pulumi_steps(j, MUTATING_PULUMI)]
    assert set(deployers) >= {"dev", "staging", "prod"}
    assert {n: sorted(_needs(main[n])) for n in deployers if "test" not in _needs(main[n])} == {}


# --------------------------------------------------------------------------- a push deploys render stacks only, by cluster.mode


def _kind_outputs(step: dict, stack: str, tmp_path: Path) -> dict:
    out = tmp_path / f"out-{stack}"
    env = {**os.environ, "STACK": stack, "GITHUB_OUTPUT": str(out)}
    r = subprocess.run(["bash", "-c", step["run"]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in out.read_text().splitlines() if line)


@pytest.mark.parametrize("path", _stack_files(), ids=lambda p: p.name)
def test_a_push_ups_only_render_stacks(path, tmp_path):
    """A push runs `pulumi up` of a stack only when its cluster.mode is render; eks, stack and kubeconfig stacks (each
    reaches a real cluster) get a preview; a manual run with deploy: true ups every one."""
    job = _load("main.yml")["jobs"]["dev"]
    outputs = _kind_outputs(next(s for s in job["steps"] if s.get("id") == "kind"), _stack(path), tmp_path)
    mode = _cluster_mode(path)
    for event, deploy, want_up in (
        ("push", "", mode == "render"),
        ("workflow_dispatch", True, True),
        ("workflow_dispatch", False, mode == "render"),
    ):
        ctx = {"github.event_name": event, "inputs.deploy": deploy, **{f"steps.kind.outputs.{k}": v for k, v in outputs.items()}}
        ran = {
            str(s["with"]["command"])
            for s in _pulumi_steps(job, MUTATING_PULUMI | {"preview"})
            if evaluate(s.get("if", "true"), ctx)
        }
        assert ran == ({"up"} if want_up else {"preview"}), (mode, event, deploy, ran)


# --------------------------------------------------------------------------- repository settings, checkouts, drift, Dependabot


def _section(text: str, heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"docs/ci.md has no '## {heading}' section"
    return m[1]


REPOSITORY_SETTINGS = [
    "Require a pull request before merging",
    "Require review from Code Owners",
    "CODEOWNERS",
    "Require status checks to pass",
    "Do not allow bypassing the above settings",
    "Allow GitHub Actions to create and approve pull requests",
    "Prevent self-review",
]


def test_docs_name_the_repository_settings_the_pipeline_relies_on():
    section = _section((ROOT / "docs" / "ci.md").read_text(), "Repository settings")
    assert [s for s in REPOSITORY_SETTINGS if s not in section] == []
    line = next(line for line in section.splitlines() if "Required checks:" in line)
    checks = re.findall(r"`([^`]+)`", line.split("Required checks:", 1)[1])
    pr_jobs = set(_load("pr.yml")["jobs"])
    assert set(checks) >= {"test", "manifest-diff", "changed-stacks"} and set(checks) <= pr_jobs, checks


def test_codeowners_covers_every_path_the_docs_name():
    """The committed .github/CODEOWNERS names an owner for each path docs/ci.md says it must (without a file, GitHub's
    "Require review from Code Owners" requires nobody); each line is ``<pattern> <@owner>...``."""
    section = _section((ROOT / "docs" / "ci.md").read_text(), "Repository settings")
    line = next(ln for ln in section.split("\n- ") if "CODEOWNERS" in ln and "naming the owners of" in ln)
    wanted = re.findall(r"`([^`]+)`", line.split("naming the owners of", 1)[1].split(". ")[0])
    rules = [
        ln.split() for ln in (ROOT / ".github" / "CODEOWNERS").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert all(len(r) >= 2 and all(o.startswith("@") for o in r[1:]) for r in rules), rules
    patterns = {r[0].strip("/") for r in rules}
    assert wanted and [w for w in wanted if w.strip("/") not in patterns] == [], (wanted, sorted(patterns))


def test_docs_list_every_environment_with_what_it_holds():
    """The environment table in docs/ci.md has a row for every environment a job names, and that row lists each
    secret and environment variable the environment's jobs read."""
    section = _section(
        (ROOT / "docs" / "ci.md").read_text(), "GitHub settings (Settings → Environments, Settings → Secrets and variables)"
    )
    rows = {m[1]: m[0] for m in re.findall(r"^(\| `([a-z-]+)` \|.*)$", section, re.M)}
    used: dict[str, set[str]] = {}
    for wf in WORKFLOWS:
        for job in (yaml_text.load(wf.read_text()).get("jobs") or {}).values():
            if _env_name(job):
                body = yaml.safe_dump(job)
                names = set(re.findall(r"secrets\.([A-Za-z0-9_]+)", body)) - {"GITHUB_TOKEN"}
                names |= {v for v in re.findall(r"vars\.([A-Za-z0-9_]+)", body) if v.endswith("ROLE_ARN")}
                used.setdefault(_env_name(job), set()).update(names)
    assert set(rows) == set(used), (sorted(rows), sorted(used))
    assert {env: sorted(n for n in names if f"`{n}`" not in rows[env]) for env, names in used.items()} == {
        env: [] for env in used
    }
    for env in set(used) - {PREVIEW_ENVIRONMENT}:
        assert "`main` only" in rows[env], rows[env]


def test_every_checkout_drops_its_credentials():
    """actions/checkout stores the job's token in .git/config unless persist-credentials is false; every later step
    (the PR's code included) could read it there."""
    bad = [
        f"{wf.name}:{name}"
        for wf in WORKFLOWS
        for name, job in yaml_text.load(wf.read_text())["jobs"].items()
        for s in job.get("steps") or []
        if _uses(s, "actions/checkout") and (s.get("with") or {}).get("persist-credentials") is not False
    ]
    assert bad == []


def test_drift_grants_issues_write_to_its_job_only():
    wf = _load("drift.yml")
    assert wf["permissions"] == {"contents": "read"}
    assert wf["jobs"]["drift"]["permissions"] == {"contents": "read", "issues": "write"}


def test_dependabot_keeps_the_pinned_actions_current():
    cfg = yaml_text.load((ROOT / ".github" / "dependabot.yml").read_text())
    assert cfg["version"] == 2
    (actions,) = [u for u in cfg["updates"] if u["package-ecosystem"] == "github-actions"]
    assert actions["directory"] == "/" and actions["schedule"]["interval"] in {"daily", "weekly", "monthly"}


# --------------------------------------------------------------------------- the record step, run against real git


def _git(cwd, *args, check=True) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check:
        assert r.returncode == 0, (args, r.stderr)
    return r.stdout.strip()


def _record_script(text: str) -> str:
    steps = yaml_text.load(text)["jobs"]["record"]["steps"]
    return next(s["run"] for s in steps if "git push" in s.get("run", ""))


@pytest.fixture
def repo(tmp_path):
    """origin (bare) with main holding two stack files and code; a clone `work` as the runner's checkout."""
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    _git(tmp_path, "clone", "-q", str(origin), str(work))
    _git(work, "checkout", "-q", "-b", "main")
    for f, body in (("Pulumi.s-staging.yaml", "replicas: 1\n"), ("Pulumi.s-prod.yaml", "replicas: 1\n"), ("code.py", "x = 1\n")):
        (work / f).write_text(body)
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "base")
    _git(work, "push", "-q", "origin", "main")
    return origin, work


def _run_record(script: str, work: Path, sha: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "GITHUB_SHA": sha,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "ORG/REPO",
        "GITHUB_STEP_SUMMARY": str(work.parent / "summary.md"),
        "GH_TOKEN": "not-a-token",
    }
    return subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True, env=env, timeout=60)


def _branches(origin: Path) -> list[str]:
    return _git(origin, "for-each-ref", "--format=%(refname)", "refs/heads").splitlines()


def _promote(work: Path):
    for f in ("Pulumi.s-staging.yaml", "Pulumi.s-prod.yaml"):
        (work / f).write_text("replicas: 2\n")


@pytest.mark.parametrize("moved", [False, True], ids=["main-unchanged", "main-moved-meanwhile"])
def test_record_proposes_the_promotion_as_a_pull_request(repo, moved, tmp_path):
    """main is protected and takes changes through reviewed pull requests only: record pushes its one promotion commit
    (on top of origin/main) to a promote/ branch, leaves main where it was, and links the pull request to open."""
    origin, work = repo
    sha = _git(work, "rev-parse", "HEAD")
    if moved:  # someone merged to main while the deploy ran
        other = tmp_path / "other"
        _git(tmp_path, "clone", "-q", str(origin), str(other))
        (other / "code.py").write_text("x = 2\n")
        _git(other, "commit", "-qam", "meanwhile")
        _git(other, "push", "-q", "origin", "main")
    before = _git(origin, "rev-parse", "main")
    _git(work, "checkout", "-q", "--detach", sha)
    _promote(work)
    r = _run_record(_record_script(_text("main.yml")), work, sha)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _git(origin, "rev-parse", "main") == before, "record pushed to main"
    branch = f"promote/{sha[:7]}-4242"
    assert _branches(origin) == ["refs/heads/main", f"refs/heads/{branch}"]
    assert _git(origin, "rev-list", "--count", f"{before}..{branch}") == "1"
    assert _git(origin, "merge-base", "main", branch) == before
    assert _git(origin, "diff", "--name-only", before, branch).splitlines() == ["Pulumi.s-prod.yaml", "Pulumi.s-staging.yaml"]
    assert "[skip ci]" not in _git(origin, "log", "-1", "--format=%B", branch)  # the PR's required checks must run
    assert f"https://github.com/ORG/REPO/compare/main...{branch}?expand=1" in (tmp_path / "summary.md").read_text()


def test_record_refuses_a_commit_that_is_not_on_main(repo):
    """A dispatch on a branch: the old step pushed the branch's unreviewed commit to main; today's refuses."""
    origin, work = repo
    _git(work, "checkout", "-q", "-b", "feature")
    (work / "code.py").write_text("x = 'unreviewed'\n")
    _git(work, "commit", "-qam", "unreviewed change")
    sha = _git(work, "rev-parse", "HEAD")
    before = _git(origin, "rev-parse", "main")
    _promote(work)
    r = _run_record(_record_script(_text("main.yml")), work, sha)
    assert r.returncode != 0 and "is not on main: refusing to record" in r.stdout, r.stdout + r.stderr
    assert _git(origin, "rev-parse", "main") == before and _branches(origin) == ["refs/heads/main"]

    r = _run_record(_record_script((UNHARDENED / "main.yml").read_text()), work, sha)  # the old step, same situation
    assert r.returncode == 0, r.stderr
    assert "x = 'unreviewed'" in _git(origin, "show", "main:code.py")  # it did push the branch's commit


def test_record_refuses_a_commit_touching_other_files(repo):
    """Defence in depth: had the promotion commit changed anything but the promoted stack files, nothing is pushed."""
    origin, work = repo
    sha = _git(work, "rev-parse", "HEAD")
    before = _git(origin, "rev-parse", "main")
    _promote(work)
    script = _record_script(_text("main.yml")).replace(
        "git add -- 'Pulumi.*-staging.yaml' 'Pulumi.*-prod.yaml'", "echo 'y = 1' >> code.py; git add -A"
    )
    r = _run_record(script, work, sha)
    assert r.returncode != 0 and "changes files other than the promoted stack files" in r.stdout, r.stdout + r.stderr
    assert _git(origin, "rev-parse", "main") == before and _branches(origin) == ["refs/heads/main"]


# --------------------------------------------------------------------------- actionlint and the workflows' shape


def _lint(*files: Path) -> subprocess.CompletedProcess:
    need_tool("go")
    return subprocess.run([str(SCRIPT), *map(str, files)], cwd=ROOT, capture_output=True, text=True, timeout=900)


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
    return yaml_text.load(_text(name))


def test_pr_workflow_shape():
    wf = _load("pr.yml")
    jobs = wf["jobs"]
    assert set(jobs) >= {"changed-stacks", "preview", "manifest-diff", "test"}
    pulumi = next(s for s in jobs["preview"]["steps"] if s.get("uses", "").startswith("pulumi/actions@"))
    assert pulumi["with"]["command"] == "preview" and pulumi["with"]["diff"] is True
    assert pulumi["with"]["comment-on-pr"] is True and pulumi["with"]["edit-pr-comment"] is True
    run = "\n".join(s.get("run", "") for s in jobs["manifest-diff"]["steps"])
    assert 'python -m stacks diff --base "origin/$BASE_REF"' in run
    assert "secrets." not in yaml.safe_dump(jobs["manifest-diff"])  # credential-free
    assert any("make test" in s.get("run", "") for s in jobs["test"]["steps"])


def test_the_test_job_is_strict_only_with_the_reference_data(tmp_path):
    """With the reference checked out beside the clone the run is CI=true; without it CI=false and the summary says so."""
    step = next(s for s in _load("pr.yml")["jobs"]["test"]["steps"] if "make test" in s.get("run", ""))
    script = step["run"].replace("make test", 'echo "CI=$CI"')
    for have, ci in (("true", "CI=true"), ("false", "CI=false")):
        summary = tmp_path / f"summary-{have}"
        r = subprocess.run(
            ["bash", "-c", script],
            capture_output=True,
            text=True,
            env={**os.environ, "HAVE_REFERENCE": have, "GITHUB_STEP_SUMMARY": str(summary)},
        )
        assert r.returncode == 0 and r.stdout.strip() == ci, r.stderr
        if have == "true":
            assert not summary.exists()
        else:
            assert "Not strict: no reference data" in summary.read_text()


def test_main_workflow_promotes_behind_environments():
    """dev -> staging-preview (promote, saved plan) -> staging (approval, up --plan) -> prod-preview -> prod."""
    jobs = _load("main.yml")["jobs"]
    assert jobs["staging"]["environment"] == "staging" and jobs["prod"]["environment"] == "prod"
    assert "staging" in _upstream(jobs, "prod") and "dev" in _upstream(jobs, "staging")
    for job in ("staging", "prod"):
        preview = f"{job}-preview"
        assert jobs[preview]["environment"] == preview and preview in _needs(jobs[job])
        assert "python -m stacks promote" in yaml.safe_dump(jobs[preview])
        assert "command: up" in yaml.safe_dump(jobs[job])


def test_a_push_never_deploys_a_gpu_stack():
    """Every `pulumi up` on a GPU (EKS) stack needs a manual run with deploy: true."""
    wf = _load("main.yml")
    assert "workflow_dispatch" in wf[True] and wf[True]["workflow_dispatch"]["inputs"]["deploy"]["type"] == "boolean"
    manual = "github.event_name == 'workflow_dispatch' && inputs.deploy"
    for name, job in wf["jobs"].items():
        for step in job.get("steps", []):
            if step.get("uses", "").startswith("pulumi/actions@") and step["with"]["command"] == "up":
                cond = f"{job.get('if', '')} {step.get('if', '')}"
                assert manual in cond, (name, cond)
                if manual not in job.get("if", ""):  # the dev job: render stacks up on push, the others only by hand
                    assert step["if"] == f"steps.kind.outputs.render == 'true' || ({manual})", (name, step["if"])
    for name in ("staging", "prod", "record"):
        assert manual in wf["jobs"][name]["if"], name


@pytest.mark.parametrize("path", _stack_files(), ids=lambda p: p.name)
def test_the_stack_kind_step_reads_the_cluster_mode(path, tmp_path):
    """The step the PR preview and the dev job share reports the stack file's cluster.mode, and render only for render."""
    steps = [
        next(s for s in _load(wf)["jobs"][job]["steps"] if s.get("id") == "kind")
        for wf, job in (("main.yml", "dev"), ("pr.yml", "preview"))
    ]
    assert steps[0]["run"] == steps[1]["run"]
    mode = _cluster_mode(path)
    assert _kind_outputs(steps[0], _stack(path), tmp_path) == {"mode": mode, "render": str(mode == "render").lower()}


def test_the_stack_kind_step_knows_every_cluster_mode():
    from stacks.config import MODES

    assert {_cluster_mode(p) for p in _stack_files()} <= set(MODES)
    script = (ROOT / ".github" / "stack_kind.py").read_text()
    assert ast.literal_eval("(" + re.search(r"^MODES = \((.*)\)$", script, re.M)[1] + ",)") == tuple(MODES)


# --------------------------------------------------------------------------- Go builds: read-only against committed go.sum

GO_SCRIPTS = [ROOT / "tools" / "toolchain.sh", ROOT / "tools" / "kube-local.sh"]


def _tool_packages(gomod: Path) -> list[str]:
    text = gomod.read_text()
    block = re.search(r"^tool \((.*?)^\)", text, re.S | re.M)
    return (block[1].split() if block else []) + re.findall(r"^tool ([^\s(]\S*)$", text, re.M)


@pytest.mark.parametrize("script", GO_SCRIPTS, ids=lambda p: p.name)
def test_go_builds_never_add_go_sum_entries(script):
    """No -mod=mod anywhere; every `go build`/`go run` runs with -mod=readonly (on the line or exported in GOFLAGS)."""
    text = script.read_text()
    exported = re.search(r'^export GOFLAGS="[^"]*-mod=readonly', text, re.M) is not None
    for line in text.splitlines():
        assert "-mod=mod" not in line.split("#", 1)[0], line.strip()
        code = re.sub(r'"[^"]*"', '""', line.split("#", 1)[0])  # commands, not comments or messages
        if re.search(r"\bgo (build|run|install)\b", code):
            assert exported or "-mod=readonly" in code, line.strip()


@pytest.mark.parametrize("module", ["pulumi", "kube", "kube/etcd", "kube/kwok"])
def test_tool_module_resolves_read_only(module):
    """The committed go.sum holds every entry the build needs: `go list -mod=readonly -deps` of what the scripts build
    succeeds (it fails on a missing go.sum entry, which -mod=mod would have added silently)."""
    need_tool("go")
    d = ROOT / "tools" / module
    pkgs = _tool_packages(d / "go.mod") or ["github.com/pulumi/pulumi/pkg/v3/cmd/pulumi", "./cmd/pulumi-language-python"]
    if module == "kube":
        assert "k8s.io/kubernetes/cmd/kubectl" in pkgs  # the toolchain builds kubectl like the control plane
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    r = subprocess.run(["go", "list", "-deps", *pkgs], cwd=d, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]


def test_kubernetes_provider_builds_read_only_with_the_committed_sums(tmp_path):
    """toolchain.sh's provider step: the module copy, its sdk replace dropped, plus the committed sums, resolves with
    -mod=readonly; without the committed sums it does not (so they are what makes the read-only build work)."""
    need_tool("go")
    text = (ROOT / "tools" / "toolchain.sh").read_text()
    pin = dict(re.findall(r"^(K8S_[A-Z_]+)=(\S+)", text, re.M))
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    dl = subprocess.run(
        ["go", "mod", "download", "-json", f"{pin['K8S_PROVIDER_MODULE']}@{pin['K8S_PROVIDER_MODVERSION']}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert dl.returncode == 0, dl.stderr
    src = tmp_path / "provider"
    shutil.copytree(re.search(r'"Dir": "(.*)"', dl.stdout)[1], src)
    for p in src.rglob("*"):
        p.chmod(p.stat().st_mode | 0o200)
    subprocess.run(
        [
            "go",
            "mod",
            "edit",
            f"-dropreplace={pin['K8S_SDK_MODULE']}",
            f"-require={pin['K8S_SDK_MODULE']}@{pin['K8S_SDK_VERSION']}",
        ],
        cwd=src,
        env=env,
        check=True,
    )
    cmd = src / "cmd" / "pulumi-resource-kubernetes"
    for f in ("schema-embed.json", "terraform-mapping-embed.json"):  # generated by the build; only their presence matters here
        (cmd / f).write_text("{}")

    def resolves():
        return subprocess.run(
            ["go", "list", "-deps", "./cmd/pulumi-resource-kubernetes"],
            cwd=src,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    r = resolves()
    assert r.returncode != 0 and "missing go.sum entry" in r.stderr
    with open(src / "go.sum", "a") as f:
        f.write((ROOT / "tools" / "pulumi" / "kubernetes-provider.go.sum").read_text())
    r = resolves()
    assert r.returncode == 0, r.stderr[-2000:]


def test_workflows_run_the_pulumi_cli_the_toolchain_pins():
    """CI's official Pulumi CLI (setup-pulumi's ``pulumi-version``) is the release tools/toolchain.sh builds for
    ``make test``, so a preview in a pull request runs the engine the tests ran."""
    from stacks.registry.versions import versions

    pinned = versions()["toolchain"]["pulumi"].lstrip("v")
    found = {}
    for wf in WORKFLOWS:
        env = (yaml_text.load(wf.read_text()) or {}).get("env") or {}
        if "PULUMI_VERSION" in env:
            found[wf.name] = str(env["PULUMI_VERSION"])
    assert found, "no workflow sets PULUMI_VERSION"
    assert {name: v for name, v in found.items() if v != pinned} == {}, f"stacks/registry/versions.yaml pins pulumi {pinned}"


def _go_version(text: str) -> tuple[int, ...]:
    m = re.search(r"^go (\d+(?:\.\d+)*)\s*$", text, re.M)
    assert m, "no go directive"
    return tuple(int(x) for x in m[1].split("."))


def test_ci_installs_a_go_every_pinned_build_accepts():
    """The scripts build with GOTOOLCHAIN=local, so the Go that tools/ci-tools.sh installs (versions.yaml's ci-go) must
    be at least the `go` directive of every module they build: tools/*/go.mod and the Prometheus module the pin names
    (built from the proxy as is). Every job that builds with Go installs it first."""
    need_tool("go")
    from stacks.registry.versions import versions

    wanted = {str(p.relative_to(ROOT)): _go_version(p.read_text()) for p in (ROOT / "tools").glob("**/go.mod")}
    module = f"github.com/prometheus/prometheus@{versions()['toolchain']['prometheus']}"
    r = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"},
        cwd=ROOT / "tools" / "pulumi",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    wanted[module] = _go_version(Path(re.search(r'"GoMod": "(.*)"', r.stdout)[1]).read_text())
    installed = tuple(int(x) for x in str(versions()["toolchain"]["ci-go"]).split("."))
    need = max(wanted.values())
    assert installed >= need, f"the builds need Go {'.'.join(map(str, need))} ({[m for m, v in wanted.items() if v == need]})"
    builders = set()
    for wf in WORKFLOWS:
        for name, job in yaml_text.load(wf.read_text())["jobs"].items():
            runs = "\n".join(s.get("run", "") for s in job.get("steps") or [])
            if re.search(r"make test|ci-tools\.sh pulumi|actionlint\.sh", runs):
                builders.add((wf.name, name))
    assert builders and builders <= _jobs_running("ci-tools.sh go"), builders - _jobs_running("ci-tools.sh go")


# --------------------------------------------------------------------------- zizmor, and the downloads CI runs

ZIZMOR = ROOT / ".venv" / "bin" / "zizmor"


def _zizmor(*inputs: Path) -> subprocess.CompletedProcess:
    """zizmor (uv.lock's, a dev dependency) offline: no GitHub API, only the audits that read the files."""
    if not ZIZMOR.exists():
        need_tool("zizmor")
    return subprocess.run(
        [str(ZIZMOR), "--offline", "--no-progress", "--color=never", *map(str, inputs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_zizmor_finds_nothing_in_the_workflows():
    """The security audit of .github (workflows and dependabot.yml) at zizmor's default persona: no finding."""
    r = _zizmor(ROOT / ".github")
    assert r.returncode == 0 and "No findings to report" in r.stdout, r.stdout + r.stderr


def test_zizmor_flags_an_unsafe_workflow(tmp_path):
    """The audit can fail: a pull_request_target job that checks out the PR head with the token left in .git/config,
    an unpinned action and the PR title expanded into a shell are findings."""
    wf = tmp_path / ".github" / "workflows" / "unsafe.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(
        "on: pull_request_target\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: ubuntu-latest\n"
        "    steps:\n"
        "      - uses: actions/checkout@v4\n"
        "        with:\n"
        "          ref: ${{ github.event.pull_request.head.sha }}\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    r = _zizmor(wf)
    assert r.returncode != 0, r.stdout + r.stderr
    for audit in ("template-injection", "unpinned-uses", "artipacked", "dangerous-triggers"):
        assert audit in r.stdout, (audit, r.stdout)


def test_pull_requests_lint_the_workflows_in_a_job_of_their_own():
    """pr.yml's lint-workflows runs actionlint and zizmor --offline on .github, with no credentials."""
    job = _load("pr.yml")["jobs"]["lint-workflows"]
    runs = [s.get("run", "") for s in job["steps"]]
    assert "tools/actionlint.sh" in runs
    assert any(re.match(r"\.venv/bin/zizmor --offline\b.* \.github$", r) for r in runs), runs
    assert job["permissions"] == {"contents": "read"} and "secrets." not in yaml.safe_dump(job)


@pytest.mark.parametrize("wf", WORKFLOWS, ids=lambda p: p.name)
def test_every_download_is_checked(wf):
    assert download_violations(wf.read_text()) == []


def test_the_workflows_before_the_download_checks_are_flagged():
    """The unhardened workflows installed uv with setup-uv and let pulumi/actions download the CLI and plugins."""
    bad = download_violations((UNHARDENED / "pr.yml").read_text())
    assert "job preview: astral-sh/setup-uv downloads a tool without checking a pinned checksum" in bad
    assert "job preview: pulumi/actions runs before tools/ci-tools.sh pulumi, so it downloads the Pulumi CLI unchecked" in bad
    assert "job preview: pulumi/actions runs with automatic plugin downloads on" in bad


def test_ci_tools_pins_agree_with_the_project():
    """The AWS plugin tools/ci-tools.sh installs is the provider the locked SDK asks for; a recorded checksum is a sha256."""
    from stacks.registry.versions import versions

    tc = versions()["toolchain"]
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pulumi-aws=={tc['pulumi-aws-plugin']}" in deps
    assert tc["pulumi-aws-plugin-sha256"] in ("", None) or re.fullmatch(r"[0-9a-f]{64}", tc["pulumi-aws-plugin-sha256"])
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["dev"]
    assert f"zizmor=={tc['zizmor']}" in groups


def _fake_ci_root(tmp_path: Path, aws_sha: str, cli_version: str) -> tuple[Path, dict]:
    """A copy of the script with the real stack_kind.py and stack files, versions.yaml with this AWS checksum, and a
    fake tools/toolchain.sh whose `pulumi` logs its arguments (no build, no download)."""
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    (root / "stacks" / "registry").mkdir(parents=True)
    shutil.copy(CI_TOOLS, root / "tools" / "ci-tools.sh")
    shutil.copytree(ROOT / ".github", root / ".github")
    for f in _stack_files():
        shutil.copy(f, root / f.name)
    text = (ROOT / "stacks" / "registry" / "versions.yaml").read_text()
    text = re.sub(r"(?m)^  pulumi-aws-plugin-sha256: .*$", f'  pulumi-aws-plugin-sha256: "{aws_sha}"', text)
    (root / "stacks" / "registry" / "versions.yaml").write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "pulumi.log"
    (bin_dir / "pulumi").write_text(f'#!/bin/sh\necho "$*" >>{log}\n[ "$1" = version ] && echo {cli_version}\nexit 0\n')
    (root / "tools" / "toolchain.sh").write_text(f"#!/bin/sh\necho {bin_dir}\n")
    for f in (bin_dir / "pulumi", root / "tools" / "toolchain.sh"):
        f.chmod(0o755)
    env = {
        **os.environ,
        "PYTHON": str(ROOT / ".venv" / "bin" / "python"),
        "GITHUB_PATH": str(tmp_path / "path"),
        "GITHUB_ENV": str(tmp_path / "env"),
    }
    return root, env


def _ci_pulumi(root: Path, env: dict, stack: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / "tools" / "ci-tools.sh"), "pulumi", stack], env=env, capture_output=True, text=True, timeout=60
    )


def test_ci_tools_installs_the_aws_plugin_only_with_its_checksum(tmp_path):
    """An EKS stack gets the AWS plugin through `pulumi plugin install ... --checksum <pin>`; with no pin recorded the
    step refuses and installs nothing; a render stack gets no AWS plugin. Later steps find the CLI on the PATH and
    automatic plugin downloads off."""
    from stacks.registry.versions import versions

    cli = versions()["toolchain"]["pulumi"]
    aws = versions()["toolchain"]["pulumi-aws-plugin"]
    sha = "ab" * 32
    eks = next(_stack(p) for p in _stack_files() if _cluster_mode(p) == "eks")
    root, env = _fake_ci_root(tmp_path / "pinned", sha, cli)
    r = _ci_pulumi(root, env, eks)
    assert r.returncode == 0, r.stderr
    assert f"plugin install resource aws {aws} --checksum {sha}" in (tmp_path / "pinned" / "pulumi.log").read_text()
    assert "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true" in (tmp_path / "pinned" / "env").read_text().splitlines()
    assert (tmp_path / "pinned" / "path").read_text().split() == [str(tmp_path / "pinned" / "bin")]

    r = _ci_pulumi(root, env, "dev")  # render: nothing from AWS
    assert r.returncode == 0 and "needs no AWS provider plugin" in r.stderr, r.stderr
    assert (tmp_path / "pinned" / "pulumi.log").read_text().count("plugin install") == 1

    root, env = _fake_ci_root(tmp_path / "unpinned", "", cli)
    r = _ci_pulumi(root, env, eks)
    assert r.returncode != 0 and "refusing to download the AWS provider plugin" in r.stderr, r.stderr
    assert "plugin install" not in (tmp_path / "unpinned" / "pulumi.log").read_text()

    root, env = _fake_ci_root(tmp_path / "other-cli", sha, "v3.0.0")  # the CLI on the PATH is not the pinned one
    r = _ci_pulumi(root, env, "dev")
    assert r.returncode != 0 and f"not {cli}" in r.stderr, r.stderr


def test_ci_tools_installs_uv_and_go_only_against_their_pins():
    """uv: pip --require-hashes with the pinned sha256; Go: the toolchain module through the proxy with the checksum
    database on, whatever the runner's GONOSUMDB/GOPRIVATE/GOINSECURE/GOFLAGS say."""
    text = CI_TOOLS.read_text()
    assert "--require-hashes" in text and "printf 'uv==%s --hash=sha256:%s\\n'" in text
    assert 'GOTOOLCHAIN="go$want" GOPROXY=https://proxy.golang.org GOSUMDB=sum.golang.org' in text
    assert "GONOSUMDB= GOPRIVATE= GOINSECURE= GOFLAGS=" in text
    assert "GOSUMDB=off" not in text and "GOFLAGS=-insecure" not in text


def test_pulumi_jobs_cache_only_the_pulumi_toolchain():
    """The deploy and preview jobs restore the toolchain.sh builds under a key of their own, never the test job's key
    (a job that missed first would save a cache without the test toolchain under it)."""
    keys = {}
    for wf in WORKFLOWS:
        for name, job in yaml_text.load(wf.read_text())["jobs"].items():
            for s in job.get("steps") or []:
                if _uses(s, "actions/cache"):
                    keys[(wf.name, name)] = (s["with"]["path"], s["with"]["key"])
    pulumi_jobs = _jobs_running("ci-tools.sh pulumi")
    assert pulumi_jobs and pulumi_jobs <= set(keys)
    assert {keys[j] for j in pulumi_jobs} == {keys[("main.yml", "dev")]}
    path, key = keys[("main.yml", "dev")]
    assert path == "~/.cache/dynamo-pulumi-toolchain/pulumi-*" and key.startswith("pulumi-toolchain-")
    assert keys[("pr.yml", "test")][1] == keys[("main.yml", "test")][1] != key
