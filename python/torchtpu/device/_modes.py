"""The eager device's modes (set through `torchtpu.eager.mode`, default from
TORCHTPU_EAGER_MODE):
- "strict" (the default): each op is dispatched as it comes; where the plugin runs
  asynchronously the call returns once the work is enqueued.
- "debug": synchronous; each op's result is waited for, so a failure is raised at the op that
  caused it, as `torchtpu.errors.DeviceOpError` naming the op, its input types and the user's
  frame. With `check_finite`, the first op whose result holds a NaN or an infinity that none of
  its inputs held raises `torchtpu.errors.NonFiniteError`.
- "defer_and_fuse": ops are recorded, not run; at a cut the region of recorded ops is compiled
  as one program (or found in the region cache) and run (`_defer.py`).
"""

from __future__ import annotations

import torch

from torchtpu import policy
from torchtpu.device import _defer, _programs, _state
from torchtpu.device._state import MODE_ENV, MODES  # noqa: F401  (re-exported)
from torchtpu.index_checks import check_indices_default


class _State:
    """The settings `torchtpu.eager` changes. The mode, `check_finite` and the fallback policy
    are the calling thread's (`_state.py`: a thread that never set them has the defaults);
    whether index checks are on is the process's (programs are kept per setting)."""

    __slots__ = ("_check_indices",)

    def __init__(self):
        # Index checks (`index_checks.py`): TORCHTPU_CHECK_INDICES's default, as `_programs`'s.
        self._check_indices = check_indices_default()

    @property
    def mode(self) -> str:
        return _state.state.mode

    @mode.setter
    def mode(self, name: str) -> None:
        # Entering DeferAndFuse starts recording on this thread; leaving it runs what was
        # recorded. A thread in another mode than the default runs its backward passes itself:
        # autograd's device thread has the default mode.
        s = _state.state
        s.mode = name  # Rust's copy, which the shim and the native path read
        if name != _state.DEFAULT_MODE or name == "defer_and_fuse":
            _state.keep_backward_on_this_thread(s)
        else:
            _state.restore_backward_threads(s)
        _defer.set_active(name == "defer_and_fuse")  # last: leaving the mode runs its region

    @property
    def check_finite(self) -> bool:
        return _state.state.check_finite

    @check_finite.setter
    def check_finite(self, on: bool) -> None:
        _state.state.check_finite = on

    @property
    def fallback_error(self):
        return _state.state.fallback_error

    @fallback_error.setter
    def fallback_error(self, on) -> None:
        _state.state.fallback_error = on

    @property
    def check_indices(self) -> bool:
        return self._check_indices

    @check_indices.setter
    def check_indices(self, on: bool) -> None:
        # Programs are kept per setting (`_programs.use_checks`); flags already pending are
        # still read: they were asked for.
        self._check_indices = bool(on)
        _programs.use_checks(self._check_indices)


state = _State()


def fallback_is_error() -> bool:
    if state.fallback_error is not None:
        return state.fallback_error
    return policy.fallback_is_error()


def tensors(x, tpu_only: bool = True, out: list | None = None) -> list:
    """The tensors in `x` (nested lists, tuples, dicts), only the tpu ones by default."""
    out = [] if out is None else out
    if isinstance(x, torch.Tensor):
        if not tpu_only or x.device.type == "tpu":
            out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            tensors(v, tpu_only, out)
    elif isinstance(x, dict):
        for v in x.values():
            tensors(v, tpu_only, out)
    return out
