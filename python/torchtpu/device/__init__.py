"""The eager `tpu` device: PyTorch tensors whose data lives in PJRT device memory and whose
ops run as cached one-op programs through torchtpu's compiler (docs/eager.md).

`register()` makes `torch.device("tpu")` work: it renames PyTorch's PrivateUse1 backend to
`tpu`, registers `torch.tpu` (this package's `module`), the device hooks and guard, and the
kernels (`_kernels.py`). The `torch.backends` entry point calls it when torch starts, so a
process that never imports torchtpu can still write `torch.randn(4, 4, device="tpu")`;
TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off.

Layout: `_storage` (device data behind storages, views and writes), `_programs` (one-op
programs and their cache), `_dispatch` (how an op runs: view, program, in-place, CPU
fallback), `_kernels` (the registered kernels), `_random` (the device generator), `_modes`
(strict, debug, defer_and_fuse), `_defer` (DeferAndFuse's recording and cuts), `_region`
(a cut region's program and its cache), `_trace` (explain records, trace files), `module`
(`torch.tpu`, from `_devices`, `_memory` and `_streams`), `_patches` (the patches to torch,
none at `import torch` but the accelerator's answer).
"""

from __future__ import annotations

# Defined before `import torch`: when `import torchtpu.device` is a process's first import, torch
# starts inside the next line and calls this entry point on the half-built module. It then only
# notes the request, and the module registers the device once it is complete (end of file).
_autoload_pending = False


def _autoload() -> None:
    """The `torch.backends` entry point (run by `import torch`)."""
    global _autoload_pending
    if "register" not in globals():
        _autoload_pending = True
        return
    register()


import atexit  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from torchtpu.device import _kernel_table  # noqa: E402
from torchtpu.device._frames import user_facing  # noqa: E402

NAME = "tpu"
_registered = False


def register() -> None:
    """Registers the `tpu` device with PyTorch (idempotent). Only one PrivateUse1 backend can
    exist per process: if another has taken it, this raises."""
    global _registered
    if _registered:
        return
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", NAME):
        raise RuntimeError(
            f"torchtpu: PyTorch's PrivateUse1 backend is already registered as {current!r}; "
            "only one such backend can exist per process, so the tpu device is not available"
        )
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from torchtpu.device import module

    # What C++ calls the accelerator before the rename makes it tpu (`_patches.patch_accelerator`).
    without_tpu = torch._C._accelerator_getAccelerator() if current != NAME else None
    if current != NAME:
        _register_guard()
        # Its Python guard and hooks are refused now (`register_python_privateuseone_device_guard`
        # and `register_python_privateuseone_hook` return False where native ones exist):
        # PyTorch uses the native ones.
        _setup_privateuseone_for_python_backend(NAME, module.as_module(), module.Hooks(), module.Guard())
        _register_allocator()
        _register_autocast()
        _register_profiler()
    _register_kernels()
    from torchtpu.device import _devices, _patches, _serialization

    # The one patch `import torch` applies: C++ made the renamed backend the accelerator.
    _patches.patch_accelerator(without_tpu)
    _serialization.register(_load)  # torch.load of tpu storages (a fresh process loads a tpu checkpoint)
    _registered = True
    # torch.distributed's backend for tpu tensors (`tpu_dist`), so that init_process_group()
    # finds it when tpu is the accelerator.
    from torchtpu import distributed

    distributed.register()
    # The other patches wait for the first tpu tensor (`_load`), tpu_dist group or answer that
    # tpu is the accelerator, unless tpu is expected to be the machine's accelerator: a program
    # that never touches tpu keeps torch's own functions.
    if _devices.accelerator_expected():
        _patches.apply_for_tpu_use()


def _distributed_entry_point() -> None:
    """The `torch.distributed.backends` entry point of `tpu_dist` (pyproject.toml):
    `init_process_group("tpu_dist")` (or "cpu:gloo,tpu:tpu_dist") in a process that has not
    registered the device yet (TORCH_DEVICE_BACKEND_AUTOLOAD=0) registers it, and with it the
    backend. Here, not in `torchtpu.distributed`, which imports nothing of the device package's
    root: the device registers the backend, not the other way round. Asking for tpu_dist is a
    use of tpu: the patches a tpu program needs are applied."""
    from torchtpu.device import _patches

    register()
    _patches.apply_for_tpu_use()


def _register_guard() -> None:
    """Registers the native PrivateUse1 device guard (`_guard.py`) before PyTorch's Python one
    could be: the current device per thread, the real device count (autograd sizes its
    per-device queues from it at the first backward of the process), streams and events."""
    import os

    from torchtpu.device import _devices
    from torchtpu.device._guard import guard

    if not guard.register():
        raise RuntimeError(
            "torchtpu: another PrivateUse1 device guard is registered; the tpu device cannot use its own"
        )
    # The native hooks: PyTorch's Python hooks cannot resize a storage (`UntypedStorage.resize_`
    # calls `resizePrivateUse1Bytes`), which FSDP2 needs; the resize is `_storage.resize_storage`.
    if not guard.register_hooks():
        raise RuntimeError("torchtpu: other PrivateUse1 hooks are registered; the tpu device cannot use its own")
    guard.set_resize_hook(_resize_storage)
    # The CPU plugin's count is known without starting it (`import torch` stays cheap); another
    # plugin is asked when PyTorch first needs the count.
    n = _devices.predicted_count()
    if n is not None:
        guard.set_device_count(n)
    guard.set_count_hook(_devices.exact_count)
    guard.set_sync_hook(lambda device: _devices.synchronize_all())
    local_rank = os.environ.get("LOCAL_RANK", "").strip()
    if local_rank.isdigit():
        # Under torchrun each rank starts on its own device, as `torch.cuda.set_device(local_rank)`
        # would put it: LOCAL_RANK modulo this host's devices.
        guard.set_default_device(int(local_rank) % (n if n is not None else _devices.exact_count()))


def _register_allocator() -> None:
    """The native allocator (a `c10::DeviceAllocator`), so that `torch.accelerator`'s memory
    functions answer for tpu; its statistics are `_memory.memory_hook`'s."""
    from torchtpu.device import _memory
    from torchtpu.device._guard import guard

    guard.set_memory_hook(_memory.memory_hook)
    if not guard.register_allocator():
        raise RuntimeError("torchtpu: another PrivateUse1 allocator is registered; the tpu device cannot use its own")


def _register_profiler() -> None:
    """`torch.profiler` with `ProfilerActivity.PrivateUse1`: the device's program runs, copies and
    compiles as Kineto activities (csrc/profiler.cpp, reading the runtime's record through
    `_C.profiler_api`; docs/debugging.md). A profile that does not ask for the device records
    nothing."""
    from torchtpu import _C
    from torchtpu.device._guard import guard

    guard.install_profiler(_C.profiler_api())


def _register_autocast() -> None:
    """`torch.autocast("tpu")`: CUDA's cast policies on the AutocastPrivateUse1 key (native,
    csrc/autocast.cpp). The default dtype is bfloat16, the TPU's native low precision (CUDA's
    is float16); `torch.autocast("tpu", dtype=torch.float16)` picks float16."""
    from torchtpu.device._guard import guard

    guard.register_autocast()
    torch.set_autocast_dtype(NAME, torch.bfloat16)


def _resize_storage(storage, nbytes: int) -> None:
    # Called by the native hooks; the storage code is imported here, not when torch starts.
    from torchtpu.device import _storage

    _storage.resize_storage(storage, nbytes)


_libs: list = []
_loaded = None


def _load():
    """The kernels module, imported at the first op on a tpu tensor (every tpu tensor is made
    by one) rather than when torch starts, and with it the patches only tpu tensors need:
    `import torch` stays as fast with torchtpu installed as without, and changes nothing in a
    program that never touches tpu."""
    global _loaded
    if _loaded is None:
        from torchtpu.device import _kernels, _native, _patches, _serialization
        from torchtpu.device._guard import guard

        _native.install()
        atexit.register(_let_autograd_threads_finish)
        guard.register_kernels(_kernels.foreach_kernels() + _kernels.functional_kernels())
        _serialization.install()
        _patches.apply_for_tpu_tensors()
        _loaded = _kernels
    return _loaded


def _let_autograd_threads_finish() -> None:
    """At exit, gives the GIL away for a moment. Each backward stashes a Python object in the
    graph task's thread-local state (`torch.autograd.graph._engine_run_backward`), and an
    autograd device thread (one per tpu device) drops the task after the main thread is woken.
    If that thread is still waiting for the GIL when the interpreter finalises, Python stops it
    inside a destructor and the process aborts ("terminate called without an active
    exception"). Waiting here, before finalisation, lets it take the GIL and finish."""
    time.sleep(0.01)


def _trampoline(name: str):
    resolved = None

    def kernel(*args, **kwargs):
        nonlocal resolved
        if resolved is None:
            _load()
            resolved = _kernel_table.resolve(name)
        return resolved(*args, **kwargs)

    kernel.__name__ = name.replace(".", "_")
    return user_facing(kernel)


@user_facing
def _fallback(op, *args, **kwargs):
    return _load().run(op, *args, **kwargs)


def _register_kernels() -> None:
    lib = torch.library.Library("aten", "IMPL")
    from torchtpu.device._guard import guard

    for name in _kernel_table.KERNELS:
        if name == "empty.memory_format":
            guard.register_empty(_trampoline(name))  # native; the Python kernel raises its errors
        elif name == "copy_":
            guard.register_copy(_trampoline(name))  # native where a buffer is reused, else Python
        else:
            lib.impl(name, _trampoline(name), "PrivateUse1")
    # Every other op: the native shim's fallback (csrc/dispatch.cpp), `_fallback` its Python path.
    guard.register_fallback(_fallback)
    _libs.append(lib)


def is_registered() -> bool:
    return _registered


if _autoload_pending:
    register()
