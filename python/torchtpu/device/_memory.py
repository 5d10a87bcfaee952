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
