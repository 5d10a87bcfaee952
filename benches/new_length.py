"""What a new prompt length costs in strict-mode eager `generate` on tpu (docs/eager.md, "A new
shape"): the zoo's tiny Llama (python/tests/models/tiny_llama.py), greedy, max_new_tokens=8.

Each round starts one process per setting, each on an empty compile cache folder (so XLA
really compiles): a first prompt of 5 tokens, then new lengths 6, 7 and 9, then 6 again.
Settings: one-op programs built ahead of use off (`compile_ahead(0)`, as before it existed)
and on (its default thread count). Per new length it reports the seconds of the `generate`
call (wall), the CPU seconds of the process and of the generating thread over it (with the
pool, that thread's CPU is what a machine with cores to spare would wait for, if the pool
keeps up), the one-op programs compiled, how many of them the pool built ahead, the pool's
compiles (those plus unused predictions) and how long ops waited for the pool; and whether
the tokens equal CPU eager's. Medians over `--rounds`; every run's rows go to
benches/results/new_length.json.

    .venv/bin/python benches/new_length.py              # 3 rounds, 3-8 minutes on 2 cores
    .venv/bin/python benches/new_length.py --rounds 5 --threads 4
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benches" / "results" / "new_length.json"

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "python", "tests"))
os.environ["HF_HUB_OFFLINE"] = "1"
import torch, torchtpu
from models import tiny_llama
threads = int(sys.argv[2])
if threads >= 0:
    torchtpu.eager.compile_ahead(threads)
ref = tiny_llama.model().eval()
model = tiny_llama.model().eval().to("tpu")
kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
KEYS = ("eager_programs_compiled", "eager_programs_ahead", "eager_ahead_compiles", "eager_ahead_wait_seconds")

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

rows = []
for n in json.loads(sys.argv[3]):
    ids = torch.randint(3, 128, (1, n), generator=torch.Generator().manual_seed(n))
    mask = torch.ones_like(ids)
    before, c0, m0, t0 = torchtpu.stats(), cpu(), time.thread_time(), time.perf_counter()
    out = model.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **kw)
    wall, spent, own = time.perf_counter() - t0, cpu() - c0, time.thread_time() - m0
    time.sleep(0.5)  # the pool's last compiles land in the counts
    after = torchtpu.stats()
    row = {"prompt": n, "wall_s": wall, "cpu_s": spent, "thread_cpu_s": own}
    row.update({k[6:]: after[k] - before[k] for k in KEYS})
    row["equal_cpu"] = torch.equal(out.cpu(), ref.generate(ids, attention_mask=mask, **kw))
    rows.append(row)
print(json.dumps(rows))
"""

PROMPTS = [5, 6, 7, 9, 6]
LABELS = ["5 (first)", "6 (new)", "7 (new)", "9 (new)", "6 (again)"]


def run(threads: int) -> list:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHTPU_CACHE_DIR=cache)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), str(threads), json.dumps(PROMPTS)],
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if out.returncode != 0:
        raise SystemExit(f"child failed ({threads} threads):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--threads",
        type=int,
        default=-1,
        help="the pool's size when on (default: its default)",
    )
    args = ap.parse_args()
    settings = {"ahead off": 0, "ahead on": args.threads}
    results: dict = {k: [] for k in settings}
    for r in range(args.rounds):
        order = list(settings) if r % 2 == 0 else list(settings)[::-1]
        for name in order:
            results[name].append(run(settings[name]))
            print(f"round {r + 1}: {name} done", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    RESULTS.write_text(
        json.dumps(
            {"cores": os.cpu_count(), "load_at_end": load, "runs": results}, indent=1
        )
        + "\n"
    )
    print(
        f"{os.cpu_count()} cores, load {load:.1f} at the end; medians of {args.rounds} rounds\n"
    )
    print(
        "| prompt | setting | wall s | CPU s (process) | CPU s (generate's thread) | programs compiled | "
        "built ahead | pool compiles | waited s | tokens = CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, label in enumerate(LABELS):
        for name in settings:
            rows = [run_rows[i] for run_rows in results[name]]

            def med(k, rows=rows):
                return statistics.median(r[k] for r in rows)

            print(
                f"| {label} | {name} | {med('wall_s'):.2f} | {med('cpu_s'):.2f} | {med('thread_cpu_s'):.2f} | "
                f"{med('programs_compiled'):.0f} | "
                f"{med('programs_ahead'):.0f} | {med('ahead_compiles'):.0f} | {med('ahead_wait_seconds'):.2f} | "
                f"{all(r['equal_cpu'] for r in rows)} |"
            )
    new = [1, 2, 3]
    for name in settings:
        walls = [
            statistics.median(run_rows[i]["wall_s"] for run_rows in results[name])
            for i in new
        ]
        print(
            f"\n{name}: a new length costs {statistics.mean(walls):.2f} s (mean of the new lengths' medians)"
        )


if __name__ == "__main__":
    main()
