"""Cold vs warm start: each model run in fresh processes sharing fresh cache folders
(TORCHTPU_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR), three ways.

- plain: `torch.compile(model, backend="torchtpu")`. The warm process traces again (Dynamo and
  AOTAutograd); torchtpu's disk cache gives it its programs.
- autograd_cache: the same with options={"autograd_cache": True}: AOTAutograd's cache keeps the
  compiled graphs, so the warm process skips AOTAutograd's tracing (Dynamo's still runs).
- caching_precompile: the same with torch._dynamo.config.caching_precompile
  (TORCH_CACHING_PRECOMPILE=1) and `torch.compiler.save_cache_artifacts()` after the cold first
  call: the warm process's torch.compile loads Dynamo's guards and bytecode and torchtpu's
  artifacts (no tracing).
- aot_compile: the cold process runs `torch.compile(run, fullgraph=True, backend="torchtpu")
  .aot_compile(((model, x), {}))` and `save_compiled_function`; the warm process
  `torch.compiler.load_compiled_function` and calls it: no Dynamo, no AOTAutograd, no compile.

First call: from torch.compile (or aot_compile, or the load) to the first output, with the
backward for the training row; imports are not counted. The ratios divide by the plain cold
first call (what a first process pays today). Medians of --reps rounds.

    .venv/bin/python benches/cache_warm_start.py [--reps 3] [--models quickstart,mlp,mlp-train]
        [--json benches/results/cache_warm_start.json]
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
import torch, torchtpu
from torch._dynamo.utils import counters
root, name, mode, artifact = sys.argv[1:5]
sys.path.insert(0, root + "/examples"); sys.path.insert(0, root + "/python/tests")
torch.manual_seed(0)
if name in ("quickstart", "bigger"):
    from quickstart import TinyTransformer
    d, layers = (64, 2) if name == "quickstart" else (256, 6)
    model, x = TinyTransformer(d=d, layers=layers).eval(), torch.randint(0, 1000, (4, 32))
else:
    from models.small import MLP
    model, x = MLP(), torch.randn(16, 12)
    model.train(name == "mlp-train")
train = name.endswith("-train")

def run(model, x):
    return model(x)

options = {"autograd_cache": True} if mode == "autograd_cache" else {}
grad = torch.enable_grad() if train else torch.no_grad()
with grad:
    t = time.perf_counter()
    if mode in ("plain", "autograd_cache", "precompile"):
        out = torch.compile(model, backend="torchtpu", options=options)(x)
    elif mode == "save":
        fn = torch.compile(run, fullgraph=True, backend="torchtpu").aot_compile(((model, x), {}))
        out = fn(model, x)
    else:
        with open(artifact, "rb") as f:
            fn = torch.compiler.load_compiled_function(f)
        out = fn(model, x)
    if train:
        out.sum().backward()
    first = time.perf_counter() - t
    t = time.perf_counter()
    if mode == "save":
        fn.save_compiled_function(artifact)
    elif mode == "precompile" and not os.path.exists(artifact):
        torch.compiler.save_cache_artifacts(); open(artifact, "w").close()
    save = time.perf_counter() - t
with torch.no_grad():
    error = (out - model(x)).abs().max().item()
s = torchtpu.stats()
print(json.dumps({"first_call": first, "error": error, "save_s": save,
                  "compile_seconds": s["compile_seconds"], "disk_hits": s["disk_hits"], "compiles": s["cache_misses"],
                  "graphs_seen": s["graphs_seen"], "graphs_loaded": s["graphs_loaded"],
                  "frames": counters["stats"]["unique_graphs"],
                  "aot_cache": {k: v for k, v in counters["aot_autograd"].items() if k.startswith("autograd_cache")}}))
"""


def child(cache: str, name: str, mode: str) -> dict:
    env = dict(
        os.environ,
        TORCH_CACHING_PRECOMPILE="1" if mode == "precompile" else "0",
        TORCHTPU_CACHE_DIR=os.path.join(cache, "torchtpu"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
        PYTHONWARNINGS="ignore",
    )
    artifact = os.path.join(cache, "fn.pt")
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), name, mode, artifact],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{name}/{mode} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def one_round(name: str) -> dict:
    out = {}
    for way, (cold_mode, warm_mode) in {
        "plain": ("plain", "plain"),
        "autograd_cache": ("autograd_cache", "autograd_cache"),
        "caching_precompile": ("precompile", "precompile"),
        "aot_compile": ("save", "load"),
    }.items():
        with tempfile.TemporaryDirectory(prefix="ttpu-warm-") as cache:
            out[way] = {
                "cold": child(cache, name, cold_mode),
                "warm": child(cache, name, warm_mode),
            }
    return out


def median(rounds: list, way: str, which: str, key: str = "first_call") -> float:
    return statistics.median(r[way][which][key] for r in rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--models", default="quickstart,bigger,mlp,mlp-train")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = {}
    for name in args.models.split(","):
        results[name] = [one_round(name) for _ in range(args.reps)]
        print(f"{name}: done", file=sys.stderr)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(markdown(results, args.reps)))


WAYS = ("plain", "autograd_cache", "caching_precompile", "aot_compile")


def markdown(results: dict, reps: int | None = None) -> list[str]:
    """The tables as a docs/performance.md section (`performance.py` includes it from
    benches/results/cache_warm_start.json)."""
    reps = reps or min(len(r) for r in results.values())
    lines = [
        "## Warm start (`benches/cache_warm_start.py`)",
        "",
        (
            f"First call of a fresh process, median of {reps} rounds, cold / warm (warm as a share of the plain cold "
            "first call): plain `torch.compile`; with AOTAutograd's cache (`autograd_cache`); with Dynamo's "
            "`caching_precompile`; and `aot_compile` saved then loaded with `torch.compiler.load_compiled_function` "
            '(docs/cache.md, "Warm start without tracing").'
        ),
        "",
        "| model | " + " | ".join(WAYS) + " |",
        "|---" * (len(WAYS) + 1) + "|",
    ]
    for name, rounds in results.items():
        base = median(rounds, "plain", "cold")
        cells = []
        for way in WAYS:
            cold, warm = median(rounds, way, "cold"), median(rounds, way, "warm")
            cells.append(f"{cold:.2f} / {warm:.2f} s ({warm / base:.0%})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        (
            "The warm processes of the last round: graphs handed to the backend (traced), rebuilt from artifacts, "
            "programs read from the disk cache, XLA compiles, Dynamo frames compiled:"
        ),
        "",
        "| model | " + " | ".join(WAYS) + " |",
        "|---" * (len(WAYS) + 1) + "|",
    ]
    for name, rounds in results.items():
        cells = []
        for way in WAYS:
            w = rounds[-1][way]["warm"]
            cells.append(
                f"{w['graphs_seen']} traced, {w['graphs_loaded']} loaded, {w['disk_hits']} disk, "
                f"{w['compiles']} compiles, {w['frames']} frames"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    errors = [
        r[way][which]["error"]
        for rounds in results.values()
        for r in rounds
        for way in WAYS
        for which in r[way]
    ]
    lines += [
        "",
        f"Largest difference from eager over every process: {max(errors):.1e}.",
    ]
    return lines


if __name__ == "__main__":
    main()
