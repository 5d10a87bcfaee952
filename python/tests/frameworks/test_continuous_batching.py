"""Hugging Face continuous batching (`generate_batch`, the manager API) on tpu, in strict mode,
DeferAndFuse and with transformers' compile configs, against `generate()` on the CPU; and on
the CPU in a process where torchtpu is installed but tpu is not the accelerator.

Greedy decoding: every token must equal the CPU's. Continuous batching runs the model on its
manager's background thread, through paged attention (`sdpa_paged`) over a KV cache that
transformers allocates as bytes and views as the model's dtype."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from models import tiny_llama
from paths import TESTS

import torchtpu
from torchtpu.device import _state

transformers = pytest.importorskip("transformers")
from transformers import CompileConfig, GenerationConfig  # noqa: E402
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402

PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13], [20, 21]]
NEW_TOKENS = 4


def generation_config() -> GenerationConfig:
    return GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0)


def cb_config(**overrides) -> ContinuousBatchingConfig:
    # A small paged cache: the default sizes it from the device's free memory (here the host's).
    return ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=64, page_size=16, **overrides)


@pytest.fixture(scope="module")
def expected() -> list[list[int]]:
    """Each prompt's greedy tokens from plain `generate()` on the CPU, one prompt at a time."""
    model = tiny_llama.model().eval()
    out = []
    for prompt in PROMPTS:
        ids = model.generate(torch.tensor([prompt]), generation_config=generation_config())
        out.append(ids[0, len(prompt) :].tolist())
    return out


def tokens(results: dict) -> list[list[int]]:
    return [results[f"req_{i}"].generated_tokens for i in range(len(PROMPTS))]


def test_torch_tpu_is_a_real_module():
    import types

    assert isinstance(torch.tpu, types.ModuleType)
    assert torch.tpu.__name__ == "torch.tpu"
    assert torch.get_device_module("tpu") is torch.tpu
    assert torch.tpu.device_count() >= 1 and callable(torch.tpu.synchronize)


# transformers' two attention forms for continuous batching: "sdpa" and "paged|eager" (what it
# makes of a model loaded with "eager").
@pytest.mark.parametrize("mode,attn", [("strict", "sdpa"), ("strict", "eager"), ("defer_and_fuse", "sdpa")])
def test_generate_batch_on_tpu(expected, mode, attn, monkeypatch):
    # The model runs on the manager's thread, whose eager state is its own: it starts in the
    # default mode, which TORCHTPU_EAGER_MODE sets at import (here set directly).
    monkeypatch.setattr(_state, "DEFAULT_MODE", mode)
    model = tiny_llama.model(attn_implementation=attn).eval().to("tpu")
    results = model.generate_batch(
        inputs=PROMPTS, generation_config=generation_config(), continuous_batching_config=cb_config()
    )
    assert tokens(results) == expected
    # Paged attention and the cache's byte views run as device programs: no CPU fallback
    # (TORCHTPU_FALLBACK=error would have failed the requests).
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_generate_batch_compiled_on_tpu(expected):
    before = torchtpu.stats()
    model = tiny_llama.model().eval().to("tpu")
    compiled = CompileConfig(backend="tpu", fullgraph=False)
    config = cb_config(varlen_compile_config=compiled, decode_compile_config=compiled)
    results = model.generate_batch(
        inputs=PROMPTS, generation_config=generation_config(), continuous_batching_config=config
    )
    assert tokens(results) == expected
    after = torchtpu.stats()
    assert after["graphs_compiled"] > before["graphs_compiled"]
    assert after["graphs_fallback"] == before["graphs_fallback"]


def test_manager_api_on_tpu(expected):
    model = tiny_llama.model().eval().to("tpu")
    manager = model.init_continuous_batching(
        generation_config=generation_config(), continuous_batching_config=cb_config()
    )
    manager.start()
    try:
        ids = [manager.add_request(prompt, request_id=f"r{i}") for i, prompt in enumerate(PROMPTS)]
        got = {}
        for _ in ids:
            result = manager.get_result(timeout=120)
            assert result is not None, "the manager gave no result within 120 s"
            got[result.request_id] = result.generated_tokens
    finally:
        manager.stop(block=True, timeout=60)
    assert [got[i] for i in ids] == expected


CPU_CHILD = r"""
import json, sys, torch
sys.path[:0] = sys.argv[1:3]
from models import tiny_llama
from test_continuous_batching import PROMPTS, cb_config, generation_config
assert torch.tpu.__name__ == "torch.tpu"  # torchtpu is installed and registered
# What torch answers without torchtpu: torch.cpu on a CPU build, torch.cuda (unavailable) on a CUDA one.
assert torch.get_device_module().__name__ in ("torch.cpu", "torch.cuda") and not torch.accelerator.is_available()
model = tiny_llama.model().eval()
results = model.generate_batch(inputs=PROMPTS, generation_config=generation_config(), continuous_batching_config=cb_config())
print(json.dumps([results[f"req_{i}"].generated_tokens for i in range(len(PROMPTS))]))
"""


def test_cpu_continuous_batching_unchanged_by_torchtpu(expected):
    """A CPU program in a process where torchtpu is installed and tpu is not the accelerator
    (TORCHTPU_DEVICE unset, the CPU plugin): transformers asks `torch.get_device_module()`
    which accelerator there is and must get what it gets without torchtpu (`torch.cpu`, or
    `torch.cuda` on a CUDA build), not `torch.tpu`."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHTPU_DEVICE"}
    here = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run(
        [sys.executable, "-c", CPU_CHILD, here, str(TESTS)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    import json

    assert json.loads(run.stdout.strip().splitlines()[-1]) == expected
