"""Run the local node's worker entry points (tools/node/worker.py, tools/node/trtllm_worker.py) on many command lines
in one process of the rig's Python (the image's environment): tests/test_node_worker.py writes a JSON list of
``{"engine": "vllm"|"trtllm", "argv": [...], "env": {...}}`` and reads back, for each, the exit status and stderr.
The entry points exit (argparse, ``fail``) before they would exec the mocker; an entry that gets that far is reported
as ``"exec"`` with the mocker's command line instead of being run."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys


def main(cases_file: str, out_file: str) -> None:
    import dynamo_local_worker as worker
    import trtllm_worker

    results = []
    for case in json.load(open(cases_file)):
        err = io.StringIO()
        saved = dict(os.environ)
        os.environ.update(case.get("env") or {})
        execs: list = []
        real_execv = os.execv
        os.execv = lambda path, argv: execs.append(argv) or (_ for _ in ()).throw(SystemExit("exec"))  # type: ignore[assignment]
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                (worker.main if case["engine"] == "vllm" else trtllm_worker.main)(case["argv"])
            code: object = 0
        except SystemExit as e:
            code = e.code
        finally:
            os.execv = real_execv  # type: ignore[assignment]
            os.environ.clear()
            os.environ.update(saved)
        results.append({"code": code, "stderr": err.getvalue()[-2000:], "exec": execs[0] if execs else None})
    json.dump(results, open(out_file, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
