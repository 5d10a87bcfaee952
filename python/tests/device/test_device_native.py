"""The tpu device's native per-op path (docs/eager.md, "How an op runs"): a cached op runs in the
dispatcher shim and Rust, with no Python, and gives CPU eager's result; what Rust does not
take runs the Python path. Tolerances: exact for copies and integer ops, 1e-6 relative for
float arithmetic (one XLA op against one ATen op)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import torch

import torchtpu
import torchtpu.eager
from torchtpu.device import _kernels, _native

TPU = "tpu"


@pytest.fixture
def python_calls(monkeypatch):
    """Counts the ops that reach the Python path (`_kernels.run`, the fallback's)."""
    calls = []
    original = _kernels.run

    def counting(op, *args, **kwargs):
        calls.append(op.name())
        return original(op, *args, **kwargs)

    monkeypatch.setattr(_kernels, "run", counting)
    return calls


def _close(got, want):
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)


def _warm_then_count(fn, python_calls):
    """Runs `fn` twice (the first learns), then once more counting Python calls and native hits."""
    fn()
    fn()
    python_calls.clear()
    hits = _native.stats()["hits"]
    out = fn()
    return out, list(python_calls), _native.stats()["hits"] - hits


def test_a_cached_functional_op_runs_natively(python_calls):
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    ta, tb = a.to(TPU), b.to(TPU)
    for fn, want in [
        (lambda: ta + tb, a + b),
        (lambda: ta @ tb, a @ b),
        (lambda: torch.relu(ta), torch.relu(a)),
        (lambda: ta.sum(dim=1), a.sum(dim=1)),
        (lambda: ta + 1, a + 1),  # a wrapped int: a 0-d input
        (lambda: ta * 2.5, a * 2.5),  # a float: a 0-d f64 input
        (lambda: ta.t() + tb, a.t() + b),  # a view argument: its geometry in the key
        (lambda: torch.nn.functional.gelu(ta, approximate="tanh"), torch.nn.functional.gelu(a, approximate="tanh")),
    ]:
        out, py, hits = _warm_then_count(fn, python_calls)
        assert py == [] and hits == 1, (py, hits)
        _close(out, want)


def test_strings_are_part_of_the_key(python_calls):
    a, b = torch.randn(8, 8) * 4, torch.randn(8, 8)
    ta, tb = a.to(TPU), b.to(TPU)
    for _ in range(3):  # alternating: each string keeps its own recipe
        for mode in ("floor", "trunc"):
            _close(torch.div(ta, tb, rounding_mode=mode), torch.div(a, b, rounding_mode=mode))
        for approximate in ("none", "tanh"):
            _close(
                torch.nn.functional.gelu(ta, approximate=approximate),
                torch.nn.functional.gelu(a, approximate=approximate),
            )
    python_calls.clear()
    _close(torch.div(ta, tb, rounding_mode="trunc"), torch.div(a, b, rounding_mode="trunc"))
    assert python_calls == []


def test_one_native_key_stands_for_one_python_key(monkeypatch):
    """The native key is finer than the Python path's (`eager/src/key.rs`), not a copy of it: two
    calls with one native key must make one Python key, or the recipe one call taught would run
    the other. Each call here misses natively (the native cache is emptied after each lesson),
    so the Python path keys it too, over every 12th device OpInfo case (functions, in-place,
    strided views, out=) and a few key-sensitive calls. With the native key cut to its op, the
    check finds 86 clashes in these cases."""
    from device_opinfo_cases import all_cases, run_case

    from torchtpu import _C
    from torchtpu.device import _dispatch

    python_key_of: dict = {}
    clashes = []
    original = _dispatch._teach_native

    def teach(info, program, leaves, n_floats, baked, *rest):
        native = _C.eager_waiting_key(baked)
        took = original(info, program, leaves, n_floats, baked, *rest)
        if took:
            first = python_key_of.setdefault(tuple(native), program.key)
            if first != program.key:
                clashes.append((info.name, first, program.key))
        _C.eager_native_clear()
        return took

    monkeypatch.setattr(_dispatch, "_teach_native", teach)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    ta, tb = a.to(TPU), b.to(TPU)
    for v in (0.1, 0.2, 0.1):
        torch.nn.functional.leaky_relu(ta, v)  # a baked float: one key per value
    for mode in ("floor", "trunc", "floor"):
        torch.div(ta, tb, rounding_mode=mode)
    for t in (ta, ta[1:], ta[2:], ta.t(), ta[:, 1], torch.view_as_real(ta.to(torch.complex64))):
        t + 1
        t * 2.5
    for case in all_cases()[::12]:
        run_case(case)
    assert len(python_key_of) > 200, len(python_key_of)
    assert clashes == [], clashes[:3]


def test_float_values_are_inputs_not_keys():
    a = torch.randn(4, 4)
    ta = a.to(TPU)
    for v in (2.5, -1.25, 3.0, 1e-3):
        _close(ta * v, a * v)
        _close(torch.add(ta, ta, alpha=v), torch.add(a, a, alpha=v))


def test_an_op_that_bakes_its_float_keeps_one_recipe_per_value(python_calls):
    a = torch.randn(16)
    ta = a.to(TPU)
    for v in (0.1, 0.2, 0.1, 0.3, 0.2):
        _close(torch.nn.functional.leaky_relu(ta, v), torch.nn.functional.leaky_relu(a, v))
    python_calls.clear()
    for v in (0.1, 0.2, 0.3):  # each value seen before: its own recipe, native
        _close(torch.nn.functional.leaky_relu(ta, v), torch.nn.functional.leaky_relu(a, v))
    assert python_calls == []


def test_in_place_and_out_ops_write_their_targets(python_calls):
    a, b = torch.randn(6, 6), torch.randn(6, 6)
    ta, tb = a.to(TPU), b.to(TPU)
    # Whole in-place target.
    x, tx = a.clone(), ta.clone()
    for _ in range(3):
        x.add_(b)
        tx.add_(tb)
    _close(tx, x)
    # A view target: the result is scattered into its storage; the base sees it.
    y, ty = a.clone(), ta.clone()
    for _ in range(3):
        y[1].mul_(2)
        ty[1].mul_(2)
    _close(ty, y)
    python_calls.clear()
    ty[1].mul_(2)
    y[1].mul_(2)
    assert python_calls == []
    _close(ty, y)
    # out=.
    c, tc = torch.empty(6, 6), torch.empty(6, 6, device=TPU)
    for _ in range(3):
        torch.mul(a, b, out=c)
        torch.mul(ta, tb, out=tc)
    _close(tc, c)
    # A view shares its storage with what it views: a write through one is seen by the other.
    base = ta.clone()
    row = base[2]
    for _ in range(3):
        row.add_(1)
    _close(base[2], a[2] + 3)


def test_foreach_ops_run_natively():
    xs = [torch.randn(3, 4) for _ in range(3)]
    txs = [x.to(TPU) for x in xs]
    for _ in range(3):
        got, want = torch._foreach_mul(txs, 2.0), torch._foreach_mul(xs, 2.0)
        torch._foreach_add_(txs, txs)
        torch._foreach_add_(xs, xs)
        for g, w in zip(got, want):
            _close(g, w)
    for t, x in zip(txs, xs):
        _close(t, x)


def test_empty_and_copy_are_native_and_keep_eager_errors(python_calls):
    e = torch.empty(3, 5, device=TPU, dtype=torch.int32)
    assert e.dtype == torch.int32 and e.device == torch.device("tpu:0") and tuple(e.shape) == (3, 5)
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(-1, device=TPU)
    with pytest.raises(RuntimeError, match="invalid device"):
        torch.empty(2, device="tpu:99")
    a = torch.randn(4, 4)
    ta = a.to(TPU)
    dst = torch.empty(4, 4, device=TPU)
    python_calls.clear()
    dst.copy_(ta)  # a buffer's reuse
    assert python_calls == []
    _close(dst, a)
    ta.add_(1)  # buffers are immutable: the copy keeps the old values
    _close(dst, a)
    wide = torch.empty(4, 4, device=TPU, dtype=torch.float64)
    wide.copy_(ta)  # a cast: the Python kernel
    _close(wide, (a + 1).double())
    part = torch.zeros(4, 4, device=TPU)
    part[1].copy_(ta[3])  # a view: the Python kernel
    want = torch.zeros(4, 4)
    want[1] = a[3] + 1
    _close(part, want)


def test_autograd_through_native_ops_matches_eager():
    w = torch.randn(5, 3, requires_grad=True)
    tw = w.detach().to(TPU).requires_grad_()
    x = torch.randn(4, 5)
    tx = x.to(TPU)
    for _ in range(3):
        tw.grad = None
        (torch.tanh(tx @ tw) * 2 + 1).sum().backward()
    w.grad = None
    (torch.tanh(x @ w) * 2 + 1).sum().backward()
    torch.testing.assert_close(tw.grad.cpu(), w.grad, rtol=1e-5, atol=1e-6)


def test_debug_mode_takes_the_python_path():
    a = torch.randn(4, 4)
    ta = a.to(TPU)
    for _ in range(2):
        _ = ta + ta  # learnt in strict mode
    with torchtpu.eager.mode("debug"):
        hits = _native.stats()["hits"]
        out = ta + ta
        _close(out, a + a)
        assert _native.stats()["hits"] == hits


def _defer_step(w, x, b, lr):
    """A small training-like step: functional ops, a wrapped number, a float, in-place updates
    of a whole tensor, and a reduction."""
    y = torch.tanh(x @ w + b) * 2 + 1
    w.add_(y.t() @ x, alpha=-lr)
    b.mul_(0.5)
    return y.sum(dim=0)


def test_defer_and_fuse_records_cached_ops_natively(python_calls):
    w, x, b = torch.randn(6, 6), torch.randn(6, 6), torch.randn(6)
    tw, tx, tb = w.to(TPU), x.to(TPU), b.to(TPU)
    torchtpu.reset_stats()
    with torchtpu.eager.mode("defer_and_fuse"):
        outs = []
        for step in range(4):
            if step == 3:
                python_calls.clear()
                hits = _native.stats()["hits"]
            out = _defer_step(tw, tx, tb, 0.01 * (step + 1))  # the float changes every step
            if step == 3:
                # Every op recorded by the native path (the region opened by it too); the read
                # below is the cut.
                assert python_calls == [], python_calls
                assert _native.stats()["hits"] - hits == 9
            outs.append(out.cpu())
    for step in range(4):
        want = _defer_step(w, x, b, 0.01 * (step + 1))
        torch.testing.assert_close(outs[step], want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tw.cpu(), w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tb.cpu(), b, rtol=1e-6, atol=1e-6)
    stats = torchtpu.stats()
    # Step 0 records through Python, steps 1-3 natively: the same records, one region key.
    assert stats["eager_regions"] == 4 and stats["eager_regions_compiled"] == 1, stats


def test_defer_and_fuse_native_recording_under_autograd_matches_eager():
    w = torch.randn(5, 3, requires_grad=True)
    tw = w.detach().to(TPU).requires_grad_()
    x = torch.randn(4, 5)
    tx = x.to(TPU)
    with torchtpu.eager.mode("defer_and_fuse"):
        for _ in range(3):
            tw.grad = None
            loss = (torch.tanh(tx @ tw) * 2 + 1).sum()
            loss.backward()  # the backward's own ops: recorded natively, cut at its end
            got = tw.grad.cpu()
    w.grad = None
    (torch.tanh(x @ w) * 2 + 1).sum().backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-5, atol=1e-6)


def test_defer_and_fuse_leaves_a_write_into_a_view_to_python():
    """An in-place write into a view is recorded by the Python path (its scatter program is
    recorded too); the ops around it natively. Results match eager."""
    a = torch.randn(4, 4)
    ta = a.to(TPU)
    with torchtpu.eager.mode("defer_and_fuse"):
        for _ in range(3):
            t = ta.clone()
            t[1:3].mul_(3.0)
            u = t * 2
            got = u.cpu()
    want = a.clone()
    want[1:3].mul_(3.0)
    torch.testing.assert_close(got, want * 2, rtol=1e-6, atol=1e-6)


def test_index_checks_setting_is_part_of_the_key():
    x = torch.randn(5, 3)
    tx = x.to(TPU)
    idx = torch.tensor([0, 4, 2]).to(TPU)
    for on in (True, False, True):
        with torchtpu.eager.check_indices(on):
            for _ in range(2):
                _close(tx[idx] * 2, x[torch.tensor([0, 4, 2])] * 2)
    bad = torch.tensor([0, 7]).to(TPU)
    with pytest.raises(IndexError):
        tx[bad].cpu()


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_index_checks_of_native_ops_raise_at_the_next_read(mode, python_calls):
    """A program that checks its indices runs natively too; its flag joins the pending checks,
    read at the next host read, naming the user's line."""
    w = torch.randn(10, 4)
    tw = w.to(TPU)
    good = torch.tensor([1, 9, 0])
    with torchtpu.eager.mode(mode):
        for _ in range(3):
            out = torch.nn.functional.embedding(good.to(TPU), tw)
            _close(out, torch.nn.functional.embedding(good, w))
        bad = torch.tensor([1, 10, 0]).to(TPU)  # the same key as `good`: a native hit
        python_calls.clear()
        out = torch.nn.functional.embedding(bad, tw)  # the line the error names
        line = sys._getframe().f_lineno - 1
        assert "aten::embedding" not in python_calls and "aten::index_select" not in python_calls, python_calls
        with pytest.raises(IndexError, match=f"test_device_native.py:{line}"):
            out.cpu()


def test_threads_run_cached_ops_at_once():
    a = torch.randn(16, 16)
    ta = a.to(TPU)
    want = (a @ a + 1).sum()
    errors = []

    def work():
        try:
            for _ in range(200):
                got = (ta @ ta + 1).sum()
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)


def test_stats_count_native_ops():
    before = torchtpu.stats()["eager_ops"]
    a = torch.randn(4, device=TPU)
    for _ in range(5):
        a = a + 1
    assert torchtpu.stats()["eager_ops"] - before >= 5


def test_exit_with_tensors_freed_by_autograd_threads_is_clean():
    # Storages freed by autograd's device threads release their slots without taking the GIL
    # (at exit the interpreter stops a thread that waits for it: "terminate called").
    code = (
        "import torch\n"
        "for d in range(4):\n"
        "    x = torch.ones(64, device=f'tpu:{d}', requires_grad=True)\n"
        "    (x * 2).tanh().sum().backward()\n"
        "print(x.grad.device)\n"
    )
    for _ in range(4):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["tpu:3"]


def test_program_and_region_caches_are_bounded(monkeypatch):
    from torchtpu.device import _programs, _region

    monkeypatch.setattr(_programs._by_checks[_programs.checks_on], "limit", 5)
    monkeypatch.setattr(_region, "REGION_LIMIT", 3)
    before = torchtpu.stats()["eager_cache_resets"]
    for n in range(1, 12):  # a new shape at every step
        x = torch.randn(n)
        _close(x.to(TPU) * 2 + 1, x * 2 + 1)
    assert len(_programs._programs) <= 5
    with torchtpu.eager.mode("defer_and_fuse"):
        for n in range(1, 8):
            x = torch.randn(n)
            torch.testing.assert_close(
                (x.to(TPU) * 2 + 1).exp().sum().cpu(), (x * 2 + 1).exp().sum(), rtol=1e-5, atol=1e-5
            )
    assert len(_region._programs) <= 3
    assert torchtpu.stats()["eager_cache_resets"] > before


def test_an_in_place_update_of_a_large_tensor_donates_its_buffer():
    # A KV cache's `index_copy_` in strict mode: the native path donates the target's buffer
    # to the op's program (nothing else holds it), so the update is written into it instead of
    # into a copy: the device's peak stays at one cache. A buffer another storage shares (a
    # native copy_ reuses buffers) is not donated, and keeps its values.
    rows = 1024  # 1024 x 256 floats = 1 MiB: the smallest target donated
    cache = torch.zeros(rows, 256, device=TPU)
    src = torch.randn(4, 256)
    shared = torch.empty(rows, 256, device=TPU)
    for step in range(3):  # the first runs the Python path, then the native one
        idx = torch.arange(4) + 4 * step
        cache.index_copy_(0, idx.to(TPU), src.to(TPU) * step)
    torch.tpu.synchronize()
    before = _native.stats()["donated"]
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    cache.index_copy_(0, torch.arange(4, device=TPU) + 20, src.to(TPU))
    torch.tpu.synchronize()
    assert _native.stats()["donated"] == before + 1
    assert torch.tpu.max_memory_allocated() - base < cache.nbytes // 2
    shared.copy_(cache)  # both storages hold one buffer now
    cache.index_copy_(0, torch.arange(4, device=TPU), src.to(TPU) * 7)
    assert _native.stats()["donated"] == before + 1
    want = torch.zeros(rows, 256)
    for step in range(3):
        want.index_copy_(0, torch.arange(4) + 4 * step, src * step)
    want.index_copy_(0, torch.arange(4) + 20, src)
    torch.testing.assert_close(shared.cpu(), want, rtol=0, atol=0)
    want.index_copy_(0, torch.arange(4), src * 7)
    torch.testing.assert_close(cache.cpu(), want, rtol=0, atol=0)
    # A write into a view (`as_strided_scatter` into its storage's buffer) donates that buffer.
    view = cache[8:]
    for step in range(3):
        done = _native.stats()["donated"]
        view.index_copy_(0, torch.arange(2, device=TPU) + step, src[:2].to(TPU) * (step + 10))
        want[8:].index_copy_(0, torch.arange(2) + step, src[:2] * (step + 10))
    assert _native.stats()["donated"] > done
    torch.testing.assert_close(cache.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
def test_an_in_place_op_needs_one_buffer_of_its_target_from_the_first_call(mode):
    """As on CUDA, `empty(n).fill_(1)` peaks at n bytes: the first call (the Python path,
    debug mode's only path) donates the target's old buffer to the op's program too, and a
    DeferAndFuse region writes it in place. Shapes no other test uses, so the first call is a
    miss here."""
    n = 1 << 20 | 8  # 4 MiB and 32 bytes of f32
    with torchtpu.eager.mode(mode):
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        base = torch.tpu.memory_allocated()
        a = torch.empty(n, device=TPU).fill_(1)
        b = torch.empty(2 * n, device=TPU).fill_(2)
        torch.tpu.synchronize()
        filled = torch.tpu.max_memory_allocated() - base  # before: 20 MiB, a second b while it filled
        c = torch.arange(2 * n, dtype=torch.float32).to(TPU)
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        held = torch.tpu.memory_allocated()
        b.add_(c)  # reads its target: donated as well
        torch.tpu.synchronize()
        added = torch.tpu.max_memory_allocated() - held
        torch.testing.assert_close(a.cpu(), torch.ones(n), rtol=0, atol=0)
        torch.testing.assert_close(b.cpu(), torch.arange(2 * n, dtype=torch.float32) + 2, rtol=0, atol=0)
        del a, b, c
    assert filled == 3 * n * 4, filled / 2**20
    assert added < 2**20, added / 2**20  # no second b (8 MiB)


@pytest.mark.parametrize("mode", ["strict", "debug"])
def test_a_write_into_a_view_donates_its_storage_from_the_first_call(mode):
    """An in-place op on a strided view whose program scatters the result into the storage's
    buffer (`write_base`) donates that buffer on its first call too (the Python path: the native
    path's rule, `eager/src/donation.rs`): no second copy of the 4 MiB storage (before: 4 MiB)."""
    a = torch.randn(1024, 1032)  # a shape no other test uses: the first call is a miss
    ta = a.to(TPU)
    with torchtpu.eager.mode(mode):
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        base = torch.tpu.memory_allocated()
        ta[3:700].zero_()
        torch._foreach_mul_([ta[:, 5:900]], 2.0)
        torch.tpu.synchronize()
        peak = torch.tpu.max_memory_allocated() - base
    a[3:700].zero_()
    torch._foreach_mul_([a[:, 5:900]], 2.0)
    torch.testing.assert_close(ta.cpu(), a, rtol=0, atol=0)
    assert peak < 2**20, peak / 2**20
