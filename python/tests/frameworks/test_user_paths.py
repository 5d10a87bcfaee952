"""Paths a new user takes in the first hour (issue 13), each against eager on the same inputs:
complex numbers, grouped-query attention, `polar`, the multi-tensor `_foreach_*` ops of
optimizers, and errors as docs/backend.md documents them.

Tolerances: f32 and complex64 forward rtol=1e-5, atol=1e-5; gradients rtol=1e-4, atol=1e-5
(XLA sums in other orders). Dropout is compared by statistics (keep rate within 3 points of
1 - p over 16k elements, kept values scaled by 1/(1 - p)).
"""

import warnings

import pytest
import torch
import torch.nn.functional as F
from compiled import assert_compiled_cleanly, fresh_torchtpu  # noqa: F401 - the fixture
from models import tiny_llama

import torchtpu
from torchtpu.errors import FallbackError, OptionsError

FWD = dict(rtol=1e-5, atol=1e-5)
GRAD = dict(rtol=1e-4, atol=1e-5)


pytestmark = pytest.mark.usefixtures("fresh_torchtpu")


def strict(fn):
    return torch.compile(fn, backend="torchtpu", options={"strict": True})


# --- complex numbers ---------------------------------------------------------------------

COMPLEX_FNS = {
    "abs": lambda z: z.abs(),
    "sgn": lambda z: z.sgn(),
    "angle": lambda z: z.angle(),
    "abs_of_product": lambda z: (z * z.conj() + 1j).abs(),
    "isnan_isinf": lambda z: torch.stack([z.isnan(), z.isinf(), z.isfinite()]),
    "nonzero_as_bool": lambda z: z.to(torch.bool),
    "real_cast": lambda z: z.to(torch.float32),  # PyTorch keeps the real part
    "eq": lambda z: z == z.conj(),
    "exp_log": lambda z: torch.exp(z) + torch.log(z + 2),
    "var": lambda z: z.var(),
}


@pytest.mark.parametrize("name", COMPLEX_FNS)
def test_complex_matches_eager(name):
    fn = COMPLEX_FNS[name]
    z = torch.tensor([3 + 4j, -1 - 2j, 0j, 2.5 - 0.5j, 1j], dtype=torch.complex64)
    if name == "isnan_isinf":
        z = torch.tensor([complex(float("nan"), 1), complex(1, float("inf")), 1 + 1j], dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the real-part cast warns, in eager too
        want = fn(z)
        got = strict(fn)(z)
    torch.testing.assert_close(got, want, **FWD, equal_nan=True)
    assert_compiled_cleanly()


def test_complex_abs_is_the_modulus():
    got = strict(lambda z: z.abs())(torch.tensor([3 + 4j]))
    assert got.tolist() == [5.0]


def test_rfft_and_view_as_complex_abs():
    x = torch.randn(4, 16)
    for fn in (lambda t: torch.fft.rfft(t).abs(), lambda t: torch.view_as_complex(t.reshape(4, 8, 2)).abs()):
        torch._dynamo.reset()
        torch.testing.assert_close(strict(fn)(x), fn(x), **FWD)
    assert_compiled_cleanly()


def test_polar_and_complex():
    r, theta = torch.rand(5) + 0.5, torch.randn(5)
    torch.testing.assert_close(strict(torch.polar)(r, theta), torch.polar(r, theta), **FWD)
    torch._dynamo.reset()
    fn = lambda a, b: torch.complex(a, b).abs()  # noqa: E731
    torch.testing.assert_close(strict(fn)(r, theta), fn(r, theta), **FWD)
    assert_compiled_cleanly()


# --- scaled dot-product attention with grouped-query attention ---------------------------


def _qkv(hq=4, hk=2, length=6, source=6, d=8, requires_grad=False):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, hq, length, d, generator=g)
    k = torch.randn(2, hk, source, d, generator=g)
    v = torch.randn(2, hk, source, d, generator=g)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


SDPA_VARIANTS = {
    "causal": dict(is_causal=True),
    "plain": dict(),
    "scale": dict(scale=0.3),
    "bool_mask": dict(attn_mask="bool"),
    "float_mask": dict(attn_mask="float"),
}


def _mask(kind, length=6, source=6):
    g = torch.Generator().manual_seed(5)
    if kind == "bool":
        m = torch.rand(length, source, generator=g) > 0.3
        m[:, 0] = True  # no fully masked row
        return m
    return torch.randn(length, source, generator=g)


@pytest.mark.parametrize("hk", [2, 1, 4])
@pytest.mark.parametrize("variant", SDPA_VARIANTS)
def test_sdpa_gqa_forward_and_backward(variant, hk):
    kw = dict(SDPA_VARIANTS[variant])
    if "attn_mask" in kw:
        kw["attn_mask"] = _mask(kw["attn_mask"])

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)

    with torch.no_grad():
        q, k, v = _qkv(hk=hk)
        torch.testing.assert_close(strict(fn)(q, k, v), fn(q, k, v), **FWD)
    torch._dynamo.reset()
    eager_in = _qkv(hk=hk, requires_grad=True)
    comp_in = _qkv(hk=hk, requires_grad=True)
    fn(*eager_in).square().sum().backward()
    strict(fn)(*comp_in).square().sum().backward()
    for a, b in zip(comp_in, eager_in):
        torch.testing.assert_close(a.grad, b.grad, **GRAD)
    assert_compiled_cleanly()


def test_sdpa_gqa_dropout_statistics():
    q = torch.ones(1, 4, 128, 32)
    k = torch.ones(1, 2, 128, 32)
    v = torch.ones(1, 2, 128, 32, requires_grad=True)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.25, enable_gqa=True)  # noqa: E731
    out = strict(fn)(q, k, v)
    # Uniform attention over 128 ones: each output is (kept fraction of 128) / 128 / 0.75.
    mean = out.mean().item()
    assert abs(mean - 1.0) < 0.03, mean
    out.sum().backward()
    assert v.grad.shape == v.shape and abs(v.grad.mean().item() - 2.0) < 0.1, v.grad.mean()
    assert_compiled_cleanly()


def test_llama_gqa_default_attention_no_mask():
    """LlamaForCausalLM with grouped-query attention and transformers' default (SDPA)
    attention, called without an attention mask: SDPA gets `enable_gqa=True`."""
    pytest.importorskip("transformers")
    model = tiny_llama.model(seed=0, use_cache=False).eval()
    ids = torch.randint(3, 128, (1, 7))
    with torch.no_grad():
        want = model(ids).logits
        got = strict(model)(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert_compiled_cleanly()


# --- the _foreach_* ops -------------------------------------------------------------------


def _tensors(n=3, offset=0.0):
    g = torch.Generator().manual_seed(11)
    return [torch.rand(4, 3, generator=g) + 0.5 + offset for _ in range(n)]


FOREACH = {
    "add_list_alpha": lambda a, b: torch._foreach_add(a, b, alpha=0.5),
    "add_scalar": lambda a, b: torch._foreach_add(a, 2.0),
    "add_tensor": lambda a, b: torch._foreach_add(a, b[0][0, 0], alpha=2),
    "sub_scalarlist": lambda a, b: torch._foreach_sub(a, [1.0, 2.0, 3.0]),
    "mul_list": lambda a, b: torch._foreach_mul(a, b),
    "mul_tensor": lambda a, b: torch._foreach_mul(a, b[1].sum()),
    "div_scalar": lambda a, b: torch._foreach_div(a, 3.0),
    "pow_scalar": lambda a, b: torch._foreach_pow(a, 2.0),
    "pow_scalar_and_tensor": lambda a, b: torch._foreach_pow(2.0, a),
    "maximum_list": lambda a, b: torch._foreach_maximum(a, b),
    "clamp_min_scalar": lambda a, b: torch._foreach_clamp_min(a, 0.9),
    "addcmul": lambda a, b: torch._foreach_addcmul(a, a, b, value=0.5),
    "addcdiv_scalarlist": lambda a, b: torch._foreach_addcdiv(a, a, b, [0.1, 0.2, 0.3]),
    "addcmul_tensor": lambda a, b: torch._foreach_addcmul(a, a, b, torch.tensor([0.1, 0.2, 0.3])),
    "lerp_scalar": lambda a, b: torch._foreach_lerp(a, b, 0.3),
    "lerp_list": lambda a, b: torch._foreach_lerp(a, b, b),
    "norm": lambda a, b: torch._foreach_norm(a),
    "norm_inf": lambda a, b: torch._foreach_norm(a, float("inf")),
    "sqrt_neg_exp": lambda a, b: torch._foreach_exp(torch._foreach_neg(torch._foreach_sqrt(a))),
    "in_place": lambda a, b: (torch._foreach_mul_(a, 2.0), torch._foreach_add_(a, b), a)[-1],
}


@pytest.mark.parametrize("name", FOREACH)
def test_foreach_matches_eager(name):
    fn = FOREACH[name]
    want = fn(_tensors(), _tensors(offset=1.0))
    got = strict(fn)(_tensors(), _tensors(offset=1.0))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **FWD)
    assert_compiled_cleanly()


# --- errors as documented ----------------------------------------------------------------


def test_strict_failure_is_catchable_as_fallback_error():
    f = torch.compile(lambda x: torch.special.airy_ai(x) * 2, backend="torchtpu", options={"strict": True})
    with pytest.raises(FallbackError) as info:
        f(torch.randn(3))
    assert info.value.ops == ["aten.special_airy_ai"]
    assert isinstance(info.value, RuntimeError)
    assert FallbackError is torchtpu.FallbackError is torchtpu.compiled.fallback.FallbackError


@pytest.mark.parametrize(
    "options, message",
    [
        ({"strict": "no"}, "'strict' must be True or False"),
        ({"donate": "false"}, "'donate' must be True or False"),
        ({"passes": 3}, "'passes' must be a pipeline string"),
        ({"passes": ["cse", "no-such-pass"]}, "unknown pass 'no-such-pass'"),
        ({"dump_dir": 5}, "'dump_dir' must be a path"),
        ({"stirct": True}, "unknown torchtpu option"),
    ],
)
def test_bad_options_raise_options_error(options, message):
    f = torch.compile(lambda x: x + 1, backend="torchtpu", options=options)
    with pytest.raises(OptionsError, match=message):
        f(torch.ones(2))


def test_passes_as_a_list():
    f = torch.compile(lambda x: x * 2 + 1, backend="torchtpu", options={"passes": ["cse", "dce"], "strict": True})
    assert f(torch.ones(2)).tolist() == [3.0, 3.0]


def test_unsupported_mode_warns_once():
    from torchtpu import _log

    _log._warned.discard("mode:max-autotune")  # an earlier test in this process may have warned already
    x = torch.ones(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            torch._dynamo.reset()
            assert torch.compile(lambda t: t + 1, backend="torchtpu", mode="max-autotune")(x).tolist() == [2.0, 2.0]
    mode_warnings = [w for w in caught if "mode='max-autotune'" in str(w.message)]
    assert len(mode_warnings) == 1, [str(w.message) for w in caught]


def test_indexing_an_empty_tensor(fresh_torchtpu):
    """Advanced indexing and unfold of a tensor with a zero-size dim: StableHLO refuses a
    gather slice from an empty dim, so the lowering gives the (empty) result directly.
    Before, XLA refused the module (a CompileError that fell back)."""
    idx = torch.tensor([0, 2])
    x = torch.zeros(0, 3, 5)
    out = torch.compile(lambda t: t[:, idx] + 1, backend="torchtpu")(x)
    assert out.shape == (0, 2, 5)
    img = torch.zeros(0, 1, 5, 5)
    out = torch.compile(lambda t: F.unfold(t, 2, 1, 0, 1), backend="torchtpu")(img)
    torch.testing.assert_close(out, F.unfold(img, 2, 1, 0, 1))
    assert_compiled_cleanly()
