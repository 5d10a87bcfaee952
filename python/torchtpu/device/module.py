"""`torch.tpu`: the device module PyTorch looks up for the `tpu` backend (seeding, device
count, synchronisation, memory statistics), and the hooks and device guard PyTorch's Python
backend route asks for."""

from __future__ import annotations

import torch

from torchtpu import _C


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
        try:
            return _C.device_count() > 0
        except Exception:
            return False

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        # The eager device is the plugin's first device; SPMD programs use the others.
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device) -> None:
        index = torch.device(device).index if not isinstance(device, int) else device
        if index not in (None, 0):
            raise RuntimeError(f"torchtpu: the tpu device has one device (index 0), not {index}")

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

    @staticmethod
    def memory_allocated(device=None) -> int:
        return _C.device_memory()[0]

    @staticmethod
    def max_memory_allocated(device=None) -> int:
        return _C.device_memory()[1]

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        _C.reset_device_peak()

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.bfloat16, torch.float16]

    @staticmethod
    def _lazy_init() -> None:
        pass


class Hooks(torch._C._acc.PrivateUse1Hooks):
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
    provide; for the tpu device it is routed to `torch.tpu.synchronize`."""
    global _original_synchronize
    if _original_synchronize is not None:
        return
    _original_synchronize = torch.accelerator.synchronize

    def synchronize(device=None, /):
        acc = torch.accelerator.current_accelerator()
        if acc is not None and acc.type == "tpu":
            return _sync()
        return _original_synchronize(device)

    synchronize.__doc__ = _original_synchronize.__doc__
    torch.accelerator.synchronize = synchronize


def _reduce_tensor(t: torch.Tensor):
    if t.device.type == "tpu":
        from torchtpu.device import _storage

        # A tpu tensor's storage holds no bytes on the host side: it is saved as its values,
        # the way PyTorch saves tensors of backends without host-visible storage.
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor, (_storage.to_host(t), t.dtype, str(t.device), t.requires_grad))
    return t.__reduce_ex__(2)


def register_pickling() -> None:
    """`torch.save` (and pickle) of tpu tensors: PyTorch's default saves a tensor's storage,
    which for a tpu tensor is empty, so plain tensors are reduced through `_reduce_tensor`
    (other devices' tensors exactly as before; `copyreg` is consulted by exact type, so
    subclasses such as Parameter keep their own reduction, which saves `.data`, a plain tensor)."""
    import copyreg

    copyreg.pickle(torch.Tensor, _reduce_tensor)


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
        return original_new(cls, *args, device=device, **kwargs) if device is not None else original_new(cls, *args, **kwargs)

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
