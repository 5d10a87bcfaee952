"""DeferAndFuse's explain records (`torchtpu.eager.explain()`) and the trace files of
TORCHTPU_EAGER_TRACE=FILE: one JSON line per region in FILE, and Chrome trace events in
FILE.chrome.json (docs/eager.md, "Reading the trace")."""

from __future__ import annotations

import json
import os
import time

TRACE_ENV = "TORCHTPU_EAGER_TRACE"
_EXPLAIN_LIMIT = 10000  # the newest records kept for explain()
_explained: list = []
_total = 0  # regions recorded since the last reset (numbers them)


def count() -> int:
    return _total


def remember(rec: dict) -> None:
    global _total
    _total += 1
    _explained.append(rec)
    if len(_explained) > _EXPLAIN_LIMIT:
        del _explained[: len(_explained) - _EXPLAIN_LIMIT]
    _write(rec)


_trace_files = None


def _write(rec: dict) -> None:
    global _trace_files
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    if _trace_files is None or _trace_files[0] != path:
        jsonl = open(path, "a", buffering=1)
        chrome = open(path + ".chrome.json", "w", buffering=1)
        # Chrome's JSON array format: the closing bracket is optional, so events are
        # appended as regions run and the file is viewable at any time.
        chrome.write("[\n")
        _trace_files = (path, jsonl, chrome, time.perf_counter())
    _, jsonl, chrome, t_start = _trace_files
    jsonl.write(json.dumps(rec) + "\n")
    now = (time.perf_counter() - t_start) * 1e6
    run_us, compile_us = rec["run_ms"] * 1e3, rec["compile_ms"] * 1e3
    args = {
        k: rec[k]
        for k in ("reason", "detail", "where", "line", "ops", "key", "hit", "bytes_in", "bytes_out", "bytes_peak")
    }
    if not rec["hit"]:
        args["differs"] = rec.get("differs")
    start = now - run_us - compile_us
    events = []
    if not rec["hit"]:
        events.append(
            {
                "name": f"compile {rec['key']}",
                "ph": "X",
                "ts": start,
                "dur": compile_us,
                "pid": 0,
                "tid": 1,
                "args": args,
            }
        )
    events.append(
        {
            "name": f"region {rec['key']} ({rec['reason']})",
            "ph": "X",
            "ts": start + compile_us,
            "dur": run_us,
            "pid": 0,
            "tid": 0,
            "args": args,
        }
    )
    for e in events:
        chrome.write(json.dumps(e) + ",\n")


def explained() -> list:
    return list(_explained)


def reset() -> None:
    """Forgets the explain records (the region cache stays)."""
    global _total
    _explained.clear()
    _total = 0
