"""Device buffers and the slots that hold them, for every layer of the eager device: a tensor's
or storage's slot, uploads from the host, a constant's copy on another device, the IR inputs of
an export, and the last asynchronous execution's outputs (what `torch.tpu.synchronize` waits
for). A leaf: it imports no other device module but the guard.
"""

from __future__ import annotations

import weakref

import torch

from torchtpu import _C
from torchtpu.device._guard import guard as _guard
from torchtpu.ir_text import IR_DTYPES

# The device data of one storage: `buffer` (None until first written) of `shape`, on
# tpu:`device` (the storage's device: every buffer it ever holds lives there). A Rust object
# (python/src/eager/slot.rs) that the storage keeps in its DataPtr's context, so that the native
# per-op path reads it from the storage alone.
Slot = _C.Slot
# A tpu tensor's slot, or None (a CPU tensor); a storage's.
tensor_slot = _guard.tensor_slot
storage_slot = _guard.storage_slot


def slot_of_storage(storage) -> Slot:
    slot = storage_slot(storage)
    if slot is None:
        raise RuntimeError(
            "torchtpu: this tpu storage has no device data (it was not made by torchtpu's device kernels, "
            "as `torch.UntypedStorage(n, device='tpu')` is not, or a tensor's storage was replaced); make a "
            "tensor (torch.empty(n, dtype=torch.uint8, device='tpu')) and use its storage"
        )
    return slot


def slot_of(t: torch.Tensor) -> Slot:
    slot = tensor_slot(t)
    return slot if slot is not None else slot_of_storage(t.untyped_storage())


def upload(cpu: torch.Tensor, device: int | None = None):
    """A device buffer on tpu:`device` (else the current device) holding a copy of the CPU
    tensor `cpu`."""
    cpu = cpu.detach()
    if cpu.dtype not in IR_DTYPES:
        raise TypeError(f"torchtpu: dtype {cpu.dtype} is not supported on the tpu device")
    if cpu.is_conj():
        cpu = cpu.resolve_conj()
    if cpu.is_neg():
        cpu = cpu.resolve_neg()
    return _C.device_put(cpu.contiguous(), _guard.current_device() if device is None else device)


# Copies of device-0 constants on the other devices, per constant (a module attribute uploaded
# at build time, a cached scalar): made once per device, by the plugin, device to device.
_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def on_device(buffer, device: int):
    """`buffer` if it lives on tpu:`device`, else its copy there (made once and kept while
    `buffer` lives: constants, never values that change)."""
    if buffer.device == device:
        return buffer
    per = _copies.get(buffer)
    if per is None:
        per = _copies[buffer] = {}
    copy = per.get(device)
    if copy is None:
        copy = per[device] = buffer.copy_to(device)
    return copy


def input_sources(exported) -> list:
    """Per IR input of an export: ("arg", positional index), or ("const", a device buffer
    holding the module attribute, uploaded now)."""
    return [("arg", spec.index) if spec.kind == "arg" else ("const", upload(spec.value)) for spec in exported.inputs]


def mark_last(outs: list) -> None:
    """Records `outs` as the last asynchronous execution's outputs (`wait_last` waits for them;
    a one-op program's or a region's, `_defer.py`)."""
    global _last
    _last = tuple(weakref.ref(b) for b in outs)


def wait_last() -> None:
    """Waits for the last asynchronous execution's outputs: the engine runs programs in order on
    one device, so their being ready means all of the Python path's work is done."""
    global _last
    last, _last = _last, ()
    for ref in last:
        b = ref()
        if b is not None:
            b.wait()


# The outputs of the last asynchronous execution, held weakly: a dead buffer needs no waiting.
_last: tuple = ()
