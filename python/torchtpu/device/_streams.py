"""`torch.tpu.Stream`, `Event` and the stream context.

The native guard keeps them (csrc/device_guard.cpp). The engine runs a device's programs in
the order they are issued and PJRT orders each execution after the producers of its inputs,
so a stream orders nothing that is not ordered already: `wait_stream` / `wait_event` are
no-ops, and `synchronize` / `query` wait for the device's enqueued work (free on the CPU
plugin, which the engine runs synchronously). A timing event waits at `record`, so that
`elapsed_time` measures the work between two records."""

from __future__ import annotations

import torch

from torchtpu.device._devices import native_guard, stat_index


class Stream(torch.Stream):
    """`torch.tpu.Stream(device=None, priority=0)`: a stream of a tpu device (the current one
    by default)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # PyTorch's own (stream_id, device_index, device_type)
            return super().__new__(cls, priority=priority, **kwargs)
        index = stat_index(device)
        return super().__new__(cls, device=torch.device("tpu", index), priority=priority)


def Event(enable_timing=False, blocking=False, interprocess=False, device=None) -> torch.Event:
    """`torch.tpu.Event(enable_timing=False, ...)`: a `torch.Event` of a tpu device (the current
    one by default). A function, not a subclass: `torch.Event.elapsed_time` takes only
    `torch.Event` itself."""
    index = stat_index(device)
    return torch.Event(
        device=torch.device("tpu", index), enable_timing=enable_timing, blocking=blocking, interprocess=interprocess
    )


def _as_tpu_stream(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    """This thread's current stream on `device` (default: the current device)."""
    index = stat_index(device)
    return _as_tpu_stream(torch._C._accelerator_getStream(index))


def default_stream(device=None) -> Stream:
    index = stat_index(device)
    return Stream(stream_id=0, device_index=index, device_type=torch._C._autograd.DeviceType.PrivateUse1.value)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch._C._accelerator_setStream(stream)


class StreamContext:
    """`with torch.tpu.stream(s):` makes `s` the current stream (and its device the current
    device) inside the block, as `torch.cuda.stream`; None changes nothing."""

    def __init__(self, stream):
        self.stream = stream
        self.saved = None

    def __enter__(self):
        s = self.stream
        if s is None:
            return s
        g = native_guard()
        self.saved = (g.current_device(), current_stream(s.device_index))
        g.set_device(s.device_index)
        torch._C._accelerator_setStream(s)
        return s

    def __exit__(self, *exc):
        if self.saved is not None:
            device, stream = self.saved
            torch._C._accelerator_setStream(stream)
            native_guard().set_device(device)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)
