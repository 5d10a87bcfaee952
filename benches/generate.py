"""`model.generate()` with a compiled forward: torchtpu vs eager vs Inductor, dynamic and
static KV cache, side by side in one run.

For each (backend, cache) a fresh process (and, for torchtpu, an empty persistent cache)
builds the same Llama-style decoder (grouped-query attention, random weights), runs greedy
`generate()` twice and reports:
  - first:  seconds for the first generate (compiles included), and XLA compiles it made;
  - second: seconds for the same generate again (every size seen), and tokens/s;
  - the median forward time of the second run's decode steps (per token), and whether the
    tokens equal eager's.
Eager runs interleaved with the others in the same order each round; the medians of
`--rounds` rounds are reported. Results go to benches/results/generate.json and a table on
stdout (docs/performance.md, "Generation", quotes it).

    .venv/bin/python benches/generate.py            # ~5-10 minutes (Inductor compiles dominate)
    .venv/bin/python benches/generate.py --quick    # tiny model, no Inductor
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benches" / "results" / "generate.json"

CHILD = r"""
import json, os, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch, transformers
backend, cache, size = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=size["vocab"], hidden_size=size["hidden"], intermediate_size=2 * size["hidden"],
                               num_hidden_layers=size["layers"], num_attention_heads=8, num_key_value_heads=2,
                               max_position_embeddings=256)
model = transformers.LlamaForCausalLM(cfg).eval()
ids = torch.randint(3, size["vocab"], (1, size["prompt"]), generator=torch.Generator().manual_seed(1))
kw = dict(max_new_tokens=size["new"], do_sample=False, pad_token_id=0)
if cache == "static":
    kw["cache_implementation"] = "static"
if backend != "eager":
    model.forward = torch.compile(model.forward, backend=backend)
calls = []
inner = model.forward
def timed_forward(*a, **k):
    t = time.perf_counter()
    r = inner(*a, **k)
    calls.append(time.perf_counter() - t)
    return r
model.forward = timed_forward
def timed():
    calls.clear()
    t = time.perf_counter()
    out = model.generate(ids, **kw)
    return time.perf_counter() - t, out
first, out = timed()
stats_first = {}
if backend == "torchtpu":
    import torchtpu
    s = torchtpu.stats(); stats_first = {"xla_compiles": s["cache_misses"], "graphs": s["graphs_compiled"],
                                         "specialisations": s["specialisations"], "fallback_ops": dict(s["fallback_ops"])}
second, out2 = timed()
decode = sorted(calls[1:])[len(calls[1:]) // 2]  # median forward of the decode steps
stats_second = {}
if backend == "torchtpu":
    s = torchtpu.stats(); stats_second = {"xla_compiles": s["cache_misses"] - stats_first["xla_compiles"],
                                          "graphs": s["graphs_compiled"] - stats_first["graphs"]}
print(json.dumps({"first_s": first, "second_s": second, "decode_s": decode, "tokens": out2[0].tolist(),
                  "first": stats_first, "second": stats_second}))
"""


def run_child(backend: str, cache: str, size: dict) -> dict:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="torchtpu-bench-cache-") as d:
        env["TORCHTPU_CACHE_DIR"] = d
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(d, "inductor")  # Inductor cold too
        r = subprocess.run([sys.executable, "-c", CHILD, backend, cache, json.dumps(size)], env=env,
                           capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{backend}/{cache} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a tiny model, one round, no Inductor")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    size = dict(vocab=1024, hidden=256, layers=4, prompt=16, new=32)
    rounds = args.rounds
    backends = ["eager", "torchtpu", "inductor"]
    if args.quick:
        size, rounds = dict(vocab=128, hidden=64, layers=2, prompt=5, new=8), 1
    if args.quick or args.no_inductor:
        backends.remove("inductor")
    caches = ["dynamic", "static"]
    runs: dict = {}
    for r in range(rounds):
        for cache in caches:
            for backend in backends:
                res = run_child(backend, cache, size)
                runs.setdefault((backend, cache), []).append(res)
                print(f"round {r + 1}: {backend:9s} {cache:7s} first {res['first_s']:7.2f} s, second {res['second_s']:.3f} s", flush=True)
    table = []
    for cache in caches:
        eager_tokens = runs[("eager", cache)][0]["tokens"]
        eager_second = statistics.median(x["second_s"] for x in runs[("eager", cache)])
        for backend in backends:
            xs = runs[(backend, cache)]
            second = statistics.median(x["second_s"] for x in xs)
            row = {
                "backend": backend,
                "cache": cache,
                "first_s": statistics.median(x["first_s"] for x in xs),
                "second_s": second,
                "tokens_per_s": size["new"] / second,
                "decode_ms_per_token": 1e3 * statistics.median(x["decode_s"] for x in xs),
                "second_vs_eager": eager_second / second,
                "tokens_equal_eager": all(x["tokens"] == eager_tokens for x in xs),
                "first": xs[0]["first"],
                "second": xs[0]["second"],
            }
            table.append(row)
    data = {"date": time.strftime("%Y-%m-%d"), "size": size, "rounds": rounds, "rows": table}
    print("\n".join(markdown(data)))
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(data, indent=1))
        print(f"wrote {RESULTS}; `benches/performance.py --report-only` puts it into docs/performance.md")


def markdown(data: dict) -> list[str]:
    """The "Generation" section of docs/performance.md."""
    size = data["size"]
    lines = [
        "## Generation (`benches/generate.py`)",
        "",
        f"Greedy `generate()` of {size['new']} tokens after a {size['prompt']}-token prompt, Llama-style decoder "
        f"(hidden {size['hidden']}, {size['layers']} layers, 8 query / 2 KV heads, vocab {size['vocab']}, random "
        f"weights), compiled forward; each row a fresh process with empty caches; medians of {data['rounds']} "
        f"round(s), measured {data.get('date', '?')}. *second* is the same generate again (every size seen); "
        "*decode ms/token* the median forward of its decode steps.",
        "",
        "| cache | backend | first generate s | XLA compiles (first) | second generate s | tokens/s (second) | decode ms/token | second vs eager | tokens = eager |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        compiles = row["first"].get("xla_compiles", "-")
        lines.append(f"| {row['cache']} | {row['backend']} | {row['first_s']:.2f} | {compiles} | {row['second_s']:.3f} | "
                     f"{row['tokens_per_s']:.0f} | {row['decode_ms_per_token']:.2f} | {row['second_vs_eager']:.2f}x | "
                     f"{row['tokens_equal_eager']} |")
    rows = {(r["backend"], r["cache"]): r for r in data["rows"]}
    dyn, static = rows.get(("torchtpu", "dynamic")), rows.get(("torchtpu", "static"))
    if dyn and static and dyn["first"].get("xla_compiles", 0) > static["first"].get("xla_compiles", 0):
        extra = dyn["first"]["xla_compiles"] - static["first"]["xla_compiles"]
        per = (dyn["first_s"] - static["first_s"]) / extra
        lines += [
            "",
            f"With the dynamic cache every new length is one specialisation: {dyn['first']['xla_compiles']} XLA compiles in "
            f"the first generate, about {per:.2f} s each beyond the static cache's first generate (export without re-trace "
            "plus XLA's compile, which is most of it). The second dynamic-cache generate compiles nothing; it exports "
            f"{dyn['second'].get('graphs', 0)} graph again (the size Dynamo's first, static, graph had served reaches its "
            "newer dynamic graph), which is the difference between its total and its per-token decode time.",
        ]
    return lines


if __name__ == "__main__":
    main()
