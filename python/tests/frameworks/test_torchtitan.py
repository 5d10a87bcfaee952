"""TorchTitan 0.3 on tpu (examples/torchtitan, docs/distributed.md "Training frameworks"),
launched as its users launch it: `torchrun -m torchtitan.train --module tpu_llama3 --config
llama3_debug_tpu`, on the example's offline assets (made once per module by its
`make_assets.py`).

Runs that must agree start from one seed checkpoint (TorchTitan's own way to compare
parallelisms: `--checkpoint.create-seed-checkpoint` on one rank, then
`--checkpoint.initial-load-path`), so they hold the same weights before step 1 however they
shard them, and see the same batches:
- TP 2 equals 1 rank, FSDP 2 x TP 2 (4 ranks) equals FSDP 2, compiled (`--compile.enable
  --compile.backend torchtpu`) equals eager, 2 nodes x 2 ranks equals FSDP 4 ranks on one node:
  every logged loss within 1e-4 (float32 parameters; TorchTitan prints 5 decimals);
- resuming from a checkpoint gives the later losses of the run that did not stop (1e-4);
- every run's losses are finite and fall from step 1 to the last.
`make test` runs the seed, 1 rank and TP 2 (3 steps each); the rest is `make test-slow`. Each
launch runs in its own session under a timeout on a free port, killed whole afterwards.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import launch
import pytest
from paths import ROOT

pytest.importorskip("torchtitan")

EXAMPLE = str(ROOT / "examples" / "torchtitan")
STEPS = 3
TOL = 1e-4
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*(-?[\d.]+|nan|inf)")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    out = tmp_path_factory.mktemp("titan-assets")
    subprocess.run([sys.executable, os.path.join(EXAMPLE, "make_assets.py"), str(out)], check=True, timeout=300)
    return out


def _env(**extra) -> dict:
    env = dict(os.environ, TORCHTPU_DEVICE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (EXAMPLE, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def _titan_args(assets, dump, steps: int, *overrides) -> list:
    return [
        "-m", "torchtitan.train", "--module", "tpu_llama3", "--config", "llama3_debug_tpu",
        "--hf-assets-path", str(assets / "tokenizer"), "--dataloader.dataset-path", str(assets / "c4_test"),
        "--dump-folder", str(dump), "--training.steps", str(steps), *overrides,
    ]  # fmt: skip


def losses(out: str) -> dict[int, float]:
    """step -> loss, from the lines TorchTitan logs (every rank that logs the step agrees)."""
    got: dict[int, float] = {}
    for step, loss in _STEP.findall(_ANSI.sub("", out)):
        got.setdefault(int(step), float(loss))
    return got


def titan(tmp_path, assets, nproc: int, *overrides, steps: int = STEPS, seed=None, timeout: float = 600) -> dict:
    """One `torchrun -m torchtitan.train` launch; its logged losses by step."""
    dump = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    if seed is not None:
        overrides = ("--checkpoint.enable", "--checkpoint.initial-load-path", str(seed), *overrides)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone",
           "--max-restarts=0", *_titan_args(assets, dump, steps, *overrides)]  # fmt: skip
    (out,) = launch.finish([launch.start(cmd, tmp_path, _env())], timeout)
    return losses(out)


def _falling(got: dict, steps: int) -> None:
    assert sorted(got) == list(range(1, steps + 1)), f"logged steps {sorted(got)}"
    assert all(math.isfinite(v) for v in got.values()), got
    assert got[steps] < got[1], f"the loss did not fall: {got}"


def _equal(got: dict, want: dict, what: str) -> None:
    assert got.keys() == want.keys(), (got, want)
    worst = max(abs(got[s] - want[s]) for s in got)
    assert worst <= TOL, f"{what}: {got} vs {want} (worst {worst:.1e})"


@pytest.fixture(scope="module")
def seed(assets, tmp_path_factory):
    """TorchTitan's seed checkpoint: the initial weights, made on one rank, unsharded."""
    tmp = tmp_path_factory.mktemp("titan-seed")
    dump = tmp / "seed"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--standalone", "--max-restarts=0",
           *_titan_args(assets, dump, 1, "--checkpoint.enable", "--checkpoint.create-seed-checkpoint",
                        "--parallelism.data-parallel-shard-degree", "1")]  # fmt: skip
    launch.finish([launch.start(cmd, tmp, _env())], 600)
    path = dump / "checkpoint" / "step-0"
    assert path.is_dir(), f"no seed checkpoint in {dump}"
    return path


@pytest.fixture(scope="module")
def one_rank(assets, seed, tmp_path_factory):
    got = titan(tmp_path_factory.mktemp("titan-1"), assets, 1, seed=seed)
    _falling(got, STEPS)
    return got


def test_one_rank_trains(one_rank):
    """`--nproc-per-node=1` on tpu: losses finite and falling."""
    assert one_rank


def test_tensor_parallel_two_ranks_equals_one_rank(tmp_path, assets, seed, one_rank):
    got = titan(tmp_path, assets, 2, "--parallelism.tensor-parallel-degree", "2", seed=seed)
    _equal(got, one_rank, "TP 2 vs 1 rank")


@pytest.mark.slow
def test_fsdp_two_by_tp_two_on_four_ranks_equals_fsdp_two(tmp_path, assets, seed):
    """4 ranks, one tpu device each (the CPU plugin's 4), FSDP 2 x TP 2, against FSDP 2."""
    fsdp = titan(tmp_path, assets, 2, "--parallelism.data-parallel-shard-degree", "2", seed=seed)
    _falling(fsdp, STEPS)
    both = titan(
        tmp_path, assets, 4, "--parallelism.data-parallel-shard-degree", "2",
        "--parallelism.tensor-parallel-degree", "2", seed=seed,
    )  # fmt: skip
    _equal(both, fsdp, "FSDP 2 x TP 2 vs FSDP 2")


@pytest.mark.slow
def test_two_nodes_of_two_ranks_equal_one_node_of_four(tmp_path, assets, seed):
    """Two `torchrun --nnodes=2 --node-rank=K` launchers on this machine meeting at one
    rendezvous, as a multi-host job starts: FSDP over the 4 ranks equals FSDP 4 on one node."""
    one_node = titan(tmp_path, assets, 4, "--parallelism.data-parallel-shard-degree", "4", seed=seed)
    port = launch.free_port()
    overrides = ("--checkpoint.enable", "--checkpoint.initial-load-path", str(seed),
                 "--parallelism.data-parallel-shard-degree", "4")  # fmt: skip
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
               "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
               "--rdzv-id=titan-two-nodes", "--max-restarts=0",
               *_titan_args(assets, tmp_path / "two-nodes", STEPS, *overrides)]  # fmt: skip
        procs.append(launch.start(cmd, tmp_path, _env()))
    outs = launch.finish(procs, 600)
    _equal(losses(outs[0] + outs[1]), one_node, "2 nodes x 2 ranks vs 1 node x 4 ranks")


@pytest.mark.slow
def test_compiled_equals_eager(tmp_path, assets, seed, one_rank):
    """`--compile.enable`: TorchTitan compiles each block with its default backend, which sends
    tpu graphs to torchtpu (TorchTitan 0.3 refuses `--compile.backend torchtpu` for a model with
    FlexAttention by name: "neither 'inductor' nor 'aot_eager'")."""
    got = titan(tmp_path, assets, 1, "--compile.enable", seed=seed)
    _equal(got, one_rank, "compiled vs eager")


@pytest.mark.slow
def test_resume_from_checkpoint_gives_the_later_losses_of_the_run_that_did_not_stop(tmp_path, assets, seed):
    whole = titan(tmp_path, assets, 1, steps=4, seed=seed)
    dump = tmp_path / "stopped"
    common = ("--checkpoint.enable", "--checkpoint.interval", "2", "--checkpoint.initial-load-path", str(seed))
    for steps in (2, 4):  # stop after step 2 (a checkpoint), then resume in the same folder
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--standalone",
               "--max-restarts=0", *_titan_args(assets, dump, steps, *common)]  # fmt: skip
        (out,) = launch.finish([launch.start(cmd, tmp_path, _env())], 600)
    resumed = losses(out)
    assert sorted(resumed) == [3, 4], f"the resumed run logged steps {sorted(resumed)}"
    _equal(resumed, {s: whole[s] for s in (3, 4)}, "resumed vs uninterrupted")


@pytest.mark.slow
def test_profiler_writes_its_trace(tmp_path, assets):
    """`--profiler.enable-profiling` runs and writes TorchTitan's per-rank trace, with the tpu
    device's programs and their device time (the example's `TpuProfiler`, docs/debugging.md)."""
    import gzip
    import json

    titan(
        tmp_path, assets, 1, "--profiler.enable-profiling", "--profiler.profile-freq", "2",
        "--profiler.profiler-warmup", "1", "--profiler.profiler-active", "1", steps=2,
    )  # fmt: skip
    traces = sorted(tmp_path.glob("run*/profiling/traces/iteration_*/rank0_trace.json*"))
    assert traces, f"no trace under {tmp_path}"
    opener = gzip.open if traces[0].suffix == ".gz" else open
    with opener(traces[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(e["dur"] > 0 for e in kernels), traces[0]
    ops = {e["args"]["External id"] for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    assert all(k["args"].get("External id") in ops for k in kernels), "a device event not linked to its op"
