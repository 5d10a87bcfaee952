"""The PrivateUse1 kernels of the `tpu` device: tensor creation, copies across devices,
`.item()`, resizing and random numbers (`_random.py`); `run` (`_dispatch.run`) is the boxed
fallback for every other op. `torchtpu.device.register` registers them (through trampolines
that import this module at the first op)."""

from __future__ import annotations

import torch

from torchtpu.compiled.exporter import is_contiguous
from torchtpu.device import _checks, _dispatch, _schema, _storage
from torchtpu.device._guard import guard as _guard

aten = torch.ops.aten
_DK = torch._C.DispatchKey


def _dtype(dtype):
    return dtype if dtype is not None else torch.get_default_dtype()


def _check_device(device) -> int:
    """The index of tpu `device` (`tpu` alone: the current device); `tpu:9` is refused where it
    does not exist."""
    from torchtpu.device.module import check_index

    if device is None or device.index is None:
        return _guard.current_device()
    check_index(device)
    return device.index


def _check_factory(size, device) -> int:
    """What eager's allocator refuses before a tpu tensor is made: a device that does not
    exist, a negative size. Returns the device's index."""
    index = _check_device(device)
    if any(d < 0 for d in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    return index


def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    index = _check_factory(size, device)
    return _storage.new_tensor(tuple(size), _dtype(dtype), device=index)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    index = _check_factory(size, device)
    size, stride = tuple(size), tuple(stride)
    if is_contiguous(size, stride):
        return _storage.new_tensor(size, _dtype(dtype), device=index)
    # A layout other than row-major (empty_like of a transposed tensor): storage for the span
    # of the strides, viewed with them.
    span = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    base = _storage.new_tensor((span,), _dtype(dtype), device=index)
    return aten.as_strided.default._op_dk(_DK.Meta, base, list(size), list(stride), 0)


def copy_(self, src, non_blocking=False):
    if self.device.type != _dispatch.DEVICE:
        # tpu -> CPU: PyTorch's CPU copy does the dtype conversion and broadcasting.
        return self.copy_(_storage.to_host(src))
    if src.device.type != _dispatch.DEVICE:
        cpu = src.detach().to(self.dtype).expand(self.shape)
        _storage.write(self, _storage.upload(cpu.contiguous(), _storage.slot_of(self).device))
        return self
    if src.device.index != self.device.index:
        # Between tpu devices: the plugin copies device to device, then the copy is local.
        src = _storage.to_device(src, self.device.index)
    if src.dtype == self.dtype and tuple(src.shape) == tuple(self.shape) and not (src.is_conj() or src.is_neg()):
        _storage.write(self, _storage.read(src))
        return self
    # Cast and broadcast on the device: the functional `copy`.
    _dispatch.run(aten.copy_.default, self, src)
    return self


def _copy_from(self, dst, non_blocking=False):
    return copy_(dst, self, non_blocking)


def _copy_from_and_resize(self, dst):
    if tuple(dst.shape) != tuple(self.shape):
        _dispatch.resize(dst, tuple(self.shape))
    return copy_(dst, self)


_SCALAR_READ = ("host_read", "a scalar read (.item(), bool(), int(), float())")


def _local_scalar_dense(self):
    return _storage.to_host(self, _SCALAR_READ).item()


def resize_(self, size, memory_format=None):
    if tuple(self.shape) != tuple(size):
        _dispatch.resize(self, tuple(size))
    return self


def set_storage_offset(self, source, storage_offset, size, stride=()):
    # Points `self` at a tpu storage (deepcopy's `new_tensor.set_(storage, ...)`): the Meta
    # kernel re-points the tensor; the storage carries its device data with it.
    _storage.slot_of_storage(source)  # a tpu storage with device data, or a clear error
    stride = list(stride) if len(stride) else list(_storage.contiguous_strides(size))
    aten.set_.source_Storage_storage_offset._op_dk(_DK.Meta, self, source, storage_offset, list(size), stride)
    return self


def record_stream(self, stream):
    # A buffer stays alive while PJRT's enqueued work reads it, whatever Python drops, and
    # there is no caching allocator to keep a freed block from: nothing to record.
    return None


def set_storage(self, source):
    slot = _storage.slot_of_storage(source)
    return set_storage_offset(self, source, 0, [slot.numel])


def equal(self, other):
    # A Python bool: the shapes, then one reduction on the device read back.
    if tuple(self.shape) != tuple(other.shape):
        return False
    same = _dispatch.run(aten.all.default, _dispatch.run(aten.eq.Tensor, self, other))
    return bool(_storage.to_host(same, ("host_read", "torch.equal")).item())


def as_strided_(self, size, stride, storage_offset=None):
    # PyTorch's own kernel checks the bounds against the storage's bytes, which a tpu storage
    # does not have on the host; the Meta `set_` re-points the tensor without that check. The
    # tensor keeps its own storage, so it needs no device data: a wrapper subclass's storage
    # has none (FunctionalTensor replays `as_strided_` on its wrapper under torch.compile,
    # as `adaptive_avg_pool2d` of a channels-last input does).
    offset = self.storage_offset() if storage_offset is None else storage_offset
    aten.set_.source_Storage_storage_offset._op_dk(
        _DK.Meta, self, self.untyped_storage(), offset, list(size), list(stride)
    )
    return self


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    # tpu -> CPU without PyTorch's pinned staging buffer (`non_blocking=True` would ask the
    # device hooks for a pinned-memory allocator, which a Python backend cannot provide).
    target = torch.device(device) if device is not None else self.device
    index = _check_device(target) if target.type == _dispatch.DEVICE else None
    dtype = self.dtype if dtype is None else dtype
    if self.device.type != _dispatch.DEVICE:  # CPU -> tpu
        return _storage.from_host(self.detach().to(dtype).resolve_conj().resolve_neg(), index)
    if target.type == "cpu":
        return _storage.to_host(self).to(dtype)
    if target.index is not None and index != self.device.index:  # tpu:i -> tpu:j, device to device
        moved = _storage.to_device(self, index)
        return moved if dtype == self.dtype else _dispatch.run(aten._to_copy.default, moved, dtype=dtype)
    return _dispatch.run(aten._to_copy.default, self, dtype=dtype)


def convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    # `aten::convolution` sends devices without a kernel of their own here.
    return _dispatch.run(
        aten.convolution.default, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )


def convolution_backward_overrideable(
    grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    return _dispatch.run(
        aten.convolution_backward.default,
        grad_output,
        input,
        weight,
        [out_channels],
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        output_mask,
    )


def assert_async(self, assert_msg=None):
    """`torch._assert_async` on tpu: checked at the next host read, as CUDA's device assert,
    by the pending checks the index checks use (`_checks.py`): no round trip now. The message
    and the one-value rule are CPU eager's."""
    if self.numel() != 1:
        raise RuntimeError(
            f"Boolean value of Tensor with {'no values' if self.numel() == 0 else 'more than one value'} is ambiguous"
        )
    message = assert_msg if assert_msg is not None else "Expected Tensor with single nonzero value, but got zero"
    _checks.check_arguments(self.reshape(()) == 0, message)


# The boxed fallback: every other op.
run = _dispatch.run


def foreach_kernels() -> list:
    """The `_foreach_*` ops torchtpu decomposes (the optimizers' foreach path), which get a tpu
    kernel of their own (the native one, `csrc/dispatch.cpp`): without one, PyTorch's composite kernel loops over the tensors and
    each op of each tensor is dispatched alone; with it, one program runs the whole list.
    Returns the overloads' names, for the native shim to register (`_native.register_kernels`)."""
    from torchtpu.compiled.foreach import foreach_decompositions

    functional = {op.name() for op in foreach_decompositions()}
    names = []
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name
        if not name.startswith("aten::_foreach_") or "out" in schema.overload_name:
            continue
        overload = schema.overload_name
        plain = name[:-1] if name.endswith("_") else name
        if (plain + ("." + overload if overload else "")) not in functional:
            continue
        names.append(name[len("aten::") :] + ("." + overload if overload else ""))
    return names


def functional_kernels() -> list:
    """The functional ATen ops that PyTorch implements for other backends through their out=
    form (structured kernels: `mul.Tensor` makes an empty tensor, then runs `mul.out`, which
    resizes it), which get a tpu kernel of their own (the native one), so that they run as one program without the
    empty tensor, the resize and the write-back. Only ops torchtpu can make programs of, and
    neither views nor ops that write their arguments. Returns their names."""
    supported = _dispatch._supported_or_decomposed()
    out = []
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name
        if not name.startswith("aten::") or name.endswith("_"):
            continue
        base = "aten." + name[len("aten::") :]
        if base not in supported:
            continue
        full = name + ("." + schema.overload_name if schema.overload_name else "")
        try:
            structured = torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeExplicitAutogradNonFunctional")
            own = torch._C._dispatch_has_kernel_for_dispatch_key(full, "PrivateUse1")
        except RuntimeError:  # a schema without a dispatcher entry (sym_* ops)
            continue
        if not structured or own:
            continue
        if _schema.classify(schema)[0] != _schema.FUNCTIONAL:
            continue
        packet = getattr(aten, name[len("aten::") :], None)
        if packet is None or getattr(packet, schema.overload_name or "default", None) is None:
            continue
        out.append(full[len("aten::") :])
    return out
