"""The Python package is importable and its `_C` is the Rust extension, wired to the compiler."""

import importlib.machinery
import pathlib

import pytest

import torchtpu
from torchtpu import _C

MLP = """
graph @mlp(%x: f32[4, 16], %w: f32[8, 16], %b: f32[8]) -> (f32[4, 8]) {
  %t = aten.permute.default(%w) {dims = [1, 0]} : f32[16, 8]
  %tt = aten.permute.default(%t) {dims = [1, 0]} : f32[8, 16]
  %t2 = aten.permute.default(%tt) {dims = [1, 0]} : f32[16, 8]
  %y = aten.addmm.default(%b, %x, %t2) : f32[4, 8]
  %y2 = aten.addmm.default(%b, %x, %t) : f32[4, 8]
  %s = aten.add.Tensor(%y, %y2) : f32[4, 8]
  return %s
}
"""


def test_c_is_a_compiled_extension_module():
    path = pathlib.Path(_C.__file__)
    assert any(path.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES), path
    assert torchtpu.__version__ == _C.__version__ == "0.1.0"


def test_passes_are_listed_from_the_rust_registry():
    names = [name for name, _ in torchtpu.list_passes()]
    assert names == ["canonicalize", "cse", "dce", "fold-constants", "fuse-softmax", "fuse-matmuls", "form-regions", "schedule-memory"]
    assert all(desc for _, desc in torchtpu.list_passes())


def test_pipeline_runs_in_rust():
    out = torchtpu.run_pipeline(MLP, "canonicalize,cse,dce")
    assert out.count("aten.addmm.default") == 1
    assert out.count("aten.permute.default") == 1
    assert "aten.add.Tensor(%1, %1)" in out
    # Printing is canonical: feeding the output back changes nothing.
    assert torchtpu.canonical_ir(out) == out


def test_errors_cross_the_boundary_as_value_errors():
    with pytest.raises(ValueError, match=r"parse error at 1:14: unknown dtype 'f33'"):
        torchtpu.canonical_ir("graph @g(%a: f33[2]) -> () { return }")
    # Verifier errors name line:col of the node in the text.
    with pytest.raises(ValueError, match=r"invalid IR: 2:2: node %0 \(aten.mm.default\)"):
        torchtpu.canonical_ir("graph @g(%a: f32[2, 3]) -> () {\n %0 = aten.mm.default(%a, %a) : f32[2, 2]\n return\n}")
    with pytest.raises(ValueError, match=r"unknown pass 'nope'"):
        torchtpu.run_pipeline(MLP, "nope")


def test_torch_is_installed_alongside():
    torch = pytest.importorskip("torch")
    assert torch.__version__.startswith("2.15.0")
