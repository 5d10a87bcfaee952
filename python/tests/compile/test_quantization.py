"""torchao's int8 configurations on torchtpu, against torchao's own eager result on the CPU: a
small Llama quantized with `Int8WeightOnlyConfig` (int8 weights, per-row scales: convert, mm,
mul) and `Int8DynamicActivationInt8WeightConfig` (W8A8: activations quantized per row at run
time, int8 x int8 summed in int32 by `_int_mm` on CPU tensors and by
`out_dtype(mm, int32, ...)` on tpu tensors), through `torch.compile` (strict: nothing falls
back) and on the `tpu` device in strict and DeferAndFuse modes (TORCHTPU_FALLBACK=error, so no
op runs on the CPU).

Tolerances, against torchao's eager logits on the same weights and tokens:
- int8 weight-only: within 1e-3 of the logits' largest magnitude (the issue's 1e-3 relative):
  the weights are exact int8, and float sums in another order move logits by ~1e-7 relative.
- W8A8: within 2e-2 of the largest magnitude, every position's argmax equal. Activations are
  rounded to int8 per row at run time, so a 1-ulp difference in a float input to that rounding
  (XLA sums a norm's squares in another order than ATen) flips a value by one step of its row's
  scale, ~1/127 of the row's largest activation, in one product term; a flip in an early layer
  spreads. Measured here: at most 0.9e-2, mean 1.7e-3, argmax identical.
"""

from __future__ import annotations

import copy
import os
import re
import warnings

import pytest
import torch
from models import tiny_llama

import torchtpu

# torchao is imported by the tests that use it, not at collection: every pytest worker collects
# every file, and torchao registers its ops and pytree nodes process-wide when imported.
CONFIGS = ("int8_weight_only", "w8a8_dynamic", "int8_everything")
IDS = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))


@pytest.fixture(autouse=True)
def _quiet():
    torchtpu.reset_stats()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' and torchao's notices
        yield


def _quantized(config: str) -> torch.nn.Module:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    model = tiny_llama.model(seed=0, hidden_size=64, intermediate_size=128, use_cache=False).eval()
    if config == "int8_everything":
        # The embedding too (int8, one scale per row: torchao's IntxWeightOnlyConfig), as a user
        # shrinking a model to fit does; the linear layers as int8_weight_only.
        from torchao.quantization import IntxWeightOnlyConfig
        from torchao.quantization.granularity import PerAxis

        is_embedding = lambda m, _fqn: isinstance(m, torch.nn.Embedding)  # noqa: E731
        quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)), filter_fn=is_embedding)
        config = "int8_weight_only"
    make = {"int8_weight_only": Int8WeightOnlyConfig, "w8a8_dynamic": Int8DynamicActivationInt8WeightConfig}[config]
    quantize_(model, make())
    return model


TOLERANCE = {"int8_weight_only": 1e-3, "w8a8_dynamic": 2e-2, "int8_everything": 1e-3}


def _assert_logits_close(got: torch.Tensor, want: torch.Tensor, config: str):
    got = got.float().cpu()
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=0, atol=TOLERANCE[config] * scale)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("config", CONFIGS)
def test_compiled_quantized_decoder_matches_torchao_eager(config, tmp_path, monkeypatch):
    model = _quantized(config)
    with torch.no_grad():
        want = model(IDS).logits
        monkeypatch.setenv("TORCHTPU_DUMP_DIR", str(tmp_path))
        got = torch.compile(model, backend="torchtpu", options={"strict": True})(IDS).logits
    _assert_logits_close(got, want, config)
    # The weights reach the compiled program as int8 inputs, not as float copies.
    dumped = "".join(p.read_text() for p in tmp_path.rglob("*.ir"))
    assert ": i8[" in dumped, sorted(p.name for p in tmp_path.rglob("*"))
    if config == "int8_everything":
        # `quantized-embedding`: the int8 table's rows are looked up, then dequantized.
        compiled = "".join(p.read_text() for p in tmp_path.rglob("*.ir") if not p.name.endswith(".input.ir"))
        assert re.search(r"aten\.embedding\.default\(%arg\d+, %arg\d+\) \{[^}]*\} : i8\[2, 12, 64\]", compiled), (
            compiled
        )
    assert torchtpu.stats()["fallback_reasons"] == []


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("config", CONFIGS)
def test_quantized_decoder_on_the_device_matches_torchao_eager(config, mode):
    model = _quantized(config)
    with torch.no_grad():
        want = model(IDS).logits
        on_tpu = copy.deepcopy(model).to("tpu")
        with torchtpu.eager.mode(mode):
            got = on_tpu(IDS.to("tpu")).logits
            got = got.cpu()
    _assert_logits_close(got, want, config)
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


@pytest.mark.parametrize("config", CONFIGS)
def test_compiled_quantized_decoder_on_tpu_tensors_matches_torchao_eager(config):
    """On tpu tensors torchao's W8A8 matmul is `out_dtype(mm, int32, x_i8, w_i8)`."""
    model = _quantized(config)
    with torch.no_grad():
        want = model(IDS).logits
        on_tpu = copy.deepcopy(model).to("tpu")
        got = torch.compile(on_tpu, backend="torchtpu", options={"strict": True})(IDS.to("tpu")).logits
    _assert_logits_close(got, want, config)
    assert torchtpu.stats()["fallback_reasons"] == []


@pytest.mark.parametrize("tokens", [1, 12])
def test_the_quantized_linear_form_follows_the_rows_and_is_explained(tokens, capsys):
    """Decode (one token per sequence: 2 rows) runs each int8 weight-only layer as torchtpu's
    host kernel (the weight read as int8); a 12-token prefill (24 rows, above
    `KERNEL_MAX_ROWS` = 16) converts the weight once and uses XLA's dot. Both match torchao's
    eager logits (int8 tolerance), and `torchtpu.explain` names the form of every layer: 7 per
    decoder layer (q, k, v, o, gate, up, down) and the LM head."""
    model = _quantized("int8_weight_only")
    ids = IDS[:, :tokens]
    with torch.no_grad():
        want = model(ids).logits
        got = torch.compile(model, backend="torchtpu", options={"strict": True})(ids).logits
        report = torchtpu.explain(model, ids)
    _assert_logits_close(got, want, "int8_weight_only")
    form = "host-kernel" if tokens == 1 else "dequantize"
    layers = report["quantized_linears"]
    assert len(layers) == 2 * 7 + 1 and all(q.startswith(f"{form} [{2 * tokens}, ") for q in layers), layers
    assert f"int8 linear layers: {form} x15" in capsys.readouterr().out


def test_explain_names_the_w8a8_integer_dots():
    model = _quantized("w8a8_dynamic")
    with torch.no_grad():
        report = torchtpu.explain(model, IDS[:, :1])
    assert report["quantized_linears"] and all(q.startswith("integer-dot [2, ") for q in report["quantized_linears"])


def test_int8_weights_stay_int8_on_the_device():
    model = _quantized("int8_weight_only").to("tpu")
    layer = model.model.layers[0].mlp.gate_proj.weight
    inner = [getattr(layer, n) for n in layer.__tensor_flatten__()[0]]
    dtypes = {t.dtype for t in inner}
    assert torch.int8 in dtypes and all(t.device.type == "tpu" for t in inner), dtypes
    assert os.environ.get("TORCHTPU_FALLBACK") == "error"  # conftest: no silent CPU fallback


def test_graphs_with_int8_inputs_default_to_the_quantized_xla_options():
    """An inference graph with int8 inputs (torchao's weights) compiles with
    `QUANTIZED_INFERENCE_XLA_OPTIONS` (YNNPACK's elementwise fusions too, measured in
    docs/quantization.md): given explicitly, the same graph is a cache hit."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    from torchtpu.compiled.backend import INFERENCE_XLA_OPTIONS, QUANTIZED_INFERENCE_XLA_OPTIONS

    assert QUANTIZED_INFERENCE_XLA_OPTIONS != INFERENCE_XLA_OPTIONS
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48)).eval()
    quantize_(model, Int8WeightOnlyConfig())
    x = torch.randn(3, 32)
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(torch.compile(model, backend="torchtpu")(x), want, rtol=1e-5, atol=1e-5)
        misses = torchtpu.stats()["cache_misses"]
        torch._dynamo.reset()
        options = {"xla_options": dict(QUANTIZED_INFERENCE_XLA_OPTIONS)}
        torch.compile(model, backend="torchtpu", options=options)(x)
        assert torchtpu.stats()["cache_misses"] == misses
