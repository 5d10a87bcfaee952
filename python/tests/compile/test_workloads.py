"""Whole workloads as users run them (issue 13): `generate()` with the dynamic and the static
KV cache, a compiled full training step (forward, loss, backward, clip_grad_norm_, AdamW on
its default foreach path, an LR scheduler), and `dynamic=True` over several sequence lengths.

Tolerances: generated tokens are compared exactly (greedy decoding of logits within 1e-5 of
eager's); losses and parameters after 3 optimizer steps rtol=1e-4, atol=1e-5; logits under
dynamic=True rtol=1e-4, atol=1e-4.
"""

import os

import pytest
import torch
from compiled import assert_compiled_cleanly, fresh_torchtpu  # noqa: F401 - the fixture
from models import tiny_llama

import torchtpu
from torchtpu.compiled.exporter import export
from torchtpu.compiled.specialize import Binding

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

TRAIN = dict(rtol=1e-4, atol=1e-5)
VOCAB = tiny_llama.VOCAB


pytestmark = pytest.mark.usefixtures("fresh_torchtpu")


DECODERS = {
    # Grouped-query attention (2 KV heads for 4 query heads) with rotary embeddings.
    "llama": lambda: transformers.LlamaForCausalLM(tiny_llama.config()),
    # Learned positions, multi-head attention, a fused QKV projection.
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    ),
}


def _decoder(name):
    torch.manual_seed(0)
    return DECODERS[name]().eval()


def _prompt(length=5, batch=1):
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("family", list(DECODERS))
def test_generate_matches_eager(family, cache):
    model = _decoder(family)
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    ids = _prompt()
    want = model.generate(ids, **kw)
    model.forward = torch.compile(model.forward, backend="torchtpu")
    got = model.generate(ids, **kw)
    assert torch.equal(got, want), (got, want)
    assert_compiled_cleanly()
    s = torchtpu.stats()
    if cache == "static":
        # Fixed shapes: one program for the prompt, one for every decode step.
        assert s["graphs_compiled"] <= 2, s
    else:
        # At most one program per new sequence length (8 new tokens, a 5-token prompt).
        assert s["graphs_compiled"] <= 9, s
    # A second generate() with every size seen: nothing is traced or compiled again.
    compiled_before, specialised_before = s["graphs_compiled"], s["specialisations"]
    again = model.generate(ids, **kw)
    assert torch.equal(again, want)
    s = torchtpu.stats()
    assert s["cache_misses"] <= compiled_before, s  # no XLA compile beyond the first run's
    assert s["graphs_compiled"] - compiled_before <= 1, s
    assert s["specialisations"] - specialised_before <= 1, s


def test_specialised_export_equals_a_retrace():
    """A dynamic graph exported under a Binding (sizes evaluated, no re-trace) is the graph
    that re-tracing with make_fx at those sizes gives, text for text."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchtpu.compiled import backend

    graphs = []
    real = backend.compile_aten_graph

    def capture(gm, example_inputs, opts, kind, binding=None):
        if binding is None and backend._is_symbolic(gm):
            graphs.append(gm)
        return real(gm, example_inputs, opts, kind, binding)

    backend.compile_aten_graph = capture
    try:
        model = _decoder("llama")
        model.config.use_cache = False
        compiled = torch.compile(model, backend="torchtpu", dynamic=True)
        with torch.no_grad():
            compiled(_prompt(6))
    finally:
        backend.compile_aten_graph = real
    assert graphs, "no graph with symbolic shapes was compiled"
    gm = graphs[0]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for length in (3, 9):
        args = []
        for p in placeholders:
            val = p.meta["val"]
            if isinstance(val, torch.SymInt):
                args.append(length)
            else:
                shape = [length if isinstance(d, torch.SymInt) else d for d in val.shape]
                args.append(
                    torch.zeros(shape, dtype=val.dtype)
                    if val.dtype.is_floating_point
                    else torch.ones(shape, dtype=val.dtype)
                )
        retraced = make_fx(gm, tracing_mode="fake")(*args)
        a = export(gm, "g", Binding(gm, args)).text
        b = export(retraced, "g").text
        strip = lambda t: [line.split("  //")[0] for line in t.splitlines()]  # noqa: E731 - FX names differ
        assert strip(a) == strip(b)


def test_dynamic_true_lm_over_five_lengths():
    model = _decoder("llama")
    model.config.use_cache = False
    compiled = torch.compile(model, backend="torchtpu", dynamic=True)
    with torch.no_grad():
        for length in (3, 5, 8, 11, 16):
            ids = _prompt(length, batch=2)
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)
    assert_compiled_cleanly()
    assert torchtpu.stats()["specialisations"] >= 4


def _train_setup():
    model = tiny_llama.model(seed=0, use_cache=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)  # foreach by default
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    return model, opt, sched


def _step_fn(model, opt):
    def step(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        return loss

    return step


def test_compiled_training_step_matches_eager():
    ids = _prompt(8, batch=2)
    eager_model, eager_opt, eager_sched = _train_setup()
    model, opt, sched = _train_setup()
    eager_step = _step_fn(eager_model, eager_opt)
    step = torch.compile(_step_fn(model, opt), backend="torchtpu")
    for _ in range(3):
        want = eager_step(ids)
        got = step(ids)
        eager_sched.step()
        sched.step()
        torch.testing.assert_close(got, want, **TRAIN)
    for (name, a), b in zip(model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(a, b, **TRAIN, msg=name)
    assert_compiled_cleanly()


def test_dynamic_true_training_specialises_forward_and_backward():
    """Backward graphs with symbolic shapes take the same no-re-trace path; gradients match
    eager at every size and a repeated size compiles nothing new."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="torchtpu", dynamic=True, options={"strict": True})
    for batch in (3, 5, 9, 5):
        x = torch.randn(batch, 8)
        model(x).square().mean().backward()
        compiled(x).square().mean().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **TRAIN)
            p.grad = q.grad = None
    assert_compiled_cleanly()
    s = torchtpu.stats()
    assert s["specialisations"] == 6, s  # 3 sizes x (forward, backward); the repeated 5 is reused
