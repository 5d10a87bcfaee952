"""Per-call cost of a tiny compiled graph, measured apart from any real work (issue 8).

    .venv/bin/python benches/call_overhead.py

The graph is `x * 2 + 1` on 4 floats. In one run, interleaved: eager; torch.compile with a
no-op backend that returns a fixed tensor (Dynamo's guards and frame handling alone); with
Dynamo's own `eager` backend (the same plus running the graph eagerly); with `aot_eager`
(the same plus AOTAutograd's runtime wrapper, which torchtpu's graphs also run under); torchtpu; and,
inside torchtpu, the PJRT program alone (`Program.run` on the input tensor: its DLPack view
checked in Rust, input buffers, execute, outputs handed out as DLPack capsules). torchtpu - no-op backend is what torchtpu
adds per call (AOTAutograd's runtime wrapper, our executor and the program).
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


def _noop_backend(gm, example_inputs):
    """Dynamo's guards and frame handling with nothing behind them: returns a fixed output."""
    out = gm(*example_inputs)
    return lambda *args: out


def measure(rounds: int = 25) -> dict:
    """Median microseconds per call of each path, from interleaved rounds."""
    warnings.simplefilter("ignore")
    x = torch.randn(4)
    guards_only = torch.compile(f, backend=_noop_backend)
    dynamo_eager = torch.compile(f, backend="eager")
    aot_eager = torch.compile(f, backend="aot_eager")
    mine = torch.compile(f, backend="torchtpu")
    guards_only(x)
    dynamo_eager(x)
    aot_eager(x)
    mine(x)
    # The compiled program itself, called as the executor calls it.
    from torchtpu import _C
    from torchtpu.compiled.exporter import export
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(f)(x)
    program = _C.compile(export(gm, "overhead").text)
    run_program = lambda t: program.run([t])  # noqa: E731
    run_program(x)
    rows = {
        "eager": f,
        "dynamo, no-op backend (guards only)": guards_only,
        "dynamo (backend=eager)": dynamo_eager,
        "dynamo + AOTAutograd (backend=aot_eager)": aot_eager,
        "torchtpu": mine,
        "PJRT program alone": run_program,
    }
    samples = {k: [] for k in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            samples[name].append(per_call_us(fn, x))
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    med = measure()
    for name, v in med.items():
        print(f"{name:42s} {v:9.1f} us/call")
    guards = med["dynamo, no-op backend (guards only)"]
    print(f"torchtpu above Dynamo's guard cost: {med['torchtpu'] - guards:.1f} us/call (target < 20); "
          f"above Dynamo's eager backend: {med['torchtpu'] - med['dynamo (backend=eager)']:.1f} us/call; "
          f"AOTAutograd's share (aot_eager - eager backend): "
          f"{med['dynamo + AOTAutograd (backend=aot_eager)'] - med['dynamo (backend=eager)']:.1f} us/call")


if __name__ == "__main__":
    main()
