"""The eager `tpu` device (docs/eager.md) against CPU eager, side by side in one process.

    .venv/bin/python benches/eager_device.py              # prints the tables, writes the JSON
    .venv/bin/python benches/eager_device.py --quick      # a few rounds, smoke run
    .venv/bin/python benches/eager_device.py --profile    # adds cProfile of the hot op loop

1. Dispatch cost per op on small tensors with a warm program cache (8x8 and 64x64 f32):
   `a + b`, `a * 2.5`, `relu`, `a @ b`, `a.sum()`, `a.add_(b)`, `a[0].mul_(2)`. Each sample
   is the wall time of a batch of calls followed by a sync (`torch.tpu.synchronize()` and a
   value read back to the host), so asynchronous work is counted; tpu and CPU batches are
   interleaved, medians over rounds. Target: at most 50 us above CPU eager per op.
2. Ops per second of a loop of mixed small ops (eager_ops counted by torchtpu.stats()), and
   DeferAndFuse's recording cost per op (a `x * b + a` loop timed up to its cut).
3. Programs compiled per training step after the first (target 0), from
   `torchtpu.stats()["eager_programs_compiled"]` around steps 2..N.
4. Training step (forward, loss, backward, AdamW, zero_grad, loss read back) of an MLP
   (Linear-GELU-Linear) and of the zoo's small Llama (python/tests/models/zoo.py, labels =
   input ids): median ms on tpu (strict and DeferAndFuse modes; debug mode for the MLP) vs CPU
   eager, interleaved; per tpu step, the peak of live device-buffer bytes above what was live
   before it (`torch.tpu.max_memory_allocated`), DeferAndFuse's regions run and compiled.

These 2-core machines are noisy: compare numbers from one run. Writes
benches/results/eager_device.json (`--json PATH` to change).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import statistics
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))  # the model zoo

import torch

import torchtpu  # noqa: F401  (registers the tpu device)
import torchtpu.eager

TARGET_US = 50.0


def sync_tpu(t=None) -> None:
    torch.tpu.synchronize()
    if t is not None:
        t.cpu()  # a value read back: waits for the buffer whatever synchronize does


def compiled() -> int:
    return torchtpu.stats()["eager_programs_compiled"]


def fallbacks() -> dict:
    return dict(torchtpu.stats()["eager_cpu_fallbacks"])


# ------------------------------------------------------------------ 1. per-op dispatch


def op_table(n: int):
    """(name, size, make) rows; make(device) returns (fn, tensor to read back after a batch)."""

    def inputs(device):
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        return a.to(device), b.to(device)

    def row(name, body):
        def make(device):
            a, b = inputs(device)
            holder = [a]

            def fn():
                holder[0] = body(a, b)

            return fn, lambda: holder[0], a

        return (name, n, make)

    def inplace(a, b):
        a.add_(b)
        return a

    def view_write(a, b):
        a[0].mul_(2)
        return a

    return [
        row("a + b", lambda a, b: a + b),
        row("a * 2.5", lambda a, b: a * 2.5),
        row("torch.relu(a)", lambda a, b: torch.relu(a)),
        row("a @ b", lambda a, b: a @ b),
        row("a.sum()", lambda a, b: a.sum()),
        row("a.add_(b)", inplace),
        row("a[0].mul_(2)", view_write),
    ]


def batch_us(fn, last, calls: int, tpu: bool) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    if tpu:
        sync_tpu(last())
    return (time.perf_counter() - t0) / calls * 1e6


def measure_ops(rounds: int, calls: int) -> list[dict]:
    rows = op_table(8) + op_table(64)
    prepared = []
    for name, n, make in rows:
        cpu_fn, cpu_last, _ = make("cpu")
        tpu_fn, tpu_last, _ = make("tpu")
        for _ in range(3):  # warm: the program is compiled (or found) here
            cpu_fn()
            tpu_fn()
        sync_tpu(tpu_last())
        prepared.append((name, n, cpu_fn, cpu_last, tpu_fn, tpu_last))
    c0, ops0 = compiled(), torchtpu.stats()["eager_ops"]
    samples = {(name, n): ([], []) for name, n, *_ in prepared}
    for _ in range(rounds):
        for name, n, cpu_fn, cpu_last, tpu_fn, tpu_last in prepared:
            cpu_s, tpu_s = samples[(name, n)]
            cpu_s.append(batch_us(cpu_fn, cpu_last, calls, False))
            tpu_s.append(batch_us(tpu_fn, tpu_last, calls, True))
    warm_compiles = compiled() - c0
    out = []
    for (name, n), (cpu_s, tpu_s) in samples.items():
        cpu, tpu = statistics.median(cpu_s), statistics.median(tpu_s)
        out.append({"op": name, "size": f"{n}x{n}", "cpu_us": cpu, "tpu_us": tpu, "diff_us": tpu - cpu,
                    "ratio": tpu / cpu, "met": tpu - cpu <= TARGET_US})
    eager_ops = torchtpu.stats()["eager_ops"] - ops0
    return out, warm_compiles, eager_ops


def measure_sync(rounds: int) -> dict:
    """What the batch-closing sync costs alone (amortized over the batch in table 1)."""
    a = torch.randn(8, 8).to("tpu")
    (a + 1).cpu()
    s_sync, s_read = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        torch.tpu.synchronize()
        s_sync.append((time.perf_counter() - t0) * 1e6)
        t0 = time.perf_counter()
        a.cpu()
        s_read.append((time.perf_counter() - t0) * 1e6)
    return {"synchronize_us": statistics.median(s_sync), "read_8x8_us": statistics.median(s_read)}


# ------------------------------------------------------------------ 2. mixed loop


def mixed_body(a, b, w):
    y = a + b
    y = y * 0.5
    y = torch.relu(y)
    z = y @ w
    z = torch.tanh(z)
    s = z.sum()
    a.add_(b, alpha=0.001)
    a[0].mul_(0.999)
    return s


def measure_mixed(rounds: int, iters: int) -> dict:
    def make(device):
        g = torch.Generator().manual_seed(0)
        return [torch.randn(16, 16, generator=g).to(device) for _ in range(3)]

    tpu_in, cpu_in = make("tpu"), make("cpu")
    ops0 = torchtpu.stats()["eager_ops"]
    mixed_body(*tpu_in).cpu()
    per_iter = torchtpu.stats()["eager_ops"] - ops0  # ops the tpu device saw per iteration
    tpu_s, cpu_s = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            s = mixed_body(*cpu_in)
        cpu_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(iters):
            s = mixed_body(*tpu_in)
        sync_tpu(s)
        tpu_s.append(time.perf_counter() - t0)
    tpu_t, cpu_t = statistics.median(tpu_s), statistics.median(cpu_s)
    return {"ops_per_iteration": per_iter, "iterations": iters, "tpu_ops_per_s": per_iter * iters / tpu_t,
            "cpu_ops_per_s": per_iter * iters / cpu_t, "tpu_us_per_op": tpu_t / (per_iter * iters) * 1e6,
            "cpu_us_per_op": cpu_t / (per_iter * iters) * 1e6}


def measure_recording(rounds: int, iters: int) -> dict:
    """DeferAndFuse: the cost of recording an op (a 16x16 `x = x * b + a` loop, 2 ops per
    iteration, timed up to the cut), and of the whole loop with its cut and region run; against
    the same loop in CPU eager, interleaved."""
    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(16, 16, generator=g) for _ in range(3)]
    tpu = [t.to("tpu") for t in cpu]

    def loop(x, a, b):
        for _ in range(iters):
            x = x * b + a
        return x

    rec_s, run_s, cpu_s = [], [], []
    with torchtpu.eager.mode("defer_and_fuse"):
        loop(*tpu).cpu()  # the first region: compiled
        for _ in range(rounds):
            t0 = time.perf_counter()
            x = loop(*tpu)
            t1 = time.perf_counter()
            x.cpu()
            t2 = time.perf_counter()
            rec_s.append(t1 - t0)
            run_s.append(t2 - t0)
            t0 = time.perf_counter()
            loop(*cpu)
            cpu_s.append(time.perf_counter() - t0)
    n = 2 * iters
    return {"ops": n, "record_us_per_op": statistics.median(rec_s) / n * 1e6,
            "with_cut_us_per_op": statistics.median(run_s) / n * 1e6,
            "cpu_us_per_op": statistics.median(cpu_s) / n * 1e6}


# ------------------------------------------------------------------ 3 and 4. training steps


class MLP(torch.nn.Module):
    def __init__(self, d=64, h=256):
        super().__init__()
        self.fc1, self.act, self.fc2 = torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def mlp_case(device):
    torch.manual_seed(0)
    model = MLP().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 64, generator=g).to(device), torch.randn(32, 64, generator=g).to(device)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


# Set in main: whether `torch.arange(..., device="tpu")` works. When it does not (its CPU
# fallback of aten::arange.start_out failed with "Trying to resize storage that is not
# resizable" on 2026-12-01), the Llama gets explicit position_ids, on CPU and tpu alike.
ARANGE_OK = True


def probe_arange() -> str | None:
    try:
        torch.arange(8, device="tpu").cpu()
        return None
    except Exception as e:  # noqa: BLE001 - recorded, not hidden
        return f"{type(e).__name__}: {e}"


def llama_case(device):
    from models import zoo

    spec = next(s for s in zoo._hf_specs() if s.name == "llama")
    model = spec.build().train().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = spec.inputs()["input_ids"].to(device)
    extra = {} if ARANGE_OK else {"position_ids": torch.arange(ids.shape[1]).unsqueeze(0).to(device)}

    def step():
        loss = model(input_ids=ids, labels=ids, **extra).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def measure_training(name, build, rounds: int, debug: bool) -> dict:
    paths = {"cpu": (build("cpu"), None), "tpu strict": (build("tpu"), "strict"),
             "tpu defer_and_fuse": (build("tpu"), "defer_and_fuse")}
    if debug:
        paths["tpu debug"] = (build("tpu"), "debug")
    first, compiles_first, compiles_after, fb_after, losses = {}, {}, {}, {}, {}
    for label, (step, mode) in paths.items():
        with torchtpu.eager.mode(mode or "strict"):
            c0, t0 = compiled(), time.perf_counter()
            losses[label] = [step()]
            first[label] = time.perf_counter() - t0
            compiles_first[label] = compiled() - c0
            # steps 2..3 before timing: every program a step needs exists after step 1
            c1, f1 = compiled(), fallbacks()
            losses[label] += [step(), step()]
            compiles_after[label] = [compiled() - c1]
            fb_after[label] = {k: v - f1.get(k, 0) for k, v in fallbacks().items() if v - f1.get(k, 0)}
    samples = {k: [] for k in paths}
    peaks = {k: [] for k in paths if k != "cpu"}
    regions = {k: [] for k in paths if k != "cpu"}
    for _ in range(rounds):
        for label, (step, mode) in paths.items():
            with torchtpu.eager.mode(mode or "strict"):
                c1 = compiled()
                if mode:
                    torch.tpu.synchronize()
                    live = torch.tpu.memory_allocated()
                    torch.tpu.reset_peak_memory_stats()
                    r1 = torchtpu.stats()["eager_regions"]
                t0 = time.perf_counter()
                step()
                samples[label].append((time.perf_counter() - t0) * 1e3)
                compiles_after[label].append(compiled() - c1)
                if mode:
                    peaks[label].append(torch.tpu.max_memory_allocated() - live)
                    regions[label].append(torchtpu.stats()["eager_regions"] - r1)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "peak_bytes_per_step": {k: max(v) for k, v in peaks.items()},
        "regions_per_step": {k: sorted(set(v)) for k, v in regions.items()},
        "model": name,
        "step_ms": med,
        "step_ms_min": {k: min(v) for k, v in samples.items()},
        "rounds": rounds,
        "ratio_vs_cpu": {k: v / med["cpu"] for k, v in med.items() if k != "cpu"},
        "first_step_s": first,
        "programs_compiled_first_step": {k: v for k, v in compiles_first.items() if k != "cpu"},
        "programs_compiled_per_step_after_first": {k: max(v) for k, v in compiles_after.items() if k != "cpu"},
        "programs_compiled_steps_2_to_n": {k: sum(v) for k, v in compiles_after.items() if k != "cpu"},
        "steps_after_first": 2 + rounds,
        "cpu_fallbacks_steps_2_3": {k: v for k, v in fb_after.items() if k != "cpu"},
        "loss_first_3": losses,
    }


# ------------------------------------------------------------------ profile


def profile_hot_loop(calls: int = 5000, top: int = 10) -> str:
    import cProfile
    import io
    import pstats

    a, b = torch.randn(8, 8).to("tpu"), torch.randn(8, 8).to("tpu")
    c = a + b
    sync_tpu(c)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        c = a + b
    sync_tpu(c)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(top)
    text = buf.getvalue()
    return text[text.index("ncalls") - 1:] if "ncalls" in text else text


# ------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few rounds (smoke run)")
    ap.add_argument("--profile", action="store_true", help="cProfile the 8x8 `a + b` loop (top 10 by tottime)")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--json", default=str(ROOT / "benches" / "results" / "eager_device.json"))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    q = args.quick
    t_start = time.perf_counter()
    results: dict = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                     "threads": torch.get_num_threads(), "quick": q,
                     "loadavg_at_start": os.getloadavg()}

    ops, warm_compiles, eager_ops = measure_ops(rounds=3 if q else 25, calls=100 if q else 500)
    sync = measure_sync(20 if q else 200)
    results.update(per_op=ops, per_op_compiles_while_timed=warm_compiles, sync=sync)
    print("## Per-op dispatch, warm program cache (median us per op; batch + sync, interleaved)\n")
    print("| op | size | CPU eager (us) | tpu (us) | tpu - CPU (us) | ratio | <= 50 us above |")
    print("|---|---|---|---|---|---|---|")
    for r in ops:
        print(f"| `{r['op']}` | {r['size']} | {r['cpu_us']:.1f} | {r['tpu_us']:.1f} | {r['diff_us']:.1f} | "
              f"{r['ratio']:.1f}x | {'yes' if r['met'] else 'no'} |")
    diffs = [r["diff_us"] for r in ops]
    print(f"\nMedian tpu - CPU over the rows: {statistics.median(diffs):.1f} us; programs compiled while "
          f"timed: {warm_compiles}; torch.tpu.synchronize() alone {sync['synchronize_us']:.1f} us, "
          f"reading an 8x8 back {sync['read_8x8_us']:.1f} us (once per batch).\n")

    mixed = measure_mixed(rounds=3 if q else 15, iters=50 if q else 300)
    results["mixed_loop"] = mixed
    print("## Mixed small ops (16x16: add, mul, relu, mm, tanh, sum, add_, view mul_)\n")
    print("| | ops/s | us per op |")
    print("|---|---|---|")
    print(f"| CPU eager | {mixed['cpu_ops_per_s']:,.0f} | {mixed['cpu_us_per_op']:.1f} |")
    print(f"| tpu (strict) | {mixed['tpu_ops_per_s']:,.0f} | {mixed['tpu_us_per_op']:.1f} |")
    print(f"\n{mixed['ops_per_iteration']} tpu ops per iteration, {mixed['iterations']} iterations per sample.\n")

    rec = measure_recording(rounds=3 if q else 15, iters=100 if q else 400)
    results["defer_recording"] = rec
    print("## DeferAndFuse recording (16x16 `x = x * b + a`, us per op)\n")
    print("| recording only | with the cut (region run, read back) | CPU eager |")
    print("|---|---|---|")
    print(f"| {rec['record_us_per_op']:.2f} | {rec['with_cut_us_per_op']:.2f} | {rec['cpu_us_per_op']:.2f} |")
    print(f"\n{rec['ops']} ops per region.\n")

    training = [measure_training("MLP 64-256-64, batch 32", mlp_case, rounds=5 if q else 400, debug=True)]
    if not args.no_llama:
        global ARANGE_OK
        arange_error = probe_arange()
        ARANGE_OK = arange_error is None
        results["llama_position_ids_workaround"] = arange_error
        training.append(measure_training("zoo Llama (2 layers, d32, seq 8, batch 2)", llama_case,
                                         rounds=3 if q else 100, debug=False))
    results["training"] = training
    print("## Training step (forward, loss, backward, AdamW, zero_grad, loss.item())\n")
    print("| model | path | step (ms, median) | vs CPU eager | step (ms, min) | first step (s) | programs, step 1 | programs per step after | CPU fallbacks per step | peak device KiB per step | regions per step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in training:
        for label, ms in t["step_ms"].items():
            ratio = f"{t['ratio_vs_cpu'][label]:.1f}x" if label != "cpu" else "1.0x"
            prog1 = t["programs_compiled_first_step"].get(label, "-")
            after = t["programs_compiled_per_step_after_first"].get(label, "-")
            fb = t["cpu_fallbacks_steps_2_3"].get(label)
            fb = "-" if label == "cpu" else (", ".join(f"{k} {v / 2:g}" for k, v in fb.items()) or "0")
            name = "CPU eager" if label == "cpu" else label
            peak = t["peak_bytes_per_step"].get(label)
            peak = "-" if peak is None else f"{peak / 1024:.0f}"
            regs = t["regions_per_step"].get(label)
            regs = "-" if not regs or label != "tpu defer_and_fuse" else "/".join(map(str, regs))
            print(f"| {t['model']} | {name} | {ms:.2f} | {ratio} | {t['step_ms_min'][label]:.2f} | {t['first_step_s'][label]:.2f} | {prog1} | {after} | {fb} | {peak} | {regs} |")
    for t in training:
        st, df = t["step_ms"]["tpu strict"], t["step_ms"]["tpu defer_and_fuse"]
        ps, pd = t["peak_bytes_per_step"]["tpu strict"], t["peak_bytes_per_step"]["tpu defer_and_fuse"]
        t["defer_speedup_vs_strict"] = st / df
        t["defer_peak_vs_strict"] = pd / ps if ps else None
        print(f"\n{t['model']}: DeferAndFuse {st / df:.2f}x faster than strict (median step), "
              f"min steps {t['step_ms_min']['tpu strict'] / t['step_ms_min']['tpu defer_and_fuse']:.2f}x; "
              f"peak device memory {pd / 1024:.0f} KiB vs {ps / 1024:.0f} KiB ({pd / ps:.2f}x of strict).")
    print("\n'programs per step after' is the most compiled in any one of steps 2..N "
          f"(N = {training[0]['steps_after_first'] + 1} for the MLP); target 0. tpu debug runs after "
          "tpu strict, so its step 1 finds strict's programs cached.")
    if results.get("llama_position_ids_workaround"):
        print("The Llama is given explicit position_ids (CPU and tpu): `torch.arange(8, device='tpu')` "
              f"fails here ({results['llama_position_ids_workaround']}).")
    print()

    if args.profile:
        text = profile_hot_loop()
        results["profile_add_8x8"] = text
        print("## cProfile: 5000 x `a + b` (8x8) on tpu, top 10 by tottime\n")
        print("```\n" + text.rstrip() + "\n```\n")

    results["total_s"] = time.perf_counter() - t_start
    print(f"Total {results['total_s']:.0f} s; load average at start {results['loadavg_at_start'][0]:.2f} "
          f"(other processes on these 2 cores inflate CPU eager's 2-thread steps most; see the min column).")
    if not q:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1) + "\n")
        print(f"Wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}.")


if __name__ == "__main__":
    main()
