"""Convolution weights relaid to HWIO once per version in inference graphs (weight_layout.py):
outputs match eager, an in-place weight update is seen at the next call, and only
placeholders used solely as convolution weights are relaid. Tolerances: f32 convolutions
summed in another order, rtol 1e-5 / atol 1e-5."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchtpu.compiled.weight_layout import FROM_HWIO, RelaidInputs, relayout_conv_weights

aten = torch.ops.aten


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, stride=2),
    ).eval()


def test_inference_matches_eager_and_sees_weight_updates():
    net = _net()
    x = torch.randn(2, 3, 16, 16)
    compiled = torch.compile(net, backend="torchtpu")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-5, atol=1e-5)
        net[0].weight.mul_(-2)  # in place: a new version of the weight
        net[3].weight.add_(0.5)
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-5, atol=1e-5)


def test_only_convolution_weights_are_relaid():
    def f(x, w, v):
        y = aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        z = aten.convolution.default(x, v, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        return y, z + v.sum()  # v is also read as a value: not relaid

    args = (torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3), torch.randn(3, 2, 3, 3))
    gm = make_fx(f, tracing_mode="fake")(*args)
    relaid, perms = relayout_conv_weights(gm)
    assert perms == {1: (2, 3, 1, 0)}
    placeholders = [n for n in relaid.graph.nodes if n.op == "placeholder"]
    assert tuple(placeholders[1].meta["val"].shape) == (3, 3, 2, 3)  # HWIO
    permutes = [n for n in relaid.graph.nodes if n.target is aten.permute.default]
    assert len(permutes) == 1 and list(permutes[0].args[1]) == list(FROM_HWIO)
    # The original graph is untouched (it is what runs eagerly on the original inputs).
    assert tuple([n for n in gm.graph.nodes if n.op == "placeholder"][1].meta["val"].shape) == (3, 2, 3, 3)
    # The relaid graph on relaid inputs computes what the original computes.
    real = make_fx(f)(*args)
    relaid_real, _ = relayout_conv_weights(real)
    inputs = RelaidInputs(perms).apply(args)
    for a, b in zip(relaid_real(*inputs), real(*args)):
        torch.testing.assert_close(a, b)


def test_weights_of_convolutions_run_as_matmuls_are_not_relaid():
    """A 3x3 kernel on a 2x2 map runs as patches times a matmul, which reads the OIHW weight
    as it is: relaid, it would be permuted back by a copy in every call."""

    def f(x, w, v):
        small = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        large = aten.convolution.default(x.repeat(1, 1, 3, 3), v, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return small, large

    args = (torch.randn(1, 2, 2, 2), torch.randn(3, 2, 3, 3), torch.randn(3, 2, 3, 3))
    gm = make_fx(f, tracing_mode="fake")(*args)
    _, perms = relayout_conv_weights(gm)
    assert perms == {2: (2, 3, 1, 0)}  # only the 6x6 map's weight
    compiled = torch.compile(f, backend="torchtpu")
    with torch.no_grad():
        for a, b in zip(compiled(*args), f(*args)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_relaid_copies_are_kept_per_version():
    w = torch.randn(4, 3, 3, 3)
    relaid = RelaidInputs({0: (2, 3, 1, 0)})
    first = relaid.apply([w])[0]
    assert relaid.apply([w])[0] is first  # same tensor, same version: the kept copy
    w.add_(1)
    second = relaid.apply([w])[0]
    assert second is not first
    torch.testing.assert_close(second, w.permute(2, 3, 1, 0))


@pytest.mark.parametrize("kind", ["training"])
def test_training_graphs_are_not_relaid(kind):
    net = _net().train()
    x = torch.randn(2, 3, 16, 16)
    ref = _net().train()
    compiled = torch.compile(net, backend="torchtpu")
    compiled(x).sum().backward()
    ref(x).sum().backward()
    torch.testing.assert_close(net[0].weight.grad, ref[0].weight.grad, rtol=1e-4, atol=1e-4)
