"""The cost of `import torch` with torchtpu installed, against the same import without it.

torch runs the `torch.backends` entry points of installed packages at import
(TORCH_DEVICE_BACKEND_AUTOLOAD, on by default); torchtpu's registers the tpu device there. With
autoload off, the same interpreter imports torch as if torchtpu were not installed. Each
sample is a fresh `python -c "import torch"`, the two alternating so that the machine's load
falls on both alike; the medians and their difference are reported. A third column imports
torch and makes one tpu tensor: what the first tpu use adds (the kernels, the patches of
printing, pickling and storages, the PJRT client).

    .venv/bin/python benches/import_torch.py --runs 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = {
    "without torchtpu (autoload off)": ("0", "import torch"),
    "with torchtpu (autoload on)": ("1", "import torch"),
    "with torchtpu, first tpu tensor": ("1", "import torch; torch.ones(1, device='tpu')"),
}


def sample(autoload: str, code: str) -> float:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    env.pop("TORCHTPU_DEVICE", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    sample("1", "import torch")  # warm the page cache
    for _ in range(args.runs):
        for name, (autoload, code) in CASES.items():
            times[name].append(sample(autoload, code))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    base = medians["without torchtpu (autoload off)"]
    for name, m in medians.items():
        print(f"{name:36s} median {m * 1000:7.0f} ms  (+{(m - base) * 1000:5.0f} ms)")
    print(json.dumps({"median_s": medians, "runs": args.runs}))


if __name__ == "__main__":
    main()
