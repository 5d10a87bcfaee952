"""Inference with convolution weights relaid once (options relayout_weights, the default)
against relaying them in every call, and eager; interleaved in one run, medians.

    .venv/bin/python benches/weight_layout.py
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))
MODELS = ("cnn", "resnet18")  # the convolution models of benches/performance.py


def median_ms(fn, args, rounds=15, inner=3) -> float:
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        samples.append((time.perf_counter() - t) / inner * 1e3)
    return statistics.median(samples)


def main() -> None:
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    print("| model / batch | eager ms | relaid once ms | relaid per call ms | once vs per call | once vs eager |")
    print("|---|---|---|---|---|---|")
    from performance import build  # the same models and inputs as benches/performance.py

    for name in MODELS:
        for batch in (1, 16):
            model, args = build(name, batch)
            model = model.eval()
            once = torch.compile(model, backend="torchtpu")
            per_call = torch.compile(model, backend="torchtpu", options={"relayout_weights": False})
            with torch.no_grad():
                ref = model(*args)
                for f in (once, per_call):
                    torch.testing.assert_close(f(*args), ref, rtol=1e-4, atol=1e-4)
                times = {"eager": [], "once": [], "per_call": []}
                for _ in range(3):  # interleaved
                    times["eager"].append(median_ms(model, args))
                    times["once"].append(median_ms(once, args))
                    times["per_call"].append(median_ms(per_call, args))
            e, o, p = (statistics.median(times[k]) for k in ("eager", "once", "per_call"))
            print(f"| {name}/{batch} | {e:.2f} | {o:.2f} | {p:.2f} | {p / o:.2f}x | {e / o:.2f}x |")


if __name__ == "__main__":
    main()
