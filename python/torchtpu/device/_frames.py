"""User errors raised inside the tpu device's kernels, shown as a CUDA op shows them: the
user's frames and the message, without torchtpu's dispatch frames between them.

A kernel entry point wraps its body with `user_facing`. An error about the user's arguments
(RuntimeError, ValueError, IndexError: mixed devices, shapes, indices, a meta kernel's check)
is re-raised with its traceback cut to that one entry frame. torchtpu's own failures
(InternalError, CompileError, PluginError, ExecutionError) and every other exception type
(AttributeError, KeyError, TypeError, ...: bugs) keep their whole traceback, and so does every
error under TORCHTPU_TRACEBACK=full.
"""

from __future__ import annotations

import functools
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
            raise error.with_traceback(None)  # this tpu op's arguments; TORCHTPU_TRACEBACK=full shows torchtpu's frames

    return entry
