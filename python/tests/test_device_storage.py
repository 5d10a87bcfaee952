"""Resizing tpu storages (`UntypedStorage.resize_`, through the native PrivateUse1 hooks'
`resizePrivateUse1Bytes`, docs/eager.md "Tensors and their memory") and what FSDP2 does with
it: free a parameter's storage, bring it back, copy an all-gather into it. Each case runs the
same steps on CPU eager and compares the values (exact: only data movement, no arithmetic
beyond one f32 multiply, which is exact here). Bytes past a storage's old end are
uninitialised in PyTorch, so only the kept prefix and what is written afterwards are compared.
"""

from __future__ import annotations

import pytest
import torch

import torchtpu.eager as E

DEVICES = ("cpu", "tpu")


def _prefix(t: torch.Tensor, n: int) -> torch.Tensor:
    """The first `n` elements of `t`'s storage, as a CPU tensor."""
    return torch.as_strided(t, (n,), (1,), 0).cpu()


def _both(fn):
    """`fn(device)` on CPU and on tpu; the tpu results as CPU tensors."""
    cpu, tpu = fn("cpu"), fn("tpu")
    return cpu, [v.cpu() if isinstance(v, torch.Tensor) else v for v in tpu]


def test_resize_to_zero_frees_device_memory_and_back_takes_writes():
    def steps(dev):
        x = torch.arange(12, dtype=torch.float32, device=dev).reshape(3, 4)
        s = x.untyped_storage()
        s.resize_(0)
        freed = s.nbytes()
        s.resize_(48)
        x.copy_(torch.full((3, 4), 2.5))  # FSDP2's all-gather output copied into the parameter
        return [freed, s.nbytes(), x.clone()]

    torch.tpu.synchronize()
    x = torch.randn(256, 256, device="tpu")
    before = torch.tpu.memory_allocated()
    x.untyped_storage().resize_(0)
    assert torch.tpu.memory_allocated() == before - 256 * 256 * 4
    x.untyped_storage().resize_(256 * 256 * 4)
    assert torch.tpu.memory_allocated() == before - 256 * 256 * 4  # uninitialised: nothing held yet
    cpu, tpu = _both(steps)
    assert cpu[:2] == tpu[:2] == [0, 48]
    torch.testing.assert_close(tpu[2], cpu[2], rtol=0, atol=0)


def test_a_view_past_its_storage_is_refused():
    # On CPU eager reading a freed or shrunk storage is undefined behaviour (it crashes); tpu
    # refuses the read, naming the sizes, as PyTorch's own `set_` refuses such a view.
    x = torch.arange(12, dtype=torch.float32, device="tpu").reshape(3, 4)
    x.untyped_storage().resize_(16)
    for read in (lambda: x.cpu(), lambda: x[1].cpu(), lambda: x[2] * 2, lambda: x[1].add_(1), lambda: x + 1):
        with pytest.raises(RuntimeError, match="needs a storage of (48|32|16) bytes, but its storage has 16"):
            read()
    x.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="its storage has 0"):
        x.sum()


def test_shrink_keeps_the_prefix_and_views_see_it():
    def steps(dev):
        x = torch.arange(24, dtype=torch.float32, device=dev).reshape(4, 6)
        v = x[1, 1:4]  # a view inside the kept prefix (elements 7..9)
        x.untyped_storage().resize_(10 * 4)
        return [x.untyped_storage().nbytes(), _prefix(x, 10), v.clone() * 3]

    cpu, tpu = _both(steps)
    assert cpu[0] == tpu[0] == 40
    for a, b in zip(tpu[1:], cpu[1:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_grow_keeps_the_prefix_and_writes_past_the_old_end_are_seen_by_every_view(dtype):
    def steps(dev):
        x = (torch.arange(8, device=dev) % 3).to(dtype)
        v = x[2:6]
        s = x.untyped_storage()
        s.resize_(20 * dtype.itemsize)
        big = torch.empty(0, dtype=dtype, device=dev).set_(s)  # the whole grown storage
        assert big.numel() == 20
        big[8:] = torch.ones(12, dtype=dtype)
        v.mul_(2) if dtype is not torch.bool else v.logical_not_()
        return [s.nbytes(), big.clone(), x.clone(), v.clone()]

    cpu, tpu = _both(steps)
    assert cpu[0] == tpu[0] == 20 * dtype.itemsize
    for a, b in zip(tpu[1:], cpu[1:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_grow_moves_the_storage_address_and_ranges_never_overlap():
    x = torch.zeros(16, device="tpu")
    y = torch.zeros(16, device="tpu")
    s = x.untyped_storage()
    before = s.data_ptr()
    s.resize_(32)  # shrinking stays in place
    assert s.data_ptr() == before and x.data_ptr() == before
    s.resize_(1 << 20)
    assert s.data_ptr() != before and x.data_ptr() == s.data_ptr()
    lo, hi = sorted([x, y], key=lambda t: t.data_ptr())
    assert lo.data_ptr() + lo.untyped_storage().nbytes() <= hi.data_ptr()


def test_bad_sizes_are_refused_clearly():
    x = torch.zeros(4, device="tpu")
    with pytest.raises(RuntimeError, match="whole elements"):
        x.untyped_storage().resize_(6)
    assert x.untyped_storage().nbytes() == 16  # unchanged
    with pytest.raises((RuntimeError, TypeError, OverflowError)):
        x.untyped_storage().resize_(-4)


def test_tensor_resize_grows_its_storage_in_place_like_cpu():
    def steps(dev):
        x = torch.arange(6, dtype=torch.float32, device=dev)
        v = x[2:4]
        x.resize_(3, 4)
        x[1:] = 7.0
        return [x.untyped_storage().nbytes(), x.clone(), v.clone(), x.untyped_storage() is not None]

    cpu, tpu = _both(steps)
    assert cpu[0] == tpu[0] == 48
    for a, b in zip(tpu[1:3], cpu[1:3]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_resize_inside_defer_and_fuse_matches_cpu():
    def steps(dev):
        x = torch.arange(12, dtype=torch.float32, device=dev)
        y = x * 2  # pending in DeferAndFuse mode
        s = y.untyped_storage()
        s.resize_(8 * 4)
        kept = torch.empty(0, device=dev).set_(s).clone()
        s.resize_(0)
        s.resize_(12 * 4)
        y.copy_(x + 1)
        s.resize_(16 * 4)
        whole = torch.empty(0, device=dev).set_(s)
        whole[12:] = -1.0
        return [kept, whole.clone()]

    cpu = steps("cpu")
    E.reset_explain()
    try:
        with E.mode("defer_and_fuse"):
            tpu = steps("tpu")
            got = [t.cpu() for t in tpu]
    finally:
        E.mode("strict")
    assert E.explain().regions, "nothing was deferred"
    for a, b in zip(got, cpu):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fsdp2_free_alloc_and_all_gather_copies_match_cpu():
    """FSDP2's own ops on one rank: `all_gather_copy_in` (the shards copied into the all-gather
    input, a view of the output), then the unsharded parameters' storages brought back
    (`resize_`) and `split_with_sizes_copy` into them, then freed again."""
    import torch.distributed.fsdp._fully_shard._fsdp_collectives  # noqa: F401 - defines torch.ops.fsdp

    torch.manual_seed(0)
    shards = [torch.randn(6), torch.randn(4), torch.randn(2)]
    sizes = [t.numel() for t in shards]

    def steps(dev):
        ins = [t.to(dev) for t in shards]
        world, rank = 2, 1
        out = torch.zeros(world * sum(sizes), device=dev)
        ag_in, ag_out = torch.ops.fsdp.all_gather_copy_in(ins, out, sizes, sum(sizes), rank)
        params = [torch.empty(world * n, device=dev) for n in sizes]
        for p in params:
            p.untyped_storage().resize_(0)  # freed, as after the previous forward
        for p in params:
            p.untyped_storage().resize_(p.numel() * p.itemsize)
        ag_out.copy_(torch.arange(ag_out.numel(), dtype=torch.float32).to(dev))  # what the all-gather wrote
        torch.ops.fsdp.split_with_sizes_copy(
            ag_out.view(world, -1), sizes, dim=1, out=[p.view(world, -1) for p in params]
        )
        got = [ag_in.clone(), *[p.clone() for p in params]]
        for p in params:
            p.untyped_storage().resize_(0)
        return got + [sum(p.untyped_storage().nbytes() for p in params)]

    cpu, tpu = _both(steps)
    for a, b in zip(tpu[:-1], cpu[:-1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert cpu[-1] == tpu[-1] == 0


def test_native_hooks_keep_the_python_hooks_answers():
    from torchtpu.device import module

    # Registered natively before PyTorch's Python hooks: a Python hooks object is refused.
    assert torch._C._acc.register_python_privateuseone_hook(module.Hooks()) is False
    with pytest.raises(NotImplementedError, match="torch.manual_seed"):
        torch.Generator(device="tpu")  # torchtpu's generator is its own (`_random.py`): the error names what to use
    assert torch.ones(2).is_pinned() is False
    x = torch.ones(3, device="tpu", requires_grad=True)
    (x * 2).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 2.0))


def test_resize_on_another_device_stays_there():
    a = torch.arange(6, dtype=torch.float32)
    x = a.to("tpu:2")
    s = x.untyped_storage()
    s.resize_(10 * 4)
    grown = torch.empty(0, device="tpu:2").set_(s)
    assert grown.device == torch.device("tpu", 2) and s.device == torch.device("tpu", 2)
    torch.testing.assert_close(grown[:6].cpu(), a, rtol=0, atol=0)
    s.resize_(3 * 4)
    torch.testing.assert_close((torch.empty(0, device="tpu:2").set_(s) + 1).cpu(), a[:3] + 1, rtol=0, atol=0)
