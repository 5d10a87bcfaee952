"""A compiled full training step against a compiled module, eager and Inductor, side by side.

The step: forward, loss, backward, `clip_grad_norm_`, `AdamW.step()` (its default foreach
path) and `zero_grad()`, on a Llama-style decoder (grouped-query attention, random weights).
Variants, each in a fresh process with an empty persistent cache:
  - eager;
  - `module`: only `torch.compile(model, backend=...)`, the optimizer runs eagerly;
  - `step`: `torch.compile(step, backend=...)` of the whole function.
For torchtpu and Inductor, it reports the seconds for the first 5 steps (compiles included),
the median steady-state step time over the next 10, and (torchtpu) the graphs that fell back.

    .venv/bin/python benches/train_step.py [--no-inductor]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "train_step.json"

CHILD = r"""
import json, os, sys, time, statistics
os.environ["HF_HUB_OFFLINE"] = "1"
import torch, transformers
backend, variant = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
cfg.use_cache = False
model = transformers.LlamaForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(3, 512, (4, 64), generator=torch.Generator().manual_seed(1))
forward = torch.compile(model, backend=backend) if variant == "module" else model
def step(ids):
    loss = forward(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    return loss
run = torch.compile(step, backend=backend) if variant == "step" else step
t = time.perf_counter()
for _ in range(5):
    run(ids)
first5 = time.perf_counter() - t
times = []
for _ in range(10):
    t = time.perf_counter(); run(ids); times.append(time.perf_counter() - t)
fallback = {}
if backend == "torchtpu":
    import torchtpu
    s = torchtpu.stats(); fallback = {"graphs_fallback": s["graphs_fallback"], "fallback_ops": dict(s["fallback_ops"])}
print(json.dumps({"first5_s": first5, "step_ms": 1e3 * statistics.median(times), **fallback}))
"""


def run(backend: str, variant: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="torchtpu-bench-") as d:
        env = dict(os.environ, TORCHTPU_CACHE_DIR=d, TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"))
        r = subprocess.run([sys.executable, "-c", CHILD, backend, variant], env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{backend}/{variant}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    rows = [("eager", "eager", run("eager", "eager"))]
    for backend in ["torchtpu"] + ([] if args.no_inductor else ["inductor"]):
        for variant in ("module", "step"):
            rows.append((backend, variant, run(backend, variant)))
    data = {"date": time.strftime("%Y-%m-%d"), "rows": [{"backend": b, "variant": v, **r} for b, v, r in rows]}
    print("\n".join(markdown(data)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1))
    print(f"wrote {RESULTS}; `benches/performance.py --report-only` puts it into docs/performance.md")


def markdown(data: dict) -> list[str]:
    """The "Compiled training step" section of docs/performance.md."""
    rows = data["rows"]
    eager_ms = next(r["step_ms"] for r in rows if r["backend"] == "eager")
    lines = [
        "## Compiled training step (`benches/train_step.py`)",
        "",
        "Forward, loss, backward, `clip_grad_norm_`, `AdamW.step()` (foreach) and `zero_grad()` on a Llama-style "
        "decoder (hidden 128, 2 layers, batch 4 x 64 tokens); `module`: only the model compiled, `step`: the whole "
        f"step function; fresh process and empty caches per row, measured {data.get('date', '?')}.",
        "",
        "| backend | compiled | first 5 steps s | steady step ms | vs eager | graphs fallen back |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['variant']} | {r['first5_s']:.2f} | {r['step_ms']:.1f} | "
                     f"{eager_ms / r['step_ms']:.2f}x | {r.get('graphs_fallback', '-')} |")
    return lines


if __name__ == "__main__":
    main()
