"""What each rank of test_distributed.py's torchrun launches runs: `python distributed_worker.py
SCENARIO OUT_DIR`. Each rank saves its results to OUT_DIR/rank{R}.pt (CPU tensors and plain
values); the test compares them with a single-process CPU computation. The inputs are
functions of the rank (`inputs`), so the test computes the expected values itself."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

WORLD = 2


def inputs(r: int) -> dict:
    """Every collective's inputs on rank r (CPU; the worker moves them to tpu)."""
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    return {
        "x": base + r + 1,
        "list": [torch.arange(3, dtype=torch.float32) + 10 * r + 3 * i for i in range(WORLD)],
        "big": torch.arange(WORLD * 6, dtype=torch.float32).reshape(WORLD * 2, 3) * (r + 1),
        "splits_in": [[1, 2], [3, 1]][r],
        "a2a_in": torch.arange(sum([[1, 2], [3, 1]][r]) * 2, dtype=torch.float32).reshape(-1, 2) + 100 * r,
        "int": torch.tensor([3, -7, 5], dtype=torch.int64) * (r + 1),
    }


def _save(out_dir: str, results: dict) -> None:
    torch.save(results, os.path.join(out_dir, f"rank{dist.get_rank()}.pt"))


def _cpu(v):
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    if isinstance(v, (list, tuple)):
        return [_cpu(x) for x in v]
    return v


def snippet(out_dir: str) -> None:
    # The snippet, unchanged.
    device = torch.accelerator.current_accelerator()
    dist.init_process_group()
    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.arange(4, dtype=torch.float32, device=device) + r
    dist.all_reduce(x)
    outs = [torch.empty(4, device=device) for _ in range(n)]
    dist.all_gather(outs, x)
    impl = dist.get_backend_impl(device=torch.device("tpu"))
    _save(
        out_dir,
        {
            "device": str(device),
            "backend": dist.get_backend(),
            "tpu_backend": impl.getBackendName(),
            "default_for_tpu": dist.get_default_backend_for_device("tpu"),
            "all_reduce": _cpu(x),
            "all_gather": _cpu(outs),
            "result_device": str(x.device),
        },
    )
    dist.destroy_process_group()


def _wait(work, i: int):
    # Alternate the two ways of waiting: Work.wait() and the future.
    if i % 2:
        return work.wait()
    value = work.get_future().wait()
    assert all(t.device.type == "tpu" for t in value), value
    return value


def collectives(out_dir: str) -> None:
    dist.init_process_group(timeout=timedelta(seconds=60))
    dev = torch.device("tpu")
    r, n = dist.get_rank(), dist.get_world_size()
    inp = {
        k: (
            v.to(dev)
            if isinstance(v, torch.Tensor)
            else [t.to(dev) for t in v]
            if isinstance(v, list) and v and isinstance(v[0], torch.Tensor)
            else v
        )
        for k, v in inputs(r).items()
    }
    res = {}
    for mode in ("sync", "async"):
        a = mode == "async"
        k = 0

        def done(w):
            nonlocal k
            if a:
                assert w is not None and isinstance(w, dist.Work)
                _wait(w, k)
                k += 1

        for op in ("SUM", "AVG", "PRODUCT", "MIN", "MAX"):
            t = inp["x"].clone()
            done(dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=a))
            res[f"{mode}/all_reduce/{op}"] = _cpu(t)
        t = inp["int"].clone()
        done(dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=a))
        res[f"{mode}/all_reduce/int"] = _cpu(t)
        t = inp["x"].clone()
        done(dist.broadcast(t, src=1, async_op=a))
        res[f"{mode}/broadcast"] = _cpu(t)
        t = inp["x"].clone()
        done(dist.reduce(t, dst=0, op=dist.ReduceOp.SUM, async_op=a))
        res[f"{mode}/reduce"] = _cpu(t)
        outs = [torch.empty(2, 3, device=dev) for _ in range(n)]
        done(dist.all_gather(outs, inp["x"], async_op=a))
        res[f"{mode}/all_gather"] = _cpu(outs)
        out = torch.empty(n * 2, 3, device=dev)
        done(dist.all_gather_into_tensor(out, inp["x"], async_op=a))
        res[f"{mode}/all_gather_into_tensor"] = _cpu(out)
        out = torch.empty(3, device=dev)
        done(dist.reduce_scatter(out, inp["list"], async_op=a))
        res[f"{mode}/reduce_scatter"] = _cpu(out)
        out = torch.empty(2, 3, device=dev)
        done(dist.reduce_scatter_tensor(out, inp["big"], async_op=a))
        res[f"{mode}/reduce_scatter_tensor"] = _cpu(out)
        out = torch.empty(2, 3, device=dev)
        done(dist.reduce_scatter_tensor(out, inp["big"], op=dist.ReduceOp.AVG, async_op=a))
        res[f"{mode}/reduce_scatter_tensor/AVG"] = _cpu(out)
        outs = [torch.empty(3, device=dev) for _ in range(n)]
        done(dist.all_to_all(outs, inp["list"], async_op=a))
        res[f"{mode}/all_to_all"] = _cpu(outs)
        splits_out = [[1, 3], [2, 1]][r]
        out = torch.empty(sum(splits_out), 2, device=dev)
        done(dist.all_to_all_single(out, inp["a2a_in"], splits_out, inp["splits_in"], async_op=a))
        res[f"{mode}/all_to_all_single"] = _cpu(out)
        out = torch.empty(n * 2, 3, device=dev)
        done(dist.all_to_all_single(out, inp["big"], async_op=a))
        res[f"{mode}/all_to_all_single/even"] = _cpu(out)
        outs = [torch.empty(2, 3, device=dev) for _ in range(n)] if r == 0 else None
        done(dist.gather(inp["x"], outs, dst=0, async_op=a))
        res[f"{mode}/gather"] = _cpu(outs) if r == 0 else None
        out = torch.empty(3, device=dev)
        done(dist.scatter(out, inp["list"] if r == 1 else None, src=1, async_op=a))
        res[f"{mode}/scatter"] = _cpu(out)
        if r == 0:
            w = dist.isend(inp["x"], dst=1) if a else dist.send(inp["x"], dst=1)
            if a:
                w.wait()
            t = torch.empty(2, 3, device=dev)
            w = dist.irecv(t, src=1) if a else dist.recv(t, src=1)
            if a:
                w.wait()
        else:
            t = torch.empty(2, 3, device=dev)
            w = dist.irecv(t, src=0) if a else dist.recv(t, src=0)
            if a:
                w.wait()
            t2 = t * 2
            w = dist.isend(t2, dst=0) if a else dist.send(t2, dst=0)
            if a:
                w.wait()
        res[f"{mode}/send_recv"] = _cpu(t)
        done(dist.barrier(async_op=a))
        # Coalescing: the fast paths torch takes for all_reduce, all_gather_into_tensor and
        # reduce_scatter_tensor inside _coalescing_manager.
        t1, t2 = inp["x"].clone(), inp["x"][0].clone() * 3
        with dist._coalescing_manager(async_ops=a) as cm:
            dist.all_reduce(t1)
            dist.all_reduce(t2)
        if a:
            cm.wait()
        res[f"{mode}/coalesced/all_reduce"] = _cpu([t1, t2])
        o1, o2 = torch.empty(n * 2, 3, device=dev), torch.empty(n * 3, device=dev)
        with dist._coalescing_manager(async_ops=a) as cm:
            dist.all_gather_into_tensor(o1, inp["x"])
            dist.all_gather_into_tensor(o2, inp["x"][1].clone())
        if a:
            cm.wait()
        res[f"{mode}/coalesced/all_gather_into_tensor"] = _cpu([o1, o2])
        o1, o2 = torch.empty(2, 3, device=dev), torch.empty(3, device=dev)
        with dist._coalescing_manager(async_ops=a) as cm:
            dist.reduce_scatter_tensor(o1, inp["big"])
            dist.reduce_scatter_tensor(o2, inp["big"][:2].reshape(-1).clone())
        if a:
            cm.wait()
        res[f"{mode}/coalesced/reduce_scatter_tensor"] = _cpu([o1, o2])
    # An error inside an async collective reaches wait() and the future (a bad output size).
    try:
        dist.all_gather_into_tensor(torch.empty(3, device=dev), inp["x"], async_op=True)
        res["error"] = None
    except Exception as e:
        res["error"] = type(e).__name__
    # Sub-groups: all ranks, rank 0 alone; DeviceMesh sub-meshes.
    g = dist.new_group([0, 1])
    t = inp["x"].clone()
    dist.all_reduce(t, group=g)
    res["group/all"] = _cpu(t)
    g0 = dist.new_group([0])
    if r == 0:
        t = inp["x"].clone()
        dist.all_reduce(t, group=g0)
        res["group/solo"] = _cpu(t)
        res["group/solo_backend"] = dist.get_backend(g0)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("tpu", (2, 1), mesh_dim_names=("dp", "tp"))
    t = inp["x"].clone()
    dist.all_reduce(t, group=mesh["dp"].get_group())
    res["mesh/dp"] = _cpu(t)
    t = inp["x"].clone()
    dist.all_reduce(t, group=mesh["tp"].get_group())
    res["mesh/tp"] = _cpu(t)
    res["mesh/dp_size"] = mesh["dp"].size()
    # DeferAndFuse: a collective is a cut named "collective".
    import torchtpu.eager as eager

    eager.reset_explain()
    with eager.mode("defer_and_fuse"):
        t = inp["x"] * 2 + 1
        dist.all_reduce(t)
        u = t + 1
        res["defer/all_reduce"] = _cpu(u)
    res["defer/reasons"] = [(rec["reason"], rec["detail"]) for rec in eager.explain().regions]
    _save(out_dir, res)
    dist.destroy_process_group()


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)
    )


def mlp_data(steps: int = 3, batch: int = 8) -> list:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 16, generator=g), torch.randn(batch, 4, generator=g)) for _ in range(steps)]


def train(model, data, opt, device, shard=None) -> list:
    """SGD steps on `data` (each rank its `shard` of every batch); the losses."""
    losses = []
    for x, y in data:
        if shard is not None:
            x, y = x.chunk(shard[1])[shard[0]], y.chunk(shard[1])[shard[0]]
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def ddp(out_dir: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(timeout=timedelta(seconds=60))
    r, n = dist.get_rank(), dist.get_world_size()
    model = mlp().to("tpu")
    # ~1 KB buckets: the 5 parameter tensors (4.5 KB of gradients in all) span several buckets.
    m = DDP(model, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    impl = dist.get_backend_impl(device=torch.device("tpu"))
    before = impl._seq
    losses = train(m, mlp_data(), opt, "tpu", shard=(r, n))
    _save(
        out_dir,
        {
            "params": {k: _cpu(v) for k, v in model.state_dict().items()},
            "losses": losses,
            "buckets": len(m.reducer._get_zeros_like_grad_buckets()),
            "collectives": impl._seq - before,
        },
    )
    dist.destroy_process_group()


def mismatch(out_dir: str) -> None:
    """Ranks that call different collectives: each raises CollectiveMismatchError naming it."""
    from torchtpu.distributed import CollectiveMismatchError

    dist.init_process_group(timeout=timedelta(seconds=20))
    r = dist.get_rank()
    res = {}
    cases = {
        "shape": lambda: dist.all_reduce(torch.ones(4 + r, device="tpu")),
        "op": lambda: (
            dist.all_reduce(torch.ones(4, device="tpu"))
            if r == 0
            else dist.broadcast(torch.ones(4, device="tpu"), src=0)
        ),
        "dtype": lambda: dist.all_gather_into_tensor(
            torch.empty(8, device="tpu", dtype=[torch.float32, torch.int32][r]),
            torch.ones(4, device="tpu", dtype=[torch.float32, torch.int32][r]),
        ),
    }
    for name, call in cases.items():
        t0 = time.perf_counter()
        try:
            call()
            res[name] = None
        except CollectiveMismatchError as e:
            res[name] = {
                "message": str(e),
                "op": e.op,
                "rank": e.rank,
                "seq": e.seq,
                "mismatched": e.mismatched,
                "s": time.perf_counter() - t0,
            }
    # The group still works after a detected mismatch (nothing moved).
    t = torch.ones(2, device="tpu")
    dist.all_reduce(t)
    res["after"] = _cpu(t)
    _save(out_dir, res)
    dist.destroy_process_group()


def dead_rank(out_dir: str) -> None:
    """Rank 1 first does not arrive (rank 0 times out), then dies (rank 0 raises at once)."""
    from torchtpu.distributed import CollectiveError

    timeout = 5
    dist.init_process_group(timeout=timedelta(seconds=timeout))
    r = dist.get_rank()
    t = torch.ones(3, device="tpu")
    dist.all_reduce(t)
    if r == 1:
        time.sleep(timeout + 3)
        os._exit(0)  # a crash without a traceback; exit code 0 so torchrun lets rank 0 finish
    res = {"timeout": timeout}
    t0 = time.perf_counter()
    try:
        dist.all_reduce(t)  # rank 1 is asleep: the fingerprint exchange times out
        res["hung"] = None
    except CollectiveError as e:
        res["hung"] = {
            "type": type(e).__name__,
            "message": str(e),
            "op": e.op,
            "seq": e.seq,
            "s": time.perf_counter() - t0,
        }
    time.sleep(max(0.0, timeout + 5 - (time.perf_counter() - t0)))  # rank 1 has exited now
    impl = dist.get_backend_impl(device=torch.device("tpu"))
    impl._check = False  # the data collective itself, async: the error reaches wait() and the future
    t0 = time.perf_counter()
    work = dist.all_reduce(torch.ones(3, device="tpu"), async_op=True)
    try:
        work.wait()
        res["dead_wait"] = None
    except CollectiveError as e:
        res["dead_wait"] = {
            "type": type(e).__name__,
            "message": str(e),
            "s": time.perf_counter() - t0,
            "is_distbackenderror": isinstance(e, dist.DistBackendError),
        }
    try:
        work.get_future().wait()
        res["dead_future"] = None
    except RuntimeError as e:  # through torch's Work wrapper: a RuntimeError with the message
        res["dead_future"] = {"type": type(e).__name__, "message": str(e)}
    torch.save(res, os.path.join(out_dir, "rank0.pt"))
    os._exit(0)  # the group cannot be torn down cleanly without its peer


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def tp_data() -> list:
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)) for _ in range(2)]


def tensor_parallel(out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("tpu", (WORLD,))
    model = parallelize_module(TwoLayer().to("tpu"), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    outs = []
    for x, y in tp_data():
        out = model(x.to("tpu"))
        loss = torch.nn.functional.mse_loss(out, y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        outs.append(_cpu(out))
    params = {k: _cpu(v.full_tensor()) for k, v in model.state_dict().items()}
    local = {k: list(v.to_local().shape) for k, v in model.state_dict().items()}
    _save(out_dir, {"outs": outs, "params": params, "local_shapes": local})
    dist.destroy_process_group()


def llama():
    from models import tiny_llama  # the script's directory is on sys.path

    return tiny_llama.model(seed=0, hidden_size=64, intermediate_size=128, attn_implementation="eager")


def llama_data(steps: int = 2, batch: int = 4, seq: int = 16) -> list:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 128, (batch, seq), generator=g) for _ in range(steps)]


def train_llama(model, data, device, shard=None) -> list:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for ids in data:
        if shard is not None:
            ids = ids.chunk(shard[1])[shard[0]]
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def fsdp2(out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (WORLD,))
    r = dist.get_rank()
    model = llama().to("tpu")
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = train_llama(model, llama_data(), "tpu", shard=(r, WORLD))
    # After backward FSDP2 has resharded: every unsharded parameter's storage is freed
    # (`untyped_storage().resize_(0)`), so only the shards hold device memory.
    unsharded = [
        p._unsharded_param
        for m in model.modules()
        if hasattr(m, "_get_fsdp_state")
        for p in m._get_fsdp_state()._fsdp_param_group.fsdp_params
        if hasattr(p, "_unsharded_param")
    ]
    freed = [p.untyped_storage().nbytes() for p in unsharded]
    params = {k: _cpu(v.full_tensor()) for k, v in model.state_dict().items()}
    _save(out_dir, {"losses": losses, "params": params, "unsharded_nbytes": freed})
    dist.destroy_process_group()


def host_cost(out_dir: str) -> None:
    """What the host transport costs (docs/distributed.md): all_reduce latency, tpu tensors
    through tpu_dist vs CPU tensors through gloo, the desync check on and off. Medians."""
    import statistics

    dist.init_process_group()
    impl = dist.get_backend_impl(device=torch.device("tpu"))
    rows = []
    for nbytes in (4, 64 << 10, 1 << 20, 16 << 20):
        iters = 100 if nbytes <= 64 << 10 else 20 if nbytes <= 1 << 20 else 5
        row = {"bytes": nbytes}
        for name, dev, check in (
            ("gloo_cpu", "cpu", None),
            ("tpu_dist", "tpu", True),
            ("tpu_dist_nocheck", "tpu", False),
        ):
            x = torch.ones(max(1, nbytes // 4), device=dev)
            if check is not None:
                impl._check = check
            times = []
            for i in range(iters + 3):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                if dev == "tpu":
                    torch.tpu.synchronize()
                if i >= 3:
                    times.append(time.perf_counter() - t0)
            row[name] = statistics.median(times) * 1e6
        rows.append(row)
    if dist.get_rank() == 0:
        import json

        print(json.dumps(rows))
    _save(out_dir, {"rows": rows})
    dist.destroy_process_group()


def main() -> None:
    scenario, out_dir = sys.argv[1], sys.argv[2]
    globals()[scenario](out_dir)


if __name__ == "__main__":
    main()
