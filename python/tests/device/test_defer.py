"""DeferAndFuse, the eager device's third mode (docs/eager.md, "DeferAndFuse"): ops recorded,
cut into regions for stated reasons, each region compiled once through the whole pipeline and
run; compared with strict mode and CPU eager on the same inputs.

Tolerances: elementwise chains and reductions match CPU eager to 1e-6 (f32, the same
arithmetic); training losses to 1e-5 relative and parameters to 1e-5 (MLP) or 5e-5 (Llama)
absolute after 3 AdamW steps (XLA fuses and reorders f32 reductions), as test_device_models.py
allows strict mode; DeferAndFuse against strict mode likewise.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from compiled import fresh_torchtpu  # noqa: F401 - the fixture

import torchtpu
import torchtpu.eager as E
from torchtpu.device import _defer, _region

pytestmark = pytest.mark.usefixtures("fresh_torchtpu")
TPU = "tpu"


@pytest.fixture(autouse=True)
def _clean_regions():
    # Whether a region is a hit must not depend on which tests ran before in this process
    # (under pytest-xdist another file's Llama may have compiled the same mask region).
    _region.clear()
    E.reset_explain()
    yield
    E.mode("strict")
    E.reset_explain()


def _regions():
    return E.explain().regions


# ---------------------------------------------------------------- recording and cuts


def test_ops_are_deferred_until_a_host_read_and_match_cpu():
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    xt, wt = x.to(TPU), w.to(TPU)
    with E.mode("defer_and_fuse"):
        before = torchtpu.stats()["executions"]
        y = (xt @ wt).relu() * 2 + 1
        s = y.sum()
        # Nothing ran yet: the ops are recorded.
        assert torchtpu.stats()["executions"] == before
        assert _defer.state.region is not None and len(_defer.state.region.records) == 5
        got = s.item()  # the cut
        assert torchtpu.stats()["executions"] == before + 1  # one program for the region
    ref = (x @ w).relu() * 2 + 1
    assert got == pytest.approx(ref.sum().item(), rel=1e-6)
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-6, atol=1e-6)
    (rec,) = _regions()
    assert rec["reason"] == "host_read" and "item()" in rec["detail"]
    assert rec["where"].endswith(f"test_defer.py:{_line_of('got = s.item()')}")
    assert rec["line"] == "got = s.item()  # the cut"
    assert rec["ops"] == 5 and not rec["hit"]
    # Only y and s are still referenced: the matmul, relu and mul results are intermediates.
    assert rec["outputs"] == 2


def _line_of(text: str) -> int:
    import inspect

    src = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i + 1 for i, line in enumerate(src) if text in line and "_line_of" not in line)


def test_same_structure_hits_the_region_cache_and_a_change_names_the_difference():
    a, b = torch.randn(8, 8).to(TPU), torch.randn(8, 8).to(TPU)
    with E.mode("defer_and_fuse"):
        for _ in range(3):
            ((a * b).exp() + a).sum().item()
        c = torch.randn(4, 8).to(TPU)
        ((c * c).exp() + c).sum().item()  # another input shape
        keep = (a * b).exp()
        (keep + a).sum().item()  # the same ops, another value still referenced
    recs = _regions()
    assert [r["hit"] for r in recs] == [False, True, True, False, False]
    assert len({r["key"] for r in recs[:3]}) == 1
    assert "differs first at op 0" in recs[3]["differs"] and "f32[4, 8]" in recs[3]["differs"]
    assert "the values still referenced differ" in recs[4]["differs"]
    del keep


def test_a_hit_is_found_and_run_natively_and_clear_forgets_it(monkeypatch):
    """A cached region's cut runs in Rust (python/src/eager/cut.rs): key, lookup, run and
    write-back; none of `_region`'s Python runs for it. Its key id is the miss's, and the id
    `_region.key_id` gives the Python form of the key."""
    a, w = torch.randn(8, 8), torch.randn(8, 8)
    at, wt = a.to(TPU), w.to(TPU)

    def step():
        y = (at @ wt).tanh()
        wt.add_(y, alpha=0.1)  # an input updated in place: donated
        return y.sum().item()

    with E.mode("defer_and_fuse"):
        step()
        (key,) = _region._programs
        assert _region.key_id(key) == _regions()[0]["key"]

        def no_python(*args):
            raise AssertionError("a cached region went through _region's Python")

        monkeypatch.setattr(_region, "compile_region", no_python)
        monkeypatch.setattr(_region, "describe_miss", no_python)
        got = [step() for _ in range(3)]
        monkeypatch.undo()
        _region.clear()
        step()  # a miss again: the native programs were forgotten too
    recs = _regions()
    assert [r["hit"] for r in recs] == [False, True, True, True, False]
    assert len({r["key"] for r in recs}) == 1 and all(r["donated"] == 1 for r in recs)
    ref_w, want = w.clone(), []
    ref_w += (a @ ref_w).tanh() * 0.1  # the first step
    for _ in range(3):
        y = (a @ ref_w).tanh()
        ref_w += y * 0.1
        want.append(y.sum().item())
    assert got == pytest.approx(want, rel=1e-5)


def test_inplace_views_and_aliasing_match_cpu():
    base = torch.randn(6, 5)
    t = base.to(TPU)
    with E.mode("defer_and_fuse"):
        v = t[1:4]
        v.mul_(2.0)
        t[:, 0] += 1
        u = t.t().contiguous()
        t.add_(t)  # the same buffer twice
        out = u.cpu()
    ref = base.clone()
    ref[1:4].mul_(2.0)
    ref[:, 0] += 1
    ref_u = ref.t().contiguous()
    ref.add_(ref)
    torch.testing.assert_close(out, ref_u, rtol=0, atol=0)
    torch.testing.assert_close(t.cpu(), ref, rtol=0, atol=0)


def test_data_dependent_shape_is_a_cut_with_its_reason():
    x = torch.tensor([0.0, 2.0, -1.0, 3.0, 0.0])
    with E.mode("defer_and_fuse"):
        xt = x.to(TPU) * 2
        idx = torch.nonzero(xt > 0)
        got = idx.cpu()
    torch.testing.assert_close(got, torch.nonzero(x * 2 > 0))
    reasons = [r["reason"] for r in _regions()]
    assert reasons[0] == "data_dependent_shape" and "nonzero" in _regions()[0]["detail"]


def test_synchronize_backward_and_mode_change_cut():
    with E.mode("defer_and_fuse"):
        a = torch.randn(4, 4).to(TPU) + 1
        torch.tpu.synchronize()
        assert _regions()[-1]["reason"] == "synchronize"
        w = torch.randn(4, 4).to(TPU).requires_grad_()
        (w.sin() * a).sum().backward()
        assert _regions()[-1]["reason"] == "backward_end"
        assert _defer.state.region is None
        b = a * 3
    assert _regions()[-1]["reason"] == "mode_change"
    torch.testing.assert_close(b.cpu(), a.cpu() * 3)


def test_size_cap_cuts(monkeypatch):
    monkeypatch.setattr(_defer, "MAX_OPS", 10)
    x = torch.zeros(3).to(TPU)
    with E.mode("defer_and_fuse"):
        for _ in range(25):
            x = x + 1
        got = x.cpu()
    torch.testing.assert_close(got, torch.full((3,), 25.0))
    assert [r["reason"] for r in _regions()] == ["size_cap", "size_cap", "host_read"]
    assert [r["ops"] for r in _regions()] == [10, 10, 5]


@pytest.mark.allow_fallback
def test_cpu_fallback_is_a_cut_naming_the_op():
    x = torch.tensor([3.0, 1.0, 3.0, 2.0])
    with E.mode("defer_and_fuse"), E.fallback("cpu"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = x.to(TPU) + 1
        u = torch.unique(y)
        got = u.cpu()
    torch.testing.assert_close(got, torch.unique(x + 1))
    rec = _regions()[0]
    assert rec["reason"] == "cpu_fallback" and "unique" in rec["detail"]


def test_peak_device_memory_is_lower_than_strict():
    """Intermediates of a region never get device buffers: a chain of elementwise ops on 1M
    floats peaks at its input and result in DeferAndFuse, at several intermediates in strict."""
    x = torch.randn(1 << 20).to(TPU)

    def chain():
        y = x
        for _ in range(6):
            y = (y * 1.5).sin() + 1.0
        return y.sum().item()

    peaks, values = {}, {}
    for mode in ("strict", "defer_and_fuse"):
        with E.mode(mode):
            chain()
            torch.tpu.synchronize()
            base = torch.tpu.memory_allocated()
            torch.tpu.reset_peak_memory_stats()
            values[mode] = chain()
            peaks[mode] = torch.tpu.max_memory_allocated() - base
    assert values["defer_and_fuse"] == pytest.approx(values["strict"], rel=1e-5)
    assert peaks["strict"] >= 2 * (4 << 20), peaks
    # Only the last y (still referenced when `.item()` cuts) and its sum are outputs.
    assert peaks["defer_and_fuse"] <= (4 << 20) + 64, peaks


# ---------------------------------------------------------------- trace and cache-only


def test_trace_file_is_json_lines_and_a_chrome_trace(tmp_path, monkeypatch):
    path = tmp_path / "eager.jsonl"
    monkeypatch.setenv("TORCHTPU_EAGER_TRACE", str(path))
    a = torch.randn(4).to(TPU)
    with E.mode("defer_and_fuse"):
        for _ in range(2):
            (a * 2).sum().item()
    lines = [json.loads(s) for s in path.read_text().splitlines()]
    assert [r["hit"] for r in lines] == [False, True]
    for r in lines:
        for k in (
            "reason",
            "where",
            "line",
            "ops",
            "key",
            "compile_ms",
            "run_ms",
            "bytes_in",
            "bytes_out",
            "bytes_peak",
        ):
            assert k in r, k
    # In: a (4 floats) and the 2 (an int64 scalar input); out: the sum.
    assert lines[0]["bytes_in"] == 16 + 8 and lines[0]["bytes_out"] == 4
    chrome = (tmp_path / "eager.jsonl.chrome.json").read_text().rstrip().rstrip(",") + "]"
    events = json.loads(chrome)
    assert [e["name"].split()[0] for e in events] == ["compile", "region", "region"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)


def test_cache_only_refuses_a_compile_after_warm_up(monkeypatch):
    monkeypatch.setenv("TORCHTPU_EAGER_CACHE_ONLY", "1")
    monkeypatch.setattr(_defer, "_warm", False)
    monkeypatch.setattr(_defer, "_steps", 0)  # earlier tests' optimizer steps would count as warm-up
    a = torch.randn(4).to(TPU)
    with E.mode("defer_and_fuse"):
        (a * 2).sum().item()  # warm-up: compiles
        E.mark_warm()
        (a * 2).sum().item()  # a hit
        with pytest.raises(torchtpu.RecompileError, match="would be compiled after warm-up") as info:
            (a * 3).exp().sum().item()
        assert "differs first at op" in info.value.what
        # A value of the refused region: each read raises the same error, not a missing value.
        v = (a * 5).cos()
        for _ in range(2):
            with pytest.raises(torchtpu.RecompileError, match="would be compiled after warm-up"):
                v.cpu()
    monkeypatch.setattr(_defer, "_warm", False)


# ---------------------------------------------------------------- training


def _train(model, batch, loss_of, mode: str | None, steps: int = 3, lr: float = 1e-3):
    """`steps` AdamW steps; per step its loss, grads and the regions it ran, and the final
    parameters. mode None: on the CPU."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    out = {"loss": [], "grads": [], "regions": [], "compiles": []}
    ctx = E.mode(mode) if mode else E.mode()
    with ctx:
        for _ in range(steps):
            n, c = len(_regions()), torchtpu.stats()["eager_programs_compiled"]
            loss = loss_of(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out["loss"].append(loss.item())
            out["grads"].append([p.grad.detach().cpu() for p in model.parameters()])
            out["regions"].append([(r["reason"], r["detail"], r["key"], r["hit"]) for r in _regions()[n:]])
            out["compiles"].append(torchtpu.stats()["eager_programs_compiled"] - c)
    out["params"] = [p.detach().cpu() for p in model.parameters()]
    return out


def _compare(got, ref, loss_tol, param_tol):
    for step, (a, b) in enumerate(zip(got["loss"], ref["loss"])):
        assert a == pytest.approx(b, **loss_tol), f"loss, step {step}"
    for step, (ga, gb) in enumerate(zip(got["grads"], ref["grads"])):
        for k, (x, y) in enumerate(zip(ga, gb)):
            torch.testing.assert_close(
                x, y, rtol=1e-4, atol=1e-5, msg=lambda m, k=k, s=step: f"grad {k}, step {s}: {m}"
            )
    for k, (x, y) in enumerate(zip(got["params"], ref["params"])):
        torch.testing.assert_close(x, y, **param_tol, msg=lambda m, k=k: f"param {k}: {m}")


STEP = [("backward_end", None), ("optimizer_step", "after AdamW.step")]


def _check_regions(got, expected=STEP):
    # Each step: the forward and backward in one region, cut at the backward's end; the
    # optimizer's update in one more, cut after AdamW.step. `loss.item()` and the grads'
    # `.cpu()` read values those regions already computed: no cut of their own.
    for step in got["regions"]:
        assert [(r[0], r[1]) for r in step] == expected, step
    # Step 1 compiles all (the optimizer's first step also makes its state); step 2
    # compiles the optimizer's steady-state update; step 3 compiles nothing, and runs the
    # regions of step 2, key for key.
    hits = [[r[3] for r in step] for step in got["regions"]]
    assert hits == [[False] * len(expected), [True] * (len(expected) - 1) + [False], [True] * len(expected)], hits
    assert [r[2] for r in got["regions"][1]] == [r[2] for r in got["regions"][2]]
    assert got["compiles"][2] == 0, got["compiles"]


def _train_against_strict_and_cpu(ref, batch, tpu_batch, loss_of, param_tol):
    """Copies of `ref` trained on the CPU, in strict mode and in DeferAndFuse; DeferAndFuse's
    run compared with both. Returns it."""
    cpu = _train(copy.deepcopy(ref), batch, loss_of, None)
    strict = _train(copy.deepcopy(ref).to(TPU), tpu_batch, loss_of, "strict")
    deferred = _train(copy.deepcopy(ref).to(TPU), tpu_batch, loss_of, "defer_and_fuse")
    tol = dict(loss_tol=dict(rel=1e-5, abs=1e-6), param_tol=param_tol)
    _compare(deferred, cpu, **tol)
    _compare(deferred, strict, **tol)
    return deferred


def test_mlp_trains_with_adamw_like_strict_and_cpu():
    from test_device_models import _mlp_and_data, _mlp_loss  # strict mode's MLP test, its data

    ref, batch = _mlp_and_data()
    tpu_batch = {k: v.to(TPU) for k, v in batch.items()}
    deferred = _train_against_strict_and_cpu(ref, batch, tpu_batch, _mlp_loss, dict(rtol=1e-5, atol=1e-5))
    _check_regions(deferred)
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_zoo_llama_trains_with_adamw_like_strict_and_cpu():
    pytest.importorskip("transformers")
    from models import zoo

    ref = zoo.BY_NAME["llama"].build()
    ref.train()
    ids = zoo.BY_NAME["llama"].inputs()["input_ids"]
    batch, tpu_batch = {"ids": ids}, {"ids": ids.to(TPU)}

    def loss_of(model, b):
        return model(input_ids=b["ids"], labels=b["ids"]).loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        deferred = _train_against_strict_and_cpu(ref, batch, tpu_batch, loss_of, dict(rtol=1e-4, atol=5e-5))
    # transformers' mask helper asks `bool((mask[:, -1] == 0).all())` in the forward: a host
    # read, cut where it is (masking_utils.py), the same in every step.
    _check_regions(deferred, [("host_read", "a scalar read (.item(), bool(), int(), float())")] + STEP)
    host = [step[0] for step in deferred["regions"]]
    assert len({r[2] for r in host}) == 1
    assert "masking_utils.py" in next(r["where"] for r in _regions() if r["reason"] == "host_read")
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_a_loop_with_item_cuts_where_the_item_is():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(TPU)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8).to(TPU), torch.randn(16, 1).to(TPU)
    seen = []
    with E.mode("defer_and_fuse"):
        for _ in range(3):
            loss = F.mse_loss(model(x), y)
            if loss.item() > 1e9:  # a host read in the middle of the step
                break
            loss.backward()
            opt.step()
            opt.zero_grad()
            seen.append(len(_regions()))
    item_line = _line_of("if loss.item() > 1e9")
    last = _regions()[seen[1] : seen[2]]
    assert [r["reason"] for r in last] == ["host_read", "backward_end", "optimizer_step"]
    assert last[0]["where"].endswith(f":{item_line}") and ".item()" in last[0]["line"]
    assert all(r["hit"] for r in last)
    text = str(E.explain())
    assert "host_read" in text and "loss.item()" in text


# ---------------------------------------------------------------- donation


def test_parameters_updated_in_place_are_donated():
    """A tensor updated in place holds the Pending of its new value, so its old buffer is
    held by the region alone: donated to the region's program, which writes the new value
    into it. The step then needs no second copy of the tensor."""
    n = 1 << 18  # 1 MiB of f32
    w0 = torch.randn(n)
    w = w0.to(TPU)
    with E.mode("defer_and_fuse"):
        for _ in range(2):  # the first compiles, the second is a hit
            w.mul_(0.5).add_(1.0)
            torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        w.mul_(0.5).add_(1.0)
        torch.tpu.synchronize()
        peak = torch.tpu.max_memory_allocated() - base
    ref = w0
    for _ in range(3):
        ref = ref * 0.5 + 1.0
    torch.testing.assert_close(w.cpu(), ref, rtol=0, atol=0)
    rec = _regions()[-2]  # the last synchronize's region (then the mode change, empty, made none)
    assert rec["reason"] == "synchronize" and rec["hit"] and rec["donated"] == 1, rec
    assert peak < 4 * n, peak  # without donation the new w is a second 1 MiB buffer


def test_a_donated_buffer_refuses_reads():
    from torchtpu import _C

    text = "graph @g(%x: f32[4], %y: f32[4]) -> (f32[4]) {\n  %r = aten.add.Tensor(%x, %y) {alpha = 1} : f32[4]\n  return %r\n}\n"
    program = _C.compile(text, donate=True)
    x, y = _C.device_put(torch.ones(4)), _C.device_put(torch.arange(4.0))
    (out,) = program.run_device([x, y], True, [0])
    torch.testing.assert_close(torch.from_dlpack(out.to_host()), torch.arange(4.0) + 1)
    assert x.donated and not y.donated
    with pytest.raises(torchtpu.InputError, match="donated"):
        x.to_host()
    with pytest.raises(torchtpu.InputError, match="donated"):
        program.run_device([x, y])


# ---------------------------------------------------------------- the persistent cache


def test_env_mode_and_the_persistent_cache_across_processes(tmp_path):
    """TORCHTPU_EAGER_MODE=defer_and_fuse sets the mode; a second process compiles the same
    region from the disk cache (no XLA compile)."""
    code = (
        "import torch, torchtpu.eager as E\n"
        "x = torch.arange(6.0).to('tpu')\n"
        "print(E.current_mode(), ((x * 2).exp() + 1).sum().item())\n"
        "print(E.explain().regions[0]['executable'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env.update(TORCHTPU_EAGER_MODE="defer_and_fuse", TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    first, second = (r.stdout.split() for r in runs)
    expected = float(((torch.arange(6.0) * 2).exp() + 1).sum())
    assert first[0] == "defer_and_fuse" and float(first[1]) == pytest.approx(expected, rel=1e-6)
    assert first[2] == "compiled" and second[2] == "disk", (first, second)


def test_a_miss_names_what_differs_when_the_inputs_look_the_same():
    # The differing op reads the same types; only a number it bakes (the summed dim) differs.
    a = torch.randn(8, 8).to(TPU)
    with E.mode("defer_and_fuse"):
        for dim in (0, 0, 1):
            (a.exp().sum(dim) * 2).sum().item()
    miss = _regions()[-1]
    assert miss["hit"] is False
    differs = miss["differs"]
    assert "differs first at op" in differs, differs
    here, there = differs.split(": ", 1)[1].split(" here, ")
    assert here != there.removesuffix(" there"), differs
    assert "with 1" in here and "with 0" in there, differs


# ---------------------------------------------------------------- per-thread state


def _in_thread(fn):
    """Runs `fn` on a new thread; returns its result (re-raising what it raised)."""
    import threading

    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive()
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_the_mode_and_the_open_region_are_the_calling_threads():
    a = torch.randn(8, 8)
    ta = a.to(TPU)
    with E.mode("defer_and_fuse"):
        y = ta * 2 + 1
        assert _defer.state.region is not None and len(_defer.state.region) == 2

        def other():
            # Another thread: the default mode, no region of its own, strict ops run at once.
            seen = (E.current_mode(), _defer.state.region)
            return seen, (ta - 1).cpu()

        (mode, region), strict_result = _in_thread(other)
        assert mode == "strict" and region is None
        torch.testing.assert_close(strict_result, a - 1, rtol=0, atol=0)
        assert len(_defer.state.region) == 2  # this thread's region got nothing from it
        torch.testing.assert_close(y.cpu(), a * 2 + 1, rtol=1e-6, atol=1e-6)

    def deferred():
        with E.mode("defer_and_fuse"):
            z = ta * 3
            n = len(_defer.state.region)
            return n, z.cpu()

    n, z = _in_thread(deferred)
    assert n == 1 and E.current_mode() == "strict"
    torch.testing.assert_close(z, a * 3, rtol=1e-6, atol=1e-6)


def test_a_value_pending_in_another_threads_region_is_computed_when_read():
    import threading

    a = torch.randn(8, 8)
    ta = a.to(TPU)
    box = {}
    recorded, finish = threading.Event(), threading.Event()

    def producer():
        with E.mode("defer_and_fuse"):
            box["y"] = torch.tanh(ta) * 3
            recorded.set()
            finish.wait(timeout=60)
            box["after"] = (box["y"] + 1).cpu()  # its region was cut by the reader: a new one

    t = threading.Thread(target=producer)
    t.start()
    assert recorded.wait(timeout=60)
    with E.mode("defer_and_fuse"):  # recorded here: the producer's region runs first
        w = box["y"] - 1
        torch.testing.assert_close(w.cpu(), torch.tanh(a) * 3 - 1, rtol=1e-6, atol=1e-6)
    z = box["y"] * 2 + 1  # and in strict mode, from its buffer
    torch.testing.assert_close(z.cpu(), torch.tanh(a) * 6 + 1, rtol=1e-6, atol=1e-6)
    finish.set()
    t.join(timeout=60)
    assert not t.is_alive()
    torch.testing.assert_close(box["after"], torch.tanh(a) * 3 + 1, rtol=1e-6, atol=1e-6)
    assert [r["reason"] for r in E.explain().regions][0] == "another_thread"
