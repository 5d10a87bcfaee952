"""What `torch.compile` on tpu tensors must accept because eager does (issue 47): a literal
made on the device and reduced while tpu is the accelerator, ops on sizes alone and outputs
that are views of inputs at a second (symbolic) size, eager tpu ops between two graphs, and
HF Longformer, which meets all of these. Values are compared with CPU eager: exactly where no
arithmetic differs, else with the tolerance stated at the comparison."""

from __future__ import annotations

import pytest
import torch
from compiled import assert_compiled_cleanly, fresh_torchtpu  # noqa: F401 - the fixture

import torchtpu

pytestmark = pytest.mark.usefixtures("fresh_torchtpu")

TPU = "tpu"


def test_empty_literal_sum_where_tpu_is_the_accelerator(monkeypatch):
    """Dynamo's fake tensors compute a literal's value for real under `no_dispatch()`; the tpu
    op's one-op program was traced there with nothing recorded, and its meta result baked in
    as a constant: `BufferError('Cannot pack tensors on meta')`."""
    monkeypatch.setenv("TORCHTPU_DEVICE", "1")  # tpu is the accelerator: Dynamo keeps the literal's value

    def f(x):
        return x + torch.tensor([], device=x.device).sum()

    x = torch.randn(3, 4)
    got = torch.compile(f, backend="torchtpu")(x.to(TPU))
    assert got.device.type == TPU
    torch.testing.assert_close(got.cpu(), f(x), rtol=0, atol=0)


@pytest.mark.parametrize("device", ["cpu", TPU])
def test_op_on_sizes_alone_and_a_view_of_the_input_at_symbolic_sizes(device):
    """Longformer's `_chunk`: `torch.div(size, w, rounding_mode="trunc")` on a symbolic size (an
    ATen op with no tensor operand: it was exported with none), and overlapping chunks that are
    an `as_strided` view of the input (AOTAutograd rebuilt that alias from the program's dense
    copy: out of bounds)."""

    def chunks(x):
        n = torch.div(x.size(0), 2, rounding_mode="trunc") - 1
        view = x.as_strided((x.size(0) // 2 - 1, 4, x.size(1)), (2 * x.size(1), x.size(1), 1))
        return view, n, x * 2

    f = torch.compile(chunks, backend="torchtpu")
    for rows in (8, 12, 10):  # the second size makes the graph symbolic
        x = torch.randn(rows, 3)
        got, want = f(x.to(device)), chunks(x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
    assert_compiled_cleanly()


def test_dynamo_leaves_the_device_kernels_alone():
    """An eager tpu op between two graphs (`nonzero`'s data-dependent size is a graph break)
    runs torchtpu's Python kernels while Dynamo's frame hook is on: their frames must not be
    compiled as the user's code (a graph of `inductor.resize_storage_bytes_` failed strict)."""
    import torchtpu.compiled.backend as backend

    compiled_from = []
    real = backend._trace_and_compile

    def spy(gm, example_inputs, opts, kwargs):
        for node in gm.graph.nodes:
            compiled_from.append(node.meta.get("stack_trace") or "")
        return real(gm, example_inputs, opts, kwargs)

    def f(x):
        y = x * 2
        idx = (y > 0).nonzero()
        return idx.float().sum() + y.sum()

    x = torch.randn(4, 5)
    backend._trace_and_compile = spy
    try:
        got = torch.compile(f, backend="torchtpu")(x.to(TPU))
    finally:
        backend._trace_and_compile = real
    torch.testing.assert_close(got.cpu(), f(x), rtol=1e-6, atol=1e-6)
    assert compiled_from, "nothing was compiled"
    assert not [t for t in compiled_from if "/torchtpu/device/" in t], compiled_from
    assert_compiled_cleanly()


@pytest.mark.slow  # ~70 s on 2 cores, most of it Dynamo tracing Longformer's many graphs
def test_longformer_on_tpu_at_two_sizes_with_global_attention():
    """A tiny HF Longformer (hidden 32, 2 layers, 2 heads, window 4) compiled on tpu tensors:
    the first size static, the next ones symbolic, with padding and global attention masks.
    Its graph breaks (`.item()`, `nonzero`) run eager tpu ops between graphs. Tolerance
    2e-3 absolute: XLA's CPU math (exp, erf) differs from eager's by up to ~4e-4 on these
    hidden states (|h| <= ~4)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LongformerConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        attention_window=4,
        vocab_size=100,
        max_position_embeddings=64,
    )
    model = transformers.LongformerModel(cfg).eval()
    on_tpu = transformers.LongformerModel(cfg).eval()
    on_tpu.load_state_dict(model.state_dict())
    compiled = torch.compile(on_tpu.to(TPU), backend="torchtpu")
    for batch, length in ((2, 16), (3, 12)):
        ids = torch.randint(1, 100, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[0, -3:] = 0
        global_mask = torch.zeros(batch, length, dtype=torch.long)
        global_mask[:, 0] = 1
        kw = {"attention_mask": mask, "global_attention_mask": global_mask}
        with torch.no_grad():
            want = model(ids, **kw).last_hidden_state
            got = compiled(ids.to(TPU), **{k: v.to(TPU) for k, v in kw.items()}).last_hidden_state
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=2e-3)
    assert torchtpu.stats()["specialisations"] > 0  # the second size ran symbolic graphs
    assert_compiled_cleanly()
