"""The `torchtpu` logger and once-per-key warnings, shared by the backend, the executor and
the fallback paths (kept apart from them so that none imports another for it)."""

from __future__ import annotations

import logging
import warnings

log = logging.getLogger("torchtpu")
_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """A RuntimeWarning the first time `key` is seen in this process; a log line every time."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning("%s", message)
