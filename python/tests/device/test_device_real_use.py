"""The tpu device where a CUDA user's first day walks (issue 26): Parameters kept by `.to`,
RNG state for checkpointing, no accelerator hijack on the CPU plugin, fork, threads, device
literals in compiled graphs, `data_ptr` and `save_pretrained`, and the errors eager gives
(mixed-dtype matrix products, empty reductions, bad device indices, negative sizes, an
unwritable dump folder). Values are compared with CPU eager; errors with CPU's or CUDA's
documented behaviour. Everything that could hang runs under a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from models import tiny_llama

import torchtpu
from torchtpu.errors import DeviceForkError, OpArgumentError, OptionsError

TPU = "tpu"


def _run(code: str, timeout: int = 240, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("TORCHTPU_DEVICE", None)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=timeout
    )


# ---------------------------------------------------------------- .to keeps Parameters


def test_to_tpu_keeps_parameter_objects_and_an_earlier_optimizer_trains():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref.load_state_dict(m.state_dict())
    before = [id(p) for p in m.parameters()]
    opt = torch.optim.SGD(m.parameters(), lr=0.1)  # made before the move, as users do
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    m.to(TPU)
    assert [id(p) for p in m.parameters()] == before
    assert all(p.device.type == TPU and isinstance(p, torch.nn.Parameter) for p in m.parameters())
    x = torch.randn(5, 4)
    for _ in range(3):
        for model, o, inp in ((m, opt, x.to(TPU)), (ref, ref_opt, x)):
            o.zero_grad()
            model(inp).square().sum().backward()
            o.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    m.cpu()  # and back: still the same objects
    assert [id(p) for p in m.parameters()] == before and next(m.parameters()).device.type == "cpu"


def test_to_tpu_of_a_weakly_referenced_parameter_still_converts():
    import weakref

    m = torch.nn.Linear(3, 3)
    want = m(torch.ones(1, 3)).detach()
    ref = weakref.ref(m.weight)  # swap_tensors refuses these: PyTorch's default (a new Parameter)
    m.to(TPU)
    assert m.weight.device.type == TPU and ref() is None
    torch.testing.assert_close(m(torch.ones(1, 3, device=TPU)).cpu(), want)


def test_hf_tied_embeddings_stay_tied_train_like_cpu_and_save_pretrained(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = tiny_llama.config(vocab_size=64, tie_word_embeddings=True)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg)
    ref = transformers.LlamaForCausalLM(cfg)
    ref.load_state_dict(m.state_dict())
    n = len(list(m.parameters()))
    m.to(TPU)
    assert len(list(m.parameters())) == n == 20
    assert m.lm_head.weight is m.model.embed_tokens.weight
    ids = torch.randint(0, 64, (2, 8))
    for model, inp in ((m, ids.to(TPU)), (ref, ids)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(input_ids=inp, labels=inp).loss.backward()
        opt.step()
    assert torch.equal(m.lm_head.weight.detach().cpu(), m.model.embed_tokens.weight.detach().cpu())
    torch.testing.assert_close(m.lm_head.weight.detach().cpu(), ref.lm_head.weight.detach(), rtol=1e-4, atol=1e-5)
    # data_ptr tells storages apart (it was 0 for all of them: "shared tensors [all 21 weights]").
    m.save_pretrained(tmp_path)
    back = transformers.LlamaForCausalLM.from_pretrained(tmp_path)
    for (k, v), (k2, v2) in zip(m.state_dict().items(), back.state_dict().items()):
        assert k == k2
        torch.testing.assert_close(v.cpu(), v2)


def test_data_ptr_is_unique_per_storage_and_offset_in_views():
    a, b = torch.ones(16, device=TPU), torch.ones(16, device=TPU)
    assert a.data_ptr() != 0 and a.data_ptr() != b.data_ptr()
    assert a[4:].data_ptr() == a.data_ptr() + 4 * a.element_size()
    assert a.view(4, 4).data_ptr() == a.data_ptr() == a.untyped_storage().data_ptr()
    assert a.untyped_storage().nbytes() == 64
    # Non-overlapping ranges, as safetensors' shared-tensor check reads them.
    lo, hi = sorted([a, b], key=lambda t: t.data_ptr())
    assert lo.data_ptr() + lo.untyped_storage().nbytes() <= hi.data_ptr()
    assert torch.ones(3).data_ptr() != 0  # CPU tensors unchanged


# ---------------------------------------------------------------- RNG state, checkpointing


def test_rng_state_round_trips_and_fork_rng_works():
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.rand(5, device=TPU).cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(5, device=TPU).cpu(), first)
    with torch.random.fork_rng(device_type=TPU):
        inside = torch.rand(5, device=TPU).cpu()
    assert torch.equal(torch.rand(5, device=TPU).cpu(), inside)  # restored on leaving
    with pytest.raises(RuntimeError, match="16-byte"):
        torch.tpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_rng_state_is_philox_seed_and_offset_advancing_per_op():
    """CUDA's layout (seed: u64, offset: u64), which DTensor's RNG tracker reads and writes: a
    draw of n values advances the offset by n rounded up to a multiple of 4; the same (seed,
    offset) gives the same numbers; draws at offsets n apart share no numbers."""
    torch.tpu.manual_seed(1234)
    state = torch.tpu.get_rng_state()
    assert state.numel() == 16
    seed, offset = state.view(torch.int64).tolist()
    assert (seed, offset) == (1234, 0) and torch.tpu.initial_seed() == 1234
    whole = torch.rand(16, device=TPU).cpu()
    assert torch.tpu.get_rng_state().view(torch.int64).tolist() == [1234, 16]
    torch.empty(5, device=TPU).normal_()
    assert torch.tpu.get_rng_state().view(torch.int64)[1].item() == 16 + 8
    # Two halves drawn at offsets 0 and 8 (as DTensor places two shards) are distinct draws.
    halves = []
    for start in (0, 8):
        torch.tpu.set_rng_state(torch.tensor([1234, start], dtype=torch.int64).view(torch.uint8))
        halves.append(torch.rand(8, device=TPU).cpu())
    assert torch.equal(halves[0], whole[:8])
    assert not set(halves[0].tolist()) & set(halves[1].tolist())


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_with_dropout_gives_the_gradients_of_no_checkpoint(use_reentrant):
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16).to(TPU)
    drop = torch.nn.Dropout(0.5)

    def block(x):
        return drop(torch.tanh(lin(x)))

    x = torch.randn(8, 16).to(TPU).requires_grad_()
    grads = []
    for checkpointed in (False, True):
        lin.zero_grad()
        x.grad = None
        torch.tpu.manual_seed(123)
        y = checkpoint(block, x, use_reentrant=use_reentrant) if checkpointed else block(x)
        y.square().sum().backward()
        grads.append((lin.weight.grad.cpu().clone(), x.grad.cpu().clone()))
    # The recompute replays the saved RNG state: the same mask, so the same gradients.
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------- no accelerator hijack

_DETECTION = """
    import socket, torch, torch.distributed as dist
    print(torch.accelerator.is_available(), torch.accelerator.current_accelerator(),
          torch.accelerator.current_accelerator(check_available=True), torch.tpu.is_available())
    x = torch.ones(2, device="tpu") * 2   # an explicit device works either way
    print(x.cpu().tolist())
"""


def test_cpu_plugin_is_not_the_accelerator_unless_opted_in():
    """Not opted in, `torch.accelerator` answers what it answers without torchtpu (CUDA on a
    CUDA build, though not available; None on a CPU build), and so does torch.distributed's
    `_get_accelerator`; an explicit tpu device works either way."""
    asked = "print(torch.accelerator.is_available(), torch.accelerator.current_accelerator(), torch.accelerator.current_accelerator(check_available=True), torch._C._get_accelerator())"
    own = _run("import torch\n" + asked, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert own.returncode == 0, own.stderr
    r = _run(_DETECTION + "\n    " + asked)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith(" False")  # torch.tpu.is_available()
    assert lines[1] == "[2.0, 2.0]"
    assert lines[2] == own.stdout.strip()
    r = _run(_DETECTION, TORCHTPU_DEVICE="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "True tpu tpu True"


def test_cpu_scripts_keep_their_distributed_default_and_hf_device():
    code = """
        import socket, torch, torch.distributed as dist
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        t = torch.ones(3); dist.all_reduce(t)
        print(dist.get_backend_config(), t.tolist())
        dist.destroy_process_group()
        from transformers import TrainingArguments
        print(TrainingArguments(output_dir="out", report_to=[]).device)
        from accelerate import PartialState
        print(PartialState().device)
    """
    pytest.importorskip("accelerate")
    r = _run(code)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "gloo" in lines[0] and lines[0].endswith("[1.0, 1.0, 1.0]")
    assert lines[1] == "cpu" and lines[2] == "cpu"


def test_hf_trainer_trains_a_cpu_model_on_the_cpu(tmp_path):
    pytest.importorskip("accelerate")
    code = f"""
        import torch, transformers
        cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32, num_labels=2)
        model = transformers.BertForSequenceClassification(cfg)
        data = [{{"input_ids": torch.randint(0, 50, (6,)), "labels": torch.tensor(i % 2)}} for i in range(8)]
        args = transformers.TrainingArguments(output_dir={str(tmp_path)!r}, per_device_train_batch_size=4,
                                              max_steps=2, report_to=[], save_strategy="no", logging_strategy="no")
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
        trainer.train()
        print(next(model.parameters()).device)
    """
    r = _run(code, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[-1] == "cpu"


# ---------------------------------------------------------------- fork


@pytest.mark.timeout(180)
def test_tpu_op_in_a_forked_child_raises_instead_of_hanging():
    code = """
        import os, torch
        x = torch.ones(4, device="tpu") + 1   # the parent starts the device
        print("parent", torch.tpu._is_in_bad_fork())
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                bad = torch.tpu._is_in_bad_fork()
                (x * 2).cpu()
                os.write(w, f"no error {bad}".encode())
            except Exception as e:
                os.write(w, f"{type(e).__name__} {bad}: {e}".encode())
            os._exit(0)
        os.close(w)
        print(os.read(r, 4096).decode())
        os.waitpid(pid, 0)
        print("parent still works", (x * 3).cpu().tolist())
    """
    r = _run(code, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "parent False"
    assert lines[1].startswith("DeviceForkError True:") and "spawn" in lines[1]
    assert lines[2] == "parent still works [6.0, 6.0, 6.0, 6.0]"


@pytest.mark.timeout(240)
def test_dataloader_fork_worker_touching_tpu_raises_and_cpu_workers_work():
    code = """
        import torch
        from torch.utils.data import DataLoader, Dataset
        w = torch.ones(3, device="tpu")
        class Cpu(Dataset):
            def __len__(self): return 4
            def __getitem__(self, i): return torch.full((3,), float(i))
        class Tpu(Cpu):
            def __getitem__(self, i): return (w * i).cpu()
        batches = [b.to("tpu") * w for b in DataLoader(Cpu(), batch_size=2, num_workers=2)]
        print(sum(b.sum() for b in batches).item())
        try:
            list(DataLoader(Tpu(), batch_size=2, num_workers=1, multiprocessing_context="fork"))
            print("no error")
        except Exception as e:
            print("raised", "DeviceForkError" in str(e) or "spawn" in str(e))
    """
    r = _run(code, timeout=200)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["18.0", "raised True"]


def test_is_in_bad_fork_is_false_here_and_the_error_is_never_a_fallback():
    assert torch.tpu._is_in_bad_fork() is False
    from torchtpu import policy

    with pytest.raises(DeviceForkError):
        policy.on_failure(DeviceForkError("forked"), "graph g", strict=False)


# ---------------------------------------------------------------- threads


@pytest.mark.timeout(240)
def test_threads_building_their_first_programs_at_once():
    errors, results = [], {}

    def work(i):
        try:
            x = torch.arange(12.0).reshape(3, 4) + i
            t = x.to(TPU)
            results[i] = ((t.exp() * (i + 1)).sum(0) - t.log1p().mean()).cpu()
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(e))

    for _ in range(3):  # the race showed in 2 of 3 runs
        torchtpu.device._programs.clear()
        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        for i, got in results.items():
            x = torch.arange(12.0).reshape(3, 4) + i
            torch.testing.assert_close(got, (x.exp() * (i + 1)).sum(0) - x.log1p().mean(), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------- compiled graphs on tpu tensors


def test_compiled_graph_with_a_tensor_literal_made_on_the_device():
    class M(torch.nn.Module):
        def forward(self, x):
            scale = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
            empty = torch.tensor([], device=x.device)  # HF DynamicCache makes one of these
            return x * scale + empty.sum()

    x = torch.randn(3, 4)
    got = torch.compile(M(), backend="torchtpu")(x.to(TPU))
    assert got.device.type == TPU
    torch.testing.assert_close(got.cpu(), M()(x))


def test_dynamic_compile_with_a_python_float_on_tpu_tensors():
    f = torch.compile(lambda x, s: x * s + 1, backend="torchtpu", dynamic=True)
    x = torch.randn(4)
    for s in (2.5, 3.5):
        torch.testing.assert_close(f(x.to(TPU), s).cpu(), x * s + 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.long])
@pytest.mark.parametrize("device", ["cpu", TPU])
def test_mixed_dtype_matmul_is_refused_as_eager_refuses(dtype, device):
    w = torch.ones(4, 4, device=device)
    a = torch.ones(2, 4, dtype=dtype, device=device)
    with pytest.raises(RuntimeError):
        torch.nn.functional.linear(a.cpu(), w.cpu())  # eager's own behaviour
    torch._dynamo.reset()
    with pytest.raises(OpArgumentError, match=r"same dtype.*test_device_real_use\.py:\d+"):  # the user's line
        torch.compile(lambda a, w: a @ w, backend="torchtpu")(a, w)
    if device == TPU:
        with pytest.raises(OpArgumentError, match="same dtype"):
            torch.mm(a, w)


# ---------------------------------------------------------------- errors eager gives


def test_device_index_that_does_not_exist_is_refused():
    n = torch.tpu.device_count()  # the plugin's devices (the CPU plugin's 4)
    with pytest.raises(RuntimeError, match=f"invalid device tpu:{n}"):
        torch.ones(2, device=f"tpu:{n}")
    with pytest.raises(RuntimeError, match=f"invalid device tpu:{n}"):
        torch.ones(2).to(f"tpu:{n}")
    assert torch.ones(2, device="tpu:0").device == torch.device("tpu:0")


def test_empty_reductions_and_negative_sizes_raise_as_on_cpu():
    with pytest.raises(RuntimeError):
        torch.ones(0).max()  # CPU's behaviour (IndexError where a dim is given)
    with pytest.raises(IndexError):
        torch.ones(0, 2).amax(0)
    # torchtpu's error is both a RuntimeError and an IndexError, as eager's are by case.
    with pytest.raises(RuntimeError, match="zero elements"):
        torch.ones(0, device=TPU).max()
    with pytest.raises(RuntimeError, match="zero"):
        torch.ones(0, 2, device=TPU).amax(0)  # refused by PyTorch's reference while tracing
    with pytest.raises(RuntimeError):
        torch.ones(0, 3, device=TPU).argmax()
    # Reductions with an identity, and max over a non-empty dim, still work.
    assert torch.ones(0, device=TPU).sum().item() == 0.0
    assert tuple(torch.ones(0, 3, device=TPU).max(1).values.shape) == (0,)
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(-1, device=TPU)
    with pytest.raises(IndexError, match="zero elements"):
        torch.compile(lambda x: x.max(), backend="torchtpu")(torch.ones(0))


def test_unwritable_dump_dir_is_the_users_error_not_a_torchtpu_bug():
    torch._dynamo.reset()
    f = torch.compile(
        lambda a: a + 1, backend="torchtpu", options={"dump_dir": "/proc/torchtpu-nowhere", "strict": False}
    )
    with pytest.raises(OptionsError, match="dump_dir"):
        f(torch.ones(2))
    assert not any(r.get("kind") == "internal" for r in torchtpu.stats().get("fallback_reasons", []))
