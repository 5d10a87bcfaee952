"""torchtpu with one backend option changed, against itself and eager: the before/after bench
of a change that an option can turn off. The models, inputs and training step are those of
`benches/performance.py`; backends are interleaved round by round (order rotated), medians.

    .venv/bin/python benches/options_ab.py --b '{"donate": false}'
    .venv/bin/python benches/options_ab.py --a '{}' --b '{"relayout_weights": false}' --models cnn --mode infer

Prints a Markdown table (and `--json PATH` writes the numbers).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import warnings
from pathlib import Path

import torch

# Every model is compiled by several backends, for inference and training, at two batch sizes:
# more than Dynamo's default 8 entries per code object, past which it runs the rest eagerly
# (and the table would compare eager with eager).
torch._dynamo.config.recompile_limit = 64
torch._dynamo.config.accumulated_recompile_limit = 4096

sys.path.insert(0, str(Path(__file__).resolve().parent))

import performance as perf  # noqa: E402  (the same models and step as the full run)


class OptionsRunner(perf.Runner):
    """A `performance.Runner` whose torchtpu backend gets `options`."""

    def __init__(self, model, args, label: str, options: dict | None, train: bool):
        self.backend, self.train, self.args = label, train, args
        self.model = copy.deepcopy(model)
        self.model.train(train)
        # strict: a variant that fails to compile must fail the bench, not time eager instead.
        self.fn = self.model if options is None else torch.compile(self.model, backend="torchtpu", options={"strict": True, **options})
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4) if train else None
        self.samples = []
        self.calls = 1


def measure(name: str, batch: int, train: bool, variants: dict, rounds: int, seconds: float) -> dict:
    model, args = perf.build(name, batch)
    runners = [OptionsRunner(model, args, label, opts, train) for label, opts in variants.items()]
    if not train:  # each variant must agree with eager before it is timed
        with torch.no_grad():
            want = runners[0].fn(*args)
            for r in runners[1:]:
                err = perf.max_error(r.fn(*args), want)
                assert err < 1e-4, f"{name}/{batch} {r.backend}: max relative error {err:.2e} against eager"
    for r in runners:
        for _ in range(3):
            r.step()
        r.calibrate(seconds)
    n = len(runners)
    for k in range(rounds):
        for r in runners[k % n:] + runners[: k % n]:
            r.sample()
    return {r.backend: perf.summary(r.samples)["median_ms"] for r in runners}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="{}", help="torchtpu options of variant A (JSON)")
    ap.add_argument("--b", required=True, help="torchtpu options of variant B (JSON)")
    ap.add_argument("--models", default=",".join(perf.MODELS))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--mode", choices=("infer", "train", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=0.15, help="target time of one sample")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    variants = {"eager": None, "A": json.loads(a.a), "B": json.loads(a.b)}
    modes = {"infer": [False], "train": [True], "both": [False, True]}[a.mode]
    print(f"A = {a.a}, B = {a.b}; medians of {a.rounds} interleaved rounds\n")
    print("| mode | model / batch | eager ms | A ms | B ms | A vs eager | B vs eager | B vs A |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for train in modes:
        for name in a.models.split(","):
            for batch in map(int, a.batches.split(",")):
                m = measure(name, batch, train, variants, a.rounds, a.seconds)
                rows.append({"train": train, "model": name, "batch": batch, **m})
                print(f"| {'train' if train else 'infer'} | {name}/{batch} | {m['eager']:.3f} | {m['A']:.3f} | {m['B']:.3f} "
                      f"| {m['eager'] / m['A']:.2f}x | {m['eager'] / m['B']:.2f}x | {m['A'] / m['B']:.2f}x |", flush=True)
    for label in ("A", "B"):
        print(f"\ngeometric mean, {label} vs eager: {perf.geomean([r['eager'] / r[label] for r in rows]):.2f}x", end="")
    print(f"\ngeometric mean, B vs A: {perf.geomean([r['A'] / r['B'] for r in rows]):.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps({"a": variants["A"], "b": variants["B"], "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
