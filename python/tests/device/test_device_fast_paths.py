"""`nn.MultiheadAttention` and `nn.TransformerEncoderLayer` in inference (eval, no grad) take
PyTorch's fused fast paths (`_native_multi_head_attention`, `_transformer_encoder_layer_fwd`),
which PyTorch admits for the PrivateUse1 backend: on tpu they are device programs
(`device/_attention.py`), compared with CPU's fused kernels (rtol/atol 1e-5, float32) with no
CPU fallback (TORCHTPU_FALLBACK=error in the suite)."""

from __future__ import annotations

import pytest
import torch

TPU = "tpu"
TOL = dict(rtol=1e-5, atol=1e-5)


def _pair(make):
    torch.manual_seed(0)
    ref = make().eval()
    dev = make().eval().to(TPU)
    dev.load_state_dict(ref.state_dict())
    return ref, dev


def _padding():
    kp = torch.zeros(2, 5, dtype=torch.bool)
    kp[1, -2:] = True
    return kp


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(need_weights=False),
        dict(),
        dict(average_attn_weights=False),
        dict(key_padding_mask=_padding()),
        dict(attn_mask=torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), need_weights=False),
        dict(
            attn_mask=torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), key_padding_mask=_padding(), need_weights=False
        ),
    ],
    ids=["no_weights", "weights", "per_head", "padding", "causal", "causal+padding"],
)
def test_multihead_attention_fast_path_matches_cpu(kwargs):
    ref, dev = _pair(lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True))
    x = torch.randn(2, 5, 8)
    y = torch.randn(2, 7, 8) if "attn_mask" not in kwargs and "key_padding_mask" not in kwargs else x
    on_dev = {k: v.to(TPU) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with torch.no_grad():
        out, w = ref(x, y, y, **kwargs)  # cross-attention where no mask fixes the key length
        got, got_w = dev(x.to(TPU), y.to(TPU), y.to(TPU), **on_dev)
    torch.testing.assert_close(got.cpu(), out, **TOL)
    assert (got_w is None) == (w is None)
    if w is not None:
        torch.testing.assert_close(got_w.cpu(), w, **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_fast_path_matches_cpu(norm_first, activation):
    ref, dev = _pair(
        lambda: torch.nn.TransformerEncoderLayer(
            8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first, activation=activation
        )
    )
    x = torch.randn(2, 5, 8)
    kp = _padding()
    with torch.no_grad():
        torch.testing.assert_close(dev(x.to(TPU)).cpu(), ref(x), **TOL)
        torch.testing.assert_close(
            dev(x.to(TPU), src_key_padding_mask=kp.to(TPU)).cpu(), ref(x, src_key_padding_mask=kp), **TOL
        )


def test_transformer_encoder_stack_without_nested_tensors():
    """The stack with a padding mask would convert to nested tensors (not supported on tpu);
    with `enable_nested_tensor=False` each layer takes its fast path, as docs/eager.md says."""

    def make():
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    ref, dev = _pair(make)
    x, kp = torch.randn(2, 5, 8), _padding()
    with torch.no_grad():
        torch.testing.assert_close(
            dev(x.to(TPU), src_key_padding_mask=kp.to(TPU)).cpu(), ref(x, src_key_padding_mask=kp), **TOL
        )


def test_adaptive_max_pool2d_with_even_windows_is_a_device_program():
    """Even windows decompose to max pooling (values, indices and the gradient equal CPU's,
    exactly); `round(x, decimals)` is covered by the OpInfo harnesses."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    xt = x.detach().to(TPU).requires_grad_()
    out, idx = torch.nn.functional.adaptive_max_pool2d(x, (4, 2), return_indices=True)
    got, got_idx = torch.nn.functional.adaptive_max_pool2d(xt, (4, 2), return_indices=True)
    out.square().sum().backward()
    got.square().sum().backward()
    assert torch.equal(got.detach().cpu(), out.detach()) and torch.equal(got_idx.cpu(), idx)
    assert torch.equal(xt.grad.cpu(), x.grad)
