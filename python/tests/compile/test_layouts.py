"""Channels-last layouts against eager: the compiler's `assign-layouts` pass (convolution
regions run NHWC, transposes only at their edges) and the backend's saved-activation layout
(saved_layout.py: convolution activations cross from forward to backward NHWC).

Tolerances: f32 forward values rtol 1e-5 / atol 1e-5 (the same products, summed in another
order by NHWC convolutions and reductions); max-pool indices exactly; gradients of a training
step rtol 1e-4 / atol 1e-5 (as test_backend.py's training tests)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from compiled import assert_compiled_cleanly, fresh_torchtpu  # noqa: F401 - the fixture
from lowering_harness import from_wire, to_wire
from models.small import CNN
from paths import ROOT

from torchtpu import _C

pytestmark = pytest.mark.usefixtures("fresh_torchtpu")
FWD = dict(rtol=1e-5, atol=1e-5)
TRAIN = dict(rtol=1e-4, atol=1e-5)
BASE = "canonicalize,fold-constants,cse,dce"
WITH_LAYOUTS = "canonicalize,fold-constants,assign-layouts,cse,dce"


def _block_ir() -> str:
    """The first graph of the lit test (conv, batch norm, relu, broadcast mul, conv,
    residual add, max pooling, mean)."""
    text = (ROOT / "lit-tests" / "passes" / "assign-layouts.ir").read_text()
    first = text.split("// -----")[0]
    return "\n".join(line for line in first.splitlines() if not line.startswith("//"))


def test_assign_layouts_rewrites_the_block_to_nhwc():
    after = _C.run_pipeline(_block_ir(), "assign-layouts,dce")
    assert after.count("channels_last = true") == 3  # two convolutions and the pooling
    assert "channel_dim = 3" in after
    # Permutes only at the edges: the input, the broadcast operand, the two NCHW outputs.
    assert after.count("aten.permute") == 4, after


def test_assign_layouts_matches_eager_on_the_block():
    torch.manual_seed(0)
    x, w1, b1 = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    g, bb, rm, rv = torch.randn(4), torch.randn(4), torch.randn(4), torch.rand(4) + 0.5
    w2, s = torch.randn(4, 4, 3, 3), torch.randn(4, 1, 1)
    y = F.relu(F.batch_norm(F.conv2d(x, w1, b1, padding=1), rm, rv, g, bb, False, 0.1, 1e-5))
    y = F.conv2d(y * s, w2, padding=1) + y
    values, indices = F.max_pool2d(y, 3, 2, 1, return_indices=True)
    want = [values.mean((2, 3)), values, indices]
    inputs = [to_wire(t) for t in (x, w1, b1, g, bb, rm, rv, w2, s)]
    for pipeline in (BASE, WITH_LAYOUTS):
        got = [from_wire(w) for w in _C.run_ir(_block_ir(), inputs, pipeline)]
        torch.testing.assert_close(got[0], want[0], **FWD)
        torch.testing.assert_close(got[1], want[1], **FWD)
        assert torch.equal(got[2], want[2]), pipeline


@pytest.mark.parametrize("relayout_saved", [True, False])
@pytest.mark.parametrize("passes", [BASE + ",schedule-memory", WITH_LAYOUTS + ",schedule-memory"])
def test_cnn_training_matches_eager(passes, relayout_saved):
    """Two SGD steps of the small CNN (convolutions, batch norm, grouped convolution, max
    pooling): losses, gradients and parameters against eager."""
    torch.manual_seed(0)
    model = CNN().train()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="torchtpu", options={"passes": passes, "relayout_saved": relayout_saved})
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        x = torch.randn(4, 3, 10, 10)
        loss, ref_loss = compiled(x).square().mean(), ref(x).square().mean()
        loss.backward()
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss, **TRAIN)
        for p, q in zip(model.parameters(), ref.parameters()):
            # A convolution bias before batch norm has a zero gradient up to rounding.
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, **TRAIN)
    assert_compiled_cleanly()


def test_saved_convolution_activations_cross_nhwc():
    """The forward returns saved activations laid out like a convolution's as NHWC; the
    backward permutes them back (saved_layout.py)."""
    import torch._functorch.partitioners as partitioners

    from torchtpu.compiled.saved_layout import relayout_saved_activations

    def f(x, w):
        return F.relu(F.conv2d(x, w, padding=1)).sum()

    x, w = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3, requires_grad=True)
    seen = {}

    def partition(joint, joint_inputs, **kwargs):
        fw, bw = partitioners.default_partition(joint, joint_inputs, **kwargs)
        seen["names"] = relayout_saved_activations(fw, bw, kwargs["num_fwd_outputs"])
        seen["fw"] = fw
        return fw, bw

    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def keep(g, _):
        return make_boxed_func(g)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep, partition_fn=partition)
    got = torch.autograd.grad(torch.compile(f, backend=backend)(x, w), w)[0]
    want = torch.autograd.grad(f(x, w), w)[0]
    torch.testing.assert_close(got, want, **TRAIN)
    assert seen["names"], "no saved activation was relaid"
    out = next(iter(seen["fw"].graph.find_nodes(op="output"))).args[0]
    shapes = [tuple(n.meta["val"].shape) for n in out if isinstance(n, torch.fx.Node) and n.meta["val"].dim() == 4]
    assert (2, 6, 6, 4) in shapes, shapes  # NHWC
