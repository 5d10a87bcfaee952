"""tpu_dist's in-process transport: ranks that are threads of this process, rank r on `tpu:r`
(`torchtpu.distributed.spawn`, the CPU plugin's 4 devices), each collective one replicated
StableHLO program over the ranks' devices, and compiled graphs whose functional collectives
are in that program. Every result is compared with the same computation on CPU tensors in
this thread. Collectives move values exactly (sums of small integers, compared exactly);
AVG and training within the tolerances stated at each test.
"""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import torchtpu
import torchtpu.distributed as td
from torchtpu.distributed import inprocess
from torchtpu.distributed.threads import SpawnError

N = 4
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(torch.tpu.device_count() < N, reason="needs the CPU plugin's 4 devices"),
]


def _value(rank: int, shape=(2, 3), dtype=torch.float32) -> torch.Tensor:
    """Rank r's input: small integers, so that every reduction is exact in float32."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float32).reshape(shape) + 10 * rank).to(dtype)


def _transport_name() -> str:
    return dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu")).transport.name


def test_every_collective_runs_as_a_program_and_matches_cpu():
    compiled_before = inprocess.STATS["programs_compiled"]

    def run(rank):
        assert _transport_name() == "in-process"
        x = _value(rank).to("tpu")
        assert x.device == torch.device("tpu", rank)
        out = {}
        for op in ("SUM", "PRODUCT", "MIN", "MAX", "AVG"):
            y = x.clone()
            dist.all_reduce(y, op=getattr(dist.ReduceOp, op))
            out[op] = y.cpu()
        g = [torch.empty(2, 3, device="tpu") for _ in range(N)]
        dist.all_gather(g, x)
        out["all_gather"] = [t.cpu() for t in g]
        flat = torch.empty(2 * N, 3, device="tpu")
        dist.all_gather_into_tensor(flat, x)
        out["all_gather_into"] = flat.cpu()
        rs = torch.empty(1, 3, device="tpu")
        dist.reduce_scatter_tensor(rs, _value(rank, (N, 3)).to("tpu"))
        out["reduce_scatter_tensor"] = rs.cpu()
        rs_list = torch.empty(2, 3, device="tpu")
        dist.reduce_scatter(rs_list, [(_value(rank) * (j + 1)).to("tpu") for j in range(N)])
        out["reduce_scatter"] = rs_list.cpu()
        b = x.clone()
        dist.broadcast(b, src=2)
        out["broadcast"] = b.cpu()
        r = x.clone()
        dist.reduce(r, dst=1)
        out["reduce"] = r.cpu()
        a2a = torch.empty(N * 2, device="tpu")
        dist.all_to_all_single(a2a, _value(rank, (N * 2,)).to("tpu"))
        out["all_to_all_single"] = a2a.cpu()
        outs = [torch.empty(3, device="tpu") for _ in range(N)]
        dist.all_to_all(outs, [(_value(rank, (3,)) + 100 * j).to("tpu") for j in range(N)])
        out["all_to_all"] = [t.cpu() for t in outs]
        gathered = [torch.empty(2, 3, device="tpu") for _ in range(N)] if rank == 3 else None
        dist.gather(x, gathered, dst=3)
        out["gather"] = None if gathered is None else [t.cpu() for t in gathered]
        sc = torch.empty(2, 3, device="tpu")
        dist.scatter(sc, [(_value(0) * (j + 1)).to("tpu") for j in range(N)] if rank == 0 else None, src=0)
        out["scatter"] = sc.cpu()
        if rank % 2 == 0:
            dist.send(x * 2, dst=rank + 1)
        else:
            got = torch.empty(2, 3, device="tpu")
            dist.recv(got, src=rank - 1)
            out["recv"] = got.cpu()
        dist.barrier()
        return out

    results = td.spawn(run, N)
    xs = [_value(r) for r in range(N)]
    total = sum(xs)
    for rank, out in enumerate(results):
        assert torch.equal(out["SUM"], total)
        assert torch.equal(out["PRODUCT"], xs[0] * xs[1] * xs[2] * xs[3])
        assert torch.equal(out["MIN"], xs[0]) and torch.equal(out["MAX"], xs[3])
        torch.testing.assert_close(out["AVG"], total / N, rtol=1e-6, atol=1e-6)
        assert all(torch.equal(g, x) for g, x in zip(out["all_gather"], xs))
        assert torch.equal(out["all_gather_into"], torch.cat(xs))
        assert torch.equal(out["reduce_scatter_tensor"], sum(_value(r, (N, 3)) for r in range(N))[rank : rank + 1])
        assert torch.equal(out["reduce_scatter"], total * (rank + 1))
        assert torch.equal(out["broadcast"], xs[2])
        assert torch.equal(out["reduce"], total if rank == 1 else xs[rank])
        sent = [_value(r, (N * 2,)) for r in range(N)]
        assert torch.equal(out["all_to_all_single"], torch.cat([s[2 * rank : 2 * rank + 2] for s in sent]))
        assert all(torch.equal(o, _value(j, (3,)) + 100 * rank) for j, o in enumerate(out["all_to_all"]))
        if rank == 3:
            assert all(torch.equal(g, x) for g, x in zip(out["gather"], xs))
        assert torch.equal(out["scatter"], xs[0] * (rank + 1))
        if rank % 2:
            assert torch.equal(out["recv"], xs[rank - 1] * 2)
    # One program per distinct collective form, compiled once for all four ranks.
    assert inprocess.STATS["programs_compiled"] > compiled_before


def test_async_collectives_complete_through_work_and_future():
    def run(rank):
        x = _value(rank).to("tpu")
        work = dist.all_reduce(x, async_op=True)
        fut = work.get_future()
        work.wait()
        assert torch.equal(fut.wait()[0].cpu(), x.cpu())
        y = _value(rank).to("tpu")
        chained = dist.all_reduce(y, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
        return x.cpu(), chained.wait().cpu()

    total = sum(_value(r) for r in range(N))
    for x, doubled in td.spawn(run, N):
        assert torch.equal(x, total) and torch.equal(doubled, total * 2)


def test_sub_groups_run_among_their_own_devices():
    def run(rank):
        low, high = dist.new_group([0, 1]), dist.new_group([2, 3])
        group = low if rank < 2 else high
        x = _value(rank).to("tpu")
        dist.all_reduce(x, group=group)
        backend = group._get_backend(torch.device("tpu"))
        return x.cpu(), backend.transport.name

    for rank, (x, name) in enumerate(td.spawn(run, N)):
        pair = (0, 1) if rank < 2 else (2, 3)
        assert name == "in-process"
        assert torch.equal(x, _value(pair[0]) + _value(pair[1]))


def test_forms_without_a_program_take_the_host_transport_and_are_counted():
    before = dict(inprocess.STATS["host_fallbacks"])

    def run(rank):
        x = torch.tensor([rank + 1, 6, 12], dtype=torch.int64, device="tpu")
        dist.all_reduce(x, op=dist.ReduceOp.BAND)
        uneven_in = torch.arange(rank + 1 + 6, dtype=torch.float32, device="tpu")  # rank+1 to rank 0, 2 to each other
        in_splits = [rank + 1] + [2] * (N - 1)
        out_splits = [r + 1 for r in range(N)] if rank == 0 else [2] * N
        y = torch.empty(sum(out_splits), device="tpu")
        dist.all_to_all_single(y, uneven_in, out_splits, in_splits)
        return x.cpu(), y.cpu()

    results = td.spawn(run, N)
    band = torch.tensor([1 & 2 & 3 & 4, 6, 12])
    for rank, (x, y) in enumerate(results):
        assert torch.equal(x, band)
        if rank == 0:
            assert torch.equal(y, torch.cat([torch.arange(r + 1 + 6.0)[: r + 1] for r in range(N)]))
    after = inprocess.STATS["host_fallbacks"]
    assert after.get("all_reduce", 0) >= before.get("all_reduce", 0) + N
    assert after.get("all_to_all_single", 0) >= before.get("all_to_all_single", 0) + N


def test_a_rank_that_does_not_arrive_fails_the_others_within_the_timeout():
    def run(rank):
        if rank == 1:
            return None  # never joins the collective
        x = torch.ones(3, device="tpu")
        dist.all_reduce(x)

    with pytest.raises(SpawnError) as info:
        td.spawn(run, 2, timeout=timedelta(seconds=3))
    assert "timeout" in str(info.value).lower() or "did not arrive" in str(info.value)


def test_set_timeout_shortens_the_wait_for_a_missing_rank_and_barrier_takes_device_ids(monkeypatch):
    """`dist.set_timeout(t)` reaches tpu_dist (c10d's `setTimeout`): a group made with a 60 s
    timeout then fails a collective a rank never joins after about 2 s. Where tpu is the
    accelerator (c10d builds a barrier's device from it; elsewhere `device_ids` name CPU devices
    and gloo runs the barrier), `barrier(device_ids=[rank])` runs on the rank's device and a
    device id the process lacks is refused by name."""
    import time

    monkeypatch.setenv("TORCHTPU_DEVICE", "1")

    elapsed = {}

    def run(rank):
        dist.barrier(device_ids=[rank])
        if rank == 0:
            with pytest.raises(RuntimeError, match="invalid device tpu:9"):
                dist.barrier(device_ids=[9])
        dist.barrier()
        dist.set_timeout(timedelta(seconds=2))
        if rank == 1:
            return None  # never joins the collective
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(3, device="tpu"))
        finally:
            elapsed[rank] = time.monotonic() - start

    with pytest.raises(SpawnError) as info:
        td.spawn(run, 2, timeout=timedelta(seconds=60))
    assert "timeout" in str(info.value).lower() or "did not arrive" in str(info.value)
    assert elapsed[0] < 20, f"the collective waited {elapsed[0]:.1f} s, not the 2 s set"


def test_mismatched_collectives_are_named():
    def run(rank):
        x = torch.ones(3 if rank == 0 else 4, device="tpu")
        dist.all_reduce(x)

    with pytest.raises(SpawnError) as info:
        td.spawn(run, 2, timeout=timedelta(seconds=10))
    assert isinstance(info.value.__cause__, td.CollectiveMismatchError), repr(info.value.__cause__)
    assert "all_reduce" in str(info.value) and "#1" in str(info.value)


def test_ddp_on_four_thread_ranks_matches_one_cpu_process():
    """DDP (several buckets) over 4 ranks, each a quarter of the batch, against one CPU
    process training on the whole batch: gradients averaged across ranks equal the
    full-batch gradient (rtol 1e-4, atol 1e-5: the summation order differs)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))

    torch.manual_seed(1)
    xs, ys = torch.randn(3, 16, 8), torch.randn(3, 16, 4)
    ref = model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(ref(xs[step]), ys[step]).backward()
        opt.step()

    init = model()  # made here: torch.manual_seed in rank threads would race on one generator

    def run(rank):
        m = DDP(copy.deepcopy(init).to("tpu"), bucket_cap_mb=0.0005)  # ~500 bytes: several buckets
        o = torch.optim.SGD(m.parameters(), lr=0.1)
        part = slice(4 * rank, 4 * rank + 4)
        for step in range(3):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(xs[step][part].to("tpu")), ys[step][part].to("tpu")).backward()
            o.step()
        return [p.detach().cpu() for p in m.module.parameters()]

    for params in td.spawn(run, N):
        for p, q in zip(params, ref.parameters()):
            torch.testing.assert_close(p, q.detach(), rtol=1e-4, atol=1e-5)


def test_dtensor_tensor_parallel_on_an_in_process_mesh_matches_cpu():
    """ColwiseParallel/RowwiseParallel over init_device_mesh("tpu", (4,)): forward and
    gradients equal the unsharded CPU module's (rtol 1e-5, atol 1e-5)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))

    x = torch.randn(5, 8)
    ref = mlp()
    ref_out = ref(x)
    ref_out.sum().backward()

    init = mlp()  # made here: torch.manual_seed in rank threads would race on one generator

    def run(rank):
        mesh = init_device_mesh("tpu", (N,))
        m = parallelize_module(copy.deepcopy(init).to("tpu"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        out = m(x.to("tpu"))
        out.sum().backward()
        grad = m[0].weight.grad.full_tensor()
        return out.cpu(), grad.cpu()

    for out, grad in td.spawn(run, N):
        torch.testing.assert_close(out, ref_out.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad, ref[0].weight.grad, rtol=1e-5, atol=1e-5)


def test_a_compiled_graph_holds_its_collectives_in_one_replicated_program():
    """A functional all_reduce and all_gather inside torch.compile: no fallback, one program
    for the group, equal to the CPU computation (rtol 1e-5, atol 1e-5)."""
    torch._dynamo.reset()
    torchtpu.reset_stats()

    def f(x, w):
        y = torch.relu(x @ w)
        y = funcol.all_reduce(y, "sum", dist.group.WORLD)
        g = funcol.all_gather_tensor(y[:1], 0, dist.group.WORLD)
        return torch.tanh(y).sum(dim=1), g

    compiled = torch.compile(f, backend="torchtpu")
    torch.manual_seed(0)
    inputs = [(torch.randn(4, 8), torch.randn(8, 8)) for _ in range(N)]

    def run(rank):
        x, w = inputs[rank]
        outs = [compiled(x.to("tpu"), w.to("tpu")) for _ in range(2)]
        return [(a.cpu(), b.cpu()) for a, b in outs]

    results = td.spawn(run, N)
    total = sum(torch.relu(x @ w) for x, w in inputs)
    for per_call in results:
        for a, b in per_call:
            torch.testing.assert_close(a, torch.tanh(total).sum(dim=1), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(b, torch.cat([total[:1]] * N), rtol=1e-5, atol=1e-5)
    assert torchtpu.stats()["fallback_reasons"] == []


def test_a_collective_over_the_host_transport_splits_the_compiled_graph(monkeypatch):
    """Where the collective cannot be in the program (the host transport), the graph is split
    at it, the collective runs through the process group, and the split is recorded."""
    monkeypatch.setenv("TORCHTPU_DIST_TRANSPORT", "host")
    torch._dynamo.reset()
    torchtpu.reset_stats()

    def f(x):
        return funcol.all_reduce(torch.relu(x), "sum", dist.group.WORLD) * 2

    compiled = torch.compile(f, backend="torchtpu")
    x = torch.randn(3, 5)

    def run(rank):
        assert _transport_name() == "host"
        return compiled((x * (rank + 1)).to("tpu")).cpu()

    for out in td.spawn(run, 2):
        torch.testing.assert_close(out, torch.relu(x) * 3 * 2, rtol=1e-6, atol=1e-6)
    reasons = torchtpu.stats()["fallback_reasons"]
    assert reasons and all(r["kind"] == "collective" for r in reasons), reasons
    assert any("collective: _c10d_functional.all_reduce" in r["message"] for r in reasons), reasons


@pytest.mark.timeout(240)
def test_two_processes_of_two_device_ranks_dp_across_tp_inside(tmp_path):
    """torchrun with 2 processes, each 2 ranks on its own tpu:0/tpu:1 (spawn): the TP groups
    take the in-process transport, the DP groups the host one; the trained weights equal one
    CPU process on the whole batch (rtol 1e-4, atol 1e-5: summation orders differ)."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_distributed import launch

    results, _ = launch("dp_tp", tmp_path, nproc=2, timeout=180, script="distributed_hybrid_worker.py")
    import distributed_hybrid_worker as hybrid

    ranks = [r for proc in results for r in proc]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3]
    assert len({r["pid"] for r in ranks}) == 2
    ref = hybrid.reference()
    for r in ranks:
        assert r["transports"] == {"dp": "host", "tp": "in-process"}, r["transports"]
        for w, q in zip(r["weights"], ref):
            torch.testing.assert_close(w, q, rtol=1e-4, atol=1e-5)


def test_defer_and_fuse_is_refused_for_thread_ranks_and_works_for_one_rank():
    """DeferAndFuse records one region per process: ranks that are threads would mix their ops
    in it, so spawn refuses the mode, clearly, before any rank starts. A group of one rank in
    this process keeps it, the collective a cut."""
    import torchtpu.eager as te

    with te.mode("defer_and_fuse"):
        with pytest.raises(NotImplementedError, match="DeferAndFuse"):
            td.spawn(lambda rank: None, 2)

    def one_rank(rank):
        te.reset_explain()
        with te.mode("defer_and_fuse"):
            x = torch.arange(4.0, device="tpu") * 2 + 1
            dist.all_reduce(x)
            y = (x * 3).cpu()
        return y, [r["reason"] for r in te.explain().regions]

    y, reasons = td.spawn(one_rank, 1)[0]
    assert torch.equal(y, (torch.arange(4.0) * 2 + 1) * 3)
    assert "collective" in reasons, reasons


def test_a_wait_on_a_collective_started_outside_the_graph_really_waits():
    """`wait_tensor` of a tensor whose collective started before the compiled graph runs
    eagerly (a split of kind "collective"): inside the program it would read the old values."""
    torch._dynamo.reset()
    torchtpu.reset_stats()
    compiled = torch.compile(lambda y: torch.ops._c10d_functional.wait_tensor(y) + 1, backend="torchtpu")

    def run(rank):
        x = torch.full((3,), float(rank + 1), device="tpu")
        y = torch.ops._c10d_functional.all_reduce(x, "sum", dist.group.WORLD.group_name)  # in flight
        return compiled(y).cpu()

    for out in td.spawn(run, N):
        assert torch.equal(out, torch.full((3,), 1.0 + 2 + 3 + 4 + 1))
    reasons = torchtpu.stats()["fallback_reasons"]
    assert reasons and all(r["kind"] == "collective" for r in reasons), reasons
