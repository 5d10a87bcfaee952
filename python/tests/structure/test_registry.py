"""The op registry (compiler/src/registry/table.rs) is the one list of what torchtpu knows per
op: Python's supported set and its decomposition table are derived from it, and an op that
is both decomposed in Python and lowered must say in the registry which one wins."""

from __future__ import annotations

import torch

from torchtpu import _C
from torchtpu.compiled.decompositions import base_name, decomposition_table, registry_policies


def _decomposed() -> set[str]:
    return {base_name(op) for op in decomposition_table() if isinstance(op, torch._ops.OpOverload)}


def test_supported_set_is_the_registry():
    lowered = [e["name"] for e in _C.op_registry() if e["lowered"]]
    assert _C.supported_ops() == lowered
    assert len(lowered) == len(set(lowered))


def test_every_op_both_decomposed_and_lowered_has_a_policy():
    """Fails when PyTorch (or torchtpu) starts decomposing an op the registry lowers, or the
    registry lowers an op AOTAutograd decomposes, without the registry saying which wins."""
    policies = registry_policies()
    undecided = sorted(op for op in _decomposed() if policies.get(op) == "none")
    assert not undecided, f"decomposed in Python and lowered, with no decomposition policy in the registry: {undecided}"


def test_lowering_policy_keeps_the_op_whole():
    policies = registry_policies()
    taken = sorted(op for op in _decomposed() if policies.get(op) == "lowering")
    assert not taken, f"the registry says the lowering wins, but Python decomposes: {taken}"
    assert policies["aten.hardtanh"] == "lowering"  # the core table would decompose it


def test_python_policy_is_not_stale():
    """An op marked "python" must have a decomposition in the table (else the mark is stale and
    the lowering is what runs)."""
    decomposed = _decomposed()
    stale = sorted(op for op, p in registry_policies().items() if p == "python" and op not in decomposed)
    assert not stale, f"registry says Python decomposes these, but no decomposition is taken: {stale}"


def test_traits_are_reported():
    by_name = {e["name"]: e for e in _C.op_registry()}
    assert by_name["aten.add"]["traits"] == ["elementwise"]
    assert by_name["aten.view"]["traits"] == ["view"]
    assert "random" in by_name["aten.native_dropout"]["traits"]
    assert by_name["aten.exp"]["param"] == "stablehlo.exponential"
    assert not by_name["aten.bernoulli"]["lowered"]


def test_check_lowerable_names_line_op_and_reason():
    text = """graph @g(%x: f32[4]) -> (f32[4], f32[4]) {
  %0 = aten.round.decimals(%x) {decimals = 3} : f32[4]
  %1 = aten.exp.default(%0) : f32[4]
  return %0, %1
}
"""
    assert _C.check_lowerable(text) == [(2, "aten.round", "round with decimals != 0")]


def test_the_dtype_table_is_the_irs_own():
    """`IR_DTYPES` is read from the IR's list (`_C.ir_dtypes`, Rust's `DType::ALL`), not kept
    beside it: each IR dtype once, each a torch dtype a tensor can have, in both directions."""
    from torchtpu.ir_text import IR_DTYPES, TORCH_DTYPES

    names = [name for name, _ in _C.ir_dtypes()]
    assert len(set(names)) == len(names) == 12
    assert list(IR_DTYPES.values()) == names
    for dtype, name in IR_DTYPES.items():
        assert torch.empty(0, dtype=dtype).dtype is dtype
        assert TORCH_DTYPES[name] is dtype
    assert {torch.float32: "f32", torch.bfloat16: "bf16", torch.bool: "bool"}.items() <= IR_DTYPES.items()
