"""Modes of the eager `tpu` device (docs/eager.md).

    torchtpu.eager.mode("debug")                 # a setter
    with torchtpu.eager.mode("debug", check_finite=True):
        loss = model(x.to("tpu")).sum()          # NaN/Inf named at the op that made it
    torchtpu.eager.fallback("error")             # raise instead of running an op on the CPU

Modes: "strict" (the default; TORCHTPU_EAGER_MODE sets it): each op is dispatched as it
comes, asynchronously where the plugin allows. "debug": synchronous, errors carry the op, its
input types and the user's frame (`torchtpu.errors.DeviceOpError`); `check_finite=True` raises
`torchtpu.errors.NonFiniteError` at the first op that produces a NaN or an infinity.
"""

from __future__ import annotations

from torchtpu.device import _modes
from torchtpu.device._modes import MODES


class _Restore:
    """What `mode(...)` and `fallback(...)` return: the setting is already applied; used as a
    context manager it is undone on exit."""

    def __init__(self, saved: dict):
        self._saved = saved

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for k, v in self._saved.items():
            setattr(_modes.state, k, v)
        return False


def mode(name: str | None = None, *, check_finite: bool | None = None) -> _Restore:
    """Sets the eager device's mode ("strict" or "debug") and, for debug, whether each op's
    result is checked for NaN/Inf. Returns a context manager that restores the previous
    setting on exit; `mode()` with no arguments changes nothing."""
    saved = {"mode": _modes.state.mode, "check_finite": _modes.state.check_finite}
    if name is not None:
        if name not in MODES:
            raise ValueError(f"torchtpu.eager.mode: expected one of {MODES}, got {name!r}")
        _modes.state.mode = name
    if check_finite is not None:
        _modes.state.check_finite = bool(check_finite)
    return _Restore(saved)


def current_mode() -> str:
    return _modes.state.mode


def fallback(policy: str) -> _Restore:
    """"cpu": an op without a tpu program runs on the CPU (recorded in
    `torchtpu.stats()["eager_cpu_fallbacks"]`, warned once); "error": it raises
    `torchtpu.UnsupportedError`. Default: "error" under TORCHTPU_FALLBACK=error, else "cpu"."""
    if policy not in ("cpu", "error"):
        raise ValueError(f"torchtpu.eager.fallback: expected 'cpu' or 'error', got {policy!r}")
    saved = {"fallback_error": _modes.state.fallback_error}
    _modes.state.fallback_error = policy == "error"
    return _Restore(saved)
