"""Which tpu devices exist: the count (predicted without starting the plugin where it can be),
index checks, the current device's index, whether tpu is the machine's accelerator, and the
device-wide wait. What `torch.tpu` (`module.py`), the memory statistics and the streams ask."""

from __future__ import annotations

import os

import torch

from torchtpu import _C

# Opts in (1) or out (0) of the tpu device counting as the machine's accelerator; unset, it
# counts only where the PJRT plugin is an accelerator's (not the CPU plugin).
DEVICE_ENV = "TORCHTPU_DEVICE"
_detected: bool | None = None


def accelerator_detected() -> bool:
    """Whether the tpu device is the machine's accelerator: what `torch.tpu.is_available()`,
    `torch.accelerator.is_available()` and `current_accelerator()` (so torch.distributed's
    default backend, transformers and accelerate) see. On the CPU plugin it is not, unless
    TORCHTPU_DEVICE=1: a CPU program must not change because torchtpu is installed. An
    explicit `device="tpu"` works either way."""
    global _detected
    opted = _opted()
    if opted is not None:
        return opted
    if _detected is None:
        try:
            _detected = _C.platform_name() != "cpu"
        except Exception:  # no plugin: no accelerator
            _detected = False
    return _detected


def accelerator_expected() -> bool:
    """`accelerator_detected` without starting the plugin (`import torch` stays cheap): true
    where TORCHTPU_DEVICE opts in, or where the plugin is not the CPU plugin (an accelerator's,
    or one not found yet). What decides whether the patches a tpu program needs are applied
    when torch starts (`_patches.apply_for_tpu_use`) rather than at the first tpu tensor."""
    opted = _opted()
    return opted if opted is not None else predicted_count() is None


def _opted() -> bool | None:
    """TORCHTPU_DEVICE's answer, read at each call (a program may set it after torch started);
    None where it is unset."""
    env = os.environ.get(DEVICE_ENV, "").strip().lower()
    return env not in ("0", "false", "no", "off") if env else None


def check_index(device) -> None:
    """Refuses a tpu device index that does not exist (`tpu:1` on a one-device process), as
    CUDA refuses an invalid device ordinal, instead of silently using tpu:0."""
    index = device.index if isinstance(device, torch.device) else device
    n = exact_count()
    if index is not None and not 0 <= index < n:
        raise RuntimeError(
            f"torchtpu: invalid device tpu:{index}: this process has {n} tpu device{'s' if n != 1 else ''} "
            f"(tpu:0{f'..tpu:{n - 1}' if n > 1 else ''})"
        )


def synchronize_all() -> None:
    # Executions are waited for by their outputs' readers; a device-wide barrier is a wait on
    # the live outputs of the last ops, which the engine runs in order on one stream. On a
    # synchronous plugin (the CPU plugin) there is nothing to wait for.
    from torchtpu.device import _programs

    _programs.wait_all()


def native_guard():
    from torchtpu.device._guard import guard

    return guard


_count: int | None = None


def exact_count() -> int:
    """The plugin's addressable devices (starts the plugin once), told to the native guard."""
    global _count
    if _count is None:
        n = int(_C.device_count())
        native_guard().set_device_count(max(n, 1))
        _count = n
    return _count


# The CPU plugin's own default (`cpu_device_count`), what TORCHTPU_CPU_DEVICES overrides.
CPU_PLUGIN_DEVICES = 4


def predicted_count() -> int | None:
    """The device count without starting the plugin, where it is known in advance: the CPU
    plugin's (TORCHTPU_CPU_DEVICES, else its default of 4, parsed as the engine parses it).
    None for another plugin (an accelerator's count is asked of it)."""
    try:
        path = _C.plugin_path()
    except Exception:
        return None
    if "cpu" not in os.path.basename(path).lower():
        return None
    try:
        n = int(os.environ.get("TORCHTPU_CPU_DEVICES", "").strip())
    except ValueError:
        n = 0
    return n if n > 0 else CPU_PLUGIN_DEVICES


def index_of(device) -> int:
    """A device index from an int, a string or a torch.device (`tpu` alone: -1, the current)."""
    if isinstance(device, int):
        return device
    if device is None:
        return -1
    d = torch.device(device)
    if d.type != "tpu":
        raise ValueError(f"torchtpu: expected a tpu device, got {d}")
    return -1 if d.index is None else d.index


def stat_index(device) -> int:
    index = index_of(device)
    if index < 0:
        return native_guard().current_device()
    check_index(index)
    return index
