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

The buffer keeps the storage's dtype (the dtype it was made with). A view of it as another dtype
(`Tensor.view(dtype)`, `view_as_complex`, `view_as_real`) converts at each access: a complex
dtype over its real component dtype, or the reverse (`RETYPED`). A complex view of real storage
is a view of the storage's element pairs (one more dim of 2, strides doubled), converted by
`view_as_complex` in its read program; a real view of complex storage that takes whole elements
(last dim 2 of stride 1, other strides and the offset even) is a complex view converted by
`view_as_real`; any other real view is a view of the storage's real parts (`view_as_real` of
the whole buffer). Writes convert the values back and write them the same way.

Any other view as another dtype (a KV cache made as bytes and used as floats, `x.view(torch.int32)`)
makes the storage adopt the view's dtype: its buffer is read as the new dtype by one bitcast
program (`prims.view_of_dtype`, the bytes unchanged; none for a storage never written) and the
slot takes the dtype and the matching flat shape (`Slot.retype`). Accesses as that dtype then
read the buffer directly; an access as the old dtype adopts it back. Complex storages and views
other than their parts, and bools viewed as a dtype of another size, raise.
"""

from __future__ import annotations

import math

import torch

from torchtpu.compiled.exporter import is_contiguous
from torchtpu.device import _checks, _defer, _programs

# The slot helpers, uploads and the last execution's outputs live in the leaf `_buffers.py`.
from torchtpu.device._buffers import Slot, slot_of, slot_of_storage, storage_slot, tensor_slot, upload  # noqa: E402,F401
from torchtpu.device._defer import Pending
from torchtpu.device._guard import guard as _guard
from torchtpu.ir_text import IR_DTYPES


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


# A storage's dtype and the dtype of a view of it that the device converts between (either way
# round): complex elements and their real and imaginary parts.
_PARTS = {torch.complex64: torch.float32, torch.complex128: torch.float64}
RETYPED = frozenset([(c, r) for c, r in _PARTS.items()] + [(r, c) for c, r in _PARTS.items()])


def checked_slot(t: torch.Tensor) -> Slot:
    """`t`'s slot, in `t`'s dtype unless the two are a complex dtype and its parts (converted
    at each access): a view as another dtype makes the storage adopt it (`adopt_dtype`)."""
    slot = slot_of(t)
    if t.dtype is not slot.dtype and (t.dtype, slot.dtype) not in RETYPED:
        adopt_dtype(slot, t.dtype)
    return slot


def adopt_dtype(slot: Slot, dtype: torch.dtype) -> None:
    """Makes the storage's elements `dtype`, its bytes unchanged (module docstring)."""
    nbytes = slot.numel * slot.dtype.itemsize
    bool_resized = torch.bool in (slot.dtype, dtype) and slot.dtype.itemsize != dtype.itemsize
    if slot.dtype.is_complex or dtype.is_complex or bool_resized or nbytes % dtype.itemsize:
        raise NotImplementedError(
            f"torchtpu: a {dtype} view of {slot.dtype} storage (Tensor.view(dtype)) is not supported on tpu "
            "(complex storages are viewed as their real parts only, bools as bytes only, and the storage's "
            f"{nbytes} bytes must be whole {dtype} elements)"
        )
    if slot.buffer is not None:
        slot.buffer = _programs.bitcast(buffer_of(slot), slot.shape, slot.dtype, dtype)
    slot.retype(dtype, (nbytes // dtype.itemsize,))


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
    out-of-range garbage. In bytes: the view's dtype may be another than the storage's."""
    if t.numel() == 0:
        return
    end = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    size = t.element_size()
    if end * size > slot.numel * slot.dtype.itemsize:
        raise RuntimeError(
            f"torchtpu: a tpu tensor of sizes {list(t.shape)}, strides {list(t.stride())} and storage offset "
            f"{t.storage_offset()} needs a storage of {end * size} bytes, but its storage has "
            f"{slot.numel * slot.dtype.itemsize} (it was resized with untyped_storage().resize_)"
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


def _dense(buffer, shape, dtype, numel: int, size: tuple, stride: tuple, offset: int):
    """The view (size, stride, offset) of a row-major buffer of `shape` and `dtype` holding
    `numel` elements, made dense."""
    if math.prod(size) == numel and offset == 0 and is_contiguous(size, stride):
        if size == tuple(shape):
            return buffer
        return _programs.reshape(buffer, shape, size, dtype)
    return _programs.strided_read(buffer, shape, dtype, size, stride, offset)


def read(t: torch.Tensor):
    """`t`'s values as a dense device buffer of `t`'s shape."""
    slot = checked_slot(t)
    buffer = buffer_of(slot)
    shape = tuple(t.shape)
    if t.dtype is not slot.dtype:
        check_bounds(t, slot)
        return _read_retyped(buffer, slot, t.dtype, shape, tuple(t.stride()), t.storage_offset())
    if is_whole(t, slot):
        if shape == slot.shape:
            return buffer
        return _programs.reshape(buffer, slot.shape, shape, slot.dtype)
    check_bounds(t, slot)
    return _programs.strided_read(buffer, slot.shape, slot.dtype, shape, tuple(t.stride()), t.storage_offset())


def _pairs(size: tuple, stride: tuple, offset: int):
    """A real view (size, stride, offset) of a complex storage that takes whole elements, as
    the complex view (size, stride, offset) whose `view_as_real` it is; else None."""
    if not size or size[-1] != 2 or stride[-1] != 1 or offset % 2:
        return None
    if any(s % 2 for n, s in zip(size[:-1], stride[:-1]) if n != 1):
        return None
    return size[:-1], tuple(s // 2 for s in stride[:-1]), offset // 2


def _in_storage(slot: Slot, size: tuple, stride: tuple, offset: int) -> tuple:
    """The view (size, stride, offset) of the slot's elements as `_programs.retyped` takes it:
    stride None where it is the whole buffer."""
    if math.prod(size) == slot.numel and offset == 0 and is_contiguous(size, stride):
        return size, None, 0
    return size, stride, offset


def _read_retyped(buffer, slot: Slot, dtype, size: tuple, stride: tuple, offset: int):
    """The view (size, stride, offset) of the slot's storage as `dtype` (a pair in `RETYPED`),
    made dense."""
    if dtype.is_complex:
        # The storage's element pairs: a dim of 2 more, strides and offset in real elements.
        real = (size + (2,), tuple(2 * s for s in stride) + (1,), 2 * offset)
        return _programs.retyped(buffer, slot.shape, slot.dtype, dtype, *_in_storage(slot, *real))
    pairs = _pairs(size, stride, offset)
    if pairs is not None:
        return _programs.retyped(buffer, slot.shape, slot.dtype, dtype, *_in_storage(slot, *pairs))
    # Not whole elements (one part of each, a flattened pair): a view of all the real parts.
    parts = _programs.retyped(buffer, slot.shape, slot.dtype, dtype, slot.shape)
    return _dense(parts, slot.shape + (2,), dtype, 2 * slot.numel, size, stride, offset)


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
    if t.is_conj() or t.is_neg():
        # A lazily conjugated or negated view stores the conjugate or negative of its values.
        if t.is_conj():
            buffer = _programs.unary(torch.ops.aten.conj_physical.default, buffer, tuple(t.shape), t.dtype)
        if t.is_neg():
            buffer = _programs.unary(torch.ops.aten.neg.default, buffer, tuple(t.shape), t.dtype)
    if t.dtype is not slot.dtype:
        check_bounds(t, slot)
        _write_retyped(slot, buffer, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())
        return
    if is_whole(t, slot):
        slot.buffer, slot.shape = buffer, tuple(t.shape)
        return
    check_bounds(t, slot)
    base = buffer_of(slot)
    slot.buffer = _programs.strided_write(
        base, slot.shape, slot.dtype, buffer, tuple(t.shape), tuple(t.stride()), t.storage_offset()
    )


def _write_view(slot: Slot, buffer, size: tuple, stride: tuple, offset: int) -> None:
    """Writes `buffer` (dense, of `size` and the slot's dtype) into the view (size, stride,
    offset) of the slot's elements."""
    if math.prod(size) == slot.numel and offset == 0 and is_contiguous(size, stride):
        slot.buffer, slot.shape = buffer, size
        return
    slot.buffer = _programs.strided_write(buffer_of(slot), slot.shape, slot.dtype, buffer, size, stride, offset)


def _write_retyped(slot: Slot, buffer, dtype, size: tuple, stride: tuple, offset: int) -> None:
    """Writes `buffer` (dense, of `size` and `dtype`, a pair in `RETYPED` with the slot's dtype)
    into the view (size, stride, offset) of the slot's storage as `dtype`: the values converted
    to the storage's dtype, written as `_read_retyped` reads them."""
    if dtype.is_complex:
        parts = _programs.retyped(buffer, size, dtype, slot.dtype, size)
        _write_view(slot, parts, size + (2,), tuple(2 * s for s in stride) + (1,), 2 * offset)
        return
    pairs = _pairs(size, stride, offset)
    if pairs is not None:
        _write_view(slot, _programs.retyped(buffer, size, dtype, slot.dtype, size), *pairs)
        return
    parts_shape = slot.shape + (2,)
    if math.prod(size) == 2 * slot.numel and offset == 0 and is_contiguous(size, stride):
        parts = buffer  # all of the real parts, in order: only its shape differs
        shape = size
    else:
        base = _programs.retyped(buffer_of(slot), slot.shape, slot.dtype, dtype, slot.shape)
        parts = _programs.strided_write(base, parts_shape, dtype, buffer, size, stride, offset)
        shape = parts_shape
    slot.buffer = _programs.retyped(parts, shape, dtype, slot.dtype, parts_shape)


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
