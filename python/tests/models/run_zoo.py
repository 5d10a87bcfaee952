"""Runs the model zoo and writes docs/model-coverage.md.

    .venv/bin/python python/tests/models/run_zoo.py                 # every model, writes the report
    .venv/bin/python python/tests/models/run_zoo.py --only llama,bert --no-report
    .venv/bin/python python/tests/models/run_zoo.py --device-modes    # also on tpu, every mode (make zoo-modes)

Each model: forward under torch.compile(backend="torchtpu") vs eager (tolerances in harness.py),
graph and fallback counts from torchtpu.stats(), first-call seconds (tracing + compile), the
steady-state speed ratio vs eager (median of interleaved calls), and for zoo.TRAIN one training
step. The persistent compilation cache is switched off so compile seconds are cold.

With --device-modes each model also runs moved to the tpu device (`.to("tpu")`) in strict mode,
in DeferAndFuse and under torch.compile on tpu tensors, each against CPU eager with the same
tolerances and zero CPU fallbacks (harness.run_device_mode), and the report gets a second table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import pathlib
import platform
import sys
import time
import warnings

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("TORCHTPU_CACHE", "0")

from models import harness, zoo  # noqa: E402


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _device_table(results: list[harness.Result], modes: dict) -> list[str]:
    """The per-mode table: today's compiled-from-CPU column beside the three tpu modes."""
    cols = ["compiled from CPU"] + [_MODE_TITLES[m] for m in harness.DEVICE_MODES]
    lines = [
        "",
        "## On the tpu device, every mode",
        "",
        'Each model moved to tpu (`.to("tpu")`, inputs too) and run in strict eager mode, in DeferAndFuse',
        '(`torchtpu.eager.mode("defer_and_fuse")`) and under `torch.compile(backend="torchtpu")` on tpu tensors,',
        "beside the table above's compile of the CPU model. Each is compared with CPU eager (same tolerances),",
        "and passes only with zero CPU fallbacks. Cells: status, first call in seconds (no disk cache; in",
        "strict mode only the one-op programs no earlier model compiled: that cache is per process, so",
        "later models find most of theirs), steady-state speed vs CPU eager (above 1 is faster; outputs",
        "are read back to the host each call), and for zoo.TRAIN the training step.",
        "",
    ]
    totals = []
    for m in harness.DEVICE_MODES:
        rs = [modes[r.name][m] for r in results if r.name in modes]
        totals.append(
            f"{_MODE_TITLES[m]}: {sum(x.status == 'pass' for x in rs)}/{len(rs)} pass"
            f" (train {sum(x.train == 'pass' for x in rs)}/{sum(x.train != '-' for x in rs)})"
        )
    lines += ["- " + t for t in totals] + [""]
    lines.append("| model | " + " | ".join(cols) + " |")
    lines.append("|---|" + "---|" * len(cols))
    for r in results:
        if r.name not in modes:
            continue
        cells = [
            f"{r.status} {_fmt(r.compile_s, '.1f')}s {_fmt(r.speedup, '.2f')}x"
            + (f" train {r.train}" if r.train != "-" else "")
        ]
        for m in harness.DEVICE_MODES:
            x = modes[r.name][m]
            cell = f"{x.status} {_fmt(x.first_s, '.1f')}s {_fmt(x.speed, '.2f')}x"
            if x.train != "-":
                cell += f" train {x.train}"
            cells.append(cell)
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    failing = [
        (name, m, x)
        for name, per in modes.items()
        for m, x in per.items()
        if x.status != "pass" or x.train not in ("pass", "-")
    ]
    if failing:
        lines += ["", "### Not passing on the device, with the reason", ""]
        for name, m, x in failing:
            why = (
                x.error
                or (
                    ", ".join(f"{op}x{c}" for op, c in sorted(x.fallbacks.items()))
                    and "CPU fallbacks: " + ", ".join(f"{op}x{c}" for op, c in sorted(x.fallbacks.items()))
                )
                or f"max rel err {_fmt(x.max_rel, '.1e')}, train {x.train}"
            )
            lines.append(
                f"- **{name}**, {_MODE_TITLES[m]}: {x.status} (train {x.train}): `{str(why).replace('`', chr(39))}`"
            )
    return lines


_MODE_TITLES = {"strict": "tpu eager (strict)", "defer_and_fuse": "tpu DeferAndFuse", "compile": "torch.compile on tpu"}


def write_report(results: list[harness.Result], path: pathlib.Path, seconds: float, modes: dict | None = None) -> None:
    import torch
    import torchvision
    import transformers

    n = len(results)
    passed = [r for r in results if r.status == "pass"]
    runs = [r for r in results if r.status != "error"]
    trained = [r for r in results if r.train != "-"]
    by_status = {s: sum(r.status == s for r in results) for s in ("pass", "mismatch", "fallback", "error")}
    speeds = [r.speedup for r in results if r.status == "pass" and not math.isnan(r.speedup)]
    geo = math.exp(sum(math.log(s) for s in speeds) / len(speeds)) if speeds else float("nan")
    lines = [
        "# Model coverage",
        "",
        "Generated by `make zoo` (`python/tests/models/run_zoo.py`); do not edit by hand.",
        f"Run {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} cores), torch "
        f"{torch.__version__}, transformers {transformers.__version__}, torchvision "
        f"{torchvision.__version__}; {seconds / 60:.1f} minutes.",
        "",
        "Every model is built from a small configuration with random weights (nothing downloaded),",
        'run once eagerly and once under `torch.compile(backend="torchtpu")` on the same inputs.',
        f"Outputs match when max |compiled - eager| <= {harness.OUT_ATOL} + {harness.OUT_RTOL} * max |eager|",
        f"over every output tensor; training gradients per parameter with rtol {harness.GRAD_RTOL}.",
        "Status: **pass** = matches with zero fallback ops; **fallback** = matches but some ops ran",
        "eagerly; **mismatch** = outputs differ; **error** = the compiled model raised.",
        "First call = Dynamo + AOTAutograd tracing + our compile + XLA compile, no disk cache.",
        "Speed = eager time / torchtpu time per steady-state inference call (median of interleaved",
        "calls; above 1 means torchtpu is faster).",
        "",
        "## Totals",
        "",
        f"- models: {n} ({sum(r.family == 'torchvision' for r in results)} torchvision, "
        f"{sum(r.family != 'torchvision' for r in results)} Hugging Face)",
        f"- pass with zero fallback ops: {by_status['pass']}/{n} = {100 * len(passed) / max(n, 1):.1f}%",
        f"- fallback: {by_status['fallback']}, mismatch: {by_status['mismatch']}, error: {by_status['error']}",
        f"- every model runs: {'yes' if len(runs) == n else f'no ({n - len(runs)} errors)'}",
        f"- training step: {sum(r.train == 'pass' for r in trained)}/{len(trained)} pass",
        f"- geometric-mean steady-state speed vs eager (passing models): {_fmt(geo, '.2f')}x",
        "",
        "## Models",
        "",
        "| model | family | status | graphs | fallback ops | max abs err | max rel err | first call s | speed vs eager | train step | train max rel err |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        fb = ", ".join(f"{op}x{c}" for op, c in sorted(r.fallback_ops.items())) or "-"
        lines.append(
            f"| {r.name} | {r.family} | {r.status} | {r.graphs} | {fb} | {_fmt(r.max_abs, '.1e')} | "
            f"{_fmt(r.max_rel, '.1e')} | {_fmt(r.compile_s, '.1f')} | {_fmt(r.speedup, '.2f')} | "
            f"{r.train} | {_fmt(r.train_max_rel, '.1e')} |"
        )
    errors = [r for r in results if r.error]
    if errors:
        lines += ["", "## Errors", ""]
        lines += ["- **{}**: `{}`".format(r.name, r.error.replace("`", "'")) for r in errors]
    if modes:
        lines += _device_table(results, modes)
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated model names (default: all)")
    ap.add_argument("--no-report", action="store_true", help="do not write docs/model-coverage.md")
    ap.add_argument("--report", default=str(ROOT / "docs" / "model-coverage.md"))
    ap.add_argument("--json", help="also write the results as JSON to this file")
    ap.add_argument("--timing-rounds", type=int, default=5)
    ap.add_argument("--device-modes", action="store_true", help="also run each model on tpu in every mode")
    args = ap.parse_args()

    warnings.simplefilter("ignore")
    logging.getLogger("torchtpu").setLevel(logging.ERROR)
    specs = zoo.ALL
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in zoo.BY_NAME]
        if unknown:
            ap.error(f"unknown models: {', '.join(unknown)} (known: {', '.join(zoo.BY_NAME)})")
        specs = [zoo.BY_NAME[n] for n in names]

    start = time.perf_counter()
    results = []
    modes: dict = {}
    for spec in specs:
        t0 = time.perf_counter()
        r = harness.run_model(spec, train=spec.name in zoo.TRAIN, timing_rounds=args.timing_rounds)
        results.append(r)
        fb = ",".join(sorted(r.fallback_ops)) or "-"
        print(
            f"{r.name:24s} {r.status:9s} train={r.train:8s} graphs={r.graphs} rel={r.max_rel:.1e} "
            f"first={r.compile_s:.1f}s speed={r.speedup:.2f} fallback={fb} "
            f"({time.perf_counter() - t0:.0f}s) {r.error}",
            flush=True,
        )
        if args.device_modes:
            per = modes[spec.name] = {}
            for mode in harness.DEVICE_MODES:
                t0 = time.perf_counter()
                x = per[mode] = harness.run_device_mode(spec, mode, train=spec.name in zoo.TRAIN)
                print(
                    f"  {mode:16s} {x.status:9s} train={x.train:8s} rel={x.max_rel:.1e} first={x.first_s:.1f}s "
                    f"speed={x.speed:.2f} fallback={','.join(sorted(x.fallbacks)) or '-'} "
                    f"({time.perf_counter() - t0:.0f}s) {x.error}",
                    flush=True,
                )
    seconds = time.perf_counter() - start
    if args.json:
        data = [dict(r.__dict__, modes={m: x.__dict__ for m, x in modes.get(r.name, {}).items()}) for r in results]
        pathlib.Path(args.json).write_text(json.dumps(data, indent=1))
    if not args.no_report:
        write_report(results, pathlib.Path(args.report), seconds, modes)
        print(f"wrote {args.report}")
    passed = sum(r.status == "pass" for r in results)
    print(f"{passed}/{len(results)} models pass with zero fallback ops ({seconds / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
