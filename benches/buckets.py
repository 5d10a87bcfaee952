"""Programs compiled, and time, for a compiled model whose batch changes every call (issue 47).

    .venv/bin/python benches/buckets.py [--device tpu|cpu] [--repeat 3]

For an MLP (16 -> 256 -> 256 -> 16, GELU) and a transformer block (pre-norm, 4-head causal
self-attention over 32 positions, hidden 64, MLP x4), `torch.compile(backend="torchtpu")` is
called on batches 2, 3, ..., 9 (a first loop: Dynamo's static graph for 2, then a symbolic
one) and then on the same batches again (a second loop: every program warm); `block-seq` is
the block at batch 4 over sequence lengths 2..9 (its causal mask's size too), with buckets
off (one program per batch size) and on (the default buckets 8, 16, ...). Each configuration
runs in a fresh process with its own empty compile cache, so every program is an XLA compile.
Reported per configuration: programs compiled (XLA compiles), the first loop's seconds
(compiles included) and the second loop's milliseconds per call (padding and cutting included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

_CHILD = textwrap.dedent(
    """
    import json, sys, time, torch, torchtpu
    model_name, device, buckets = sys.argv[1], sys.argv[2], sys.argv[3] == "on"
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(64), torch.nn.LayerNorm(64)
            self.att = torch.nn.MultiheadAttention(64, 4, batch_first=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.att(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    if model_name == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Linear(16, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 16)
        )
        make = lambda b: (torch.randn(b, 16),)
    elif model_name == "block":
        model = Block()
        mask = torch.triu(torch.full((32, 32), float("-inf")), 1)
        make = lambda b: (torch.randn(b, 32, 64), mask)
    else:  # block-seq: batch 4, lengths 2..9 (the keys masked past the real length)
        model = Block()
        make = lambda t: (torch.randn(4, t, 64), torch.triu(torch.full((t, t), float("-inf")), 1))
    model = model.eval()
    ref = {b: make(b) for b in range(2, 10)}
    with torch.no_grad():
        want = {b: model(*ref[b]) for b in ref}
    compiled = torch.compile(model.to(device), backend="torchtpu", options={"buckets": None if buckets else False})
    inputs = {b: tuple(t.to(device) for t in ref[b]) for b in ref}
    torchtpu.reset_stats()
    with torch.no_grad():
        t = time.perf_counter()
        for b in inputs:
            out = compiled(*inputs[b])
            err = (out.cpu() - want[b]).abs().max().item()
            assert err < 1e-4, (b, err)
        first = time.perf_counter() - t
        calls = []
        for _ in range(5):
            for b in inputs:
                t = time.perf_counter()
                compiled(*inputs[b]).cpu()
                calls.append(time.perf_counter() - t)
    s = torchtpu.stats()
    print(json.dumps({"programs": s["cache_misses"], "first_loop_s": first, "warm_call_ms": 1e3 * sum(calls) / len(calls)}))
    """
)


def run(model: str, device: str, buckets: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHTPU_CACHE_DIR": cache, "TORCHTPU_FALLBACK": "error"}
        env.pop("TORCHTPU_BUCKETS", None)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, model, device, buckets],
            env=env,
            capture_output=True,
            check=False,
            text=True,
            timeout=900,
        )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="tpu")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"device {args.device}, batches 2..9, median of {args.repeat} fresh processes per row"
    )
    print(
        f"{'model':<6} {'buckets':<8} {'programs':>8} {'first loop s':>13} {'warm call ms':>13}"
    )
    for model in ("mlp", "block", "block-seq"):
        for buckets in ("off", "on"):
            rows = [
                run(model, args.device, buckets) for _ in range(args.repeat)
            ]  # interleaving is per row
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(
                f"{model:<6} {buckets:<8} {med['programs']:>8.0f} {med['first_loop_s']:>13.2f} {med['warm_call_ms']:>13.3f}"
            )


if __name__ == "__main__":
    main()
