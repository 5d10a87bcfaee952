"""The Python package is importable and its `_C` is the Rust extension, wired to the compiler."""

import importlib.machinery
import os
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
    assert names == [
        "canonicalize",
        "cse",
        "dce",
        "fold-constants",
        "fuse-softmax",
        "fuse-matmuls",
        "quantized-linear",
        "quantized-embedding",
        "host-matmul",
        "form-regions",
        "assign-layouts",
        "propagate-sharding",
        "schedule-memory",
    ]
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


def test_user_ir_errors_are_ir_errors_with_positions():
    from torchtpu.errors import InternalError, IRError, OptionsError

    with pytest.raises(IRError) as e:
        torchtpu.canonical_ir("graph @g(%a: f33[2]) -> () { return }")
    assert (e.value.line, e.value.col) == (1, 14) and isinstance(e.value, ValueError)
    with pytest.raises(IRError) as e:
        torchtpu.run_pipeline(
            "graph @g(%a: f32[2, 3]) -> () {\n %0 = aten.mm.default(%a, %a) : f32[2, 2]\n return\n}", "cse"
        )
    assert (e.value.line, e.value.col) == (2, 2)
    with pytest.raises(OptionsError, match="malformed pass pipeline"):
        torchtpu.run_pipeline(MLP, "cse{")
    # Not a user's mistake: IR the backend hands to compile is internal when it does not parse.
    with pytest.raises(InternalError) as e:
        _C.compile("graph @g(%a: f33[2]) -> () { return }")
    assert e.value.stage == "parse" and not isinstance(e.value, ValueError)


def test_compile_returns_a_program_that_says_how_it_was_compiled():
    program = _C.compile(MLP)
    assert program.source in ("compiled", "memory", "disk")
    again = _C.compile(MLP)
    assert again.source == "memory" and again.graph_cache_hit
    assert again.memory == program.memory
    m = program.memory
    for key in (
        "peak_bytes",
        "peak_at",
        "input_bytes",
        "output_bytes",
        "allocated_bytes",
        "buffers",
        "donated_inputs",
        "donated_bytes",
        "peak_bytes_without_donation",
    ):
        assert key in m, (key, m)
    assert m["peak_at"].startswith("%") and m["input_bytes"] == (4 * 16 + 8 * 16 + 8) * 4
    assert m["peak_bytes"] <= m["peak_bytes_without_donation"]
    assert "compile" in again.timings and "passes" not in again.timings and again.timings["total"] >= 0
    ir, hlo = _C.lower_ir(MLP, with_ir=True)
    assert "aten.addmm.default" in ir and "stablehlo" in hlo and _C.lower_ir(MLP) == hlo


def test_unsupported_ops_name_op_node_and_line():
    from torchtpu.errors import UnsupportedError

    with pytest.raises(UnsupportedError) as e:
        _C.compile("graph @g(%x: f32[2]) -> (f32[2]) {\n  %0 = aten.xyz.default(%x) : f32[2]\n  return %0\n}\n")
    assert (e.value.op, e.value.node, e.value.line) == ("aten.xyz", "%0", 2)


def test_program_run_checks_every_input_in_rust():
    import torch

    from torchtpu.errors import InputError

    program = _C.compile(
        "graph @g(%x: f32[2, 3]) -> (f32[2, 3]) {\n  %0 = aten.neg.default(%x) : f32[2, 3]\n  return %0\n}\n"
    )
    x = torch.arange(6.0).reshape(2, 3)
    (out,) = program.run([x])
    assert torch.equal(torch.from_dlpack(out), -x)
    # A DLPack capsule works too, and stays unconsumed.
    capsule = torch.utils.dlpack.to_dlpack(x)
    assert torch.equal(torch.from_dlpack(program.run([capsule])[0]), -x)
    bad = {
        "dtype": x.double(),
        "shape": x.reshape(3, 2),
        "strides": torch.arange(6.0).reshape(3, 2).t(),
        "non-tensor": 3,
    }
    for what, t in bad.items():
        with pytest.raises(InputError) as e:
            program.run([t])
        assert e.value.index == 0, what
    with pytest.raises(InputError, match="expected 1 inputs, got 2"):
        program.run([x, x])
    with pytest.raises(InputError, match="expected 1 inputs, got 0"):
        program.run([])
    # A tensor that is a size-1 slice or an offset view is fine when it is dense.
    base = torch.arange(12.0)
    assert torch.equal(torch.from_dlpack(program.run([base[6:].reshape(2, 3)])[0]), -base[6:].reshape(2, 3))


@pytest.mark.parametrize("stage", ["lower", "compile", "execute"])
def test_injected_faults_raise_internal_errors_at_their_stage(stage, monkeypatch):
    import torch

    from torchtpu.errors import InternalError

    text = "graph @inject(%x: f32[3]) -> (f32[3]) {\n  %0 = aten.cos.default(%x) : f32[3]\n  return %0\n}\n"
    program = _C.compile(text)  # cached at both levels: the fault must still fire
    monkeypatch.setenv(_C.FAULT_ENV, stage)
    with pytest.raises(InternalError) as e:
        if stage == "execute":
            program.run([torch.zeros(3)])
        else:
            _C.compile(text)
    assert e.value.stage == stage and "fault injected" in str(e.value)
    monkeypatch.delenv(_C.FAULT_ENV)
    assert torch.equal(torch.from_dlpack(_C.compile(text).run([torch.zeros(3)])[0]), torch.ones(3))


def test_a_rust_panic_is_an_internal_error():
    from torchtpu.errors import InternalError

    with pytest.raises(InternalError, match="a deliberate panic") as e:
        _C._panic_for_tests()
    assert e.value.stage == "execute"


def test_a_missing_plugin_is_a_plugin_error():
    import os
    import subprocess
    import sys

    code = (
        "from torchtpu import _C\n"
        "from torchtpu.errors import PluginError\n"
        "try:\n"
        "    _C.compile('graph @g(%x: f32[2]) -> (f32[2]) {\\n  return %x\\n}\\n')\n"
        "except PluginError as e:\n"
        "    print('PluginError', e)\n"
    )
    env = dict(os.environ, TORCHTPU_PJRT_PLUGIN="/nonexistent/pjrt_plugin.so")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("PluginError") and "/nonexistent/pjrt_plugin.so" in r.stdout, r.stdout


def test_cpu_engine_keeps_freed_host_memory_unless_told_not_to():
    """Starting the engine on the CPU plugin tunes glibc's allocator to keep freed blocks
    (execution buffers are then reused, not mapped and zeroed afresh every call): a freed
    64 MiB tensor stays in the process. TORCHTPU_MALLOC_TUNING=0 leaves glibc as it was, and
    the block goes back to the system."""
    import subprocess
    import sys

    code = (
        "import torch, torchtpu\n"
        "from torchtpu import _C\n"
        "_C.device_count()  # starts the engine\n"
        "def rss():\n"
        "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS:')) * 1024\n"
        "x = torch.empty(64 << 20, dtype=torch.uint8).fill_(1)\n"
        "held = rss()\n"
        "del x\n"
        "print(held - rss())\n"
    )
    released = {}
    for tuning in ("1", "0"):
        env = dict(os.environ, TORCHTPU_MALLOC_TUNING=tuning)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        released[tuning] = int(r.stdout.split()[-1])
    assert released["1"] < 8 << 20, released  # kept for reuse
    assert released["0"] > 48 << 20, released  # unmapped: glibc's default for large blocks
