"""One-op programs built ahead of use (`torchtpu/device/_ahead.py`, docs/eager.md "A new shape"):
a new prompt length in strict-mode `generate` finds most of its programs built by the pool,
and the tokens equal CPU eager's (greedy: equal). The Spec of a build describes it whole: a
program built from a Spec's materialized arguments is the program of the original ones."""

from __future__ import annotations

import threading

import pytest
import torch

import torchtpu
from torchtpu.device import _ahead, _programs

TPU = "tpu"
GENERATE = dict(max_new_tokens=3, do_sample=False, pad_token_id=0)


@pytest.fixture
def ahead():
    """Two pool threads, and no programs kept from other tests (the engine's caches still hold
    their executables, so a rebuild is a memory hit, not an XLA compile)."""
    previous = torchtpu.eager.compile_ahead(2)
    _programs.clear()
    yield
    torchtpu.eager.compile_ahead(previous)
    _programs.clear()


def _generate_lengths(lengths, results: dict):
    pytest.importorskip("transformers")
    from models import tiny_llama

    ref = tiny_llama.model().eval()
    model = tiny_llama.model().eval().to(TPU)
    for n in lengths:
        ids = torch.randint(3, tiny_llama.VOCAB, (1, n), generator=torch.Generator().manual_seed(n))
        mask = torch.ones_like(ids)
        before = torchtpu.stats()
        with torchtpu.eager.mode("strict"):
            got = model.generate(ids.to(TPU), attention_mask=mask.to(TPU), **GENERATE)
        after = torchtpu.stats()
        want = ref.generate(ids, attention_mask=mask, **GENERATE)
        results[n] = {
            "equal": torch.equal(got.cpu(), want),
            "compiled": after["eager_programs_compiled"] - before["eager_programs_compiled"],
            "predicted": after["eager_ahead_predicted"] - before["eager_ahead_predicted"],
            "ahead": after["eager_programs_ahead"] - before["eager_programs_ahead"],
        }


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_new_prompt_length_is_built_ahead_and_matches_cpu(ahead, where):
    # In a background thread too: transformers' continuous batching generates there, and the
    # builds a thread made (what it predicts from) are its own.
    results: dict = {}
    if where == "main":
        _generate_lengths([5, 6], results)
    else:
        t = threading.Thread(target=_generate_lengths, args=([5, 6], results))
        t.start()
        t.join()
    assert set(results) == {5, 6}, "the generate thread failed"
    assert all(r["equal"] for r in results.values()), results
    new = results[6]
    # Most of the new length's programs were predicted: alone about 9 in 10 (all but the first,
    # where the shift is seen, and the odd one no earlier build predicts). How many depends on
    # the machine's load: a prediction the pool had not started when the op's thread passed
    # its position is dropped (76% was seen beside another test worker). Half proves the path
    # without timing the pool.
    assert new["compiled"] >= 20, results
    assert new["predicted"] >= 0.5 * new["compiled"], results
    assert new["ahead"] >= 1, results


def test_no_ahead_builds_when_off(ahead):
    torchtpu.eager.compile_ahead(0)
    results: dict = {}
    _generate_lengths([5, 6], results)
    assert all(r["equal"] for r in results.values()), results
    assert results[6]["compiled"] > 0, results
    assert results[6]["predicted"] == results[6]["ahead"] == 0, results


def _spec(op, args, kwargs=None, geoms=None, **kw):
    return _ahead.spec_of(op, args, kwargs or {}, kw.get("cast_to"), False, geoms, None, False)


def _meta(*shape):
    return torch.empty(shape, device="meta")


def test_a_spec_materializes_the_arguments_it_describes():
    aten = torch.ops.aten
    # A view of a [5, 16] buffer as [1, 2, 5, 4] (a head split off, the second half of each),
    # a scalar, and sizes: strides follow the buffer's sizes, the head dim's stays 8.
    geom = ((5, 16), (80, 8, 16, 1), 4)
    spec = _spec(aten.mul.Tensor, (_meta(1, 2, 5, 4), torch.tensor(-0.0)), geoms=[geom, None])
    back = _ahead.materialize(spec)
    assert back["geoms"] == [geom, None]
    x, s = back["meta_args"]
    assert (x.shape, x.device.type) == ((1, 2, 5, 4), "meta")
    assert s.item() == 0.0 and torch.signbit(s)
    assert _spec(back["op"], back["meta_args"], geoms=back["geoms"]) == spec
    # -0.0 and 0.0 are different Specs (a division by either differs).
    assert _spec(aten.mul.Tensor, (_meta(1, 2, 5, 4), torch.tensor(0.0)), geoms=[geom, None]) != spec
    # Shifted to length 6: the view's strides and offset follow (the last row stays the last).
    shifted = _ahead.Spec(spec.skeleton, tuple(6 if v == 5 else v for v in spec.ints))
    assert _ahead.materialize(shifted)["geoms"][0] == ((6, 16), (96, 8, 16, 1), 4)
    last_row = _spec(aten.mm.default, (_meta(1, 32), _meta(32, 8)), geoms=[((1, 5, 32), (160, 1), 128), None])
    at6 = _ahead.Spec(last_row.skeleton, tuple(6 if v == 5 else v for v in last_row.ints))
    assert _ahead.materialize(at6)["geoms"][0] == ((1, 6, 32), (192, 1), 160)
    # What a Spec cannot describe is not predicted (and the op is built as before).
    assert _spec(aten.add.Tensor, (_meta(2, 2).t(), _meta(2, 2))) is None


def test_a_predicted_program_equals_the_program_of_its_spec(ahead):
    # The pool's program for a Spec is what the op's own thread would trace: same IR text.
    aten = torch.ops.aten
    args = (_meta(1, 4, 6, 6), -1, False)
    spec = _spec(aten._softmax.default, args)
    traced = _ahead._build(spec, _programs.trace)
    own = _programs.trace(aten._softmax.default, args, {}, None, False, None, None, False)
    assert traced.text == own.text
    assert traced.compiled is not None
