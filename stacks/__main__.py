"""``dynamo-stacks`` (the console script ``uv sync`` installs in .venv/bin; also ``python -m stacks``): the catalog,
renders, reviews and checks around the Pulumi program, for people and CI. Each subcommand lives in ``stacks/cli``;
this module builds the parser from them and turns every error into one ``error: ...`` line on stderr with exit 2."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Optional, Sequence

# The project installs no pydantic plugin; without this, pydantic scans every installed distribution's entry points
# (importlib.metadata) the first time a model validates: a fifth of `render --all`'s import time here. pydantic's
# documented switch (pydantic/plugin/_loader.py: "__all__", "1" or "true" disables them); a user's own value wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from stacks.cli import shell  # noqa: E402
from stacks.config.keys import ConfigError  # noqa: E402

PROG = "dynamo-stacks"
# Each module of stacks/cli that adds commands, the function that adds them, and the commands it adds, in the order
# `dynamo-stacks --help` lists them: the catalog first, then checks of a stack, then review tools. A run of one command
# imports only that command's module (``build_parser(command)``): the others' code is most of the start-up of
# `render --all` where Python keeps no bytecode cache. A command missing here is still found (the whole parser is built).
COMMANDS = (
    ("targets", "add_subparser", ("targets",)),
    ("render", "add_subparsers", ("render", "fidelity")),
    ("timeline", "add_subparser", ("timeline",)),
    ("cost", "add_subparser", ("cost",)),
    ("preflight", "add_subparser", ("preflight",)),
    ("simulate", "add_subparser", ("simulate",)),
    ("review", "add_subparser", ("diff",)),
    ("promote", "add_subparser", ("promote",)),
    ("retained", "add_subparser", ("destroy-report",)),
    ("bench_report", "add_subparser", ("bench-report",)),
    ("drift", "add_subparser", ("drift",)),
)


def build_parser(command: Optional[str] = None) -> shell.Parser:
    """The parser of every command. With ``command`` (one COMMANDS names), only that command's module is imported and
    every other command is known by its name alone: all that parsing a command line that starts with ``command`` needs,
    since argparse hands the rest of the line to that command's own parser."""
    only = next((module for module, _, names in COMMANDS if command in names), None) if command else None
    p = shell.Parser(
        prog=PROG,
        description="The catalog of Dynamo serving targets, and what a stack renders, needs, "
        "costs and changes. `dynamo-stacks COMMAND --help` describes each command.",
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", title="commands")
    for module, add, names in COMMANDS:
        if only and module != only:
            for name in names:
                sub.add_parser(name)  # another command's name, without its module: this line runs `command`
            continue
        getattr(importlib.import_module(f"stacks.cli.{module}"), add)(sub)
    commands = shell.subcommands(p)
    if only and command not in commands:
        return build_parser()  # COMMANDS is out of step with the module: the whole parser has the command if any does
    diff = commands["diff"]
    if diff.get_default("fn"):  # None: known by name only, another command runs
        diff.set_defaults(fn=_with_diff_progress(diff.get_default("fn")))
    return p


def _with_diff_progress(fn):
    """``diff`` renders every stack and target at two git refs, each in a subprocess with that ref's code: tens of
    seconds, so it checks the refs first and reports progress on stderr while it runs."""

    def run(args) -> int:
        from stacks.cli import review

        repo = args.repo or review.REPO_ROOT
        for flag, ref in (("--base", args.base), ("--head", args.head)):
            if ref and not shell.git_commit(repo, ref):
                raise shell.CliError(
                    f"diff {flag} {ref}: not a commit in {repo} (a branch, tag or sha; `git fetch` it first if it is remote)"
                )
        with shell.progress(f"diff: rendering every stack and target at {args.base} and at {args.head or 'the working tree'}"):
            return fn(args)

    return run


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one subcommand; return its exit code (0 ok, 1 a check found a difference, 2 an error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # A command line that starts with a command is that command's alone; anything else (--help, no command, an
    # unknown one) is answered from every command's parser.
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    try:
        shell.check_command(parser, argv)
        args, extras = parser.parse_known_args(argv)
        if extras:
            raise shell.unknown_options(parser, args.cmd, extras)
        if not getattr(args, "fn", None):
            raise shell.CliError(f"{PROG}: a command is required: {', '.join(shell.subcommands(parser))} (see `{PROG} --help`)")
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
    import tempfile  # here, for the rare crash: not loaded by every command
    import traceback

    with tempfile.NamedTemporaryFile("w", prefix=f"{PROG}-", suffix=".log", delete=False) as f:
        traceback.print_exception(e, file=f)
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first} (unexpected; the traceback is in {f.name})"


if __name__ == "__main__":
    sys.exit(main())
