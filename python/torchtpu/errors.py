"""torchtpu's exception types. Each reaches the caller of a compiled function as itself:
Dynamo wraps what a backend raises in `BackendCompilerFailed`, except the `ShortenTraceback`
family, which it passes through unchanged (it only trims its own frames), so these derive
from it. All are RuntimeErrors; `OptionsError` is also a ValueError."""

from __future__ import annotations

try:
    from torch._dynamo.exc import ShortenTraceback as _PassedThrough
except ImportError:  # pragma: no cover - other torch versions
    _PassedThrough = RuntimeError


class TorchTPUError(_PassedThrough):
    def __init__(self, message: str):
        if _PassedThrough is RuntimeError:
            super().__init__(message)
        else:
            super().__init__(message, first_useful_frame=None)


class FallbackError(TorchTPUError):
    """Raised instead of falling back when options={"strict": True}: an op without a
    lowering (`ops` names it), a failed compile or a failed execution."""

    def __init__(self, message: str, ops: list[str] | None = None):
        super().__init__(message)
        self.ops = list(ops or [])


class OptionsError(TorchTPUError, ValueError):
    """An unknown option or a value of the wrong type in `options={...}`."""
