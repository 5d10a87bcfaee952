"""The tpu device's memory limit and out-of-memory errors (issue 49, `device/_memory.py`,
`python/src/memory.rs`): `TORCHTPU_DEVICE_MEMORY` emulates an accelerator's memory,
`torch.tpu.set_per_process_memory_fraction` limits this process as CUDA's does, and passing the
limit raises `torch.OutOfMemoryError` naming what asked, what is in use and the largest live
buffers with the user's line that made each. Values after an error are compared with CPU
eager (exact: fills and copies)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torchtpu
import torchtpu.eager

TPU = "tpu"
MiB = 1 << 20


def test_emulated_device_memory_and_an_error_that_names_the_culprit(tmp_path):
    script = tmp_path / "fits.py"
    script.write_text(
        "import torch, torchtpu\n"
        "free, total = torch.tpu.mem_get_info()\n"
        "assert (free, total) == (64 << 20, 64 << 20), (free, total)\n"
        "weights = torch.empty(4 << 20, device='tpu').fill_(1)  # 16 MiB\n"
        "assert torch.tpu.mem_get_info() == (48 << 20, 64 << 20), torch.tpu.mem_get_info()\n"
        "try:\n"
        "    torch.empty(13 << 20, device='tpu').fill_(2)  # 52 MiB\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
        "del weights\n"
        "ok = torch.empty(13 << 20, device='tpu').fill_(2)  # fits now\n"
        "assert torch.equal(ok.cpu(), torch.full((13 << 20,), 2.0))\n"
    )
    env = dict(os.environ, TORCHTPU_DEVICE_MEMORY="64MiB")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    msg = out.stdout
    assert "tpu:0 out of memory: tried to allocate 52.00 MiB" in msg, msg
    assert f"at {script}:7" in msg, msg  # the user's line that asked
    assert "16.00 MiB in use of the limit 64.00 MiB" in msg, msg
    assert "The limit is TORCHTPU_DEVICE_MEMORY=64MiB." in msg, msg
    assert f"16.00 MiB: f32[4194304] made at {script}:4" in msg, msg  # the culprit and its line


def test_a_bad_emulated_size_is_a_clear_error():
    env = dict(os.environ, TORCHTPU_DEVICE_MEMORY="sixteen gigs")
    code = "import torch, torchtpu\ntorch.ones(4, device='tpu')\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "TORCHTPU_DEVICE_MEMORY='sixteen gigs' is not a size" in out.stderr, out.stderr[
        -2000:
    ]


@pytest.fixture
def limited():
    """A limit 24 MiB above what is live now, through CUDA's fraction API."""
    torch.tpu.synchronize()
    total = torch.tpu.mem_get_info()[1]
    room = torch.tpu.memory_allocated() + 24 * MiB
    torch.tpu.set_per_process_memory_fraction(room / total)
    try:
        yield room
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_the_fraction_api_limits_the_process_in_every_mode(limited, mode):
    assert torch.tpu.get_per_process_memory_fraction() < 1.0
    with torchtpu.eager.mode(mode):
        a = torch.ones(4 * MiB // 4, device=TPU)  # 4 MiB
        b = torch.ones(16 * MiB // 4, device=TPU)  # 16 MiB: 20 of 24 used
        torch.tpu.synchronize()  # DeferAndFuse: a and b are made (one region would ask for all three)
        with pytest.raises(
            torch.OutOfMemoryError,
            match=r"(?s)tried to allocate 8\.00 MiB.*set_per_process_memory_fraction.*16\.00 MiB: f32\[4194304\] made at .*test_device_memory\.py",
        ):
            c = torch.ones(8 * MiB // 4, device=TPU)
            c.sum().item()  # DeferAndFuse: the region runs (and fails) here
        del b
        c = torch.ones(8 * MiB // 4, device=TPU)
        assert c.sum().item() == 2 * MiB and a.sum().item() == MiB


def test_fraction_is_checked_like_cuda():
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        torch.tpu.set_per_process_memory_fraction(1.5)


def _made_here(n):
    return torch.ones(n, device=TPU)


def test_memory_history_and_a_snapshot_memory_viz_reads(tmp_path):
    import pickle

    from torch.cuda import _memory_viz

    torch.tpu.memory._record_memory_history(max_entries=10_000)
    try:
        kept = _made_here(1 << 20)  # 4 MiB, live at the snapshot
        gone = torch.randn(64, 64).to(TPU)  # 16 KiB, freed before it
        del gone
        snap = torch.tpu.memory._snapshot()
        torch.tpu.memory._dump_snapshot(str(tmp_path / "snap.pickle"))
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)
    # The live 4 MiB buffer is a segment whose block's stack names the function that made it.
    blocks = [b for seg in snap["segments"] for b in seg["blocks"] if b["size"] == 4 * MiB]
    assert any(any(f["name"] == "_made_here" for f in b["frames"]) for b in blocks), blocks
    events = snap["device_traces"][0]
    sizes = {(e["action"], e["size"]) for e in events}
    assert ("alloc", 4 * MiB) in sizes and ("alloc", 16 * 1024) in sizes and ("free_completed", 16 * 1024) in sizes
    # Exact, device by device (another test in this process may hold buffers on tpu:1).
    on_0 = sum(seg["allocated_size"] for seg in snap["segments"] if seg["device"] == 0)
    assert on_0 == torch.tpu.memory_allocated(0)
    # PyTorch's own reader of CUDA snapshots (what pytorch.org/memory_viz shows) takes it.
    assert "<html>" in _memory_viz.trace_plot(snap).lower() or "html" in _memory_viz.trace_plot(snap).lower()
    assert "total_allocated" in _memory_viz.segsum(snap)
    assert pickle.loads((tmp_path / "snap.pickle").read_bytes())["segments"]
    # Off: nothing more is recorded.
    _made_here(8)
    assert not any(torch.tpu.memory._snapshot()["device_traces"])
    torch.testing.assert_close(kept.cpu(), torch.ones(1 << 20), rtol=0, atol=0)
