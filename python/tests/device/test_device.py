"""The eager `tpu` device (docs/eager.md): registration, tensors in PJRT memory, aliasing,
ops through one-op programs compared with CPU eager, the program cache, RNG, the CPU
fallback, strict/debug modes, and torch.compile on tpu tensors.

Tolerances: one-op programs compute in the op's dtype as XLA does; elementwise f32 results
agree with eager to rounding (rtol 1.3e-6, atol 1e-5, torch.testing's defaults for f32),
reductions and matmuls to a few ulps of their inputs' magnitude (rtol 1e-5, atol 1e-5)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
import torch

import torchtpu
from torchtpu.device import _programs

TPU = "tpu"


@pytest.fixture(autouse=True)
def fresh_stats():
    torchtpu.reset_stats()


def compiled_programs() -> int:
    return torchtpu.stats()["eager_programs_compiled"]


def close(a, b, rtol=1e-5, atol=1e-5):
    torch.testing.assert_close(a.cpu() if a.device.type == TPU else a, b, rtol=rtol, atol=atol)


# ---------------------------------------------------------------- registration


def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


def test_fresh_process_without_import_torchtpu():
    code = (
        "import sys, torch\n"
        "x = torch.randn(4, 4, device='tpu')\n"
        "print(x.device, tuple(x.shape), 'torchtpu.errors' in sys.modules)\n"
        "print(torch.accelerator.current_accelerator())\n"
        "torch.accelerator.synchronize()\n"
        "print(torch.tpu.is_available(), torch.tpu.device_count())\n"
    )
    # The accelerator story: opted in (on the CPU plugin tpu is not detected without it).
    r = _fresh(code, TORCHTPU_DEVICE="1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    # The device works, and autoload did not pull in Dynamo (torchtpu.errors) until an op ran.
    assert lines[0].startswith("tpu:0 (4, 4)")
    assert lines[1] == "tpu"
    assert lines[2] == "True 4"  # the CPU plugin's addressable devices


def test_autoload_can_be_turned_off():
    r = _fresh("import torch\ntorch.empty(2, device='tpu')\n", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode != 0
    assert "tpu" in r.stderr


def test_import_torch_does_not_import_dynamo():
    r = _fresh("import sys, torch\nprint('torch._dynamo' in sys.modules, torch._C._get_privateuse1_backend_name())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False tpu"


# ---------------------------------------------------------------- tensors and memory


def test_every_kernel_in_the_table_is_registered_for_tpu_and_resolves():
    """`_kernel_table.KERNELS` is the one list of the device's own kernels: each op in it has a
    PrivateUse1 kernel, and each names a function that exists."""
    from torchtpu.device import _kernel_table

    for name in _kernel_table.KERNELS:
        assert callable(_kernel_table.resolve(name)), name
        op, _, overload = name.partition(".")
        schema = getattr(getattr(torch.ops.aten, op), overload or "default").name()
        assert torch._C._dispatch_has_kernel_for_dispatch_key(schema, "PrivateUse1"), name


def test_round_trips_and_host_reads():
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = a.to(TPU)
    assert t.device.type == TPU and t.dtype == a.dtype and t.shape == a.shape
    assert torch.equal(t.cpu(), a)
    assert t.tolist() == a.tolist()
    assert t[1, 2].item() == 6.0
    assert "device='tpu:0'" in repr(t)
    dst = torch.empty(3, 4, dtype=torch.float64)
    dst.copy_(t)  # tpu -> CPU with a dtype conversion
    assert torch.equal(dst, a.double())
    t2 = torch.zeros(3, 4, device=TPU, dtype=torch.int32)
    t2.copy_(a)  # CPU -> tpu with a dtype conversion
    assert torch.equal(t2.cpu(), a.int())


def test_torch_save_and_load():
    t = torch.randn(3, 5).to(TPU)
    buf = io.BytesIO()
    torch.save({"t": t, "p": torch.nn.Parameter(t.clone())}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["t"].device.type == TPU
    assert torch.equal(loaded["t"].cpu(), t.cpu())
    assert isinstance(loaded["p"], torch.nn.Parameter) and torch.equal(loaded["p"].cpu(), t.cpu())


def test_memory_accounting():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    t = torch.ones(256, 256, device=TPU)  # 256 KiB
    assert torch.tpu.memory_allocated() - before >= 256 * 256 * 4
    assert torch.tpu.max_memory_allocated() >= before + 256 * 256 * 4
    del t
    assert torch.tpu.memory_allocated() - before < 256 * 256 * 4


# ---------------------------------------------------------------- views and in-place ops


def test_view_writes_reach_the_base():
    a = torch.arange(12.0).reshape(3, 4)
    x = a.to(TPU)
    y = x[0]
    y.add_(1)  # as on CPU: y is a view of x
    a[0].add_(1)
    close(x, a)
    x.t()[1].mul_(10)  # a strided view
    a.t()[1].mul_(10)
    close(x, a)
    flat = x.view(-1)
    flat[::5] = -1.0
    a.view(-1)[::5] = -1.0
    close(x, a)
    close(y, a[0])  # the first view sees later writes too
    x[1:, 2:].zero_()
    a[1:, 2:].zero_()
    close(x, a)


def test_in_place_on_views_of_one_storage():
    """An in-place op on a strided view computes the new buffer in its own program; a foreach
    over two views of one storage must keep both writes."""
    x = torch.arange(16.0).reshape(4, 4)
    t = x.to(TPU)
    t.t()[1].add_(100)
    x.t()[1].add_(100)
    close(t, x)
    xs = torch.zeros(6)
    ts = xs.to(TPU)
    torch._foreach_add_([ts[0:3], ts[3:6]], 1.0)
    torch._foreach_add_([xs[0:3], xs[3:6]], 1.0)
    close(ts, xs)
    t[2:4, ::2].mul_(t[0:2, 1::2])  # reads and writes of one storage in one op (no overlap)
    x[2:4, ::2].mul_(x[0:2, 1::2])
    close(t, x)


def test_views_share_storage_and_report_strides():
    x = torch.randn(4, 6).to(TPU)
    v = x.t()
    assert v.stride() == (1, 6) and not v.is_contiguous()
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert x[1:].storage_offset() == 6
    close(v.contiguous(), x.cpu().t())


def test_out_variants_and_resize():
    a, b = torch.randn(5), torch.randn(5)
    out = torch.empty(0, device=TPU)
    torch.add(a.to(TPU), b.to(TPU), out=out)  # out is resized to 5
    close(out, a + b)


# ---------------------------------------------------------------- ops against CPU eager


OPS = [
    ("add", lambda a, b: a + b),
    ("mul_scalar", lambda a, b: a * 2.5),
    ("matmul", lambda a, b: a @ b.t()),
    ("softmax", lambda a, b: torch.softmax(a, -1)),
    ("where", lambda a, b: torch.where(a > b, a, b)),
    ("sum_dim", lambda a, b: a.sum(1, keepdim=True)),
    ("mean", lambda a, b: a.mean()),
    ("cat", lambda a, b: torch.cat([a, b], 0)),
    ("gelu", lambda a, b: torch.nn.functional.gelu(a)),
    ("layer_norm", lambda a, b: torch.nn.functional.layer_norm(a, (6,))),
    ("index", lambda a, b: a[torch.tensor([2, 0])]),
    ("int_floor_div", lambda a, b: (a * 10).long() // 3),
    ("argmax", lambda a, b: a.argmax(-1)),
    ("cumsum", lambda a, b: a.cumsum(0)),
]


@pytest.mark.parametrize("name,fn", OPS, ids=[n for n, _ in OPS])
def test_ops_match_cpu_eager(name, fn):
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    expected = fn(a, b)
    got = fn(a.to(TPU), b.to(TPU))
    assert got.device.type == TPU and got.dtype == expected.dtype
    close(got, expected)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_a_cat_of_many_tensors_matches_cpu_through_small_programs(mode):
    """A cat (or stack) of more tensors than CAT_SPLIT_ABOVE, of mixed shapes and dtypes,
    equals CPU eager exactly (and its gradient reaches each input), and no cat program has more than
    CAT_SPLIT_ABOVE operands (XLA's compile time grows with them: `torch.stack` of 3000
    tensors took 14 s in one program)."""
    from torchtpu.device import _dispatch

    torch.manual_seed(0)
    n = 2 * _dispatch.CAT_SPLIT_ABOVE + 7  # groups, a remainder
    xs = [torch.randn(i % 3 + 1, 4, dtype=torch.float64 if i == n - 1 else torch.float32) for i in range(n)]
    leaves = [x.clone().requires_grad_() for x in xs]
    with torchtpu.eager.mode(mode):
        got = torch.cat([x.to(TPU) for x in leaves])
        stacked = torch.stack([x[0].to(TPU) for x in xs], dim=1).cpu()
        across = torch.cat([x.t().to(TPU) for x in xs], dim=-1).cpu()
        got.sum().backward()
        got = got.cpu()
    assert got.dtype == torch.float64 and torch.equal(got, torch.cat(xs))
    assert torch.equal(stacked, torch.stack([x[0] for x in xs], dim=1))
    assert torch.equal(across, torch.cat([x.t() for x in xs], dim=-1))
    assert all(torch.equal(x.grad, torch.ones_like(x)) for x in leaves)
    cats = [p for p in _programs._programs.values() if isinstance(p, _programs.Program) and "aten_cat" in p.name]
    assert cats and max(len(p.sources) for p in cats) <= _dispatch.CAT_SPLIT_ABOVE


def test_warm_ops_compile_nothing_and_floats_are_inputs():
    x = torch.randn(8).to(TPU)
    y = torch.randn(8).to(TPU)
    x.add_(y, alpha=0.5)
    n = compiled_programs()
    for lr in (0.1, 0.01, 0.003):  # a changing learning rate: an input, not a new program
        x.add_(y, alpha=-lr)
        torch.addcdiv(x, y, y.abs() + 1, value=lr)
    torch.addcdiv(x, y, y.abs() + 1, value=0.7)
    assert compiled_programs() - n <= 4  # abs, add(+1) and addcdiv's first compile, at most
    n = compiled_programs()
    for lr in (0.2, 0.02):
        x.add_(y, alpha=-lr)
        torch.addcdiv(x, y, y.abs() + 1, value=lr)
    assert compiled_programs() == n


def test_autograd_matches_cpu():
    torch.manual_seed(0)
    a = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 2, requires_grad=True)
    ta = a.detach().to(TPU).requires_grad_()
    tw = w.detach().to(TPU).requires_grad_()
    (torch.tanh(a @ w) ** 2).sum().backward()
    (torch.tanh(ta @ tw) ** 2).sum().backward()
    assert ta.grad.device.type == TPU
    close(ta.grad, a.grad)
    close(tw.grad, w.grad)


# ---------------------------------------------------------------- random numbers


def test_rng_is_seeded_and_on_device():
    torch.manual_seed(123)
    a = torch.randn(1000, device=TPU)
    torch.manual_seed(123)
    b = torch.randn(1000, device=TPU)
    c = torch.randn(1000, device=TPU)
    assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(b.cpu(), c.cpu())
    torch.tpu.manual_seed(5)
    u = torch.rand(20000, device=TPU).cpu()
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean().item() - 0.5) < 0.01
    n = torch.randn(20000, device=TPU).cpu()
    assert abs(n.mean().item()) < 0.03 and abs(n.std().item() - 1) < 0.03
    i = torch.randint(3, 7, (2000,), device=TPU).cpu()
    assert set(i.tolist()) == {3, 4, 5, 6}
    assert torchtpu.stats()["eager_cpu_fallbacks"].get("aten.normal", 0) == 0


def test_dropout_on_device():
    torch.manual_seed(0)
    x = torch.ones(10000, device=TPU)
    y = torch.nn.functional.dropout(x, 0.25, training=True).cpu()
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    assert torch.allclose(y[y != 0], torch.tensor(1 / 0.75))


# ---------------------------------------------------------------- fallback and modes


@pytest.mark.allow_fallback
def test_op_without_lowering_runs_on_cpu_and_is_recorded():
    x = torch.tensor([3.0, 1.0, 3.0, 2.0])
    with torchtpu.eager.fallback("cpu"):
        got = torch.unique(x.to(TPU))  # no lowering: sorted unique values have a data-dependent size
    assert got.device.type == TPU and torch.equal(got.cpu(), torch.tensor([1.0, 2.0, 3.0]))
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {"aten._unique2": 1}
    with torchtpu.eager.fallback("error"), pytest.raises(torchtpu.UnsupportedError, match="unique"):
        torch.unique(x.to(TPU))


def test_boolean_masks_and_data_dependent_sizes():
    """nonzero, masked_select and mask indexing read the count back, then run bucket-sized
    programs: a count that changes compiles once per power-of-two bucket."""
    x = torch.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, 0.0]])
    t = x.to(TPU)
    assert torch.equal(torch.nonzero(t).cpu(), torch.nonzero(x))
    assert torch.equal(torch.masked_select(t, t > 0).cpu(), torch.masked_select(x, x > 0))
    assert torch.equal(t[t > 0].cpu(), x[x > 0])
    mask = torch.tensor([True, False])
    assert torch.equal(t[mask].cpu(), x[mask])  # a CPU mask, as CUDA tensors allow
    t[t < 0] = 0.0
    x[x < 0] = 0.0
    assert torch.equal(t.cpu(), x)
    t[t > 2] = torch.tensor([7.0, 8.0]).to(TPU)
    x[x > 2] = torch.tensor([7.0, 8.0])
    assert torch.equal(t.cpu(), x)
    y = torch.randn(4, 3, requires_grad=True)
    yt = y.detach().to(TPU).requires_grad_()
    y[y > 0].sum().backward()
    yt[yt > 0].sum().backward()
    assert torch.equal(yt.grad.cpu(), y.grad)
    z = torch.randn(200)
    zt = z.to(TPU)
    for k in range(3):
        zt[zt > k / 10.0]
    n = compiled_programs()
    for k in range(3, 12):  # counts between ~20 and ~80: buckets 32, 64, 128 at most
        torch.testing.assert_close(zt[zt > k / 10.0 - 0.6].cpu(), z[z > k / 10.0 - 0.6])
    assert compiled_programs() - n <= 6
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_mixing_devices_is_a_clear_error():
    with pytest.raises(RuntimeError, match="same device"):
        torch.randn(3).to(TPU) + torch.randn(3)
    # A 0-d CPU tensor is a scalar, as on CUDA.
    close(torch.ones(3).to(TPU) * torch.tensor(2.0), torch.full((3,), 2.0))


def test_debug_mode_names_op_types_and_frame():
    # A complex view of float32 storage other than complex64 (view(dtype)) is not supported
    # on tpu: the op reading it fails.
    v = torch.randn(2, 4).to(TPU).view(torch.complex128)
    with torchtpu.eager.mode("debug"):
        assert torchtpu.eager.current_mode() == "debug"
        with pytest.raises(torchtpu.DeviceOpError) as info:
            v + 1
    assert torchtpu.eager.current_mode() == "strict"
    err = info.value
    assert err.op.startswith("aten::add")  # add.Tensor reaches the device as add.out
    assert err.input_types == ["c128[2, 1]", "i64[] (cpu)"]  # the 1 is a wrapped number
    assert err.frame is not None and err.frame.startswith(__file__)
    assert "view(dtype)" in str(err)
    # PyTorch's own shape check (run on meta tensors) carries the op and types too.
    with torchtpu.eager.mode("debug"), pytest.raises(torchtpu.DeviceOpError) as info:
        torch.mm(torch.randn(2, 3).to(TPU), torch.randn(4, 5).to(TPU))
    assert info.value.op == "aten::mm" and info.value.input_types == ["f32[2, 3]", "f32[4, 5]"]
    # Outside debug mode the error is PyTorch's, unwrapped.
    with pytest.raises(RuntimeError, match=r"\[2, 3\] X \[4, 5\]") as plain:
        torch.mm(torch.randn(2, 3).to(TPU), torch.randn(4, 5).to(TPU))
    assert not isinstance(plain.value, torchtpu.DeviceOpError)


def test_debug_mode_finds_the_first_non_finite_op():
    x = torch.zeros(4).to(TPU)
    with torchtpu.eager.mode("debug", check_finite=True):
        y = x + 1  # finite
        with pytest.raises(torchtpu.NonFiniteError) as info:
            z = x / x  # 0/0: the first NaN
            z * 2
    assert info.value.op.startswith("aten::div")  # div.Tensor reaches the device as div.out
    assert torch.equal(y.cpu(), torch.ones(4))


def test_mode_env_and_bad_mode():
    with pytest.raises(ValueError, match="strict"):
        torchtpu.eager.mode("fast")
    r = _fresh("import torch, torchtpu.eager as e\nprint(e.current_mode())", TORCHTPU_EAGER_MODE="debug")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "debug"


# ---------------------------------------------------------------- torch.compile on tpu tensors


def test_compiled_graph_takes_and_returns_device_tensors():
    def f(a, b):
        return torch.relu(a @ b) + 1, a.sum()

    c = torch.compile(f, backend="torchtpu")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    ta, tb = a.to(TPU), b.to(TPU)
    ops_before = torchtpu.stats()["eager_ops"]
    out, s = c(ta, tb)
    assert out.device.type == TPU and s.device.type == TPU
    # The compiled program ran on the device buffers: no eager op copied anything around it.
    assert torchtpu.stats()["eager_ops"] - ops_before <= 2
    ref_out, ref_s = f(a, b)
    close(out, ref_out)
    close(s, ref_s)


def test_compiled_graph_rejects_mixed_devices():
    def f(a, b):
        return a.sum() + b.sum()

    c = torch.compile(f, backend="torchtpu")
    with pytest.raises(Exception, match="device"):
        c(torch.randn(4).to(TPU), torch.randn(4))


def test_program_cache_is_reused_across_calls():
    _programs.clear()
    x = torch.randn(16).to(TPU)
    y = torch.sin(x)
    n = compiled_programs()
    for _ in range(5):
        y = torch.sin(x)
    assert compiled_programs() == n
    close(y, torch.sin(x.cpu()), rtol=1.3e-6, atol=1e-5)


def test_compiled_training_step_on_tpu_matches_cpu():
    """torch.compile of a module on tpu: forward and backward programs run on the device
    buffers, the optimizer step runs eagerly on tpu; three AdamW steps match CPU eager
    (losses to 1e-5 relative, parameters to 1e-6 absolute: the same f32 arithmetic reordered)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    import copy

    on_tpu = copy.deepcopy(model).to(TPU)
    compiled = torch.compile(on_tpu, backend="torchtpu")
    opt_cpu = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt_tpu = torch.optim.AdamW(on_tpu.parameters(), lr=1e-2)
    xt, yt = x.to(TPU), y.to(TPU)
    for _ in range(3):
        opt_cpu.zero_grad()
        ref = torch.nn.functional.cross_entropy(model(x), y)
        ref.backward()
        opt_cpu.step()
        opt_tpu.zero_grad()
        loss = torch.nn.functional.cross_entropy(compiled(xt), yt)
        loss.backward()
        opt_tpu.step()
        assert loss.device.type == TPU
        torch.testing.assert_close(loss.cpu(), ref, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), on_tpu.parameters()):
        assert q.grad.device.type == TPU
        torch.testing.assert_close(q.cpu(), p.detach(), rtol=0, atol=1e-6)


def test_foreach_ops_run_as_one_program_per_list():
    xs = [torch.randn(3, 2), torch.randn(5)]
    ts = [x.to(TPU) for x in xs]
    torch._foreach_mul_(xs, 1.5)
    ops = torchtpu.stats()["eager_ops"]
    torch._foreach_mul_(ts, 1.5)
    assert torchtpu.stats()["eager_ops"] - ops == 1  # the list as a whole, not one op per tensor
    for x, t in zip(xs, ts):
        close(t, x)
    outs = torch._foreach_sqrt([t.abs() for t in ts])
    assert isinstance(outs, (list, tuple)) and len(outs) == 2
    close(outs[1], xs[1].abs().sqrt())


def test_convolution_forward_and_backward():
    """conv2d reaches the device as convolution_overrideable (and its backward as
    convolution_backward_overrideable): both run as programs; f32 sums of 27 products agree
    to a few ulps (rtol 1e-5)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    xt, wt, bt = (t.detach().to(TPU).requires_grad_() for t in (x, w, b))
    y = torch.nn.functional.conv2d(x, w, b, padding=1, stride=2)
    yt = torch.nn.functional.conv2d(xt, wt, bt, padding=1, stride=2)
    close(yt, y.detach())
    g = torch.randn_like(y)
    y.backward(g)
    yt.backward(g.to(TPU))
    for a, ref in ((xt, x), (wt, w), (bt, b)):
        close(a.grad, ref.grad, rtol=1e-5, atol=1e-4)
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_factories_with_out_forms():
    close(torch.arange(2, 11, 3, device=TPU), torch.arange(2, 11, 3))
    close(torch.linspace(-1, 1, 7, device=TPU), torch.linspace(-1, 1, 7))
    close(torch.eye(3, 4, device=TPU), torch.eye(3, 4))
    close(torch.full((2, 2), 3.5, device=TPU), torch.full((2, 2), 3.5))
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_wrapped_numbers_conj_and_neg_views():
    x = torch.arange(6)
    t = x.to(TPU)
    # `x % 4` reaches the device as remainder.Tensor(x, 4): a Python number in a Tensor slot.
    for f in (lambda a: a % 4, lambda a: torch.fmod(a, 4), lambda a: a & 3, lambda a: a ^ 3, lambda a: a * 2.5):
        got, want = f(t), f(x)
        assert got.dtype == want.dtype
        close(got, want)
    y = t.clone()
    y.remainder_(4)
    close(y, x % 4)
    c = torch.tensor([1 + 2j, 3 - 1j])
    ct = c.to(TPU)
    close(ct.conj(), c.conj())  # the conjugate bit is resolved on the way to the host
    close(ct.conj() + 0, c.conj() + 0)  # and inside programs
    close(torch._neg_view(t.float()), -x.float())


def test_in_place_view_ops_and_views_inside_decompositions():
    a = torch.randn(2, 3)
    t = a.to(TPU)
    t.t_()  # as_strided_ re-points the tensor (PyTorch's own kernel checks host bytes)
    assert t.shape == (3, 2)
    close(t, a.t())
    u = torch.randn(2, 1, 3).to(TPU)
    u.squeeze_(1)
    assert u.shape == (2, 3)
    z = torch.arange(50.0).reshape(5, 5, 2)
    # trace's decomposition takes its own diagonal view of a (non-contiguous) view
    assert torch.trace(z.to(TPU)[..., 0]).item() == torch.trace(z[..., 0]).item()
    f = torch.arange(6).to(TPU)
    f.floor_divide_(torch.tensor(4).to(TPU))  # floor_divide_.Tensor is floor_divide.default
    assert f.tolist() == [0, 0, 0, 0, 1, 1]
    close(t.to("cpu", non_blocking=True), a.t())


@pytest.mark.parametrize("dims", [1, 2])
def test_batch_norm_updates_running_stats(dims):
    """native_batch_norm writes its running statistics without saying so in its schema: the
    device runs the functional form and writes them back. Train and eval outputs, gradients
    and statistics match CPU eager (rtol 1e-5, atol 1e-5: sums over the batch)."""
    import copy

    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3) if dims == 1 else torch.nn.BatchNorm2d(4)
    x = torch.randn(4, 3) if dims == 1 else torch.randn(2, 4, 5, 5)
    bt = copy.deepcopy(bn).to(TPU)
    xr, xt = x.clone().requires_grad_(), x.to(TPU).requires_grad_()
    for _ in range(2):
        y, yt = bn(xr), bt(xt)
        close(yt, y.detach())
    y.square().sum().backward()
    yt.square().sum().backward()
    close(xt.grad, xr.grad, atol=1e-4)
    close(bt.weight.grad, bn.weight.grad, atol=1e-4)
    close(bt.running_mean, bn.running_mean)
    close(bt.running_var, bn.running_var)
    assert bt.num_batches_tracked.item() == 2
    bn.eval()
    bt.eval()
    close(bt(x.to(TPU)), bn(x).detach())
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_equal_and_cov():
    a = torch.randn(3, 4)
    t = a.to(TPU)
    assert torch.equal(t, t.clone()) and not torch.equal(t, t + 1) and not torch.equal(t, t[:2])
    close(torch.cov(t), torch.cov(a))
    assert torchtpu.stats()["eager_cpu_fallbacks"] == {}


def test_deepcopy_keeps_values_and_aliasing():
    import copy

    m = torch.nn.BatchNorm1d(3).to(TPU)
    m(torch.randn(4, 3).to(TPU))
    m2 = copy.deepcopy(m)
    assert isinstance(m2.weight, torch.nn.Parameter) and m2.weight.device.type == TPU
    assert torch.equal(m2.running_mean.cpu(), m.running_mean.cpu())
    m2.running_mean.add_(1)  # a copy: the original is unchanged
    assert not torch.equal(m2.running_mean.cpu(), m.running_mean.cpu())
    t = torch.randn(4).to(TPU)
    t2, v2 = copy.deepcopy([t, t[1:]])
    v2.add_(1)  # the copies share a storage, as the originals did
    assert torch.equal(t2.cpu()[1:], v2.cpu())
    assert not torch.equal(t2.cpu(), t.cpu())


def test_storage_methods_do_not_crash():
    """PyTorch has no allocator for a Python backend's storages: what would allocate through
    it is routed or refused with a clear error (each case once crashed the process)."""
    t = torch.arange(4.0).to(TPU)
    with pytest.raises(RuntimeError, match="storages cannot be allocated"):
        torch.UntypedStorage(4, device=TPU)
    host = t.untyped_storage().cpu()
    assert host.nbytes() == 16
    assert torch.equal(torch.frombuffer(bytearray(bytes(host.tolist())), dtype=torch.float32), torch.arange(4.0))
    assert torch.UntypedStorage(8).nbytes() == 8  # CPU storages as before
