"""Ops whose result size depends on values (`nonzero`, `masked_select`, indexing with boolean
masks). As on CUDA they read one number back from the device, the count. The programs then
run at a static size: `nonzero_static` with the count rounded up to a power of two, and a
view of the first `count` rows is the result, so a count that changes every step compiles
once per bucket, not once per value.

- `x[mask]` (one mask over the leading dims) gathers with the bucket-sized indices and views
  the first `count` rows; other index lists with masks use the exact indices.
- `x[mask] = v` with one value (a scalar, or one element) is `where(mask, v, x)`: no count at
  all; other values need the exact indices.
"""

from __future__ import annotations

import torch

from torchtpu.device import _dispatch, _storage

aten = torch.ops.aten


def _bucket(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _count(mask, op: str) -> int:
    counted = _dispatch.run(aten.count_nonzero.default, mask)
    return int(_storage.to_host(counted, ("data_dependent_shape", op)).item())


def _padded_nonzero(self, count: int, fill: int):
    return _dispatch.run(aten.nonzero_static.default, self, size=_bucket(count), fill_value=fill)


def nonzero(self):
    count = _count(self, "aten::nonzero")
    return _padded_nonzero(self, count, -1)[:count]


def _is_mask(idx) -> bool:
    return idx is not None and idx.dtype in (torch.bool, torch.uint8)


def _exact_indices(indices):
    """Boolean masks among `indices` replaced by the long indices of their true entries (one
    per mask dim), as PyTorch's indexing expands them."""
    out = []
    for idx in indices:
        if _is_mask(idx):
            # A CPU mask (allowed, as for CUDA tensors) stays on the CPU: its indices do too.
            found = torch.nonzero(idx) if idx.device.type == "cpu" else nonzero(idx)
            out.extend(found.unbind(1))
        else:
            out.append(idx)
    return out


def index(self, indices):
    if not any(_is_mask(i) for i in indices):
        return _dispatch.run(aten.index.Tensor, self, indices)
    if len(indices) == 1 and indices[0].device.type == self.device.type:
        mask = indices[0]
        count = _count(mask, "indexing with a boolean mask (x[mask], masked_select)")
        padded = _padded_nonzero(mask, count, 0).unbind(1)  # rows past `count` point at 0
        return _dispatch.run(aten.index.Tensor, self, list(padded))[:count]
    return _dispatch.run(aten.index.Tensor, self, _exact_indices(indices))


def _single_mask(self, indices, values) -> bool:
    return (
        len(indices) == 1
        and _is_mask(indices[0])
        and indices[0].device.type == self.device.type
        and values.numel() == 1
    )


def _where_put(self, mask, values, accumulate: bool):
    mask = mask.bool()
    while mask.dim() < self.dim():
        mask = mask.unsqueeze(-1)
    value = values.reshape(()).to(self.dtype)
    if accumulate:
        return torch.where(mask, self + value, self)
    return torch.where(mask, value, self)


def index_put_(self, indices, values, accumulate=False):
    if _single_mask(self, indices, values):
        return self.copy_(_where_put(self, indices[0], values, accumulate))
    if any(_is_mask(i) for i in indices):
        indices = _exact_indices(indices)
    return _dispatch.run(aten.index_put_.default, self, indices, values, accumulate)


def _index_put_impl_(self, indices, values, accumulate=False, unsafe=False):
    return index_put_(self, indices, values, accumulate)


def index_put(self, indices, values, accumulate=False):
    if _single_mask(self, indices, values):
        return _where_put(self, indices[0], values, accumulate)
    if any(_is_mask(i) for i in indices):
        indices = _exact_indices(indices)
    return _dispatch.run(aten.index_put.default, self, indices, values, accumulate)


def masked_select(self, mask):
    self_b, mask_b = torch.broadcast_tensors(self, mask)
    return index(self_b, [mask_b])


KERNELS = {
    "nonzero": nonzero,
    "masked_select": masked_select,
    "index.Tensor": index,
    "index_put_": index_put_,
    "_index_put_impl_": _index_put_impl_,
    "index_put": index_put,
}
