"""The tpu device's memory limit and its out-of-memory errors (issue 49; docs/eager.md,
"Device memory"). A limit per device comes from `torch.tpu.set_per_process_memory_fraction`
(a fraction of the device's total, as CUDA's) or from `TORCHTPU_DEVICE_MEMORY` (e.g. `16GiB`),
which on the CPU plugin emulates an accelerator's memory: the total that `mem_get_info`
reports and the limit, so a laptop can check that a step fits a 16 GiB chip. Rust checks it
before every program run and upload (`python/src/memory.rs`) and calls `out_of_memory` for the
error: `torch.OutOfMemoryError`, naming what asked, what is in use and the largest live
buffers with the user's line that made each."""

from __future__ import annotations

import os
import re

import torch

from torchtpu import _C
from torchtpu.device._devices import check_index

MEMORY_ENV = "TORCHTPU_DEVICE_MEMORY"
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_fractions: dict = {}  # device -> the fraction set by set_per_process_memory_fraction


def parse_bytes(text: str) -> int:
    """`16GiB`, `512 MiB`, `1.5GB`, `1000000` as bytes; ValueError naming the setting otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m and m.group(2).upper()
    if not m or unit not in _UNITS:
        raise ValueError(f"torchtpu: {MEMORY_ENV}={text!r} is not a size (like 16GiB, 512MiB, 2GB or bytes)")
    return int(float(m.group(1)) * _UNITS[unit])


def emulated_total() -> int | None:
    """The device memory `TORCHTPU_DEVICE_MEMORY` emulates, in bytes, or None."""
    text = os.environ.get(MEMORY_ENV, "").strip()
    return parse_bytes(text) if text else None


def configure(devices: int) -> None:
    """At the device's start: each device's limit is the emulated memory, if set."""
    total = emulated_total()
    if total is not None:
        for index in range(devices):
            _C.set_device_memory_limit(index, total)


def set_fraction(fraction: float, index: int, total: int) -> None:
    """`set_per_process_memory_fraction`: the limit is `fraction` of `total` bytes."""
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _fractions[index] = float(fraction)
    _C.set_device_memory_limit(index, max(1, int(fraction * total)))


def get_fraction(index: int) -> float:
    return _fractions.get(index, 1.0)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


def out_of_memory(device: int, asked: int, what: str, live: int, limit: int) -> torch.OutOfMemoryError:
    """The error Rust raises where `asked` more bytes would pass tpu:`device`'s limit."""
    from torchtpu.device._frames import user_site

    lines = [
        f"tpu:{device} out of memory: tried to allocate {_size(asked)} for {what} at {user_site() or 'an unknown line'}; "
        f"{_size(live)} in use of the limit {_size(limit)} ({_size(max(0, limit - live))} free).",
    ]
    source = f"{MEMORY_ENV}={os.environ[MEMORY_ENV]}" if os.environ.get(MEMORY_ENV) else None
    if device in _fractions:
        source = f"set_per_process_memory_fraction({_fractions[device]})"
    if source:
        lines.append(f"The limit is {source}.")
    largest = _C.live_buffers(device, 5)
    if largest:
        lines.append("Largest live buffers:")
        for nbytes, shape, dtype, site in largest:
            made = f"made at {site}" if site else "(below 1 MiB: no line recorded)"
            lines.append(f"  {_size(nbytes)}: {dtype}[{', '.join(map(str, shape))}] {made}")
    return torch.OutOfMemoryError("\n".join(lines))


# ---------------------------------------------------------------- history and snapshots

_MAX_DEPTH = 64  # Python frames kept per stack


def stack() -> list:
    """The calling thread's Python stack, innermost first: (file, line, function) per frame,
    what memory_viz shows for an allocation (`python/src/memory.rs` asks, history on)."""
    import sys

    frame, out = sys._getframe(1), []
    while frame is not None and len(out) < _MAX_DEPTH:
        out.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return out


def record_memory_history(enabled="all", context="all", stacks="all", max_entries=100_000, device=None, **_) -> None:
    """`torch.tpu.memory._record_memory_history`, as CUDA's: `enabled` "all" or "state" turns the
    recording of each buffer's Python stack and of alloc / free / oom events on (None: off,
    forgetting them); `max_entries` bounds the events kept. The C++ stacks CUDA can add
    (`stacks="all"`) do not exist here: the Python frames are the whole story."""
    if enabled not in (None, "all", "state", True, False):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    _C.record_memory_history(enabled not in (None, False), int(min(max_entries, 1 << 62)))


def _frames(stack) -> list:
    return [{"filename": f, "line": line, "name": name} for f, line, name in stack or ()]


def _address(buffer_id: int) -> int:
    # Device buffers have no address PyTorch could use: each gets a synthetic, unique one.
    return buffer_id << 12


def snapshot(device=None) -> dict:
    """`torch.tpu.memory._snapshot()`: CUDA's format (`torch.cuda.memory._snapshot`'s docstring),
    which pytorch.org/memory_viz and `torch.cuda._memory_viz` read. Each live buffer is a segment
    of one active block (there is no caching allocator to split segments), with its Python stack
    where history was on when it was made; `device_traces` holds the recorded events per device
    (a free's frames are its allocation's)."""
    buffers, events = _C.memory_snapshot()
    count = max([d for _, d, _, _ in buffers] + [e[2] for e in events] + [0]) + 1
    segments = []
    for buffer_id, dev, nbytes, stack_ in buffers:
        if device is not None and dev != device:
            continue
        address = _address(buffer_id)
        block = {
            "address": address,
            "size": nbytes,
            "requested_size": nbytes,
            "state": "active_allocated",
            "frames": _frames(stack_),
        }
        segments.append(
            {
                "device": dev,
                "address": address,
                "total_size": nbytes,
                "stream": 0,
                "segment_type": "large" if nbytes > (1 << 20) else "small",
                "segment_pool_id": (0, 0),
                "allocated_size": nbytes,
                "active_size": nbytes,
                "requested_size": nbytes,
                "blocks": [block],
            }
        )
    traces: list = [[] for _ in range(count)]
    for action, buffer_id, dev, nbytes, stack_, time_us, free in events:
        entry = {
            "action": action,
            "addr": _address(buffer_id),
            "size": nbytes,
            "stream": 0,
            "frames": _frames(stack_),
            "time_us": time_us,
        }
        if action == "oom":
            del entry["addr"]
            entry["device_free"] = free  # under the limit, when it was refused
        traces[dev].append(entry)
    return {"segments": segments, "device_traces": traces}


def dump_snapshot(filename="dump_snapshot.pickle") -> None:
    """`torch.tpu.memory._dump_snapshot`: the snapshot pickled, for pytorch.org/memory_viz."""
    import pickle

    with open(filename, "wb") as f:
        pickle.dump(snapshot(), f)


# ---------------------------------------------------------------- statistics
#
# What `torch.tpu.memory_stats`, `mem_get_info` and the native allocator (`torch.accelerator`'s
# memory functions) answer.

_STAT_KEYS = ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes")
_COUNT_KEYS = ("allocation", "segment", "active")


def memory_stats(index: int) -> dict:
    live, peak, allocs, frees, bytes_in, bytes_out = _C.device_memory_counters(index)
    stats = {}
    for key in _STAT_KEYS:
        stats.update(
            {
                f"{key}.all.current": live,
                f"{key}.all.peak": peak,
                f"{key}.all.allocated": bytes_in,
                f"{key}.all.freed": bytes_out,
            }
        )
    for key in _COUNT_KEYS:
        # The peak count is not tracked (the peak bytes are): it reads as the current count.
        stats.update(
            {
                f"{key}.all.current": allocs - frees,
                f"{key}.all.peak": allocs - frees,
                f"{key}.all.allocated": allocs,
                f"{key}.all.freed": frees,
            }
        )
    stats.update(num_device_alloc=allocs, num_device_free=frees, num_alloc_retries=0, num_ooms=0)
    return dict(sorted(stats.items()))


def host_memory() -> tuple[int, int]:
    """`(available, total)` bytes of the host's memory (Linux's MemAvailable and MemTotal)."""
    fields = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                fields[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    total = fields.get("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return fields.get("MemAvailable", total), total


def memory_info(index: int) -> tuple[int, int]:
    """`(free, total)` bytes of tpu:`index`. The CPU plugin's devices keep their buffers in the
    host's memory, so theirs is the host's. Another plugin's would come from
    `PJRT_Device_MemoryStats`, which torchtpu does not bind yet: it says so."""
    check_index(index)
    emulated = emulated_total()
    if emulated is not None:  # TORCHTPU_DEVICE_MEMORY: an accelerator's memory, emulated
        return max(0, emulated - _C.device_memory(index)[0]), emulated
    platform = _C.platform_name()
    if platform == "cpu":
        return host_memory()
    raise NotImplementedError(
        f"torchtpu: the free and total memory of a {platform} device (torch.tpu.mem_get_info) needs "
        "PJRT_Device_MemoryStats, which torchtpu does not bind yet"
    )


def memory_hook(kind: str, index: int):
    """What the native allocator (`csrc/device_guard.cpp`, `TpuAllocator`) asks."""
    if kind == "counters":
        return _C.device_memory_counters(index)
    if kind == "info":
        return memory_info(index)
    if kind == "reset_peak":
        return _C.reset_device_peak(index)
    if kind == "reset_accumulated":
        return _C.reset_device_accumulated(index)
    raise ValueError(f"torchtpu: unknown memory query {kind!r}")
