"""Inference batch norms folded into the convolutions before them (batch_norm_folding.py):
outputs match eager, in-place updates of a weight or a running statistic are seen at the
next call, and only foldable pairs are folded. Tolerances: the folded convolution rounds
w * s once and sums in another order, rtol 1e-5 / atol 1e-5 (f32)."""

from __future__ import annotations

import pytest
import torch
from compiled import assert_compiled_cleanly, fresh_torchtpu  # noqa: F401 - the fixture
from torch.fx.experimental.proxy_tensor import make_fx

from torchtpu.compiled.batch_norm_folding import FoldedInputs, fold_batch_norms

aten = torch.ops.aten
pytestmark = pytest.mark.usefixtures("fresh_torchtpu")
FWD = dict(rtol=1e-5, atol=1e-5)


def _net(bias: bool, affine: bool):
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=bias),
        torch.nn.BatchNorm2d(8, affine=affine),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, stride=2, bias=bias),
        torch.nn.BatchNorm2d(4, affine=affine),
    )
    with torch.no_grad():  # non-trivial statistics and affine parameters
        for m in net:
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                if affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-1, 1)
    return net.eval()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_folded_inference_matches_eager_and_sees_updates(bias, affine, monkeypatch):
    from torchtpu.compiled import backend

    folded = []

    def spy(gm):
        out, folds = fold_batch_norms(gm)
        folded.extend(folds)
        return out, folds

    monkeypatch.setattr(backend, "fold_batch_norms", spy)
    net = _net(bias, affine)
    x = torch.randn(2, 3, 12, 12)
    compiled = torch.compile(net, backend="torchtpu")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x), **FWD)
        net[1].running_var.mul_(3)  # in place: new versions
        net[4].running_mean.add_(0.5)
        net[0].weight.mul_(-1)
        if affine:
            net[1].weight.add_(0.25)
        torch.testing.assert_close(compiled(x), net(x), **FWD)
    assert len(folded) == 2  # both pairs were folded in the compiled graph
    assert_compiled_cleanly()


def _graph(f, *args):
    return make_fx(f, tracing_mode="fake")(*args)


def test_pairs_are_folded_into_one_convolution():
    def f(x, w, g, b, m, v):
        y = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return aten._native_batch_norm_legit_no_training.default(y, g, b, m, v, 0.1, 1e-5)[0]

    args = (
        torch.randn(1, 3, 5, 5),
        torch.randn(4, 3, 3, 3),
        torch.rand(4),
        torch.randn(4),
        torch.randn(4),
        torch.rand(4) + 1,
    )
    gm = _graph(f, *args)
    folded, folds = fold_batch_norms(gm)
    targets = [n.target for n in folded.graph.nodes if n.op == "call_function"]
    assert targets == [aten.convolution.default], targets
    assert len(folds) == 1 and folds[0].bias_slot == 4  # the running mean carries the bias
    real, _ = fold_batch_norms(make_fx(f)(*args))
    torch.testing.assert_close(real(*FoldedInputs(folds).apply(args)), f(*args), **FWD)


def test_a_running_mean_read_elsewhere_is_not_repurposed():
    def f(x, w, g, b, m, v):
        y = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return aten._native_batch_norm_legit_no_training.default(y, g, b, m, v, 0.1, 1e-5)[0] + m.sum()

    args = (
        torch.randn(1, 3, 5, 5),
        torch.randn(4, 3, 3, 3),
        torch.rand(4),
        torch.randn(4),
        torch.randn(4),
        torch.rand(4) + 1,
    )
    gm = _graph(f, *args)
    assert fold_batch_norms(gm) == (gm, [])


def test_folded_tensors_are_kept_per_version():
    args = [torch.randn(4, 3, 3, 3), None, torch.rand(4), torch.randn(4), torch.randn(4), torch.rand(4) + 1]
    from torchtpu.compiled.batch_norm_folding import Fold

    fold = Fold(weight=0, bias=None, gamma=2, beta=3, mean=4, var=5, eps=1e-5, bias_slot=4)
    inputs = FoldedInputs([fold])
    first = inputs.apply(args)
    again = inputs.apply(args)
    assert again[0] is first[0] and again[4] is first[4]
    args[5].add_(1)
    third = inputs.apply(args)
    assert third[0] is not first[0]
    scale = args[2] / torch.sqrt(args[5] + 1e-5)
    torch.testing.assert_close(third[0], args[0] * scale.reshape(-1, 1, 1, 1))
    torch.testing.assert_close(third[4], args[3] - args[4] * scale)
