"""Rewrite the URN golden files (tests/golden/urns-*.txt) from the program as it is now.

The only way the golden files change: ``make golden`` (or ``python tests/update_golden.py``), run on purpose
after checking that every URN change is wanted (a renamed or moved resource needs an alias instead).
tests/test_urns.py only reads them, so a test run can never bless its own output."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # tests/ (harness, test_urns) and the project root (the program)

from test_urns import CASES, GOLDEN, current_urns  # noqa: E402


def main() -> int:
    for case in sorted(CASES):
        path = GOLDEN / f"urns-{case}.txt"
        old = set(path.read_text().split()) if path.exists() else set()
        urns = current_urns(case)
        path.write_text("\n".join(urns) + "\n")
        gone, new = sorted(old - set(urns)), sorted(set(urns) - old)
        print(f"{path.relative_to(GOLDEN.parent.parent)}: {len(urns)} URNs, {len(new)} added, {len(gone)} removed")
        for u in gone:
            print(f"  - {u}")
        for u in new:
            print(f"  + {u}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
