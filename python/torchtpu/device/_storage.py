"""Where a `tpu` tensor's data lives.

PyTorch owns a `tpu` tensor's metadata: sizes, strides, storage offset and the storage it
shares with its views (the device guard's `create_empty_tensor` makes a base whose storage holds
no bytes; views come from the Meta kernels, which alias that storage). torchtpu owns the data: a
`Slot` kept in the storage's DataPtr context holds one device buffer (`torchtpu._C.DeviceBuffer`) with
the storage's elements in row-major order, in some shape (`Slot.shape`). Buffers are never
written in place: a write makes a new buffer and the slot points at it, so every view of the
storage sees the write (PyTorch's aliasing semantics) and nothing else can.

Reading a view that is not the buffer itself runs a cached `aten.as_strided` program; writing
one runs `aten.as_strided_scatter` into the buffer. The slot, and with it the buffer, is freed
when the last tensor sharing the storage dies.
"""

from __future__ import annotations

import torch

from torchtpu.device import _checks, _defer, _programs

# The slot helpers, uploads and the last execution's outputs live in the leaf `_buffers.py`.
from torchtpu.device._buffers import Slot, slot_of, slot_of_storage, storage_slot, tensor_slot, upload  # noqa: E402,F401
from torchtpu.device._defer import Pending
from torchtpu.device._guard import guard as _guard
from torchtpu.exporter import IR_DTYPES


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def checked_slot(t: torch.Tensor) -> Slot:
    """`t`'s slot, refusing a view of its storage as another dtype (`Tensor.view(dtype)`)."""
    slot = slot_of(t)
    if t.dtype is not slot.dtype:
        raise NotImplementedError(
            f"torchtpu: a {t.dtype} view of {slot.dtype} storage (Tensor.view(dtype)) is not supported on tpu"
        )
    return slot


def new_tensor(shape, dtype: torch.dtype, buffer=None, device: int | None = None) -> torch.Tensor:
    """A fresh `tpu` base tensor of `shape`, holding `buffer` (a DeviceBuffer of that shape and
    dtype, or a DeferAndFuse Pending: the tensor is on its device) or nothing yet (an
    uninitialised `empty` on tpu:`device`, else on the current device)."""
    if dtype not in IR_DTYPES:
        raise TypeError(f"torchtpu: dtype {dtype} is not supported on the tpu device")
    if buffer is None:
        return new_result(shape, dtype, None, _guard.current_device() if device is None else device)
    return new_result(shape, dtype, buffer)


def new_result(shape, dtype: torch.dtype, buffer, device: int | None = None) -> torch.Tensor:
    """`new_tensor` for a program's output (its dtype is an IR dtype: not checked again), on
    its buffer's device."""
    if device is None:
        device = buffer.device
    return _guard.create_empty_tensor(list(shape), dtype, device, Slot(shape, dtype, buffer, device))


def is_whole(t: torch.Tensor, slot: Slot) -> bool:
    """Whether `t` is all of its storage, row-major from offset 0 (then its data is the buffer,
    reshaped at most). PyTorch's own contiguity check ignores the strides of size-1 dims."""
    return t.numel() == slot.numel and t.storage_offset() == 0 and t.is_contiguous()


def check_bounds(t: torch.Tensor, slot: Slot) -> None:
    """Refuses a view reaching past its storage's elements (a storage shrunk or freed with
    `untyped_storage().resize_`), as PyTorch refuses such a view, instead of reading a program's
    out-of-range garbage."""
    if t.numel() == 0:
        return
    end = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    if end > slot.numel:
        size = t.element_size()
        raise RuntimeError(
            f"torchtpu: a tpu tensor of sizes {list(t.shape)}, strides {list(t.stride())} and storage offset "
            f"{t.storage_offset()} needs a storage of {end * size} bytes, but its storage has {slot.numel * size} "
            "(it was resized with untyped_storage().resize_)"
        )


def buffer_of(slot: Slot):
    """The slot's buffer; an uninitialised storage (`torch.empty`) gets zeros first."""
    b = slot.buffer
    if b is None:
        b = slot.buffer = _programs.zeros(slot.shape, slot.dtype, slot.device)
    elif type(b) is Pending and b.buffer is not None:
        # DeferAndFuse: the region that computed it has run; the storage keeps the buffer.
        b = slot.buffer = b.buffer
    return b


def read(t: torch.Tensor):
    """`t`'s values as a dense device buffer of `t`'s shape."""
    slot = checked_slot(t)
    buffer = buffer_of(slot)
    shape = tuple(t.shape)
    if is_whole(t, slot):
        if shape == slot.shape:
            return buffer
        return _programs.reshape(buffer, slot.shape, shape, slot.dtype)
    check_bounds(t, slot)
    return _programs.strided_read(buffer, slot.shape, slot.dtype, shape, tuple(t.stride()), t.storage_offset())


def write(t: torch.Tensor, buffer) -> None:
    """Makes `t`'s values those of `buffer` (a dense buffer of `t`'s shape and dtype); every
    tensor sharing `t`'s storage sees them."""
    slot = checked_slot(t)
    if buffer.device != slot.device:
        # An out= tensor on another device than the op's inputs, as CUDA refuses it.
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, tpu:{slot.device} "
            f"and tpu:{buffer.device}! (writing a result into a tpu:{slot.device} tensor)"
        )
    if is_whole(t, slot):
        slot.buffer, slot.shape = buffer, tuple(t.shape)
        return
    check_bounds(t, slot)
    base = buffer_of(slot)
    slot.buffer = _programs.strided_write(
        base, slot.shape, slot.dtype, buffer, tuple(t.shape), tuple(t.stride()), t.storage_offset()
    )


def resize_storage(storage, nbytes: int) -> None:
    """`UntypedStorage.resize_(nbytes)` of a tpu storage, as PyTorch resizes one (the native
    hooks' `resizePrivateUse1Bytes` calls this; they set the storage's byte count after it): the
    slot gets a new buffer of `nbytes` in the storage's dtype, 1-D, holding the first min(old,
    new) elements; elements past the old end are uninitialised (zeros here), and a storage
    resized to 0 holds no device memory until it grows (FSDP2 frees its unsharded parameters
    this way). Every tensor and view sharing the storage sees the new data."""
    slot = slot_of_storage(storage)
    itemsize = slot.dtype.itemsize
    if nbytes % itemsize:
        raise RuntimeError(
            f"torchtpu: a tpu storage resizes in whole elements of its dtype ({slot.dtype}, {itemsize} bytes "
            f"each): {nbytes} bytes is not a multiple of {itemsize}"
        )
    new, old = nbytes // itemsize, slot.numel
    if new == old:
        return
    if new == 0 or old == 0 or slot.buffer is None:
        buffer = None  # nothing to keep: no device memory, zeros when first read (`buffer_of`)
    elif new < old:
        buffer = _programs.strided_read(buffer_of(slot), slot.shape, slot.dtype, (new,), (1,), 0)
    else:
        buffer = _programs.pad_flat(buffer_of(slot), slot.shape, slot.dtype, new)
    slot.buffer, slot.shape, slot.numel = buffer, (new,), new


_TO_CPU = ("host_read", "a copy to the CPU (.cpu(), .to('cpu'), .tolist(), .numpy())")


def to_host(t: torch.Tensor, why: tuple = _TO_CPU) -> torch.Tensor:
    """A CPU copy of `t`'s values (contiguous), its conjugate and negative bits resolved. In
    DeferAndFuse mode a pending value is a cut, for the reason `why` (`_defer.CUT_REASONS`)."""
    if _defer.state.active:
        with _defer.cause(*why), _defer.immediate():
            out = _raw_to_host(t)
    else:
        out = _raw_to_host(t)
    if t.is_conj():
        out = torch.conj_physical(out)
    if t.is_neg():
        out = torch.neg(out)
    if _checks._pending:
        _checks.check()  # a host read is where earlier ops' index checks are read (_checks.py)
    return out


def _raw_to_host(t: torch.Tensor) -> torch.Tensor:
    """The stored values of `t` on the CPU (contiguous). A view that is a good part of its storage (a quarter or
    more) is cut from a host copy of the whole buffer rather than gathered on the device: no
    program to compile for each view shape (the first `count` rows of `x[mask]` differ at
    every call)."""
    slot = tensor_slot(t)
    if slot is not None and slot.buffer is not None and t.dtype is slot.dtype and not is_whole(t, slot):
        check_bounds(t, slot)
        if 4 * t.numel() >= slot.numel:
            whole = torch.from_dlpack(slot.buffer.to_host()).reshape(-1)
            return whole.as_strided(tuple(t.shape), t.stride(), t.storage_offset()).contiguous()
    return torch.from_dlpack(read(t).to_host())


def from_host(cpu: torch.Tensor, device: int | None = None) -> torch.Tensor:
    """A new `tpu` tensor on tpu:`device` (else the current device) holding a copy of the CPU
    tensor `cpu`."""
    cpu = cpu.detach().contiguous()
    return new_tensor(tuple(cpu.shape), cpu.dtype, upload(cpu, device))


def to_device(t: torch.Tensor, device: int) -> torch.Tensor:
    """A copy of the tpu tensor `t` on tpu:`device` (another device), copied device to device
    by the plugin (`DeviceBuffer.copy_to`), never through the host."""
    with _defer.cause("device_change", f"a copy to tpu:{device}"), _defer.immediate():
        buffer = read(t)
    if type(buffer) is Pending:  # DeferAndFuse: the copy needs the value now
        buffer = buffer._value("device_change")
    out = new_tensor(tuple(t.shape), t.dtype, buffer.copy_to(device))
    if t.is_conj():
        out = torch.conj_physical(out)
    if t.is_neg():
        out = torch.neg(out)
    return out
