"""The Python side of the native per-op path (docs/eager.md, "How an op runs").

The dispatcher shim (`csrc/dispatch.cpp`) runs every op that reaches the tpu device: a view
through PyTorch's Meta kernel, any other op through the Rust per-op path (`python/src/eager`),
which keys it, finds how it ran before and launches its program with no Python. What Rust has
not seen yet (a miss) and what it does not take run the Python path (`_dispatch.run`); after a
miss `_dispatch` tells Rust how the Python path ran the op (`_dispatch._teach_native`), so the
next call with that key is native.

Strict and DeferAndFuse modes take the native path for ops that compute (views in every mode;
the mode is Rust's, `torchtpu_eager::mode`, which the shim asks per op):
in DeferAndFuse a cached op is recorded natively into the open region (`_C.Region`, the records
`_defer.py` cuts and `_region.py` compiles). Debug mode's per-op checks stay in Python.
"""

from __future__ import annotations

from torchtpu import _C
from torchtpu.device import _state  # noqa: F401  (gives Rust the default mode)
from torchtpu.device._guard import guard as _guard


def install() -> None:
    """Hands the shim Rust's per-op path (at the first op, with the device code). Whether a
    thread's ops take it is the thread's mode, which both read from Rust; `_state`, imported
    above, gave Rust the default mode at its import, before any op."""
    _guard.install_native(_C.eager_native_api())


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


_codes: dict = {}


def dtype_code(dtype) -> int:
    """PyTorch's `c10::ScalarType` code of `dtype`."""
    code = _codes.get(dtype)
    if code is None:
        code = _codes[dtype] = _guard.scalar_type_code(dtype)
    return code
