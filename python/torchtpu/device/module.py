"""`torch.tpu`: the device module PyTorch looks up for the `tpu` backend (seeding, device
count, synchronisation, memory statistics), and the hooks and device guard PyTorch's Python
backend route asks for."""

from __future__ import annotations

import os
import threading
import types

import torch

from torchtpu import _C
from torchtpu.device import _memory

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
    env = os.environ.get(DEVICE_ENV, "").strip().lower()
    if env:
        return env not in ("0", "false", "no", "off")
    if _detected is None:
        try:
            _detected = _C.platform_name() != "cpu"
        except Exception:  # no plugin: no accelerator
            _detected = False
    return _detected


def check_index(device) -> None:
    """Refuses a tpu device index that does not exist (`tpu:1` on a one-device process), as
    CUDA refuses an invalid device ordinal, instead of silently using tpu:0."""
    index = device.index if isinstance(device, torch.device) else device
    n = _exact_count()
    if index is not None and not 0 <= index < n:
        raise RuntimeError(
            f"torchtpu: invalid device tpu:{index}: this process has {n} tpu device{'s' if n != 1 else ''} "
            f"(tpu:0{f'..tpu:{n - 1}' if n > 1 else ''})"
        )


def _sync() -> None:
    # Executions are waited for by their outputs' readers; a device-wide barrier is a wait on
    # the live outputs of the last ops, which the engine runs in order on one stream. On a
    # synchronous plugin (the CPU plugin) there is nothing to wait for.
    from torchtpu.device import _programs

    _programs.wait_all()


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
        return _exact_count()

    @staticmethod
    def current_device() -> int:
        """This thread's tpu device, as CUDA's: set by `set_device`, else the process default
        (tpu:0, or under torchrun LOCAL_RANK modulo the device count)."""
        return _guard().current_device()

    @staticmethod
    def set_device(device) -> None:
        index = _index_of(device)
        if index >= 0:  # a negative index means "the current one", as on CUDA
            check_index(index)
            _guard().set_device(index)

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
        _sync()

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
        return _C.device_memory(_stat_index(device))[0]

    @staticmethod
    def max_memory_allocated(device=None) -> int:
        return _C.device_memory(_stat_index(device))[1]

    memory_reserved = memory_allocated
    max_memory_reserved = max_memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        _C.reset_device_peak(_stat_index(device))

    @staticmethod
    def reset_accumulated_memory_stats(device=None) -> None:
        _C.reset_device_accumulated(_stat_index(device))

    @staticmethod
    def memory_stats(device=None) -> dict:
        """CUDA's `memory_stats` keys that torchtpu counts (`allocated_bytes.all.current`,
        `reserved_bytes.all.peak`, `allocation.all.allocated`, `num_device_alloc`, ...)."""
        return memory_stats(_stat_index(device))

    @staticmethod
    def mem_get_info(device=None) -> tuple[int, int]:
        """`(free, total)` bytes of `device`'s memory, as `torch.cuda.mem_get_info`."""
        return memory_info(_stat_index(device))

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device=None) -> None:
        """As CUDA's: this process may hold at most `fraction` of the device's memory (its
        total as `mem_get_info` says, or TORCHTPU_DEVICE_MEMORY's); past it an allocation
        raises `torch.OutOfMemoryError` naming the largest live buffers (`_memory.py`)."""
        index = _stat_index(device)
        _memory.set_fraction(fraction, index, memory_info(index)[1])

    @staticmethod
    def get_per_process_memory_fraction(device=None) -> float:
        return _memory.get_fraction(_stat_index(device))

    @staticmethod
    def empty_cache() -> None:
        """Nothing to release: torchtpu holds no cache of freed device memory."""

    @staticmethod
    def get_device_properties(device=None) -> DeviceProperties:
        index = _stat_index(device)
        return DeviceProperties(index, _C.platform_name(), memory_info(index)[1])

    @staticmethod
    def get_device_name(device=None) -> str:
        """The device's name, as `torch.cuda.get_device_name` (TorchTitan logs it)."""
        return TpuModule.get_device_properties(device).name

    @staticmethod
    def get_device_capability(device=None) -> tuple[int, int]:
        """CUDA's compute capability has no meaning here: (0, 0), as for a device without one
        (code comparing it against a CUDA generation takes the generic path)."""
        _stat_index(device)
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
    emulated = _memory.emulated_total()
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


def _guard():
    from torchtpu.device._guard import guard

    return guard


_count: int | None = None


def _exact_count() -> int:
    """The plugin's addressable devices (starts the plugin once), told to the native guard."""
    global _count
    if _count is None:
        n = int(_C.device_count())
        _guard().set_device_count(max(n, 1))
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


def _index_of(device) -> int:
    """A device index from an int, a string or a torch.device (`tpu` alone: -1, the current)."""
    if isinstance(device, int):
        return device
    if device is None:
        return -1
    d = torch.device(device)
    if d.type != "tpu":
        raise ValueError(f"torchtpu: expected a tpu device, got {d}")
    return -1 if d.index is None else d.index


def _stat_index(device) -> int:
    index = _index_of(device)
    if index < 0:
        return _guard().current_device()
    check_index(index)
    return index


class device:
    """`with torch.tpu.device(i):` makes tpu:i this thread's current device and restores the
    previous one on exit, as `torch.cuda.device` (what checkpointing and `fork_rng` enter).
    None or a negative index changes nothing."""

    def __init__(self, device):
        self.idx = _index_of(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            check_index(self.idx)
            g = _guard()
            self.prev_idx = g.current_device()
            g.set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            _guard().set_device(self.prev_idx)
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


_original_synchronize = None


def patch_accelerator() -> None:
    """`torch.accelerator.synchronize()` calls a C++ device hook that a Python backend cannot
    provide; for the tpu device it is routed to `torch.tpu.synchronize`.

    C++ names PrivateUse1 the current accelerator as soon as it is registered. The bindings
    Python asks, `torch._C._accelerator_getAccelerator()` (behind `torch.accelerator.*` and
    `torch.get_device_module()`) and `torch._C._get_accelerator()` (torch.distributed's), answer
    as without torchtpu (no accelerator: None, and CPU) unless tpu is detected as the machine's
    accelerator (`accelerator_detected`), so that CPU programs (torch.distributed's default
    backend, transformers' device choice and continuous batching) are what they are without
    torchtpu."""
    global _original_synchronize
    if _original_synchronize is not None:
        return
    _original_synchronize = torch.accelerator.synchronize
    original_accelerator = torch._C._accelerator_getAccelerator

    def _accelerator_getAccelerator():
        acc = original_accelerator()
        if acc is not None and acc.type == "tpu" and not accelerator_detected():
            return None
        return acc

    _accelerator_getAccelerator.__doc__ = original_accelerator.__doc__
    torch._C._accelerator_getAccelerator = _accelerator_getAccelerator

    # `barrier(device_ids=[i])` builds its device from this one, as do FSDP's default mesh
    # and device.
    original_get = torch._C._get_accelerator

    def _get_accelerator(check: bool = False):
        acc = original_get(check)
        if acc.type == "tpu" and not accelerator_detected():
            return torch.device("cpu")
        return acc

    _get_accelerator.__doc__ = original_get.__doc__
    torch._C._get_accelerator = _get_accelerator

    def synchronize(device=None, /):
        # C++'s accelerator: tpu even where it is not detected as the machine's (an explicit
        # device="tpu" works either way, and so does waiting for it).
        acc = original_accelerator()
        if acc is not None and acc.type == "tpu":
            return _sync()
        return _original_synchronize(device)

    synchronize.__doc__ = _original_synchronize.__doc__
    torch.accelerator.synchronize = synchronize


_original_str = None


def patch_printing() -> None:
    """Printing a tensor runs slicing and masked selection on it; for xla and lazy tensors
    PyTorch prints a CPU copy instead, to avoid compiling those ops, and so does the tpu
    device (the device suffix added back)."""
    global _original_str
    if _original_str is not None:
        return
    import torch._tensor_str as tensor_str

    _original_str = tensor_str._str

    def _str(self, *, tensor_contents=None):
        if self.device.type != "tpu":
            return _original_str(self, tensor_contents=tensor_contents)
        from torchtpu.device import _defer

        with torch.no_grad(), _defer.cause("host_read", "printing a tensor"):
            text = _original_str(self.detach().to("cpu"), tensor_contents=tensor_contents)
        suffix = f"device='{self.device}'"
        at = text.find(", dtype=")
        text = text[:at] + ", " + suffix + text[at:] if at >= 0 else text[:-1] + ", " + suffix + ")"
        if self.grad_fn is not None:
            text = text[:-1] + f", grad_fn=<{type(self.grad_fn).__name__}>)"
        elif self.requires_grad:
            text = text[:-1] + ", requires_grad=True)"
        return text

    tensor_str._str = _str


_original_clone = None


def patch_storage() -> None:
    """Storages on tpu have no host-side bytes and PyTorch has no allocator for them (a Python
    backend cannot register one), so the storage methods that would allocate through it
    (and crash) are routed here:
    - `UntypedStorage.clone` (what `copy.deepcopy` of a tensor copies) makes a new storage
      holding the same device buffer (buffers are never changed in place, so sharing one is a
      copy);
    - `UntypedStorage.cpu` copies the buffer's bytes to the host;
    - `torch.UntypedStorage(n, device="tpu")` raises instead of crashing."""
    global _original_clone
    if _original_clone is not None:
        return
    _original_clone = torch.UntypedStorage.clone
    original_cpu = torch.UntypedStorage.cpu
    original_new = torch.UntypedStorage.__new__

    def cpu(self):
        if self.device.type != "tpu":
            return original_cpu(self)
        from torchtpu.device import _storage

        slot = _storage.slot_of_storage(self)
        if slot.buffer is None:
            return torch.UntypedStorage(slot.numel * slot.dtype.itemsize)
        host = torch.from_dlpack(slot.buffer.to_host()).reshape(-1)
        return host.view(torch.uint8).untyped_storage() if slot.dtype != torch.bool else host.untyped_storage()

    def new(cls, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "tpu":
            raise RuntimeError(
                "torchtpu: storages cannot be allocated on the tpu device directly; make a tensor "
                "(torch.empty(n, dtype=torch.uint8, device='tpu')) and use its storage"
            )
        return (
            original_new(cls, *args, device=device, **kwargs)
            if device is not None
            else original_new(cls, *args, **kwargs)
        )

    cpu.__doc__ = original_cpu.__doc__
    torch.UntypedStorage.cpu = cpu
    torch.UntypedStorage.__new__ = new

    def clone(self):
        if self.device.type != "tpu":
            return _original_clone(self)
        from torchtpu.device import _storage

        slot = _storage.slot_of_storage(self)
        return _storage.new_tensor(slot.shape, slot.dtype, slot.buffer).untyped_storage()

    clone.__doc__ = _original_clone.__doc__
    torch.UntypedStorage.clone = clone


_conversion = None


def patch_module_conversion() -> None:
    """`Module.to("tpu")` (and back) keeps each Parameter object, as on CUDA: tied weights stay
    tied and an optimizer made before the move trains the moved weights.

    `Module._apply` keeps a Parameter (`param.data = new`) only where PyTorch's C++ finds the
    two tensor types compatible, which it never does for a PrivateUse1 backend; it then makes
    a new Parameter, unless it swaps (`torch.utils.swap_tensors`), which it does for tensor
    subclasses or under `torch.__future__.set_swap_module_params_on_conversion(True)`. Its
    per-parameter test is widened to every conversion from or to a tpu tensor: to tpu, the
    converted tensor says so; from tpu, the module's own parameters (one flag per thread,
    set while such a module converts)."""
    global _conversion
    if _conversion is not None:
        return
    import weakref

    import torch.nn.modules.module as module_py

    state = _conversion = threading.local()
    is_subclass = module_py.is_traceable_wrapper_subclass
    original_apply = torch.nn.Module._apply

    def swaps(t) -> bool:
        if is_subclass(t):
            return True
        if not isinstance(t, torch.Tensor) or not getattr(state, "swappable", True):
            return False
        return t.device.type == "tpu" or getattr(state, "from_tpu", False)

    def _apply(self, fn, recurse=True):
        # The module's own parameters decide for its own loop; `original_apply` converts the
        # children first (each through this wrapper), so the state is restored after them.
        own = [p for p in self._parameters.values() if p is not None]
        saved = getattr(state, "from_tpu", False), getattr(state, "swappable", True)
        state.from_tpu = any(p.device.type == "tpu" for p in own)
        # swap_tensors refuses tensors with weak references: those keep PyTorch's default
        # (new Parameter objects) rather than failing the whole conversion.
        state.swappable = not any(weakref.getweakrefcount(p) for p in own)
        try:
            return original_apply(self, fn, recurse)
        finally:
            state.from_tpu, state.swappable = saved

    _apply.__doc__ = original_apply.__doc__
    module_py.is_traceable_wrapper_subclass = swaps
    torch.nn.Module._apply = _apply


_original_data_ptr = None


def patch_default_compile() -> None:
    """`torch.compile(model)` with its default backend on tpu tensors compiles with torchtpu.

    Inductor has no code generator for this device (its device named tpu is a Pallas
    generator that needs JAX), so a CUDA user's unchanged `torch.compile(model)` would fail
    inside it. A graph with any tpu input (the model's parameters are inputs) goes to the
    torchtpu backend instead, with one warning, and so does a graph that makes tpu tensors;
    graphs on other devices still go to Inductor.
    Inductor's `mode=` has no torchtpu meaning and is dropped (docs/eager.md)."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    call = getattr(wrapper, "__call__", None)  # noqa: B004 - the class's method itself, to patch
    if call is None or getattr(call, "_torchtpu", False):
        return

    def __call__(self, model_, inputs_, **kwargs):
        if _graph_touches_tpu(model_, inputs_):
            from torchtpu._log import warn_once
            from torchtpu.backend import torchtpu_backend

            warn_once(
                "inductor-on-tpu",
                "torch.compile: Inductor cannot generate code for tpu tensors; this graph is compiled "
                'with torchtpu (write backend="torchtpu" to say so and to pass options=)',
            )
            return torchtpu_backend(model_, inputs_)
        return call(self, model_, inputs_, **kwargs)

    __call__._torchtpu = True
    wrapper.__call__ = __call__


def _on_tpu(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_on_tpu(v) for v in value)
    return isinstance(value, torch.Tensor) and value.device.type == "tpu"


def _graph_touches_tpu(gm, inputs) -> bool:
    """A tpu input, or a tensor the graph makes on tpu (`create_block_mask(..., device="tpu",
    _compile=True)` has only integer inputs and builds its masks with `arange(device="tpu")`)."""
    if _on_tpu(list(inputs)):
        return True
    graph = getattr(gm, "graph", None)
    return graph is not None and any(_on_tpu(n.meta.get("example_value")) for n in graph.nodes)


def patch_data_ptr() -> None:
    """`data_ptr()` of tpu tensors and storages: a storage has no host pointer, so PyTorch
    gives 0 for all of them, and transformers, accelerate and safetensors, which tell tied
    or shared weights by `(device, storage data_ptr, nbytes)`, take every tpu weight for one
    shared tensor (`save_pretrained` refuses). Each tpu storage has an address of its own
    instead, as a CUDA storage has (given in C++, `create_empty_tensor`): unique while it
    lives, ranges that never overlap, a view at its offset (an empty view too). It is not
    dereferenceable (neither is a CUDA pointer on the host)."""
    global _original_data_ptr
    if _original_data_ptr is not None:
        return

    _original_data_ptr = original_tensor = torch.Tensor.data_ptr
    original_storage = torch.UntypedStorage.data_ptr  # a tpu storage's address, from C++
    original_nbytes = torch.UntypedStorage.nbytes

    def nbytes(self):
        # The slot's: C++ has the same count (set at creation and by `resize_`), except where a
        # Meta `set_` grew it past the device data.
        if self.device.type != "tpu":
            return original_nbytes(self)
        from torchtpu.device import _storage  # not at registration: `import torch` stays light

        slot = _storage.storage_slot(self)
        return slot.numel * slot.dtype.itemsize if slot is not None else original_nbytes(self)

    def tensor_data_ptr(self):
        if self.is_cpu or self.device.type != "tpu":
            return original_tensor(self)
        # PyTorch's own gives 0 for an empty tensor; a view keeps its place in the storage.
        return original_storage(self.untyped_storage()) + self.storage_offset() * self.element_size()

    tensor_data_ptr.__doc__ = original_tensor.__doc__
    nbytes.__doc__ = original_nbytes.__doc__
    torch.UntypedStorage.nbytes = nbytes
    torch.Tensor.data_ptr = tensor_data_ptr


# ---------------------------------------------------------------- streams and events
#
# The native guard keeps them (csrc/device_guard.cpp). The engine runs a device's programs in
# the order they are issued and PJRT orders each execution after the producers of its inputs,
# so a stream orders nothing that is not ordered already: `wait_stream` / `wait_event` are
# no-ops, and `synchronize` / `query` wait for the device's enqueued work (free on the CPU
# plugin, which the engine runs synchronously). A timing event waits at `record`, so that
# `elapsed_time` measures the work between two records.


class Stream(torch.Stream):
    """`torch.tpu.Stream(device=None, priority=0)`: a stream of a tpu device (the current one
    by default)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # PyTorch's own (stream_id, device_index, device_type)
            return super().__new__(cls, priority=priority, **kwargs)
        index = _index_of(device)
        index = _guard().current_device() if index < 0 else index
        check_index(index)
        return super().__new__(cls, device=torch.device("tpu", index), priority=priority)


def Event(enable_timing=False, blocking=False, interprocess=False, device=None) -> torch.Event:
    """`torch.tpu.Event(enable_timing=False, ...)`: a `torch.Event` of a tpu device (the current
    one by default). A function, not a subclass: `torch.Event.elapsed_time` takes only
    `torch.Event` itself."""
    index = _index_of(device)
    index = _guard().current_device() if index < 0 else index
    check_index(index)
    return torch.Event(
        device=torch.device("tpu", index), enable_timing=enable_timing, blocking=blocking, interprocess=interprocess
    )


def _as_tpu_stream(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    """This thread's current stream on `device` (default: the current device)."""
    index = _index_of(device)
    index = _guard().current_device() if index < 0 else index
    check_index(index)
    return _as_tpu_stream(torch._C._accelerator_getStream(index))


def default_stream(device=None) -> Stream:
    index = _index_of(device)
    index = _guard().current_device() if index < 0 else index
    check_index(index)
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
        g = _guard()
        self.saved = (g.current_device(), current_stream(s.device_index))
        g.set_device(s.device_index)
        torch._C._accelerator_setStream(s)
        return s

    def __exit__(self, *exc):
        if self.saved is not None:
            device, stream = self.saved
            torch._C._accelerator_setStream(stream)
            _guard().set_device(device)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)


for _name, _value in {
    "Stream": Stream,
    "Event": staticmethod(Event),
    "current_stream": staticmethod(current_stream),
    "default_stream": staticmethod(default_stream),
    "set_stream": staticmethod(set_stream),
    "stream": staticmethod(stream),
    "StreamContext": StreamContext,
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
