"""Convolution weight gradients (`convolution_backward`, weight only) at resnet18's layer
shapes (64x64 input), torchtpu's chosen form vs the convolution form vs eager, medians of
rounds. decompositions.py runs a weight gradient whose batch x output-positions contraction
is small as a matmul of patches ("rows" up to 64 or a 1x1 kernel, "patches" up to 256); XLA
CPU's convolution form (batch as the feature dim, output map as the window) is slow there.

    .venv/bin/python benches/conv_weight_grad.py
"""

from __future__ import annotations

import statistics
import time

import torch

import torchtpu  # noqa: F401  (registers the backend)
from torchtpu.compiled import decompositions

torch._dynamo.config.recompile_limit = 256
torch._dynamo.config.accumulated_recompile_limit = 4096
CASES = [  # (in channels, out channels, kernel, stride, padding, input size)
    (3, 64, 7, 2, 3, 64),
    (64, 64, 3, 1, 1, 16),
    (64, 128, 3, 2, 1, 16),
    (64, 128, 1, 2, 0, 16),
    (128, 128, 3, 1, 1, 8),
    (128, 256, 3, 2, 1, 8),
    (256, 256, 3, 1, 1, 4),
    (256, 512, 3, 2, 1, 4),
    (512, 512, 3, 1, 1, 2),
]


def median_us(fn, args, rounds=7, inner=5) -> float:
    for _ in range(2):
        fn(*args)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        samples.append((time.perf_counter() - t) / inner * 1e6)
    return statistics.median(samples)


def compiled_us(fn, args, want, convolution_form: bool) -> float:
    chosen = decompositions._weight_grad_as_matmul
    if convolution_form:
        decompositions._weight_grad_as_matmul = lambda grad_output, weight: None
    try:
        torch._dynamo.reset()
        c = torch.compile(fn, backend="torchtpu", dynamic=False)
        torch.testing.assert_close(c(*args), want, rtol=1e-4, atol=1e-3)
        return median_us(c, args)
    finally:
        decompositions._weight_grad_as_matmul = chosen


def main() -> None:
    print("| batch | conv | form | eager us | convolution form us | torchtpu us | torchtpu vs eager | vs convolution form |")
    print("|---|---|---|---|---|---|---|---|")
    for batch in (1, 16):
        for cin, cout, k, s, p, hw in CASES:
            x, w = torch.randn(batch, cin, hw, hw), torch.randn(cout, cin, k, k)
            g = torch.randn_like(torch.nn.functional.conv2d(x, w, stride=s, padding=p))

            def grad_weight(g, x, w):
                mask = [False, True, False]
                return torch.ops.aten.convolution_backward(g, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)[1]

            want = grad_weight(g, x, w)
            eager = median_us(grad_weight, (g, x, w))
            conv = compiled_us(grad_weight, (g, x, w), want, convolution_form=True)
            ours = compiled_us(grad_weight, (g, x, w), want, convolution_form=False)
            form = decompositions._weight_grad_as_matmul(g, w) or "convolution"
            print(
                f"| {batch} | {cin}->{cout} {k}x{k}/{s} at {hw}x{hw} | {form} | {eager:.0f} | {conv:.0f} | {ours:.0f} "
                f"| {eager / ours:.2f}x | {conv / ours:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
