"""The eager device's per-thread state: each thread has its own mode (kept in Rust, which the
shim and the native path read: `mode` below) and, in DeferAndFuse mode, its own open region, as
PyTorch keeps grad mode and autocast per thread. A thread that never set
its mode takes the process default (TORCHTPU_EAGER_MODE, "strict" if unset). What stays
process-wide: the program and region caches, index checks on or off (`_programs.use_checks`),
the CPU-fallback policy's environment default, stats and `explain()`'s records.

A leaf module: the modes (`_modes.py`), DeferAndFuse (`_defer.py`) and the native per-op path
(`python/src/eager/defer.rs`, which reads `state.active`, `state.region` and
`state.backward_task` of the calling thread) all read this one object.
"""

from __future__ import annotations

import os
import threading

import torch

from torchtpu import _C

MODE_ENV = "TORCHTPU_EAGER_MODE"
# The modes' names, the default's first (`torchtpu_eager::mode::Mode`, their one list).
MODES = tuple(_C.eager_modes())


def _default_mode() -> str:
    mode = os.environ.get(MODE_ENV, "strict").strip().lower() or "strict"
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}={mode!r}: expected one of {MODES}")
    return mode


DEFAULT_MODE = _default_mode()
# Threads that never set their mode have this one (Rust keeps each thread's: `mode` below).
_C.eager_set_mode(DEFAULT_MODE, default=True)


class _ThreadState(threading.local):
    """One per thread, made at the thread's first access with the default mode's state."""

    def __init__(self):
        self.check_finite = False
        self.fallback_error = None  # None: follow TORCHTPU_FALLBACK
        # DeferAndFuse: whether the mode is defer_and_fuse; whether ops are recorded (the mode,
        # outside a host read's own data movement); the region being recorded; the backward
        # pass whose end cuts it; autograd's multithreading switch before this thread left it.
        self.in_mode = self.active = DEFAULT_MODE == "defer_and_fuse"
        self.region = None
        self.backward_task = None
        self.multithreading = None
        if self.in_mode:
            keep_backward_on_this_thread(self)

    @property
    def mode(self) -> str:
        """The calling thread's mode: Rust's copy, the only one (`torchtpu_eager::mode`), which
        the shim asks per op and the native path reads (setting it here sets theirs)."""
        return _C.eager_mode()

    @mode.setter
    def mode(self, name: str) -> None:
        _C.eager_set_mode(name)


def keep_backward_on_this_thread(s) -> None:
    """Runs this thread's backward passes on the thread itself, not on autograd's device thread
    (whose state is the default's): autograd's own switch, thread-local, restored by
    `restore_backward_threads`. In DeferAndFuse mode nothing runs while recording, so the device
    thread would only add a hand-off per node (10-20% of a training step,
    benches/eager_device.py)."""
    if s.multithreading is None:
        s.multithreading = torch._C._is_multithreading_enabled()
        torch._C._set_multithreading_enabled(False)


def restore_backward_threads(s) -> None:
    if s.multithreading is not None:
        torch._C._set_multithreading_enabled(s.multithreading)
        s.multithreading = None


state = _ThreadState()

# make_fx's tracer is not thread-safe: one trace at a time, process-wide (one-op programs,
# index-check programs).
build_lock = threading.RLock()
