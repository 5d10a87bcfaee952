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

from torchtpu.device import _state
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
        from torchtpu.device import _defer, _native

        s = _state.state
        s.mode = name
        if name != _state.DEFAULT_MODE or name == "defer_and_fuse":
            _state.keep_backward_on_this_thread(s)
        _defer.set_active(name == "defer_and_fuse")
        if name == _state.DEFAULT_MODE and name != "defer_and_fuse":
            _state.restore_backward_threads(s)
        _native.set_mode(name)

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
        from torchtpu.device import _programs

        self._check_indices = bool(on)
        _programs.use_checks(self._check_indices)


state = _State()


def debug_on() -> bool:
    return state.mode == "debug"


def wait() -> bool:
    return state.mode == "debug"


def fallback_is_error() -> bool:
    if state.fallback_error is not None:
        return state.fallback_error
    from torchtpu.policy import fallback_is_error as env_says

    return env_says()


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


def _has_non_finite(t: torch.Tensor) -> bool:
    if not (t.dtype.is_floating_point or t.dtype.is_complex) or t.numel() == 0:
        return False
    from torchtpu.device import _storage

    return not bool(torch.isfinite(_storage.to_host(t)).all())


def inputs_clean(args, kwargs) -> bool:
    """Whether no tpu tensor among the arguments holds a NaN or an infinity (checked before an
    op runs, since an in-place op overwrites its input)."""
    return not any(_has_non_finite(t) for t in tensors((args, kwargs)))


def after_op(info, args, kwargs, result, inputs_were_clean: bool) -> None:
    """Debug mode, after `info.op` ran: waits for its results; with `check_finite`, raises
    NonFiniteError if they hold a NaN or infinity and its inputs did not."""
    from torchtpu.device import _storage
    from torchtpu.device._dispatch import _type_text, user_frame
    from torchtpu.errors import NonFiniteError

    outs = tensors(result)
    for t in outs:
        slot = _storage.slot_of(t)
        if slot.buffer is not None:
            slot.buffer.wait()
    if not state.check_finite or not inputs_were_clean:
        return
    if not any(_has_non_finite(t) for t in outs):
        return
    types = [_type_text(t) for t in tensors((args, kwargs))]
    frame = user_frame()
    raise NonFiniteError(
        f"{info.name} on ({', '.join(types)}) produced NaN or Inf at {frame} (its inputs were finite)",
        info.name,
        types,
        frame,
    )
