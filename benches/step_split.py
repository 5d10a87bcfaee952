"""Where a compiled step's time goes (issue 48): per model of `benches/performance.py`, the
torchtpu step against eager's, split into the time inside torchtpu's compiled graphs (each
`CompiledGraph` call: argument checks, PJRT's execution, outputs handed to PyTorch) and the
rest (Dynamo's guards, AOTAutograd's runtime wrappers, autograd, the loss and the optimizer,
which run eagerly for every backend). Eager and torchtpu steps are interleaved in one process.

    .venv/bin/python benches/step_split.py                      # every model, batch 1 and 16
    .venv/bin/python benches/step_split.py --models mlp,cnn --batches 16 --modes training

Writes benches/results/step_split.json; `markdown()` is its section of docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "python" / "tests"))

import torch  # noqa: E402

import performance  # noqa: E402  (its models and its step)
from torchtpu.compiled import executor  # noqa: E402

_inside = [0.0]  # seconds spent in CompiledGraph calls since the last reset


def _timed(call):
    def wrapper(self, *args):
        t0 = time.perf_counter()
        try:
            return call(self, *args)
        finally:
            _inside[0] += time.perf_counter() - t0

    return wrapper


def split(name: str, batch: int, train: bool, rounds: int) -> dict:
    model, args = performance.build(name, batch)
    runners = {b: performance.Runner(model, args, b, train) for b in ("eager", "torchtpu")}
    for r in runners.values():
        for _ in range(3):
            r.step()
    steps = {b: [] for b in runners}
    inside = []
    for _ in range(rounds):
        for b, r in runners.items():
            _inside[0] = 0.0
            t0 = time.perf_counter()
            r.step()
            steps[b].append(time.perf_counter() - t0)
            if b == "torchtpu":
                inside.append(_inside[0])
    eager, ours, programs = (statistics.median(v) * 1e3 for v in (steps["eager"], steps["torchtpu"], inside))
    return {"model": f"{name}/{batch}", "mode": "training" if train else "inference", "eager_ms": eager,
            "torchtpu_ms": ours, "graphs_ms": programs, "rest_ms": ours - programs,
            "vs_eager": eager / ours, "graphs_vs_eager_step": programs / eager}


HEADER = ["| model | mode | eager step ms | torchtpu step ms | inside torchtpu's graphs ms | rest ms | torchtpu vs eager "
          "| graphs / eager's whole step |", "|---|---|---|---|---|---|---|---|"]


def row(r: dict) -> str:
    return (f"| {r['model']} | {r['mode']} | {r['eager_ms']:.3f} | {r['torchtpu_ms']:.3f} | {r['graphs_ms']:.3f} "
            f"| {r['rest_ms']:.3f} | {r['vs_eager']:.2f}x | {r['graphs_vs_eager_step']:.2f} |")


def markdown(results: dict) -> list[str]:
    """The section of docs/performance.md."""
    return [
        "## Where a compiled step's time goes (`benches/step_split.py`)",
        "",
        f"Measured {results['date']}, medians of {results['rounds']} interleaved rounds. *Inside torchtpu's graphs* is "
        "every `CompiledGraph` call (argument checks, PJRT's execution, outputs handed to PyTorch); *rest* is "
        "Dynamo's guards, AOTAutograd's runtime wrappers, autograd, the loss and the SGD step, which run eagerly "
        "for every backend. Where the graphs alone take longer than eager's whole step, XLA CPU's code is the "
        "gap; where the rest is most of the step, PyTorch's machinery around small graphs is.",
        "",
        *HEADER,
        *(row(r) for r in results["rows"]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(performance.MODELS))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--modes", default="training,inference")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default=str(ROOT / "benches" / "results" / "step_split.json"))
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    executor.CompiledGraph.__call__ = _timed(executor.CompiledGraph.__call__)
    rows = []
    print("\n".join(HEADER))
    for mode in a.modes.split(","):
        for name in a.models.split(","):
            for batch in map(int, a.batches.split(",")):
                rows.append(split(name, batch, mode == "training", a.rounds))
                print(row(rows[-1]), flush=True)
    results = {"date": time.strftime("%Y-%m-%d"), "rounds": a.rounds, "rows": rows}
    pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
