"""The CPU plugin's execution buffers with and without torchtpu's allocator tuning
(`TORCHTPU_MALLOC_TUNING`, docs/runtime.md "Host memory"): the models of
`benches/performance.py`, training steps and inference calls, each setting in its own fresh
process (the tuning is process-wide), torchtpu and eager timed side by side in each.

    .venv/bin/python benches/host_memory.py --models resnet18,gpt2 --mode train
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def run(tuning: str, args) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rows.json"
        env = dict(os.environ, TORCHTPU_MALLOC_TUNING=tuning, TORCHTPU_CACHE_DIR=str(Path(d) / "cache"))
        subprocess.run(
            [sys.executable, str(ROOT / "options_ab.py"), "--b", "{}", "--models", args.models, "--batches", args.batches,
             "--mode", args.mode, "--rounds", str(args.rounds), "--json", str(out)],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )
        return json.loads(out.read_text())["rows"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,transformer_block,cnn,gpt2,bert,resnet18")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--mode", choices=("infer", "train", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    on, off = run("1", args), run("0", args)
    print("| mode | model / batch | eager ms (off) | torchtpu ms, tuning off | eager ms (on) | torchtpu ms, tuning on | vs eager off | vs eager on |")
    print("|---|---|---|---|---|---|---|---|")
    for a, b in zip(off, on):
        mode = "train" if a["train"] else "infer"
        print(f"| {mode} | {a['model']}/{a['batch']} | {a['eager']:.3f} | {a['A']:.3f} | {b['eager']:.3f} | {b['A']:.3f} "
              f"| {a['eager'] / a['A']:.2f}x | {b['eager'] / b['A']:.2f}x |")


if __name__ == "__main__":
    main()
