"""Resizing tpu storages (`UntypedStorage.resize_`, through the native PrivateUse1 hooks'
`resizePrivateUse1Bytes`, docs/eager.md "Tensors and their memory") and what FSDP2 does with
it: free a parameter's storage, bring it back, copy an all-gather into it. Each case runs the
same steps on CPU eager and compares the values (exact: only data movement, no arithmetic
beyond one f32 multiply, which is exact here). Bytes past a storage's old end are
uninitialised in PyTorch, so only the kept prefix and what is written afterwards are compared.

Also `torch.save` / `torch.load` of tpu storages (docs/eager.md "Saving and loading"): views and
tied tensors come back sharing one storage, as the same save and load does on CPU.

And a storage viewed as another dtype (`view_as_complex`, `view_as_real`, `Tensor.view(dtype)`
between a complex dtype and its real component dtype, docs/eager.md "Tensors and their memory"):
reads and writes through the views, and TorchTitan's complex RoPE forward and backward.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys

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


# ---------------------------------------------------------------- torch.save / torch.load
#
# A checkpoint keeps storage sharing (python/torchtpu/device/_serialization.py): each case saves
# the same objects made on CPU and on tpu, loads them, writes through one tensor, and compares
# what came back: which entries share a storage, sizes, strides, offsets and values.


def _shared_objects(dev: str, dtype=torch.float32) -> dict:
    """A base tensor, views of it of every kind, a tensor twice, and another base tied to the
    first entry's storage."""
    base = torch.arange(24, device=dev).to(dtype).reshape(4, 6)
    other = torch.arange(10, 20, device=dev).to(dtype)
    return {
        "base": base,
        "again": base,  # the same tensor object twice (tied weights in a dict)
        "row": base[1],
        "slice": base[1:3, 2:5],
        "t": base.t(),
        "view": base.view(3, 8),
        "narrow": base.narrow(1, 2, 3),
        "offset": torch.as_strided(base, (2, 2), (7, 2), 5),
        "flat": base.view(-1)[3:],
        "other": other,
        "other_view": other[::3],
    }


def _save(obj, **kwargs) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf, **kwargs)
    buf.seek(0)
    return buf


def _layout(objs: dict) -> dict:
    """Per entry: its storage (numbered by first appearance), device, dtype, sizes, strides and
    storage offset."""
    storages: dict = {}
    out = {}
    for k, t in objs.items():
        s = storages.setdefault(t.untyped_storage().data_ptr(), len(storages))
        out[k] = (s, t.device, t.dtype, tuple(t.shape), t.stride(), t.storage_offset())
    return out


def _write_and_read(objs: dict) -> dict:
    """Writes through two entries (a view and a base), then every entry's values on the host:
    where storages are shared, every view sees the writes."""
    objs["slice"][0, 0] = 100
    objs["other"][3] = 0  # other_view's second element
    return {k: t.cpu() for k, t in objs.items()}


def _check_like_cpu(loaded: dict, ref: dict, device) -> None:
    got, want = _layout(loaded), _layout(ref)
    for k in want:
        assert got[k][0] == want[k][0], f"{k}: storage sharing differs from CPU"
        assert got[k][2:] == want[k][2:], k
        assert got[k][1] == torch.device(device), k
    assert len({v[0] for v in got.values()}) == 2  # base and other: two storages
    tpu_values, cpu_values = _write_and_read(loaded), _write_and_read(ref)
    for k in cpu_values:
        torch.testing.assert_close(tpu_values[k], cpu_values[k], rtol=0, atol=0)


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize(
    "map_location, device",
    [
        (None, "tpu:0"),
        ("tpu", "tpu:0"),
        ("tpu:1", "tpu:1"),
        (torch.device("tpu", 2), "tpu:2"),
        ({"tpu:0": "tpu:3"}, "tpu:3"),
        (lambda storage, location: None, "tpu:0"),  # None: the default restore
        (lambda storage, location: torch.serialization.default_restore_location(storage, "tpu:1"), "tpu:1"),
    ],
    ids=["none", "tpu", "tpu:1", "device", "dict", "callable-none", "callable-tpu:1"],
)
def test_save_load_keeps_views_and_tied_tensors_sharing_one_storage(map_location, device, weights_only):
    buf = _save(_shared_objects("tpu"))
    loaded = torch.load(buf, map_location=map_location, weights_only=weights_only)
    ref = torch.load(_save(_shared_objects("cpu")), weights_only=weights_only)
    assert loaded["again"] is loaded["base"]  # pickle's memo, as on CPU
    base = loaded["base"].untyped_storage()
    assert all(loaded[k].untyped_storage().data_ptr() == base.data_ptr() for k in ("row", "t", "offset", "flat"))
    assert base.device == torch.device(device)
    _check_like_cpu(loaded, ref, device)


@pytest.mark.parametrize("map_location", ["cpu", torch.device("cpu"), {"tpu:0": "cpu"}, lambda s, loc: s])
def test_load_to_cpu_shares_as_on_cpu(map_location):
    loaded = torch.load(_save(_shared_objects("tpu")), map_location=map_location)
    ref = torch.load(_save(_shared_objects("cpu")))
    _check_like_cpu(loaded, ref, "cpu")


def test_a_cpu_checkpoint_loads_onto_tpu_sharing():
    loaded = torch.load(_save(_shared_objects("cpu")), map_location="tpu")
    _check_like_cpu(loaded, torch.load(_save(_shared_objects("cpu"))), "tpu:0")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8, torch.bool])
def test_save_load_of_each_dtype_keeps_sharing(dtype):
    loaded = torch.load(_save(_shared_objects("tpu", dtype)))
    ref = torch.load(_save(_shared_objects("cpu", dtype)))
    assert loaded["base"].untyped_storage().nbytes() == 24 * dtype.itemsize
    _check_like_cpu(loaded, ref, "tpu:0")


def test_storages_of_other_devices_come_back_there():
    a = torch.arange(8.0).to("tpu:1")
    b = torch.arange(4, dtype=torch.int32).to("tpu:2")
    buf = _save({"a": a, "a2": a[2:], "b": b, "b2": b.view(2, 2)})
    d = torch.load(buf)
    assert [str(t.device) for t in d.values()] == ["tpu:1", "tpu:1", "tpu:2", "tpu:2"]
    assert d["a"].untyped_storage().data_ptr() == d["a2"].untyped_storage().data_ptr()
    assert d["b"].untyped_storage().data_ptr() == d["b2"].untyped_storage().data_ptr()
    buf.seek(0)
    d = torch.load(buf, map_location={"tpu:1": "tpu:0"})  # b stays on tpu:2
    assert [str(t.device) for t in d.values()] == ["tpu:0", "tpu:0", "tpu:2", "tpu:2"]
    d["a2"].mul_(10)
    torch.testing.assert_close(d["a"].cpu(), torch.tensor([0.0, 1.0, 20, 30, 40, 50, 60, 70]), rtol=0, atol=0)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="device_count"):
        torch.load(buf, map_location="tpu:9")


class _TiedLM(torch.nn.Module):
    """An embedding tied to the output projection, as transformers' `tie_word_embeddings`."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.body = torch.nn.Linear(6, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.relu(self.body(self.embed(ids))))


def test_state_dict_of_a_model_with_tied_weights_round_trips_on_tpu():
    torch.manual_seed(0)
    ref = _TiedLM()
    model = _TiedLM()
    model.load_state_dict(ref.state_dict())
    model.to("tpu")
    assert model.head.weight is model.embed.weight
    ids = torch.tensor([[1, 4, 7, 10]])

    def round_trip(m, dev):
        sd = torch.load(_save(m.state_dict()))
        fresh = _TiedLM().to(dev)
        fresh.load_state_dict(sd)
        return sd, fresh

    sd_cpu, fresh_cpu = round_trip(ref, "cpu")
    sd, fresh = round_trip(model, "tpu")
    assert list(sd) == list(sd_cpu)
    assert sd["embed.weight"].device.type == "tpu"
    assert sd["embed.weight"].untyped_storage().data_ptr() == sd["head.weight"].untyped_storage().data_ptr()
    assert _layout(sd) == {k: (s, torch.device("tpu:0"), *rest) for k, (s, _, *rest) in _layout(sd_cpu).items()}
    sd["embed.weight"][0].fill_(3.0)  # one write, seen through the tied entry
    sd_cpu["embed.weight"][0].fill_(3.0)
    torch.testing.assert_close(sd["head.weight"].cpu(), sd_cpu["head.weight"], rtol=0, atol=0)
    # The loaded model is still tied and computes what CPU computes.
    assert fresh.head.weight is fresh.embed.weight
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids.to("tpu")).cpu(), fresh_cpu(ids), rtol=1e-5, atol=1e-5)
    # A whole module saved and loaded (weights_only=False) keeps its parameters tied as well.
    whole = torch.load(_save(model), weights_only=False)
    assert whole.head.weight is whole.embed.weight and whole.embed.weight.device.type == "tpu"
    assert isinstance(whole.embed.weight, torch.nn.Parameter)


def test_parameters_and_buffers_sharing_a_storage_stay_shared():
    w = torch.nn.Parameter(torch.arange(6.0).to("tpu"))
    buf = _save({"p": w, "half": w.detach()[3:], "grad": torch.ones(6, device="tpu", requires_grad=True)})
    d = torch.load(buf)
    assert isinstance(d["p"], torch.nn.Parameter) and d["p"].requires_grad and d["grad"].requires_grad
    assert d["p"].untyped_storage().data_ptr() == d["half"].untyped_storage().data_ptr()
    with torch.no_grad():
        d["p"][4] = -1
    assert d["half"].cpu().tolist() == [3.0, -1.0, 5.0]


def test_legacy_format_and_plain_pickle_of_tpu_tensors():
    # The legacy format (and plain pickle, which PyTorch builds on it) keeps sharing within one
    # call, as on CPU; plain pickle pickles each tensor's storage on its own, as it does on CPU.
    objs = _shared_objects("tpu")
    loaded = torch.load(_save(objs, _use_new_zipfile_serialization=False))
    ref = torch.load(_save(_shared_objects("cpu"), _use_new_zipfile_serialization=False))
    _check_like_cpu(loaded, ref, "tpu:0")
    x = torch.arange(6.0).to("tpu:1").reshape(2, 3).t()
    y = pickle.loads(pickle.dumps(x))
    assert y.device == x.device and y.stride() == x.stride()
    torch.testing.assert_close(y.cpu(), x.cpu(), rtol=0, atol=0)


def test_mmap_and_skip_data_loads(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save(_shared_objects("tpu"), path)
    loaded = torch.load(path, mmap=True)
    ref = torch.load(_save(_shared_objects("cpu")))
    _check_like_cpu(loaded, ref, "tpu:0")
    with torch.serialization.skip_data():
        torch.save(_shared_objects("tpu"), tmp_path / "empty.pt")
    d = torch.load(tmp_path / "empty.pt", weights_only=False)  # what skip_data wrote: shapes, no values
    assert _layout(d) == _layout(torch.load(path))


def test_save_inside_defer_and_fuse_reads_pending_values():
    def make(dev):
        x = torch.arange(12, dtype=torch.float32, device=dev).reshape(3, 4)
        y = x * 2 + 1  # pending in DeferAndFuse mode
        return {"y": y, "col": y[:, 1], "x": x}

    ref = torch.load(_save(make("cpu")))
    E.reset_explain()
    try:
        with E.mode("defer_and_fuse"):
            buf = _save(make("tpu"))
            loaded = torch.load(buf)
            got = {k: t.cpu() for k, t in loaded.items()}
    finally:
        E.mode("strict")
    assert E.explain().regions, "nothing was deferred"
    assert loaded["y"].untyped_storage().data_ptr() == loaded["col"].untyped_storage().data_ptr()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=0, atol=0)


def test_a_fresh_process_loads_a_tpu_checkpoint(tmp_path):
    # torch.load before any tpu tensor exists: the deserializer is registered with the device.
    path = tmp_path / "ckpt.pt"
    torch.save(_shared_objects("tpu"), path)
    code = (
        "import sys, torch\n"
        "d = torch.load(sys.argv[1])\n"
        "d['slice'][0, 0] = 100\n"
        "print(d['base'].device, d['base'].untyped_storage().data_ptr() == d['t'].untyped_storage().data_ptr(),"
        " d['t'][2, 1].item())\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["tpu:0", "True", "100.0"]


def test_storage_copies_to_the_host():
    # `torch.save` with `use_pinned_memory_for_d2h` (where tpu is the accelerator) copies each
    # storage into a pinned CPU one; `UntypedStorage.to(device="cpu")` does the same copy.
    def steps(dev):
        x = torch.arange(6, dtype=torch.float32, device=dev)
        s = x[2:].untyped_storage()
        host = torch.empty(24, dtype=torch.uint8).untyped_storage()
        host.copy_(s)
        moved = s.to(device="cpu")
        return [torch.empty(0).set_(host), torch.empty(0).set_(moved), moved.device.type]

    cpu, tpu = _both(steps)
    assert cpu[2] == tpu[2] == "cpu"
    for a, b in zip(tpu[:2], cpu[:2]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------- a storage viewed as another dtype
# `view_as_complex`, `view_as_real` and `Tensor.view(dtype)` between a complex dtype and its real
# component dtype (docs/eager.md "Tensors and their memory"): views sharing the storage, with
# PyTorch's sizes, strides and offsets, read and written through on the device. Values are exact
# (data movement and one complex multiply, the same IEEE operations as CPU's), RoPE within 1e-6
# (values) and 1e-5 (gradients). The tests' fallback policy is "error": every op runs on the device.

PAIRS = [(torch.float32, torch.complex64), (torch.float64, torch.complex128)]
MODES = ["strict", "defer_and_fuse"]


def _geometry(t: torch.Tensor) -> tuple:
    return t.dtype, tuple(t.shape), t.stride(), t.storage_offset()


def _like_cpu(steps, mode: str, computed: int = 0) -> None:
    """`steps(device)` on CPU and, in `mode`, on tpu: each result's geometry equal, its values
    equal (the last `computed` results: within torch.testing's defaults for the dtype, as a
    complex multiply may round differently). Twice on tpu: the second time the native per-op
    path runs what the Python path taught it."""
    cpu = steps("cpu")
    for _ in range(2):
        with E.mode(mode):
            tpu = steps("tpu")
            geometries = [_geometry(t) for t in tpu]
            tpu = [t.cpu() for t in tpu]
        assert geometries == [_geometry(t) for t in cpu]
        for i, (a, b) in enumerate(zip(tpu, cpu)):
            tol = {} if i >= len(cpu) - computed else {"rtol": 0, "atol": 0}
            torch.testing.assert_close(a, b, **tol, msg=lambda m, i=i: f"result {i}: {m}")


def _real_and_complex(dev: str, real, cplx) -> tuple:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 6, generator=g, dtype=real).to(dev)
    c = torch.randn(3, 4, 3, generator=g, dtype=cplx).to(dev)
    return x, c


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("real,cplx", PAIRS)
def test_complex_and_real_views_of_a_storage_read_like_cpu(real, cplx, mode):
    def steps(dev):
        x, c = _real_and_complex(dev, real, cplx)
        vc = torch.view_as_complex(x.reshape(3, 4, 3, 2))
        vr = torch.view_as_real(c)
        return [
            vc,
            vc[1:, ::2],  # a strided complex view of real storage
            vc.transpose(0, 2),
            vc.conj(),
            x.view(cplx),
            x[:, 1].view(cplx),
            vr,  # a real view of complex storage, whole elements
            vr[1, :, 1:],
            vr[..., 0],  # one part of each element
            vr.flatten(2),
            vr.flatten(2)[:, :, 1:5],  # pairs cut in two
            c.view(real),
            c[:, 1:3].view(real),
            torch.view_as_real(vc),
            # ops reading the views
            vc * c,
            torch.view_as_real(vc * c).flatten(2) + 1,
            vr[..., 1] * 2,
            vc.conj() * c,
            vc.abs(),
        ]

    _like_cpu(steps, mode, computed=5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("real,cplx", PAIRS)
def test_writes_through_a_complex_or_real_view_are_seen_by_the_storage(real, cplx, mode):
    def steps(dev):
        x, c = _real_and_complex(dev, real, cplx)
        x1 = x.clone()
        torch.view_as_complex(x1.reshape(3, 4, 3, 2))[1:, ::2] = c[1:, ::2] * 2
        x2 = x.clone()
        x2.view(cplx)[0].copy_(c[0])
        x3 = x.clone()
        torch.mul(c, 2, out=torch.view_as_complex(x3.reshape(3, 4, 3, 2)))
        c1 = c.clone()
        r = torch.view_as_real(c1)
        r.add_(1)
        c2 = c.clone()
        torch.view_as_real(c2)[..., 0] = 5.0  # the real parts only
        c3 = c.clone()
        torch.view_as_real(c3).flatten(2)[:, :, 1:5] = -1.0  # pairs cut in two
        c4 = c.clone()
        torch.view_as_real(c4)[1] = x[1].reshape(4, 3, 2)
        c5 = c.clone()
        torch.view_as_real(c5).flatten(2).copy_(x)  # the whole storage
        c6 = c.clone()
        c6.view(real).zero_()
        x4 = x.clone()
        v = torch.view_as_complex(x4.reshape(3, 4, 3, 2))
        v.mul_(c)  # a complex multiply: last, compared within rounding
        return [x1, x2, x3, c1, r, c2, c3, c4, c5, c6, x4, v]

    _like_cpu(steps, mode, computed=2)


@pytest.mark.parametrize("mode", MODES)
def test_conjugated_negated_empty_and_0d_views_like_cpu(mode):
    # Writes through a lazily conjugated or negated view store the conjugate or negative of
    # the values (as on CPU), whether or not the view is of another dtype.
    def steps(dev):
        x = torch.arange(12.0, device=dev).reshape(3, 4)
        torch.view_as_complex(x.reshape(3, 2, 2)).conj().mul_(2j)
        z = torch.view_as_complex(torch.arange(12.0, device=dev).reshape(3, 2, 2)).clone()
        z.conj().mul_(2j)
        w = torch.view_as_complex(torch.arange(12.0, device=dev).reshape(3, 2, 2)).clone()
        imag = w.conj().imag  # a negated real view of complex storage
        assert imag.is_neg()
        imag.add_(1)
        y = torch.arange(12.0, device=dev).reshape(3, 2, 2)
        torch.view_as_complex(y).conj().copy_(torch.ones(3, 2, dtype=torch.complex64, device=dev) * (1 + 2j))
        s = torch.tensor(1 + 2j, device=dev)
        torch.view_as_real(s)[0] = 7.0
        return [
            x,
            z,
            w,
            y,
            s,
            imag * 1,
            torch.view_as_real(s) * 1,
            torch.view_as_complex(torch.tensor([3.0, 4.0], device=dev)).abs(),
            torch.view_as_complex(torch.empty(0, 2, device=dev)) * 2,
        ]

    _like_cpu(steps, mode)


@pytest.mark.parametrize("mode", MODES)
def test_views_as_a_dtype_of_another_size_read_and_write_like_cpu(mode):
    # Tensor.view(dtype) of any real dtype: the storage adopts the view's dtype (its bytes
    # unchanged), and adopts the old one back when that is used again. Continuous batching's
    # KV cache is made as bytes and used as floats this way. Exact: the bytes are the same.
    def steps(dev):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 8, generator=g).to(dev)
        raw = torch.zeros(64, dtype=torch.uint8, device=dev)  # bytes, used as 16 floats
        cache = raw.view(torch.float32).view(4, 4)
        cache[1:3] = x[:, :4]
        halves = x.view(torch.int16)  # a smaller element: the last dim doubles
        ints = x.view(torch.int32)
        wide = x.view(torch.int64)  # a larger element: the last dim halves
        small = torch.arange(4.0, device=dev).view(torch.bfloat16)  # no NaN bit patterns
        y = x.clone()
        y.view(torch.int32).bitwise_and_(0x7FFFFFFF)  # clears the sign bits: abs
        rows = raw.view(4, 16)  # the bytes again, written, then read as floats
        rows[0] = raw.view(4, 16)[2]
        flags = torch.tensor([True, False, True], device=dev).view(torch.uint8)
        return [cache, raw, halves, ints, wide, small, y, rows, raw.view(torch.float32), flags, ints[:, 1:] + 1]

    _like_cpu(steps, mode, computed=1)


def test_views_the_device_cannot_convert_are_refused():
    x = torch.randn(2, 4, device="tpu")
    with pytest.raises(NotImplementedError, match=r"complex128 view of torch.float32 storage \(Tensor.view\(dtype\)\)"):
        (x.view(torch.complex128) + 1).cpu()
    b = torch.ones(8, dtype=torch.bool, device="tpu")
    with pytest.raises(NotImplementedError, match=r"bools as bytes only"):
        (b.view(torch.int32) + 1).cpu()


def _rope_cache(dim: int, end: int, dev: str) -> torch.Tensor:
    # TorchTitan's ComplexRoPE cache (made on the device, as its `_init_self_buffers` does).
    freqs = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=dev)[: dim // 2].float() / dim))
    freqs = torch.outer(torch.arange(end, device=dev), freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def _apply_rotary_emb(q, k, cache):
    # TorchTitan's `ComplexRoPE.apply_rotary_emb` (torchtitan/models/common/rope.py).
    xq_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * cache).flatten(3)
    xk_out = torch.view_as_real(xk_ * cache).flatten(3)
    return xq_out.type_as(q), xk_out.type_as(k)


@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_rope_forward_and_backward_like_cpu(mode, checkpointed):
    from torch.utils.checkpoint import checkpoint

    def rope(dev):
        g = torch.Generator().manual_seed(0)
        wq, wk = (torch.randn(16, 32, generator=g).div(4).to(dev).requires_grad_() for _ in range(2))
        x = torch.randn(2, 6, 16, generator=g).to(dev).requires_grad_()
        w = torch.randn(2, 6, 4, 8, generator=g).to(dev)
        cache = _rope_cache(8, 12, dev)[:6].view(1, 6, 1, 4)

        def block(x, wq, wk):
            q, k = (x @ wq).view(2, 6, 4, 8), (x @ wk).view(2, 6, 4, 8)
            return _apply_rotary_emb(q, k, cache)

        q, k = checkpoint(block, x, wq, wk, use_reentrant=False) if checkpointed else block(x, wq, wk)
        ((q * w).sum() + (k * w * w).sum()).backward()
        return [q.detach(), k.detach(), x.grad, wq.grad, wk.grad]

    cpu = rope("cpu")
    with E.mode(mode):
        tpu = [t.cpu() for t in rope("tpu")]
    for a, b in zip(tpu[:2], cpu[:2]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    for a, b in zip(tpu[2:], cpu[2:]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
