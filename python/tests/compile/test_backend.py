"""torch.compile(model, backend="torchtpu") against eager on the same inputs.

Tolerances: f32 inference outputs rtol=1e-5, atol=1e-5; losses and parameters after a few
optimizer steps rtol=1e-4, atol=1e-5 (XLA and ATen reduce and multiply in different orders,
and differences grow a little each step). Every test also checks through torchtpu.stats()
that the compiled path really ran (executions > 0) and that nothing fell back unexpectedly.
"""

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from compiled import assert_compiled_cleanly, fresh_torchtpu  # noqa: F401 - the fixture
from models.small import CNN, MLP, HandAttention, MHABlock
from paths import BIN

import torchtpu
from torchtpu import _C
from torchtpu.compiled.fallback import FallbackError

FWD = dict(rtol=1e-5, atol=1e-5)
TRAIN = dict(rtol=1e-4, atol=1e-5)


pytestmark = pytest.mark.usefixtures("fresh_torchtpu")


MODELS = {
    "mlp": (MLP, (6, 12)),
    "mha_block": (MHABlock, (2, 7, 16)),
    "hand_attention": (HandAttention, (2, 6, 16)),
    "cnn": (CNN, (2, 3, 10, 10)),
}


# The default pipeline, and every pass (fusion and scheduling included): both must match eager.
ALL_PASSES = "canonicalize,fold-constants,assign-layouts,cse,fuse-softmax,fuse-matmuls,dce,form-regions,schedule-memory"
PIPELINES = {"default": {}, "all_passes": {"passes": ALL_PASSES}}


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("name", MODELS)
def test_inference_matches_eager(name, pipeline):
    cls, shape = MODELS[name]
    model = cls().eval()
    compiled = torch.compile(model, backend="torchtpu", options=PIPELINES[pipeline])
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), model(x), **FWD)
    assert_compiled_cleanly()


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("name", MODELS)
def test_training_steps_match_eager(name, pipeline):
    cls, shape = MODELS[name]
    eager = cls().train()
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="torchtpu", options=PIPELINES[pipeline])
    # SGD with momentum: its update is linear in the gradient. (Adam divides by sqrt(v), which
    # turns mathematically-zero gradients, such as attention's key bias, into +-lr steps
    # decided by rounding noise, in eager as much as here.)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    with torch.no_grad():
        out_shape = copy.deepcopy(eager).eval()(torch.randn(*shape)).shape  # no running-stat update
    for step in range(3):
        x = torch.randn(*shape)
        target = torch.randn(out_shape)
        losses = []
        for model, opt in ((eager, opt_e), (compiled, opt_m)):
            opt.zero_grad()
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], **TRAIN, msg=f"loss at step {step}")
    for (pname, p_e), p_m in zip(eager.named_parameters(), mine.parameters()):
        torch.testing.assert_close(p_m, p_e, **TRAIN, msg=f"parameter {pname}")
    for (bname, b_e), b_m in zip(eager.named_buffers(), mine.buffers()):
        # BatchNorm running statistics are mutated inputs, copied back after each step.
        torch.testing.assert_close(b_m, b_e, **TRAIN, msg=f"buffer {bname}")
    assert_compiled_cleanly()


def test_fused_softmax_is_stable_where_the_hand_written_one_overflows():
    def naive_softmax(x):
        e = x.exp()
        return e / e.sum(-1, keepdim=True)

    x = torch.tensor([[1000.0, 0.0], [1.0, 2.0]])
    compiled = torch.compile(naive_softmax, backend="torchtpu", options={"passes": "fuse-softmax,dce"})
    got = compiled(x)
    # Eager overflows to inf/inf = NaN on the first row; the fused softmax subtracts the max.
    assert torch.isnan(naive_softmax(x)[0, 0])
    torch.testing.assert_close(got, torch.softmax(x, -1), **FWD)
    assert_compiled_cleanly()


def test_stats_report_peak_memory_per_graph():
    model = MLP().eval()
    with torch.no_grad():
        torch.compile(model, backend="torchtpu")(torch.randn(6, 12))
    graphs = torchtpu.stats()["graphs"]
    assert len(graphs) == 1, graphs
    (info,) = graphs.values()
    weights = sum(p.numel() * 4 for p in model.parameters())
    # Inputs (weights + x) are resident; the peak adds at least the output and an activation.
    assert info["input_bytes"] == weights + 6 * 12 * 4, info
    assert info["peak_bytes"] > info["input_bytes"] + 6 * 5 * 4, info
    assert info["peak_at"].startswith("%"), info


def test_donation_keeps_eager_semantics():
    """BatchNorm training mutates its running statistics: with donation asked for (what
    platforms that donate get by default), the compiled graph donates those inputs (and others
    of an output's type) to its outputs. The caller's tensors that are not mutated keep their
    values, the mutated ones get eager's new values, and outputs match."""
    model = CNN().train()
    mine = copy.deepcopy(model)
    compiled = torch.compile(mine, backend="torchtpu", options={"donate": True})
    x = torch.randn(2, 3, 10, 10)
    x_before = x.clone()
    weights_before = [p.detach().clone() for p in mine.parameters()]
    torch.testing.assert_close(compiled(x), model(x), **TRAIN)
    torch.testing.assert_close(compiled(x), model(x), **TRAIN)  # a second call: fresh buffers
    assert torch.equal(x, x_before)
    for p, before in zip(mine.parameters(), weights_before):
        assert torch.equal(p.detach(), before)
    for (name, b_e), b_m in zip(model.named_buffers(), mine.buffers()):
        torch.testing.assert_close(b_m, b_e, **TRAIN, msg=f"buffer {name}")
    graphs = torchtpu.stats()["graphs"]
    assert any(g.get("donated_inputs", 0) > 0 for g in graphs.values()), graphs
    for g in graphs.values():
        assert g["peak_bytes"] <= g["peak_bytes_without_donation"], g
    assert_compiled_cleanly()


def test_donation_follows_the_option_and_defaults_to_the_platform(tmp_path):
    """`donate` True / False turns aliasing on / off; unset, it is the platform's default, which
    on the CPU plugin (inputs read in place, never donated) is off."""
    x = torch.randn(4, 4)
    aliased = {}
    for k, donate in enumerate((False, True, None)):
        options = {"dump_dir": str(tmp_path / str(k))} | ({} if donate is None else {"donate": donate})
        compiled = torch.compile(lambda a, k=k: a * (k + 2), backend="torchtpu", options=options)
        torch.testing.assert_close(compiled(x), x * (k + 2))
        (hlo,) = (tmp_path / str(k)).glob("*.stablehlo.mlir")
        aliased[donate] = "tf.aliasing_output = 0 : i32" in hlo.read_text()
    assert aliased[False] is False and aliased[True] is True
    assert _C.donates_by_default() is False  # the tests run on the CPU plugin
    assert aliased[None] is False


def test_graph_break_gives_two_compiled_graphs():
    def f(x):
        y = torch.sin(x) * 2
        if y.sum().item() > 0:  # data-dependent branch: a graph break
            y = y + 1
        return torch.cos(y)

    compiled = torch.compile(f, backend="torchtpu")
    for _ in range(3):
        x = torch.randn(8)
        torch.testing.assert_close(compiled(x), f(x), **FWD)
    s = torchtpu.stats()
    assert s["graphs_seen"] >= 2, s
    assert_compiled_cleanly()


def test_constants_created_in_forward():
    def f(x):
        return x * torch.tensor([1.0, -2.0, 3.0]) + torch.arange(3)

    x = torch.randn(4, 3)
    torch.testing.assert_close(torch.compile(f, backend="torchtpu")(x), f(x), **FWD)
    assert_compiled_cleanly()


def test_outputs_keep_eager_strides():
    def f(x):
        return (x * 2).t()

    x = torch.randn(3, 4)
    got = torch.compile(f, backend="torchtpu")(x)
    want = f(x)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    y = torch.randn(2, 3, 4)
    got = torch.compile(lambda a: (a + 1).permute(2, 0, 1), backend="torchtpu")(y)
    want = (y + 1).permute(2, 0, 1)
    assert got.stride() == want.stride() and torch.equal(got, want)
    # An expanded (stride-0) output comes back as values, contiguous.
    z = torch.randn(3, 1)
    got = torch.compile(lambda a: (a * 2).expand(3, 4), backend="torchtpu")(z)
    assert torch.equal(got, (z * 2).expand(3, 4))
    assert_compiled_cleanly()


def test_dynamic_batch_sizes_compile_once_per_size():
    model = MLP().eval()
    compiled = torch.compile(model, backend="torchtpu")
    with torch.no_grad():
        for b in [3, 5, 7, 5, 7, 5]:
            x = torch.randn(b, 12)
            torch.testing.assert_close(compiled(x), model(x), **FWD)
        compiled_after = torchtpu.stats()["graphs_compiled"]
        for _ in range(3):
            compiled(torch.randn(7, 12))
    assert torchtpu.stats()["graphs_compiled"] == compiled_after, "a known size must not recompile"
    assert compiled_after <= 4
    assert_compiled_cleanly()


def test_graph_with_a_tensor_constant_at_a_second_batch_size():
    """The second size makes Dynamo's graph symbolic, and AOTAutograd hands it over with its
    fake mode still active: the tensor constant (a real tensor) is fingerprinted outside it.
    It raised 'Please convert all Tensors to FakeTensors' (gpt2 at batch 16 after batch 1)."""

    def f(x):
        return x * torch.tensor([1.0, 2.0]) + 1

    compiled = torch.compile(f, backend="torchtpu", options={"strict": True})
    for b in (2, 3, 4):
        x = torch.randn(b, 2)
        torch.testing.assert_close(compiled(x), f(x), **FWD)
    assert_compiled_cleanly()


def _with_unsupported(x):
    return torch.special.airy_ai(torch.tanh(x) * 0.5) + x.exp()


@pytest.mark.allow_fallback
def test_unsupported_op_falls_back_and_is_recorded():
    x = torch.randn(5, 3)
    torch.testing.assert_close(torch.compile(_with_unsupported, backend="torchtpu")(x), _with_unsupported(x), **FWD)
    s = torchtpu.stats()
    assert s["fallback_ops"] == {"aten.special_airy_ai": 1}, s
    assert s["partitions_compiled"] >= 1 and s["executions"] >= 1, s
    assert [r["kind"] for r in s["fallback_reasons"]] == ["unsupported"], s["fallback_reasons"]
    assert "aten.special_airy_ai" in s["fallback_reasons"][0]["message"]
    assert s["fallback_kinds"] == {"unsupported": 1}


def test_strict_raises_naming_the_op():
    compiled = torch.compile(_with_unsupported, backend="torchtpu", options={"strict": True})
    with pytest.raises(Exception, match=r"aten\.special_airy_ai"):
        compiled(torch.randn(3))


def test_dropout_in_training_and_eval():
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.25))
    compiled = torch.compile(model, backend="torchtpu")
    x = torch.ones(32, 64)
    y = compiled(x)
    base = model[0](x)
    kept = (y != 0).float().mean().item()
    assert 0.70 < kept < 0.80, kept  # p = 0.25, as in eager
    torch.testing.assert_close(y[y != 0], (base / 0.75)[y != 0], **FWD)
    model.eval()
    torch.testing.assert_close(compiled(x), base, **FWD)


def test_dump_dir_reproduces_stablehlo_byte_for_byte(tmp_path):
    model = MLP().eval()
    with torch.no_grad():
        torch.compile(model, backend="torchtpu", options={"dump_dir": str(tmp_path)})(torch.randn(2, 12))
    irs = sorted(tmp_path.glob("*.input.ir"))
    assert irs, list(tmp_path.iterdir())
    opt = BIN / "torchtpu-opt"
    for input_ir in irs:
        stem = input_ir.name[: -len(".input.ir")]
        want = (tmp_path / f"{stem}.stablehlo.mlir").read_text()
        donate = ["--donate-inputs"] if _C.donates_by_default() else []  # the platform's default, as compiled
        got = subprocess.run(
            [opt, tmp_path / f"{stem}.ir", "--emit=stablehlo", *donate], check=True, capture_output=True, text=True
        ).stdout
        assert got == want
        passes = input_ir.read_text().splitlines()[0].removeprefix("// passes: ")
        replay = subprocess.run(
            [opt, input_ir, f"--pass-pipeline={passes}", "--emit=stablehlo", *donate],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert replay == want


def test_options_are_validated():
    f = torch.compile(lambda x: x + 1, backend="torchtpu", options={"bogus": 1})
    with pytest.raises(Exception, match="unknown torchtpu option"):
        f(torch.randn(2))
    torch._dynamo.reset()
    f = torch.compile(lambda x: x + 1, backend="torchtpu", options={"passes": "cse,nope"})
    with pytest.raises(Exception, match="unknown pass 'nope'"):
        f(torch.randn(2))


def test_xla_options_reach_xla_and_key_the_executable():
    """`xla_options` are XLA DebugOptions overrides sent with the compile: a name XLA does not
    know is its error (so the overrides reach it), a known one compiles a program of its own
    (a cache miss: the options are part of the executable's key) with eager's results."""
    x = torch.randn(16, 16)
    with pytest.raises(torchtpu.errors.CompileError, match="xla_cpu_no_such_option"):
        torch.compile(
            lambda a: a @ a,
            backend="torchtpu",
            options={"strict": True, "xla_options": {"xla_cpu_no_such_option": True}},
        )(x)
    torch._dynamo.reset()
    with pytest.raises(torchtpu.errors.CompileError, match="not a valid bool"):
        torch.compile(
            lambda a: a @ a,
            backend="torchtpu",
            options={"strict": True, "xla_options": {"xla_cpu_enable_fast_math": "yes"}},
        )(x)
    torch._dynamo.reset()
    for bad in ({"cpu_enable_fast_math": False}, {"xla_cpu_enable_fast_math": 1.5}, ["xla_cpu_enable_fast_math"]):
        with pytest.raises(torchtpu.errors.OptionsError, match="xla_options"):
            torch.compile(lambda a: a + 1, backend="torchtpu", options={"xla_options": bad})(x)
        torch._dynamo.reset()

    def f(a):
        return (a @ a.T).tanh() * 3

    misses = torchtpu.stats()["cache_misses"]
    torch.testing.assert_close(torch.compile(f, backend="torchtpu")(x), f(x), **FWD)
    torch._dynamo.reset()
    overridden = {"xla_options": {"xla_cpu_enable_fast_math": False, "xla_cpu_experimental_ynn_fusion_type": ""}}
    torch.testing.assert_close(torch.compile(f, backend="torchtpu", options=overridden)(x), f(x), **FWD)
    assert torchtpu.stats()["cache_misses"] == misses + 2, torchtpu.stats()


def test_custom_pipeline_is_used(tmp_path):
    f = torch.compile(lambda x: (x * 1) + 0.5, backend="torchtpu", options={"passes": "dce", "dump_dir": str(tmp_path)})
    torch.testing.assert_close(f(torch.ones(3)), torch.full((3,), 1.5))
    (ir,) = [p for p in tmp_path.glob("*.ir") if not p.name.endswith(".input.ir")]
    assert "aten.mul" in ir.read_text()  # canonicalize did not run, so x * 1 is still there


def test_explain_reports_fallback_ops_and_breaks(capsys):
    report = torchtpu.explain(_with_unsupported, torch.randn(4))
    assert report["fallback_ops"] == {"aten.special_airy_ai": 1}
    assert report["graph_breaks"] == 0
    assert "aten.special_airy_ai x1" in capsys.readouterr().out


def run_fresh(code: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")


def test_backend_found_by_entry_point_without_import():
    code = (
        "import sys, torch\n"
        "m = torch.nn.Linear(4, 2)\n"
        "x = torch.randn(3, 4)\n"
        "y = torch.compile(m, backend='torchtpu')(x)\n"
        "assert 'torchtpu' in sys.modules\n"
        "import torchtpu\n"
        "torch.testing.assert_close(y, m(x))\n"
        "print(torchtpu.stats()['executions'])\n"
    )
    r = run_fresh(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"


@pytest.mark.allow_fallback
def test_missing_plugin_is_a_clear_error():
    code = (
        "import torch\n"
        "f = torch.compile(lambda x: x * 2, backend='torchtpu', options={'strict': True})\n"
        "f(torch.ones(2))\n"
    )
    r = run_fresh(code, {"TORCHTPU_PJRT_PLUGIN": "/nonexistent/pjrt_plugin.so"})
    assert r.returncode != 0
    assert "/nonexistent/pjrt_plugin.so" in r.stderr
    assert "make setup" in r.stderr or "pip install" in r.stderr
    # Without strict, the graph runs eagerly with a warning and the right answer.
    code = (
        "import torch, warnings, torchtpu\n"
        "warnings.simplefilter('always')\n"
        "f = torch.compile(lambda x: x * 2, backend='torchtpu')\n"
        "assert f(torch.ones(2)).tolist() == [2.0, 2.0]\n"
        "print(torchtpu.stats()['graphs_fallback'])\n"
    )
    r = run_fresh(code, {"TORCHTPU_PJRT_PLUGIN": "/nonexistent/pjrt_plugin.so", "TORCHTPU_FALLBACK": "eager"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
    assert "/nonexistent/pjrt_plugin.so" in r.stderr


def test_fallback_error_type_is_exported():
    assert issubclass(FallbackError, RuntimeError)


def test_max_pool_values_only_matches_eager():
    """Inference max pooling reads no indices, so it lowers to a values-only window; NaN and
    -inf windows must still come out as eager's (NaN wins)."""
    x = torch.randn(2, 3, 9, 9)
    x[0, 0, 1, 1] = float("nan")
    x[1, 2, :3, :3] = float("-inf")
    fn = lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1) * 2  # noqa: E731
    compiled = torch.compile(fn, backend="torchtpu", options={"strict": True})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0, equal_nan=True)


def test_executor_checks_what_memory_safety_needs():
    """The per-call fast path reads raw addresses, so an input of the wrong size is a clear
    error (never a read past its memory), and a non-contiguous one is copied, not misread."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchtpu.compiled.executor import compile_exported
    from torchtpu.compiled.exporter import export
    from torchtpu.options import Options

    fn = lambda x, y: x * 2 + y  # noqa: E731
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    graph = compile_exported(export(make_fx(fn)(x, y), "checked"), Options.from_dict({"strict": True}), "checked")
    torch.testing.assert_close(graph(x, y), fn(x, y), rtol=0, atol=0)
    transposed = torch.randn(4, 3).t()
    torch.testing.assert_close(graph(transposed, y), fn(transposed, y), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=r"compiled for torch.float32\[3, 4\]"):
        graph(torch.randn(2, 4), y)
    with pytest.raises(RuntimeError, match="compiled for"):
        graph(x, torch.randn(3, 4, dtype=torch.float64))


def test_min_cut_partition_saves_no_transposed_weights(tmp_path):
    """With the min-cut partitioner (the default) the forward hands the backward no
    materialised views of its inputs (the transposed Linear weights the default partition
    saved): the backward reads the weights themselves. Gradients match eager either way."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5))
    x = torch.randn(16, 12)
    want = torch.autograd.grad(model(x).square().mean(), list(model.parameters()))
    outputs = {}
    for partitioner in ("default", "min_cut"):
        torch._dynamo.reset()
        mine = copy.deepcopy(model)
        dump = tmp_path / partitioner
        compiled = torch.compile(mine, backend="torchtpu", options={"partitioner": partitioner, "dump_dir": str(dump)})
        got = torch.autograd.grad(compiled(x).square().mean(), list(mine.parameters()))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **TRAIN)
        (fw,) = dump.glob("forward_*.input.ir")
        signature = next(line for line in fw.read_text().splitlines() if line.startswith("graph @"))
        outputs[partitioner] = signature.split("->")[1].count("[")
    # default saves t(W) of the last two layers (32x32 and 5x32) as outputs; min-cut does not.
    assert outputs["min_cut"] <= outputs["default"] - 2, outputs
    with pytest.raises(torchtpu.errors.OptionsError, match="partitioner"):
        torch.compile(lambda a: a + 1, backend="torchtpu", options={"partitioner": "greedy"})(x)


def test_inference_graphs_default_to_the_measured_xla_options():
    """Inference graphs without `xla_options` are compiled with `INFERENCE_XLA_OPTIONS`: the
    same graph with those options given explicitly is a cache hit, with none ({}) a new compile."""
    from torchtpu.compiled.backend import INFERENCE_XLA_OPTIONS

    x = torch.randn(8, 8)

    def f(a):
        return (a @ a).relu() + 2

    with torch.no_grad():
        torch.testing.assert_close(torch.compile(f, backend="torchtpu")(x), f(x), **FWD)
        misses = torchtpu.stats()["cache_misses"]
        torch._dynamo.reset()
        torch.compile(f, backend="torchtpu", options={"xla_options": dict(INFERENCE_XLA_OPTIONS)})(x)
        assert torchtpu.stats()["cache_misses"] == misses, "the default is INFERENCE_XLA_OPTIONS"
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(f, backend="torchtpu", options={"xla_options": {}})(x), f(x), **FWD)
        assert torchtpu.stats()["cache_misses"] == misses + 1


# (input shape, weight shape, stride, padding, dilation): weight gradients in each of the three
# forms of decompositions.convolution_backward, by batch x output positions: rows (<= 64, or a
# 1x1 kernel), patches (<= 256), the convolution (above), in 1-3 spatial dims.
CONV_GRAD_CASES = {
    "rows_stage4": ((1, 16, 2, 2), (8, 16, 3, 3), 1, 1, 1),
    "rows_strided": ((2, 6, 8, 8), (5, 6, 3, 3), 2, 1, 1),
    "rows_dilated_1d": ((3, 4, 9), (6, 4, 3), 1, 2, 2),
    "rows_1x1_large_map": ((4, 6, 12, 12), (5, 6, 1, 1), 2, 0, 1),
    "patches": ((2, 5, 10, 10), (4, 5, 3, 3), 1, 1, 1),
    "patches_3d": ((1, 3, 6, 6, 6), (4, 3, 2, 2, 2), 1, 0, 1),
    "convolution": ((4, 3, 12, 12), (4, 3, 3, 3), 1, 1, 1),
    "convolution_stride_remainder": ((5, 3, 18, 17), (4, 3, 3, 3), 2, 0, 1),
}


@pytest.mark.parametrize("case", CONV_GRAD_CASES)
def test_convolution_gradients_match_eager(case):
    """Input and weight gradients of a convolution against eager. The forms sum the same
    products in other orders: f32 rtol=1e-4, atol=1e-5."""
    from torchtpu.compiled.decompositions import _weight_grad_as_matmul

    xs, ws, stride, padding, dilation = CONV_GRAD_CASES[case]
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(xs)]

    def f(x, w, b):
        return conv(x, w, b, stride=stride, padding=padding, dilation=dilation)

    torch.manual_seed(0)
    x, w, b = (torch.randn(*s, requires_grad=True) for s in (xs, ws, ws[:1]))
    y = f(x, w, b)
    grad = torch.randn_like(y)
    form = _weight_grad_as_matmul(grad, w)
    assert form == (None if case.startswith("convolution") else case.split("_")[0]), form
    want = torch.autograd.grad(y, (x, w, b), grad)
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    got = torch.autograd.grad(torch.compile(f, backend="torchtpu")(*leaves), leaves, grad)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, **TRAIN)
    assert_compiled_cleanly()


def test_inference_graphs_without_mutation_skip_aotautograds_wrapper(monkeypatch):
    """An inference graph that mutates no input and returns no alias of one is compiled
    straight from the exported graph (no AOTAutograd runtime wrapper); a graph that mutates
    its input, a training graph and the option turned off take AOTAutograd's path. All match
    eager."""
    from torchtpu.compiled import backend

    taken = []
    real = backend._inference_without_wrapper

    def spy(*args):
        out = real(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(backend, "_inference_without_wrapper", spy)
    x = torch.randn(5)
    f = torch.compile(lambda t: (t * 2 + 1,), backend="torchtpu")
    torch.testing.assert_close(f(x)[0], x * 2 + 1)
    g = torch.compile(lambda t: t.relu() - 1, backend="torchtpu")  # a single output, not a tuple
    torch.testing.assert_close(g(x), x.relu() - 1)
    y, want = torch.zeros(3), torch.ones(3)
    torch.compile(lambda t: t.add_(1), backend="torchtpu")(y)
    torch.testing.assert_close(y, want)
    assert taken == [True, True, False], taken
    model = MLP()
    ref = copy.deepcopy(model)
    inp = torch.randn(4, 12)
    torch.compile(model, backend="torchtpu")(inp).sum().backward()
    ref(inp).sum().backward()
    assert taken[-1] is False  # parameters require grad: AOTAutograd's training path
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TRAIN)
    off = torch.compile(lambda t: t * 3, backend="torchtpu", options={"skip_aot_wrapper": False})
    before = len(taken)
    torch.testing.assert_close(off(x), x * 3)
    assert len(taken) == before  # not even tried
    assert_compiled_cleanly()
