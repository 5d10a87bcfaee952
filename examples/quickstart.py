"""torchtpu quickstart: one changed line compiles a small transformer through torchtpu.

    .venv/bin/python examples/quickstart.py      (or: make demo)

Checks the compiled model against eager, then reports the first-call (compile) time, the
steady-state time per call for eager and torchtpu measured interleaved in one run, and
torchtpu.stats().
"""

import statistics
import time

import torch
import torch.nn as nn

import torchtpu


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, need_weights=False, is_causal=False)
        x = x + a
        return x + self.ff(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=1000, d=64, heads=4, layers=2, seq=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.ln(self.blocks(self.tok(ids) + self.pos)))


def median_us(fn, arg, n=30):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn(arg)
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def main():
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    ids = torch.randint(0, 1000, (4, 32))

    compiled = torch.compile(model, backend="torchtpu")  # the one changed line

    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(ids)
        first_call = time.perf_counter() - start
        want = model(ids)
        err = (out - want).abs().max().item()
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        print(f"outputs match eager: max abs error {err:.2e} (tolerance 1e-4)")
        print(f"first call (trace + compile): {first_call:.2f} s")

        eager_us, tpu_us = [], []
        for _ in range(5):  # interleave the backends: this machine is noisy
            eager_us.append(median_us(model, ids))
            tpu_us.append(median_us(compiled, ids))
        e, t = statistics.median(eager_us), statistics.median(tpu_us)
        print(f"steady state per call: eager {e:.0f} us, torchtpu {t:.0f} us ({e / t:.2f}x eager)")

    s = torchtpu.stats()
    print("torchtpu.stats():")
    keys = ("graphs_seen", "graphs_compiled", "graphs_fallback", "fallback_ops", "executions", "compile_seconds",
            "memory_hits", "disk_hits", "cache_misses", "compile_seconds_saved")
    for key in keys:
        value = s[key]
        print(f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}")


if __name__ == "__main__":
    main()
