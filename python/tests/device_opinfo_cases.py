"""OpInfo samples on the eager `tpu` device: each sample's op on CPU tensors and on the same
tensors moved with `.to("tpu")`, compared after `.cpu()` (test_device_opinfo.py,
bless_device_opinfo.py).

Selection: opinfo_cases.py's (every op of op_db except the random and uninitialised ones, the
first sample, seeded), for float32, int64 and bool. The sample's device strings become "tpu"
(factories), except tensors PyTorch wants on the CPU whatever the device (STAY_ON_CPU). Case
ids are `<op>-<dtype>-0[-<variant>]`; the variants:
- (none): the function variant;
- `inplace`: the in-place variant (`x.add_(...)`: the write-back path), where the CPU accepts
  the sample (skipped otherwise: an integer input of an op whose result is float);
- float32 only: `noncontig` and `noncontig-inplace`, the same with every tensor a
  non-contiguous tpu view (strided reads, and writes into a view); `out`, the out= variant
  into empty tpu tensors (the out path and its resize).
Tolerances are the compiled harness's (opinfo_cases.TOLERANCES).

Every op runs under `torchtpu.eager.fallback("error")`: an op that needs the CPU raises
`torchtpu.UnsupportedError` and the case fails with `fallback: aten.<op>`. Other reasons:
`mismatch: ...` (values, shape or dtype differ), `device: ...` (a result is not a tpu tensor,
or an in-place variant did not return its input), `error: ...` (the tpu run raised what the
CPU run did not), `cpu-error-only: ...` (the CPU raised, the tpu run did not).
"""

from __future__ import annotations

import dataclasses
import warnings

import torch
from opinfo_cases import DEFAULT_TOLERANCE, NOT_COMPARABLE, TOLERANCES, sample

DEVICE = "tpu"
DTYPES = (torch.float32, torch.int64, torch.bool)
# Dtypes that also run with non-contiguous tpu inputs (strided views: the strided read and
# write paths) and with out= (the out path, resizing an empty out tensor).
EXTRA_DTYPES = (torch.float32,)

# Ops left out on the device besides the compiled harness's NOT_COMPARABLE ones: their
# results on tpu are random or uninitialised too (randperm-like draws of the device generator).
DEVICE_NOT_COMPARABLE = NOT_COMPARABLE | set()


# Why some comparisons fail although the device computes what the op means: bless appends
# these to the case's reason (the in-place case of an id shares its note).
EXPLAINED = {
    "argsort-bool-0": "tie order: torchtpu sorts stably, eager's sort orders equal keys otherwise",
    "sort-bool-0": "tie order: the sorted values are equal, the indices of equal keys differ",
    "topk-int64-0": "tie order: torchtpu sorts stably, eager's topk orders equal values otherwise",
    "kthvalue-int64-0": "tie order: the values are equal, the index among equal values differs",
}

# What run_case returns for a case that tests nothing: the in-place variant refuses the sample
# on the CPU too (an integer input of an op whose result is float, a broadcast into self).
SKIP = "skip"


@dataclasses.dataclass
class Case:
    id: str
    op: object
    dtype: torch.dtype
    index: int
    variant: str  # "" (the function), "inplace", "noncontig", "noncontig-inplace" or "out"

    @property
    def base_id(self) -> str:
        return self.id.removesuffix("-" + self.variant) if self.variant else self.id


def all_cases() -> list[Case]:
    from torch.testing._internal.common_methods_invocations import op_db

    cases = []
    for op in op_db:
        if op.name in DEVICE_NOT_COMPARABLE:
            continue
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype not in supported:
                continue
            base = f"{name}-{str(dtype).removeprefix('torch.')}-0"
            variants = [""] + (["inplace"] if op.inplace_variant is not None else [])
            if dtype in EXTRA_DTYPES:
                variants += ["noncontig"] + (["noncontig-inplace"] if op.inplace_variant is not None else [])
                variants += ["out"] if op.supports_out else []
            for v in variants:
                cases.append(Case(base + (f"-{v}" if v else ""), op, dtype, 0, v))
    return cases


def _map(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _tensors(x, out):
    # Every tensor, on any device, in nested lists, tuples and dicts: the device's own walk.
    from torchtpu.device._modes import tensors

    return tensors(x, tpu_only=False, out=out)


def _clone(t):
    return t.clone()


def _to_tpu(t):
    return t.to(DEVICE)


def _noncontig_cpu(t):
    """`t` as a non-contiguous view with the same values: every other element of a tensor
    twice as large in its last dim (a 0-d or empty `t` stays as it is). The CPU reference
    gets the same layout, so ops that see the storage (`as_strided`) mean the same."""
    if t.dim() == 0 or t.numel() == 0 or t.layout != torch.strided:
        return t.clone()
    big = torch.zeros(*t.shape, 2, dtype=t.dtype)
    big[..., 0] = t
    return big[..., 0]


def _noncontig_tpu(t):
    """`_noncontig_cpu(t)` on tpu: the large tensor moved, then viewed there."""
    if t.dim() == 0 or t.numel() == 0 or t.layout != torch.strided:
        return t.to(DEVICE)
    big = torch.zeros(*t.shape, 2, dtype=t.dtype)
    big[..., 0] = t
    return big.to(DEVICE)[..., 0]


def _device_args(x):
    """The sample's device strings (factories' `device="cpu"`, `Tensor.to("cpu", ...)`) made
    "tpu": the sample as it would be written for the tpu device."""
    if isinstance(x, str) and x == "cpu":
        return DEVICE
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(DEVICE)
    if isinstance(x, (list, tuple)):
        return type(x)(_device_args(v) for v in x)
    if isinstance(x, dict):
        return {k: _device_args(v) for k, v in x.items()}
    return x


# Sample tensors that PyTorch requires on the CPU whatever the device (as for CUDA): op name ->
# indices into (input, *args) that stay on the CPU.
STAY_ON_CPU = {"tensor_split": {1}}


def to_tpu_sample(op_name, inp, args, kwargs, noncontig=False):
    keep = STAY_ON_CPU.get(op_name, set())
    move = _noncontig_tpu if noncontig else _to_tpu
    moved = [v if i in keep else _map(v, move) for i, v in enumerate((inp, *args))]
    return moved[0], _device_args(tuple(moved[1:])), _device_args(_map(kwargs, move))


def _to_cpu(t):
    return t.cpu() if t.device.type == DEVICE else t


def _line(e: BaseException) -> str:
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()
    return ""


def reason_of(e: BaseException) -> str:
    """One line: `fallback: aten.<op> (why)` for the CPU fallback, else `error: Type: message`."""
    from torchtpu.errors import UnsupportedError

    if isinstance(e, UnsupportedError) and "has no tpu program" in str(e):
        ops = getattr(e, "ops", None) or []
        text = str(e)
        why = text.split("has no tpu program (", 1)[1].rsplit("); TORCHTPU_FALLBACK", 1)[0]
        return f"fallback: {', '.join(ops)} ({why})"[:240]
    cause = e
    # DeviceOpError (debug mode) wraps the real error: report the root.
    while cause.__cause__ is not None and type(cause).__name__ == "DeviceOpError":
        cause = cause.__cause__
    return f"error: {type(cause).__name__}: {_line(cause)}"[:240]


def _mismatch(got, want, rtol, atol) -> str | None:
    g_t, w_t = _tensors(got, []), _tensors(want, [])
    if type(got) is not type(want) and not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)):
        if not (isinstance(got, (list, tuple)) and isinstance(want, (list, tuple))):
            return f"mismatch: result {type(got).__name__} vs eager's {type(want).__name__}"
    for g in g_t:
        if g.device.type != DEVICE:
            return f"device: a result is on {g.device}, not tpu"
    try:
        got_cpu = _map(got, _to_cpu)
    except Exception as e:  # noqa: BLE001
        return "error: reading the result (.cpu()): " + reason_of(e).removeprefix("error: ")
    try:
        torch.testing.assert_close(got_cpu, want, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
    except Exception as e:  # noqa: BLE001
        text = str(e)
        first = _line(e)
        detail = ""
        for line in text.splitlines():
            if "Greatest absolute difference" in line or "Mismatched elements" in line:
                detail = line.strip()
                break
        return f"mismatch: {first} {detail}".strip()[:240]
    if len(g_t) != len(w_t):
        return f"mismatch: {len(g_t)} tensors vs eager's {len(w_t)}"
    return None


def run_case(case: Case) -> str | None:
    """Runs the case's op on CPU and on tpu (fallback "error") and compares. Returns None when
    they agree, else a one-line reason. Raises nothing."""
    import torchtpu

    s = sample(case)
    op = case.op
    inplace = case.variant.endswith("inplace")
    fn = op.inplace_variant if inplace else op.op
    if s is None or fn is None:
        return SKIP
    if case.variant == "out":
        return _run_out(case, s)
    rtol, atol = TOLERANCES.get(case.dtype, DEFAULT_TOLERANCE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        noncontig = case.variant.startswith("noncontig")
        cpu_in, cpu_args, cpu_kwargs = _map((s.input, s.args, s.kwargs), _noncontig_cpu if noncontig else _clone)
        try:
            want = fn(cpu_in, *cpu_args, **cpu_kwargs)
            cpu_error = None
        except Exception as e:  # noqa: BLE001
            cpu_error = e
        if cpu_error is not None and inplace:
            return SKIP  # the in-place variant does not take this sample (dtype, broadcast)
        try:
            tpu_in, tpu_args, tpu_kwargs = to_tpu_sample(op.name, s.input, s.args, s.kwargs, noncontig=noncontig)
        except Exception as e:  # noqa: BLE001
            return "error: moving the sample to tpu: " + reason_of(e).removeprefix("error: ")
        try:
            with torchtpu.eager.fallback("error"):
                got = fn(tpu_in, *tpu_args, **tpu_kwargs)
                if cpu_error is not None:
                    return f"cpu-error-only: {type(cpu_error).__name__}: {_line(cpu_error)}"[:240]
                bad = _mismatch(got, want, rtol, atol)
                if bad is None and inplace:
                    if got is not tpu_in:
                        return "device: the in-place variant did not return its input"
                    bad = _mismatch(tpu_in, cpu_in, rtol, atol)
                    if bad is not None:
                        bad = bad.replace("mismatch:", "mismatch (input after in-place):", 1)
                if bad is None:
                    # Arguments the op does not write must keep their values.
                    read_tpu = (tpu_args, tpu_kwargs) if inplace else (tpu_in, tpu_args, tpu_kwargs)
                    read_cpu = (cpu_args, cpu_kwargs) if inplace else (cpu_in, cpu_args, cpu_kwargs)
                    for g, w in zip(_tensors(read_tpu, []), _tensors(read_cpu, [])):
                        if g.device.type != DEVICE:
                            continue  # kept on the CPU (STAY_ON_CPU)
                        bad = _mismatch(g, w, rtol, atol)
                        if bad is not None:
                            return bad.replace("mismatch:", "mismatch (an argument):", 1)
                return bad
        except Exception as e:  # noqa: BLE001
            if cpu_error is not None:
                return None  # both raise
            return reason_of(e)


def _run_out(case: Case, s) -> str | None:
    """The out= variant: eager's result gives the out tensors' dtypes; on tpu they start empty
    (shape (0,)), so the out path resizes them, as PyTorch's own `empty({0})` + out= does."""
    import torchtpu

    op = case.op
    rtol, atol = TOLERANCES.get(case.dtype, DEFAULT_TOLERANCE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = op(*_map((s.input, *s.args), _clone), **_map(s.kwargs, _clone))
            results = _tensors(result, [])
            if not results or len(results) != (len(result) if isinstance(result, (list, tuple)) else 1):
                return SKIP
            cpu_outs = [torch.empty(0, dtype=r.dtype) for r in results]
            want = cpu_outs[0] if isinstance(result, torch.Tensor) else tuple(cpu_outs)
            op(*_map((s.input, *s.args), _clone), **_map(s.kwargs, _clone), out=want)
        except Exception:  # noqa: BLE001
            return SKIP  # no out= form for this sample on the CPU either
        wants = cpu_outs
        try:
            tpu_in, tpu_args, tpu_kwargs = to_tpu_sample(op.name, s.input, s.args, s.kwargs)
            outs = [torch.empty(0, dtype=w.dtype, device=DEVICE) for w in wants]
            out = outs[0] if isinstance(want, torch.Tensor) else tuple(outs)
            with torchtpu.eager.fallback("error"):
                got = op(tpu_in, *tpu_args, **tpu_kwargs, out=out)
                bad = _mismatch(out, want, rtol, atol)
                if bad is not None:
                    return bad.replace("mismatch:", "mismatch (out tensor):", 1)
                if isinstance(want, torch.Tensor) and got is not out:
                    return "device: the out= variant did not return its out tensor"
                return None
        except Exception as e:  # noqa: BLE001
            return reason_of(e)
