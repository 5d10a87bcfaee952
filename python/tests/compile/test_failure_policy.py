"""What each kind of failure does (policy.py), through torch.compile: an unsupported node runs
eagerly alone while the rest compiles; a torchtpu bug (here injected with
TORCHTPU_INJECT_FAULT) is never silent: strict raises InternalError, normal use warns, names a
reproduction that replays the failure, and runs eagerly. Outputs are compared with eager
(rtol=atol=1e-5: float32 elementwise math)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
from compiled import fresh_torchtpu  # noqa: F401 - fixture

import torchtpu
from torchtpu.errors import FallbackError, InternalError, UnsupportedError

TOL = dict(rtol=1e-5, atol=1e-5)
pytestmark = pytest.mark.allow_fallback  # these tests fall back on purpose


def _round_in_the_middle(x):
    y = torch.sin(x) * 2
    z = torch.round(y, decimals=2)  # a form the registry's legality check refuses
    return torch.exp(z) + y


def test_refused_form_runs_eagerly_alone(fresh_torchtpu):
    x = torch.randn(6, 4)
    out = torch.compile(_round_in_the_middle, backend="torchtpu", options={"strict": False})(x)
    torch.testing.assert_close(out, _round_in_the_middle(x), **TOL)
    s = torchtpu.stats()
    # The round node alone ran eagerly; the regions before and after it were compiled.
    assert s["fallback_ops"] == {"aten.round": 1}, s
    assert s["partitions_compiled"] == 2 and s["partitions_eager"] == 0, s
    assert [r["kind"] for r in s["fallback_reasons"]] == ["unsupported"]
    assert "round with decimals != 0" in s["fallback_reasons"][0]["message"]


def test_refused_form_raises_under_strict(fresh_torchtpu):
    with pytest.raises(UnsupportedError) as info:
        torch.compile(_round_in_the_middle, backend="torchtpu", options={"strict": True})(torch.randn(3))
    assert "round with decimals != 0" in str(info.value)
    assert info.value.ops == ["aten.round"]
    assert isinstance(info.value, FallbackError)


def _complex_fill(x):
    # A complex Scalar argument: the IR has no complex attributes (the exporter refuses it).
    return torch.full((4,), 1j, dtype=torch.complex64) * x + torch.cos(x)


def test_exporter_refusal_runs_that_node_eagerly(fresh_torchtpu):
    x = torch.randn(4)
    out = torch.compile(_complex_fill, backend="torchtpu", options={"strict": False})(x)
    torch.testing.assert_close(out, _complex_fill(x), **TOL)
    s = torchtpu.stats()
    assert s["fallback_kinds"] == {"unsupported": 1}, s["fallback_reasons"]
    assert s["partitions_compiled"] >= 1, s


def _mlp_step(x):
    return torch.relu(x @ x.T + 1).sum(0)


@pytest.mark.parametrize("stage", ["lower", "compile", "execute"])
def test_injected_fault_raises_internal_error_under_strict(fresh_torchtpu, monkeypatch, stage):
    monkeypatch.setenv("TORCHTPU_INJECT_FAULT", stage)
    with pytest.raises(InternalError) as info:
        torch.compile(_mlp_step, backend="torchtpu", options={"strict": True})(torch.randn(3, 3))
    assert info.value.stage == stage
    assert not isinstance(info.value, FallbackError)


@pytest.mark.parametrize("stage", ["lower", "compile", "execute"])
def test_injected_fault_warns_with_a_repro_that_replays(fresh_torchtpu, monkeypatch, tmp_path, stage):
    monkeypatch.setenv("TORCHTPU_INJECT_FAULT", stage)
    monkeypatch.setenv("TORCHTPU_REPRO_DIR", str(tmp_path))
    x = torch.randn(3, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(_mlp_step, backend="torchtpu", options={"strict": False})(x)
    torch.testing.assert_close(out, _mlp_step(x), **TOL)
    bug = [str(w.message) for w in caught if "torchtpu bug" in str(w.message)]
    assert bug, [str(w.message) for w in caught]
    s = torchtpu.stats()
    assert s["fallback_kinds"] == {"internal": 1}, s["fallback_reasons"]
    repro = s["fallback_reasons"][0]["repro"]
    assert repro in bug[0] and os.path.isfile(repro) and repro.endswith(".repro.py")
    # The script replays the failure (exit 1) with the fault it recorded ...
    env = {k: v for k, v in os.environ.items() if k != "TORCHTPU_INJECT_FAULT"}
    replay = subprocess.run([sys.executable, repro], env=env, capture_output=True, text=True, timeout=300)
    assert replay.returncode == 1, replay.stderr
    assert "reproduced: InternalError" in replay.stderr
    # ... and the IR beside it compiles and runs once the fault is gone.
    from torchtpu.replay import replay as run_replay

    monkeypatch.delenv("TORCHTPU_INJECT_FAULT")
    assert run_replay(repro.removesuffix(".repro.py") + ".ir") == 0


def test_fallback_env_makes_the_default_strict(fresh_torchtpu, monkeypatch):
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")
    with pytest.raises(UnsupportedError):
        torch.compile(_round_in_the_middle, backend="torchtpu")(torch.randn(3))
    torch._dynamo.reset()
    monkeypatch.setenv("TORCHTPU_FALLBACK", "eager")
    torch.compile(_round_in_the_middle, backend="torchtpu")(torch.randn(3))
    assert torchtpu.stats()["fallback_kinds"] == {"unsupported": 1}


def test_late_refusal_names_its_line_for_the_partitioner():
    """A refusal only emission finds (a complex operand brought to a real compute dtype) is
    an UnsupportedError carrying the node's IR line, which the backend maps to its FX node."""
    from torchtpu import _C
    from torchtpu.compiled.exporter import Exported
    from torchtpu.compiled.fallback import unsupported_node

    text = """graph @g(%z: c64[4]) -> (f32[4]) {
  %0 = aten.relu.default(%z) : f32[4]
  return %0
}
"""
    assert _C.check_lowerable(text) == []  # nothing the legality checks can see
    with pytest.raises(UnsupportedError) as info:
        _C.compile(text, "canonicalize", True)
    assert info.value.op == "aten.relu" and info.value.line == 2, vars(info.value)
    marker = object()
    exported = Exported(text, [], [], False, [], {2: marker})
    assert unsupported_node(info.value, exported) is marker


def test_explain_reports_refused_forms():
    report = torchtpu.explain(_round_in_the_middle, torch.randn(4))
    assert report["fallback_ops"] == {"aten.round": 1}, report
    assert any("round with decimals != 0" in r for r in report["reasons"])


def test_refused_form_under_dynamic_shapes(fresh_torchtpu):
    """A symbolic graph is specialised per size; a refused node makes that size re-trace to
    static shapes and partition around it, instead of running the whole graph eagerly."""
    # Buckets off: sizes 5 and 7 would share bucket 8's program (one refusal, not two).
    f = torch.compile(
        _round_in_the_middle, backend="torchtpu", dynamic=True, options={"strict": False, "buckets": False}
    )
    for n in (5, 7):
        x = torch.randn(n, 3)
        torch.testing.assert_close(f(x), _round_in_the_middle(x), **TOL)
    s = torchtpu.stats()
    assert s["fallback_ops"] == {"aten.round": 2}, s["fallback_reasons"]
    assert set(s["fallback_kinds"]) == {"unsupported"}
    assert s["partitions_compiled"] == 4, s


def test_a_user_input_error_from_torchtpus_own_ir_is_internal(fresh_torchtpu, monkeypatch):
    """An IRError raised for IR the exporter wrote is a torchtpu bug, not a user error:
    recorded as internal with a repro (and raised as InternalError under strict)."""
    from torchtpu import policy
    from torchtpu.errors import IRError

    with pytest.raises(InternalError):
        policy.on_failure(IRError("invalid IR: 2:3: ..."), "graph g", True)
    with pytest.warns(RuntimeWarning, match="torchtpu bug"):
        policy.on_failure(
            IRError("invalid IR: 2:3: ..."), "graph g", False, ir_text="graph @g() -> () {\n  return\n}\n"
        )
    (entry,) = torchtpu.stats()["fallback_reasons"]
    assert entry["kind"] == "internal" and entry["repro"].endswith(".repro.py")


@pytest.mark.parametrize("stage", ["trace", "export"])
def test_a_failure_in_a_python_stage_goes_through_the_policy(fresh_torchtpu, monkeypatch, stage):
    """A failure while tracing or exporting (injected as the RuntimeError PyTorch's own tracing
    raises) never escapes the policy as BackendCompilerFailed: strict raises InternalError
    naming the stage, normal use warns and runs eagerly."""
    monkeypatch.setenv("TORCHTPU_INJECT_FAULT", stage)
    with pytest.raises(InternalError) as info:
        torch.compile(_mlp_step, backend="torchtpu", options={"strict": True})(torch.randn(3, 3))
    assert info.value.stage == stage, info.value
    torch._dynamo.reset()
    x = torch.randn(3, 3)
    with pytest.warns(RuntimeWarning, match="torchtpu bug"):
        out = torch.compile(_mlp_step, backend="torchtpu", options={"strict": False})(x)
    torch.testing.assert_close(out, _mlp_step(x), **TOL)
    s = torchtpu.stats()
    assert s["fallback_kinds"] == {"internal": 1}, s["fallback_reasons"]


def test_tensor_subclass_weights_compile_through_aotautograd(fresh_torchtpu):
    """A module whose weight is a traceable tensor subclass (torchao's quantized weights are
    such) takes AOTAutograd's path, which unwraps it: no `aot_export` refusal escapes, nothing
    falls back, and the output is eager's."""
    from torch.testing._internal.two_tensor import TwoTensor

    lin = torch.nn.Linear(8, 4).eval()
    w = lin.weight.detach()
    lin.weight = torch.nn.Parameter(TwoTensor(w, w.clone()), requires_grad=False)
    x = torch.randn(2, 8)
    with torch.no_grad():
        want = lin(x)
        got = torch.compile(lin, backend="torchtpu", options={"strict": True})(x)
    torch.testing.assert_close(got.a if isinstance(got, TwoTensor) else got, want.a, **TOL)
    assert torchtpu.stats()["fallback_reasons"] == []
