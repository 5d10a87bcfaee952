"""Why torchtpu compiles a graph again (issue 49), named on the compiled path as DeferAndFuse
names a region's recompile (`device/_region.py`, `describe_miss`). Two sources:

- Dynamo hands the backend a new graph for a frame it compiled before (one of its guards
  failed): the record gives Dynamo's own reason (the guard, e.g. a size mismatch) and what differs
  from the frame's previous compile here: each input's shape, dtype or value, and the options;
- a graph with symbolic sizes meets a new input signature (`backend._PerShape`): a new program,
  named by the sizes that changed and the bucket it runs in.

Each recompile is one line on the `torchtpu.recompiles` logger (INFO; `TORCH_LOGS=torchtpu.recompiles`
turns it on, a qualified logger name as TORCH_LOGS takes them, next to Dynamo's `recompiles`: an
alias registered at import would come after `import torch` has parsed TORCH_LOGS) and one record in
`torchtpu.stats()["recompiles"]`: `kind` ("dynamo" or "signature"), `graph`, `what`.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from torchtpu import _stats

log = logging.getLogger("torchtpu.recompiles")

# Dynamo's frame id -> (input signature, options) of that frame's last compile here.
_frames: dict = {}
_FRAMES_LIMIT = 4096


def signature(inputs) -> tuple:
    """Per input: (shape, dtype) of a tensor, else the value (a SymInt's hint, a number)."""
    out = []
    for a in inputs:
        if isinstance(a, torch.Tensor):
            out.append((tuple(int(d) if isinstance(d, int) else str(d) for d in a.shape), a.dtype))
        elif isinstance(a, torch.SymInt):
            out.append(("symint", str(a)))
        else:
            out.append(a)
    return tuple(out)


def _is_tensor_part(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], torch.dtype)


def _describe_one(i: int, old, new) -> str:
    if _is_tensor_part(old) and _is_tensor_part(new):
        parts = []
        if old[0] != new[0]:
            parts.append(f"shape [{', '.join(map(str, old[0]))}] -> [{', '.join(map(str, new[0]))}]")
        if old[1] != new[1]:
            parts.append(f"dtype {old[1]} -> {new[1]}")
        return f"input {i}: {', '.join(parts)}"
    return f"input {i}: {old!r} -> {new!r}"


def difference(old: tuple, new: tuple) -> str:
    """What differs between two input signatures, input by input; "" if nothing."""
    if len(old) != len(new):
        return f"{len(old)} inputs -> {len(new)}"
    return "; ".join(_describe_one(i, a, b) for i, (a, b) in enumerate(zip(old, new)) if a != b)


def _options_difference(old, new) -> str:
    if old == new or not dataclasses.is_dataclass(old) or not dataclasses.is_dataclass(new):
        return ""
    changed = [
        f"{f.name} {getattr(old, f.name)!r} -> {getattr(new, f.name)!r}"
        for f in dataclasses.fields(old)
        if getattr(old, f.name) != getattr(new, f.name)
    ]
    return "options: " + ", ".join(changed) if changed else ""


def _dynamo_reason() -> str | None:
    """The guard failure Dynamo recorded for the compile in progress (its metrics context holds
    it; no public getter in torch 2.15)."""
    try:
        from torch._dynamo.utils import get_metrics_context

        reason = getattr(get_metrics_context(), "_metrics", {}).get("recompile_reason")
    except Exception:  # noqa: BLE001 - a private structure: absent is no reason, not an error
        return None
    return reason if isinstance(reason, str) else None


def frame_compiled(example_inputs, opts) -> dict | None:
    """Called as the backend receives a graph from Dynamo: where the frame was compiled before,
    records what changed; returns the record, if any."""
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    if compile_id is None or compile_id.frame_id is None:
        return None
    sig = signature(example_inputs)
    previous = _frames.get(compile_id.frame_id)
    if len(_frames) >= _FRAMES_LIMIT:
        _frames.clear()
    _frames[compile_id.frame_id] = (sig, opts)
    if previous is None or not compile_id.frame_compile_id:
        return None
    what = [p for p in (_dynamo_reason(), difference(previous[0], sig), _options_difference(previous[1], opts)) if p]
    return _record("dynamo", f"frame {compile_id}", "; ".join(what) or "no difference in its inputs or options")


def new_signature(graph: str, seen, key: tuple, label: str) -> dict | None:
    """A graph with symbolic sizes (`graph`, its name in stats()["buckets"]) gets a program for
    input signature `key` after those in `seen`: records the difference from the nearest."""
    seen = [k for k in seen if k != key]
    if not seen:
        return None
    nearest = min(seen, key=lambda k: (len(k) != len(key), sum(a != b for a, b in zip(k, key))))
    what = difference(nearest, key) or "the same inputs as another signature"
    if label:
        what += f" (bucket {label})"
    return _record("signature", graph, what)


def _record(kind: str, graph: str, what: str) -> dict:
    rec = {"kind": kind, "graph": graph, "what": what}
    _stats.record_recompile(rec)
    log.info("torchtpu recompiled %s: %s", graph, what)
    return rec


def reset() -> None:
    """Forgets the frames seen (a `torch._dynamo.reset()` starts their ids again)."""
    _frames.clear()
