"""The compile cache shared by the ranks of a host (docs/cache.md, "Shared by the ranks of a
host"): N processes (the ranks torchrun would start on one host, default 4) start the same
workload at once against one fresh cache folder, with the per-key lock on (one rank compiles
each program, the others wait and read it) and off (TORCHTPU_CACHE_SHARED=0: every rank
compiles every program), alternated in one run. Reports per rank the programs compiled and
those read after waiting, the XLA compile seconds and the lock wait, and the wall time of the
whole start-up (launch to the last rank's end of its first steps) and the CPU time of all
ranks together; writes
benches/results/shared_cache.json.

    .venv/bin/python benches/shared_cache.py                      # 4 ranks, tiny Llama fwd+bwd
    .venv/bin/python benches/shared_cache.py --ranks 2 --workload mlp --repeats 1
    .venv/bin/python benches/shared_cache.py --ranks 4 -- -m some.module --its-args   # any program
    # TorchTitan's start-up (examples/torchtitan; ranks made by torchrun):
    TORCHTPU_DEVICE=1 PYTHONPATH=examples/torchtitan .venv/bin/python benches/shared_cache.py --torchrun \
        --repeats 1 -- -m torchtitan.train --module tpu_llama3 --config llama3_debug_tpu \
        --parallelism.data-parallel-shard-degree 4 --training.steps 2

After `--`, each rank runs that Python program instead (a script path, or `-m module`), with
RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE set as torchrun sets them (no rendezvous is
made here); its torchtpu counters are read when it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benches" / "results" / "shared_cache.json"


# ---------------------------------------------------------------------------------------------
# One rank (a child process).


def workload_llama(args) -> None:
    """A tiny Llama (transformers LlamaConfig), one training step (forward + backward + SGD)
    at each of two sequence lengths: a forward and a backward program per length."""
    import torch
    import torchtpu  # noqa: F401  (registers the backend)
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    step = torch.compile(model, backend="torchtpu", dynamic=False)
    for seq in (16, 32):
        ids = torch.randint(
            3, 256, (2, seq), generator=torch.Generator().manual_seed(seq)
        )
        loss = step(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        assert torch.isfinite(loss)


def workload_mlp(args) -> None:
    """A plain MLP training step (forward + backward + SGD) at two batch sizes."""
    import torch
    import torchtpu  # noqa: F401  (registers the backend)

    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    step = torch.compile(model, backend="torchtpu", dynamic=False)
    for batch in (8, 16):
        x = torch.randn(batch, args.hidden)
        loss = torch.nn.functional.cross_entropy(step(x), torch.arange(batch) % 10)
        loss.backward()
        opt.step()
        opt.zero_grad()


WORKLOADS = {"llama": workload_llama, "mlp": workload_mlp}


def rank_main(args, program: list[str]) -> None:
    started = time.time()
    # Under torchrun one path serves every rank: `{rank}` is this rank's number.
    out = pathlib.Path(args.rank_child.replace("{rank}", os.environ.get("RANK", "0")))

    def report():
        import torchtpu

        s, c = torchtpu.stats(), torchtpu._C.cache_stats()
        row = {
            "started": started,
            "ended": time.time(),
            "compiled": s["cache_misses"],
            "read_after_wait": s["disk_hits_after_wait"],
            "disk_hits": s["disk_hits"],
            "memory_hits": s["memory_hits"],
            "xla_compile_seconds": c.get("compile_seconds", 0.0),
            "lock_wait_seconds": c.get("lock_wait_seconds", 0.0),
            "lock_timeouts": c.get("lock_timeouts", 0),
            "graph_lowered": c.get("graph_misses", 0),
            "graph_read_after_wait": c.get("graph_disk_hits_after_wait", 0),
            "fallbacks": s["graphs_fallback"],
        }
        out.write_text(json.dumps(row))

    if program:
        import atexit
        import runpy

        atexit.register(report)
        if program[0] == "-m":
            sys.argv = [program[1], *program[2:]]
            runpy.run_module(program[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(program)
            runpy.run_path(program[0], run_name="__main__")
        return
    WORKLOADS[args.workload](args)
    report()


# ---------------------------------------------------------------------------------------------
# The launcher.


def launch(args, program: list[str], shared: bool) -> dict:
    """One start-up of `args.ranks` ranks against a fresh cache folder."""
    with tempfile.TemporaryDirectory(prefix="torchtpu-shared-cache-") as tmp:
        tmp = pathlib.Path(tmp)
        env = dict(
            os.environ,
            TORCHTPU_CACHE_DIR=str(tmp / "cache"),
            TORCHTPU_CACHE_SHARED="1" if shared else "0",
        )
        env.setdefault("TORCHTPU_FALLBACK", "error")
        forwarded = [
            f"--workload={args.workload}",
            f"--hidden={args.hidden}",
            f"--layers={args.layers}",
        ]
        procs = []
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched = time.time()
        tail = ["--", *program] if program else []
        if args.torchrun:
            # torchrun starts the ranks (a rendezvous, as TorchTitan needs); each reports itself.
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.ranks}", "--standalone",
                   "--max-restarts=0", __file__, f"--rank-child={tmp / 'rank{rank}.json'}", *forwarded, *tail]  # fmt: skip
            starts = [(cmd, env)]
        else:
            world = {"WORLD_SIZE": str(args.ranks), "LOCAL_WORLD_SIZE": str(args.ranks)}
            starts = [
                ([sys.executable, __file__, f"--rank-child={tmp / f'rank{rank}.json'}", *forwarded, *tail],
                 dict(env, RANK=str(rank), LOCAL_RANK=str(rank), **world))
                for rank in range(args.ranks)
            ]  # fmt: skip
        for cmd, cmd_env in starts:
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=cmd_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        rows = []
        try:
            for rank, p in enumerate(procs):
                _, err = p.communicate(timeout=args.timeout)
                if p.returncode != 0:
                    raise SystemExit(
                        f"rank {rank} failed ({p.returncode}):\n{err[-4000:]}"
                    )
            rows = [
                json.loads((tmp / f"rank{rank}.json").read_text())
                for rank in range(args.ranks)
            ]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (
            cpu_after.ru_stime - cpu_before.ru_stime
        )
        ended = max(r["ended"] for r in rows)
        for r in rows:
            r["seconds"] = round(r.pop("ended") - r.pop("started"), 3)
        programs = len(list((tmp / "cache").rglob("v*/executable/*/*.bin")))
        return {
            "shared": shared,
            "startup_seconds": round(ended - launched, 3),
            "cpu_seconds": round(cpu, 3),
            "programs": programs,
            "compiled_total": sum(r["compiled"] for r in rows),
            "read_after_wait_total": sum(r["read_after_wait"] for r in rows),
            "xla_compile_seconds_total": round(
                sum(r["xla_compile_seconds"] for r in rows), 3
            ),
            "ranks": rows,
        }


def table(runs: list[dict]) -> str:
    lines = [
        (
            "| lock | run | start-up wall | programs | compiled (per rank) | read after wait (per rank) | "
            "XLA compile s, all ranks | CPU s, all ranks | lock wait s (max rank) |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def per(run, key):
        return " ".join(str(x[key]) for x in run["ranks"])

    for i, r in enumerate(runs):
        lines.append(
            f"| {'on' if r['shared'] else 'off'} | {i // 2 + 1} | {r['startup_seconds']:.2f} s | {r['programs']} "
            f"| {r['compiled_total']} ({per(r, 'compiled')}) | {r['read_after_wait_total']} ({per(r, 'read_after_wait')}) "
            f"| {r['xla_compile_seconds_total']:.2f} | {r['cpu_seconds']:.1f} "
            f"| {max(x['lock_wait_seconds'] for x in r['ranks']):.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    argv = sys.argv[1:]
    program = []
    if "--" in argv:
        i = argv.index("--")
        argv, program = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="llama")
    ap.add_argument(
        "--hidden", type=int, default=128, help="width of the built-in workloads"
    )
    ap.add_argument(
        "--layers", type=int, default=4, help="depth of the built-in workloads"
    )
    ap.add_argument(
        "--repeats", type=int, default=2, help="start-ups per mode (alternated)"
    )
    ap.add_argument("--timeout", type=float, default=600, help="seconds per rank")
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=RESULTS,
        help="where the JSON goes (default: %(default)s)",
    )
    ap.add_argument("--no-write", action="store_true", help="write no JSON")
    ap.add_argument(
        "--torchrun",
        action="store_true",
        help="start the ranks with torchrun (a rendezvous)",
    )
    ap.add_argument("--rank-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank_child:
        rank_main(args, program)
        return

    runs = []
    for _ in range(args.repeats):
        for shared in (False, True):
            runs.append(launch(args, program, shared))
            print(table(runs[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(runs))
    summary = {}
    for shared in (False, True):
        mine = [r for r in runs if r["shared"] == shared]
        summary["on" if shared else "off"] = {
            "startup_seconds_median": round(
                statistics.median(r["startup_seconds"] for r in mine), 3
            ),
            "cpu_seconds_median": round(
                statistics.median(r["cpu_seconds"] for r in mine), 3
            ),
            "compiled_total": [r["compiled_total"] for r in mine],
            "read_after_wait_total": [r["read_after_wait_total"] for r in mine],
            "xla_compile_seconds_total": [r["xla_compile_seconds_total"] for r in mine],
        }
    on, off = (
        summary["on"]["startup_seconds_median"],
        summary["off"]["startup_seconds_median"],
    )
    cpu_on, cpu_off = (
        summary["on"]["cpu_seconds_median"],
        summary["off"]["cpu_seconds_median"],
    )
    print(
        f"\nstart-up (median): lock off {off:.2f} s, lock on {on:.2f} s ({on / off:.2f}x)"
    )
    print(
        f"CPU, all ranks (median): lock off {cpu_off:.1f} s, lock on {cpu_on:.1f} s ({cpu_on / cpu_off:.2f}x)"
    )
    if not args.no_write:
        # One file for every configuration measured: each run replaces its own entry.
        workload = (
            " ".join(program)
            if program
            else f"{args.workload} hidden={args.hidden} layers={args.layers}"
        )
        label = f"{workload}, {args.ranks} ranks"
        try:
            results = json.loads(args.out.read_text())
        except (OSError, ValueError):
            results = {}
        results[label] = {
            "date": time.strftime("%Y-%m-%d"),
            "cpus": os.cpu_count(),
            "ranks": args.ranks,
            "workload": workload,
            "summary": summary,
            "runs": runs,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {label!r} to {args.out}")


if __name__ == "__main__":
    main()
