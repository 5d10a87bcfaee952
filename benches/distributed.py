"""tpu_dist benchmark (docs/distributed.md): all_reduce latency and bus bandwidth from 4 B to
64 MiB, side by side in one run,
  - gloo on CPU tensors, 2 processes (the baseline);
  - tpu_dist's host transport on tpu tensors, 2 processes (gloo plus the device copies);
  - tpu_dist's in-process transport, ranks as threads on the 4 CPU-plugin devices
    (`torchtpu.distributed.spawn`: one replicated program per collective);
  - a DDP training step on 2 ranks against 1 rank (the same per-rank batch);
  - a compiled step whose graph holds a functional all_reduce (4 thread ranks: the collective
    inside the replicated program) against the same step eager.

    python benches/distributed.py [--quick]

Multi-process parts run under torchrun (a subprocess with a timeout, its process group killed
afterwards). Bus bandwidth is bytes x 2(n-1)/n / time, as nccl-tests reports it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

SIZES = [4, 64, 1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20]


def _iters(nbytes: int, quick: bool) -> int:
    n = 200 if nbytes <= 16 << 10 else 40 if nbytes <= 4 << 20 else 6
    return max(3, n // 4) if quick else n


def _time_all_reduce(x, iters: int, dist) -> float:
    for _ in range(2):
        dist.all_reduce(x)
    if x.device.type == "tpu":
        x.cpu()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    if x.device.type == "tpu":
        x.cpu()  # the last collective's values are read: every one has finished
    return (time.perf_counter() - t) / iters


def worker(kind: str, quick: bool) -> None:
    import torch
    import torch.distributed as dist

    if kind == "gloo":
        dist.init_process_group("gloo")
        device = "cpu"
    else:
        dist.init_process_group()  # cpu:gloo,tpu:tpu_dist (TORCHTPU_DEVICE=1)
        device = "tpu"
    rank, n = dist.get_rank(), dist.get_world_size()
    if kind in ("gloo", "host"):
        for nbytes in SIZES:
            x = torch.ones(max(1, nbytes // 4), device=device)
            s = _time_all_reduce(x, _iters(nbytes, quick), dist)
            if rank == 0:
                print(json.dumps({"kind": kind, "bytes": nbytes, "us": s * 1e6, "busbw": nbytes * 2 * (n - 1) / n / s / 1e9}), flush=True)
    elif kind == "ddp":
        ms = _ddp_step_ms(device, quick)  # every rank steps; rank 0 reports
        if rank == 0:
            print(json.dumps({"kind": "ddp", "ranks": n, "ms": ms}), flush=True)
    dist.destroy_process_group()


def _model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def _ddp_step_ms(device: str, quick: bool) -> float:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_model(torch).to(device), bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 256, device=device), torch.randint(0, 10, (32,), device=device)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    list(model.parameters())[0].cpu()
    iters = 5 if quick else 20
    t = time.perf_counter()
    for _ in range(iters):
        step()
    list(model.parameters())[0].cpu()
    return (time.perf_counter() - t) / iters * 1e3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(kind: str, nproc: int, quick: bool) -> list[dict]:
    env = dict(os.environ, TORCHTPU_DEVICE="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={_free_port()}", __file__, "--worker", kind] + (["--quick"] if quick else [])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun {kind} failed ({proc.returncode}):\n{err[-3000:]}")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def in_process(quick: bool) -> list[dict]:
    import torch
    import torch.distributed as dist

    import torchtpu.distributed as td

    n = torch.tpu.device_count()

    def run(rank):
        rows = []
        for nbytes in SIZES:
            x = torch.ones(max(1, nbytes // 4), device="tpu")
            s = _time_all_reduce(x, _iters(nbytes, quick), dist)
            rows.append({"kind": f"in-process x{n}", "bytes": nbytes, "us": s * 1e6, "busbw": nbytes * 2 * (n - 1) / n / s / 1e9})
        return rows, compiled_vs_eager(quick, INPUTS[rank])

    rows, steps = td.spawn(run, n)[0]
    return rows, steps


def _step(x, w):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    y = torch.relu(x @ w)
    y = funcol.all_reduce(y, "sum", dist.group.WORLD)
    return torch.tanh(y @ w).sum(dim=1)


_compiled_step = None
INPUTS: list = []


def compiled_vs_eager(quick: bool, inputs) -> dict:
    """One rank's step time, eager (its collective through tpu_dist) against compiled (on the
    in-process transport, the collective inside the replicated program)."""
    import torch

    x, w = (t.to("tpu") for t in inputs)
    step, compiled = _step, _compiled_step
    out = {}
    for name, fn in (("eager", step), ("compiled", compiled)):
        for _ in range(3):
            fn(x, w).cpu()
        iters = 10 if quick else 50
        t = time.perf_counter()
        for _ in range(iters):
            r = fn(x, w)
        r.cpu()
        out[name] = (time.perf_counter() - t) / iters * 1e6
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--worker")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if a.worker:
        return worker(a.worker, a.quick)
    os.environ.setdefault("TORCHTPU_DEVICE", "1")
    import torch

    torch.manual_seed(0)  # the ranks' inputs, made before the threads (one generator per process)
    INPUTS.extend((torch.randn(64, 256), torch.randn(256, 256) / 16) for _ in range(torch.tpu.device_count()))
    global _compiled_step  # made here: Dynamo's first backend lookup is not thread-safe
    _compiled_step = torch.compile(_step, backend="torchtpu")
    inproc, steps = in_process(a.quick)
    rows = torchrun("gloo", 2, a.quick) + torchrun("host", 2, a.quick) + inproc
    by = {}
    for r in rows:
        by.setdefault(r["bytes"], {})[r["kind"]] = r
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print("all_reduce latency (us) and bus bandwidth (GB/s):")
    print("bytes".rjust(10) + "".join(f"{k:>28}" for k in kinds))
    for nbytes in SIZES:
        cells = "".join(f"{by[nbytes][k]['us']:>14.1f} {by[nbytes][k]['busbw']:>12.4f}" for k in kinds)
        print(f"{nbytes:>10}{cells}")
    ddp = {r["ranks"]: r["ms"] for r in torchrun("ddp", 2, a.quick) + torchrun("ddp", 1, a.quick) if r}
    print(f"DDP step (MLP, batch 32 per rank, tpu): 1 rank {ddp[1]:.2f} ms, 2 ranks {ddp[2]:.2f} ms ({ddp[2] / ddp[1]:.2f}x)")
    print(f"step with a functional all_reduce, {len(INPUTS)} thread ranks (rank 0's time): eager {steps['eager']:.0f} us, "
          f"compiled with the collective in the program {steps['compiled']:.0f} us ({steps['eager'] / steps['compiled']:.2f}x)")


if __name__ == "__main__":
    main()
