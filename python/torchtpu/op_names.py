"""ATen op names as the IR and the op registry write them (`aten.add.Tensor`, base `aten.add`).
A leaf: the exporter, the collectives and the fallback all name ops with it."""

from __future__ import annotations

import torch


def op_name(target) -> str | None:
    """`aten.add.Tensor` for an OpOverload, None for anything else."""
    if isinstance(target, torch._ops.OpOverload):
        ns, rest = target.name().split("::", 1)
        name, _, overload = rest.partition(".")
        return f"{ns}.{name}.{overload or 'default'}"
    return None


def base_name(target) -> str | None:
    full = op_name(target)
    return None if full is None else ".".join(full.split(".")[:2])
