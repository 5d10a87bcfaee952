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

import sys

import torch

from torchtpu import _C, index_checks
from torchtpu.device import _buffers, _state
from torchtpu.device._frames import first_user_frame

# (flag: a DeviceBuffer or a DeferAndFuse Pending, sites, the user's file:line), oldest first.
_pending: list = []
# Past this many pending flags, the computed ones are read (a loop without host reads must
# not grow the list, nor the device memory its flags hold, without bound).
LIMIT = 256


def add(flag, sites, where: str | None) -> None:
    """A program's flag output. Debug mode raises now; otherwise at the next check."""
    if _state.state.mode == "debug":
        e = _error(_read(flag), sites, where)
        if e is not None:
            raise e
        return
    _pending.append((flag, sites, where))
    if len(_pending) >= LIMIT:
        check()


def add_native(flag, sites) -> None:
    """`add` for a program the native per-op path ran (or recorded): the user's line is found
    from the calling frames, as `Program.run` finds it."""
    # No Python frame above this one on an autograd device thread: no line to name then.
    add(flag, sites, first_user_frame(sys._getframe().f_back)[0])


class ArgumentCheck:
    """In place of index sites: a device-side check of an op's arguments (`flag`, 0-d bool: True
    when they are bad, e.g. a negative probability for `multinomial`, or `_assert_async`'s
    condition false). Set, it raises `DeviceAssertError(message)` (a RuntimeError, as CPU eager
    raises at once); here at the next host read, as CUDA's
    device assert does, so a sampling step costs no round trip."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message

    def error(self, flags: torch.Tensor, where: str | None):
        if not bool(flags.any()):
            return None
        from torchtpu.errors import DeviceAssertError

        return DeviceAssertError(f"{self.message}{f' (at {where})' if where else ''}", where=where, check=self.message)


def check_arguments(bad: torch.Tensor, message: str) -> None:
    """Raises `message` at the next host read if the 0-d bool tpu tensor `bad` is True."""
    add(_buffers.slot_of(bad).buffer, ArgumentCheck(message), first_user_frame(sys._getframe(1))[0])


def _error(flags: torch.Tensor, sites, where):
    if isinstance(sites, ArgumentCheck):
        return sites.error(flags, where)
    return index_checks.error(flags, sites, where)


def add_tensor(flag: torch.Tensor, sites) -> None:
    """The flag output of a compiled graph run on tpu tensors (its sites know their lines)."""
    add(_buffers.slot_of(flag).buffer, sites, None)


def _computed(flag):
    """The flag's device buffer, or None while its DeferAndFuse region has not run."""
    if type(flag) is not _C.Pending:
        return flag
    if flag.buffer is None and flag.region.error is None and flag.region.records is None:
        from torchtpu.errors import InternalError

        raise InternalError("an index check's flag was not computed by its region", stage="execute")
    return flag.buffer


def _read(flag) -> torch.Tensor:
    return torch.from_dlpack(_computed(flag).to_host())


def check() -> None:
    """Reads every computed pending flag; raises `IndexOutOfRangeError` (or an argument check's
    `RuntimeError`) for the oldest one set
    (the others are dropped with it: one error per bad run, as a device assert). Several 0-d
    flags are read as one: a program ORs them first (`_any_set`), since a read costs ~20 us
    (a program run ~8 us) on the CPU plugin."""
    global _pending
    if not _pending:
        return
    waiting, keep = _pending, []
    _pending = keep
    computed = []
    for flag, sites, where in waiting:
        buffer = _computed(flag)
        if buffer is not None:
            computed.append((buffer, sites, where))
        elif flag.region.error is None:
            keep.append((flag, sites, where))  # its region has not run yet
        # else: a region that failed raises its own error at its values' reads
    scalars = [b for b, _, _ in computed if not b.shape]
    if len(scalars) > 1 and not _any_set(scalars):
        computed = [c for c in computed if c[0].shape]  # none of the 0-d flags is set
    for buffer, sites, where in computed:
        e = _error(torch.from_dlpack(buffer.to_host()), sites, where)
        if e is not None:
            keep.clear()
            raise e


# The OR of N 0-d bool flags, per bucket N (a power of two, up to LIMIT: a handful of programs
# in all), and the False buffer that pads a bucket.
_OR_PROGRAMS: dict = {}
_FALSE = None


def _any_set(flags: list) -> bool:
    """Whether any of the 0-d bool device buffers `flags` holds True: one program per chunk of
    up to LIMIT, one read each."""
    global _FALSE
    if _FALSE is None:
        _FALSE = _C.device_put(torch.tensor(False), 0)
    by_device: dict = {}
    for f in flags:  # one OR per device: a program reads buffers of one device
        by_device.setdefault(f.device, []).append(f)
    for device, on in by_device.items():
        for start in range(0, len(on), LIMIT):
            chunk = on[start : start + LIMIT]
            bucket = 1 << (len(chunk) - 1).bit_length()
            program = _OR_PROGRAMS.get(bucket)
            if program is None:
                program = _OR_PROGRAMS[bucket] = _C.compile(_or_text(bucket), donate=False)
            pad = [_buffers.on_device(_FALSE, device)] * (bucket - len(chunk))
            (out,) = program.run_device(chunk + pad, True, device=device)
            if bool(torch.from_dlpack(out.to_host())):
                return True
    return False


def _or_text(n: int) -> str:
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchtpu.compiled.exporter import export

    aten = torch.ops.aten
    flags = [torch.empty((), dtype=torch.bool, device="meta") for _ in range(n)]
    with _state.build_lock:  # make_fx's tracer is not thread-safe
        gm = make_fx(lambda *fs: aten.any.default(aten.stack.default(list(fs))))(*flags)
    return export(gm, f"index_flags_{n}").text


def clear() -> None:
    """Forgets the pending flags (switching the checks off)."""
    _pending.clear()
