"""User errors raised inside the tpu device's kernels, shown as a CUDA op shows them: the
user's frames and the message, without torchtpu's dispatch frames between them.

A kernel entry point wraps its body with `user_facing`. An error about the user's arguments
(RuntimeError, ValueError, IndexError: mixed devices, shapes, indices, a meta kernel's check)
is re-raised with its traceback cut to that one entry frame. torchtpu's own failures
(InternalError, CompileError, PluginError, ExecutionError) and every other exception type
(AttributeError, KeyError, TypeError, ...: bugs) keep their whole traceback, and so does every
error under TORCHTPU_TRACEBACK=full.

`first_user_frame` finds the user's line for a message (a DeferAndFuse cut, an index check).
"""

from __future__ import annotations

import functools
import linecache
import os

_USER_ERRORS = (RuntimeError, ValueError, IndexError)


def _keep_frames(error: BaseException) -> bool:
    from torchtpu import errors

    if os.environ.get("TORCHTPU_TRACEBACK", "").strip().lower() == "full":
        return True
    return isinstance(error, (errors.InternalError, errors.CompileError, errors.PluginError, errors.ExecutionError))


def user_facing(kernel):
    @functools.wraps(kernel)
    def entry(*args, **kwargs):
        try:
            return kernel(*args, **kwargs)
        except _USER_ERRORS as error:
            if _keep_frames(error):
                raise
            raise error.with_traceback(None)  # noqa: B904 - the same error, re-raised; this tpu op's arguments; TORCHTPU_TRACEBACK=full shows torchtpu's frames

    return entry


def _outside_torch(filename: str) -> bool:
    return not (
        "/torch/" in filename
        or "/torchtpu/" in filename
        or filename.startswith("<frozen")
        or filename.endswith("/contextlib.py")
    )


def first_user_frame(frame):
    """(file:line, source text) of the innermost frame from `frame` out that is outside torch
    and torchtpu (a walk of frame objects: `traceback.extract_stack` costs ~100 us, a cut's
    budget)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if _outside_torch(name):
            return f"{name}:{frame.f_lineno}", linecache.getline(name, frame.f_lineno).strip()
        frame = frame.f_back
    return None, ""


def user_site() -> str | None:
    """The user's `file:line` on the calling thread's stack (what made a large device buffer,
    `python/src/memory.rs`), or None."""
    import sys

    return first_user_frame(sys._getframe(1))[0]
