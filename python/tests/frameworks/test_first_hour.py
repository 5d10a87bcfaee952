"""What a CUDA user writes in the first hour on tpu (issue 28): `import torchtpu.device` as the
first import, `torch.compile(model)` with its default backend on tpu tensors, and the `tpu`
Dynamo backend name that transformers compiles tpu models with (with a `mode=`), `histc` of
integers (MoE routing) and `pin_memory` where tpu is the accelerator. Values are compared with
CPU eager."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import models
import pytest
import torch
from models import tiny_llama

import torchtpu

TPU = "tpu"


def _run(code: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TORCHTPU_DEVICE", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=models.importable(env),
        timeout=timeout,
    )


def test_import_torchtpu_device_as_the_first_import():
    r = _run(
        """
        import torchtpu.device
        import torch
        assert torchtpu.device.is_registered()
        x = torch.arange(6.0, device="tpu").reshape(2, 3)
        print((x * 2).sum().item())
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "30.0"


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def test_default_backend_on_tpu_tensors_compiles_with_torchtpu():
    torch._dynamo.reset()
    ref = _mlp()
    model = _mlp().to(TPU)
    x = torch.randn(5, 8)
    seen = torchtpu.stats()["graphs_seen"]
    compiled = torch.compile(model)  # Inductor, the default
    out = compiled(x.to(TPU))
    assert out.device.type == TPU
    assert torchtpu.stats()["graphs_seen"] > seen  # torchtpu compiled it, not Inductor
    torch.testing.assert_close(out.cpu(), ref(x), rtol=1e-5, atol=1e-5)
    # A compiled training step: gradients match CPU eager.
    loss = compiled(x.to(TPU)).square().mean()
    loss.backward()
    ref(x).square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)


def test_default_backend_still_uses_inductor_for_cpu_tensors():
    torch._dynamo.reset()
    seen = torchtpu.stats()["graphs_seen"]
    f = torch.compile(lambda a: a.sin() + 1)
    x = torch.randn(4)
    torch.testing.assert_close(f(x), x.sin() + 1)
    assert torchtpu.stats()["graphs_seen"] == seen


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_tpu_backend_name_with_a_mode(mode):
    torch._dynamo.reset()
    ref = _mlp()
    model = _mlp().to(TPU)
    x = torch.randn(3, 8)
    out = torch.compile(model, backend="tpu", mode=mode, dynamic=False)(x.to(TPU))
    torch.testing.assert_close(out.cpu(), ref(x), rtol=1e-5, atol=1e-5)


def test_hf_static_cache_generate_on_tpu_matches_cpu_with_at_most_two_compiles():
    """transformers compiles a tpu model's decoding step with `backend="tpu", mode="default"`
    (`PreTrainedModel._default_compile_config`)."""
    pytest.importorskip("transformers")
    model = tiny_llama.model(seed=0, hidden_size=64, intermediate_size=128).eval()
    ids = torch.randint(0, 128, (1, 5))
    ref = model.generate(ids, max_new_tokens=6, do_sample=False)
    torch._dynamo.reset()
    before = torchtpu.stats()["graphs_compiled"]
    out = model.to(TPU).generate(ids.to(TPU), max_new_tokens=6, do_sample=False, cache_implementation="static")
    assert torch.equal(out.cpu(), ref)
    compiled = torchtpu.stats()["graphs_compiled"] - before
    assert 1 <= compiled <= 2, compiled


def _histc_int_reference(x: torch.Tensor, bins: int, lo: int, hi: int) -> torch.Tensor:
    """CUDA's integer histc: bin = (x - min) * bins / (max - min) in integers, the top edge in
    the last bin, outside values dropped (CPU has no integer kernel)."""
    if lo == hi:
        lo, hi = int(x.min()), int(x.max())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
    counts = [0] * bins
    for v in x.flatten().tolist():
        if lo <= v <= hi:
            counts[min((v - lo) * bins // (hi - lo), bins - 1)] += 1
    return torch.tensor(counts, dtype=x.dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16])
@pytest.mark.parametrize("bins,lo,hi", [(4, 0, 3), (8, 0, 0), (3, 1, 2), (5, 2, 9)])
def test_histc_of_integers_on_tpu(dtype, bins, lo, hi):
    torch.manual_seed(0)
    x = torch.randint(0, 10, (3, 7)).to(dtype)
    out = torch.histc(x.to(TPU), bins=bins, min=lo, max=hi)
    assert out.dtype == dtype
    assert torch.equal(out.cpu(), _histc_int_reference(x, bins, lo, hi))


def test_histc_of_floats_unchanged_and_a_constant_int_tensor():
    x = torch.randn(50)
    torch.testing.assert_close(torch.histc(x.to(TPU), bins=7).cpu(), torch.histc(x, bins=7))
    c = torch.full((4,), 5, dtype=torch.int64)
    assert torch.equal(torch.histc(c.to(TPU), bins=3).cpu(), torch.tensor([0, 4, 0]))


def test_mixtral_moe_forward_on_tpu_matches_cpu_without_fallback(recwarn):
    """transformers' MoE routing counts tokens per expert with `histc` on an int tensor."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MixtralConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (2, 7))
    with torch.no_grad():
        ref = model(ids).logits
        out = model.to(TPU)(ids.to(TPU)).logits.cpu()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert not [w for w in recwarn if "runs on the CPU" in str(w.message)]


def test_pin_memory_where_tpu_is_the_accelerator():
    """A DataLoader's `pin_memory=True` (HF Trainer's default) asks the accelerator's pinned
    allocator: a copy into host memory that the allocator remembers, so `is_pinned()` is true
    for it and only for it (DDP's reducer asserts it of its staging buffer)."""
    r = _run(
        """
        import os
        os.environ["TORCHTPU_DEVICE"] = "1"
        import torch, torchtpu
        assert torch.accelerator.current_accelerator().type == "tpu"
        x = torch.randn(3, 4)
        y = x.pin_memory()
        assert torch.equal(x, y) and y.data_ptr() != x.data_ptr() and y.is_pinned() and not x.is_pinned()
        z = torch.empty(8, pin_memory=True)
        assert z.is_pinned() and not z[1:].clone().is_pinned()
        data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
        got = [b[0].to("tpu").sum().item() for b in torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True)]
        print(got)
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[6.0, 22.0]"


def test_accelerator_memory_functions_answer_for_tpu():
    """`torch.accelerator`'s memory functions insist on a `c10::DeviceAllocator` for the device:
    the native allocator answers them with the device buffers' counters, the same numbers as
    `torch.tpu.memory_allocated` (exact byte counts: 1024 float32 are 4096 bytes). The CPU
    plugin's free and total memory are the host's."""
    r = _run(
        """
        import os
        os.environ["TORCHTPU_DEVICE"] = "1"
        import torch, torchtpu
        acc = torch.accelerator
        warm = torch.ones(4, device="tpu") * 2  # caches the scalars 1.0 and 2.0 (8 bytes each)
        del warm
        base = acc.memory_allocated()
        x = torch.ones(1024, device="tpu")
        assert acc.memory_allocated() - base == 4096 == torch.tpu.memory_allocated() - base
        y = x * 2
        assert acc.memory_allocated() - base == 8192 and acc.memory_reserved() == acc.memory_allocated()
        stats = acc.memory_stats()
        assert stats["allocated_bytes.all.current"] == acc.memory_allocated()
        assert stats["allocation.all.allocated"] >= 2
        assert torch.tpu.memory_stats()["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"]
        del y
        assert acc.memory_allocated() - base == 4096 and acc.max_memory_allocated() - base >= 8192
        acc.reset_peak_memory_stats()
        assert acc.max_memory_allocated() == acc.memory_allocated()
        acc.reset_accumulated_memory_stats()
        assert acc.memory_stats()["allocation.all.allocated"] == 0
        acc.empty_cache()
        free, total = acc.get_memory_info(0)
        assert 0 < free <= total and torch.tpu.mem_get_info(0)[1] == total and torch.tpu.get_device_properties(0).total_memory == total
        try:
            acc.memory_allocated(99)
        except RuntimeError as e:
            assert "invalid device tpu:99" in str(e), e
        else:
            raise AssertionError("tpu:99 accepted")
        print("ok")
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"


def test_device_map_auto_and_tpu_place_every_parameter_on_tpu(tmp_path):
    """accelerate sizes "auto" from devices it knows (CUDA, XPU, ...): patched where tpu is the
    accelerator, it sees tpu:0 and places the whole model there. Greedy tokens equal CPU's.
    A given `max_memory` is checked against the tpu devices, without accelerate's "Device 0 is
    not available" warning."""
    pytest.importorskip("accelerate")
    r = _run(
        f"""
        import os
        os.environ["TORCHTPU_DEVICE"] = "1"
        import torch, torchtpu, transformers
        from models import tiny_llama
        tiny_llama.model(seed=0, hidden_size=64, intermediate_size=128).save_pretrained({str(tmp_path)!r})
        ref = transformers.LlamaForCausalLM.from_pretrained({str(tmp_path)!r}, device_map="cpu").eval()
        ids = torch.randint(0, 128, (1, 5))
        want = ref.generate(ids, max_new_tokens=4, do_sample=False)
        for kwargs in ({{"device_map": "auto"}}, {{"device_map": "tpu"}},
                       {{"device_map": "auto", "max_memory": {{0: "1GiB", "cpu": "1GiB"}}}}):
            m = transformers.LlamaForCausalLM.from_pretrained({str(tmp_path)!r}, **kwargs).eval()
            places = {{t.device.type for t in [*m.parameters(), *m.buffers()]}}
            assert places == {{"tpu"}}, (kwargs, places)
            got = m.generate(ids.to("tpu"), max_new_tokens=4, do_sample=False)
            assert torch.equal(got.cpu(), want), kwargs
        from accelerate.utils import get_max_memory
        assert list(get_max_memory()) == [0]
        print("ok")
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "ok"
    assert "is not available" not in r.stderr, r.stderr[-2000:]


def _torchtpu_frames(error: BaseException) -> list[str]:
    import traceback

    root = os.path.dirname(torchtpu.__file__) + os.sep
    return [f"{f.filename}:{f.name}" for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(root)]


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda a: a + torch.ones(4, device=TPU), "broadcast"),  # a meta kernel's shape check
        (lambda a: torch.mm(a, a), "2D"),
        (lambda a: a + torch.ones(3, 3), "same device"),  # torchtpu's own check
        (lambda a: a[torch.tensor([7], device=TPU)].cpu(), "index out of range"),
    ],
)
def test_a_user_error_shows_one_torchtpu_frame_and_the_message(bad, message, monkeypatch):
    """CUDA raises a user error from C++, so the traceback ends at the user's line. A tpu op's
    error ends one frame lower, at the kernel's entry, whose source line names the way to the
    whole traceback; before, 4 to 20 frames of torchtpu and torch's tracer came first."""
    a = torch.ones(3, device=TPU)
    with pytest.raises((RuntimeError, IndexError), match=message) as info:
        bad(a)
    frames = _torchtpu_frames(info.value)
    assert len(frames) == 1 and frames[0].endswith("_frames.py:entry"), frames
    monkeypatch.setenv("TORCHTPU_TRACEBACK", "full")
    with pytest.raises((RuntimeError, IndexError), match=message) as info:
        bad(a)
    assert len(_torchtpu_frames(info.value)) > 1


def test_a_bug_inside_torchtpu_keeps_its_frames(monkeypatch):
    from torchtpu.device import _dispatch, _kernels

    def broken(op, *args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(_kernels, "run", broken)  # the boxed fallback's
    monkeypatch.setattr(_dispatch, "run", broken)  # the functional ops' own kernels
    for op in (lambda t: t.cumsum(0), lambda t: t.sin()):
        with pytest.raises(KeyError) as info:
            op(torch.ones(2, device=TPU))
        import traceback

        names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
        assert "broken" in names and len(_torchtpu_frames(info.value)) >= 2, names


def test_a_fallback_warning_is_printed_once_from_the_users_line():
    r = _run(
        """
        import os, warnings
        os.environ["TORCHTPU_FALLBACK"] = "eager"
        warnings.simplefilter("always")  # the repeats would show, were they warned
        import torch, torchtpu.device
        x = torch.rand(5, device="tpu")
        for _ in range(3):
            y = torch.poisson(x)
        m = torch.nn.Linear(4, 2).to("tpu")
        torch.compile(m)(torch.randn(3, 4, device="tpu"))
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if "RuntimeWarning" in line]
    assert len([line for line in lines if "aten::poisson runs on the CPU" in line]) == 1, r.stderr
    assert any(line.startswith("<string>:8: RuntimeWarning: torchtpu: aten::poisson") for line in lines), lines
    assert any(line.startswith("<string>:10: RuntimeWarning: torch.compile: Inductor cannot") for line in lines), lines
    assert "torchtpu/" not in r.stderr and "site-packages/torch/" not in r.stderr, r.stderr


# What `import torch` must leave as torch made it in a program that never touches tpu, each
# checked against the original (a name: an attribute path; the module is imported first).
_TORCH_ORIGINALS = """
import sys
import torch
import torch._tensor_str as tensor_str
import torch.distributed as dist
import torch.distributed.device_mesh as device_mesh
import torch.nn.modules.module as module_py
from torch.distributed.fsdp._fully_shard import _fsdp_init
from torch.nn.attention import flex_attention


def originals():
    return dict(
        module_apply=torch.nn.Module._apply.__module__ == "torch.nn.modules.module",
        module_swap_test=module_py.is_traceable_wrapper_subclass.__module__ == "torch.utils._python_dispatch",
        default_compile=torch._TorchCompileInductorWrapper.__call__.__module__ == "torch",
        init_process_group=not any(
            getattr(m.init_process_group, "_torchtpu", False) for m in (dist, dist.distributed_c10d, device_mesh)
        ),
        fsdp_state_move=_fsdp_init._move_states_to_device.__module__.startswith("torch."),
        flex_attention=flex_attention._validate_device.__module__.startswith("torch."),
        import_hooks=not any(type(f).__module__.startswith("torchtpu") for f in sys.meta_path),
        pickling=type(torch.UntypedStorage._write_file).__name__ == "method_descriptor",
        printing=tensor_str._str.__module__ == "torch._tensor_str",
        storage=torch.UntypedStorage.clone.__module__ == "torch.storage",
        data_ptr=type(torch.Tensor.data_ptr).__name__ == "method_descriptor",
    )
"""


def test_import_torch_patches_nothing_until_the_first_tpu_tensor():
    """torch's entry point registers the device at `import torch` through PyTorch's own
    registration points; every patch to torch waits for the first tpu tensor
    (`device/_patches.py`). The one exception, `torch.accelerator`'s answer, is checked by
    `test_a_cpu_program_sees_no_accelerator`."""
    r = _run(
        _TORCH_ORIGINALS
        + """
import pickle
assert torch._C._get_privateuse1_backend_name() == "tpu"
untouched = originals()
assert all(untouched.values()), untouched
c = torch.arange(3.0)
assert torch.equal(pickle.loads(pickle.dumps(c)), c) and str(c) == "tensor([0., 1., 2.])"
t = torch.arange(3.0, device="tpu")
patched = [name for name, original in originals().items() if not original]
assert sorted(patched) == sorted(untouched), patched
print(t)
"""
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "tensor([0., 1., 2.], device='tpu:0')"


def test_a_first_tpu_use_that_is_a_module_conversion_keeps_its_parameters():
    """When `model.to("tpu")` makes the process's first tpu tensor, the conversion began before
    the module-conversion patch: it still keeps each Parameter object (an optimizer made before
    trains the moved weights), and a weakly referenced parameter gets a new one rather than
    failing the move."""
    r = _run(
        """
import weakref
import torch
m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
w0, w1 = m[0].weight, m[1].weight
anchor = weakref.ref(m[0].bias)
m.to("tpu")
assert m[0].weight is w0 and m[1].weight is w1 and w0.device.type == "tpu"
assert m[0].bias.device.type == "tpu" and anchor() is not m[0].bias
n = torch.nn.Linear(2, 2)
kept = n.weight
n.to("tpu")
assert n.weight is kept
print("ok")
"""
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"


def test_compiled_channels_last_global_pool_on_tpu_tensors():
    """`adaptive_avg_pool2d(x, 1)` of a channels-last input restrides its result in place
    (`as_strided_`), which torch.compile's functionalization replays on a wrapper tensor with
    no device data (ConvNeXt and Swin failed so)."""
    torch._dynamo.reset()
    x = torch.randn(2, 4, 4, 3)

    def pool(t):
        nchw = (t * 2).permute(0, 3, 1, 2)  # channels-last strides, as ConvNeXt's LayerNorm2d leaves them
        return torch.nn.functional.adaptive_avg_pool2d(nchw, 1).flatten(1)

    with torch.no_grad():
        got = torch.compile(pool, backend="torchtpu")(x.to(TPU))
    torch.testing.assert_close(got.cpu(), pool(x), rtol=1e-6, atol=1e-6)
