"""The `tpu_dist` torch.distributed backend (docs/distributed.md), on the CPU plugin with
TORCHTPU_DEVICE=1. Multi-process tests launch torchrun (2 ranks) as a subprocess in its own
session with a hard timeout, and kill the whole session afterwards: no process or port is
left behind. Each rank runs a scenario of distributed_worker.py and saves its results; they
are compared here with the same computation run on CPU tensors in this one process.

Tolerances: collectives move values exactly (the host transport copies bytes, sums in gloo
in rank order, as the CPU reference does), so they are compared exactly, except AVG
(one division; 1e-6). Training runs are compared within rtol 1e-4 / atol 1e-5 (float32
summation order differs between one process and gloo's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from paths import TESTS

HERE = str(TESTS)  # the workers
import distributed_worker as worker  # noqa: E402

WORLD = worker.WORLD


def _env(**extra) -> dict:
    env = dict(os.environ)
    env.update(TORCHTPU_DEVICE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("TORCHTPU_DIST_CHECK", None)
    env.update(extra)
    return env


def launch(
    scenario: str,
    tmp_path,
    nproc: int = WORLD,
    timeout: float = 150,
    expect_ok: bool = True,
    script: str = "distributed_worker.py",
    **env,
) -> tuple[list, str]:
    """Runs `scenario` of `script` (in this folder) under torchrun; returns each process's
    saved results (`rank{RANK}.pt`) and the output."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--standalone",
        "--max-restarts=0",
        os.path.join(HERE, script),
        scenario,
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=HERE,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun {scenario} did not finish within {timeout} s:\n{out[-6000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the session left (workers, agents)
        except ProcessLookupError:
            pass
    if expect_ok:
        assert proc.returncode == 0, f"torchrun {scenario} failed ({proc.returncode}):\n{out[-8000:]}"
    results = []
    for r in range(nproc):
        path = os.path.join(tmp_path, f"rank{r}.pt")
        results.append(torch.load(path, weights_only=False) if os.path.exists(path) else None)
    return results, out


# ------------------------------------------------------------------ the snippet


def _snippet_expected(n: int) -> tuple:
    xs = [torch.arange(4, dtype=torch.float32) + r for r in range(n)]
    total = sum(xs[1:], xs[0].clone())
    return total, [total] * n


@pytest.mark.timeout(120)
def test_snippet_single_process(tmp_path):
    """World size 1 from environment variables, no torchrun."""
    env = _env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "distributed_worker.py"), "snippet", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = torch.load(os.path.join(tmp_path, "rank0.pt"))
    _check_snippet([res])


def _check_snippet(results: list) -> None:
    total, gathered = _snippet_expected(len(results))
    for res in results:
        assert res["device"] == "tpu"
        assert res["backend"] == "cpu:gloo,tpu:tpu_dist"
        assert res["tpu_backend"] == "tpu_dist"
        assert res["default_for_tpu"] == "tpu_dist"
        assert res["result_device"].startswith("tpu")
        torch.testing.assert_close(res["all_reduce"], total, rtol=0, atol=0)
        for got, want in zip(res["all_gather"], gathered):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.timeout(180)
def test_snippet_torchrun(tmp_path):
    results, _ = launch("snippet", tmp_path)
    _check_snippet(results)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cpu_program_stays_gloo(tmp_path):
    """Without TORCHTPU_DEVICE=1 on the CPU plugin, init_process_group() is plain gloo, and
    `barrier(device_ids=[0])` (TorchTitan's) runs on the CPU as without torchtpu."""
    code = (
        "import torch, torch.distributed as dist\n"
        "assert torch.accelerator.current_accelerator(check_available=True) is None\n"
        "assert torch._C._get_accelerator().type == 'cpu'\n"
        "dist.init_process_group()\n"
        "print(dist.get_backend(), dist.get_default_backend_for_device('tpu'))\n"
        "x = torch.ones(2); dist.all_reduce(x); dist.barrier(device_ids=[0]); dist.destroy_process_group()\n"
    )
    env = _env(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    env.pop("TORCHTPU_DEVICE")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100, start_new_session=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # torch's own choice for a CPU machine ("undefined": gloo for CPU, made lazily), untouched.
    assert proc.stdout.split() == ["undefined", "tpu_dist"]


# ------------------------------------------------------------------ every collective


def _reference() -> dict:
    """Each collective of `worker.collectives` computed on CPU in this process, per rank."""
    ins = [worker.inputs(r) for r in range(WORLD)]
    x = [i["x"] for i in ins]
    ref: dict = {}
    for r in range(WORLD):
        e = {}
        e["all_reduce/SUM"] = x[0] + x[1]
        e["all_reduce/AVG"] = (x[0] + x[1]) / 2
        e["all_reduce/PRODUCT"] = x[0] * x[1]
        e["all_reduce/MIN"] = torch.minimum(x[0], x[1])
        e["all_reduce/MAX"] = torch.maximum(x[0], x[1])
        e["all_reduce/int"] = ins[0]["int"] + ins[1]["int"]
        e["broadcast"] = x[1]
        e["reduce"] = x[0] + x[1] if r == 0 else x[r]
        e["all_gather"] = [x[0], x[1]]
        e["all_gather_into_tensor"] = torch.cat(x)
        e["reduce_scatter"] = ins[0]["list"][r] + ins[1]["list"][r]
        big = ins[0]["big"] + ins[1]["big"]
        e["reduce_scatter_tensor"] = big.chunk(WORLD)[r]
        e["reduce_scatter_tensor/AVG"] = (big / 2).chunk(WORLD)[r]
        e["all_to_all"] = [ins[j]["list"][r] for j in range(WORLD)]
        pieces = [list(ins[j]["a2a_in"].split(ins[j]["splits_in"])) for j in range(WORLD)]
        e["all_to_all_single"] = torch.cat([pieces[j][r] for j in range(WORLD)])
        e["all_to_all_single/even"] = torch.cat([ins[j]["big"].chunk(WORLD)[r] for j in range(WORLD)])
        e["gather"] = [x[0], x[1]] if r == 0 else None
        e["scatter"] = ins[1]["list"][r]
        e["send_recv"] = x[0] * 2 if r == 0 else x[0]
        e["coalesced/all_reduce"] = [x[0] + x[1], (x[0][0] + x[1][0]) * 3]
        e["coalesced/all_gather_into_tensor"] = [torch.cat(x), torch.cat([x[0][1], x[1][1]])]
        flat = big[:2].reshape(-1)
        e["coalesced/reduce_scatter_tensor"] = [big.chunk(WORLD)[r], flat.chunk(WORLD)[r]]
        ref[r] = e
    return ref


def _close(got, want, name):
    if want is None:
        assert got is None, name
        return
    if isinstance(want, list):
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            _close(g, w, name)
        return
    tol = dict(rtol=1e-6, atol=1e-6) if "AVG" in name else dict(rtol=0, atol=0)
    torch.testing.assert_close(got, want, **tol, msg=lambda m: f"{name}: {m}")


@pytest.mark.timeout(240)
def test_collectives_sync_async_subgroups(tmp_path):
    results, _ = launch("collectives", tmp_path)
    ref = _reference()
    ins = [worker.inputs(r) for r in range(WORLD)]
    for r, res in enumerate(results):
        for mode in ("sync", "async"):
            for name, want in ref[r].items():
                _close(res[f"{mode}/{name}"], want, f"rank {r} {mode} {name}")
        assert res["error"] == "ValueError"  # a wrong output size, refused before any data moves
        _close(res["group/all"], ins[0]["x"] + ins[1]["x"], "new_group([0, 1])")
        if r == 0:
            _close(res["group/solo"], ins[0]["x"], "new_group([0])")
        else:
            assert "group/solo" not in res
        _close(res["mesh/dp"], ins[0]["x"] + ins[1]["x"], "mesh['dp']")
        _close(res["mesh/tp"], ins[r]["x"], "mesh['tp']")
        assert res["mesh/dp_size"] == 2
        _close(res["defer/all_reduce"], (ins[0]["x"] * 2 + 1) + (ins[1]["x"] * 2 + 1) + 1, "DeferAndFuse all_reduce")
        assert res["defer/reasons"][0] == ("collective", "all_reduce"), res["defer/reasons"]


# ------------------------------------------------------------------ unit: registration


def test_registered_for_tpu():
    import torchtpu.distributed as td

    td.register()
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
    assert dist.Backend.backend_capability["tpu_dist"] == ["tpu"]
    assert dist.get_default_backend_for_device("tpu") == "tpu_dist"
    assert td._default_backend(None, None) in (None, td.DEFAULT)
    assert td._default_backend(None, torch.device("tpu", 0)) == td.DEFAULT
    assert td._default_backend("gloo", None) == "gloo"
    assert getattr(dist.init_process_group, "_torchtpu", False)
    import torch.distributed.device_mesh as dm

    assert getattr(dm.init_process_group, "_torchtpu", False)


def test_entry_point_declared():
    from importlib.metadata import entry_points

    names = {e.name: e.value for e in entry_points(group="torch.distributed.backends")}
    assert names.get("tpu_dist") == "torchtpu.device:_distributed_entry_point"


# ------------------------------------------------------------------ DDP


@pytest.mark.timeout(180)
def test_ddp_bucketed_matches_single_process_cpu(tmp_path):
    """DDP on 2 ranks (half the batch each, ~1 KB buckets: 3 of them) vs one CPU process
    training on the full batch: the same parameters after 3 SGD steps."""
    results, _ = launch("ddp", tmp_path)
    model = worker.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    worker.train(model, worker.mlp_data(), opt, "cpu")
    for r, res in enumerate(results):
        assert res["buckets"] >= 3, res["buckets"]
        assert res["collectives"] >= 3 * 3  # every step all-reduces every bucket on tpu_dist
        for k, v in model.state_dict().items():
            torch.testing.assert_close(res["params"][k], v, rtol=1e-4, atol=1e-5, msg=lambda m: f"rank {r} {k}: {m}")


# ------------------------------------------------------------------ mistakes: clear errors, no hangs


@pytest.mark.timeout(120)
def test_mismatched_collectives_are_named(tmp_path):
    results, _ = launch("mismatch", tmp_path)
    want = {
        "shape": (1, "all_reduce", ["all_reduce(SUM; float32[4])", "all_reduce(SUM; float32[5])"]),
        "op": (2, None, ["all_reduce(SUM; float32[4])", "broadcast(root 0; float32[4])"]),
        "dtype": (
            3,
            "all_gather_into_tensor",
            ["all_gather_into_tensor(float32[4])", "all_gather_into_tensor(int32[4])"],
        ),
    }
    for r, res in enumerate(results):
        for case, (seq, op, calls) in want.items():
            e = res[case]
            assert e is not None, f"rank {r}: {case} mismatch not detected"
            assert e["seq"] == seq and e["rank"] == r
            assert e["op"] == (op or calls[r].split("(")[0])
            assert e["mismatched"] == {1 - r: calls[1 - r]}
            assert f"collective #{seq}" in e["message"] and calls[0] in e["message"] and calls[1] in e["message"]
            assert e["s"] < 5  # detected at once, not at a timeout
        torch.testing.assert_close(res["after"], torch.full((2,), 2.0))


@pytest.mark.timeout(120)
def test_hung_and_dead_rank_raise_within_timeout(tmp_path):
    results, _ = launch("dead_rank", tmp_path)
    res = results[0]
    assert res is not None
    timeout = res["timeout"]
    hung = res["hung"]
    assert hung is not None and hung["type"] == "CollectiveError"
    assert hung["op"] == "all_reduce" and hung["seq"] == 2 and "collective #2" in hung["message"]
    assert timeout * 0.8 < hung["s"] < timeout + 5
    dead = res["dead_wait"]
    assert dead is not None and dead["type"] == "CollectiveError" and dead["is_distbackenderror"]
    assert dead["s"] < timeout + 5
    assert res["dead_future"] is not None and "CollectiveError" in res["dead_future"]["message"]


# ------------------------------------------------------------------ DTensor tensor parallelism


@pytest.mark.timeout(180)
def test_dtensor_tensor_parallel_matches_cpu(tmp_path):
    """parallelize_module (ColwiseParallel up, RowwiseParallel down) on init_device_mesh("tpu",
    (2,)): outputs and full parameters after 2 SGD steps equal one CPU process's."""
    results, _ = launch("tensor_parallel", tmp_path)
    model = worker.TwoLayer()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    outs = []
    for x, y in worker.tp_data():
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        outs.append(out.detach())
    for r, res in enumerate(results):
        assert res["local_shapes"]["up.weight"] == [16, 16] and res["local_shapes"]["down.weight"] == [
            16,
            16,
        ]  # sharded
        for got, want in zip(res["outs"], outs):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        for k, v in model.state_dict().items():
            torch.testing.assert_close(res["params"][k], v, rtol=1e-4, atol=1e-5, msg=lambda m: f"rank {r} {k}: {m}")


# ------------------------------------------------------------------ FSDP2


@pytest.mark.timeout(240)
def test_fsdp2_llama_matches_cpu(tmp_path):
    """fully_shard on each decoder layer and the root of a 2-layer, hidden-64 LlamaForCausalLM,
    2 ranks (half the batch each) vs one CPU process on the full batch: the same parameters
    after 2 SGD steps (rtol 1e-4, atol 1e-5; measured within 4e-9). FSDP2 frees and restores its
    unsharded parameters with `untyped_storage().resize_` (test_device_storage.py)."""
    results, _ = launch("fsdp2", tmp_path, timeout=220)
    model = worker.llama()
    losses = worker.train_llama(model, worker.llama_data(), "cpu")
    # Each rank's loss is over half the batch (the same token count): their mean is the full one.
    mean = [sum(res["losses"][i] for res in results) / len(results) for i in range(len(losses))]
    torch.testing.assert_close(torch.tensor(mean), torch.tensor(losses), rtol=1e-5, atol=1e-6)
    for r, res in enumerate(results):
        assert len(res["unsharded_nbytes"]) == 9 * 2 + 3 and not any(res["unsharded_nbytes"]), res["unsharded_nbytes"]
        for k, v in model.state_dict().items():
            torch.testing.assert_close(res["params"][k], v, rtol=1e-4, atol=1e-5, msg=lambda m: f"rank {r} {k}: {m}")


@pytest.mark.slow  # test_fsdp2_llama_matches_cpu runs the same model in make test
@pytest.mark.timeout(240)
@pytest.mark.skipif(torch.tpu.device_count() < 4, reason="needs the CPU plugin's 4 devices")
def test_fsdp2_llama_on_four_thread_ranks_matches_cpu():
    """The same fully_shard Llama on `torchtpu.distributed.spawn`: 4 ranks that are threads of
    this process, rank r on tpu:r, each a quarter of the batch, their collectives the in-process
    transport's programs; vs one CPU process on the full batch (rtol 1e-4, atol 1e-5; measured
    within 4e-9). The model is built once here and copied into each rank: ranks building it
    themselves would draw their initial weights from one process-wide generator at once."""
    import copy

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import torchtpu.distributed as td

    n = 4
    init = worker.llama()  # also imports transformers' Llama here: its lazy imports are not thread-safe

    def run(rank):
        mesh = init_device_mesh("tpu", (n,))
        transport = dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu")).transport.name
        model = copy.deepcopy(init).to("tpu")
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        losses = worker.train_llama(model, worker.llama_data(), "tpu", shard=(rank, n))
        return transport, losses, {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}

    results = td.spawn(run, n)
    model = worker.llama()
    losses = worker.train_llama(model, worker.llama_data(), "cpu")
    mean = [sum(res[1][i] for res in results) / n for i in range(len(losses))]
    torch.testing.assert_close(torch.tensor(mean), torch.tensor(losses), rtol=1e-5, atol=1e-6)
    for r, (transport, _, params) in enumerate(results):
        assert transport == "in-process"
        for k, v in model.state_dict().items():
            torch.testing.assert_close(params[k], v, rtol=1e-4, atol=1e-5, msg=lambda m: f"rank {r} {k}: {m}")
