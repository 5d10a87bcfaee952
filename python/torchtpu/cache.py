"""`python -m torchtpu.cache ARGS...`: runs the `torchtpu-cache` tool (list, show, stats,
explain, verify, prune, clear; see docs/cache.md) from this checkout's build, or from PATH."""

from __future__ import annotations

import os
import pathlib
import shutil
import sys


def find_tool() -> str | None:
    root = pathlib.Path(__file__).resolve().parents[2]
    for profile in ("release", "debug"):
        candidate = root / "target" / profile / "torchtpu-cache"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("torchtpu-cache")


def main(argv: list[str]) -> int:
    tool = find_tool()
    if tool is None:
        print(
            "torchtpu.cache: the torchtpu-cache tool is not built; run `cargo build --bin torchtpu-cache`",
            file=sys.stderr,
        )
        return 2
    os.execv(tool, [tool, *argv])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
