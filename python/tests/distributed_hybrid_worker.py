"""One process of the 2-process x 2-device run (test_distributed_inprocess.py): under torchrun
with 2 processes, `torchtpu.distributed.spawn(fn, 2)` makes 4 ranks, 2 threads per process on
tpu:0 and tpu:1. A (dp=2, tp=2) mesh: tensor parallelism inside each process (its TP group
takes the in-process transport), data parallelism across the processes (the DP group takes
the host transport, gloo). Each process saves its ranks' results to argv[2]."""

from __future__ import annotations

import copy
import os
import sys

import torch
import torch.distributed as dist

import torchtpu.distributed as td

STEPS, LR, BATCH = 3, 0.1, 8


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def data():
    torch.manual_seed(1)
    return torch.randn(STEPS, 2 * BATCH, 8), torch.randn(STEPS, 2 * BATCH, 4)


def run(rank: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh["dp"], mesh["tp"]
    model = parallelize_module(copy.deepcopy(INIT).to("tpu"), tp, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    transports = {
        name: m.get_group()._get_backend(torch.device("tpu")).transport.name for name, m in (("dp", dp), ("tp", tp))
    }
    xs, ys = DATA
    part = slice(BATCH * dp.get_local_rank(), BATCH * (dp.get_local_rank() + 1))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs[step][part].to("tpu")), ys[step][part].to("tpu"))
        loss.backward()
        for p in model.parameters():  # data parallelism by hand: average the local shards' grads
            local = p.grad.to_local()
            dist.all_reduce(local, op=dist.ReduceOp.AVG, group=dp.get_group())
        opt.step()
    weights = [p.full_tensor().detach().cpu() for p in model.parameters()]
    return {"rank": rank, "pid": os.getpid(), "transports": transports, "weights": weights}


def reference():
    """One CPU process training on the whole batch (what the test compares with)."""
    model = mlp()
    xs, ys = data()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs[step]), ys[step]).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


if __name__ == "__main__":
    # Made before the threads start: torch.manual_seed in rank threads would race on the one
    # CPU generator they share.
    INIT, DATA = mlp(), data()
    results = td.spawn(run, 2)  # argv: the scenario ("dp_tp", the only one) and the output folder
    torch.save(results, os.path.join(sys.argv[2], f"rank{os.environ['RANK']}.pt"))
