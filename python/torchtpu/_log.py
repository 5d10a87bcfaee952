"""The `torchtpu` logger and once-per-key warnings, shared by the backend, the executor and
the fallback paths (kept apart from them so that none imports another for it)."""

from __future__ import annotations

import logging
import os
import sys
import warnings

log = logging.getLogger("torchtpu")
_warned: set[str] = set()

# Frames in these packages are not the user's line: a warning names the first frame outside
# them, as a CUDA op's warning names the line that called it.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_GENERATED = ("<frozen ", "<eval_with_key")  # importlib, and fx's generated code


def _internal_dirs() -> tuple[str, ...]:
    torch = sys.modules.get("torch")
    extra = (os.path.dirname(torch.__file__) + os.sep,) if torch is not None and torch.__file__ else ()
    return (_PACKAGE, *extra, *_GENERATED)


def user_stacklevel() -> int:
    """The `stacklevel` for a `warnings.warn` made by this function's caller that names the
    first frame, from the caller's caller up, outside torchtpu and torch."""
    internal = _internal_dirs()
    level = 2
    frame = sys._getframe(level)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    return level


def warn_once(key: str, message: str) -> None:
    """A RuntimeWarning the first time `key` is seen in this process, attributed to the user's
    line; later occurrences go to the `torchtpu` logger at INFO, which prints nothing unless
    the user configured logging (Python's last-resort handler prints only WARNING and above)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=user_stacklevel())
        return
    log.info("%s", message)
