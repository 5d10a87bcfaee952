"""The example graphs in examples/ run on PJRT and match the same computation in PyTorch
eager (f32; rtol 1e-4, atol 1e-4: matmuls and softmax sum in different orders)."""

import torch
import torch.nn.functional as F
from lowering_harness import from_wire, to_wire
from paths import ROOT

from torchtpu import _C

EXAMPLES = ROOT / "examples"


def rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 0.5


def test_transformer_block_matches_eager():
    x = rand(2, 8, 16, seed=0)
    ln_w, ln_b = 1 + rand(16, seed=1), rand(16, seed=2)
    wqkv, bqkv = rand(48, 16, seed=3), rand(48, seed=4)
    wo, bo = rand(16, 16, seed=5), rand(16, seed=6)
    w1, b1 = rand(64, 16, seed=7), rand(64, seed=8)
    w2, b2 = rand(16, 64, seed=9), rand(16, seed=10)
    args = [x, ln_w, ln_b, wqkv, bqkv, wo, bo, w1, b1, w2, b2]

    h = F.layer_norm(x, [16], ln_w, ln_b, 1e-5)
    q, k, v = F.linear(h, wqkv, bqkv).split(16, dim=-1)
    heads = lambda t: t.view(2, 8, 2, 8).permute(0, 2, 1, 3)
    probs = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) * 8**-0.5, dim=-1)
    ctx = (probs @ heads(v)).permute(0, 2, 1, 3).reshape(2, 8, 16)
    res = x + F.linear(ctx, wo, bo)
    want = res + F.linear(F.gelu(F.linear(res, w1, b1)), w2, b2)

    text = (EXAMPLES / "transformer_block.ir").read_text()
    (got,) = [from_wire(w) for w in _C.run_ir(text, [to_wire(a) for a in args])]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_mlp_example_matches_eager():
    x, w1, b1, w2, b2 = (
        rand(4, 16, seed=0),
        rand(32, 16, seed=1),
        rand(32, seed=2),
        rand(8, 32, seed=3),
        rand(8, seed=4),
    )
    y = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
    scale = torch.arange(8, dtype=torch.float32) / 8
    want = y * scale + y * scale
    text = (EXAMPLES / "mlp.ir").read_text()
    (got,) = [from_wire(w) for w in _C.run_ir(text, [to_wire(a) for a in (x, w1, b1, w2, b2)])]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
