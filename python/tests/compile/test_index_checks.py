"""Out-of-range indices raise (index_checks.py, device/_checks.py; docs/eager.md "Index
checks", docs/backend.md "Options"), where XLA would clamp them: every index-reading op, in
the device's strict, debug and defer_and_fuse modes and compiled on CPU and tpu tensors. The
error names the op and the line of this file that called it; in-range indices (negative ones
where eager takes them) still match CPU eager, exactly (gathers and scatters of copies).
The valid ranges were measured on CPU eager: `index`/`index_put` take [-n, n), the others
[0, n); `ignore_index=-100` of a loss is no index."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from compiled import fresh_torchtpu  # noqa: F401 - the fixture

import torchtpu
import torchtpu.eager as E
from torchtpu.device import _checks

pytestmark = [pytest.mark.usefixtures("fresh_torchtpu"), pytest.mark.timeout(300)]
TPU = "tpu"
HERE = os.path.abspath(__file__)


def _ones(x, n):
    return torch.ones(x.shape[0], n, dtype=x.dtype, device=x.device)


def _set(x, i):
    y = x.clone()
    y[i] = 7.0
    return y


def _set_view(x, i):
    y = x.clone()
    y[1][i] = 7.0  # a strided view's in-place write (the program scatters into the base)
    return y


# name -> (fn(x, index), op(s) named in the error, bad index lists, good index lists); x is 4x5.
# Each fn is one line, so the error's line is its first line.
CASES = {
    "getitem": (lambda x, i: x[i] * 1, "aten.index", [[0, 4], [-5]], [[0, -1, 3, -4]]),
    "index_dim1": (lambda x, i: torch.ops.aten.index.Tensor(x, [None, i]), "aten.index", [[5], [-6]], [[-5, 4, 0]]),
    # `y[i] = number` is index_fill_ on the device, index_put in a compiled graph.
    "setitem": (lambda x, i: _set(x, i), ("aten.index_put", "aten.index_fill"), [[4]], [[-4, 2]]),
    "setitem_view": (lambda x, i: _set_view(x, i), ("aten.index_put", "aten.index_fill"), [[5]], [[-5, 4]]),
    "index_put_acc": (
        lambda x, i: x.index_put((i,), torch.ones(len(i), 5, device=x.device), accumulate=True),
        "aten.index_put",
        [[-5]],
        [[-1, -1, 0]],
    ),
    "embedding": (lambda x, i: F.embedding(i, x), ("aten.embedding", "aten.index_select"), [[4], [-1]], [[0, 3, 3]]),
    "gather": (lambda x, i: torch.gather(x, 1, i.view(1, -1).expand(4, -1)), "aten.gather", [[5], [-1]], [[0, 4, 2]]),
    "scatter_": (
        lambda x, i: x.clone().scatter_(1, i.view(1, -1).expand(4, -1).contiguous(), 2.0),
        "aten.scatter",
        [[5], [-1]],
        [[4, 1]],
    ),
    "scatter_add": (
        lambda x, i: x.scatter_add(1, i.view(1, -1).expand(4, -1).contiguous(), _ones(x, len(i))),
        "aten.scatter_add",
        [[-1]],
        [[0, 0, 4]],
    ),
    "index_select": (lambda x, i: x.index_select(1, i), "aten.index_select", [[5], [-1]], [[4, 0, 4]]),
    "index_add": (lambda x, i: x.index_add(1, i, _ones(x, len(i))), "aten.index_add", [[-1]], [[1, 1, 4]]),
    "cross_entropy": (
        lambda x, i: F.cross_entropy(x[: len(i), :3], i),
        "aten.nll_loss",
        [[5, 0], [0, -1]],
        [[2, -100], [0, 1, 2, 1]],
    ),
}
WHERE = ["strict", "debug", "defer_and_fuse", "compiled_cpu", "compiled_tpu"]


def _line(fn) -> str:
    """The user's line of a case: its lambda's, or the line of a helper it calls that indexes."""
    import inspect

    src = inspect.getsource(sys.modules[__name__]).splitlines()
    for helper in ("_set_view", "_set"):
        if f"{helper}(x, i)" in src[fn.__code__.co_firstlineno - 1]:
            start = next(k for k, line in enumerate(src) if line.startswith(f"def {helper}("))
            return f"{HERE}:{next(k + 1 for k in range(start, len(src)) if '] = 7.0' in src[k])}"
    return f"{HERE}:{fn.__code__.co_firstlineno}"


def _run(where: str, fn, x: torch.Tensor, index: list, check=True):
    """fn on x and the index, in `where`; returns the result on the CPU (the host read that
    raises in strict and defer_and_fuse)."""
    if where.startswith("compiled"):
        dev = "cpu" if where == "compiled_cpu" else TPU
        compiled = torch.compile(fn, backend="torchtpu", dynamic=False, options={"check_indices": check})
        return compiled(x.to(dev), torch.tensor(index, device=dev)).cpu()
    with E.mode(where), E.check_indices(check):
        return fn(x.to(TPU), torch.tensor(index, device=TPU)).cpu()


def _x():
    return torch.arange(20, dtype=torch.float32).view(4, 5) / 7


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", sorted(CASES))
def test_an_out_of_range_index_raises_naming_the_op_and_line(name, where):
    fn, op, bad, _ = CASES[name]
    for index in bad:
        with pytest.raises((IndexError, RuntimeError)):  # CPU eager raises too (gather: RuntimeError)
            fn(_x(), torch.tensor(index))
        with pytest.raises(torchtpu.IndexOutOfRangeError) as info:
            _run(where, fn, _x(), index)
        e = info.value
        assert isinstance(e, IndexError) and isinstance(e, RuntimeError)
        # The device runs embedding as its eager kernel does: an index_select.
        assert e.op.startswith(op) and e.op in str(e), (e.op, str(e))
        assert e.where == _line(fn) and _line(fn) in str(e), str(e)
    assert not _checks._pending  # the error took every pending flag with it


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", sorted(CASES))
def test_in_range_indices_match_cpu_eager(name, where):
    fn, _, _, good = CASES[name]
    for index in good:
        torch.testing.assert_close(_run(where, fn, _x(), index), fn(_x(), torch.tensor(index)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("where", WHERE)
def test_the_switch_turns_the_checks_off(where):
    fn = CASES["gather"][0]
    out = _run(where, fn, _x(), [5], check=False)  # XLA's clamped gather: no error
    assert out.shape == (4, 1)
    with pytest.raises(torchtpu.IndexOutOfRangeError):
        _run(where, fn, _x(), [5])  # and back on


def test_env_turns_the_checks_off_by_default():
    code = (
        "import torch, torchtpu\n"
        "x = torch.arange(4.)\n"
        "f = torch.compile(lambda x, i: x[i], backend='torchtpu')\n"
        "print(f(x, torch.tensor([9])).tolist(), x.to('tpu')[torch.tensor([9], device='tpu')].cpu().tolist())\n"
    )
    env = dict(os.environ, TORCHTPU_CHECK_INDICES="0")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().startswith("[3.0]"), r.stdout  # clamped, as XLA does


def test_strict_mode_raises_at_the_next_host_read_or_synchronize():
    xt = _x().to(TPU)
    bad = torch.tensor([9], device=TPU)
    y = xt[bad]  # enqueued: no host round trip per op
    z = y * 2
    assert _checks._pending
    with pytest.raises(torchtpu.IndexOutOfRangeError, match=r"aten\.index"):
        z.sum().item()
    y = xt[bad]
    with pytest.raises(torchtpu.IndexOutOfRangeError):
        torch.tpu.synchronize()
    # Raised once: later reads are fine.
    assert xt.sum().item() == pytest.approx(_x().sum().item())


def test_many_pending_flags_are_read_together_and_the_bad_one_is_named():
    xt = _x().to(TPU)
    good, bad = torch.tensor([1, -1], device=TPU), torch.tensor([0, 2, 3, 9], device=TPU)
    ys = [xt[good] for _ in range(5)]
    ys.append(torch.gather(xt, 1, bad.view(1, -1)))  # the bad one, among good ones
    ys += [xt.index_select(0, good.abs()) for _ in range(3)]
    assert len(_checks._pending) == 9
    with pytest.raises(torchtpu.IndexOutOfRangeError, match=r"aten\.gather") as info:
        ys[0].cpu()
    assert info.value.where.endswith(f"test_index_checks.py:{_line_of('ys.append(torch.gather')}")
    # Good flags only: read as one, nothing raised; past LIMIT the computed ones are read.
    for _ in range(_checks.LIMIT + 10):
        xt[good]
    assert len(_checks._pending) < _checks.LIMIT
    assert xt[good].sum().item() == pytest.approx(_x()[torch.tensor([1, -1])].sum().item(), rel=1e-6)
    assert not _checks._pending


def _line_of(text: str) -> int:
    import inspect

    src = inspect.getsource(sys.modules[__name__]).splitlines()
    return next(i + 1 for i, line in enumerate(src) if text in line and "_line_of" not in line)


def test_debug_mode_raises_at_the_op_itself():
    xt = _x().to(TPU)
    with E.mode("debug"), pytest.raises(torchtpu.IndexOutOfRangeError) as info:
        xt.index_select(0, torch.tensor([4], device=TPU))
    assert info.value.op == "aten.index_select" and not _checks._pending


def test_defer_and_fuse_reads_the_flag_after_the_region_runs():
    xt, w = _x().to(TPU), torch.randn(5, 3).to(TPU)
    with E.mode("defer_and_fuse"):
        h = F.embedding(torch.tensor([[0, 7]], device=TPU), xt) @ w
        loss = h.relu().sum()
        assert _checks._pending  # the flag is pending with the region
        with pytest.raises(torchtpu.IndexOutOfRangeError, match=r"aten\.(embedding|index_select)"):
            loss.item()
        # A good step afterwards: the region's flag is one of its outputs, read at the read.
        ok = (F.embedding(torch.tensor([[0, 3]], device=TPU), xt) @ w).relu().sum().item()
    x = _x()
    assert ok == pytest.approx((F.embedding(torch.tensor([[0, 3]]), x) @ w.cpu()).relu().sum().item(), rel=1e-6)


@pytest.mark.allow_fallback
def test_not_a_fallback_even_when_fallback_is_allowed():
    f = torch.compile(lambda x, i: torch.gather(x, 0, i), backend="torchtpu", options={"strict": False})
    with pytest.raises(torchtpu.IndexOutOfRangeError):
        f(_x(), torch.tensor([[4, 0, 0, 0, 0]]))
    assert torchtpu.stats()["graphs_fallback"] == 0 and not torchtpu.stats()["fallback_reasons"]


@pytest.mark.allow_fallback
def test_a_graph_partitioned_around_an_eager_op_still_checks():
    def f(x, i):
        return torch.special.airy_ai(x)[i]  # airy_ai runs eagerly, the indexing compiles

    g = torch.compile(f, backend="torchtpu", options={"strict": False})
    torch.testing.assert_close(g(_x(), torch.tensor([-1, 0])), f(_x(), torch.tensor([-1, 0])))
    assert torchtpu.stats()["partitions_compiled"] > 0
    with pytest.raises(torchtpu.IndexOutOfRangeError):
        g(_x(), torch.tensor([4]))


def test_dynamic_shapes_check_each_size():
    f = torch.compile(lambda x, i: x[i].sum(0), backend="torchtpu", dynamic=True)
    for n in (4, 6, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(f(x, torch.tensor([n - 1, -n])), x[torch.tensor([n - 1, -n])].sum(0))
        with pytest.raises(torchtpu.IndexOutOfRangeError, match=rf"\[-{n}, {n}\)"):
            f(x, torch.tensor([n]))


class _EmbedGather(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 6)
        self.proj = torch.nn.Linear(6, 4)

    def forward(self, ids, pick, target):
        h = self.proj(self.emb(ids))  # [b, s, 4]
        picked = torch.gather(h, 2, pick)  # [b, s, 1]
        return F.cross_entropy(h.flatten(0, 1), target) + picked.square().mean()


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 10, (2, 5), generator=g)
    pick = torch.randint(0, 4, (2, 5, 1), generator=g)
    target = torch.randint(0, 4, (10,), generator=g)
    target[3] = -100
    return ids, pick, target


def _grads(model, batch, run):
    model.zero_grad()
    loss = run(model, batch)
    loss.backward()
    return loss.detach().cpu(), {k: p.grad.detach().cpu() for k, p in model.named_parameters()}


@pytest.mark.parametrize("where", WHERE)
def test_training_through_embedding_gather_and_cross_entropy_matches_cpu(where):
    torch.manual_seed(0)
    ref = _EmbedGather()
    ref_loss, ref_grads = _grads(ref, _batch(), lambda m, b: m(*b))
    model = _EmbedGather()
    model.load_state_dict(ref.state_dict())
    dev = "cpu" if where == "compiled_cpu" else TPU
    model.to(dev)
    batch = [t.to(dev) for t in _batch()]
    if where.startswith("compiled"):
        compiled = torch.compile(model, backend="torchtpu")
        loss, grads = _grads(model, batch, lambda m, b: compiled(*b))
    else:
        with E.mode(where):
            loss, grads = _grads(model, batch, lambda m, b: m(*b))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for k in ref_grads:
        torch.testing.assert_close(grads[k], ref_grads[k], rtol=1e-5, atol=1e-6)
    assert not _checks._pending or where != "debug"
    # And an out-of-range token id in training raises.
    ids, pick, target = batch
    bad = ids.clone()
    bad[0, 0] = 10
    with pytest.raises(torchtpu.IndexOutOfRangeError, match=r"aten\.(embedding|index_select)"):
        if where.startswith("compiled"):
            compiled(bad, pick, target).item()
        else:
            with E.mode(where):
                model(bad, pick, target).item()


def test_a_compiled_graph_on_pending_tpu_tensors_checks_too():
    f = torch.compile(lambda x, i: x[i] * 2, backend="torchtpu")
    xt = _x().to(TPU)
    with E.mode("defer_and_fuse"):
        y = xt + 1  # pending: the compiled graph is a cut
        torch.testing.assert_close(f(y, torch.tensor([-1], device=TPU)).cpu(), (_x()[-1:] + 1) * 2)
        out = f(y, torch.tensor([4], device=TPU))
        with pytest.raises(torchtpu.IndexOutOfRangeError, match=r"aten\.index"):
            out.cpu()


# ---------------------------------------------------------------- device asserts and mask counts
# `_assert_async` (PyTorch's one_hot decomposition asserts the class range) and `x[mask] = v`
# with one value per set element are checked on the device too, raising DeviceAssertError (a
# RuntimeError, as CPU eager's) at the same points, whatever `check_indices` says: they are no
# fallback (the graph compiles whole) and no host read of their own.


def _one_hot(x, i):
    return F.one_hot(i, 5).to(x.dtype) @ x.t()


def _put_rows(x, i):
    y = x.clone()
    y[i > 0] = torch.arange(15, dtype=x.dtype, device=x.device).view(3, 5)  # three values per row
    return y


def _add_masked(x, i):
    y = x.clone()
    y[i > 1] += y[i > 1] * 2  # `+=` writes back one value per set element
    return y


ASSERTS = {
    # name -> (fn, the message CPU eager raises, bad index lists, good index lists)
    "one_hot": (_one_hot, "Class values must be", [[0, 5], [-1, 2]], [[0, 4, 2]]),
    "mask_rows": (_put_rows, "shape mismatch", [[1, 0, 0, 1], [1, 1, 1, 1]], [[1, 0, 1, 1], [2, 3, 0, 1]]),
    "mask_add": (_add_masked, None, [], [[0, 2, 3, 1], [0, 0, 0, 0]]),
}


@pytest.mark.parametrize("check", [True, False], ids=["checks_on", "checks_off"])
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", sorted(ASSERTS))
def test_device_asserts_raise_as_cpu_eager_and_good_inputs_match(name, where, check):
    fn, message, bad, good = ASSERTS[name]
    for index in good:
        torch.testing.assert_close(
            _run(where, fn, _x(), index, check), fn(_x(), torch.tensor(index)), rtol=1e-6, atol=1e-6
        )
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {} and torchtpu.stats()["graphs_fallback"] == 0
    raised = torchtpu.DeviceAssertError
    if name == "one_hot" and not where.startswith("compiled"):
        # one_hot on a PrivateUse1 tensor skips its class check and relies on the scatter's
        # device assert, as on CUDA: the index check.
        if not check:
            return
        raised, message = torchtpu.IndexOutOfRangeError, "aten.scatter"
    for index in bad:
        with pytest.raises(RuntimeError):
            fn(_x(), torch.tensor(index))
        with pytest.raises(raised, match=message) as info:
            _run(where, fn, _x(), index, check)
        assert isinstance(info.value, RuntimeError)
        assert info.value.where and info.value.where.startswith(HERE + ":"), str(info.value)
    assert not _checks._pending


def test_a_tpu_assert_waits_for_the_next_host_read():
    x = torch.tensor([1, -2]).to(TPU)
    torch._assert_async((x >= 0).all(), "negative")  # no host read here: it is pending
    assert len(_checks._pending) == 1
    with pytest.raises(torchtpu.DeviceAssertError, match="negative"):
        x.sum().item()
    torch._assert_async(torch.tensor(3, device=TPU))
    with pytest.raises(torchtpu.DeviceAssertError, match="single nonzero value"):
        torch._assert_async(torch.tensor(0, device=TPU))
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="more than one value"):
        torch._assert_async(torch.ones(2, device=TPU))
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}
