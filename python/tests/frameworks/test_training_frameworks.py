"""Training frameworks across processes on tpu (docs/distributed.md, "Training frameworks"):
HF `Trainer` under torchrun (DDP, and FSDP2 through `fsdp_config`), and accelerate's own
`Accelerator` in a plain loop under `accelerate launch`. Each launch runs frameworks_worker.py on
2 ranks, each rank training the shared tiny Llama on its own tpu device and then the same way on
the CPU under gloo (same seeds, sampler and batches), and the two runs are compared here.

Tolerances: logged losses within 1e-4 of the CPU run's (float32, 3 steps; measured within 1e-6),
the reloaded `save_model` weights within 1e-4 of the CPU-trained ones (measured 3e-6).
Every launch runs in its own session under a timeout and is killed whole afterwards.
"""

from __future__ import annotations

import os
import shutil
import sys

import launch
import pytest
import torch
from paths import TESTS

pytest.importorskip("accelerate")

HERE = str(TESTS)  # the worker
WORKER = os.path.join(HERE, "frameworks_worker.py")
RANKS = 2


def _run(cmd: list, out_dir, timeout: float) -> list:
    env = dict(os.environ, TORCHTPU_DEVICE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    launch.run(cmd, HERE, env, timeout)
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(RANKS)]


def torchrun(scenario: str, out_dir, timeout: float = 240) -> list:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={RANKS}",
        "--standalone",
        "--max-restarts=0",
        WORKER,
        scenario,
        str(out_dir),
    ]
    return _run(cmd, out_dir, timeout)


def accelerate_launch(scenario: str, out_dir, timeout: float = 240) -> list:
    launcher = shutil.which("accelerate", path=os.path.dirname(sys.executable))
    assert launcher, "accelerate's launcher is not installed next to this Python"
    cmd = [
        launcher,
        "launch",
        "--multi_gpu",
        f"--num_processes={RANKS}",
        f"--main_process_port={launch.free_port()}",
        "--num_machines=1",
        "--mixed_precision=no",
        "--dynamo_backend=no",
        WORKER,
        scenario,
        str(out_dir),
    ]
    return _run(cmd, out_dir, timeout)


def _close(got: list, want: list, what: str) -> None:
    assert len(got) == len(want) > 0, f"{what}: {got} vs {want}"
    worst = max(abs(a - b) for a, b in zip(got, want))
    assert worst <= 1e-4, f"{what}: tpu {got} vs CPU {want} (worst {worst:.2e})"


def _check_ranks_on_their_devices(results: list, distributed_type="DistributedType.MULTI_GPU") -> None:
    for r, res in enumerate(results):
        tpu = res["tpu"]
        assert tpu["distributed_type"] == distributed_type, tpu
        assert tpu["num_processes"] == RANKS
        mine = f"tpu:{r}"
        assert tpu["batches"] == [mine], f"rank {r}'s batches were on {tpu['batches']}"
        assert tpu.get("state_device", tpu.get("device")) == mine
        assert res["cpu"]["distributed_type"] == "DistributedType.MULTI_CPU"


def test_trainer_ddp_across_two_processes_matches_gloo(tmp_path):
    """`torchrun --nproc-per-node=2 train.py` with HF Trainer's defaults: each rank's model and
    batches on its own tpu device, DDP over tpu_dist (Trainer's `find_unused_parameters=True`
    stages through pinned memory), losses equal the gloo run's; `save_model` from rank 0
    reloads onto tpu with the CPU-trained weights."""
    results = torchrun("trainer", tmp_path)
    _check_ranks_on_their_devices(results)
    for r, res in enumerate(results):
        assert res["tpu"]["params_devices"] == [f"tpu:{r}"]
        _close(res["tpu"]["losses"], res["cpu"]["losses"], f"rank {r} logged losses")
    assert results[0]["reload_devices"] == ["tpu:0"]
    assert results[0]["reload_worst"] <= 1e-4, results[0]["reload_worst"]


@pytest.mark.slow
def test_trainer_fsdp2_across_two_processes_matches_gloo(tmp_path):
    """Trainer with `fsdp="full_shard"` and `fsdp_config={"fsdp_version": 2}`: FSDP2 over tpu_dist
    trains as DDP on CPU does; the full state dict saved from rank 0 reloads onto tpu."""
    results = torchrun("trainer_fsdp", tmp_path)
    _check_ranks_on_their_devices(results, "DistributedType.FSDP")
    for r, res in enumerate(results):
        assert res["tpu"]["sharded"], "FSDP2 left parameters that are not DTensors"
        _close(res["tpu"]["losses"], res["cpu"]["losses"], f"rank {r} logged losses")
    assert results[0]["reload_worst"] <= 1e-4, results[0]["reload_worst"]


def test_accelerator_loop_under_accelerate_launch_matches_gloo(tmp_path):
    """`accelerate launch --multi_gpu --num_processes=2` of a plain loop over accelerate's
    `Accelerator`: prepared model, optimizer and dataloader on each rank's tpu device; the
    reduced losses and the trained weights equal the same loop's on CPU under gloo."""
    results = accelerate_launch("accelerate_loop", tmp_path)
    _check_ranks_on_their_devices(results)
    for r, res in enumerate(results):
        _close(res["tpu"]["losses"], res["cpu"]["losses"], f"rank {r} reduced losses")
        worst = max((res["tpu"]["params"][k] - v).abs().max().item() for k, v in res["cpu"]["params"].items())
        assert worst <= 1e-4, f"rank {r}: trained weights differ from CPU's by {worst:.2e}"
