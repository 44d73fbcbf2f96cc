"""The command line as a user meets it: ``dynamo-stacks`` (``python -m stacks``) installed in .venv/bin, help on
every subcommand and option, default output within 100 columns, one-line errors with exit 2, progress lines.
In-process through ``stacks.__main__.main`` except one run of the console script itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stacks import catalog
from stacks.__main__ import build_parser, main
from stacks.cli import shell, targets as targets_cli
from stacks.cli.cost import PRICES
from stacks.registry import yaml_text

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / ".venv" / "bin" / "dynamo-stacks"
WIDTH = 100


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def widest(text: str) -> int:
    return max((len(line.expandtabs()) for line in text.splitlines()), default=0)


# --------------------------------------------------------------------------- the console script


def test_console_script_is_declared_and_runs_without_uv_on_path(tmp_path):
    """The entry point pyproject declares is the one main(); it runs from .venv/bin with a PATH without uv."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["dynamo-stacks"] == "stacks.__main__:main"
    assert SCRIPT.is_file(), "run `make python` (uv sync installs the project and its console script)"
    r = subprocess.run(
        [str(SCRIPT), "targets", "--tsv"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert [line.split("\t")[0] for line in r.stdout.splitlines()] == sorted(catalog.targets())
    r = subprocess.run(
        [str(SCRIPT), "no-such-command"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
    )
    assert (r.returncode, r.stdout, len(r.stderr.splitlines())) == (2, "", 1) and "Traceback" not in r.stderr


def test_main_returns_exit_codes_instead_of_exiting(capsys):
    assert main(["--help"]) == 0
    assert "usage: dynamo-stacks" in capsys.readouterr().out
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a command is required" in err


# --------------------------------------------------------------------------- help


SUBCOMMANDS = shell.subcommands(build_parser())


def test_subcommands_are_read_from_the_parser():
    assert {"targets", "render", "simulate", "diff"} <= set(SUBCOMMANDS)
    assert all(isinstance(name, str) and name for name in SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_and_option_has_help(name, capsys):
    parser = build_parser()
    listed = {a.dest: a.help for a in parser._subparsers._group_actions[0]._choices_actions}
    assert (listed.get(name) or "").strip(), f"{name}: no one-line help in `dynamo-stacks --help`"
    sub = SUBCOMMANDS[name]
    assert (sub.description or "").strip(), f"{name}: no description in `dynamo-stacks {name} --help`"
    missing = [a.option_strings or [a.dest] for a in sub._actions if not (a.help or "").strip()]
    assert not missing, f"{name}: options without help: {missing}"
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: dynamo-stacks {name}") and sub.description.split()[0] in out


# --------------------------------------------------------------------------- output width


def test_targets_default_on_a_terminal_is_a_table_within_100_columns(capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run(capsys, "targets")
    assert code == 0 and widest(out) <= WIDTH, out
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "GPUS", "NODES", "INSTANCE", "$/H"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1 : len(catalog.targets()) + 1]}
    assert set(rows) == set(catalog.targets())
    assert any(line.startswith("$/H:") and "stacks/registry/prices.yaml" in line for line in lines)


def test_targets_dollars_per_hour_are_nodes_times_the_price_file(capsys):
    """$/h = nodes x the instance's us-east-1 on-demand price in stacks/registry/prices.yaml, '-' where it has none."""
    prices = yaml_text.load(PRICES.read_text())["ec2"]
    code, out, _ = run(capsys, "targets", "--table")
    assert code == 0
    priced = unpriced = 0
    for r in targets_cli.priced_rows():
        cells = next(line.split() for line in out.splitlines() if line.split()[0] == r["id"])
        assert cells[1:4] == [str(r["gpus"]), "-" if r["nodes"] is None else str(r["nodes"]), r["instance_type"] or "-"]
        p = (prices.get(r["instance_type"]) or {}).get(targets_cli.PRICE_REGION)
        if p and r["nodes"]:
            assert float(cells[4]) == pytest.approx(r["nodes"] * p["usd_per_hour"], abs=0.005)
            priced += 1
        else:
            assert cells[4] == "-"
            unpriced += 1
    assert priced  # the file prices some default instance


def test_every_priced_instance_has_a_price_in_the_region_targets_shows():
    assert all(targets_cli.PRICE_REGION in regions for regions in yaml_text.load(PRICES.read_text())["ec2"].values())


def test_price_file_names_source_and_date_of_every_price():
    data = yaml_text.load(PRICES.read_text())
    entries = [p for regions in data["ec2"].values() for p in regions.values()] + [data["eks"]["control_plane"]]
    for p in entries:
        assert p["usd_per_hour"] > 0 and p["source"].strip() and str(p["read"])[:4].isdigit()


def test_targets_piped_is_id_tab_upstream_and_tsv_forces_it(capsys, monkeypatch):
    """Scripts (the fidelity hook: `python -m stacks targets > file`) read ID<TAB>UPSTREAM."""
    expected = [f"{t.id}\t{t.upstream or '-'}" for t in sorted(catalog.targets().values(), key=lambda t: t.id)]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert run(capsys, "targets")[1].splitlines() == expected
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert run(capsys, "targets", "--tsv")[1].splitlines() == expected


def test_targets_long_shows_every_column(capsys):
    code, out, _ = run(capsys, "targets", "--long")
    header = out.splitlines()[0]
    for col in ("ID", "MODEL", "GPU", "TOPOLOGY", "RUNTIME", "SPEC", "GPUS", "NODES", "INSTANCE", "$/H", "PUBLISHED PERF"):
        assert col in header


# Every subcommand whose default output is a table, on committed stacks it applies to (an EKS stack with a node
# group and one with Karpenter, and one on an existing cluster).
TABLES = [
    ("targets", "--table"),
    ("cost", "--stack", "h100-disagg"),
    ("cost", "--stack", "h100-karpenter"),
    ("timeline", "--stack", "h100-disagg"),
    ("timeline", "--stack", "h100-karpenter"),
    ("timeline", "--stack", "ultra-b200-agg"),
]


@pytest.mark.parametrize("argv", TABLES, ids=lambda a: " ".join(a))
def test_default_table_output_fits_100_columns(argv, capsys):
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert out.strip() and widest(out) <= WIDTH, "\n".join(l for l in out.splitlines() if len(l.expandtabs()) > WIDTH)


def test_every_table_command_is_width_checked():
    """A subcommand that prints a table is in TABLES; the others print YAML, markdown, check lines or commands to
    copy (destroy-report: one command per line, never broken)."""
    not_tables = {"render", "fidelity", "preflight", "simulate", "diff", "promote", "bench-report", "drift", "destroy-report"}
    assert {a[0] for a in TABLES} | not_tables == set(SUBCOMMANDS)


# --------------------------------------------------------------------------- errors


def _one_typo_away(names) -> tuple[str, str]:
    """(a name with its last character dropped, the name) for a name that the typo points back to unambiguously."""
    import difflib

    names = sorted(names)
    return next((n[:-1], n) for n in names if difflib.get_close_matches(n[:-1], names, n=2, cutoff=0.6)[:1] == [n])


TARGET_TYPO, TARGET = _one_typo_away(catalog.targets())
STACK_TYPO, STACK = _one_typo_away(p.name[len("Pulumi.") : -len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))

BAD = [
    # (argv, what the one line must say)
    (["targts"], "did you mean 'targets'"),
    (["rendr", "--stack", "dev"], "did you mean 'render'"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["render", "--stack", "h100-disagg", "--out", "/no/such/dir/x.yaml"], "directory /no/such/dir does not exist"),
    (["simulate", "--stack", "h100-disagg", "--nodes", "/no/such/nodes.yaml"], "kubectl get nodes -o yaml"),
    (["bench-report", "--stack", "h100-disagg", "--file", "/no/such/export.json"], "/no/such/export.json: no such file"),
    (["drift", "--upstream", "/no/such/recipes"], "no such directory"),
    (["render", "--stack", STACK_TYPO], f"did you mean {STACK!r}"),
    (["cost", "--stack", "no-such-stack"], "has no Pulumi.no-such-stack.yaml"),
    (["preflight", "--stack", "no-such-stack"], "has no Pulumi.no-such-stack.yaml"),
    (["timeline", "--stack", "no-such-stack"], "has no Pulumi.no-such-stack.yaml"),
    (["render", "--target", TARGET_TYPO], f"did you mean {TARGET!r}"),
    (["fidelity", "--target", "no-such-target"], "not a catalog target"),
    (["simulate", "--target", "no-such-target"], "not a catalog target"),
    (["targets", "--lng"], "did you mean '--long'"),
    (["targets", "--tsv", "--json"], "not allowed with"),
    (["render"], "one of the arguments --target --stack --all is required"),
    (["cost"], "the following arguments are required: --stack"),
    (["render", "--all"], "needs --out DIR"),
    (["diff", "--base", "no-such-ref"], "not a commit"),
    (["bench-report", "--stack", "h100-disagg", "--tolerance", "lots"], "invalid float value"),
]


@pytest.mark.parametrize("argv,hint", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_invocation_is_one_line_with_exit_2(argv, hint, capsys):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert hint in err
    assert "Traceback" not in err and "[Errno" not in err and out == ""


def test_unexpected_error_is_one_line_and_the_traceback_is_kept(capsys, monkeypatch):
    def boom(args):
        raise KeyError("h100x")

    monkeypatch.setattr(targets_cli, "priced_rows", lambda: boom(None))
    code, _, err = run(capsys, "targets", "--table")
    assert code == 2 and err.count("\n") == 1 and "KeyError" in err and "Traceback" not in err
    log = Path(err.rsplit("traceback is in ", 1)[1].rstrip(")\n"))
    assert "Traceback" in log.read_text() and "boom" in log.read_text()
    log.unlink()


def test_os_error_names_the_file_and_what_to_do():
    line = shell.os_error_line(FileNotFoundError(2, "No such file or directory", "/x/y.yaml"))
    assert line == "/x/y.yaml: no such file or directory (check the path, or create it)"
    assert "command not found on PATH" in shell.os_error_line(FileNotFoundError(2, "No such file or directory", "kubectl"))


# --------------------------------------------------------------------------- progress


def test_progress_prints_start_heartbeats_and_done(capsys):
    import io
    import time

    buf = io.StringIO()
    with shell.progress("building x", every=0.05, stream=buf):
        time.sleep(0.18)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "building x ..."
    assert any(line.startswith("... still building x (") for line in lines[1:-1])
    assert lines[-1].startswith("building x: done in ")


def test_progress_says_nothing_more_for_a_quick_step():
    import io

    buf = io.StringIO()
    with shell.progress("quick", every=5, stream=buf):
        pass
    assert buf.getvalue() == "quick ...\n"


def test_simulate_reports_progress_while_starting_the_control_plane(capsys, monkeypatch, tmp_path):
    """Starting (the first time: building) the local control plane prints a line before it begins."""
    from stacks.cli import simulate

    seen = []

    def fake_run(argv, **kw):
        seen.append(capsys.readouterr().err)  # what the user saw when the slow step began
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setenv("KUBE_LOCAL_DIR", str(tmp_path))
    monkeypatch.setattr(simulate.subprocess, "run", fake_run)
    assert simulate.local_kubeconfig() == tmp_path / "kubeconfig"
    assert "simulate: starting the local control plane" in seen[0]


def test_simulate_start_failure_is_one_line_naming_the_log(capsys, monkeypatch, tmp_path):
    from stacks.cli import simulate

    monkeypatch.setenv("KUBE_LOCAL_DIR", str(tmp_path))
    monkeypatch.setattr(
        simulate.subprocess,
        "run",
        lambda argv, **kw: subprocess.CompletedProcess(
            argv, 1, "", "[kube-local] building etcd\n[kube-local] ERROR: go: not found\n"
        ),
    )
    monkeypatch.setattr(simulate, "stack_scenario", lambda stack, inv: simulate.Scenario("s", [], [], set(), []))
    code, _, err = run(capsys, "simulate", "--stack", "h100-disagg")
    assert code == 2
    last = err.splitlines()[-1]
    assert last.startswith("error: ") and "ERROR: go: not found" in last and "kube-local-start.log" in last
    assert (tmp_path / "kube-local-start.log").read_text().startswith("[kube-local] building etcd")


def test_diff_prints_progress_before_rendering(capsys, monkeypatch):
    from stacks.cli import review

    def fake_diff(repo, base, head):
        assert "diff: rendering every stack and target at HEAD" in capsys.readouterr().err
        return []

    monkeypatch.setattr(review, "diff_refs", fake_diff)
    code, _, err = run(capsys, "diff", "--base", "HEAD")
    assert code == 0


@pytest.mark.parametrize(
    "running_before,flags,stopped", [(False, [], True), (False, ["--keep-control-plane"], False), (True, [], False)]
)
def test_simulate_stops_the_control_plane_it_started(capsys, monkeypatch, tmp_path, running_before, flags, stopped):
    """A control plane the run starts is stopped after it (five processes, about 750 MB), unless kept; one that was
    already running stays."""
    from stacks.cli import simulate

    calls = []

    def fake_run(argv, **kw):
        calls.append(argv[-1])
        rc = 0 if argv[-1] != "status" or running_before else 1
        return subprocess.CompletedProcess(argv, rc, "", "")

    class FakeSim:
        def __init__(self, kubeconfig):
            pass

        def close(self):
            calls.append("sim-closed")

    monkeypatch.setenv("KUBE_LOCAL_DIR", str(tmp_path))
    monkeypatch.setattr(simulate.subprocess, "run", fake_run)
    monkeypatch.setattr(simulate, "Simulator", FakeSim)
    monkeypatch.setattr(simulate, "stack_scenario", lambda stack, inv: simulate.Scenario("s", [], [], set(), []))
    monkeypatch.setattr(simulate, "run", lambda *a, **k: simulate.Result())
    code, _, _ = run(capsys, "simulate", "--stack", "h100-disagg", *flags)
    assert code == 0
    assert ("stop" in calls) == stopped and calls[-1] == ("stop" if stopped else "sim-closed"), calls
