"""Ops whose result size depends on values (`nonzero`, `masked_select`, indexing with boolean
masks). As on CUDA they read one number back from the device, the count. The programs then
run at a static size: `nonzero_static` with the count rounded up to a power of two, and a
view of the first `count` rows is the result, so a count that changes every step compiles
once per bucket, not once per value.

- `x[mask]` (one mask over the leading dims) gathers with the bucket-sized indices and views
  the first `count` rows; other index lists with masks use the exact indices.
- `x[mask] = v` with one mask, the only index, is lowered at static shapes: `where(mask, v, x)`
  for values that broadcast, v's k-th value at the k-th set element for one value per set
  element; that v's count is the mask's is checked on the device, read at the next host read
  (`index_checks.py`): no count read now. Other index lists with masks use the exact indices.
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


def _lowered_mask(self, indices) -> bool:
    """One mask on this device, the only index, with the shape of the dims it covers: the
    lowering writes the values at static shapes (a select, or v's k-th value at the k-th set
    element), and the program checks v's count on the device (`index_checks.py`)."""
    present = [(p, i) for p, i in enumerate(indices) if i is not None]
    if len(present) != 1:
        return False
    p, mask = present[0]
    return (
        _is_mask(mask)
        and mask.device.type == self.device.type
        and mask.dim() > 0
        and tuple(self.shape[p : p + mask.dim()]) == tuple(mask.shape)
    )


def index_put_(self, indices, values, accumulate=False):
    if not _lowered_mask(self, indices) and any(_is_mask(i) for i in indices):
        indices = _exact_indices(indices)
    return _dispatch.run(aten.index_put_.default, self, indices, values, accumulate)


def _index_put_impl_(self, indices, values, accumulate=False, unsafe=False):
    return index_put_(self, indices, values, accumulate)


def index_put(self, indices, values, accumulate=False):
    if not _lowered_mask(self, indices) and any(_is_mask(i) for i in indices):
        indices = _exact_indices(indices)
    return _dispatch.run(aten.index_put.default, self, indices, values, accumulate)


def masked_select(self, mask):
    self_b, mask_b = torch.broadcast_tensors(self, mask)
    return index(self_b, [mask_b])
