"""Runs one ATen op through torchtpu (IR -> StableHLO -> XLA CPU plugin) and through PyTorch
eager on the same inputs, and compares. The IR's result types are taken from eager's results,
so the lowering is checked against PyTorch's dtype and shape semantics too."""

from __future__ import annotations

import torch

from torchtpu import _C
from torchtpu.compiled.exporter import attr_text, tensor_type  # the exporter's own IR writers
from torchtpu.ir_text import IR_DTYPES, TORCH_DTYPES, GraphWriter


def to_wire(t: torch.Tensor):
    # Raw little-endian bytes without numpy (not installed): reinterpret as uint8.
    flat = t.contiguous().reshape(-1)
    data = bytes(flat.view(torch.uint8).tolist()) if flat.numel() else b""
    return (IR_DTYPES[t.dtype], list(t.shape), data)


def from_wire(w) -> torch.Tensor:
    dtype, dims, data = w
    td = TORCH_DTYPES[dtype]
    if td == torch.bfloat16:
        return torch.frombuffer(bytearray(data), dtype=torch.int16).view(torch.bfloat16).reshape(dims).clone()
    if len(data) == 0:
        return torch.empty(dims, dtype=td)
    return torch.frombuffer(bytearray(data), dtype=td).reshape(dims).clone()


def run_op(op: str, inputs: list[torch.Tensor], attrs: dict, expected) -> list[torch.Tensor]:
    """Builds a one-node graph `op(inputs) {attrs}` typed like `expected`, runs it."""
    outs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    w = GraphWriter("case")
    operands = [w.param(tensor_type(t)) for t in inputs]
    attr_pairs = [(k, attr_text(v)) for k, v in sorted(attrs.items())]
    types = [tensor_type(o) for o in outs]
    if len(outs) == 1:
        rets = [w.op(op, operands, attr_pairs, types[0])]
    else:
        r = w.op(op, operands, attr_pairs, types)
        rets = [w.result(r, i) for i in range(len(outs))]
    ir = w.text(rets, types)
    # No passes: the op under test must reach the lowering as written.
    wires = _C.run_ir(ir, [to_wire(t) for t in inputs], "")
    return [from_wire(w) for w in wires]


def assert_matches(got: list[torch.Tensor], expected, rtol: float, atol: float, what: str):
    outs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(got) == len(outs), what
    for i, (g, e) in enumerate(zip(got, outs)):
        assert g.dtype == e.dtype, f"{what} result {i}: dtype {g.dtype} vs eager {e.dtype}"
        assert g.shape == e.shape, f"{what} result {i}: shape {tuple(g.shape)} vs eager {tuple(e.shape)}"
        if e.dtype.is_floating_point:
            torch.testing.assert_close(
                g, e, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what} result {i}: {m}"
            )
        else:
            assert torch.equal(g, e), f"{what} result {i}:\n got {g}\nwant {e}"
