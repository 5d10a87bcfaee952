"""Padding a graph's symbolic sizes to buckets, where padding cannot change the real rows.

A graph with symbolic sizes is compiled once per input signature (`backend._PerShape`); a
loop whose batch changes at every call would compile a program per size. Instead, a size
symbol that only ever indexes independent rows (a batch) is padded up to the next bucket: the
inputs are zero-padded along its dims, the bucket's program runs, and the outputs are cut back
(`Padded`). Which symbols may be padded is decided once per graph (`padding_analysis.py`).
Bucketing is an inference-graph matter: training graphs keep exact sizes (the backward sums
over the batch). Garbage in padded rows (log(0) = -inf, NaN) is harmless: padded rows are
never combined with real ones and are cut away.
"""

from __future__ import annotations

import math
import os

import torch

from torchtpu.compiled.padding_analysis import Plan, sym_shape
from torchtpu.errors import OptionsError

# The default buckets: powers of two from 8 (a TPU's sublane count, below which XLA pads a
# batch anyway) to 1024, 8 buckets. Sizes above the largest are compiled at their own size.
DEFAULT_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024)
MAX_BUCKETS = 8
ENV = "TORCHTPU_BUCKETS"


def parse(value) -> tuple:
    """A bucket list from an option or TORCHTPU_BUCKETS: ints, or a comma-separated string;
    "off"/"0"/False/[] turn bucketing off (). Sorted, at most 8, each at least 2."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return DEFAULT_BUCKETS
    if value is False or (isinstance(value, str) and value.strip().lower() in ("0", "off", "false", "no")):
        return ()
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise OptionsError(f"torchtpu buckets: expected comma-separated sizes, got {value!r}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise OptionsError(f"torchtpu option 'buckets' must be a list of sizes or False, got {value!r}")
    buckets = tuple(sorted(set(value)))
    if len(buckets) > MAX_BUCKETS:
        raise OptionsError(f"torchtpu buckets: at most {MAX_BUCKETS} sizes, got {len(buckets)} ({list(buckets)})")
    if buckets and buckets[0] < 2:
        raise OptionsError(f"torchtpu buckets: sizes must be at least 2, got {list(buckets)}")
    return buckets


def default() -> tuple:
    return parse(os.environ.get(ENV))


def bucket_of(size: int, buckets: tuple) -> int | None:
    """The smallest bucket holding `size`; None above the largest."""
    for b in buckets:
        if b >= size:
            return b
    return None


def label(plan: Plan, binding, sizes: dict) -> str:
    """How stats()["buckets"] names the program a call runs: each symbol's size in it."""
    values = {str(s): sizes.get(s, int(v)) for s, v in binding.values.items()}
    return ",".join(f"{name}={values[name]}" for name in map(str, plan.symbols) if name in values)


def padded_sizes(plan: Plan, binding, buckets: tuple) -> dict:
    """{symbol: bucket} for this call's sizes (`binding`: the real one); a size above the
    largest bucket keeps its own (no entry)."""
    if any(binding.values[a] != binding.values[b] for a, b in plan.ties):
        return {}
    out = {}
    for s in plan.padded:
        real = int(binding.values[s])
        b = bucket_of(real, buckets)
        # A masked graph runs its bucket's masked program at the bucket's own size too.
        if b is not None and (b != real or s in plan.masked):
            out[s] = b
    return out


def _pad(t: torch.Tensor, shape: tuple) -> torch.Tensor:
    """`t` zero-padded at the end of each dim to `shape`. A tpu tensor is padded on the host
    and uploaded: a device program would be compiled for every (size, bucket) pair."""
    if t.device.type == "tpu":
        from torchtpu.device import _storage

        return _storage.from_host(_pad(_storage.to_host(t), shape), device=t.device.index)
    out = t.new_zeros(shape)
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


def _cut(t: torch.Tensor, lengths: dict, stride: tuple | None) -> torch.Tensor:
    """The first `lengths[d]` rows of `t` along each dim d, with the unpadded call's strides
    where those are dense (`stride`); on tpu, cut on the host and uploaded (no program)."""
    if t.device.type == "tpu":
        from torchtpu.device import _storage

        return _storage.from_host(_cut(_storage.to_host(t), lengths, None), device=t.device.index)
    for d, n in lengths.items():
        t = t.narrow(d, 0, n)
    if stride is not None and t.stride() != stride:
        t = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)
    return t


def _fill(kind: str, dtype: torch.dtype):
    if dtype == torch.bool:
        return kind in ("one", "high")
    if kind in ("zero", "one"):
        return int(kind == "one")
    if dtype.is_floating_point:
        return -math.inf if kind == "low" else math.inf
    info = torch.iinfo(dtype)
    return info.min if kind == "low" else info.max


class _Masking(torch.fx.Interpreter):
    """Runs the graph with each masked argument replaced by `where(arange(n) < real, x, fill)`
    along its dim, `real` being the symbol's real size (a 0-d int64 input)."""

    def __init__(self, gm, masks: dict, reals: dict):
        super().__init__(gm)
        self.masks, self.reals = masks, reals

    def run_node(self, n):
        masks = self.masks.get(n.name)
        if not masks:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        args = list(args)
        names = [a.name for a in n.target._schema.arguments]
        for name, d, kind, s in masks:
            pos = names.index(name)
            x = kwargs[name] if name in kwargs else args[pos]
            valid = torch.arange(x.shape[d], device=x.device) < self.reals[s]
            valid = valid.view([-1] + [1] * (x.dim() - d - 1))
            x = torch.where(valid, x, _fill(kind, x.dtype))
            if name in kwargs:
                kwargs[name] = x
            else:
                args[pos] = x
        return n.target(*args, **kwargs)


def masked_graph(gm: torch.fx.GraphModule, plan: Plan, args: list) -> torch.fx.GraphModule:
    """`gm` traced at the padded sizes of `args` (the graph's inputs, then one 0-d int64 real
    size per `plan.masked` symbol) with its masks in: a static graph, the bucket's program for
    every real size in it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    n = len(args) - len(plan.masked)

    def run(*inputs):
        reals = dict(zip(plan.masked, inputs[n:]))
        return _Masking(gm, plan.masks, reals).run(*inputs[:n])

    return make_fx(run, tracing_mode="fake")(*args)


class Padded:
    """One real input signature run through its bucket's program: inputs padded, outputs cut
    back, size outputs and returned inputs as the unpadded call gives them."""

    def __init__(self, plan: Plan, gm, binding, sizes: dict):
        from torchtpu.compiled.exporter import is_non_overlapping_and_dense

        self.run = None  # the bucket's program, set by the caller
        values = dict(binding.values)
        padded_values = {**values, **sizes}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.pads = {}  # placeholder position -> padded shape
        for s in sizes:
            for pos, _ in plan.padded[s]:
                val = placeholders[pos].meta["val"]
                shape = tuple(int(e.xreplace(padded_values)) for e in sym_shape(val))
                if shape != binding.shape(val):
                    self.pads[pos] = shape
        self.size_args = {
            pos: int(e.xreplace(padded_values)) for pos, e in plan.size_inputs.items() if e.free_symbols & sizes.keys()
        }
        outs = gm.graph.output_node().args[0]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        self.cuts = {}  # output position -> ({dim: length}, strides or None)
        for k, cuts in plan.outputs.items():
            lengths = {
                d: int((s * math.prod(inner)).xreplace(values))
                for d, s, inner in cuts
                if s in sizes and sizes[s] != values[s]
            }
            if not lengths:
                continue
            val = outs[k].meta["val"]
            shape, stride = binding.shape(val), binding.stride(val)
            self.cuts[k] = (lengths, stride if is_non_overlapping_and_dense(shape, stride) else None)
        self.sizes = {k: int(e.xreplace(values)) for k, e in plan.size_outputs.items()}
        self.returned = plan.returned_inputs
        # The masks' real sizes, after the graph's inputs (a masked bucket program's own).
        self.reals = [torch.tensor(int(values[s]), dtype=torch.int64) for s in plan.masked]

    def padded_args(self, args: list) -> list:
        padded = list(args)
        for pos, shape in self.pads.items():
            padded[pos] = _pad(args[pos], shape)
        for pos, value in self.size_args.items():
            padded[pos] = value
        return padded + self.reals

    def __call__(self, args: list):
        result = self.run(self.padded_args(args))
        single = not isinstance(result, (list, tuple))
        outs = [result] if single else list(result)
        for k, (lengths, stride) in self.cuts.items():
            outs[k] = _cut(outs[k], lengths, stride)
        for k, value in self.sizes.items():
            outs[k] = value
        for k, pos in self.returned.items():
            outs[k] = args[pos]
        if single:
            return outs[0]
        return tuple(outs) if isinstance(result, tuple) else outs
