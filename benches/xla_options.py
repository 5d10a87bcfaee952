"""XLA's CPU options, measured: a 2048² f32 matmul and a ResNet-style 3x3 convolution, torchtpu
under each candidate set of XLA options (the backend's `xla_options`, sent per compile as the
compile options' overrides) against PyTorch's own kernels (`torch.mm`: MKL/oneDNN; the
convolution: oneDNN) on the same cores. Backends are interleaved round by round; medians.

    .venv/bin/python benches/xla_options.py           # prints a Markdown table
    .venv/bin/python benches/xla_options.py --rounds 5

Also reports the thread counts both sides use (torch's intra-op pool; XLA's CPU client sizes
its pool from the machine's cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

import torchtpu

# One compile per variant of the same function: more than Dynamo's default 8 per code object.
torch._dynamo.config.recompile_limit = 64

NO_YNN = {"xla_cpu_experimental_ynn_fusion_type": ""}
# (label, backend options): the platform's defaults first, then one change each.
VARIANTS = [
    ("torchtpu (defaults)", {}),
    ("+ donate=True (output aliased to an input)", {"donate": True}),
    ("YNNPACK: single dots only", {"xla_options": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}}),
    ("YNNPACK: single convolutions only", {"xla_options": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION"}}),
    ("YNNPACK fusions off", {"xla_options": NO_YNN}),
    ("YNNPACK off, XNNPACK off", {"xla_options": {**NO_YNN, "xla_cpu_experimental_xnn_fusion_type": ""}}),
    ("YNNPACK off, oneDNN on", {"xla_options": {**NO_YNN, "xla_cpu_use_onednn": True}}),
    ("YNNPACK off, one-thread Eigen", {"xla_options": {**NO_YNN, "xla_cpu_multi_thread_eigen": False}}),
]


def cases():
    torch.manual_seed(0)
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    yield "matmul 2048x2048x2048 f32", lambda a, b: a @ b, (a, b), 2 * n**3
    x, w = torch.randn(16, 64, 56, 56), torch.randn(64, 64, 3, 3)
    conv = lambda x, w: F.conv2d(x, w, padding=1)  # noqa: E731
    yield "conv2d 3x3 64->64, 16x56x56 f32", conv, (x, w), 2 * 16 * 64 * 56 * 56 * 64 * 9


def median_seconds(fn, args, rounds: int, fns: dict) -> dict:
    samples = {k: [] for k in fns}
    with torch.no_grad():
        for f in fns.values():
            f(*args)
            f(*args)
        keys = list(fns)
        for r in range(rounds):
            for k in keys[r % len(keys):] + keys[: r % len(keys)]:
                t = time.perf_counter()
                fns[k](*args)
                fns[k](*args)
                samples[k].append((time.perf_counter() - t) / 2)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"torch intra-op threads: {torch.get_num_threads()}; cores: {os.cpu_count()} (XLA's CPU pool: one per core)\n")
    print("| case | path | ms | GFLOP/s | vs PyTorch |")
    print("|---|---|---|---|---|")
    for name, fn, inputs, flops in cases():
        fns = {"PyTorch": fn}
        for label, options in VARIANTS:
            fns[label] = torch.compile(fn, backend="torchtpu", options={"strict": True, **options})
            torch.testing.assert_close(fns[label](*inputs), fn(*inputs), rtol=1e-3, atol=1e-2)
        ran = torchtpu.stats()["executions"]
        med = median_seconds(fn, inputs, args.rounds, fns)
        # Every torchtpu variant ran its program in every call (none was left to eager).
        assert torchtpu.stats()["executions"] - ran == (len(fns) - 1) * 2 * (args.rounds + 1), torchtpu.stats()
        for label, s in med.items():
            print(f"| {name} | {label} | {s * 1e3:.1f} | {flops / s / 1e9:.0f} | {med['PyTorch'] / s:.2f}x |", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
