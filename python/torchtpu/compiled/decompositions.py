"""The decomposition table AOTAutograd uses: PyTorch's core ATen decompositions, minus the
ops whose lowering wins (the op registry's decomposition policy `lowering`, see docs/ops.md),
plus PyTorch's non-core decompositions of ops torchtpu does not lower,
plus torchtpu's own decompositions: the fused CPU attention pair, and the backward ops the
core table keeps (convolution_backward into convolutions, max_pool2d_with_indices_backward
into a scatter-add, adaptive average pooling's backward into average pooling's), and the
multi-tensor `_foreach_*` ops of optimizers, one op per list entry (`foreach.py`).

Scaled dot-product attention on CPU traces to `_scaled_dot_product_flash_attention_for_cpu`
and, in training, its fused backward. PyTorch's decomposition of the forward returns the
attention matrix where the backward expects the logsumexp, so decomposing one and not the
other gives wrong gradients. Both are decomposed here, consistently: the forward returns
(output, logsumexp) and the backward recomputes the probabilities from the logsumexp.
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from torchtpu.compiled.foreach import foreach_decompositions

aten = torch.ops.aten

# Non-core decompositions never taken: lifting constants must stay as PyTorch traces it
# (decomposed, a real tensor meets fake ones).
NEVER_DECOMPOSE = {"aten.lift", "aten.lift_fresh", "aten.is_same_size", "aten.sym_numel"}


def _kv_groups(query, key) -> int:
    """Query heads per key/value head: grouped-query attention (`enable_gqa=True`) hands the
    fused CPU kernel fewer key/value heads than query heads; head h reads kv head h // groups."""
    hq, hk = query.shape[-3] if query.dim() >= 3 else 1, key.shape[-3] if key.dim() >= 3 else 1
    if hq % hk:
        raise ValueError(f"scaled_dot_product_attention: {hq} query heads are not a multiple of {hk} key/value heads")
    return hq // hk


def _repeat_kv(t, groups: int):
    return t if groups == 1 else t.repeat_interleave(groups, dim=-3)


def _sum_kv(grad, groups: int):
    """The gradient of `_repeat_kv`: each kv head's gradient is the sum over its group."""
    if groups == 1:
        return grad
    return grad.unflatten(-3, (grad.shape[-3] // groups, groups)).sum(-3)


def _scores(query, key, is_causal, attn_mask, scale):
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    s = torch.matmul(query, key.transpose(-2, -1)) * scale
    L, S = query.shape[-2], key.shape[-2]
    if is_causal:
        keep = torch.arange(L, device=s.device).unsqueeze(-1) >= torch.arange(S, device=s.device).unsqueeze(0)
        s = torch.where(keep, s, float("-inf"))
    if attn_mask is not None:
        s = torch.where(attn_mask, s, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return s, scale


def _probs(s, logsumexp):
    # Rows masked entirely have logsumexp -inf: give them probability 0, as the kernel does.
    lse = torch.where(torch.isinf(logsumexp), 0.0, logsumexp).unsqueeze(-1)
    return torch.exp(s - lse)


_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _wide(*tensors):
    """bf16/f16 attention computed in f32, as the fused CPU kernel accumulates (softmax and
    the matmuls rounded to 8 mantissa bits drift ~10x further from eager)."""
    return [t.float() if isinstance(t, torch.Tensor) and t.dtype in _LOW_PRECISION else t for t in tensors]


def sdpa_cpu_forward(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if dropout_p != 0.0:
        return NotImplemented  # the mask could not be shared with the backward: stay fused
    if query.dtype in _LOW_PRECISION:
        q, k, v, mask = _wide(query, key, value, attn_mask)
        out, logsumexp = sdpa_cpu_forward(q, k, v, dropout_p, is_causal, attn_mask=mask, scale=scale)
        return out.to(query.dtype), logsumexp  # logsumexp stays f32, as the kernel's
    groups = _kv_groups(query, key)
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    s, _ = _scores(query, key, is_causal, attn_mask, scale)
    m = torch.amax(s, dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), 0.0, m)
    logsumexp = (m + torch.log(torch.sum(torch.exp(s - m), dim=-1, keepdim=True))).squeeze(-1)
    out = torch.matmul(_probs(s, logsumexp), value)
    return out, logsumexp


def sdpa_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None):
    if dropout_p != 0.0:
        return NotImplemented
    if query.dtype in _LOW_PRECISION:
        args = _wide(grad_out, query, key, value, out, attn_mask)
        grads = sdpa_cpu_backward(*args[:5], logsumexp, dropout_p, is_causal, attn_mask=args[5], scale=scale)
        return tuple(g.to(query.dtype) for g in grads)
    groups = _kv_groups(query, key)
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    s, scale = _scores(query, key, is_causal, attn_mask, scale)
    p = _probs(s, logsumexp)
    grad_value = torch.matmul(p.transpose(-2, -1), grad_out)
    grad_p = torch.matmul(grad_out, value.transpose(-2, -1))
    grad_s = p * (grad_p - torch.sum(grad_out * out, dim=-1, keepdim=True))
    grad_query = torch.matmul(grad_s, key) * scale
    grad_key = torch.matmul(grad_s.transpose(-2, -1), query) * scale
    return grad_query, _sum_kv(grad_key, groups), _sum_kv(grad_value, groups)


def convolution_backward(
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """Gradients of a (non-transposed) convolution as convolutions, which torchtpu lowers:
    grad_input is a transposed convolution of grad_output with the weight; grad_weight is a
    convolution of the input with grad_output, batch and channels exchanged (per group)."""
    if transposed:
        return NotImplemented
    spatial = input.dim() - 2
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        # output_padding restores the input size lost to the forward's stride rounding.
        out_pad = [
            input.shape[2 + i]
            - (
                (grad_output.shape[2 + i] - 1) * stride[i]
                - 2 * padding[i]
                + dilation[i] * (weight.shape[2 + i] - 1)
                + 1
            )
            for i in range(spatial)
        ]
        grad_input = aten.convolution.default(
            grad_output, weight, None, stride, padding, dilation, True, out_pad, groups
        )
    form = _weight_grad_as_matmul(grad_output, weight) if output_mask[1] and groups == 1 else None
    if form is not None:
        grad_weight = _weight_grad_matmul(form, grad_output, input, weight, stride, padding, dilation)
    elif output_mask[1]:
        # One convolution for every group at once: the input's channels of group g become
        # the "input channels" (g, n) with cin as the batch, grad_output of group g the
        # kernels (g, cout) over n; groups=G keeps the groups apart.
        n, cin, cout = input.shape[0], input.shape[1] // groups, grad_output.shape[1] // groups
        sp_in, sp_out = list(input.shape[2:]), list(grad_output.shape[2:])
        perm = [2, 1, 0] + list(range(3, 3 + spatial))
        x = input.reshape(n, groups, cin, *sp_in).permute(perm).reshape(cin, groups * n, *sp_in)
        w = grad_output.reshape(n, groups, cout, *sp_out).permute([1, 2, 0] + list(range(3, 3 + spatial)))
        w = w.reshape(groups * cout, n, *sp_out)
        gw = aten.convolution.default(x, w, None, dilation, padding, stride, False, [0] * spatial, groups)
        gw = gw.transpose(0, 1)
        # The correlation can run past the kernel when the forward's stride dropped a remainder.
        for i in range(spatial):
            gw = gw.narrow(2 + i, 0, weight.shape[2 + i])
        grad_weight = gw
    if output_mask[2]:
        grad_bias = grad_output.sum(dim=[0] + list(range(2, input.dim())))
    return grad_input, grad_weight, grad_bias


# Weight gradients contract over batch x output positions. XLA CPU runs the convolution form
# (the batch as the feature dim, the output map as the window) slowly when that contraction is
# small: resnet18's last stage at batch 1 took 11 ms per 512x512 3x3 weight gradient (eager
# 0.47 ms). Up to ROWS_MAX_CONTRACTION it is one matmul of output-major rows of patches;
# up to PATCHES_MAX_CONTRACTION a contraction of kernel-position-major patches; beyond that,
# the convolution wins (benches/conv_weight_grad.py).
ROWS_MAX_CONTRACTION = 64
PATCHES_MAX_CONTRACTION = 256


def _weight_grad_as_matmul(grad_output, weight) -> str | None:
    """The matmul form a (groups = 1) weight gradient takes, or None for the convolution form."""
    contraction = grad_output.shape[0] * math.prod(grad_output.shape[2:])
    if contraction <= ROWS_MAX_CONTRACTION or all(k == 1 for k in weight.shape[2:]):
        return "rows"
    if contraction <= PATCHES_MAX_CONTRACTION:
        return "patches"
    return None


def _weight_grad_matmul(form: str, grad_output, input, weight, stride, padding, dilation):
    """grad_weight[o, i, k] = sum over (n, p) of grad_output[n, o, p] * input_padded[n, i, p * stride +
    k * dilation]: one strided slice of the padded input per kernel position k (the patches),
    contracted with grad_output over the batch and the output positions p."""
    spatial = input.dim() - 2
    n, cin, cout = input.shape[0], input.shape[1], grad_output.shape[1]
    kernel, out_sp = list(weight.shape[2:]), list(grad_output.shape[2:])
    pad = [p for i in reversed(range(spatial)) for p in (padding[i], padding[i])]
    xp = aten.constant_pad_nd.default(input, pad, 0.0)
    parts = []
    for k in itertools.product(*(range(kk) for kk in kernel)):
        part = xp
        for i in range(spatial):
            start = k[i] * dilation[i]
            part = aten.slice.Tensor(part, 2 + i, start, start + stride[i] * (out_sp[i] - 1) + 1, stride[i])
        parts.append(part)
    positions, outputs = math.prod(kernel), math.prod(out_sp)
    if form == "rows":
        # [n, out..., cin, K] rows: the matmul writes [cout, cin * K], the weight's own order.
        cols = torch.stack(parts, dim=-1).permute([0, *range(2, 2 + spatial), 1, 2 + spatial])
        cols = cols.reshape(n * outputs, cin * positions)
        g = grad_output.transpose(0, 1).reshape(cout, n * outputs)
        return torch.mm(g, cols).reshape(weight.shape).to(weight.dtype)
    cols = torch.stack(parts, dim=2).reshape(n, cin, positions, outputs)
    g = grad_output.reshape(n, cout, outputs)
    return torch.einsum("nikp,nop->oik", cols, g).reshape(weight.shape).to(weight.dtype)


def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Scatter-adds each output gradient to the input position its index names (per plane)."""
    lead = self.shape[:-2]
    plane = self.shape[-2] * self.shape[-1]
    flat_grad = grad_output.reshape(*lead, -1)
    flat_idx = indices.reshape(*lead, -1)
    zeros = torch.zeros(*lead, plane, dtype=grad_output.dtype, device=grad_output.device)
    return zeros.scatter_add(-1, flat_idx, flat_grad).reshape(self.shape)


def _even_windows(self, output_size):
    size = self.shape[-2:]
    out = [o if o is not None else s for o, s in zip(output_size, size)]
    if any(s % o for s, o in zip(size, out)):
        return None
    return [s // o for s, o in zip(size, out)]


def adaptive_max_pool2d(self, output_size):
    """When the input divides evenly into the output, adaptive max pooling is max pooling with
    kernel = stride = input // output, and its indices are the same flat per-plane indices."""
    k = _even_windows(self, output_size)
    if k is None:
        return NotImplemented  # uneven windows: the op stays whole (and runs eagerly)
    return aten.max_pool2d_with_indices.default(self, k, k, [0, 0], [1, 1], False)


def adaptive_max_pool2d_backward(grad_output, self, indices):
    """Each output gradient goes to the input position its index names, as max pooling's."""
    return max_pool2d_with_indices_backward(grad_output, self, None, None, None, None, None, indices)


def adaptive_avg_pool2d_backward(grad_output, self):
    """When the input divides evenly into the output, adaptive average pooling is plain
    average pooling with kernel = stride = input // output, and so is its gradient."""
    ih, iw = self.shape[-2:]
    oh, ow = grad_output.shape[-2:]
    if ih % oh or iw % ow:
        return NotImplemented  # uneven windows: the op stays whole (and runs eagerly)
    k = [ih // oh, iw // ow]
    return aten.avg_pool2d_backward.default(grad_output, self, k, k, [0, 0], False, True, None)


def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """Group norm from mean/var/rsqrt (PyTorch's own decomposition goes through prims)."""
    acc = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    x = input.to(acc).reshape(N, group, -1)
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    out = ((x - mean) * rstd).reshape(input.shape)
    affine_shape = [1, C] + [1] * (input.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(affine_shape)
    if bias is not None:
        out = out + bias.reshape(affine_shape)
    return out.to(input.dtype), mean.reshape(N, group).to(input.dtype), rstd.reshape(N, group).to(input.dtype)


def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    out = torch.bmm(batch1, batch2).sum(0)
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out.expand(self.shape).clone() if out.shape != self.shape else out  # self ignored, NaNs too
    return self * beta + out if beta != 1 else self + out


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """`src` written over a diagonal as one index_put (PyTorch's decomposition copies in place)."""
    d1, d2 = dim1 % input.dim(), dim2 % input.dim()
    length = src.shape[-1]
    i = torch.arange(length, device=input.device)
    rows, cols = (i, i + offset) if offset >= 0 else (i - offset, i)
    indices = [None] * input.dim()
    indices[d1], indices[d2] = rows, cols
    # index_put puts the indexed block where the indexed dims were when they are adjacent,
    # else first; src has the diagonal last.
    position = min(d1, d2) if abs(d1 - d2) == 1 else 0
    return aten.index_put.default(input, indices, src.movedim(-1, position))


def _expert_of_rows(rows: int, offs):
    """For a grouped matmul: the expert of each row (rows sorted by expert, `offs` the
    cumulative row counts) and whether the row belongs to any expert."""
    r = torch.arange(rows, dtype=offs.dtype, device=offs.device)
    expert = torch.searchsorted(offs, r, right=True)
    valid = expert < offs.shape[0]
    return expert.clamp(max=offs.shape[0] - 1), valid


def grouped_mm_fallback(input, weight, offs):
    """transformers' MoE grouped matmul (an opaque custom op looping over experts) with static
    shapes: every row multiplies its own expert's weight; rows past the last offset are 0."""
    expert, valid = _expert_of_rows(input.shape[0], offs)
    out = torch.bmm(input.unsqueeze(1), weight[expert]).squeeze(1)
    return torch.where(valid.unsqueeze(1), out, torch.zeros((), dtype=out.dtype))


def grouped_mm_fallback_backward(input, weight, offs, grad_output):
    expert, valid = _expert_of_rows(input.shape[0], offs)
    keep = valid.unsqueeze(1)
    grad = torch.where(keep, grad_output, torch.zeros((), dtype=grad_output.dtype))
    grad_input = torch.bmm(grad.unsqueeze(1), weight[expert].transpose(1, 2)).squeeze(1)
    outer = input.unsqueeze(2) * grad.unsqueeze(1)
    grad_weight = torch.zeros_like(weight).index_add(0, expert, outer)
    return grad_input, grad_weight


def grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    """`torch._grouped_mm` (what transformers' MoE layers call on devices other than the CPU)
    with static shapes, for the two forms MoE training needs, rows sorted by group and `offs`
    the cumulative row counts: [S, K] x [E, K, N] -> [S, N] (each row times its group's matrix;
    rows past the last offset are 0), and, its weight gradient, [K, S] x [S, N] -> [E, K, N]
    (each group's rows summed). Other forms stay whole."""
    if offs is None or bias is not None:
        return NotImplemented
    if self.dim() == 2 and mat2.dim() == 3:
        out = grouped_mm_fallback(self, mat2, offs)
    elif self.dim() == 2 and mat2.dim() == 2:
        rows = self.shape[1]
        expert, valid = _expert_of_rows(rows, offs)
        a = torch.where(valid.unsqueeze(1), self.transpose(0, 1), torch.zeros((), dtype=self.dtype))
        outer = a.unsqueeze(2) * mat2.unsqueeze(1)  # [S, K, N]
        zeros = torch.zeros(offs.shape[0], self.shape[0], mat2.shape[1], dtype=outer.dtype, device=outer.device)
        out = zeros.index_add(0, expert, outer)
    else:
        return NotImplemented
    return out.to(out_dtype) if out_dtype is not None else out


def _third_party() -> dict:
    """Decompositions of other libraries' custom ops, when those libraries are loaded."""
    table = {}
    ops = getattr(torch.ops, "transformers", None)
    for name, fn in (
        ("grouped_mm_fallback", grouped_mm_fallback),
        ("grouped_mm_fallback_backward", grouped_mm_fallback_backward),
    ):
        try:
            table[getattr(ops, name).default] = fn
        except (AttributeError, RuntimeError):
            pass
    return table


def base_name(op: torch._ops.OpOverload) -> str:
    """`namespace.name` of an overload, as the op registry names ops."""
    ns, name = op._schema.name.split("::", 1)
    return f"{ns}.{name}"


@functools.lru_cache(maxsize=1)
def registry_policies() -> dict[str, str]:
    """The op registry's decomposition policy of every lowered op: "lowering" (the lowering
    wins: PyTorch's decompositions of it are not taken), "python" (AOTAutograd decomposes it
    where PyTorch or torchtpu has a decomposition) or "none" (no decomposition expected)."""
    from torchtpu import _C

    return {e["name"]: e["decomposition"] for e in _C.op_registry() if e["lowered"]}


def decomposition_table() -> dict:
    """The table for one compile: torchtpu's (built once) plus third-party custom ops'."""
    return {**_base_table(), **_third_party()}


def _base(op) -> str | None:
    return base_name(op) if isinstance(op, torch._ops.OpOverload) else None


@functools.lru_cache(maxsize=1)
def _base_table() -> dict:
    """Core decompositions, then PyTorch's other decompositions for ops torchtpu has no
    lowering for (group norm, repeat, diagonal, upsampling, ...), then torchtpu's own."""
    from torch._decomp import core_aten_decompositions
    from torch._decomp import decomposition_table as every_decomposition

    policies = registry_policies()
    table = {op: fn for op, fn in core_aten_decompositions().items() if policies.get(_base(op)) != "lowering"}
    for op, fn in every_decomposition.items():
        base = _base(op)
        if op not in table and base is not None and base not in policies and base not in NEVER_DECOMPOSE:
            table[op] = fn
    table[aten._scaled_dot_product_flash_attention_for_cpu.default] = sdpa_cpu_forward
    table[aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = sdpa_cpu_backward
    table[aten.convolution_backward.default] = convolution_backward
    table[aten.max_pool2d_with_indices_backward.default] = max_pool2d_with_indices_backward
    table[aten._adaptive_avg_pool2d_backward.default] = adaptive_avg_pool2d_backward
    table[aten.adaptive_max_pool2d.default] = adaptive_max_pool2d
    table[aten.adaptive_max_pool2d_backward.default] = adaptive_max_pool2d_backward
    table[aten._grouped_mm.default] = grouped_mm
    table[aten.native_group_norm.default] = native_group_norm
    table[aten.addbmm.default] = addbmm
    table[aten.diagonal_scatter.default] = diagonal_scatter
    table.update(foreach_decompositions())
    for op, layout in EAGER_LAYOUTS.items():
        if op in table:
            table[op] = _with_eager_layout(table[op], layout)
    return table


# Decompositions whose first result has other strides than eager's kernel gives it (found by
# `test_last_mile_models.py::test_decompositions_give_eager_strides`, which compares them over OpInfo's samples in several layouts). A
# later `.view()` of the result fails in tracing where eager's succeeds (WavLM's
# `position_bias.unsqueeze(0).repeat(...).view(...)`), so the result is given eager's layout:
# `contiguous` whatever the input's, or `input`, the input's suggested memory format.
EAGER_LAYOUTS = {
    aten.repeat.default: "contiguous",
    aten.addbmm.default: "contiguous",
    aten.baddbmm.default: "contiguous",
    aten.native_batch_norm.default: "input",
    aten._batch_norm_with_update.default: "input",
}


def _with_eager_layout(fn, layout: str):
    """`fn` whose first result is made contiguous in eager's memory format (a clone in the
    graph only where tracing finds other strides; the IR's values are contiguous anyway)."""

    def decomposed(*args, **kwargs):
        out = fn(*args, **kwargs)
        if out is NotImplemented:
            return out
        first = out[0] if isinstance(out, (tuple, list)) else out
        fmt = args[0].suggest_memory_format() if layout == "input" else torch.contiguous_format
        if first.is_contiguous(memory_format=fmt):
            return out
        first = first.contiguous(memory_format=fmt)
        return (first, *out[1:]) if isinstance(out, (tuple, list)) else first

    decomposed.__name__ = getattr(fn, "__name__", "decomposed")
    decomposed.__wrapped__ = fn
    return decomposed
