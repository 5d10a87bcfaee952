"""accelerate on tpu: the patches torchtpu makes to accelerate, for `from_pretrained(...,
device_map="auto")` and for HF `Trainer` and `Accelerator` in one process or across processes.

1. `PartialState.default_device` (the device of a one-process run: where `Trainer` and
`Accelerator` put the model and every batch) knows MPS, CUDA and a list of vendors' devices,
not `torch.accelerator`; where tpu is the accelerator it answered "cpu", and Trainer's batches
stayed on the CPU beside a model on tpu. Patched, it answers the current tpu device.
(transformers' `TrainingArguments.device` already answers tpu:0 from `torch.accelerator`.)

2. accelerate sizes the devices a model is spread over with `accelerate.utils.modeling.
get_max_memory`, which asks only the device families it knows (CUDA, NPU, XPU, ...). Where tpu is
the accelerator it finds no device and gives the whole model to the CPU. Patched, its answer for
`max_memory=None` lists the tpu devices by integer key, as accelerate lists GPUs
(`torch.device(0)` is tpu:0 where tpu is the accelerator), with their free memory
(`torch.tpu.mem_get_info`). The CPU plugin's devices keep their buffers in the host's memory,
one pool they all share: it is listed once, on the current device, and not again as CPU memory
(accelerate does the same for an integrated GPU). A given `max_memory` has its integer keys
checked against the tpu devices (accelerate checks them against CUDA's and warns that device 0
does not exist).

3. Across processes (`torchrun`, `accelerate launch --multi_gpu`), accelerate picks its distributed
type from the device families it knows (`PartialState._prepare_backend`): for tpu it found none,
answered `DistributedType.NO`, and every rank trained alone on tpu:0. Patched, where a launcher set
`LOCAL_RANK` and the run is not on the CPU, it answers `MULTI_GPU` (accelerate's type for "one
device per process, DDP over a process group": its DDP, FSDP, barrier and RNG-broadcast paths
are device-generic) with the backend `"cpu:gloo,tpu:tpu_dist"` (docs/distributed.md), and
`PartialState.set_device` puts rank r on tpu:(local rank mod device count) instead of asking
`torch.cuda`.

Nothing changes unless the tpu device registered and is the accelerator, and no CUDA device
exists: then the patches are applied to accelerate's modules when they are imported (or at
registration, if they already were). Every other call goes to accelerate's own code.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

import torch

_MODULE = "accelerate.utils.modeling"
_STATE_MODULE = "accelerate.state"
_FUNCTION = "get_max_memory"
# Where accelerate's function is bound by another name once imported.
_BINDINGS = (("accelerate.utils", "get_max_memory"), ("transformers.integrations.accelerate", "accelerate_max_memory"))
_PATCHED_MARK = "_torchtpu_patched"


def tpu_is_the_accelerator() -> bool:
    accelerator = torch.accelerator.current_accelerator()
    return accelerator is not None and accelerator.type == "tpu" and torch.cuda.device_count() == 0


def tpu_max_memory() -> dict:
    """What accelerate's `get_max_memory()` would say had it known the tpu devices."""
    from torchtpu import _C
    from torchtpu.device import _devices, _memory

    if _C.platform_name() == "cpu":
        current = _devices.native_guard().current_device()
        return {current: _memory.memory_info(current)[0]}
    return {i: _memory.memory_info(i)[0] for i in range(_devices.exact_count())}


def tpu_checked_memory(max_memory: dict) -> dict:
    """accelerate's cleaning of a given `max_memory` (sizes such as "10GiB" to bytes, GPU keys
    first), with the integer keys checked against the tpu devices rather than CUDA's."""
    from accelerate.utils import convert_file_size_to_int

    from torchtpu.device import _devices

    # In place, as accelerate does (transformers compares the user's dict with the result after).
    for k, v in max_memory.items():
        if isinstance(v, str):
            max_memory[k] = convert_file_size_to_int(v)
    out = max_memory
    devices = sorted(k for k in out if isinstance(k, int))
    count = _devices.exact_count()
    missing = [k for k in devices if not 0 <= k < count]
    if missing:
        raise ValueError(f"torchtpu: max_memory names tpu devices {missing}; this process has tpu:0..tpu:{count - 1}")
    order = devices + [k for k in ("mps", "cpu", "disk") if k in out]
    unknown = [k for k in out if k not in order]
    if unknown:
        raise ValueError(
            f"Device {unknown[0]} is not recognized, available devices are integers (tpu), 'cpu' and 'disk'"
        )
    return {k: out[k] for k in order}


def _patched(original):
    def get_max_memory(max_memory=None):
        if not tpu_is_the_accelerator():
            return original(max_memory)
        return tpu_max_memory() if max_memory is None else tpu_checked_memory(max_memory)

    get_max_memory.__doc__ = original.__doc__
    get_max_memory.__wrapped__ = original
    setattr(get_max_memory, _PATCHED_MARK, True)
    return get_max_memory


def _patch_state() -> None:
    state = sys.modules.get(_STATE_MODULE)
    if state is None:
        return
    prop = state.PartialState.__dict__.get("default_device")
    if prop is None or getattr(prop.fget, _PATCHED_MARK, False):
        _patch_backend(state)
        return
    original = prop.fget

    def default_device(self):
        if not tpu_is_the_accelerator():
            return original(self)
        return torch.device("tpu", torch.accelerator.current_device_index())

    default_device.__doc__ = original.__doc__
    default_device.__wrapped__ = original
    setattr(default_device, _PATCHED_MARK, True)
    state.PartialState.default_device = property(default_device)
    _patch_backend(state)


# The default group where tpu is the accelerator: CPU tensors to gloo, tpu tensors to tpu_dist.
DIST_BACKEND = "cpu:gloo,tpu:tpu_dist"


def _launched_on_tpu(cpu: bool) -> bool:
    """A launcher started this process as one of several ranks, on tpu."""
    return not cpu and int(os.environ.get("LOCAL_RANK", -1)) != -1 and tpu_is_the_accelerator()


def _patch_backend(state) -> None:
    cls = state.PartialState
    prepare = cls.__dict__.get("_prepare_backend")
    if prepare is None or getattr(prepare, _PATCHED_MARK, False):
        return

    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        chosen, distributed_type = prepare(self, cpu, sagemaker_dp, backend)
        if distributed_type != state.DistributedType.NO or sagemaker_dp or not _launched_on_tpu(cpu):
            return chosen, distributed_type
        return backend or DIST_BACKEND, state.DistributedType.MULTI_GPU

    _prepare_backend.__doc__ = prepare.__doc__
    _prepare_backend.__wrapped__ = prepare
    setattr(_prepare_backend, _PATCHED_MARK, True)
    cls._prepare_backend = _prepare_backend

    set_device = cls.__dict__["set_device"]

    def tpu_set_device(self):
        if self.device is not None or self.distributed_type != state.DistributedType.MULTI_GPU:
            return set_device(self)
        if not _launched_on_tpu(self._cpu):
            return set_device(self)
        from torchtpu.device import _devices

        self.device = torch.device("tpu", self.local_process_index % _devices.exact_count())
        torch.accelerator.set_device_index(self.device)

    tpu_set_device.__doc__ = set_device.__doc__
    tpu_set_device.__wrapped__ = set_device
    setattr(tpu_set_device, _PATCHED_MARK, True)
    cls.set_device = tpu_set_device


def _patch_loaded() -> None:
    _patch_state()
    modeling = sys.modules.get(_MODULE)
    if modeling is None:
        return
    original = getattr(modeling, _FUNCTION, None)
    if original is None or getattr(original, _PATCHED_MARK, False):
        return
    patched = _patched(original)
    setattr(modeling, _FUNCTION, patched)
    for name, attr in _BINDINGS:
        other = sys.modules.get(name)
        if other is not None and getattr(other, attr, None) is original:
            setattr(other, attr, patched)


class _Loader(importlib.abc.Loader):
    """Runs accelerate's own loader, then patches the module it made."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patch_loaded()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in (_MODULE, _STATE_MODULE):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_installed = False


def install() -> None:
    """Patches accelerate now if it is loaded, else when it is imported (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    _patch_loaded()  # what is loaded already; the rest when it is imported
    if _MODULE not in sys.modules or _STATE_MODULE not in sys.modules:
        sys.meta_path.insert(0, _Finder())
