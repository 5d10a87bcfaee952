"""Many tpu devices in one process (the CPU plugin's 4): tensors on tpu:N, the current device
per thread, copies between devices, the same-device check, per-device memory, autograd on
tpu:1, streams and events as FSDP2 drives them, LOCAL_RANK. Values are compared with CPU eager
on the same inputs (rtol 1e-5, atol 1e-6 for float32)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

TOL = dict(rtol=1e-5, atol=1e-6)


def test_device_count_is_the_plugins_addressable_devices():
    assert torch.tpu.device_count() == 4


@pytest.mark.parametrize("index", [0, 1, 3])
def test_ops_run_on_the_device_of_their_inputs(index):
    torch.manual_seed(0)
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    x, y = a.to(f"tpu:{index}"), b.to(f"tpu:{index}")
    assert x.device == torch.device("tpu", index)
    out = torch.nn.functional.gelu(x @ y).sum(1) * 0.5
    assert out.device == torch.device("tpu", index)
    torch.testing.assert_close(out.cpu(), torch.nn.functional.gelu(a @ b).sum(1) * 0.5, **TOL)
    # A view, an in-place write through it, a factory like the input.
    x[1].mul_(3)
    a[1].mul_(3)
    torch.testing.assert_close(x.cpu(), a, **TOL)
    assert torch.zeros_like(x).device == x.device and torch.empty(2, device=x.device).device == x.device


def test_copies_between_devices_keep_values_and_dtype_conversion():
    a = torch.arange(12.0).reshape(3, 4)
    x = a.to("tpu:1")
    y = x.to("tpu:2")
    assert y.device == torch.device("tpu", 2) and torch.equal(y.cpu(), a)
    h = x.t().to("tpu:3", dtype=torch.float64)  # a view, moved and cast
    assert h.device == torch.device("tpu", 3) and h.dtype == torch.float64
    torch.testing.assert_close(h.cpu(), a.t().double())
    z = torch.empty(3, 4, device="tpu:0")
    z.copy_(x)  # copy_ across devices
    assert torch.equal(z.cpu(), a) and z.device == torch.device("tpu", 0)


def test_ops_across_devices_raise_pytorchs_error():
    x, y = torch.ones(3, device="tpu:0"), torch.ones(3, device="tpu:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + y
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.add(x, x, out=torch.empty(3, device="tpu:2"))
    with pytest.raises(RuntimeError, match="invalid device tpu:9"):
        torch.empty(2, device="tpu:9")
    with pytest.raises(RuntimeError, match="invalid device tpu:9"):
        torch.ones(2).to("tpu:9")
    with pytest.raises(RuntimeError, match="invalid device"):
        torch.tpu.set_device(4)


def test_current_device_is_per_thread_and_factories_use_it():
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(2):
        assert torch.tpu.current_device() == 2
        assert torch.ones(2, device="tpu").device == torch.device("tpu", 2)
        assert torch.randn(2, device="tpu").device == torch.device("tpu", 2)
        seen = []
        t = threading.Thread(
            target=lambda: seen.append((torch.tpu.current_device(), torch.zeros(1, device="tpu").device))
        )
        t.start()
        t.join()
        assert seen == [(0, torch.device("tpu", 0))]  # another thread keeps its own
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device("tpu:1")
    try:
        assert torch.tensor([1.0, 2.0]).to("tpu").device == torch.device("tpu", 1)
        assert torch.accelerator.current_device_index() == 1
    finally:
        torch.tpu.set_device(0)


def test_memory_is_counted_per_device():
    for i in range(4):
        torch.tpu.reset_peak_memory_stats(i)
    before = [torch.tpu.memory_allocated(i) for i in range(4)]
    x = torch.ones(256, device="tpu:2")  # 1 KiB
    assert torch.tpu.memory_allocated(2) - before[2] == 1024
    assert [torch.tpu.memory_allocated(i) for i in (0, 1, 3)] == [before[0], before[1], before[3]]
    assert torch.tpu.max_memory_allocated(2) >= before[2] + 1024
    del x
    assert torch.tpu.memory_allocated(2) == before[2]
    torch.tpu.reset_peak_memory_stats(2)
    assert torch.tpu.max_memory_allocated(2) == before[2]
    with torch.tpu.device(2):
        assert torch.tpu.memory_allocated() == before[2]


def test_training_step_on_tpu1_matches_cpu_with_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref.load_state_dict(model.state_dict())
    model.to("tpu:1")
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    loss = torch.nn.functional.cross_entropy(model(x.to("tpu:1")), y.to("tpu:1"))
    loss.backward()
    ref_loss = torch.nn.functional.cross_entropy(ref(x), y)
    ref_loss.backward()
    torch.testing.assert_close(loss.cpu(), ref_loss, **TOL)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad.device == torch.device("tpu", 1)
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL)
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    opt.step()
    ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **TOL)


def test_defer_and_fuse_runs_each_region_on_its_device():
    import torchtpu

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with torchtpu.eager.mode("defer_and_fuse"):
        x, y = a.to("tpu:1"), b.to("tpu:2")
        u = (x * 2).relu()
        v = (y + 1).sin()  # another device: the open region is cut first
        w = u.to("tpu:2") + v
        out = w.cpu()
    torch.testing.assert_close(out, (a * 2).relu() + (b + 1).sin(), **TOL)
    assert "device_change" in {r["reason"] for r in torchtpu.eager.explain().regions}


def test_compiled_graph_on_tpu2_tensors_runs_there():
    f = torch.compile(lambda a, b: (a @ b).softmax(-1) + 1.0, backend="torchtpu")
    a, b = torch.randn(3, 5), torch.randn(5, 2)
    out = f(a.to("tpu:2"), b.to("tpu:2"))
    assert out.device == torch.device("tpu", 2)
    torch.testing.assert_close(out.cpu(), (a @ b).softmax(-1) + 1.0, **TOL)


def test_streams_and_events_the_way_fsdp2_uses_them():
    handle = torch.tpu  # FSDP2's `_get_device_handle("tpu")`
    x = torch.randn(64, device="tpu:0")
    copy_in = handle.Stream(priority=-1)
    ag = handle.Stream(priority=-1)
    rs = handle.Stream()
    current = handle.current_stream()
    assert isinstance(copy_in, torch.Stream) and copy_in.device == torch.device("tpu", 0)
    assert len({copy_in.stream_id, ag.stream_id, rs.stream_id, current.stream_id}) == 4
    assert current == handle.default_stream()
    ag.wait_stream(current)
    with handle.stream(copy_in):
        assert handle.current_stream() == copy_in
        y = x * 2
        event = copy_in.record_event()
    assert handle.current_stream() == current
    ag.wait_event(event)
    with handle.stream(ag):
        z = y + 1
        y.record_stream(ag)  # FSDP2's `_no_dispatch_record_stream`
        done = handle.Event()
        done.record()
    current.wait_event(done)
    done.wait()
    assert done.query() and ag.query() and event.query()
    done.synchronize()
    ag.synchronize()
    torch.testing.assert_close(z.cpu(), x.cpu() * 2 + 1)
    start, end = handle.Event(enable_timing=True), handle.Event(enable_timing=True)
    start.record()
    (z @ z).item()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    with pytest.raises(ValueError, match="enable_timing"):  # PyTorch checks it before the guard
        event.elapsed_time(done)
    # A stream of another device makes that device current inside the block.
    with handle.stream(handle.Stream(device="tpu:3")):
        assert handle.current_device() == 3 and torch.ones(1, device="tpu").device.index == 3
    assert handle.current_device() == 0
    torch.accelerator.synchronize()


def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


def test_local_rank_picks_the_default_device_and_the_count_follows_the_env():
    code = (
        "import torch; print(torch.tpu.current_device(), torch.tpu.device_count(), torch.ones(1, device='tpu').device)"
    )
    r = _fresh(code, LOCAL_RANK="6")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "4", "tpu:2"]  # 6 mod 4
    r = _fresh(code, LOCAL_RANK="1", TORCHTPU_CPU_DEVICES="2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "2", "tpu:1"]


def test_the_native_guard_replaces_pytorchs_python_one():
    from torchtpu.device import module

    # PyTorch's Python guard registration was refused: the native one answers.
    assert torch._C._acc.register_python_privateuseone_device_guard(module.Guard()) is False
    # C++ guards (autograd's device threads, DeviceGuard) see every device.
    r = _fresh(
        "import torch; x = torch.ones(2, device='tpu:3', requires_grad=True); (x * 2).sum().backward(); "
        "print(torch.accelerator.device_count(), x.grad.device)",
        TORCHTPU_DEVICE="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["4", "tpu:3"]
