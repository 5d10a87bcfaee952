"""Bounded programs for changing sizes (issue 47): an inference graph whose batch changes at
every call runs padded to buckets (`torchtpu/compiled/buckets.py`), so batch sizes 2..9 compile at most
3 programs, and its results equal the unpadded call. A sequence length is padded too, the
ops that combine values along it (softmax, sums, contractions over the keys) masked past the
real length. Sizes padding could change (a mean over them, a reshape that splits them,
indexing by data) stay exact, with the reason in `stats()["buckets"]`.

Every result is compared with CPU eager, rtol=1e-5, atol=1e-5 (float32; padding changes no
arithmetic of the real rows, the programs differ from eager's kernels only in summation order).
"""

from __future__ import annotations

import collections

import pytest
import torch
from compiled import assert_compiled_cleanly, fresh_torchtpu  # noqa: F401 - the fixture
from models import tiny_llama

import torchtpu
import torchtpu.compiled.backend
from torchtpu.compiled import buckets
from torchtpu.errors import OptionsError

pytestmark = pytest.mark.usefixtures("fresh_torchtpu")


@pytest.fixture(autouse=True)
def _no_programs_from_other_tests(monkeypatch):
    """Specialised programs are kept for the process: counts here start from none."""
    monkeypatch.setattr(torchtpu.compiled.backend, "_SPECIALISED", collections.OrderedDict())


TPU = "tpu"
TOL = dict(rtol=1e-5, atol=1e-5)


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()


class Block(torch.nn.Module):
    """Pre-norm attention (causal mask) and MLP: a transformer block, batch first or not."""

    def __init__(self, batch_first=True):
        super().__init__()
        self.ln = torch.nn.LayerNorm(16)
        self.att = torch.nn.MultiheadAttention(16, 2, batch_first=batch_first)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))

    def forward(self, x, mask):
        h = self.ln(x)
        a, _ = self.att(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln(x))


def _on(model, device):
    twin = type(model)() if not isinstance(model, torch.nn.Sequential) else _mlp()
    twin.load_state_dict(model.state_dict())
    return twin.eval().to(device)


def _causal(t):
    return torch.triu(torch.full((t, t), float("-inf")), 1)


def _one_graph():
    (entry,) = torchtpu.stats()["buckets"].values()
    return entry


@pytest.mark.parametrize("device", ["cpu", TPU])
def test_mlp_batch_2_to_9_compiles_at_most_3_programs(device):
    model = _mlp()
    compiled = torch.compile(_on(model, device), backend="torchtpu")
    with torch.no_grad():
        for b in range(2, 10):
            x = torch.randn(b, 16)
            got = compiled(x.to(device))
            assert got.device.type == device and got.shape == (b, 8)
            torch.testing.assert_close(got.cpu(), model(x), **TOL)
    s = torchtpu.stats()
    # Batch 2 is Dynamo's first, static graph; 3..8 run in bucket 8, 9 in bucket 16.
    assert s["graphs_compiled"] <= 3, s
    entry = _one_graph()
    (sym,) = entry["padded"]
    assert entry["programs"] == {f"{sym}=8": 1, f"{sym}=16": 1}, entry
    assert entry["buckets"] == list(buckets.DEFAULT_BUCKETS) and entry["exact"] == {}
    assert_compiled_cleanly()


def test_transformer_block_pads_batch_and_masks_the_padded_keys():
    """dynamic=True makes batch and sequence symbolic from the first call. Both are padded:
    the sequence is the keys' dim of the attention's softmax and of its product with the
    values, so those ops' inputs are masked past the real length (`where(arange(n) < real,
    x, fill)`) in the bucket's program, which takes the real length as an input."""
    model = Block().eval()
    compiled = torch.compile(_on(model, TPU), backend="torchtpu", dynamic=True)
    with torch.no_grad():
        for b, t in [(b, 5) for b in range(2, 10)] + [(3, 3), (3, 7), (2, 8), (3, 12)]:
            x = torch.randn(b, t, 16)
            got = compiled(x.to(TPU), _causal(t).to(TPU))
            torch.testing.assert_close(got.cpu(), model(x, _causal(t)), **TOL)
    entry = _one_graph()
    assert len(entry["padded"]) == 2 and entry["exact"] == {}, entry
    # (batch, length) buckets: (8, 8) for batches 2..8 and lengths 3..8, (16, 8), (8, 16).
    assert sorted(entry["programs"].values()) == [1, 1, 1], entry
    assert torchtpu.stats()["graphs_compiled"] == 3
    assert_compiled_cleanly()


def test_key_padding_mask_and_sequence_lengths_2_to_9():
    """A boolean key padding mask (its padded columns are False after zero fill, masked past
    the real length anyway): lengths 2..9 under plain torch.compile run in 3 programs."""
    model = Block().eval()

    def f(x, pad):
        h = model.ln(x)
        a, _ = model.att(h, h, h, key_padding_mask=pad, need_weights=False)
        return x + a

    compiled = torch.compile(f, backend="torchtpu")
    with torch.no_grad():
        for t in range(2, 10):
            x = torch.randn(3, t, 16)
            pad = torch.zeros(3, t, dtype=torch.bool)
            pad[0, -1] = True  # the last key of the first row is padding
            torch.testing.assert_close(compiled(x, pad), f(x, pad), **TOL)
    assert torchtpu.stats()["graphs_compiled"] <= 3
    assert _one_graph()["exact"] == {}


def test_batch_second_outputs_are_cut_with_eager_strides():
    """MultiheadAttention without batch_first works on [T, B, E]: the batch is dim 1, merged
    inner with T in its reshapes; outputs are cut along dim 1 and keep eager's strides."""
    ref = Block(batch_first=False).eval()
    compiled = torch.compile(ref, backend="torchtpu")
    with torch.no_grad():
        for b in (2, 3, 6):
            x = torch.randn(5, b, 16)
            got, want = compiled(x, _causal(5)), ref(x, _causal(5))
            torch.testing.assert_close(got, want, **TOL)
            assert got.stride() == want.stride()
    assert _one_graph()["exact"] == {}
    assert torchtpu.stats()["graphs_compiled"] == 2
    assert_compiled_cleanly()


def test_reductions_over_the_padded_dim_are_masked():
    """Sums, maxima, softmax, logsumexp, products, any/all and scans over the batch: each
    reduction's input is filled past the real size with its identity (0, -inf, 1, False, ...);
    a scan needs none (the real rows come first)."""

    def f(x, w):
        h = torch.log(x.abs()) @ w  # padded rows are log(0) = -inf: masked, never summed
        return (
            h.sum(0),
            h.amax(0),
            h.softmax(0),
            torch.logsumexp(h, 0),
            (x + 2).prod(0),
            (x > 0).any(0),
            (x > -3).all(0),
            x.cumsum(0),
            x.argmax(0),
        )

    compiled = torch.compile(f, backend="torchtpu", dynamic=True)
    w = torch.randn(4, 3)
    for b in (2, 3, 5):
        x = torch.randn(b, 4)
        for g, e in zip(compiled(x, w), f(x, w)):
            torch.testing.assert_close(g, e, **TOL)
    entry = _one_graph()
    assert entry["exact"] == {} and len(entry["programs"]) == 1, entry


def test_a_mean_over_the_batch_keeps_exact_sizes():
    def f(x):
        return x.softmax(-1), x.mean(0)

    compiled = torch.compile(f, backend="torchtpu")
    for b in (2, 3, 5):
        x = torch.randn(b, 4)
        for g, e in zip(compiled(x), f(x)):
            torch.testing.assert_close(g, e, **TOL)
    entry = _one_graph()
    assert entry["padded"] == [] and len(entry["programs"]) == 2
    (why,) = entry["exact"].values()
    assert why.startswith("aten.mean.dim") and "divisor" in why, why


def test_padded_rows_never_reach_real_ones():
    """log(0) = -inf and 0/0 = NaN in the padded rows of a row-wise graph: the real rows and
    their layer norm are unaffected."""

    def f(x):
        y = torch.log(x.abs()) / x.abs().sum(-1, keepdim=True)
        return torch.nn.functional.layer_norm(y, (4,))

    compiled = torch.compile(f, backend="torchtpu", dynamic=True)
    for b in (3, 5):
        x = torch.randn(b, 4)
        got = compiled(x)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, f(x), **TOL)
    (sym,) = _one_graph()["padded"]
    assert _one_graph()["programs"] == {f"{sym}=8": 1}


def test_bucket_option_and_sizes_above_the_largest_bucket():
    model = _mlp()
    compiled = torch.compile(model, backend="torchtpu", options={"buckets": [4, 6]}, dynamic=True)
    with torch.no_grad():
        for b in (3, 4, 5, 7, 9):
            x = torch.randn(b, 16)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    entry = _one_graph()
    (sym,) = entry["padded"]
    # 3, 4 -> 4; 5 -> 6; 7 and 9 are above the largest bucket: their own sizes.
    assert entry["programs"] == {f"{sym}=4": 1, f"{sym}=6": 1, f"{sym}=7": 1, f"{sym}=9": 1}
    assert entry["buckets"] == [4, 6]


def test_buckets_off_compiles_per_size(monkeypatch):
    monkeypatch.setenv("TORCHTPU_BUCKETS", "off")
    model = _mlp()
    compiled = torch.compile(model, backend="torchtpu", dynamic=True)
    with torch.no_grad():
        for b in (3, 5):
            compiled(torch.randn(b, 16))
    entry = _one_graph()
    assert entry["padded"] == [] and len(entry["programs"]) == 2
    assert list(entry["exact"].values()) == ["bucketing is off (option buckets)"]


def test_bucket_lists_are_checked():
    assert buckets.parse("4, 16,8") == (4, 8, 16)
    assert buckets.parse("off") == () and buckets.parse(False) == ()
    for bad in (list(range(2, 12)), [1, 4], "4,x", [2.5], "yes"):
        with pytest.raises(OptionsError):
            torchtpu.options.Options.from_dict({"buckets": bad})


def test_training_graphs_keep_exact_sizes():
    model = _mlp().train()
    twin = _on(model, "cpu").train()
    compiled = torch.compile(twin, backend="torchtpu")
    for b in (2, 3, 5):
        x = torch.randn(b, 16)
        model(x).square().mean().backward()
        compiled(x).square().mean().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **TOL)
            p.grad = q.grad = None
    graphs = torchtpu.stats()["buckets"]
    assert {k.split("_")[0] for k in graphs} == {"forward", "backward"}
    for entry in graphs.values():
        assert entry["padded"] == [] and len(entry["programs"]) == 2
        assert all("training" in why for why in entry["exact"].values())


def _llama():
    pytest.importorskip("transformers")
    model = tiny_llama.model(num_hidden_layers=1).eval()  # the shared fixture, one layer
    model.config.use_cache = False
    return model


def test_llama_prompt_lengths_run_in_buckets():
    """Prompts of changing length with a left-padded attention mask (a server's prefill):
    the keys past the real length are masked in the bucket's program; lengths 3..12 compile
    Dynamo's first graph and buckets 8 and 16."""
    model = _llama()
    compiled = torch.compile(model, backend="torchtpu")
    with torch.no_grad():
        for t in (3, 4, 6, 9, 12):
            ids = torch.randint(0, 128, (2, t))
            mask = torch.ones(2, t, dtype=torch.long)
            mask[0, :2] = 0
            torch.testing.assert_close(
                compiled(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits, **TOL
            )
    entry = _one_graph()
    assert entry["exact"] == {}, entry
    assert torchtpu.stats()["graphs_compiled"] == 3
    assert_compiled_cleanly()


def test_llama_with_a_padded_attention_mask_pads_its_batch():
    """transformers' masks read `mask[batch_idx, kv_idx]` with `batch_idx = arange(batch)`:
    row numbers of the padded dim index it (and the mask's own batch symbol is tied to the
    ids'), so a left-padded batch of 2..9 runs in buckets 8 and 16."""
    model = _llama()
    compiled = torch.compile(model, backend="torchtpu")
    with torch.no_grad():
        for b in (2, 3, 6, 9):
            ids = torch.randint(0, 128, (b, 7))
            mask = torch.ones(b, 7, dtype=torch.long)
            mask[0, :2] = 0
            torch.testing.assert_close(
                compiled(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits, **TOL
            )
    entry = _one_graph()
    assert len(entry["padded"]) == 2 and entry["exact"] == {}, entry
    assert sorted(entry["programs"]) == sorted(",".join(f"{s}={n}" for s in entry["padded"]) for n in (8, 16))
    assert torchtpu.stats()["graphs_compiled"] == 3
    assert_compiled_cleanly()
