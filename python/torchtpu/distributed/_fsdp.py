"""FSDP2's `fully_shard` of a module whose states are still on the CPU, onto a tpu mesh.

`fully_shard` moves each parameter and buffer to the mesh's device first
(`torch.distributed.fsdp._fully_shard._fsdp_init._move_states_to_device`), with
`tensor.data = tensor.to(device)`, which PyTorch's C++ allows only between tensor types it finds
compatible (`has_compatible_shallow_copy_type` knows CPU, CUDA, XPU, HPU, MPS and MTIA, never a
PrivateUse1 device): for tpu it raised "incompatible tensor type". HF Trainer and accelerate hand
`fully_shard` a CPU model (`fsdp="full_shard"`). For a tpu mesh the CPU states are moved by
swapping in their tpu copies (`torch.utils.swap_tensors`, as FSDP2 itself does for tensor
subclasses and `Module._apply` for tpu, docs/eager.md), which keeps each Parameter object, so
the module, tied weights and an optimizer made before see the moved tensors. Every other device
goes to FSDP2's own code unchanged.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

_PATCHED_MARK = "_torchtpu_patched"


def _swap_to(tensor: torch.Tensor, device: torch.device) -> None:
    with torch.no_grad():  # no autograd reference to the old tensor
        moved = tensor.to(device)
        if isinstance(tensor, nn.Parameter):
            moved = nn.Parameter(moved, requires_grad=tensor.requires_grad)
    torch.utils.swap_tensors(tensor, moved)


def install() -> None:
    """Wraps FSDP2's state move (idempotent); FSDP2 is imported here, not at `import torch`
    (`torch.distributed.fsdp` loads with `torch.distributed` already)."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_init
    except ImportError:  # a torch without FSDP2
        return
    original = getattr(_fsdp_init, "_move_states_to_device", None)
    if original is None or getattr(original, _PATCHED_MARK, False):
        return
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    def _move_states_to_device(params, buffers, device):
        if device.type == "tpu":
            for t in itertools.chain(params, buffers):
                if t.device.type == "cpu" and not isinstance(t, DTensor) and not is_traceable_wrapper_subclass(t):
                    _swap_to(t, device)
        return original(params, buffers, device)

    _move_states_to_device.__doc__ = original.__doc__
    _move_states_to_device.__wrapped__ = original
    setattr(_move_states_to_device, _PATCHED_MARK, True)
    _fsdp_init._move_states_to_device = _move_states_to_device
