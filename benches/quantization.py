"""torchao int8 weight-only on torchtpu against float32, one interleaved run (issue 31's table).

A Llama built from a config (hidden 768, 12 layers, 12 heads, 4 KV heads, vocabulary 32000:
~125M parameters, random weights), in four forms timed side by side in one process:
f32 eager, f32 under torchtpu, int8 (torchao) eager, int8 under torchtpu. int8: every linear
layer `Int8WeightOnlyConfig()` (int8, per-row scales) and the embedding
`IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))`. Figures:
- "decode": one token through the model (input [1, 1], no KV cache), ms per call;
- "prefill": 512 tokens through the model (input [1, 512]), ms per call;
- weight bytes held by the model (the quantized one: int8 data + scales) over f32's, and the
  same with the linear layers alone quantized;
- logits of int8 under torchtpu vs torchao's own eager int8, relative to the largest logit;
- greedy tokens (no KV cache) from PROMPTS prompts x NEW tokens, torchtpu int8 vs torchao eager;
- compiles after warm-up (torchtpu's graphs compiled during the timed calls).

    .venv/bin/python benches/quantization.py [--quick] [--phases decode,prefill] [--no-check]

Writes benches/results/quantization.json; docs/quantization.md cites it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def build(layers: int):
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=layers,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        use_cache=False,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def weight_bytes(model) -> int:
    total = 0
    for p in model.parameters():
        if hasattr(p, "__tensor_flatten__"):
            names, _ = p.__tensor_flatten__()
            total += sum(getattr(p, n).numel() * getattr(p, n).element_size() for n in names)
        else:
            total += p.numel() * p.element_size()
    return total


def timed(fn, x, reps):
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="2 layers, fewer repetitions (a smoke run)")
    p.add_argument("--phases", default="decode,prefill", help="which timings to take (decode, prefill)")
    p.add_argument("--no-check", action="store_true", help="timings only: no logits or greedy comparison")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    import torchtpu
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis

    layers, reps, prompts, new = (2, 3, 2, 4) if args.quick else (12, 7, 10, 32)
    f32 = build(layers)
    int8 = copy.deepcopy(f32)
    # Every linear layer int8 with per-row scales; the embedding too (int8, one scale per row),
    # as a user shrinking the model to fit does. Linears alone leave the 24.6M-parameter
    # embedding in f32 (the weight bytes of that are reported too).
    linears_only = copy.deepcopy(f32)
    quantize_(linears_only, Int8WeightOnlyConfig())
    embedding_int8 = IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
    quantize_(int8, embedding_int8, filter_fn=lambda m, _fqn: isinstance(m, torch.nn.Embedding))
    quantize_(int8, Int8WeightOnlyConfig())
    forms = {
        "f32 eager": f32,
        "f32 torchtpu": torch.compile(f32, backend="torchtpu"),
        "int8 eager (torchao)": int8,
        "int8 torchtpu": torch.compile(int8, backend="torchtpu"),
    }
    inputs = {"decode": torch.randint(0, 32000, (1, 1)), "prefill": torch.randint(0, 32000, (1, 512))}
    inputs = {k: v for k, v in inputs.items() if k in args.phases.split(",")}
    result = {"layers": layers, "parameters": sum(p.numel() for p in f32.parameters())}
    with torch.no_grad():
        for phase, x in inputs.items():
            for m in forms.values():  # warm-up: compiles
                m(x)
            before = torchtpu.stats()["graphs_compiled"] if "graphs_compiled" in torchtpu.stats() else None
            samples = {k: [] for k in forms}
            for _ in range(reps):  # interleaved
                for k, m in forms.items():
                    samples[k] += timed(m, x, 1)
            after = torchtpu.stats()["graphs_compiled"] if before is not None else None
            ms = {k: statistics.median(v) for k, v in samples.items()}
            result[phase] = {
                "ms": ms,
                "int8_torchtpu_over_f32_torchtpu": ms["int8 torchtpu"] / ms["f32 torchtpu"],
                "int8_torchtpu_over_f32_eager": ms["int8 torchtpu"] / ms["f32 eager"],
                "compiles_during_timing": None if before is None else after - before,
            }
            print(phase, {k: round(v, 2) for k, v in ms.items()}, flush=True)
        if args.no_check:
            print({"weight_bytes_int8_over_f32": weight_bytes(int8) / weight_bytes(f32)})
            return
        x = torch.randint(0, 32000, (1, 64), generator=torch.Generator().manual_seed(2))
        want, got = int8(x).logits, forms["int8 torchtpu"](x).logits
        result["logits_max_rel_diff_vs_torchao"] = ((got - want).abs().max() / want.abs().max()).item()
        same = 0
        gen = torch.Generator().manual_seed(3)
        for _ in range(prompts):
            ids = torch.randint(0, 32000, (1, 8), generator=gen)
            a, b = ids, ids
            for _ in range(new):
                a = torch.cat([a, int8(a).logits[:, -1:].argmax(-1)], 1)
                b = torch.cat([b, forms["int8 torchtpu"](b).logits[:, -1:].argmax(-1)], 1)
            same += bool(torch.equal(a, b))
        result["greedy_identical"] = f"{same}/{prompts} prompts x {new} tokens"
    result["weight_bytes_int8_over_f32"] = weight_bytes(int8) / weight_bytes(f32)
    result["weight_bytes_int8_linears_only_over_f32"] = weight_bytes(linears_only) / weight_bytes(f32)
    print(json.dumps({k: v for k, v in result.items() if k not in inputs}, indent=1))
    if not args.quick:
        with open(os.path.join(HERE, "results", "quantization.json"), "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
