"""Channels-last layouts, programs alone: the `assign-layouts` pass (in the default pipeline)
and the saved-activation layout (option `relayout_saved`), each on and off, for the
convolution models of `benches/performance.py`. Each model's graphs are exported once per
`relayout_saved` setting (`dump_dir`), compiled with and without `assign-layouts`, and the
programs are timed on random inputs of their signatures, interleaved round by round, so the
XLA programs themselves are compared without the noise of the rest of a step.

    .venv/bin/python benches/layouts.py
"""

from __future__ import annotations

import glob
import os
import re
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import performance as perf  # noqa: E402

from torchtpu import _C  # noqa: E402

torch._dynamo.config.recompile_limit = 64
WITH = "canonicalize,fold-constants,assign-layouts,cse,dce,schedule-memory"
WITHOUT = "canonicalize,fold-constants,cse,dce,schedule-memory"
DTYPES = {"f32": torch.float32, "i64": torch.int64, "bool": torch.bool}


def export(name: str, batch: int, train: bool, relayout_saved: bool, out: str) -> None:
    model, args = perf.build(name, batch)
    runner = perf.Runner(model, args, "eager", train)
    runner.fn = torch.compile(runner.model, backend="torchtpu", options={"dump_dir": out, "relayout_saved": relayout_saved})
    runner.step()
    torch._dynamo.reset()


def program(path: str, pipeline: str):
    text = open(path).read()
    signature = re.search(r"graph @\w+\((.*?)\) ->", text, re.S).group(1)
    inputs = []
    for m in re.finditer(r"%in\d+: (\w+)\[([^\]]*)\]", signature):
        shape = [int(d) for d in m.group(2).split(",") if d.strip()]
        dtype = DTYPES[m.group(1)]
        inputs.append(torch.randn(shape).to(dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype))
    prog = _C.compile(text, pipeline)
    prog.run(inputs)
    return lambda: prog.run(inputs)


def timed(variants: dict, rounds: int = 9) -> dict:
    samples = {k: [] for k in variants}
    for _ in range(rounds):
        for k, run in variants.items():
            t = time.perf_counter()
            for _ in range(3):
                run()
            samples[k].append((time.perf_counter() - t) / 3 * 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    print("| model / batch | graph | relayout_saved | without assign-layouts ms | with ms | with vs without |")
    print("|---|---|---|---|---|---|")
    for name in ("cnn", "resnet18"):
        for batch in (1, 16):
            for train in (False, True):
                for saved in ((True, False) if train else (True,)):
                    with tempfile.TemporaryDirectory() as d:
                        export(name, batch, train, saved, d)
                        for path in sorted(glob.glob(os.path.join(d, "*.input.ir"))):
                            graph = os.path.basename(path).split(".")[0]
                            t = timed({"without": program(path, WITHOUT), "with": program(path, WITH)})
                            print(f"| {name}/{batch} | {graph} | {saved if train else '-'} | {t['without']:.2f} | {t['with']:.2f} "
                                  f"| {t['without'] / t['with']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
