"""The Python side of the native per-op path (docs/eager.md, "How an op runs").

The dispatcher shim (`csrc/dispatch.cpp`) runs every op that reaches the tpu device: a view
through PyTorch's Meta kernel, any other op through the Rust per-op path (`python/src/eager`),
which keys it, finds how it ran before and launches its program with no Python. What Rust has
not seen yet (a miss) and what it does not take run the Python path (`_dispatch.run`); after a
miss `learn` tells Rust how the Python path ran the op, so the next call with that key is native.

Strict and DeferAndFuse modes take the native path for ops that compute (views in every mode):
in DeferAndFuse a cached op is recorded natively into the open region (`_C.Region`, the records
`_defer.py` cuts and `_region.py` compiles). Debug mode's per-op checks stay in Python.
"""

from __future__ import annotations

from torchtpu import _C
from torchtpu.device._guard import guard as _guard
from torchtpu.exporter import IR_DTYPES


def install() -> None:
    """Hands the shim Rust's per-op path (at the first op, with the device code); threads that
    never set their mode take the default's (`_state.DEFAULT_MODE`)."""
    from torchtpu.device import _state

    _guard.set_native_default(_takes_native(_state.DEFAULT_MODE))
    _C.eager_native_defer(_state.DEFAULT_MODE == "defer_and_fuse", default=True)
    _guard.install_native(_C.eager_native_api())


def _takes_native(mode: str) -> bool:
    return mode in ("strict", "defer_and_fuse")


def set_mode(mode: str) -> None:
    """The calling thread's mode is `mode` (the shim's switch and Rust's are per thread)."""
    _guard.set_native(_takes_native(mode))
    _C.eager_native_defer(mode == "defer_and_fuse")


def set_checks(on: bool) -> None:
    _C.eager_native_checks(bool(on))


def clear() -> None:
    _C.eager_native_clear()


def wait() -> None:
    _C.eager_native_wait()


def ops() -> int:
    """Ops the native path ran (views included)."""
    return _guard.native_ops()


def stats() -> dict:
    return dict(_C.eager_native_stats())


def learn(info, program, leaves, n_floats: int, baked: bool, args, kwargs, out_shapes) -> bool:
    """Tells Rust how `program` ran `info.op` on `leaves` (the Python path's tensor leaves, before
    upload), if the op's pending native key waits for it and the run is one Rust repeats as it
    is: outputs that are the program's results in order (then its index checks' flag, which Rust
    hands to `_checks.add_native`), and results that become new tensors, whole in-place targets (or the base the program scattered into), or
    whole out= tensors of the results' shapes. `out_shapes` are the out= tensors' shapes before
    the run. Returns whether Rust took it."""
    if not program.plain:
        return False
    from torchtpu.device import _dispatch, _storage

    dtypes = []
    for leaf in leaves:
        if type(leaf) is _dispatch._CpuLeaf:
            if not leaf.scalar:
                return False
            dtypes.append(IR_DTYPES[leaf.t.dtype])
        else:
            dtypes.append(None)
    kind = info.kind
    if kind == "functional":
        results = [(dtype, dtype_code(dtype), list(shape)) for dtype, shape in program.out_types]
        how = "new"
    elif kind == "inplace":
        target = args[0]
        targets = target if isinstance(target, (list, tuple)) else (target,)
        bases = program.write_base or (None,) * len(targets)
        results = [("base", None) if base is not None else _write_of(t) for t, base in zip(targets, bases)]
        how = "inplace"
    elif kind == "out" and out_shapes is not None:
        names = [info.op._schema.arguments[i].name for i in info.written]
        results = []
        for n, (dtype, shape), before in zip(names, program.out_types, out_shapes):
            if tuple(before) != tuple(shape):
                return False  # resized: the Python path's
            results.append(_write_of(kwargs[n]))
        how = "out"
    else:
        return False
    if any(w is None for w in results if how != "new"):
        return False
    return _C.eager_learn(info.name, program, program.sources, dtypes, n_floats, baked, how, results)


def _write_of(t):
    """How a result is written into `t` (`_storage.write`): ("whole", None), ("strided", the
    scatter program `_storage.write` ran), or None (a case the Python path keeps)."""
    from torchtpu.device import _programs, _storage

    slot = _storage.slot_of(t)
    if t.dtype is not slot.dtype:
        return None
    if _storage.is_whole(t, slot):
        return ("whole", None)
    p = _programs._programs.get(_programs.strided_write_key(slot.shape, slot.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset()))
    if p is None or not p.plain or p.checks is not None or p.sources != [("leaf", 0), ("leaf", 1)]:
        return None
    return ("strided", p.program)


_codes: dict = {}


def dtype_code(dtype) -> int:
    """PyTorch's `c10::ScalarType` code of `dtype`."""
    code = _codes.get(dtype)
    if code is None:
        code = _codes[dtype] = _guard.scalar_type_code(dtype)
    return code
