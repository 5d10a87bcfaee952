"""Deterministic selection of PyTorch OpInfo samples for the torchtpu OpInfo harness."""

from __future__ import annotations

import dataclasses

import torch

MAX_SAMPLES = 1  # per op and dtype: the first sample (CI budget)
DTYPES = (torch.float32, torch.int64, torch.bool, torch.complex64, torch.bfloat16)
# assert_close tolerances per dtype (rtol, atol); integers and bools compare exactly. float32 and
# complex64: XLA's transcendental approximations differ from ATen's in the last bits. bfloat16
# (8 mantissa bits): one rounding of the result is ~4e-3 relative, and XLA may keep
# intermediates in f32 where eager rounds them (or the other way round).
TOLERANCES = {torch.bfloat16: (2e-2, 2e-2)}
DEFAULT_TOLERANCE = (1e-4, 1e-4)

# Ops whose outputs are not comparable with eager: uninitialised memory or random numbers.
# They are left out of the harness (neither passes nor failures).
NOT_COMPARABLE = {
    "bernoulli", "cauchy", "empty", "empty_like", "empty_permuted", "empty_strided", "exponential",
    "geometric", "log_normal", "multinomial", "new_empty", "new_empty_strided",
    "nn.functional.alpha_dropout", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu", "normal",
    "rand_like", "randint", "randint_like", "randn", "randn_like", "uniform",
}


@dataclasses.dataclass
class Case:
    id: str
    op: object
    dtype: torch.dtype
    index: int


def all_cases() -> list[Case]:
    from torch.testing._internal.common_methods_invocations import op_db

    cases = []
    for op in op_db:
        if op.name in NOT_COMPARABLE:
            continue
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype not in supported:
                continue
            for i in range(MAX_SAMPLES):
                cases.append(Case(f"{name}-{str(dtype).removeprefix('torch.')}-{i}", op, dtype, i))
    return cases


def sample(case: Case):
    """The case's sample input, made deterministic (seeded)."""
    torch.manual_seed(1234)
    for i, s in enumerate(case.op.sample_inputs("cpu", case.dtype, requires_grad=False)):
        if i == case.index:
            return s
    return None


def short_reason(e: BaseException) -> str:
    """One line saying why a case failed: torchtpu's own message when it raised one."""
    text = str(e)
    for line in text.splitlines():
        if "torchtpu (strict):" in line:
            return line.split("torchtpu (strict):", 1)[1].strip()[:200]
    for line in text.splitlines():
        if line.strip() and "backend='torchtpu' raised" not in line:
            return f"{type(e).__name__}: {line.strip()}"[:200]
    return type(e).__name__


def run_case(case: Case):
    """Compiles the case's op with torchtpu (strict, fullgraph) and compares with eager.
    Returns None when it matches, else a one-line reason. Raises nothing."""
    import warnings

    s = sample(case)
    if s is None:
        return None
    op, kwargs = case.op, s.kwargs

    def fn(inp, *args):
        return op(inp, *args, **kwargs)

    torch._dynamo.reset()
    try:
        want = fn(s.input, *s.args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(fn, backend="torchtpu", fullgraph=True, options={"strict": True})
            got = compiled(s.input, *s.args)
        rtol, atol = TOLERANCES.get(case.dtype, DEFAULT_TOLERANCE)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except Exception as e:  # noqa: BLE001 - every failure is a reported result
        return short_reason(e)
    return None
