"""`torch.save` / `torch.load` of tpu tensors, the way PyTorch does them for CUDA tensors.

Saving needs nothing of its own: PyTorch's `Tensor.__reduce_ex__` saves a tpu tensor as its
untyped storage plus sizes, strides and storage offset (`torch._utils._rebuild_tensor_v2`), and
`torch.save` writes each storage once (keyed by the storage), tagged with its location `tpu:N`
(PyTorch's PrivateUse1 tagger), its bytes copied to the host by `UntypedStorage.cpu` (the
device's `patch_storage`). Views and tied tensors therefore share one record, as on CUDA.

Loading: `torch.load` reads each record as CPU bytes and asks the registered deserializers to
put it at its location (or `map_location`'s). A tpu storage holds one device buffer of one
dtype (`_storage.py`), and the deserializer is given the bytes without their dtype, so the one
registered here (`_restore`, ahead of PyTorch's PrivateUse1 one, which would allocate an
untyped storage on the device and fail) only marks the CPU bytes with their tpu device. The
loader wraps each restored storage in a `TypedStorage` of the record's dtype at once; a wrap of
marked bytes uploads them as that dtype instead (`_typed_init`), one tpu storage per record,
which every tensor of the record (`_rebuild_tensor_v2`'s `set_`) then shares. Nothing is
uploaded twice and no device memory is held for the bytes alone.

Plain `pickle` of a tpu tensor (`torch.distributed`'s object collectives) goes the same way:
PyTorch pickles a storage with `torch.save`'s legacy format, whose `_write_file` is given the
storage's host copy here (`_write_file`).
"""

from __future__ import annotations

import torch

# Ahead of PyTorch's PrivateUse1 deserializer (priority 23), after CUDA's (20); a fraction so as
# not to collide with another library's whole-number priority (equal priorities cannot be sorted).
PRIORITY = 22.5
# The attribute marking CPU bytes restored to a tpu location: a `_Target`.
_MARK = "_torchtpu_target"
_registered = False
_original_typed_init = None
_original_write_file = None
# The device's first-use loader (`torchtpu.device._load`), given at registration: the package
# imports this module, not the other way round.
_load_device = None


class _Target:
    """Where marked CPU bytes go (tpu:`index`), and the tpu storage made of them, per dtype (a
    record is wrapped once by the loader; a second wrap gets the same storage)."""

    __slots__ = ("index", "made")

    def __init__(self, index: int):
        self.index = index
        self.made: dict = {}


def register(load_device) -> None:
    """Registers the tpu location's tagger and deserializer with `torch.serialization` (at
    device registration: `torch.load` of a tpu checkpoint works in a fresh process, before any
    tpu tensor exists). Changes nothing for other locations. `load_device`: the device's
    first-use loader (its kernels and first-tensor patches), run before a restore makes a tensor."""
    global _registered, _load_device
    if _registered:
        return
    _load_device = load_device
    torch.serialization.register_package(PRIORITY, _tag, _restore)
    _registered = True


def install() -> None:
    """The saving side's patches, at the first tpu tensor. The legacy format's (plain pickle's,
    `_use_new_zipfile_serialization=False`): `UntypedStorage._write_file` of a tpu storage writes
    its host copy, and `_set_from_file` reads the bytes on the host and uploads them into the
    storage. `UntypedStorage.copy_` from a tpu storage into a CPU one copies the host copy
    (`torch.save` with `use_pinned_memory_for_d2h`, `UntypedStorage.to(device="cpu")`): PyTorch's
    would read the storage as bytes, a view as another dtype that the device refuses."""
    global _original_write_file
    if _original_write_file is not None:
        return
    _original_write_file = write = torch.UntypedStorage._write_file
    read = torch.UntypedStorage._set_from_file
    copy = torch.UntypedStorage.copy_

    def copy_(self, src, non_blocking=None):
        if src.device.type == "tpu" and self.device.type == "cpu":
            src = src.cpu()
        return copy(self, src) if non_blocking is None else copy(self, src, non_blocking)

    def _write_file(self, *args, **kwargs):
        if self.device.type == "tpu":
            return write(self.cpu(), *args, **kwargs)
        return write(self, *args, **kwargs)

    def _set_from_file(self, *args, **kwargs):
        if self.device.type != "tpu":
            return read(self, *args, **kwargs)
        from torchtpu.device import _storage

        slot = _storage.slot_of_storage(self)
        host = torch.UntypedStorage(slot.numel * slot.dtype.itemsize)
        read(host, *args, **kwargs)
        slot.buffer = _storage.upload(_as_elements(host, slot.dtype).reshape(slot.shape), slot.device)
        return self

    _write_file.__doc__ = write.__doc__
    _set_from_file.__doc__ = read.__doc__
    torch.UntypedStorage._write_file = _write_file
    torch.UntypedStorage._set_from_file = _set_from_file
    torch.UntypedStorage.copy_ = copy_


def _tag(storage) -> str | None:
    if storage.device.type == "tpu":
        index = storage.device.index
        return "tpu" if index is None else f"tpu:{index}"
    return None


def _device_index(location) -> int | None:
    """The tpu device index a location names (`tpu`: the current device), else None."""
    if isinstance(location, bytes):
        location = location.decode("ascii")
    if not isinstance(location, str) or not location.startswith("tpu"):
        return None
    try:
        device = torch.device(location)
    except RuntimeError:
        return None
    if device.type != "tpu":
        return None
    if device.index is None:
        from torchtpu.device._guard import guard

        return guard.current_device()
    count = torch.tpu.device_count()
    if device.index >= count:
        raise RuntimeError(
            f"Attempting to deserialize object on TPU device {device.index} but torch.tpu.device_count() is "
            f"{count}. Please use torch.load with map_location to map your storages to an existing device."
        )
    return device.index


def _restore(storage, location):
    """The deserializer: `storage` (CPU bytes of one record) for a tpu location, marked with its
    device; the loader's `TypedStorage` wrap uploads it (`_typed_init`). None for any other
    location (the next deserializer's)."""
    index = _device_index(location)
    if index is None:
        return None
    if storage.device.type != "cpu":
        return None
    _patch_typed_storage()
    setattr(storage, _MARK, _Target(index))
    return storage


def _patch_typed_storage() -> None:
    """`TypedStorage(wrap_storage=marked bytes, dtype=d)` (the loader's wrap of each restored
    record) wraps the bytes uploaded to their tpu device as `d` instead. Any other wrap is
    unchanged."""
    global _original_typed_init
    if _original_typed_init is not None:
        return
    _original_typed_init = original = torch.storage.TypedStorage.__init__

    def __init__(self, *args, device=None, dtype=None, wrap_storage=None, _internal=False):
        if wrap_storage is not None and dtype is not None:
            target = getattr(wrap_storage, _MARK, None)
            if target is not None:
                wrap_storage = _upload(wrap_storage, dtype, target)
        original(self, *args, device=device, dtype=dtype, wrap_storage=wrap_storage, _internal=_internal)

    __init__.__doc__ = original.__doc__
    torch.storage.TypedStorage.__init__ = __init__


def _upload(storage, dtype: torch.dtype, target: _Target):
    """A tpu storage on tpu:`target.index` holding the CPU bytes `storage` as elements of
    `dtype` (made once per dtype)."""
    made = target.made.get(dtype)
    if made is not None:
        return made
    from torchtpu.device import _storage

    _load_device()  # the kernels and the first-tensor patches: the loader makes tensors next
    nbytes = storage.nbytes()
    itemsize = dtype.itemsize
    if nbytes % itemsize:
        raise RuntimeError(
            f"torchtpu: a saved storage of {nbytes} bytes is not whole elements of {dtype} ({itemsize} bytes each)"
        )
    if getattr(storage, "_torch_load_uninitialized", False) or torch.serialization._serialization_tls.skip_data:
        # The legacy format's loader reads the bytes afterwards (`_set_from_file`); `skip_data`
        # reads none. The storage holds no device memory until it is written or read.
        made = _storage.new_tensor((nbytes // itemsize,), dtype, None, target.index)
    else:
        made = _storage.from_host(_as_elements(storage, dtype), target.index)
    made = target.made[dtype] = made.untyped_storage()
    return made


def _as_elements(storage, dtype: torch.dtype) -> torch.Tensor:
    """The CPU bytes `storage` as a 1-D tensor of `dtype` (sharing them)."""
    host = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    return host if dtype == torch.uint8 else host.view(dtype)
