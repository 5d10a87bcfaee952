"""The decomposition table AOTAutograd uses: PyTorch's core ATen decompositions, minus the
ops torchtpu lowers whole (a fused lowering beats the decomposed form, see docs/lowering.md)."""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions

aten = torch.ops.aten

# Lowered whole by torchtpu even where the core table would decompose them.
KEEP_WHOLE = (aten.hardtanh,)


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    for packet in KEEP_WHOLE:
        for overload in packet.overloads():
            table.pop(getattr(packet, overload), None)
    return table
