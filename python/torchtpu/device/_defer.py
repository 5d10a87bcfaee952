"""DeferAndFuse, the eager device's third mode (docs/eager.md, "DeferAndFuse").

Ops on `tpu` tensors still go through `_dispatch` (views, in-place writes, casts, CPU
fallbacks: every rule of strict mode), but a one-op `Program` is recorded instead of run
(`record`): its outputs are `Pending` values that storages hold in place of device buffers.
Nothing runs until a cut (`flush`). Then the region (the recorded programs, wired together)
is compiled as one program (`_region.py`), or found in the region cache, and run once. Only
the pending values Python still references become outputs; the rest are intermediates XLA
never materialises. Inputs only the region still references (the old buffers of tensors
updated in place) are donated to it.

A region's key is structural: each recorded program's serial (which names its op, attributes
and input types, `_dispatch._run`'s key), how its inputs are wired (an earlier value, or the
k-th distinct external buffer: aliasing is in the key), which values are still referenced,
and which inputs are donated. A loop that does the same thing every step records the same
keys.

Cuts, each with its reason (`CUT_REASONS`), the user's file:line and source text: host reads
(`.item()`, `.cpu()`, printing, `.tolist()`, `bool()`), ops with data-dependent shapes,
`torch.tpu.synchronize()`, the end of `backward()`, before and after an optimizer step, a cap
on recorded ops and live bytes, a CPU fallback that needs values, and leaving the mode.
`explain()` and TORCHTPU_EAGER_TRACE hold one record per region (`_trace.py`);
TORCHTPU_EAGER_CACHE_ONLY=1 makes a region compile after warm-up an error.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

import torch

from torchtpu import _C, _stats
from torchtpu.device import _region, _state, _trace
from torchtpu.device._frames import first_user_frame

# Why a region was cut (the `reason` of each record).
CUT_REASONS = {
    "host_read": "a tensor's values were read on the host (.item(), bool(), .cpu(), .tolist(), printing)",
    "data_dependent_shape": "an op whose result size depends on values (nonzero, masked_select, x[mask])",
    "synchronize": "torch.tpu.synchronize()",
    "backward_end": "the end of a backward() pass",
    "optimizer_step": "an optimizer step (PyTorch's optimizer step hooks, before and after)",
    "size_cap": "the region reached TORCHTPU_EAGER_MAX_OPS ops or TORCHTPU_EAGER_MAX_LIVE_BYTES live bytes",
    "cpu_fallback": "an op without a tpu program ran on the CPU and needed values",
    "untraced_program": "a program that cannot be recorded (the device's own random-number programs) needed values",
    "compiled_graph": "a torch.compile graph ran on tpu tensors that were still pending",
    "mode_change": "the eager mode changed away from defer_and_fuse",
    "explicit": "torchtpu.eager.flush()",
    "device_change": "an op on another tpu device than the region's, or a copy between tpu devices (a region runs on one device)",
    "collective": "a torch.distributed collective on tpu tensors (tpu_dist) read its inputs on the host",
    "another_thread": "another thread read a value this thread's region still held pending (each thread records its own region)",
}

MAX_OPS = int(os.environ.get("TORCHTPU_EAGER_MAX_OPS", "20000"))
MAX_LIVE_BYTES = int(os.environ.get("TORCHTPU_EAGER_MAX_LIVE_BYTES", str(8 << 30)))
# Live bytes are counted every this many recorded ops (a scan of the region's values).
_LIVE_CHECK_EVERY = 512
CACHE_ONLY_ENV = "TORCHTPU_EAGER_CACHE_ONLY"
WARMUP_ENV = "TORCHTPU_EAGER_WARMUP_STEPS"

# The calling thread's recording state (`_state.py`): `state.in_mode` (the mode is
# defer_and_fuse), `state.active` (ops are recorded: the mode, outside a host read's own data
# movement, `immediate`), `state.region` (the region being recorded), `state.backward_task`.
state = _state.state


# A value of the open region, and the region (the ops recorded since the last cut): native
# objects (`python/src/eager/defer.rs`), so that the native per-op path records a cached op
# with no Python, into the same records this module's `record` writes. A Pending's `buffer` is
# its device buffer once the region ran; its `to_host()` and `wait()` cut the region first.
Pending = _C.Pending
Region = _C.Region


def resolve(p, reason: str):
    """The buffer of Pending `p`, cutting its region (for `reason`) where it is still pending:
    the calling thread's, or another thread's (`another_thread`) whose value this thread reads."""
    owner = p.region
    if p.buffer is None and owner is not None and not owner.closed:
        if owner is state.region:
            flush(reason)
        else:
            flush("another_thread", f"read by {threading.current_thread().name}", region=owner)
    if p.buffer is None:
        failed = p.region.error if p.region is not None else None
        if failed is not None:  # compiling or running its region failed: the same error
            raise failed
        from torchtpu.errors import InternalError

        # The region ran without this value as an output: a bug.
        raise InternalError("a pending tpu value was not computed by its region", stage="execute")
    return p.buffer


def record(program, leaves: list, device: int = 0) -> list:
    """Records `program` run on `leaves` (device buffers or Pending values on tpu:`device`) in
    the open region; returns Pending values for its IR outputs. A region runs on one device: an
    op on another one cuts the open region first."""
    task = torch._C._current_graph_task_id()
    if task != -1 and task != state.backward_task:
        _queue_backward_cut(task)
    got = _C.defer_record(program, leaves, device)  # opens this thread's region if none is open
    while got is None:  # the open region runs on another device
        r = state.region
        flush("device_change", f"an op on tpu:{device} after ops on tpu:{r.device}")
        got = _C.defer_record(program, leaves, device)
    r, outs, n = got
    if n >= MAX_OPS or n % _LIVE_CHECK_EVERY == 0:
        after_record(r, n)
    return outs


def after_record(r, n: int) -> None:
    """The size cap, checked after the n-th op of region `r` was recorded (each op at the op
    cap; live bytes every `_LIVE_CHECK_EVERY` ops: a scan of the region's values)."""
    if n >= MAX_OPS:
        flush("size_cap", f"{n} ops (TORCHTPU_EAGER_MAX_OPS={MAX_OPS})")
    elif n % _LIVE_CHECK_EVERY == 0:
        live = sum(v.nbytes for v in (r.values[i] for i in _live(r.values)))
        if live > MAX_LIVE_BYTES:
            flush("size_cap", f"{live} live bytes (TORCHTPU_EAGER_MAX_LIVE_BYTES={MAX_LIVE_BYTES})")


def _live(values: list) -> list:
    """Indices of the values something besides the region holds (references: the list's and
    getrefcount's argument)."""
    return [i for i in range(len(values)) if sys.getrefcount(values[i]) > 2]


def resolved(leaves: list, name: str) -> list:
    """`leaves` with every Pending replaced by its buffer (a cut where one is still pending):
    for a program that runs now (`untraced_program`) while a region is open."""
    if not any(type(b) is Pending for b in leaves):
        return leaves
    with cause("untraced_program", name):
        return [b._value("untraced_program") if type(b) is Pending else b for b in leaves]


@contextlib.contextmanager
def immediate():
    """Programs inside the block run now, not recorded (a cut first where an input is still
    pending): a host read's own reshape or strided gather, which would otherwise be a region
    of one op."""
    s = state
    was = s.active
    s.active = False
    try:
        yield
    finally:
        s.active = was


# ---------------------------------------------------------------- cut reasons

_cause = threading.local()


@contextlib.contextmanager
def cause(reason: str, detail: str | None = None):
    """Names the reason of any cut made inside the block. The outermost block wins: it knows
    most about why (a CPU fallback that reads its arguments, not the read itself)."""
    prev = getattr(_cause, "value", None)
    _cause.value = prev or (reason, detail)
    try:
        yield
    finally:
        _cause.value = prev


def _user_frame():
    return first_user_frame(sys._getframe(1))


def _main_thread_frame():
    """Like `_user_frame`, on the main thread's stack (autograd may run a backward's ops and
    its final callback on a device thread of its own)."""
    if threading.current_thread() is threading.main_thread():
        return _user_frame()
    return first_user_frame(sys._current_frames().get(threading.main_thread().ident))


# ---------------------------------------------------------------- the cut


def flush(reason: str = "explicit", detail: str | None = None, region=None) -> dict | None:
    """Runs the calling thread's open region (or `region`, another thread's whose value this
    thread needs), if any; returns its explain record. The region is closed first: nothing is
    recorded into it from here on, whichever thread records next."""
    r = state.region if region is None else region
    if r is None or r.closed:
        return None
    r.closed = True
    if r is state.region:
        state.region = None
    if not r.records:
        return None
    given = getattr(_cause, "value", None) if region is None else None  # another thread's: its own reason
    if given is not None:
        reason, detail = given[0], given[1] if given[1] is not None else detail
    if reason == "backward_end":
        where, line = _main_thread_frame()
    else:
        where, line = _user_frame()
    rec = {
        "region": _trace.count(),
        "reason": reason,
        "detail": detail,
        "where": where,
        "line": line,
        "ops": len(r.records),
        "inputs": len(r.externals),
        "record_ms": r.record_ms(),
    }
    wait = state.mode == "debug"  # a cut made in debug mode (leaving the mode) waits, as its ops do
    try:
        # Native (python/src/eager/cut.rs): the key, and on a hit the run and every live
        # value's buffer.
        key_id, live, dead, program, run_ms = _C.defer_cut(r, wait)
        rec["key"] = key_id
        rec["hit"] = program is not None
        if program is None:
            program, run_ms = _compile_and_run(r, (tuple(r.tokens), live, dead), rec, reason, where, wait)
    except BaseException as e:
        r.error = e  # its Pendings' readers get this error, not a missing value
        raise
    if rec["hit"]:
        rec["compile_ms"] = 0.0
        _stats.bump("eager_region_hits")
    _stats.bump("eager_regions")
    _stats.bump("eager_ops_deferred", rec["ops"])
    rec["outputs"] = len(live)
    rec["run_ms"] = run_ms
    rec["donated"] = len(program.donate)
    memory = program.memory
    rec["bytes_in"] = memory["input_bytes"]
    rec["bytes_out"] = memory["output_bytes"]
    rec["bytes_peak"] = memory["peak_bytes"]
    _trace.remember(rec)
    return rec


def _compile_and_run(r: Region, key, rec: dict, reason: str, where, wait: bool):
    """A miss: compiles the region's program (kept under `key` for the next cut), runs it and
    gives each live Pending its buffer. Returns the program and its run's milliseconds."""
    t0 = time.perf_counter()
    rec["differs"] = _region.describe_miss(r, key)
    check_compile_allowed(f"region {rec['key']} ({len(r.records)} ops, cut by {reason} at {where}): {rec['differs']}")
    program = _region.compile_region(r, key)
    rec["executable"] = program.compiled.source  # "compiled", or found in a cache ("memory", "disk")
    rec["compile_ms"] = (time.perf_counter() - t0) * 1e3
    _stats.bump("eager_regions_compiled")
    _stats.bump("eager_programs_compiled")
    return program, _C.defer_run(r, program, wait)


# ---------------------------------------------------------------- cache-only and warm-up

_steps = 0
_warm = False


def mark_warm() -> None:
    global _warm
    _warm = True


def _warmup_steps() -> int:
    return int(os.environ.get(WARMUP_ENV, "2"))


def check_compile_allowed(what: str) -> None:
    """Under TORCHTPU_EAGER_CACHE_ONLY=1, after warm-up (TORCHTPU_EAGER_WARMUP_STEPS optimizer
    steps, 2 by default, or `torchtpu.eager.mark_warm()`), a compile in DeferAndFuse mode
    raises `torchtpu.errors.RecompileError`."""
    if not state.in_mode or os.environ.get(CACHE_ONLY_ENV, "") in ("", "0"):
        return
    if _warm or _steps >= _warmup_steps():
        from torchtpu.errors import RecompileError

        raise RecompileError(
            f"TORCHTPU_EAGER_CACHE_ONLY: {what} would be compiled after warm-up ({_steps} optimizer steps)", what
        )


# ---------------------------------------------------------------- step-boundary hooks

_hooks = None


def _queue_backward_cut(task: int) -> None:
    """Inside backward pass `task` (a graph task not yet seen): cut when it ends."""
    state.backward_task = task

    def at_end():
        # On the thread that recorded the backward: a thread in this mode runs its backward
        # passes itself (`_state.keep_backward_on_this_thread`).
        state.backward_task = None
        if state.in_mode:
            flush("backward_end")

    torch.autograd.Variable._execution_engine.queue_callback(at_end)


def _before_step(optimizer, args, kwargs):
    if state.in_mode:
        flush("optimizer_step", f"before {type(optimizer).__name__}.step")


def _after_step(optimizer, args, kwargs):
    global _steps
    _steps += 1
    if state.in_mode:
        flush("optimizer_step", f"after {type(optimizer).__name__}.step")


def install_hooks() -> None:
    """PyTorch's global optimizer step hooks (idempotent)."""
    global _hooks
    if _hooks is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        _hooks = (register_optimizer_step_pre_hook(_before_step), register_optimizer_step_post_hook(_after_step))


def set_active(on: bool) -> None:
    """Turns recording on or off for the calling thread (leaving the mode runs what it
    recorded)."""
    s = state
    if on:
        install_hooks()
        s.active = s.in_mode = True
        return
    if s.in_mode:
        s.active = s.in_mode = False
        flush("mode_change")


if _state.DEFAULT_MODE == "defer_and_fuse":
    install_hooks()  # threads start in the mode (`_state._ThreadState`)
