"""Adding engine arguments to a component's container, in either of the two forms the recipes start an engine.

- Exec form: ``command``/``args`` are the engine's argv (``python3 -m dynamo.vllm --model ...``): the tokens go at
  the end of ``args``.
- Shell form: ``command: [/bin/bash, -lc]`` (or ``sh -c``) and one script whose last command is ``exec python3 -m
  dynamo.<engine> \\`` followed by its flags on continuation lines (every Nemotron-3-Ultra worker, after its GPU
  guards). Tokens appended to ``args`` there would become the script's ``$0``, ``$1``... which the script never reads
  (bash manual, "Invoking Bash": "If the -c option is present ... if there are arguments after the command_string,
  the first argument is assigned to $0 and any remaining arguments are assigned to the positional parameters"), so
  the flag would be dropped without a word. The tokens go on a new continuation line of that last ``exec`` command
  instead, shell-quoted, so the engine receives each token as written.

A script whose last command is not ``exec`` of a Python module cannot take arguments this way: ``append_engine_args``
raises ``ValueError`` saying so, and the caller names its config key.
"""

from __future__ import annotations

import re
import shlex
from typing import Optional

SHELL_FLAGS = ("-c", "-lc")
_EXEC = re.compile(r"\s*exec\s+\S*python3?\s+-m\s+\S+")


def shell_script_index(container: dict) -> Optional[int]:
    """Where the script is in ``args`` when the container runs a shell script (``command`` ends with ``-c``/``-lc``,
    or ``args`` starts with it), else None."""
    command, args = container.get("command") or [], container.get("args") or []
    if command and command[-1] in SHELL_FLAGS and args:
        return 0
    if args[:1] and args[0] in SHELL_FLAGS and len(args) > 1:
        return 1
    return None


def last_command(script: str) -> str:
    """The script's last logical line (continuation lines, ending in a backslash, joined)."""
    lines = script.rstrip("\n").split("\n")
    i = len(lines) - 1
    while i > 0 and lines[i - 1].endswith("\\"):
        i -= 1
    return "\n".join(lines[i:])


def append_engine_args(container: dict, tokens: list[str]) -> None:
    """Add ``tokens`` to the engine's argv, in place (see the module docstring)."""
    if not tokens:
        return
    at = shell_script_index(container)
    if at is None:
        container["args"] = list(container.get("args") or []) + list(tokens)
        return
    args = list(container["args"])
    script = str(args[at])
    if not _EXEC.match(last_command(script)):
        raise ValueError(
            "the component's script does not end with `exec python3 -m <engine> ...`, so there is no command line to add flags to"
        )
    args[at] = script.rstrip("\n") + " \\\n  " + " ".join(shlex.quote(str(t)) for t in tokens) + "\n"
    container["args"] = args
