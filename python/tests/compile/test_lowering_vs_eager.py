"""Every lowering-table family against PyTorch eager on the same inputs (XLA CPU plugin).

Tolerances: exact for integer/bool results; float32 results rtol=1.3e-6/atol=1e-5 for
elementwise arithmetic and rtol=1e-4/atol=1e-5 for transcendental and reduction results (XLA
and ATen use different polynomial approximations and summation orders); float64 1e-7/1e-7."""

import pytest
import torch
from lowering_harness import assert_matches, run_op

aten = torch.ops.aten


def f32(*shape, lo=-3.0, hi=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


def ints(*shape, lo=-9, hi=10, dtype=torch.int32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def bools(*shape, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) > 0.5


X = f32(3, 4)
POS = f32(3, 4, lo=0.1, hi=4.0, seed=3)
UNIT = f32(3, 4, lo=-0.9, hi=0.9, seed=4)
I = ints(3, 4)
NZ = ints(3, 4, lo=1, hi=6, seed=5) * torch.where(ints(3, 4, lo=0, hi=2, seed=6) > 0, 1, -1).to(torch.int32)

LOOSE = (1e-4, 1e-5)
TIGHT = (1.3e-6, 1e-5)
# Lower-triangular systems, well conditioned (diagonal 2..3), the upper triangle garbage.
TRI = (
    f32(2, 4, 4, lo=-0.5, hi=0.5, seed=3)
    + torch.diag_embed(f32(2, 4, lo=2.0, hi=3.0, seed=4))
    + 9.0 * torch.ones(4, 4).triu(1)
)
MASK = torch.tensor([[True, False, True, True], [False, False, True, False]])

# (id, aten op as IR name, inputs, attrs, eager function, (rtol, atol))
CASES = [
    # unary
    *[
        (name, f"aten.{name}.default", [inp], {}, getattr(aten, name).default, LOOSE)
        for name, inp in [
            ("abs", X),
            ("neg", X),
            ("ceil", X),
            ("floor", X),
            ("round", f32(3, 4, lo=-3, hi=3, seed=9) * 2),
            ("trunc", X),
            ("sign", X),
            ("sqrt", POS),
            ("rsqrt", POS),
            ("exp", X),
            ("exp2", X),
            ("expm1", X),
            ("log", POS),
            ("log2", POS),
            ("log10", POS),
            ("log1p", POS),
            ("sin", X),
            ("cos", X),
            ("tan", UNIT),
            ("asin", UNIT),
            ("acos", UNIT),
            ("atan", X),
            ("sinh", X),
            ("cosh", X),
            ("tanh", X),
            ("sigmoid", X),
            ("erf", X),
            ("reciprocal", POS),
            ("relu", X),
            ("logical_not", X),
            ("bitwise_not", I),
        ]
    ],
    ("atan_long", "aten.atan.default", [torch.linspace(-9, 9, 200)], {}, aten.atan.default, LOOSE),
    ("asin_long", "aten.asin.default", [torch.linspace(-0.99, 0.99, 200)], {}, aten.asin.default, LOOSE),
    ("sinh_long", "aten.sinh.default", [torch.linspace(-5, 5, 200)], {}, aten.sinh.default, LOOSE),
    ("erf_long", "aten.erf.default", [torch.linspace(-5, 5, 200)], {}, aten.erf.default, LOOSE),
    ("tan_long", "aten.tan.default", [torch.linspace(-1.5, 1.5, 200)], {}, aten.tan.default, LOOSE),
    ("abs_int", "aten.abs.default", [I], {}, aten.abs.default, TIGHT),
    ("sqrt_int", "aten.sqrt.default", [I.abs()], {}, aten.sqrt.default, LOOSE),
    ("gelu", "aten.gelu.default", [X], {}, aten.gelu.default, LOOSE),
    (
        "gelu_tanh",
        "aten.gelu.default",
        [X],
        {"approximate": "tanh"},
        lambda x: aten.gelu.default(x, approximate="tanh"),
        LOOSE,
    ),
    # binary
    ("add", "aten.add.Tensor", [X, POS], {}, aten.add.Tensor, TIGHT),
    ("add_alpha", "aten.add.Tensor", [X, POS], {"alpha": 2}, lambda a, b: aten.add.Tensor(a, b, alpha=2), TIGHT),
    ("add_broadcast", "aten.add.Tensor", [X, f32(4, seed=7)], {}, aten.add.Tensor, TIGHT),
    ("add_int_float", "aten.add.Tensor", [I, X], {}, aten.add.Tensor, TIGHT),
    ("add_scalar", "aten.add.Tensor", [I], {"other": 2.5}, lambda a: aten.add.Tensor(a, 2.5), TIGHT),
    ("add_bool", "aten.add.Tensor", [bools(5), bools(5, seed=8)], {}, aten.add.Tensor, TIGHT),
    ("sub", "aten.sub.Tensor", [X, POS], {}, aten.sub.Tensor, TIGHT),
    ("rsub", "aten.rsub.Scalar", [X], {"other": 1.0}, lambda a: aten.rsub.Scalar(a, 1.0), TIGHT),
    ("mul", "aten.mul.Tensor", [X, POS], {}, aten.mul.Tensor, TIGHT),
    (
        "mul_f64_scalar_tensor",
        "aten.mul.Tensor",
        [X, torch.tensor(0.1, dtype=torch.float64)],
        {},
        aten.mul.Tensor,
        TIGHT,
    ),
    ("div", "aten.div.Tensor", [X, POS], {}, aten.div.Tensor, TIGHT),
    ("div_int_true", "aten.div.Tensor", [I, NZ], {}, aten.div.Tensor, TIGHT),
    (
        "div_floor_int",
        "aten.div.Tensor_mode",
        [I, NZ],
        {"rounding_mode": "floor"},
        lambda a, b: aten.div.Tensor_mode(a, b, rounding_mode="floor"),
        TIGHT,
    ),
    (
        "div_trunc_int",
        "aten.div.Tensor_mode",
        [I, NZ],
        {"rounding_mode": "trunc"},
        lambda a, b: aten.div.Tensor_mode(a, b, rounding_mode="trunc"),
        TIGHT,
    ),
    (
        "div_floor_float",
        "aten.div.Tensor_mode",
        [X, f32(3, 4, lo=-2, hi=2, seed=11)],
        {"rounding_mode": "floor"},
        lambda a, b: aten.div.Tensor_mode(a, b, rounding_mode="floor"),
        TIGHT,
    ),
    (
        "div_trunc_float",
        "aten.div.Tensor_mode",
        [X, POS],
        {"rounding_mode": "trunc"},
        lambda a, b: aten.div.Tensor_mode(a, b, rounding_mode="trunc"),
        TIGHT,
    ),
    ("pow", "aten.pow.Tensor_Tensor", [POS, X], {}, aten.pow.Tensor_Tensor, LOOSE),
    ("pow_scalar", "aten.pow.Tensor_Scalar", [X], {"exponent": 2}, lambda a: aten.pow.Tensor_Scalar(a, 2), LOOSE),
    ("maximum", "aten.maximum.default", [X, POS], {}, aten.maximum.default, TIGHT),
    (
        "minimum_nan",
        "aten.minimum.default",
        [torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([2.0, 0.0, float("nan")])],
        {},
        aten.minimum.default,
        TIGHT,
    ),
    (
        "maximum_nan",
        "aten.maximum.default",
        [torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([2.0, 0.0, float("nan")])],
        {},
        aten.maximum.default,
        TIGHT,
    ),
    ("relu_nan", "aten.relu.default", [torch.tensor([-1.0, float("nan"), 3.0])], {}, aten.relu.default, TIGHT),
    (
        "clamp_nan",
        "aten.clamp.default",
        [torch.tensor([-5.0, float("nan"), 5.0])],
        {"min": -1.0, "max": 1.0},
        lambda a: aten.clamp.default(a, -1.0, 1.0),
        TIGHT,
    ),
    ("remainder_int", "aten.remainder.Tensor", [I, NZ], {}, aten.remainder.Tensor, TIGHT),
    (
        "remainder_float",
        "aten.remainder.Tensor",
        [X, f32(3, 4, lo=-2, hi=2, seed=12)],
        {},
        aten.remainder.Tensor,
        LOOSE,
    ),
    ("fmod", "aten.fmod.Tensor", [X, POS], {}, aten.fmod.Tensor, LOOSE),
    ("atan2", "aten.atan2.default", [X, POS], {}, aten.atan2.default, LOOSE),
    ("bitwise_and", "aten.bitwise_and.Tensor", [I, NZ], {}, aten.bitwise_and.Tensor, TIGHT),
    ("bitwise_xor_bool", "aten.bitwise_xor.Tensor", [bools(6), bools(6, seed=9)], {}, aten.bitwise_xor.Tensor, TIGHT),
    # comparisons and logic
    ("eq", "aten.eq.Tensor", [I, NZ], {}, aten.eq.Tensor, TIGHT),
    ("lt_mixed", "aten.lt.Tensor", [I, X], {}, aten.lt.Tensor, TIGHT),
    ("ge_scalar", "aten.ge.Scalar", [I], {"other": 0.5}, lambda a: aten.ge.Scalar(a, 0.5), TIGHT),
    (
        "ne_nan",
        "aten.ne.Tensor",
        [torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0])],
        {},
        aten.ne.Tensor,
        TIGHT,
    ),
    ("logical_and", "aten.logical_and.default", [X, I], {}, aten.logical_and.default, TIGHT),
    ("logical_or", "aten.logical_or.default", [bools(4), bools(4, seed=5)], {}, aten.logical_or.default, TIGHT),
    ("where", "aten.where.self", [bools(3, 4), X, POS], {}, aten.where.self, TIGHT),
    ("where_broadcast", "aten.where.self", [bools(4), X, torch.tensor(0.0)], {}, aten.where.self, TIGHT),
    ("clamp", "aten.clamp.default", [X], {"min": -1.0, "max": 0.5}, lambda a: aten.clamp.default(a, -1.0, 0.5), TIGHT),
    ("clamp_tensor", "aten.clamp.Tensor", [X, POS * -1, POS], {}, aten.clamp.Tensor, TIGHT),
    (
        "hardtanh",
        "aten.hardtanh.default",
        [X],
        {"min_val": -0.5, "max_val": 2.0},
        lambda a: aten.hardtanh.default(a, -0.5, 2.0),
        TIGHT,
    ),
    (
        "hardtanh_nan",
        "aten.hardtanh.default",
        [torch.tensor([float("nan"), -3.0, 3.0])],
        {},
        aten.hardtanh.default,
        TIGHT,
    ),
    (
        "isinf",
        "aten.isinf.default",
        [torch.tensor([1.0, float("inf"), -float("inf"), float("nan")])],
        {},
        aten.isinf.default,
        TIGHT,
    ),
    ("isnan", "aten.isnan.default", [torch.tensor([1.0, float("inf"), float("nan")])], {}, aten.isnan.default, TIGHT),
    ("isfinite_int", "aten.isfinite.default", [I], {}, aten.isfinite.default, TIGHT),
    (
        "to_int",
        "aten._to_copy.default",
        [X],
        {"dtype": torch.int32},
        lambda a: aten._to_copy.default(a, dtype=torch.int32),
        TIGHT,
    ),
    (
        "to_bool",
        "aten._to_copy.default",
        [X],
        {"dtype": torch.bool},
        lambda a: aten._to_copy.default(a, dtype=torch.bool),
        TIGHT,
    ),
    (
        "to_bf16",
        "aten._to_copy.default",
        [X],
        {"dtype": torch.bfloat16},
        lambda a: aten._to_copy.default(a, dtype=torch.bfloat16),
        TIGHT,
    ),
    (
        "to_f64",
        "aten._to_copy.default",
        [I],
        {"dtype": torch.float64},
        lambda a: aten._to_copy.default(a, dtype=torch.float64),
        TIGHT,
    ),
    # reductions
    ("sum_dim", "aten.sum.dim_IntList", [X], {"dim": [1]}, lambda a: aten.sum.dim_IntList(a, [1]), LOOSE),
    (
        "sum_keepdim",
        "aten.sum.dim_IntList",
        [X],
        {"dim": [0], "keepdim": True},
        lambda a: aten.sum.dim_IntList(a, [0], True),
        LOOSE,
    ),
    ("sum_all", "aten.sum.default", [X], {}, aten.sum.default, LOOSE),
    ("sum_int_to_i64", "aten.sum.dim_IntList", [I], {"dim": [-1]}, lambda a: aten.sum.dim_IntList(a, [-1]), TIGHT),
    ("sum_bool", "aten.sum.default", [bools(7)], {}, aten.sum.default, TIGHT),
    ("mean", "aten.mean.dim", [X], {"dim": [0, 1], "keepdim": True}, lambda a: aten.mean.dim(a, [0, 1], True), LOOSE),
    ("prod", "aten.prod.dim_int", [X], {"dim": 1}, lambda a: aten.prod.dim_int(a, 1), LOOSE),
    ("amax", "aten.amax.default", [X], {"dim": [1]}, lambda a: aten.amax.default(a, [1]), TIGHT),
    (
        "amax_nan",
        "aten.amax.default",
        [torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, 6.0]])],
        {"dim": [1]},
        lambda a: aten.amax.default(a, [1]),
        TIGHT,
    ),
    ("amin_int", "aten.amin.default", [I], {"dim": [0]}, lambda a: aten.amin.default(a, [0]), TIGHT),
    ("argmax", "aten.argmax.default", [X], {"dim": 1}, lambda a: aten.argmax.default(a, 1), TIGHT),
    (
        "argmax_ties",
        "aten.argmax.default",
        [torch.tensor([[1.0, 3.0, 3.0], [float("nan"), 5.0, float("nan")]])],
        {"dim": 1},
        lambda a: aten.argmax.default(a, 1),
        TIGHT,
    ),
    ("argmin_flat", "aten.argmin.default", [X], {}, aten.argmin.default, TIGHT),
    ("max_dim", "aten.max.dim", [X], {"dim": 0, "keepdim": True}, lambda a: aten.max.dim(a, 0, True), TIGHT),
    (
        "var",
        "aten.var.correction",
        [X],
        {"dim": [1], "correction": 1},
        lambda a: aten.var.correction(a, [1], correction=1),
        LOOSE,
    ),
    ("any", "aten.any.dim", [bools(3, 4)], {"dim": 1}, lambda a: aten.any.dim(a, 1), TIGHT),
    # linear algebra
    ("mm", "aten.mm.default", [f32(3, 5), f32(5, 2, seed=3)], {}, aten.mm.default, LOOSE),
    # torchao's W8A8 linear: int8 x int8 summed in int32, exact (extreme values included).
    (
        "int_mm",
        "aten._int_mm.default",
        [ints(32, 64, lo=-128, hi=128, dtype=torch.int8), ints(64, 16, lo=-128, hi=128, seed=4, dtype=torch.int8)],
        {},
        aten._int_mm.default,
        TIGHT,
    ),
    # torchao's activations on a CPU with VNNI are uint8: PyTorch's CPU kernel takes u8 x s8.
    (
        "int_mm_u8",
        "aten._int_mm.default",
        [ints(32, 64, lo=0, hi=256, dtype=torch.uint8), ints(64, 16, lo=-128, hi=128, seed=4, dtype=torch.int8)],
        {},
        aten._int_mm.default,
        TIGHT,
    ),
    # out_dtype(mm / addmm, int32, x_i8, w_i8), written as mm with an int32 result.
    (
        "mm_int8_into_int32",
        "aten.mm.default",
        [ints(8, 32, lo=-128, hi=128, dtype=torch.int8), ints(32, 8, lo=-128, hi=128, seed=4, dtype=torch.int8)],
        {},
        lambda a, b: a.to(torch.int32) @ b.to(torch.int32),
        TIGHT,
    ),
    (
        "addmm_int8_into_int32",
        "aten.addmm.default",
        [
            ints(8, lo=-1000, hi=1000, seed=7),
            ints(4, 32, lo=-128, hi=128, dtype=torch.int8),
            ints(32, 8, lo=-128, hi=128, seed=4, dtype=torch.int8),
        ],
        {},
        lambda c, a, b: c + a.to(torch.int32) @ b.to(torch.int32),
        TIGHT,
    ),
    ("bmm", "aten.bmm.default", [f32(2, 3, 4), f32(2, 4, 5, seed=3)], {}, aten.bmm.default, LOOSE),
    (
        "addmm",
        "aten.addmm.default",
        [f32(5), f32(3, 4), f32(4, 5, seed=3)],
        {"beta": 0.5, "alpha": 2.0},
        lambda b, x, y: aten.addmm.default(b, x, y, beta=0.5, alpha=2.0),
        LOOSE,
    ),
    # shapes
    ("view", "aten.view.default", [X], {"size": [2, 6]}, lambda a: aten.view.default(a, [2, 6]), TIGHT),
    (
        "permute",
        "aten.permute.default",
        [f32(2, 3, 4)],
        {"dims": [2, 0, 1]},
        lambda a: aten.permute.default(a, [2, 0, 1]),
        TIGHT,
    ),
    (
        "transpose",
        "aten.transpose.int",
        [f32(2, 3, 4)],
        {"dim0": 0, "dim1": -1},
        lambda a: aten.transpose.int(a, 0, -1),
        TIGHT,
    ),
    ("t", "aten.t.default", [X], {}, aten.t.default, TIGHT),
    ("squeeze", "aten.squeeze.dim", [f32(3, 1, 4)], {"dim": 1}, lambda a: aten.squeeze.dim(a, 1), TIGHT),
    ("unsqueeze", "aten.unsqueeze.default", [X], {"dim": -1}, lambda a: aten.unsqueeze.default(a, -1), TIGHT),
    (
        "expand",
        "aten.expand.default",
        [f32(3, 1)],
        {"size": [2, 3, 4]},
        lambda a: aten.expand.default(a, [2, 3, 4]),
        TIGHT,
    ),
    (
        "slice",
        "aten.slice.Tensor",
        [f32(5, 6)],
        {"dim": 1, "start": 1, "end": -1, "step": 2},
        lambda a: aten.slice.Tensor(a, 1, 1, -1, 2),
        TIGHT,
    ),
    (
        "slice_big_end",
        "aten.slice.Tensor",
        [f32(5, 6)],
        {"dim": 0, "start": -2, "end": 9223372036854775807},
        lambda a: aten.slice.Tensor(a, 0, -2, 9223372036854775807),
        TIGHT,
    ),
    ("select", "aten.select.int", [f32(5, 6)], {"dim": 0, "index": -1}, lambda a: aten.select.int(a, 0, -1), TIGHT),
    ("cat", "aten.cat.default", [X, POS, I.float()], {"dim": 0}, lambda *a: aten.cat.default(list(a), 0), TIGHT),
    ("cat_promote", "aten.cat.default", [I, X], {"dim": 1}, lambda *a: aten.cat.default(list(a), 1), TIGHT),
    ("stack", "aten.stack.default", [X, POS], {"dim": 1}, lambda *a: aten.stack.default(list(a), 1), TIGHT),
    (
        "split_with_sizes",
        "aten.split_with_sizes.default",
        [f32(7, 2)],
        {"split_sizes": [2, 5], "dim": 0},
        lambda a: aten.split_with_sizes.default(a, [2, 5], 0),
        TIGHT,
    ),
    (
        "split",
        "aten.split.Tensor",
        [f32(2, 7)],
        {"split_size": 3, "dim": 1},
        lambda a: aten.split.Tensor(a, 3, 1),
        TIGHT,
    ),
    # factories
    (
        "full",
        "aten.full.default",
        [],
        {"size": [2, 3], "fill_value": 1.5},
        lambda: aten.full.default([2, 3], 1.5),
        TIGHT,
    ),
    (
        "full_int",
        "aten.full.default",
        [],
        {"size": [4], "fill_value": 7, "dtype": torch.int64},
        lambda: aten.full.default([4], 7, dtype=torch.int64),
        TIGHT,
    ),
    ("scalar_tensor", "aten.scalar_tensor.default", [], {"s": 2.5}, lambda: aten.scalar_tensor.default(2.5), TIGHT),
    (
        "arange",
        "aten.arange.start_step",
        [],
        {"start": 1, "end": 10, "step": 3},
        lambda: aten.arange.start_step(1, 10, 3),
        TIGHT,
    ),
    (
        "arange_float",
        "aten.arange.start_step",
        [],
        {"start": 0.0, "end": 1.0, "step": 0.1},
        lambda: aten.arange.start_step(0.0, 1.0, 0.1),
        TIGHT,
    ),
    ("zeros_like", "aten.zeros_like.default", [X], {}, aten.zeros_like.default, TIGHT),
    ("ones_like_int", "aten.ones_like.default", [I], {}, aten.ones_like.default, TIGHT),
    # neural-network ops
    (
        "softmax",
        "aten._softmax.default",
        [X],
        {"dim": 1, "half_to_float": False},
        lambda a: aten._softmax.default(a, 1, False),
        LOOSE,
    ),
    (
        "log_softmax",
        "aten._log_softmax.default",
        [X],
        {"dim": 0, "half_to_float": False},
        lambda a: aten._log_softmax.default(a, 0, False),
        LOOSE,
    ),
    (
        "layer_norm",
        "aten.native_layer_norm.default",
        [f32(2, 3, 4), f32(3, 4, seed=5), f32(3, 4, seed=6)],
        {"normalized_shape": [3, 4], "eps": 1e-5},
        lambda x, w, b: aten.native_layer_norm.default(x, [3, 4], w, b, 1e-5),
        LOOSE,
    ),
    (
        "layer_norm_no_affine",
        "aten.native_layer_norm.default",
        [X],
        {"normalized_shape": [4], "eps": 1e-5, "weight": None, "bias": None},
        lambda x: aten.native_layer_norm.default(x, [4], None, None, 1e-5),
        LOOSE,
    ),
    (
        "batch_norm_eval",
        "aten._native_batch_norm_legit_no_training.default",
        [f32(2, 3, 4, 4), f32(3, seed=5), f32(3, seed=6), f32(3, seed=7), f32(3, lo=0.5, hi=2, seed=8)],
        {"momentum": 0.1, "eps": 1e-5},
        lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training.default(x, w, b, m, v, 0.1, 1e-5),
        LOOSE,
    ),
    (
        "batch_norm_train",
        "aten._native_batch_norm_legit_functional.default",
        [f32(2, 3, 4, 4), f32(3, seed=5), f32(3, seed=6), f32(3, seed=7), f32(3, lo=0.5, hi=2, seed=8)],
        {"training": True, "momentum": 0.1, "eps": 1e-5},
        lambda x, w, b, m, v: aten._native_batch_norm_legit_functional.default(x, w, b, m, v, True, 0.1, 1e-5),
        LOOSE,
    ),
    (
        "conv2d",
        "aten.convolution.default",
        [f32(2, 4, 7, 7), f32(6, 2, 3, 3, seed=5), f32(6, seed=6)],
        {
            "stride": [2, 1],
            "padding": [1, 0],
            "dilation": [1, 2],
            "transposed": False,
            "output_padding": [0, 0],
            "groups": 2,
        },
        lambda x, w, b: aten.convolution.default(x, w, b, [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
        LOOSE,
    ),
    (
        "conv1d_no_bias",
        "aten.convolution.default",
        [f32(1, 3, 9), f32(4, 3, 3, seed=5)],
        {
            "bias": None,
            "stride": [1],
            "padding": [1],
            "dilation": [1],
            "transposed": False,
            "output_padding": [0],
            "groups": 1,
        },
        lambda x, w: aten.convolution.default(x, w, None, [1], [1], [1], False, [0], 1),
        LOOSE,
    ),
    (
        "conv_transpose2d",
        "aten.convolution.default",
        [f32(2, 4, 5, 5), f32(4, 3, 3, 3, seed=5), f32(3, seed=6)],
        {
            "stride": [2, 2],
            "padding": [1, 0],
            "dilation": [1, 1],
            "transposed": True,
            "output_padding": [1, 0],
            "groups": 1,
        },
        lambda x, w, b: aten.convolution.default(x, w, b, [2, 2], [1, 0], [1, 1], True, [1, 0], 1),
        LOOSE,
    ),
    # Kernel larger than the input map: lowered as patches times a matmul (XLA CPU would swap
    # the operands of a stablehlo.convolution and run it as a naive loop).
    (
        "conv2d_small_map",
        "aten.convolution.default",
        [f32(3, 5, 2, 2), f32(6, 5, 3, 3, seed=5), f32(6, seed=6)],
        {
            "stride": [1, 1],
            "padding": [1, 1],
            "dilation": [1, 1],
            "transposed": False,
            "output_padding": [0, 0],
            "groups": 1,
        },
        lambda x, w, b: aten.convolution.default(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        LOOSE,
    ),
    (
        "conv2d_small_map_strided_dilated",
        "aten.convolution.default",
        [f32(2, 3, 2, 2), f32(4, 3, 3, 2, seed=5)],
        {
            "bias": None,
            "stride": [2, 1],
            "padding": [2, 1],
            "dilation": [2, 1],
            "transposed": False,
            "output_padding": [0, 0],
            "groups": 1,
        },
        lambda x, w: aten.convolution.default(x, w, None, [2, 1], [2, 1], [2, 1], False, [0, 0], 1),
        LOOSE,
    ),
    (
        "conv1d_small_map",
        "aten.convolution.default",
        [f32(2, 3, 2), f32(4, 3, 5, seed=5)],
        {
            "bias": None,
            "stride": [1],
            "padding": [2],
            "dilation": [1],
            "transposed": False,
            "output_padding": [0],
            "groups": 1,
        },
        lambda x, w: aten.convolution.default(x, w, None, [1], [2], [1], False, [0], 1),
        LOOSE,
    ),
    (
        "conv_transpose2d_small_map",
        "aten.convolution.default",
        [f32(2, 4, 2, 2), f32(4, 3, 3, 3, seed=5), f32(3, seed=6)],
        {
            "stride": [2, 2],
            "padding": [1, 1],
            "dilation": [1, 1],
            "transposed": True,
            "output_padding": [1, 0],
            "groups": 1,
        },
        lambda x, w, b: aten.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], True, [1, 0], 1),
        LOOSE,
    ),
    (
        "conv_transpose2d_groups",
        "aten.convolution.default",
        [f32(1, 4, 4, 4), f32(4, 3, 2, 2, seed=5)],
        {
            "bias": None,
            "stride": [1, 1],
            "padding": [0, 0],
            "dilation": [2, 1],
            "transposed": True,
            "output_padding": [0, 0],
            "groups": 2,
        },
        lambda x, w: aten.convolution.default(x, w, None, [1, 1], [0, 0], [2, 1], True, [0, 0], 2),
        LOOSE,
    ),
    (
        "max_pool2d",
        "aten.max_pool2d_with_indices.default",
        [f32(2, 3, 7, 7)],
        {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "ceil_mode": False},
        lambda x: aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1], [1, 1], False),
        TIGHT,
    ),
    (
        "max_pool2d_ceil",
        "aten.max_pool2d_with_indices.default",
        [f32(1, 2, 6, 6)],
        {"kernel_size": [3, 3], "stride": [2, 2], "padding": [0, 0], "dilation": [1, 1], "ceil_mode": True},
        lambda x: aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [0, 0], [1, 1], True),
        TIGHT,
    ),
    # triangular solves: A's other triangle holds garbage the solver must not read
    (
        "solve_triangular_lower_left",
        "aten.linalg_solve_triangular.default",
        [TRI, f32(2, 4, 3, seed=9)],
        {"upper": False, "left": True, "unitriangular": False},
        lambda a, b: aten.linalg_solve_triangular.default(a, b, upper=False),
        LOOSE,
    ),
    (
        "solve_triangular_upper_right_unit",
        "aten.linalg_solve_triangular.default",
        [TRI.transpose(-1, -2).contiguous(), f32(3, 4, seed=9)],
        {"upper": True, "left": False, "unitriangular": True},
        lambda a, b: aten.linalg_solve_triangular.default(a, b, upper=True, left=False, unitriangular=True),
        LOOSE,
    ),
    (
        "solve_triangular_batch_broadcast",
        "aten.linalg_solve_triangular.default",
        [TRI[:1], f32(3, 4, 2, seed=9)],
        {"upper": False, "left": True, "unitriangular": False},
        lambda a, b: aten.linalg_solve_triangular.default(a, b, upper=False),
        LOOSE,
    ),
    (
        "solve_triangular_f64",
        "aten.linalg_solve_triangular.default",
        [TRI.double(), f32(2, 4, 3, seed=9).double()],
        {"upper": False, "left": True, "unitriangular": False},
        lambda a, b: aten.linalg_solve_triangular.default(a, b, upper=False),
        TIGHT,
    ),
    (
        "triangular_solve_transpose",
        "aten.triangular_solve.default",
        [f32(2, 4, 3, seed=9), TRI],
        {"upper": False, "transpose": True, "unitriangular": False},
        lambda b, a: aten.triangular_solve.default(b, a, upper=False, transpose=True),
        LOOSE,
    ),
    # indexing
    (
        "embedding",
        "aten.embedding.default",
        [f32(10, 4), ints(2, 3, lo=0, hi=10, dtype=torch.int64)],
        {},
        aten.embedding.default,
        TIGHT,
    ),
    (
        "index_select",
        "aten.index_select.default",
        [f32(5, 6), torch.tensor([4, 0, 2, 2])],
        {"dim": 1},
        lambda a, i: aten.index_select.default(a, 1, i),
        TIGHT,
    ),
    (
        "gather",
        "aten.gather.default",
        [f32(3, 5), ints(3, 2, lo=0, hi=5, dtype=torch.int64)],
        {"dim": 1},
        lambda a, i: aten.gather.default(a, 1, i),
        TIGHT,
    ),
    (
        "scatter_src",
        "aten.scatter.src",
        [f32(3, 5), torch.tensor([[0, 1], [2, 3], [4, 0]]), f32(3, 2, seed=9)],
        {"dim": 1},
        lambda a, i, s: aten.scatter.src(a, 1, i, s),
        TIGHT,
    ),
    (
        "scatter_value",
        "aten.scatter.value",
        [f32(3, 5), torch.tensor([[0], [2], [4]])],
        {"dim": 1, "value": 9.0},
        lambda a, i: aten.scatter.value(a, 1, i, 9.0),
        TIGHT,
    ),
    (
        "scatter_add",
        "aten.scatter_add.default",
        [f32(3, 5), torch.tensor([[0, 0], [1, 1], [4, 4]]), f32(3, 2, seed=9)],
        {"dim": 1},
        lambda a, i, s: aten.scatter_add.default(a, 1, i, s),
        TIGHT,
    ),
    (
        "index_put",
        "aten.index_put.default",
        [f32(5, 3), torch.tensor([4, -1, 0]), f32(3, 3, seed=9)],
        {"indices": [0], "accumulate": False},
        lambda a, i, v: aten.index_put.default(a, [i], v, False),
        TIGHT,
    ),
    (
        "index_put_acc",
        "aten.index_put.default",
        [f32(5, 3), torch.tensor([1, 1, 0]), f32(3, seed=9)],
        {"indices": [0], "accumulate": True},
        lambda a, i, v: aten.index_put.default(a, [i], v, True),
        TIGHT,
    ),
    # Leading dims indexed, the rest whole: row gathers and row scatters (one index per row).
    (
        "index_rows",
        "aten.index.Tensor",
        [f32(5, 6), torch.tensor([[4, -1, 0], [2, 2, -5]])],
        {"indices": [0]},
        lambda a, i: aten.index.Tensor(a, [i]),
        TIGHT,
    ),
    (
        "index_rows_two_dims",
        "aten.index.Tensor",
        [f32(3, 5, 4), torch.tensor([[0], [2]]), torch.tensor([4, -1, 1])],
        {"indices": [0, 1]},
        lambda a, i, j: aten.index.Tensor(a, [i, j]),
        TIGHT,
    ),
    (
        "index_put_rows_embedding_grad",
        "aten.index_put.default",
        [torch.zeros(6, 4), torch.tensor([[0, 5, 0], [3, 0, 5]]), f32(2, 3, 4, seed=9)],
        {"indices": [0], "accumulate": True},
        lambda a, i, v: aten.index_put.default(a, [i], v, True),
        TIGHT,
    ),
    (
        "index_put_rows_two_dims",
        "aten.index_put.default",
        [f32(3, 5, 4), torch.tensor([[0], [2]]), torch.tensor([4, -1, 1]), f32(4, seed=9)],
        {"indices": [0, 1], "accumulate": False},
        lambda a, i, j, v: aten.index_put.default(a, [i, j], v, False),
        TIGHT,
    ),
    # x[mask] = v with a boolean (or uint8) mask: one value for every set element (a select), or one
    # value per set element in row-major order (the count n static, as `x[mask] += y` writes back).
    (
        "index_put_mask_broadcast",
        "aten.index_put.default",
        [f32(2, 4, 3), MASK, f32(3, seed=9)],
        {"indices": [0], "accumulate": False},
        lambda a, m, v: aten.index_put.default(a, [m], v, False),
        TIGHT,
    ),
    (
        "index_put_mask_scalar_acc",
        "aten.index_put.default",
        [f32(2, 4, 3), MASK, torch.tensor(2.5)],
        {"indices": [0], "accumulate": True},
        lambda a, m, v: aten.index_put.default(a, [m], v, True),
        TIGHT,
    ),
    (
        "index_put_mask_per_element",
        "aten.index_put.default",
        [f32(2, 4, 3), MASK, f32(int(MASK.sum()), 3, seed=9)],
        {"indices": [0], "accumulate": False},
        lambda a, m, v: aten.index_put.default(a, [m], v, False),
        TIGHT,
    ),
    (
        "index_put_mask_per_element_acc",
        "aten.index_put.default",
        [f32(2, 4, 3), MASK, f32(int(MASK.sum()), 1, seed=9)],
        {"indices": [0], "accumulate": True},
        lambda a, m, v: aten.index_put.default(a, [m], v, True),
        TIGHT,
    ),
    (
        "index_put_mask_inner_dim",
        "aten.index_put.default",
        [f32(3, 2, 4), MASK, f32(3, int(MASK.sum()), seed=9)],
        {"indices": [1], "accumulate": False},
        lambda a, m, v: aten.index_put.default(a, [None, m], v, False),
        TIGHT,
    ),
    (
        "index_put_mask_none_set",
        "aten.index_put.default",
        [f32(2, 4, 3), torch.zeros(2, 4, dtype=torch.bool), f32(0, 3, seed=9)],
        {"indices": [0], "accumulate": False},
        lambda a, m, v: aten.index_put.default(a, [m], v, False),
        TIGHT,
    ),
    (
        "index_put_mask_uint8",
        "aten.index_put.default",
        [f32(2, 4, 3), MASK.to(torch.uint8), f32(1, 3, seed=9)],
        {"indices": [0], "accumulate": False},
        lambda a, m, v: aten.index_put.default(a, [m.bool()], v, False),
        TIGHT,
    ),
    ("cumsum", "aten.cumsum.default", [X], {"dim": 1}, lambda a: aten.cumsum.default(a, 1), LOOSE),
    ("cumsum_int", "aten.cumsum.default", [I], {"dim": 0}, lambda a: aten.cumsum.default(a, 0), TIGHT),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_eager(case):
    name, op, inputs, attrs, fn, (rtol, atol) = case
    expected = fn(*inputs)
    got = run_op(op, inputs, attrs, expected)
    assert_matches(got, expected, rtol, atol, name)


def test_dropout_statistics_and_consistency():
    x = torch.ones(64, 64)
    out, mask = run_op(
        "aten.native_dropout.default", [x], {"p": 0.25, "train": True}, aten.native_dropout.default(x, 0.25, True)
    )
    keep = mask.float().mean().item()
    assert 0.70 < keep < 0.80, keep
    # Kept elements are scaled by 1/(1-p); dropped are zero.
    torch.testing.assert_close(out, mask.float() / 0.75)
    out_eval, mask_eval = run_op(
        "aten.native_dropout.default", [x], {"p": 0.25, "train": False}, aten.native_dropout.default(x, 0.25, False)
    )
    assert torch.equal(out_eval, x) and bool(mask_eval.all())


def test_unsupported_op_is_reported():
    with pytest.raises(RuntimeError, match=r"unsupported op aten\.nonexistent_op at node %0"):
        run_op("aten.nonexistent_op.default", [X], {}, X)


def test_unsupported_form_says_why():
    x = ints(2, 3)
    expected = aten.round.decimals(x.float(), decimals=2)
    with pytest.raises(RuntimeError, match=r"unsupported op aten\.round at node %0: round with decimals != 0"):
        run_op("aten.round.decimals", [x.float()], {"decimals": 2}, expected)
