"""`flex_attention` through torchtpu: the higher-order op's `score_mod` and `mask_mod` subgraphs
turned into one masked attention program.

PyTorch compiles `flex_attention` with Inductor, whose Triton and C++ templates fuse the
subgraphs into a flash-attention kernel. torchtpu has no such template: where a graph Dynamo
hands the backend holds `torch.ops.higher_order.flex_attention`, the op is replaced, before
AOTAutograd traces the graph, by PyTorch's own dense reference (`math_attention`, what the op
runs eagerly on CPU): the scores `q @ k^T * scale`, `score_mod` and `mask_mod` applied to them
through `vmap` over the batch, head, query and key indices (so the subgraphs become elementwise
ATen ops over broadcast index tensors), fully masked rows made zero, a safe softmax, `@ v`, and
the log-sum-exp and row maxima the op also returns. AOTAutograd then traces that into the ATen
graph the compiler lowers and differentiates it for training (the op's backward,
`flex_attention_backward`, never appears). The BlockMask's block-sparse structure is not used
to skip work: the mask is evaluated densely (as the CPU reference does), so the scores matrix
is materialised, `[B, H, Q, KV]`.

Eagerly (no `torch.compile`), `flex_attention` on tpu tensors runs the same reference, op by
op, as it does on CPU; PyTorch's device check refuses tpu until `allow_tpu_tensors()` (run at
the first tpu tensor) adds it.
"""

from __future__ import annotations

import importlib

import torch

_PATCHED_MARK = "_torchtpu_patched"


def _hop():
    return getattr(torch.ops.higher_order, "flex_attention", None)


def dense_flex_attention(
    query,
    key,
    value,
    score_mod,
    block_mask,
    scale,
    kernel_options,
    score_mod_other_buffers=(),
    mask_mod_other_buffers=(),
):
    """The op's outputs (attention, log-sum-exp and row maxima, both in log2 units as the op
    returns them) from PyTorch's dense reference, laid out as the op lays them out."""
    # The module, not the op object `torch._higher_order_ops` exports under the same name.
    hop = importlib.import_module("torch._higher_order_ops.flex_attention")
    out, lse, max_scores = hop.math_attention(
        query,
        key,
        value,
        score_mod,
        block_mask,
        scale,
        kernel_options,
        score_mod_other_buffers,
        mask_mod_other_buffers,
    )
    return hop._permute_strides(out, query.stride()), lse, max_scores


def decompose(gm: torch.fx.GraphModule) -> int:
    """Replaces every `flex_attention` call of a Dynamo graph by `dense_flex_attention` (the
    subgraphs stay the graph's submodules, passed as before), in the graph and in the bodies of
    its other higher-order ops (activation checkpointing's `wrap_body_*`, TorchTitan's); returns
    how many."""
    hop = _hop()
    if hop is None:
        return 0
    total = 0
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        count = 0
        for node in module.graph.nodes:
            if node.op == "call_function" and node.target is hop:
                node.target = dense_flex_attention
                count += 1
        if count:
            module.recompile()
            total += count
    return total


def allow_tpu_tensors() -> None:
    """PyTorch's `flex_attention` refuses inputs of a device it does not list
    (`_validate_device`: CUDA, CPU, XPU, HPU, MPS). tpu tensors pass; others get PyTorch's own
    check (idempotent)."""
    from torch.nn.attention import flex_attention as api

    original = getattr(api, "_validate_device", None)
    if original is None or getattr(original, _PATCHED_MARK, False):
        return

    def _validate_device(query, key, value):
        if query.device.type == "tpu":
            return None
        return original(query, key, value)

    _validate_device.__doc__ = original.__doc__
    _validate_device.__wrapped__ = original
    setattr(_validate_device, _PATCHED_MARK, True)
    api._validate_device = _validate_device
