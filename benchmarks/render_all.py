"""Benchmark: time and object count of `render --all` over the whole catalog, in process and as the whole command a
user runs (`python -m stacks render --all`: interpreter start, imports, plans, YAML; aim: under 0.5 s here).

Prints figures; it asserts nothing (speed targets are measured, not tested).
"""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stacks import catalog  # noqa: E402
from stacks.program.render import render_target, to_yaml  # noqa: E402


def once(out: Path) -> tuple[float, int]:
    start = time.perf_counter()
    objects = 0
    for tid in sorted(catalog.targets()):
        objs = render_target(tid)
        objects += len(objs)
        (out / f"{tid}.yaml").write_text(to_yaml(objs))
    return time.perf_counter() - start, objects


def main() -> None:
    t0 = time.perf_counter()
    n = len(catalog.targets())
    load = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        runs = [once(Path(d)) for _ in range(5)]
    times = [r[0] for r in runs]
    print(f"targets: {n}  objects per render --all: {runs[0][1]}  catalog load: {load * 1000:.1f} ms")
    print(f"render --all: median {statistics.median(times):.3f} s  min {min(times):.3f} s  max {max(times):.3f} s  (5 runs)")
    root = Path(__file__).resolve().parent.parent
    # Into the same --out each run (the files of the run before are truncated and rewritten: on ext4 closing such a
    # file starts its writeback, which waits while the disk is busy), and into a new --out each run (files created).
    for label, fresh in (("same --out each run", False), ("new --out each run", True)):
        whole = []
        with tempfile.TemporaryDirectory() as d:
            for i in range(5):
                out = Path(d) / (f"run{i}" if fresh else "out")
                start = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "stacks", "render", "--all", "--out", str(out)],
                    cwd=root,
                    check=True,
                    capture_output=True,
                )
                whole.append(time.perf_counter() - start)
        print(
            f"python -m stacks render --all (whole process, {label}): median {statistics.median(whole):.3f} s  "
            f"min {min(whole):.3f} s  (5 runs)"
        )
    if sys.dont_write_bytecode:  # inherited by the runs above: they compile the project's modules each time
        print("note: PYTHONDONTWRITEBYTECODE is set, so every run compiles the project's modules (no __pycache__)")


if __name__ == "__main__":
    main()
