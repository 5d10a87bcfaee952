"""Embedding gradients (`embedding_dense_backward`: an index_put with accumulate over the
table's rows) and row gathers, torchtpu vs eager, medians of rounds. index_put moves whole
rows (one index per row, the rest as scatter windows) instead of one coordinate per element;
gathers keep per-element coordinates (row windows measured no faster there).

    .venv/bin/python benches/row_indexing.py
"""

from __future__ import annotations

import statistics
import time

import torch

import torchtpu  # noqa: F401  (registers the backend)

torch._dynamo.config.recompile_limit = 64
CASES = [  # (vocabulary, hidden, batch, tokens): the perf models' tables, and GPT-2's
    (1000, 256, 1, 64),
    (1000, 256, 16, 64),
    (50257, 768, 4, 128),
]


def median_us(fn, args, rounds=9, inner=50) -> float:
    fn(*args)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        samples.append((time.perf_counter() - t) / inner * 1e6)
    return statistics.median(samples)


def main() -> None:
    print("| op | table | tokens | eager us | torchtpu us | torchtpu vs eager |")
    print("|---|---|---|---|---|---|")
    for vocab, hidden, batch, tokens in CASES:
        grad = torch.randn(batch, tokens, hidden)
        idx = torch.randint(0, vocab, (batch, tokens))
        table = torch.randn(vocab, hidden)
        ops = {
            "embedding backward": (lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, vocab, -1, False), (grad, idx)),
            "table[idx]": (lambda t, i: t[i] * 1.0, (table, idx)),
        }
        for name, (fn, args) in ops.items():
            compiled = torch.compile(fn, backend="torchtpu", options={"strict": True})
            torch.testing.assert_close(compiled(*args), fn(*args))
            e, t = median_us(fn, args), median_us(compiled, args)
            print(f"| {name} | {vocab}x{hidden} | {batch}x{tokens} | {e:.0f} | {t:.0f} | {e / t:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
