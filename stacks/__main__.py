"""``dynamo-stacks`` (the console script ``uv sync`` installs in .venv/bin; also ``python -m stacks``): the catalog,
renders, reviews and checks around the Pulumi program, for people and CI. Each subcommand lives in ``stacks/cli``;
this module builds the parser from them and turns every error into one ``error: ...`` line on stderr with exit 2."""
from __future__ import annotations

import sys
import tempfile
import traceback
from typing import Optional, Sequence

from stacks.cli import bench_report, cost, drift, preflight, render, retained, review, shell, simulate, targets, timeline
from stacks.spec.config import ConfigError

PROG = "dynamo-stacks"
# In the order `dynamo-stacks --help` lists them: the catalog first, then checks of a stack, then review tools.
COMMANDS = (targets.add_subparser, render.add_subparsers, timeline.add_subparser, cost.add_subparser,
            preflight.add_subparser, simulate.add_subparser, review.add_subparsers, retained.add_subparser,
            bench_report.add_subparser, drift.add_subparser)


def build_parser() -> shell.Parser:
    p = shell.Parser(prog=PROG, description="The catalog of Dynamo serving targets, and what a stack renders, needs, "
                                            "costs and changes. `dynamo-stacks COMMAND --help` describes each command.")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", title="commands")
    for add in COMMANDS:
        add(sub)
    diff = shell.subcommands(p)["diff"]
    diff.set_defaults(fn=_with_diff_progress(diff.get_default("fn")))
    return p


def _with_diff_progress(fn):
    """``diff`` renders every stack and target at two git refs, each in a subprocess with that ref's code: tens of
    seconds, so it checks the refs first and reports progress on stderr while it runs."""
    def run(args) -> int:
        repo = args.repo or review.REPO_ROOT
        for flag, ref in (("--base", args.base), ("--head", args.head)):
            if ref and not shell.git_commit(repo, ref):
                raise shell.CliError(f"diff {flag} {ref}: not a commit in {repo} (a branch, tag or sha; "
                                     f"`git fetch` it first if it is remote)")
        with shell.progress(f"diff: rendering every stack and target at {args.base} and at {args.head or 'the working tree'}"):
            return fn(args)
    return run


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one subcommand; return its exit code (0 ok, 1 a check found a difference, 2 an error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        shell.check_command(parser, argv)
        args, extras = parser.parse_known_args(argv)
        if extras:
            raise shell.unknown_options(parser, args.cmd, extras)
        if not getattr(args, "fn", None):
            raise shell.CliError(f"{PROG}: a command is required: {', '.join(shell.subcommands(parser))} "
                                   f"(see `{PROG} --help`)")
        return args.fn(args)
    except SystemExit as e:  # --help, or a command that exits itself
        return e.code if isinstance(e.code, int) else 0 if e.code is None else _fail(str(e.code))
    except (shell.CliError, ConfigError) as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except OSError as e:
        return _fail(shell.os_error_line(e))
    except Exception as e:  # noqa: BLE001 - a bug: one line here, the traceback in a file
        return _fail(_saved(e))


def _fail(message: str, code: int = shell.EXIT_USAGE) -> int:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return code


def _saved(e: Exception) -> str:
    """One line for an unexpected error; its traceback goes to a file the line names."""
    with tempfile.NamedTemporaryFile("w", prefix=f"{PROG}-", suffix=".log", delete=False) as f:
        traceback.print_exception(e, file=f)
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first} (unexpected; the traceback is in {f.name})"


if __name__ == "__main__":
    sys.exit(main())
