"""One-op programs built ahead of use when an op sequence repeats at new sizes (docs/eager.md,
"A new shape").

A new prompt length in `generate` makes the same ops run again at sizes the program cache has
not seen: each misses, is traced and compiled (tens of ms each, XLA's compile most of it), one
after another. Here each build's inputs are kept as a `Spec` (every input of the trace, sizes
apart from the rest), in the order a thread built them. When a miss is the same build as an
earlier one with its sizes shifted by one amount (`5 -> 6`; `11 -> 12, 12 -> 13`), the builds
that followed that earlier one are predicted at the new sizes and traced and compiled on a small
thread pool (XLA's compile releases the GIL), a few ahead of the thread that will need them.
An op then finds its program ready, waits for the one being built, or builds it itself when the
pool has not started it.

A prediction can only be useless, never wrong: a program is taken only by a build whose `Spec`
equals the predicted one, and a `Spec` holds everything the trace reads (the op, its argument
types, sizes and values, the geometry of views, casts, index checks, grad mode, the default
dtype). Useless predictions cost a compile each; at most `_lookahead()` of them are outstanding
per thread before the thread takes one.

Nothing happens for a program cache that never sees new sizes: a hit never comes here, and a
miss only computes its `Spec` and looks it up.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread  # registers its exit hook now, before ours (`_shutdown`)
import math
import os
import threading
import time

import torch

from torchtpu import _stats

ENV = "TORCHTPU_EAGER_AHEAD"


def _default_threads() -> int:
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"{ENV}={raw!r}: expected a number of threads (0: off)") from None
        return max(0, n)
    return min(4, os.cpu_count() or 1)


_threads = _default_threads()


def set_threads(n: int) -> int:
    """Sets the pool's size (0: no ahead builds); returns the previous size."""
    global _threads, _pool
    previous, _threads = _threads, max(0, int(n))
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
    return previous


def enabled() -> bool:
    return _threads > 0


def _lookahead() -> int:
    # Enough to keep the pool busy while the op's thread takes programs in order; each one
    # ahead of the thread is a compile wasted if the sequence does not repeat.
    return 2 * _threads + 2


# ---------------------------------------------------------------- specs

_INT = object()  # where an int (a size, stride index, offset or int argument) sits in a skeleton


class Unsupported(Exception):
    """An argument a Spec does not describe: such a build is neither predicted nor kept."""


class Spec:
    """Everything `_programs.trace` reads, as a skeleton (hashable, sizes replaced by `_INT`)
    and the ints in the order the skeleton holds them. Two builds with equal Specs trace
    the same graph."""

    __slots__ = ("skeleton", "ints", "_hash")

    def __init__(self, skeleton, ints: tuple):
        self.skeleton = skeleton
        self.ints = ints
        self._hash = hash((skeleton, ints))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Spec) and self.ints == other.ints and self.skeleton == other.skeleton


_ATOMS = (str, complex, torch.dtype, torch.device, torch.layout, torch.memory_format, type(None))


def _canon(x, ints: list, shapes: list):
    """`x`'s skeleton; its ints go to `ints`, the shape of each tensor leaf to `shapes`."""
    if isinstance(x, torch.Tensor):
        shapes.append(tuple(x.shape))
        if x.is_meta:
            if (
                x.requires_grad
                or x.storage_offset() != 0
                or not x.is_contiguous()
                or x.is_conj()
                or x.is_neg()
                or x.layout is not torch.strided
            ):
                raise Unsupported
            ints.extend(x.shape)
            return ("T", x.dtype, x.dim())
        if x.device.type == "cpu" and x.dim() == 0 and not x.requires_grad and x.layout is torch.strided:
            v = x.item()
            # -0.0 and 0.0 are equal keys: the sign tells them apart.
            return ("C", x.dtype, v, math.copysign(1.0, v) if isinstance(v, float) else 0)
        raise Unsupported
    if type(x) is bool:
        return x
    if type(x) is int:
        ints.append(x)
        return _INT
    if type(x) is float:
        return ("F", x, math.copysign(1.0, x))
    if type(x) is list or type(x) is tuple:
        return ("L" if type(x) is list else "U",) + tuple(_canon(v, ints, shapes) for v in x)
    if isinstance(x, _ATOMS):
        return x
    raise Unsupported


def _canon_geom(g, view_shape, ints: list):
    """A view's geometry (`_programs.build`'s `geoms[i]`) in terms that follow the sizes: the
    buffer's shape; each stride named as a row-major stride of the buffer or of the view where
    it is one; the offset as an index into the buffer, each coordinate counted from the nearer end
    (the last row stays the last row)."""
    if g is None:
        return None
    shape, strides, offset = g[0], g[1], g[2]
    ints.extend(shape)
    named = None
    if strides is not None:
        known = _strides_known(shape, view_shape)
        # A stride that is none of these (a head dim split off a buffer dim) stays as it is.
        named = tuple(known.index(s) if s in known else ("raw", s) for s in strides)
    if not 0 <= offset < max(1, math.prod(shape)):
        raise Unsupported
    for d, stride in zip(shape, _row_major(shape)):
        i, offset = divmod(offset, stride)
        ints.append(i if 2 * i < d else i - d)
    return ("G", len(shape), named, g[3] if len(g) > 3 else None)


def _strides_known(shape, view_shape) -> list:
    """Strides named by position: the whole buffer's, the buffer's row-major ones, the view's."""
    return [math.prod(shape)] + _row_major(shape) + _row_major(view_shape)


def _row_major(shape) -> list:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _context() -> tuple:
    """The thread's state a trace reads besides its arguments: grad and inference mode, the
    default dtype, and the dispatch keys included and excluded (the op runs below autograd)."""
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch._C._dispatch_tls_local_include_set().raw_repr(),
        torch._C._dispatch_tls_local_exclude_set().raw_repr(),
    )


def spec_of(op, meta_args, meta_kwargs, cast_to, lift_floats, geoms, write_base, checks) -> Spec | None:
    """The Spec of a build, or None where an argument is not described (not predicted)."""
    ints: list = []
    shapes: list = []
    try:
        args = _canon(tuple(meta_args), ints, shapes)
        kwargs = tuple((k, _canon(v, ints, shapes)) for k, v in meta_kwargs.items())
        if geoms is not None:
            if len(geoms) != len(shapes):
                raise Unsupported
            geoms = tuple(_canon_geom(g, v, ints) for g, v in zip(geoms, shapes))
        skeleton = (
            op,
            args,
            kwargs,
            None if cast_to is None else tuple(cast_to),
            bool(lift_floats),
            geoms,
            None if write_base is None else tuple(write_base),
            bool(checks),
            _context(),
        )
    except Unsupported:
        return None
    return Spec(skeleton, tuple(ints))


def materialize(spec: Spec) -> dict:
    """The build's arguments back from `spec` (meta tensors made afresh)."""
    it = iter(spec.ints)
    shapes: list = []

    def make(s):
        if s is _INT:
            return next(it)
        if type(s) is tuple and s and type(s[0]) is str:
            tag = s[0]
            if tag == "T":
                t = torch.empty([next(it) for _ in range(s[2])], dtype=s[1], device="meta")
                shapes.append(tuple(t.shape))
                return t
            if tag == "C":
                shapes.append(())
                return torch.tensor(s[2], dtype=s[1])
            if tag == "F":
                return s[1]
            if tag == "L":
                return [make(v) for v in s[1:]]
            if tag == "U":
                return tuple(make(v) for v in s[1:])
        return s

    def geom(g, view_shape):
        if g is None:
            return None
        _, rank, named, bits = g
        shape = tuple(next(it) for _ in range(rank))
        strides = None
        if named is not None:
            known = _strides_known(shape, view_shape)
            strides = tuple(k[1] if type(k) is tuple else known[k] for k in named)
        offset = 0
        for d, stride in zip(shape, _row_major(shape)):
            i = next(it)
            i = i if i >= 0 else d + i
            if not 0 <= i < max(d, 1):
                raise Unsupported
            offset += i * stride
        return (shape, strides, offset) if bits is None else (shape, strides, offset, bits)

    op, args, kwargs, cast_to, lift, geoms, write_base, checks, _ = spec.skeleton
    meta_args = make(args)
    meta_kwargs = {k: make(v) for k, v in kwargs}
    return {
        "op": op,
        "meta_args": meta_args,
        "meta_kwargs": meta_kwargs,
        "cast_to": None if cast_to is None else list(cast_to),
        "lift_floats": lift,
        "geoms": None if geoms is None else [geom(g, v) for g, v in zip(geoms, shapes)],
        "write_base": None if write_base is None else list(write_base),
        "checks": checks,
    }


# ---------------------------------------------------------------- what a thread built, in order


class _Entry:
    __slots__ = ("spec", "outs")

    def __init__(self, spec: Spec, outs: tuple):
        self.spec = spec
        self.outs = outs  # the output sizes, flattened


class _Window:
    """Builds of an earlier pass (log positions `start` to `end`) predicted at new sizes:
    `shift` maps each old size that changed to its new one."""

    __slots__ = ("shift", "next", "end", "taken", "outstanding")

    def __init__(self, shift: dict, start: int, end: int):
        self.shift = shift
        self.next = start  # the next log position to predict from
        self.end = end
        self.taken = start - 1  # the last position whose prediction the thread reached
        self.outstanding: dict = {}  # log position -> Spec predicted from it, not yet reached


_LOG_LIMIT = 4096
_SCAN_LIMIT = 512  # log positions looked at per prediction round


_HISTORY = 16  # earlier builds per skeleton an anchor is looked for among


class _Log(threading.local):
    """One per thread: the builds it made, in order (positions count from 0 for the thread's
    life; the oldest are dropped at `_LOG_LIMIT`)."""

    def __init__(self):
        self.entries: list = []
        self.base = 0  # the position of entries[0]
        self.history: dict = {}  # skeleton -> positions of its latest builds (one op, many sites)
        # skeleton -> per position in `ints`, the value every build of it had there (None where
        # two differed), once it has two builds: a head dim stays where a length moves.
        self.fixed: dict = {}
        self.delta = None  # the shift confirmed by two builds in sequence
        self.pending = None  # (delta, old position, shift) of one unconfirmed anchor
        self.window: _Window | None = None

    def at(self, pos: int):
        i = pos - self.base
        return self.entries[i] if 0 <= i < len(self.entries) else None

    def append(self, entry: _Entry) -> int:
        if len(self.entries) >= _LOG_LIMIT:
            drop = _LOG_LIMIT // 2
            del self.entries[:drop]
            self.base += drop
            history = {}
            for k, seen in self.history.items():
                kept = [p for p in seen if p >= self.base]
                if kept:
                    history[k] = kept
            self.history = history
            self.fixed = {k: v for k, v in self.fixed.items() if k in history}
        pos = self.base + len(self.entries)
        self.entries.append(entry)
        seen = self.history.setdefault(entry.spec.skeleton, [])
        seen.append(pos)
        if len(seen) > _HISTORY:
            del seen[0]
        return pos

    def anchor(self, entry: _Entry):
        """The latest earlier build of `entry`'s skeleton that `entry` repeats at shifted
        sizes: (its position, it, the shift), or None."""
        for pos in reversed(self.history.get(entry.spec.skeleton, ())):
            old = self.at(pos)
            shift = _shift_of(old, entry) if old is not None else None
            if shift is not None:
                return pos, old, shift
        return None


_log = _Log()


def _shift_of(old: _Entry, new: _Entry) -> dict | None:
    """`{old size: new size}` where the two builds differ, if every difference is one shift
    (new - old the same, sizes above 1), else None."""
    delta = None
    shift = {}
    for a, b in zip(old.spec.ints + old.outs, new.spec.ints + new.outs):
        if a == b:
            continue
        if a < 2 or b < 2 or (delta is not None and b - a != delta):
            return None
        delta = b - a
        shift[a] = b
    return shift or None


# ---------------------------------------------------------------- predictions


class _Prediction:
    __slots__ = ("future", "owner", "window", "pos")

    def __init__(self, future, window, pos):
        self.future = future
        self.owner = threading.get_ident()  # the thread whose window predicted it
        self.window = window
        self.pos = pos


_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_table: dict = {}  # Spec -> _Prediction, until taken (at most _TABLE_LIMIT: the oldest go)
_TABLE_LIMIT = 128
_built: set = set()  # Specs built (by any thread), so not predicted again
_BUILT_LIMIT = 16384


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(_threads, thread_name_prefix="torchtpu-ahead")
        return _pool


def _shutdown() -> None:
    """At interpreter exit, before the pool's threads are joined: queued builds are dropped."""
    pool = _pool
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


# Registered after concurrent.futures' own exit hook, so it runs before it (they run in reverse).
threading._register_atexit(_shutdown)


def take(spec: Spec | None):
    """A prediction of `spec`: its built program (`_programs.Traced`) when the pool built it
    (waiting for it if under way), or None when the pool had not started it (then dropped: the
    caller builds it) or failed. Returns (traced or None, predicted)."""
    if spec is None or not _table:
        return None, False
    with _lock:
        pred = _table.pop(spec, None)
    if pred is None:
        return None, False
    _stats.bump("eager_ahead_predicted")
    if pred.owner == threading.get_ident():
        _reached(pred.window, pred.pos)
    traced = None
    if not pred.future.cancel():
        start = time.perf_counter()
        try:
            traced = pred.future.result()
        except BaseException:  # noqa: BLE001  (the caller builds it again, and sees the error itself)
            traced = None
        _stats.bump("eager_ahead_wait_seconds", time.perf_counter() - start)
    return traced, True


def _reached(window: _Window, pos: int) -> None:
    """The thread needed the program predicted from log position `pos`: it has got that far,
    and what was predicted from earlier positions and not needed is dropped."""
    if pos > window.taken:
        window.taken = pos
        _drop(window, pos)


def _drop(window: _Window, upto: int | None) -> None:
    """Stops counting `window`'s predictions from positions up to `upto` (all: None) as
    outstanding, and cancels those the pool has not started; one built or under way stays
    until an op takes it (a later pass may) or `_TABLE_LIMIT` pushes it out."""
    passed = [p for p in window.outstanding if upto is None or p <= upto]
    with _lock:
        for p in passed:
            spec = window.outstanding.pop(p)
            pred = _table.get(spec)
            if pred is not None and pred.window is window and pred.future.cancel():
                del _table[spec]


def learned(spec: Spec | None, out_shapes, predicted: bool, trace) -> None:
    """After this thread built `spec` (itself, or taken from the pool when `predicted`): logs it,
    and where it repeats an earlier build at shifted sizes, predicts the builds that followed
    that one; the pool builds them with `trace` (`_programs.trace`, passed in: that module
    imports this one)."""
    if spec is None:
        return
    with _lock:
        if len(_built) >= _BUILT_LIMIT:
            _built.clear()
        _built.add(spec)
    log = _log
    entry = _Entry(spec, tuple(d for shape in out_shapes for d in shape))
    found = log.anchor(entry)
    seen = log.history.get(spec.skeleton)
    if seen:
        fixed = log.fixed.get(spec.skeleton)
        if fixed is None:
            first = log.at(seen[0])
            fixed = first.spec.ints if first is not None else spec.ints
        log.fixed[spec.skeleton] = tuple(a if a == b else None for a, b in zip(fixed, spec.ints))
    pos = log.append(entry)
    if found is not None and not predicted:
        old_pos, _, shift = found
        _anchored(log, old_pos, pos, shift)
    if log.window is not None:
        _fill(log, trace)


def _anchored(log: _Log, old_pos: int, pos: int, shift: dict) -> None:
    """A build the thread made itself repeats the one at `old_pos` shifted: once two such
    builds in sequence agree on the shift (or it was confirmed before), the builds after
    `old_pos` are predicted."""
    a, b = next(iter(shift.items()))
    delta = b - a
    pending = log.pending
    follows = pending is not None and pending[0] == delta and pending[1] < old_pos <= pending[1] + 64
    if log.delta == delta or follows:
        log.delta = delta
        log.pending = None
        merged = dict(pending[2]) if follows else {}
        merged.update(shift)
        if log.window is not None:
            _drop(log.window, None)
        log.window = _Window(merged, old_pos + 1, pos)
    else:
        log.pending = (delta, old_pos, shift)


def _fill(log: _Log, trace) -> None:
    """Submits predictions from the thread's window until `_lookahead()` are outstanding."""
    w = log.window
    limit = _lookahead()
    scanned = 0
    while len(w.outstanding) < limit and w.next < w.end and scanned < _SCAN_LIMIT and _threads > 0:
        pos = w.next
        w.next += 1
        scanned += 1
        entry = log.at(pos)
        if entry is None:
            continue
        new = _shifted(log, entry.spec, w.shift)
        if new is None:
            continue
        with _lock:
            if new in _built or new in _table:
                continue
            if len(_table) >= _TABLE_LIMIT:
                _table.pop(next(iter(_table))).future.cancel()
        try:
            future = _executor().submit(_build, new, trace)
        except RuntimeError:  # the interpreter is shutting down
            log.window = None
            return
        with _lock:
            _table[new] = _Prediction(future, w, pos)
        w.outstanding[pos] = new


def _shifted(log: _Log, spec: Spec, shift: dict) -> Spec | None:
    """`spec` with each int in `shift` shifted, but where every earlier build of its skeleton
    had that same int (a head dim equal to a sequence length stays: only the length moved
    between the builds)."""
    fixed = log.fixed.get(spec.skeleton)
    ints = spec.ints
    if fixed is None:
        new = tuple(shift.get(v, v) for v in ints)
    else:
        new = tuple(v if f is not None else shift.get(v, v) for v, f in zip(ints, fixed))
    return None if new == ints else Spec(spec.skeleton, new)


def _build(spec: Spec, trace):
    """On the pool: the program of `spec`, traced by `trace` and compiled (`_programs.Traced`)."""
    grad, inference, default_dtype, include, exclude = spec.skeleton[-1]
    if default_dtype is not torch.get_default_dtype():
        return None  # changed since (process-wide): the trace would not be the Spec's
    keys = torch._C.DispatchKeySet.from_raw_repr
    # make_fx patches `nn.Module.__call__`/`__getattr__` process-wide while it traces: never
    # while Dynamo traces a frame on another thread (it read the patch and diverged from its
    # speculation log). Dynamo holds its compile lock for a frame; taken first here, as a
    # thread compiling a frame takes it before the build lock its one-op programs take.
    from torch._dynamo.convert_frame import compile_lock

    with (
        compile_lock,
        torch.inference_mode(inference),
        torch.set_grad_enabled(grad),
        torch._C._ForceDispatchKeyGuard(keys(include), keys(exclude)),
    ):
        traced = trace(**materialize(spec))
    traced.compile_ahead()
    _stats.bump("eager_ahead_compiles")
    return traced


def clear() -> None:
    """Forgets the predictions and what was built (with the program cache)."""
    with _lock:
        for pred in _table.values():
            pred.future.cancel()
        _table.clear()
        _built.clear()
    log = _log
    log.window = None
    log.pending = None
