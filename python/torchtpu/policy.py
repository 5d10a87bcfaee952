"""What a failure means: the one place that decides between running eagerly and raising.

- An op (or a form of one) without a lowering is unsupported: by design, that part of the
  graph runs eagerly. Recorded with kind "unsupported".
- The PJRT plugin refusing to compile, failing to start or failing to run a program falls
  back by policy, with a warning. Kinds "compile", "plugin", "execution".
- Anything else is a bug in torchtpu (`InternalError`, or any other exception escaping the
  exporter or the compiler): never silent. The graph runs eagerly with a warning that says
  so and names a reproduction (`repro.py`). Kind "internal".

Under options={"strict": True}, or with TORCHTPU_FALLBACK=error in the environment (torchtpu's
own test suite sets it), every one of these raises instead: the typed error itself
(`UnsupportedError`, `CompileError`, ..., `InternalError`).
"""

from __future__ import annotations

import os

from torchtpu import _stats
from torchtpu._log import log, warn_once
from torchtpu.errors import RAISED_AS_IS, FallbackError, InternalError, TorchTPUError

FALLBACK_ENV = "TORCHTPU_FALLBACK"


def fallback_is_error() -> bool:
    """TORCHTPU_FALLBACK=error: the default for `strict` when options= does not set it."""
    return os.environ.get(FALLBACK_ENV, "eager").strip().lower() == "error"


def inject_fault(stage: str) -> None:
    """Raises at `stage` ("trace", "export": the Python stages, beside the engine's "lower",
    "compile" and "execute") when TORCHTPU_INJECT_FAULT names it: a RuntimeError, the type
    PyTorch's own tracing raises, so a test sees that no failure of that stage escapes the
    policy."""
    from torchtpu import _C

    if _C.fault_injected(stage):
        raise RuntimeError(f"fault injected at stage '{stage}' (TORCHTPU_INJECT_FAULT)")


def as_internal(error: BaseException, stage: str) -> TorchTPUError:
    """`error` if it is a fallback or an internal error, else an InternalError wrapping it: a
    Python exception escaping the exporter or the compiler, or a user-input error type
    (`IRError`, `InputError`) raised for what torchtpu itself produced, is a torchtpu bug."""
    if isinstance(error, (FallbackError, InternalError)):
        return error
    wrapped = InternalError(f"{type(error).__name__} in torchtpu ({stage}): {error}", stage=stage)
    wrapped.__cause__ = error
    return wrapped


def on_failure(
    error: TorchTPUError,
    where: str,
    strict: bool,
    *,
    ir_text: str | None = None,
    passes: str = "",
    donate: bool | None = None,
    fx_code: str | None = None,
) -> None:
    """Returns when `where` (a graph or partition name) is to run eagerly, after recording and
    warning; raises `error` under strict. `ops` of a FallbackError name what ran eagerly."""
    if isinstance(error, RAISED_AS_IS):
        raise error  # the user's to fix (process setup, dtypes, options), not eager's to hide
    error = as_internal(error, getattr(error, "stage", None) or "compile")
    if strict:
        raise error
    kind = error.kind
    ops = list(getattr(error, "ops", []) or [])
    if isinstance(error, InternalError):
        from torchtpu import repro

        try:
            path = repro.write(where, ir_text, passes, donate, error, error.stage, fx_code)
        except OSError as e:  # the reproduction is a courtesy: never turn a bug into a crash
            path = f"<not written: {e}>"
        warn_once(
            f"internal:{where}",
            f"torchtpu bug: {where} failed inside torchtpu and runs eagerly instead ({error}). "
            f"Please report it with the reproduction {path} (replay: python {path}).",
        )
        _stats.record_fallback("internal", where, str(error), ops or ["<internal error>"], repro=path)
        return
    if kind != "unsupported":
        warn_once(f"{kind}:{where}", f"torchtpu: running {where} eagerly: {error}")
    else:
        log.info("running %s eagerly: %s", where, error)
    _stats.record_fallback(kind, where, str(error), ops or [f"<{kind} failure>"])
