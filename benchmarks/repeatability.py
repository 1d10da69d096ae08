"""Compare two runs of one suite: the share of cells with the same verdict, and of kernel
medians (10 us or more) within 3%, with the cells that differ. Writes repeatability.json.

    python benchmarks/repeatability.py FIRST_RUN_DIR SECOND_RUN_DIR [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.suites.repeatability import compare, summary_lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--out", help="folder for repeatability.json (default: the second run's)")
    args = parser.parse_args(argv)
    try:
        result = compare(args.first, args.second)
    except ValueError as exc:
        print(f"repeatability: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(result)))
    out = Path(args.out or args.second) / "repeatability.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
