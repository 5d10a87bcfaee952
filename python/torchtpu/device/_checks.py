"""The tpu device's pending index checks (`index_checks.py` makes the flags).

A program that reads indices returns, besides its results, a `bool[k]` flag per run: which of
its index checks failed. Debug mode reads it at once, so the op itself raises. Strict mode and
DeferAndFuse keep it here and read it at the next host read (`_storage.to_host`: `.item()`,
`.cpu()`, printing, ...) or `torch.tpu.synchronize()`, as CUDA's asynchronous device assert
fires at the next synchronisation: no host round trip per op. A flag still pending in an open
DeferAndFuse region is read at the first host read after its region ran (every read of a value
the bad op fed runs that region first); keeping it here keeps it a region output.
"""

from __future__ import annotations

import torch

from torchtpu import index_checks

# (flag: a DeviceBuffer or a DeferAndFuse Pending, sites, the user's file:line), oldest first.
_pending: list = []
# Past this many pending flags, the computed ones are read (a loop without host reads must
# not grow the list, nor the device memory its flags hold, without bound).
LIMIT = 256


def add(flag, sites, where: str | None) -> None:
    """A program's flag output. Debug mode raises now; otherwise at the next check."""
    from torchtpu.device import _modes

    if _modes.state.mode == "debug":
        index_checks.raise_if_set(_read(flag), sites, where)
        return
    _pending.append((flag, sites, where))
    if len(_pending) >= LIMIT:
        check()


def add_tensor(flag: torch.Tensor, sites) -> None:
    """The flag output of a compiled graph run on tpu tensors (its sites know their lines)."""
    from torchtpu.device import _storage

    add(_storage.slot_of(flag).buffer, sites, None)


def _computed(flag):
    """The flag's device buffer, or None while its DeferAndFuse region has not run."""
    from torchtpu.device._defer import Pending

    if type(flag) is not Pending:
        return flag
    if flag.buffer is None and flag.region.error is None and flag.region.records is None:
        from torchtpu.errors import InternalError

        raise InternalError("an index check's flag was not computed by its region", stage="execute")
    return flag.buffer


def _read(flag) -> torch.Tensor:
    return torch.from_dlpack(_computed(flag).to_host())


def check() -> None:
    """Reads every computed pending flag; raises `IndexOutOfRangeError` for the oldest one set
    (the others are dropped with it: one error per bad run, as a device assert)."""
    global _pending
    if not _pending:
        return
    waiting, keep = _pending, []
    _pending = keep
    for k, (flag, sites, where) in enumerate(waiting):
        buffer = _computed(flag)
        if buffer is None:
            if flag.region.error is None:
                keep.append((flag, sites, where))  # its region has not run yet
            continue  # a region that failed raises its own error at its values' reads
        e = index_checks.error(torch.from_dlpack(buffer.to_host()), sites, where)
        if e is not None:
            keep.clear()
            raise e


def clear() -> None:
    """Forgets the pending flags (switching the checks off)."""
    _pending.clear()
