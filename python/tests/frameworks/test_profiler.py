"""torch.profiler sees the tpu device (issue 49, csrc/profiler.cpp over `runtime/src/trace.rs`):
with `ProfilerActivity.PrivateUse1` each program run is a Kineto kernel event with its device
time, linked to the op that launched it, beside copies, launches and compiles; the exported
Chrome trace is read back as Perfetto would read it. Values computed under the profiler are
compared with CPU eager (tolerance 1e-5: a matmul's float32 rounding)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import torchtpu
import torchtpu.eager

TPU = "tpu"
DEVICE = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _trace(prof, tmp_path, name="trace.json"):
    path = tmp_path / name
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def _by_cat(events, cat):
    return [e for e in events if e.get("cat") == cat]


def _launcher(events, kernel):
    """The host op a device event is linked to: the cpu_op whose External id it carries."""
    ops = {e["args"]["External id"]: e for e in _by_cat(events, "cpu_op") if "External id" in e.get("args", {})}
    return ops.get(kernel["args"].get("External id"))


def _step(x, w):
    loss = (x @ w).relu().sum()
    loss.backward()
    return loss


def test_a_training_step_shows_its_programs_with_device_time_under_their_ops(tmp_path):
    torch.manual_seed(0)
    x_cpu, w_cpu = torch.randn(128, 128), torch.randn(128, 128)
    x, w = x_cpu.to(TPU), w_cpu.to(TPU).requires_grad_()
    with torchtpu.eager.mode("strict"):
        _step(x, w)  # compiles outside the profile
        w.grad = None
        with profile(activities=DEVICE) as prof:
            with record_function("train_step"):
                loss = _step(x, w).item()
    ref_w = w_cpu.clone().requires_grad_()
    ref = _step(x_cpu, ref_w)
    assert loss == pytest.approx(ref.item(), rel=1e-5)
    torch.testing.assert_close(w.grad.cpu(), ref_w.grad, rtol=1e-5, atol=1e-4)

    events = _trace(prof, tmp_path)
    kernels = _by_cat(events, "kernel")
    names = {k["name"] for k in kernels}
    assert {"eager_aten_mm_default", "eager_aten_relu_default", "eager_aten_threshold_backward_default"} <= names, names
    tpu_rows = {e["pid"] for e in events if e.get("name") == "process_name" and e["args"]["name"] == "tpu"}
    assert len(tpu_rows) == 1 and all(k["pid"] in tpu_rows for k in kernels)
    assert all(k["dur"] > 0 and k["args"]["device"] == 0 for k in kernels)
    # Each program is linked to the ATen op that launched it, and lies inside the step's range.
    step = next(e for e in _by_cat(events, "user_annotation") if e["name"] == "train_step")
    for k in kernels:
        op = _launcher(events, k)
        assert op is not None and op["name"].startswith("aten::"), (k["name"], op)
        assert step["ts"] <= k["ts"] <= step["ts"] + step["dur"] + 1e3, k  # ends by its last read
    mm_ops = [_launcher(events, k)["name"] for k in kernels if k["name"] == "eager_aten_mm_default"]
    assert mm_ops == ["aten::mm"] * 2, mm_ops  # forward, and the weight gradient's
    # The host's side: each launch on its op's thread; the read of the loss is a copy.
    launches = [e for e in _by_cat(events, "privateuse1_runtime") if e["name"].startswith("launch ")]
    assert len(launches) == len(kernels)
    assert any(e["name"] == "Memcpy DtoH" for e in _by_cat(events, "gpu_memcpy"))

    # key_averages: device time per op, as CUDA's.
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["aten::mm"].device_time_total > 0
    assert averages["aten::mm"].device_time_total == pytest.approx(
        averages["eager_aten_mm_default"].device_time_total, rel=1e-6
    )
    assert averages["launch eager_aten_mm_default"].device_time_total == 0  # host time only
    assert "Self TPU time total" in prof.key_averages().table(sort_by="self_device_time_total")


def test_device_time_is_the_programs_time():
    """A 1024^3 matmul takes far longer on the device than a 16-element add: a device time that
    were launch time (or constant) would not say so."""
    a = torch.randn(1024, 1024, device=TPU)
    small = torch.randn(16, device=TPU)
    with torchtpu.eager.mode("strict"):
        (a @ a).cpu(), (small + 1).cpu()
        with profile(activities=DEVICE) as prof:
            (a @ a).cpu()
            (small + 1).cpu()
    averages = {a.key: a for a in prof.key_averages()}
    mm, add = averages["eager_aten_mm_default"], averages["eager_aten_add_Tensor"]
    assert mm.device_time_total > 10 * add.device_time_total, (mm.device_time_total, add.device_time_total)


def test_a_compiled_graph_and_its_compile_are_events(tmp_path):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    compiled = torch.compile(model, backend="torchtpu")
    x = torch.randn(8, 32)
    with profile(activities=DEVICE) as prof:
        with record_function("first_call"):
            out = compiled(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    events = _trace(prof, tmp_path)
    graphs = [k for k in _by_cat(events, "kernel") if k["name"].startswith("forward_")]
    assert len(graphs) == 1, [k["name"] for k in _by_cat(events, "kernel")]
    assert _launcher(events, graphs[0]) is not None
    compiles = [e for e in _by_cat(events, "privateuse1_runtime") if e["name"] in ("XLA compile", "XLA load")]
    assert compiles, "the first call compiled (or loaded) its program inside the profile"


def test_a_defer_and_fuse_region_is_one_event_under_the_op_that_cut_it(tmp_path):
    x_cpu = torch.randn(64, 64)
    x = x_cpu.to(TPU)
    with torchtpu.eager.mode("defer_and_fuse"):
        ((x * 2 + 1).relu().sum()).item()
        with profile(activities=DEVICE) as prof:
            got = ((x * 2 + 1).relu().sum()).item()
    assert got == pytest.approx(((x_cpu * 2 + 1).relu().sum()).item(), rel=1e-5)
    events = _trace(prof, tmp_path)
    regions = [k for k in _by_cat(events, "kernel") if k["name"] == "eager_region"]
    assert len(regions) == 1, [k["name"] for k in _by_cat(events, "kernel")]
    assert _launcher(events, regions[0])["name"] in ("aten::item", "aten::_local_scalar_dense")


def test_a_profile_that_does_not_ask_for_the_device_records_none_of_it(tmp_path):
    x = torch.randn(16, device=TPU)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x + 1).cpu()
    events = _trace(prof, tmp_path)
    # No device time; host runtime events (launches) may be there, as CUDA's are in a CPU profile.
    assert not _by_cat(events, "kernel") and not _by_cat(events, "gpu_memcpy")
    assert any(e["name"] == "aten::add" for e in _by_cat(events, "cpu_op"))
    # And nothing is left recording: a later device profile holds only its own work.
    with profile(activities=DEVICE) as later:
        (x * 3).cpu()
    names = [k["name"] for k in _by_cat(_trace(later, tmp_path, "later.json"), "kernel")]
    assert names == ["eager_aten_mul_Tensor"], names
