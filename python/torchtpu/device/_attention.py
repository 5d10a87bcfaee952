"""`nn.MultiheadAttention`'s and `nn.TransformerEncoderLayer`'s inference fast paths on the
`tpu` device.

In eval mode without grad, `nn.MultiheadAttention` (and so `nn.TransformerEncoderLayer` and
`nn.Transformer`) calls `aten._native_multi_head_attention`, a fused kernel PyTorch has only for
CPU and CUDA (PyTorch's fast-path test admits the PrivateUse1 backend). This kernel computes it
from ATen ops on the device, with the CPU kernel's semantics:
- `qkv_weight` is `[3E, E]` (q, k and v projections stacked), `proj_weight` `[E, E]`;
- `mask` is boolean (True: masked out) or additive, and by `mask_type` an attention mask
  `[L, S]` (0), a key padding mask `[B, S]` (1) or a merged mask `[B, H, L, S]` (2);
- the weights are returned when `need_weights` (averaged over heads when
  `average_attn_weights`), else undefined.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _heads(x, num_head):
    b, t, e = x.shape
    return x.reshape(b, t, num_head, e // num_head).transpose(1, 2)


def _broadcast_mask(mask, mask_type, b, h, l, s):
    if mask.dim() == 2 and (mask_type == 1 or (mask_type is None and mask.shape == (b, s) and (b, s) != (l, s))):
        return mask.reshape(b, 1, 1, s)
    if mask.dim() == 2:
        return mask.reshape(1, 1, l, s)
    if mask.dim() == 3:
        return mask.reshape(b, 1, l, s) if mask.shape[0] == b and mask.shape[0] != b * h else mask.reshape(b, h, l, s)
    return mask


def _native_multi_head_attention(
    query,
    key,
    value,
    embed_dim,
    num_head,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    mask=None,
    need_weights=True,
    average_attn_weights=True,
    mask_type=None,
):
    if query.dim() != 3:
        raise RuntimeError(
            f"_native_multi_head_attention: expected a batched query [B, L, E], got shape {tuple(query.shape)}"
        )
    if embed_dim % num_head != 0:
        raise RuntimeError(
            f"_native_multi_head_attention: embed_dim {embed_dim} is not divisible by num_head {num_head}"
        )
    wq, wk, wv = qkv_weight.chunk(3, dim=0)
    bq, bk, bv = qkv_bias.chunk(3, dim=0) if qkv_bias is not None else (None, None, None)
    q = _heads(F.linear(query, wq, bq), num_head)
    k = _heads(F.linear(key, wk, bk), num_head)
    v = _heads(F.linear(value, wv, bv), num_head)
    b, h, l, d = q.shape
    s = k.shape[2]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
    if mask is not None:
        m = _broadcast_mask(mask, mask_type, b, h, l, s)
        scores = scores.masked_fill(m, float("-inf")) if m.dtype == torch.bool else scores + m
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v).transpose(1, 2).reshape(b, l, embed_dim)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, (weights.mean(dim=1) if average_attn_weights else weights)


def _transformer_encoder_layer_fwd(
    src,
    embed_dim,
    num_heads,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    use_gelu,
    norm_first,
    eps,
    norm_weight_1,
    norm_bias_1,
    norm_weight_2,
    norm_bias_2,
    ffn_weight_1,
    ffn_bias_1,
    ffn_weight_2,
    ffn_bias_2,
    mask=None,
    mask_type=None,
):
    """`nn.TransformerEncoderLayer`'s fast path: self-attention and the feed-forward block, each
    with its residual, the layer norms before (`norm_first`) or after them."""

    def attend(x):
        return _native_multi_head_attention(
            x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, False, True, mask_type
        )[0]

    def feed_forward(x):
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(hidden) if use_gelu else F.relu(hidden), ffn_weight_2, ffn_bias_2)

    def norm1(x):
        return F.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)

    def norm2(x):
        return F.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)

    x = src
    if norm_first:
        x = x + attend(norm1(x))
        return x + feed_forward(norm2(x))
    x = norm1(x + attend(x))
    return norm2(x + feed_forward(x))
