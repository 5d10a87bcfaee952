"""Per-call cost of a tiny compiled graph, measured apart from any real work (issue 8).

    .venv/bin/python benches/call_overhead.py

The graph is `x * 2 + 1` on 4 floats. In one run, interleaved: eager; torch.compile with
Dynamo's own `eager` backend (Dynamo's guards and frame handling, no compiler); torchtpu; and,
inside torchtpu, the PJRT program alone (`Program.run` on a prepared pointer: input buffers,
execute, outputs handed out as DLPack capsules). The difference torchtpu - dynamo-eager is what
torchtpu adds per call; torchtpu - program is our Python executor's share of it.
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch

import torchtpu  # noqa: F401  (registers the backend)


def f(x):
    return x * 2 + 1


def per_call_us(fn, x, calls: int = 200) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    warnings.simplefilter("ignore")
    x = torch.randn(4)
    dynamo_eager = torch.compile(f, backend="eager")
    mine = torch.compile(f, backend="torchtpu")
    dynamo_eager(x)
    mine(x)
    # The compiled program itself, called as the executor calls it.
    from torchtpu import _C
    from torchtpu.exporter import export
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(f)(x)
    program, _, _ = _C.compile(export(gm, "overhead").text)
    run_program = lambda t: program.run([t.data_ptr()])  # noqa: E731
    run_program(x)
    rows = {"eager": f, "dynamo (backend=eager)": dynamo_eager, "torchtpu": mine, "PJRT program alone": run_program}
    samples = {k: [] for k in rows}
    for _ in range(25):
        for name, fn in rows.items():
            samples[name].append(per_call_us(fn, x))
    med = {k: statistics.median(v) for k, v in samples.items()}
    for name in rows:
        v = samples[name]
        print(f"{name:24s} {med[name]:9.1f} us/call  (spread {min(v):.1f}-{max(v):.1f})")
    print(f"torchtpu above Dynamo's own cost: {med['torchtpu'] - med['dynamo (backend=eager)']:.1f} us/call "
          f"(target < 20); of which outside the PJRT program: {med['torchtpu'] - med['PJRT program alone']:.1f} us")


if __name__ == "__main__":
    main()
