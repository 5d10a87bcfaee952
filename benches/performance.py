"""torchtpu vs eager vs Inductor, side by side in one run (issue 8).

    .venv/bin/python benches/performance.py          # 10-30 min; writes docs/performance.md, docs/img/perf_*.png
    .venv/bin/python benches/performance.py --quick  # a smoke run: few rounds, no subprocesses
    .venv/bin/python benches/performance.py --report-only  # the doc again from the last run's JSON

For each model of a fixed set (the test MLP, transformer block and CNN of
`python/tests/models/small.py`; a GPT-2 and a BERT from `transformers` configs with random
weights; torchvision's resnet18 at 64x64) and batch sizes 1 and 16, it measures:

- steady-state time per inference call (`torch.no_grad()`, eval mode);
- time per training step: forward, loss, backward, SGD step (only the model is compiled);
- first-call latency (Dynamo + compile + first run) of a fresh process, with an empty cache
  ("cold") and again with the cache the cold run left ("warm"): batch 16, inference;
- peak memory: the resident-set peak of a fresh process over steady-state inference calls,
  above its resident set before them (`/proc/self/clear_refs`), and the process's overall
  peak including compilation;

for eager, Inductor (`torch.compile` default backend) and torchtpu. Steady-state numbers are
per-call medians over rounds that interleave the three backends (the order rotates every
round), with the interquartile range as spread; ratios are taken between medians of the same
run. Outputs of torchtpu are checked against eager before timing. It also runs
`call_overhead.py` (per-call cost of a tiny graph) and reports it.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))
sys.path.insert(0, str(ROOT / "benches"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

# Every model is compiled by several backends, for inference and training, at two batch sizes:
# more than Dynamo's default 8 entries per code object, past which it runs the rest eagerly
# (and the table would compare eager with eager).
torch._dynamo.config.recompile_limit = 64
torch._dynamo.config.accumulated_recompile_limit = 4096

BACKENDS = ["eager", "inductor", "torchtpu"]
BATCHES = [1, 16]
MODELS = ["mlp", "transformer_block", "cnn", "gpt2", "bert", "resnet18"]
SEQ = 64


def build(name: str, batch: int):
    """(model, positional inputs) for `name` at `batch`, seeded: the same in every process."""
    torch.manual_seed(0)
    if name in ("mlp", "transformer_block", "cnn"):
        from models import small

        model, shape = {
            "mlp": (small.MLP, (batch, 12)),
            "transformer_block": (lambda: small.MHABlock(d=64, heads=4), (batch, 32, 64)),
            "cnn": (small.CNN, (batch, 3, 32, 32)),
        }[name]
        return model(), (torch.randn(*shape),)
    if name in ("gpt2", "bert"):
        import transformers

        if name == "gpt2":
            config = transformers.GPT2Config(vocab_size=1000, n_embd=256, n_layer=2, n_head=4, n_positions=128,
                                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
            model = transformers.GPT2LMHeadModel(config)
        else:
            config = transformers.BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=1024, max_position_embeddings=128,
                                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
            model = transformers.BertForMaskedLM(config)
        return model, (torch.randint(0, 1000, (batch, SEQ)),)
    if name == "resnet18":
        import torchvision

        return torchvision.models.resnet18(num_classes=100), (torch.randn(batch, 3, 64, 64),)
    raise KeyError(name)


def output_tensor(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    return out[0]


def _dynamo_only(gm, example_inputs):
    """A backend that runs Dynamo's graph as it is: Dynamo's tracing alone, the floor under any
    backend's first call (what a warm cache cannot skip)."""
    return gm.forward


def compiled(model, backend: str):
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model)
    if backend == "dynamo":
        return torch.compile(model, backend=_dynamo_only)
    return torch.compile(model, backend="torchtpu")


# ---------------------------------------------------------------- steady state (this process)


class Runner:
    """One backend's callable for one model/batch/mode, with its timings."""

    def __init__(self, model, args, backend: str, train: bool):
        self.backend, self.train, self.args = backend, train, args
        self.model = copy.deepcopy(model)
        self.model.train(train)
        self.fn = compiled(self.model, backend)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4) if train else None
        self.samples: list[float] = []
        self.calls = 1

    def step(self):
        if not self.train:
            with torch.no_grad():
                return self.fn(*self.args)
        self.opt.zero_grad(set_to_none=True)
        loss = output_tensor(self.fn(*self.args)).float().square().mean()
        loss.backward()
        self.opt.step()
        return loss

    def calibrate(self, seconds: float):
        t0 = time.perf_counter()
        self.step()
        dt = time.perf_counter() - t0
        self.calls = max(1, min(200, int(seconds / max(dt, 1e-6))))

    def sample(self):
        t0 = time.perf_counter()
        for _ in range(self.calls):
            self.step()
        self.samples.append((time.perf_counter() - t0) / self.calls)


def summary(samples: list[float]) -> dict:
    qs = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return {"median_ms": statistics.median(samples) * 1e3, "q1_ms": qs[0] * 1e3, "q3_ms": qs[2] * 1e3, "rounds": len(samples)}


def max_error(got, want) -> float:
    g, w = output_tensor(got).float(), output_tensor(want).float()
    return float((g - w).abs().max() / w.abs().max().clamp_min(1e-12))


def steady_state(name: str, batch: int, train: bool, rounds: int, seconds: float) -> dict:
    model, args = build(name, batch)
    runners = [Runner(model, args, b, train) for b in BACKENDS]
    if not train:
        with torch.no_grad():
            want = runners[0].fn(*args)
            err = max_error(runners[2].fn(*args), want)
    else:
        err = None
    for r in runners:  # compile and warm up
        for _ in range(3):
            r.step()
        r.calibrate(seconds)
    for k in range(rounds):
        for r in runners[k % 3:] + runners[: k % 3]:
            r.sample()
    result = {r.backend: summary(r.samples) for r in runners}
    if err is not None:
        result["torchtpu_max_rel_error"] = err
    import torchtpu

    result["torchtpu_fallback_ops"] = sorted(torchtpu.stats()["fallback_ops"])
    return result


# ---------------------------------------------------------------- first call and memory (fresh processes)

CHILD = r"""
import gc, json, os, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
import performance as p
import torch
name, batch, backend = sys.argv[2], int(sys.argv[3]), sys.argv[4]
if backend == "torchtpu":
    import torchtpu  # noqa: F401  (what a user's first call pays for is measured below)

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
model, args = p.build(name, batch)
model.eval()
fn = p.compiled(model, backend)
with torch.no_grad():
    t0 = time.perf_counter()
    fn(*args)
    first = time.perf_counter() - t0
    for _ in range(3):
        out = fn(*args)
    del out
    gc.collect()
    before = status("VmRSS:")
    process_peak = status("VmHWM:")
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak to the current RSS
    for _ in range(5):
        out = fn(*args)
    call_peak = max(0, status("VmHWM:") - before)
print(json.dumps({"first_call_s": first, "call_peak_bytes": call_peak, "rss_before_bytes": before,
                  "process_peak_bytes": max(process_peak, status("VmHWM:"))}))
"""


def child(name: str, batch: int, backend: str, cache_dir: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "inductor"),
               TORCHTPU_CACHE_DIR=os.path.join(cache_dir, "torchtpu"), PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "benches"), name, str(batch), backend],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{name}/{backend} child failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def first_calls(name: str, batch: int) -> dict:
    out = {}
    for backend in BACKENDS:
        with tempfile.TemporaryDirectory(prefix="ttpu-perf-") as d:
            cold = child(name, batch, backend, d)
            warm = child(name, batch, backend, d) if backend != "eager" else cold
        out[backend] = {"cold": cold, "warm": warm}
    with tempfile.TemporaryDirectory(prefix="ttpu-perf-") as d:
        out["dynamo"] = {"cold": child(name, batch, "dynamo", d)}
    return out


# ---------------------------------------------------------------- report

def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def plot(results: dict, img: pathlib.Path) -> list[str]:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    made = []

    def save(fig, ax, name: str):
        ax.legend()
        fig.tight_layout()
        fig.savefig(img / name, dpi=110)
        plt.close(fig)
        made.append(name)

    colors = {"eager": "#888888", "inductor": "#1f77b4", "torchtpu": "#d62728"}
    for mode in ("inference", "training"):
        rows = [(k, v) for k, v in results["steady"].items() if k.endswith("/" + mode)]
        if not rows:
            continue
        labels = [k.rsplit("/", 1)[0] for k, _ in rows]
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 4))
        width = 0.38
        for j, b in enumerate(("inductor", "torchtpu")):
            ys = [v["eager"]["median_ms"] / v[b]["median_ms"] for _, v in rows]
            ax.bar([i + (j - 0.5) * width for i in range(len(rows))], ys, width, label=b, color=colors[b])
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_yscale("log")
        ratio = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x")
        ax.yaxis.set_major_formatter(ratio)
        ax.yaxis.set_minor_formatter(ratio)
        ax.set_xticks(range(len(rows)), labels, rotation=45, ha="right")
        ax.set_ylabel("speedup over eager (median, log)")
        ax.set_title(f"Steady-state {mode} {'step' if mode == 'training' else 'call'}: speedup over eager")
        save(fig, ax, f"perf_{mode}.png")
    if results.get("first_call"):
        names = list(results["first_call"])
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names)), 4))
        bars = [("inductor", "cold"), ("inductor", "warm"), ("torchtpu", "cold"), ("torchtpu", "warm")]
        width = 0.2
        for j, (b, c) in enumerate(bars):
            ys = [results["first_call"][n][b][c]["first_call_s"] for n in names]
            ax.bar([i + (j - 1.5) * width for i in range(len(names))], ys, width, label=f"{b} {c}",
                   color=colors[b], alpha=1.0 if c == "cold" else 0.5)
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), [n.split("/")[0] for n in names], rotation=30, ha="right")
        ax.set_ylabel("seconds (log)")
        ax.set_title("First call (Dynamo + compile + run), fresh process, batch 16")
        save(fig, ax, "perf_first_call.png")

        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names)), 4))
        width = 0.27
        for j, b in enumerate(BACKENDS):
            ys = [results["first_call"][n][b]["warm"]["call_peak_bytes"] / 2**20 for n in names]
            ax.bar([i + (j - 1) * width for i in range(len(names))], ys, width, label=b, color=colors[b])
        ax.set_xticks(range(len(names)), [n.split("/")[0] for n in names], rotation=30, ha="right")
        ax.set_ylabel("MiB above the resident set before the calls")
        ax.set_title("Peak memory of steady-state inference calls, batch 16")
        save(fig, ax, "perf_memory.png")
    return made


def ms(s: dict) -> str:
    return f"{s['median_ms']:.3f} ({s['q1_ms']:.3f}-{s['q3_ms']:.3f})"


def other_benches() -> list[str]:
    """The sections of the benches that keep their own results (generate.py, train_step.py,
    cache_warm_start.py, step_split.py:
    each has a `markdown(results)`), from benches/results/NAME.json where it exists."""
    import importlib

    lines = []
    for name in ("generate", "train_step", "cache_warm_start", "step_split"):
        path = ROOT / "benches" / "results" / f"{name}.json"
        if path.exists():
            lines += importlib.import_module(name).markdown(json.loads(path.read_text())) + [""]
    return lines


def report(results: dict, images: list[str]) -> str:
    m = results["machine"]
    lines = [
        "# Performance: torchtpu vs eager vs Inductor",
        "",
        "Generated by `.venv/bin/python benches/performance.py` (the one command; 10-30 minutes, by machine) on "
        f"{m['date']}: {m['cpus']} CPUs ({m['cpu']}), torch {m['torch']}, PJRT plugin `{m['plugin']}`. "
        "Every number below comes from that one run. Steady-state times are per-call medians over "
        f"{results['rounds']} rounds that interleave the three backends (order rotated each round), "
        "with the interquartile range in parentheses; speedups are ratios of medians of the same run. "
        "These 2-core machines are noisy: read differences under ~15% as ties.",
        "",
    ]
    summary_rows = []
    for mode in ("inference", "training"):
        rows = {k: v for k, v in results["steady"].items() if k.endswith("/" + mode)}
        if not rows:
            continue
        lines += [f"## Steady-state {mode} ({'forward, loss, backward, SGD step' if mode == 'training' else 'torch.no_grad, eval mode'})", "",
                  "| model / batch | eager ms | Inductor ms | torchtpu ms | Inductor vs eager | torchtpu vs eager | torchtpu vs Inductor |",
                  "|---|---|---|---|---|---|---|"]
        sp_i, sp_t, t_vs_i = [], [], []
        for key, v in rows.items():
            e, i, t = (v[b]["median_ms"] for b in BACKENDS)
            sp_i.append(e / i)
            sp_t.append(e / t)
            t_vs_i.append(i / t)
            lines.append(f"| {key.rsplit('/', 1)[0]} | {ms(v['eager'])} | {ms(v['inductor'])} | {ms(v['torchtpu'])} | "
                         f"{e / i:.2f}x | {e / t:.2f}x | {i / t:.2f}x |")
        gi, gt, gti = geomean(sp_i), geomean(sp_t), geomean(t_vs_i)
        lines += [f"| **geometric mean** | | | | **{gi:.2f}x** | **{gt:.2f}x** | **{gti:.2f}x** |", ""]
        summary_rows.append((mode, gi, gt, gti))
        errs = {k: v.get("torchtpu_max_rel_error") for k, v in rows.items() if v.get("torchtpu_max_rel_error") is not None}
        if errs:
            lines += [f"torchtpu outputs vs eager before timing: max relative error {max(errs.values()):.1e} "
                      f"(max |torchtpu - eager| / max |eager| of the logits, over all rows).", ""]
        fallbacks = sorted({op for v in rows.values() for op in v.get("torchtpu_fallback_ops", [])})
        lines += [f"Ops torchtpu ran eagerly (fallback) anywhere in these runs: {', '.join(fallbacks) or 'none'}.", ""]
        if f"perf_{mode}.png" in images:
            lines += [f"![{mode} speedups](img/perf_{mode}.png)", ""]
    fc = results.get("first_call")
    if fc:
        lines += ["## First call and memory (fresh process per measurement, batch 16, inference)", "",
                  "First call: Dynamo tracing + compilation + the first run, timed around the first call of a "
                  "fresh process; cold = empty cache directories (Inductor's `TORCHINDUCTOR_CACHE_DIR`, "
                  "torchtpu's `TORCHTPU_CACHE_DIR`), warm = a second process on the cache the cold one left. "
                  "Call peak: resident-set peak over 5 steady-state calls above the resident set before them. "
                  "Process peak: the process's resident-set peak, compilation included. Dynamo alone: the "
                  "first call with a backend that runs Dynamo's graph as it is (Dynamo's tracing, which no "
                  "backend's cache skips).", "",
                  "| model | eager first s | Dynamo alone s | Inductor cold s | Inductor warm s | torchtpu cold s | "
                  "torchtpu warm s | torchtpu warm / cold | call peak MiB eager / Inductor / torchtpu | "
                  "process peak MiB eager / Inductor / torchtpu |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        cold_ratio, warm_ratio, warm_share, dynamo_share = [], [], [], []
        for key, v in fc.items():
            f = lambda b, c: v[b][c]["first_call_s"]  # noqa: E731
            cold_ratio.append(f("inductor", "cold") / f("torchtpu", "cold"))
            warm_ratio.append(f("inductor", "warm") / f("torchtpu", "warm"))
            peaks = " / ".join(f"{v[b]['warm']['call_peak_bytes'] / 2**20:.1f}" for b in BACKENDS)
            procs = " / ".join(f"{v[b]['cold']['process_peak_bytes'] / 2**20:.0f}" for b in BACKENDS)
            dynamo = v["dynamo"]["cold"]["first_call_s"] if "dynamo" in v else float("nan")
            warm_share.append(f("torchtpu", "warm") / f("torchtpu", "cold"))
            dynamo_share.append(dynamo / f("torchtpu", "cold"))
            lines.append(f"| {key.split('/')[0]} | {f('eager', 'cold'):.3f} | {dynamo:.2f} | {f('inductor', 'cold'):.2f} | "
                         f"{f('inductor', 'warm'):.2f} | {f('torchtpu', 'cold'):.2f} | {f('torchtpu', 'warm'):.2f} | "
                         f"{warm_share[-1]:.0%} | {peaks} | {procs} |")
        lines += ["", f"Cold first call, Inductor / torchtpu: geometric mean **{geomean(cold_ratio):.1f}x** "
                  f"(torchtpu is that many times faster); warm: {geomean(warm_ratio):.1f}x.", ""]
        summary_rows.append(("first call cold (Inductor s / torchtpu s)", None, geomean(cold_ratio), None))
        summary_rows.append(("warm start", geomean(warm_ratio), max(warm_share), (min(dynamo_share), max(dynamo_share))))
        for name in ("perf_first_call.png", "perf_memory.png"):
            if name in images:
                lines += [f"![{name[5:-4]}](img/{name})", ""]
    kc = results.get("kernel_choices")
    if kc:
        shapes = [c for c in kc if c["op"] != "program"]
        programs = [c for c in kc if c["op"] == "program"]
        aten = sum(c["kernel"] == "aten" for c in shapes)
        lines += ["## Host kernels: ATen's GEMM inside the program (option `host_kernels`)", "",
                  f"Every matmul shape of the runs above ({len(shapes)}), timed at compile time in XLA's dot and in "
                  "ATen's CPU GEMM (MKL / oneDNN on one thread, a typed XLA FFI custom call on XLA's buffers) as "
                  f"one-op programs, fastest of interleaved runs: ATen's faster for {aten}, XLA's for "
                  f"{len(shapes) - aten}. The 15 slowest (`[batch x] [m x k] @ [k x n]`, T: read transposed):", "",
                  "| shape | XLA us | ATen us | faster |", "|---|---|---|---|"]
        for c in sorted(shapes, key=lambda c: -max(c["xla_us"], c["aten_us"]))[:15]:
            lines.append(f"| {c['shape']} | {c['xla_us']:.0f} | {c['aten_us']:.0f} | {c['kernel']} |")
        kept = sum(c["kernel"] == "aten" for c in programs)
        lines += ["", f"Each program where ATen's won a product ({len(programs)}) was then raced whole against its "
                  f"all-XLA lowering on zero-filled inputs; ATen's program was kept for {kept}:", "",
                  "| program | all-XLA us | with ATen us | kept |", "|---|---|---|---|"]
        for c in programs:
            lines.append(f"| {c['shape']} | {c['xla_us']:.0f} | {c['aten_us']:.0f} | {c['kernel']} |")
        lines.append("")
    oh = results.get("overhead")
    if oh:
        lines += ["## Per-call overhead of a tiny graph (`benches/call_overhead.py`)", "",
                  "`x * 2 + 1` on 4 floats, microseconds per call, medians of interleaved rounds:", "",
                  "| path | us/call |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in oh.items()]
        lines.append("")
    lines += other_benches()
    lines += ["## Targets (issue 17)", ""]
    steady = results.get("steady", {})
    for mode, gi, gt, gti in summary_rows:
        if mode == "inference":
            worst = min(((v["eager"]["median_ms"] / v["torchtpu"]["median_ms"], k) for k, v in steady.items()
                         if k.endswith("/inference")), default=(float("nan"), "-"))
            lines.append(f"- Inference at or above Inductor on the geometric mean, no model below 0.8x eager: "
                         f"torchtpu {gt:.2f}x eager, Inductor {gi:.2f}x, torchtpu / Inductor {gti:.2f}x; slowest "
                         f"{worst[1].rsplit('/', 1)[0]} at {worst[0]:.2f}x eager: "
                         f"{'met' if gti >= 1.0 and worst[0] >= 0.8 else 'missed'}.")
        elif mode == "training":
            lines.append(f"- Training step at or above eager on the geometric mean: torchtpu {gt:.2f}x eager "
                         f"(Inductor {gi:.2f}x): {'met' if gt >= 1.0 else 'missed'}.")
        elif mode == "warm start":
            lines.append(f"- Warm first call below Inductor's warm: Inductor's takes {gi:.1f}x as long (geometric "
                         f"mean): {'met' if gi > 1.0 else 'missed'}. At most 25% of cold: up to {gt:.0%} "
                         f"({'met' if gt <= 0.25 else 'missed'}); Dynamo's tracing alone, which no cache "
                         f"below Dynamo skips, is {gti[0]:.0%}-{gti[1]:.0%} of torchtpu's cold first call.")
        else:
            lines.append(f"- Cold first call below Inductor's: Inductor takes {gt:.1f}x as long (geometric mean): "
                         f"{'met' if gt > 1.0 else 'missed'}.")
    if oh:
        above = oh["torchtpu"] - oh["dynamo, no-op backend (guards only)"]
        aot = oh["dynamo + AOTAutograd (backend=aot_eager)"] - oh["dynamo (backend=eager)"]
        lines.append(f"- Tiny-graph call at most 20 us above Dynamo's guard cost: {above:.1f} us above "
                     f"({'met' if above <= 20 else 'missed'}); AOTAutograd's runtime wrapper, which this graph "
                     f"(inference, no mutation, no aliased output) skips, costs {aot:.1f} us (aot_eager - eager backend).")
    lines += issue48_targets(results, summary_rows)
    lines += ["", WHERE_THE_TIME_GOES, ""]
    return "\n".join(lines)


# Issue 48's starting point, its own interleaved run on this kind of machine (2-core Intel Xeon).
ISSUE48_BEFORE = {"inference": 0.96, "training": 0.75, "warm": 0.54, "defer_mlp": 1.08, "defer_decoder": 1.60,
                  "defer_decoder_vs_cpu": 1.79}


def issue48_targets(results: dict, summary_rows: list) -> list[str]:
    """Issue 48's targets: before (the issue's run) and this run's numbers, where this run
    measures them; the warm start by `aot_compile`'s load from the warm-start bench's results."""
    lines = ["", "## Targets (issue 48)", "", "| figure | before (issue 48) | this run | target |", "|---|---|---|---|"]
    by_mode = {mode: (gi, gt) for mode, gi, gt, _ in summary_rows if mode in ("inference", "training")}
    if "inference" in by_mode:
        gi, gt = by_mode["inference"]
        lines.append(f"| compiled inference, geo-mean vs eager | {ISSUE48_BEFORE['inference']:.2f}x | {gt:.2f}x "
                     f"(Inductor {gi:.2f}x) | >= Inductor's: {'met' if gt >= gi else 'missed'} |")
    if "training" in by_mode:
        gi, gt = by_mode["training"]
        worst = min((v["eager"]["median_ms"] / v["torchtpu"]["median_ms"] for k, v in results["steady"].items()
                     if k.endswith("/training")), default=float("nan"))
        lines.append(f"| compiled training step, geo-mean vs eager | {ISSUE48_BEFORE['training']:.2f}x | {gt:.2f}x "
                     f"(slowest {worst:.2f}x) | >= 1.0x, none below 0.9x: "
                     f"{'met' if gt >= 1.0 and worst >= 0.9 else 'missed'} |")
    warm = ROOT / "benches" / "results" / "cache_warm_start.json"
    if warm.exists():
        import cache_warm_start as cws

        runs = json.loads(warm.read_text())
        shares = [cws.median(r, "aot_compile", "warm") / cws.median(r, "plain", "cold") for r in runs.values()]
        lines.append(f"| warm first call / cold | {ISSUE48_BEFORE['warm']:.2f} | {max(shares):.2f} at most "
                     "(`aot_compile` loaded; \"Warm start\" above) | <= 0.25: "
                     f"{'met' if max(shares) <= 0.25 else 'missed'} |")
    lines += issue48_defer_rows(ROOT / "benches" / "results" / "eager_device.json")
    return lines


def issue48_defer_rows(path) -> list[str]:
    """DeferAndFuse's rows of issue 48's targets, from the eager device bench's own interleaved run
    (`benches/eager_device.py`, which writes `path`): strict / DeferAndFuse step per model, and
    the decoder's DeferAndFuse step against CPU eager's."""
    if not path.exists():
        return []
    run = json.loads(path.read_text())
    steps = {("mlp" if r["model"].startswith("MLP") else "decoder"): r for r in run.get("training", [])}
    if "mlp" not in steps or "decoder" not in steps:
        return []
    speedup = {k: r["step_ms"]["tpu strict"] / r["step_ms"]["tpu defer_and_fuse"] for k, r in steps.items()}
    vs_cpu = steps["decoder"]["ratio_vs_cpu"]["tpu defer_and_fuse"]
    met = all(v >= 1.5 for v in speedup.values())
    return [
        f"| DeferAndFuse vs strict, MLP / decoder (`eager_device.py`, {run['date']}) | "
        f"{ISSUE48_BEFORE['defer_mlp']:.2f}x / {ISSUE48_BEFORE['defer_decoder']:.2f}x | "
        f"{speedup['mlp']:.2f}x / {speedup['decoder']:.2f}x | >= 1.5x on both: {'met' if met else 'missed'} |",
        f"| DeferAndFuse step vs CPU eager, decoder (same run) | {ISSUE48_BEFORE['defer_decoder_vs_cpu']:.2f}x "
        f"CPU's time | {vs_cpu:.2f}x CPU's time | <= 1.0x: {'met' if vs_cpu <= 1.0 else 'missed'} |",
    ]


# What the investigation behind these numbers found (docs/lowering.md, docs/runtime.md); the
# measured numbers above are the run's, this text is not regenerated from them.
WHERE_THE_TIME_GOES = """## Where the time goes

- **The program runs on XLA's CPU backend**, whose kernels are the peers here: dots and most
  convolutions go to YNNPACK/Eigen, elementwise work to XLA's fused loops. On these 2 cores eager's
  oneDNN convolutions and Inductor's generated C++ are faster than XLA CPU on convolution-heavy
  graphs (cnn/16, resnet18), which is most of the inference gap: a lone convolution of
  resnet18's at batch 16 runs at 0.4-0.6x of eager under every XLA option
  (`benches/conv_weight_grad.py` for weight gradients, `benches/xla_options.py`). XLA CPU runs
  every convolution NHWC/HWIO (`dim_labels=b01f_01io->b01f`), but its layout assignment
  constrains only the convolutions: the batch norms, reductions and elementwise ops between
  them stayed row-major NCHW, a transpose copy around each convolution. Layout assignment is
  now torchtpu's own pass (`assign-layouts`, default; docs/passes.md): convolution regions
  run NHWC with permutes only at their edges (programs alone, `benches/layouts.py`: resnet18/16
  inference 32.7 -> 30.8 ms, training forward 46.2 -> 44.0 ms, backward 83.3 -> 81.0 ms;
  resnet18/1 inference 5.28 -> 4.77 ms; the small CNN's training forward 0.95x, its 8-channel
  batch statistics reduce worse NHWC). Across programs, saved convolution activations now
  leave the forward and enter the backward NHWC (`saved_layout.py`, option `relayout_saved`:
  resnet18/16 forward 52.3 -> 47.8 ms, backward 92.3 -> 89.1 ms). What transposes remain are
  the weights' (OIHW parameters to HWIO in every call, about 45 MB per resnet18 step) and the
  dots' operands, both XLA's kernels' layouts. Inference graphs take their convolution
  weights as HWIO, permuted once per weight version (`weight_layout.py`, option
  `relayout_weights`): resnet18, batch 1: 22.4 -> 8.4 ms per call; batch 16 and the small
  CNN, whose time is in activations, are unchanged. Their batch norms are folded into the
  convolutions before them, the folded weights and biases computed once per version
  (`batch_norm_folding.py`, option `fold_batch_norm`): resnet18 inference programs alone,
  batch 1 7.39 -> 7.08 ms, batch 16 a tie (42.2 ms both).
- **Small maps** (issue 17): a convolution whose kernel has more positions than its input
  map runs as patches times a matmul (XLA swapped its operands into a naive loop). Its
  kernel is now the dot's left operand, read row-major, and inference graphs no longer relay
  it to HWIO (a copy back in every call): resnet18's 512x512 3x3 stage at 2x2, batch 1,
  training forward 4.4 -> 0.65 ms, inference 2.1 -> 0.5 ms (eager 0.5). Weight gradients
  whose batch x output-positions contraction is small (at most 256, or 1x1 kernels) are
  matmuls of patches instead of XLA's convolution form, which treats the batch as the
  feature dim and the output map as the window: resnet18's layer4 weight gradient at batch 1
  9.4 -> 0.66 ms (eager 0.57), at batch 16 10.4 -> 2.5 ms (eager 4.0); the resnet18/1
  training step 95 -> 41 ms (`benches/conv_weight_grad.py`).
- **Host memory** (issue 17): the CPU plugin mallocs each execution's buffers, and blocks
  above glibc's mmap threshold were mapped, faulted in and zeroed afresh in every call (a third
  of resnet18's training forward, `perf`). The CPU engine now tunes glibc to keep freed blocks
  (docs/runtime.md, "Host memory"; `TORCHTPU_MALLOC_TUNING=0` opts out): resnet18 batch 16,
  inference 55.6 -> 42.8 ms, training step 222 -> 195 ms (`benches/host_memory.py`).
- **Training graphs** pay for what eager gets for free. Embedding gradients were scatters
  with one coordinate tuple per element; they now scatter rows (16 x 64 tokens into a
  1000 x 256 table: 1424 -> 451 us, eager 121; `benches/row_indexing.py`). Max pooling with
  indices is a variadic reduce-window (fwd 0.56 ms vs eager's 0.28 for cnn/16's pool). XLA's
  reduce-window trees for large reductions are not a cost here: turning the pass off
  (`xla_disable_hlo_passes=tree_reduction_rewriter`) changed no training step (1.00x). Saved activations
  that were views of inputs (transposed Linear weights) were materialised as forward outputs:
  the min-cut partitioner (option `partitioner`, now the default) recomputes views and cheap
  elementwise work in the backward instead (an MLP's forward: 7 -> 3 outputs; training steps
  1.05x on the geometric mean, `benches/options_ab.py --a '{"partitioner": "default"}'`). The
  training step's eager parts (loss, optimizer) are the same for every backend. Tried and
  dropped: a scatter-free max-pool backward (2x2 pool backward 325 -> 94 us alone, but the
  cnn/16 step was no faster, 4.44-4.55 vs 4.64-4.77 ms).
- **XLA's options** (`benches/xla_options.py`; per compile through the compile options'
  `env_option_overrides`, backend option `xla_options`): a 2048^2 f32 matmul ran at 0.80x of
  `torch.mm` (277 vs 346 GFLOP/s; both sides use the machine's 2 threads). Outputs aliased to
  inputs cost XLA a copy into place (0.74x with `donate=True`), and the CPU plugin never
  donates, so the backend no longer aliases there. YNNPACK for single dots only (XLA CPU also
  hands it reductions, elementwise fusions and convolutions by default) gives 0.85x, all of
  YNNPACK off 0.89x, oneDNN or one-thread Eigen no better. On the models, single-dot YNNPACK
  won for inference (1.05x geomean, none slower: `INFERENCE_XLA_OPTIONS`) and was mixed for
  training (0.87x-1.07x), which keeps XLA's default. A lone 3x3 convolution (16x64x56x56) runs
  at 0.59-0.63x of oneDNN under every option, its NCHW edge transposes included.
- **Warm start**: a warm first call is Dynamo's and AOTAutograd's tracing (PyTorch's caches
  of those serve Inductor only) plus, once per process, the decomposition table:
  `core_aten_decompositions()`'s CompositeImplicitAutograd scan costs 0.14 s (the MLP's warm
  first call 0.38 s, 0.29 s without it). Starting from the post-autograd core set instead was
  tried and reverted: the tpu device's BERT forward then differed from CPU by 7e-4.
- **Per call**, the path is short (inputs read in place and kept resident, outputs handed over
  without a copy, synchronous dispatch, release build: docs/runtime.md, "The per-call path").
  Inference graphs that mutate no input and return no alias of one now skip AOTAutograd's
  runtime wrapper (option `skip_aot_wrapper`; exported with `aot_export_joint_simple`): the
  tiny graph 20.9 -> 19.2 us per call, the two interleaved in one process. What the wrapper
  cost torchtpu was less than `aot_eager - eager` suggests (that difference also holds
  AOTAutograd's boxed eager call). Training graphs and graphs with mutations keep the
  wrapper, which applies them.
- **Issue 48's misses, measured** (2-core Intel Xeon, 2026-12-06). *Compiled inference and
  training*: the split above (`benches/step_split.py`) shows two causes. From mid-size models
  up (transformer_block/16, cnn/16, gpt2, bert, resnet18/16) torchtpu's graphs alone take
  0.9-2.1x of eager's *whole* step (training: transformer_block/16 4.8 ms in graphs against
  eager's 3.6 ms step, cnn/16 5.6 against 2.7): XLA CPU's code is slower than ATen's kernels
  for the same work. Per op (torchtpu vs eager, interleaved, f32, each call including ~19 us
  of per-call path): softmax over 16x4x32x32 268 vs 41 us, exp 91 vs 24, amax 95 vs 23 (42
  in another run), GELU over 16x32x256 154 vs 52, tanh 123 vs 46; the MHA block's SDPA at
  16x4x32x16 480 vs 115 us, its feed-forward 659 vs 401. XLA's options (YNNPACK elementwise
  fusions, fast math, one codegen split) moved these by under 25%, and a plain (not
  NaN-checking) max reduction was no faster. The quickstart's tiny transformer (0.56-0.61x in
  `make demo` this day) is this case, and it is no faster pinned to one core (0.65x), so
  XLA's thread pool is not the cost. What would remove it: ATen's CPU kernels for softmax,
  layer norm and GELU (forward and backward) and oneDNN's convolutions as host kernels chosen
  by measurement, as the matmul is ("Host kernels" above: a new kernel is an FFI handler, a
  table entry in the device shim and a rewrite pass); not done this round. *Small models*
  (mlp training): the graphs take 0.18-0.23 ms of a 0.68-0.75 ms step, and the rest, 0.50-0.53
  ms, is PyTorch's machinery around them (Dynamo's guards, AOTAutograd's runtime wrappers and
  `autograd.Function`, the loss and the SGD step eagerly): eager's whole step is 0.58 ms. Only
  capturing the whole step in one graph (`torch.compile` of the step function: "Compiled
  training step" above) removes it. *DeferAndFuse* (the eager device; docs/eager.md, "The
  native cut"): see "Targets (issue 48)" and the MLP's profile there.
- **Fixed during issue 8** (each measured before/after on one model, docs/lowering.md): every
  nn.Linear weight was transposed by a copy on every call (transformer block, batch 16: 4.4 ->
  1.9 ms); convolutions whose kernel is larger than their input map were swapped by XLA into a
  naive loop (resnet18, batch 16: 901 -> 139 ms); inference max pooling computed unused indices;
  the debug build and per-call copies cost ~200 us per call (tiny graph: 238.7 -> ~45 us)."""


def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torchtpu

    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(), "cpu": cpu,
            "torch": torch.__version__, "plugin": pathlib.Path(torchtpu._C.plugin_path()).name}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few rounds, no fresh-process measurements, no docs")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    ap.add_argument("--report-only", action="store_true", help="rewrite the doc and plots from benches/results/performance.json")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    raw = ROOT / "benches" / "results" / "performance.json"
    if a.report_only:
        results = json.loads(raw.read_text())
        images = plot(results, out.parent / "img")
        out.write_text(report(results, images))
        print(f"wrote {out} from {raw}")
        return 0
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    models = a.models.split(",")
    rounds = a.rounds or (3 if a.quick else 15)
    seconds = 0.02 if a.quick else 0.08
    os.environ.setdefault("TORCHTPU_CACHE_DIR", tempfile.mkdtemp(prefix="ttpu-perf-main-"))
    results = {"machine": machine(), "rounds": rounds, "steady": {}, "first_call": {}}
    for name in models:
        for batch in BATCHES:
            for train in (False, True):
                key = f"{name}/{batch}/{'training' if train else 'inference'}"
                t0 = time.perf_counter()
                results["steady"][key] = steady_state(name, batch, train, rounds, seconds)
                torch._dynamo.reset()
                gc.collect()
                v = results["steady"][key]
                print(f"{key:34s} " + "  ".join(f"{b} {v[b]['median_ms']:8.3f} ms" for b in BACKENDS)
                      + f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
    import torchtpu

    results["kernel_choices"] = torchtpu.stats()["kernel_choices"]
    if not a.quick:
        for name in models:
            t0 = time.perf_counter()
            results["first_call"][f"{name}/16"] = v = first_calls(name, 16)
            print(f"first call {name:20s} " + "  ".join(f"{b} {v[b]['cold']['first_call_s']:.2f}/{v[b]['warm']['first_call_s']:.2f} s"
                                                    for b in BACKENDS) + f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
        import call_overhead

        results["overhead"] = call_overhead.measure()
    if a.quick:
        print(report(results, []))
        return 0
    images = plot(results, out.parent / "img")
    out.write_text(report(results, images))
    raw.parent.mkdir(exist_ok=True)
    raw.write_text(json.dumps(results, indent=1))
    print(f"wrote {out} and {', '.join(images)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
