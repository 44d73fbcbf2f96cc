"""The command line's shell around every subcommand: argument parsing whose every error is one line (exit 2, with
a hint), arguments naming files checked when parsed, and progress lines on stderr for steps that can take long.
``stacks.__main__`` builds the parser with it."""

from __future__ import annotations

import argparse
import difflib
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from stacks.registry import did_you_mean

EXIT_USAGE = 2  # every error the user can fix: bad invocation, bad config, missing file


class CliError(Exception):
    """An error the user can act on (a bad invocation, a missing file, a tool that failed and where its log is),
    printed as one ``error: ...`` line on stderr with exit 2."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise ``CliError`` (one line, naming the command's ``--help``) instead of
    printing the usage block and exiting; ``main`` prints it. Subparsers inherit the class (argparse's
    ``add_subparsers`` defaults ``parser_class`` to the parent's type)."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise CliError(f"{self.prog}: {' '.join(message.split())}; see `{self.prog} --help`")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser by name, read from the parser itself (aliases excluded)."""
    for action in parser._actions:  # argparse keeps its subparsers action only here
        if isinstance(action, argparse._SubParsersAction):
            seen: dict[int, str] = {}
            for name, sp in action.choices.items():
                seen.setdefault(id(sp), name)
            return {name: action.choices[name] for name in seen.values()}
    return {}


def check_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown subcommand is refused with the closest one ("did you mean") and the list, before argparse's
    multi-line ``invalid choice`` message."""
    words = [a for a in argv if not a.startswith("-")]
    if not words or any(a in ("-h", "--help") for a in argv[: argv.index(words[0])]):
        return
    cmds = subcommands(parser)
    if words[0] not in cmds:
        raise CliError(
            f"{parser.prog}: unknown command {words[0]!r}{did_you_mean(words[0], cmds)} "
            f"(commands: {', '.join(cmds)}; see `{parser.prog} --help`)"
        )


def unknown_options(parser: argparse.ArgumentParser, command: Optional[str], extras: list[str]) -> CliError:
    """The error for arguments no parser took, with the closest option of the command ("did you mean")."""
    sub = subcommands(parser).get(command or "")
    target = sub or parser
    options = {o.lstrip("-"): o for a in target._actions for o in a.option_strings}
    first = extras[0].split("=", 1)[0]
    # compared without the dashes, which every option shares
    close = difflib.get_close_matches(first.lstrip("-"), list(options), n=1, cutoff=0.6) if first.startswith("-") else []
    hint = f"; did you mean {options[close[0]]!r}?" if close else ""
    return CliError(f"{target.prog}: unrecognized arguments: {' '.join(extras)}{hint}; see `{target.prog} --help`")


# --------------------------------------------------------------------------- arguments that name files


def existing_file(what: str):
    """An argparse ``type`` for a file that must exist; ``what`` says where to get one."""

    def check(value: str) -> Path:
        p = Path(value)
        if p.is_dir():
            raise argparse.ArgumentTypeError(f"{value} is a directory, not a file ({what})")
        if not p.is_file():
            raise argparse.ArgumentTypeError(f"{value}: no such file ({what})")
        return p

    return check


def existing_dir(what: str):
    """An argparse ``type`` for a directory that must exist; ``what`` says which one."""

    def check(value: str) -> Path:
        p = Path(value)
        if not p.is_dir():
            raise argparse.ArgumentTypeError(f"{value}: no such directory ({what})")
        return p

    return check


def output_path(value: str) -> Path:
    """An argparse ``type`` for a file or directory to write: its parent directory must exist."""
    p = Path(value)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: directory {parent} does not exist (create it, or pick another path)")
    return p


def os_error_line(e: OSError) -> str:
    """One line for an ``OSError`` that escaped a command: which file, what happened, what to do (never the raw
    ``[Errno N] ...``)."""
    what = (e.strerror or type(e).__name__).lower()
    if e.filename is None:
        return f"{what}"
    if isinstance(e, FileNotFoundError) and "/" not in str(e.filename) and not Path(str(e.filename)).exists():
        # subprocess names the program it could not start: a command missing from PATH
        return f"{e.filename}: command not found on PATH (install it; `make setup` links the project's tools into .tools/bin)"
    name = f"{e.filename}" + (f" -> {e.filename2}" if getattr(e, "filename2", None) else "")
    hint = {
        FileNotFoundError: "check the path, or create it",
        PermissionError: "check its permissions",
        IsADirectoryError: "give a file, not a directory",
        NotADirectoryError: "a part of the path is a file, not a directory",
    }.get(type(e), "check the path")
    return f"{name}: {what} ({hint})"


def git_commit(repo, ref: str) -> bool:
    """Whether ``ref`` names a commit in the git repository ``repo``."""
    import subprocess

    r = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True, text=True
    )
    return r.returncode == 0


# --------------------------------------------------------------------------- output width


WIDTH = 100  # columns every default output fits in


def wrap(line: str, hang: Optional[int] = None, width: int = WIDTH) -> str:
    """``line`` within ``width`` columns: words that do not fit continue on lines indented by ``hang`` (default:
    the line's own indent plus 4), so a table's last column stays under its header."""
    if len(line) <= width:
        return line
    import textwrap

    indent = len(line) - len(line.lstrip(" "))
    hang = indent + 4 if hang is None else hang
    return textwrap.fill(line, width, subsequent_indent=" " * hang, break_long_words=False, break_on_hyphens=False)


# --------------------------------------------------------------------------- progress lines


@contextmanager
def progress(what: str, every: float = 10.0, stream=None) -> Iterator[None]:
    """``<what> ...`` on stderr at once, ``... still <what> (Ns)`` every ``every`` seconds while it runs, and
    ``<what>: done in Ns`` at the end when it took longer than a heartbeat, so a step that can take minutes
    (building or starting a control plane, rendering a git ref) never looks hung."""
    out = stream or sys.stderr
    start = time.monotonic()
    done = threading.Event()
    print(f"{what} ...", file=out, flush=True)

    def beat() -> None:
        while not done.wait(every):
            print(f"... still {what} ({time.monotonic() - start:.0f}s)", file=out, flush=True)

    t = threading.Thread(target=beat, daemon=True)
    t.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        done.set()
        t.join()
        took = time.monotonic() - start
        if ok and took >= every:
            print(f"{what}: done in {took:.0f}s", file=out, flush=True)
