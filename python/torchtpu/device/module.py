"""`torch.tpu`: the device module PyTorch looks up for the `tpu` backend (seeding, device
count, synchronisation, memory statistics, streams), and the hooks and device guard PyTorch's
Python backend route asks for. The device facts it answers from are `_devices.py`'s, the
memory numbers `_memory.py`'s, the streams `_streams.py`'s; the patches to torch are
`_patches.py`."""

from __future__ import annotations

import types

import torch

from torchtpu import _C
from torchtpu.device import _memory, _streams
from torchtpu.device._devices import (
    accelerator_detected,
    check_index,
    exact_count,
    index_of,
    native_guard,
    stat_index,
    synchronize_all,
)
from torchtpu.device._memory import memory_info, memory_stats


class TpuModule:
    """What `torch.tpu` offers."""

    @staticmethod
    def is_available() -> bool:
        # `torch.accelerator.is_available()` delegates here (see `accelerator_detected`).
        if not accelerator_detected():
            return False
        try:
            return _C.device_count() > 0
        except Exception:
            return False

    @staticmethod
    def is_initialized() -> bool:
        return True

    # `torch.utils.checkpoint` saves and restores the device's RNG state only where this is
    # true; the generator exists from the first draw (or seed) on, so it always can.
    _initialized = True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        # Forked after the parent started the plugin: every device call here raises
        # `torchtpu.errors.DeviceForkError` (the runtime refuses the plugin, `fork.rs`).
        return _C.in_bad_fork()

    @staticmethod
    def device_count() -> int:
        """The PJRT plugin's addressable devices (`tpu:0..n-1`; the CPU plugin has 4, or
        TORCHTPU_CPU_DEVICES). Starts the plugin."""
        return exact_count()

    @staticmethod
    def current_device() -> int:
        """This thread's tpu device, as CUDA's: set by `set_device`, else the process default
        (tpu:0, or under torchrun LOCAL_RANK modulo the device count)."""
        return native_guard().current_device()

    @staticmethod
    def set_device(device) -> None:
        index = index_of(device)
        if index >= 0:  # a negative index means "the current one", as on CUDA
            check_index(index)
            native_guard().set_device(index)

    @staticmethod
    def get_rng_state(device="tpu") -> torch.Tensor:
        """The device generator's state as a CPU uint8 tensor (`set_rng_state` takes it back),
        as `torch.cuda.get_rng_state` returns: what checkpointing's recompute replays, so that
        dropout draws the same mask."""
        from torchtpu.device._random import default_generator

        return default_generator.get_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
        from torchtpu.device._random import default_generator

        default_generator.set_state(new_state)

    @staticmethod
    def get_rng_state_all() -> list:
        return [TpuModule.get_rng_state(i) for i in range(TpuModule.device_count())]

    @staticmethod
    def set_rng_state_all(new_states) -> None:
        for i, state in enumerate(new_states):
            TpuModule.set_rng_state(state, i)

    @staticmethod
    def synchronize(device=None) -> None:
        synchronize_all()

    @staticmethod
    def manual_seed(seed: int) -> None:
        from torchtpu.device._random import default_generator

        default_generator.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def seed() -> int:
        import random

        s = random.getrandbits(63)
        TpuModule.manual_seed(s)
        return s

    seed_all = seed

    @staticmethod
    def initial_seed() -> int:
        from torchtpu.device._random import default_generator

        default_generator.current()
        return default_generator.seed

    # Memory. torchtpu's device memory is its PJRT buffers, counted where they are made and
    # freed; there is no caching allocator in between (a buffer is freed when its last tensor
    # dies), so reserved equals allocated and `empty_cache` has nothing to release. The same
    # numbers answer `torch.accelerator`'s memory functions (the native allocator's statistics
    # are `memory_hook`'s).
    @staticmethod
    def memory_allocated(device=None) -> int:
        """Bytes of live device buffers on `device` (default: the current device)."""
        return _C.device_memory(stat_index(device))[0]

    @staticmethod
    def max_memory_allocated(device=None) -> int:
        return _C.device_memory(stat_index(device))[1]

    memory_reserved = memory_allocated
    max_memory_reserved = max_memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        _C.reset_device_peak(stat_index(device))

    @staticmethod
    def reset_accumulated_memory_stats(device=None) -> None:
        _C.reset_device_accumulated(stat_index(device))

    @staticmethod
    def memory_stats(device=None) -> dict:
        """CUDA's `memory_stats` keys that torchtpu counts (`allocated_bytes.all.current`,
        `reserved_bytes.all.peak`, `allocation.all.allocated`, `num_device_alloc`, ...)."""
        return memory_stats(stat_index(device))

    @staticmethod
    def mem_get_info(device=None) -> tuple[int, int]:
        """`(free, total)` bytes of `device`'s memory, as `torch.cuda.mem_get_info`."""
        return memory_info(stat_index(device))

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device=None) -> None:
        """As CUDA's: this process may hold at most `fraction` of the device's memory (its
        total as `mem_get_info` says, or TORCHTPU_DEVICE_MEMORY's); past it an allocation
        raises `torch.OutOfMemoryError` naming the largest live buffers (`_memory.py`)."""
        index = stat_index(device)
        _memory.set_fraction(fraction, index, memory_info(index)[1])

    @staticmethod
    def get_per_process_memory_fraction(device=None) -> float:
        return _memory.get_fraction(stat_index(device))

    @staticmethod
    def empty_cache() -> None:
        """Nothing to release: torchtpu holds no cache of freed device memory."""

    @staticmethod
    def get_device_properties(device=None) -> DeviceProperties:
        index = stat_index(device)
        return DeviceProperties(index, _C.platform_name(), memory_info(index)[1])

    @staticmethod
    def get_device_name(device=None) -> str:
        """The device's name, as `torch.cuda.get_device_name` (TorchTitan logs it)."""
        return TpuModule.get_device_properties(device).name

    @staticmethod
    def get_device_capability(device=None) -> tuple[int, int]:
        """CUDA's compute capability has no meaning here: (0, 0), as for a device without one
        (code comparing it against a CUDA generation takes the generic path)."""
        stat_index(device)
        return (0, 0)

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.bfloat16, torch.float16]

    @staticmethod
    def _lazy_init() -> None:
        pass


class DeviceProperties:
    """`torch.tpu.get_device_properties(i)`, with the fields of CUDA's that code reads to size
    things (`name`, `total_memory`, `is_integrated`)."""

    def __init__(self, index: int, platform: str, total_memory: int):
        self.index = index
        self.platform = platform
        self.name = f"torchtpu {platform} device {index} (PJRT)"
        self.type = "tpu"
        self.total_memory = total_memory
        # The CPU plugin's devices share the host's memory, as integrated GPUs do (accelerate
        # then does not count that memory twice).
        self.is_integrated = platform == "cpu"

    def __repr__(self) -> str:
        return f"DeviceProperties(name={self.name!r}, total_memory={self.total_memory // 2**20}MB)"


class device:
    """`with torch.tpu.device(i):` makes tpu:i this thread's current device and restores the
    previous one on exit, as `torch.cuda.device` (what checkpointing and `fork_rng` enter).
    None or a negative index changes nothing."""

    def __init__(self, device):
        self.idx = index_of(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            check_index(self.idx)
            g = native_guard()
            self.prev_idx = g.current_device()
            g.set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            native_guard().set_device(self.prev_idx)
        return False


TpuModule.device = device


class Hooks(torch._C._acc.PrivateUse1Hooks):
    # What `_setup_privateuseone_for_python_backend` registers where no hooks are: PyTorch uses
    # the native ones (csrc/device_guard.cpp `TpuHooks`, the same answers and storage resize).
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


_PRIVATE_USE1 = torch._C._autograd.DeviceType.PrivateUse1


class Guard(torch._C._acc.DeviceGuard):
    # PyTorch's C++ calls this for every device guard it makes (about 1200 times per Llama
    # training step): a constant, not three attribute lookups.
    def type_(self):
        return _PRIVATE_USE1


for _name, _value in {
    "Stream": _streams.Stream,
    "Event": staticmethod(_streams.Event),
    "current_stream": staticmethod(_streams.current_stream),
    "default_stream": staticmethod(_streams.default_stream),
    "set_stream": staticmethod(_streams.set_stream),
    "stream": staticmethod(_streams.stream),
    "StreamContext": _streams.StreamContext,
}.items():
    setattr(TpuModule, _name, _value)


def as_module() -> types.ModuleType:
    """`torch.tpu` as PyTorch registers it: a real module named `torch.tpu`, as `torch.cuda`
    is, whose attributes are `TpuModule`'s functions and classes (code that names the
    accelerator by `torch.get_device_module().__name__` reads "tpu")."""
    tpu = types.ModuleType("torch.tpu", TpuModule.__doc__)
    for name in dir(TpuModule):
        if not name.startswith("__"):
            setattr(tpu, name, getattr(TpuModule, name))
    tpu.memory = _memory_module()
    return tpu


_MEMORY_FUNCTIONS = (
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "memory_stats",
    "mem_get_info",
    "empty_cache",
    "set_per_process_memory_fraction",
    "get_per_process_memory_fraction",
)


def _memory_module() -> types.ModuleType:
    """`torch.tpu.memory`, as `torch.cuda.memory`: the memory functions, and the history and
    snapshots TorchTitan's memory profiler and pytorch.org/memory_viz use (`_memory.py`)."""
    import sys

    memory = types.ModuleType("torch.tpu.memory", _memory_module.__doc__)
    for name in _MEMORY_FUNCTIONS:
        setattr(memory, name, getattr(TpuModule, name))
    memory._record_memory_history = _memory.record_memory_history
    memory._snapshot = _memory.snapshot
    memory._dump_snapshot = _memory.dump_snapshot
    sys.modules.setdefault("torch.tpu.memory", memory)
    return memory
