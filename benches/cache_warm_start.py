"""Cold vs warm start of the persistent compilation cache: the quickstart transformer and a
bigger one, each run in two fresh processes sharing a fresh cache folder. Reports first-call
latency (Dynamo + AOTAutograd tracing + torchtpu compile), the part spent in torchtpu's
compile (lowering + XLA or disk load), and the ratios.

    .venv/bin/python benches/cache_warm_start.py
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, torch, torchtpu
sys.path.insert(0, sys.argv[1])
from quickstart import TinyTransformer
torch.manual_seed(0)
model = TinyTransformer(d=int(sys.argv[2]), layers=int(sys.argv[3])).eval()
ids = torch.randint(0, 1000, (4, 32))
compiled = torch.compile(model, backend="torchtpu")
with torch.no_grad():
    t = time.perf_counter(); compiled(ids); first = time.perf_counter() - t
s = torchtpu.stats()
print(json.dumps({"first_call": first, "compile_seconds": s["compile_seconds"], "disk_hits": s["disk_hits"], "misses": s["cache_misses"]}))
"""


def run(cache_dir, d, layers):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "examples"), str(d), str(layers)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    rows = []
    for name, d, layers in (("quickstart (d=64, 2 layers)", 64, 2), ("bigger (d=256, 6 layers)", 256, 6)):
        with tempfile.TemporaryDirectory() as cache:
            cold, warm = run(cache, d, layers), run(cache, d, layers)
        rows.append((name, cold, warm))
    print("| model | cold first call | warm first call | warm/cold | torchtpu compile cold | warm (disk load) | warm/cold |")
    print("|---|---|---|---|---|---|---|")
    for name, c, w in rows:
        print(
            f"| {name} | {c['first_call']:.2f} s | {w['first_call']:.2f} s | {w['first_call'] / c['first_call']:.0%} "
            f"| {c['compile_seconds']:.2f} s | {w['compile_seconds']:.3f} s ({w['disk_hits']} disk hits, {w['misses']} compiles) "
            f"| {w['compile_seconds'] / c['compile_seconds']:.0%} |"
        )


if __name__ == "__main__":
    main()
