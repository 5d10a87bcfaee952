"""The compiler's time on small programs (a one-op program, the quickstart's graph), an
earlier build against this one, interleaved in one run.

    cargo build --release -p torchtpu-benches --example compile_small
    cp target/release/examples/compile_small /tmp/before/compile_small   # at the old commit
    .venv/bin/python benches/compile_small.py --before /tmp/before/compile_small

Each binary compiles each graph 300 times in one process (driver, default options, bytecode:
what the engine runs on a graph-cache miss); the runs alternate ROUNDS times and the median of
their medians is reported, with after/before ratios. XLA's compile is not included.
Results go to benches/results/compile_small.json.
"""

import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
GRAPHS = [os.path.join(HERE, "graphs", "one_op.ir"), os.path.join(HERE, "graphs", "quickstart.ir")]
ROUNDS = 7


def run(binary):
    out = subprocess.run([binary, *GRAPHS], check=True, capture_output=True, text=True, timeout=600).stdout
    return {os.path.basename(r["file"]): r for r in map(json.loads, out.splitlines())}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--before", required=True, help="compile_small built at the earlier commit")
    p.add_argument("--after", default=os.path.join(HERE, "..", "target", "release", "examples", "compile_small"))
    args = p.parse_args()
    samples = {"before": [], "after": []}
    for _ in range(ROUNDS):
        for side in ("before", "after"):
            samples[side].append(run(getattr(args, side)))
    result = {}
    for g in map(os.path.basename, GRAPHS):
        row = {}
        for side, runs in samples.items():
            row[f"{side}_median_us"] = statistics.median(r[g]["median_us"] for r in runs)
            stages = runs[0][g]["stages_median_us"]
            row[f"{side}_stages_us"] = {s: statistics.median(r[g]["stages_median_us"][s] for r in runs) for s in stages}
        row["after_over_before"] = round(row["after_median_us"] / row["before_median_us"], 3)
        result[g] = row
        print(f"{g}: before {row['before_median_us']:.1f} us, after {row['after_median_us']:.1f} us, "
              f"ratio {row['after_over_before']}")
    with open(os.path.join(HERE, "results", "compile_small.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
