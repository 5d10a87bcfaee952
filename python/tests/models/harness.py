"""Runs one zoo model under torch.compile(backend="torchtpu") and compares it with eager.

Tolerances (float32 models with random weights, where XLA may reorder reductions):
  outputs:   max |compiled - eager| <= OUT_ATOL + OUT_RTOL * max |eager|   over every output tensor
  gradients: the same with GRAD_ATOL/GRAD_RTOL, per parameter, scaled by that parameter's
             largest eager gradient (backward graphs sum over more terms than forward ones)
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
import traceback

import torch

OUT_ATOL, OUT_RTOL = 1e-4, 1e-3
GRAD_ATOL, GRAD_RTOL = 1e-4, 1e-2


@dataclasses.dataclass
class Result:
    name: str
    family: str
    status: str = "error"  # pass | mismatch | fallback | error
    graphs: int = 0
    graph_breaks: int = 0
    fallback_ops: dict = dataclasses.field(default_factory=dict)
    max_abs: float = float("nan")
    max_rel: float = float("nan")
    compile_s: float = float("nan")
    speedup: float = float("nan")  # eager time / torchtpu time, steady state
    train: str = "-"  # pass | mismatch | fallback | error | - (not run)
    train_max_rel: float = float("nan")
    error: str = ""


def tensor_leaves(out) -> list[torch.Tensor]:
    """Every tensor in a model output (HF ModelOutput, tuple, dict, tensor), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensor_leaves(o)]
    return []


def compare(ref: list[torch.Tensor], got: list[torch.Tensor], atol: float, rtol: float):
    """(ok, max_abs, max_rel) over pairs of tensors; a shape or count difference fails."""
    if len(ref) != len(got):
        return False, float("inf"), float("inf")
    ok, max_abs, max_rel = True, 0.0, 0.0
    for r, g in zip(ref, got):
        if r.shape != g.shape or r.dtype != g.dtype:
            return False, float("inf"), float("inf")
        if not r.is_floating_point():
            same = torch.equal(r, g)
            ok &= same
            max_abs = max(max_abs, 0.0 if same else float("inf"))
            continue
        r64, g64 = r.detach().double(), g.detach().double()
        err = (r64 - g64).abs().max().item() if r.numel() else 0.0
        scale = r64.abs().max().item() if r.numel() else 0.0
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / max(scale, 1e-12))
        ok &= err <= atol + rtol * scale
    return bool(ok), max_abs, max_rel


def _fresh_compile(model):
    import torchtpu

    torch._dynamo.reset()
    torchtpu.reset_stats()
    return torch.compile(model, backend="torchtpu")


def _record_stats(result: Result) -> bool:
    """Copies graph and fallback counts into `result`; True when anything ran eagerly."""
    import torchtpu

    st = torchtpu.stats()
    result.graphs = max(result.graphs, st["graphs_seen"])
    result.graph_breaks = max(result.graph_breaks, st["graphs_seen"] - 1)
    for op, n in st["fallback_ops"].items():
        result.fallback_ops[op] = result.fallback_ops.get(op, 0) + n
    return bool(st["fallback_ops"]) or st["graphs_fallback"] > 0


def _timed(fn, inputs) -> float:
    t0 = time.perf_counter()
    fn(**inputs)
    return time.perf_counter() - t0


def _speedup(eager, compiled, inputs, rounds: int) -> float:
    """Median eager/compiled time ratio, the two interleaved call by call."""
    ratios = []
    with torch.no_grad():
        for _ in range(rounds):
            e = _timed(eager, inputs)
            c = _timed(compiled, inputs)
            ratios.append(e / c)
    return statistics.median(ratios)


def _zero_dropout(model: torch.nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        cfg = getattr(m, "config", None)
        if cfg is not None:
            for k, v in list(vars(cfg).items()):
                if isinstance(v, float) and ("dropout" in k or "drop_prob" in k or "drop_path" in k):
                    setattr(cfg, k, 0.0)
        for attr in ("dropout", "attention_dropout", "drop_prob", "p"):
            if isinstance(getattr(m, attr, None), float) and not isinstance(m, torch.nn.Dropout):
                setattr(m, attr, 0.0)


def _train_loss(out) -> torch.Tensor:
    leaves = [t for t in tensor_leaves(out) if t.is_floating_point()]
    return sum(t.float().pow(2).mean() for t in leaves)


def _compare_step(reference, model, ref_loss, loss):
    """(ok, worst relative error) of a training step: the loss, then every parameter's
    gradient (on any device) against the reference model's."""
    ok, _, worst = compare([ref_loss.detach()], [loss.detach().cpu()], OUT_ATOL, OUT_RTOL)
    for (_, p_ref), (_, p) in zip(reference.named_parameters(), model.named_parameters()):
        if p_ref.grad is None and p.grad is None:
            continue
        if (p_ref.grad is None) != (p.grad is None):
            ok, worst = False, float("inf")
            continue
        g_ok, _, g_rel = compare([p_ref.grad], [p.grad.cpu()], GRAD_ATOL, GRAD_RTOL)
        ok &= g_ok
        worst = max(worst, g_rel)
    return ok, worst


def run_train(spec, result: Result) -> None:
    """One training step (train mode, dropout off): loss and every parameter's gradient."""
    base = spec.build()
    base.train()
    _zero_dropout(base)
    eager, model = base, copy.deepcopy(base)
    inputs = spec.inputs()
    ref_loss = _train_loss(eager(**inputs))
    ref_loss.backward()
    compiled = _fresh_compile(model)
    loss = _train_loss(compiled(**inputs))
    loss.backward()
    fell_back = _record_stats(result)
    ok, worst = _compare_step(eager, model, ref_loss, loss)
    result.train_max_rel = worst
    result.train = "mismatch" if not ok else ("fallback" if fell_back else "pass")


def run_model(spec, train: bool = False, timing_rounds: int = 5) -> Result:
    """Forward (inference) compared with eager, steady-state speed ratio, optionally one
    training step. Never raises: failures are recorded in the result."""
    result = Result(spec.name, spec.family)
    try:
        model = spec.build()
        inputs = spec.inputs()
        with torch.no_grad():
            ref = tensor_leaves(model(**inputs))
            compiled = _fresh_compile(model)
            t0 = time.perf_counter()
            got = tensor_leaves(compiled(**inputs))
            result.compile_s = time.perf_counter() - t0
        fell_back = _record_stats(result)
        ok, result.max_abs, result.max_rel = compare(ref, got, OUT_ATOL, OUT_RTOL)
        result.status = "mismatch" if not ok else ("fallback" if fell_back else "pass")
        if timing_rounds:
            result.speedup = _speedup(model, compiled, inputs, timing_rounds)
    except Exception as e:  # recorded, the zoo goes on
        result.status = "error"
        result.error = _one_line(e)
        traceback.print_exc()
    if train:
        try:
            run_train(spec, result)
        except Exception as e:
            result.train = "error"
            result.error = (result.error + " | " if result.error else "") + "train: " + _one_line(e)
            traceback.print_exc()
    torch._dynamo.reset()
    return result


def _one_line(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None)  # Dynamo's BackendCompilerFailed wraps the cause
    if inner is not None:
        e = inner
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


# --- the zoo on the tpu device, in every mode -------------------------------------------------

DEVICE_MODES = ("strict", "defer_and_fuse", "compile")  # eager on tpu, fused eager, torch.compile on tpu tensors


@dataclasses.dataclass
class ModeResult:
    mode: str
    status: str = "error"  # pass | mismatch | fallback | error
    max_rel: float = float("nan")
    first_s: float = float("nan")
    speed: float = float("nan")  # CPU eager time / this mode's time, steady state
    train: str = "-"
    train_max_rel: float = float("nan")
    fallbacks: dict = dataclasses.field(default_factory=dict)
    error: str = ""


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def _mode_runner(mode: str, model):
    """A callable running `model` (on tpu) in `mode`, returning its tensor leaves on the CPU
    (the host read ends a DeferAndFuse region, as a user's `.item()` or `.cpu()` would)."""
    import torchtpu

    if mode == "compile":
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="torchtpu")

        def run(**inputs):
            return [t.cpu() for t in tensor_leaves(compiled(**inputs))]

        return run

    def run(**inputs):
        with torchtpu.eager.mode(mode):
            return [t.cpu() for t in tensor_leaves(model(**inputs))]

    return run


def _device_fallbacks(before: dict) -> dict:
    import torchtpu

    after = torchtpu.stats()
    out = {
        k: v - before["eager_cpu_fallbacks"].get(k, 0)
        for k, v in after["eager_cpu_fallbacks"].items()
        if v != before["eager_cpu_fallbacks"].get(k, 0)
    }
    for k, v in after["fallback_ops"].items():
        if v != before["fallback_ops"].get(k, 0):
            out[k] = out.get(k, 0) + v - before["fallback_ops"].get(k, 0)
    return out


def _train_on_device(spec, mode: str, result: ModeResult) -> None:
    import torchtpu

    base = spec.build()
    base.train()
    _zero_dropout(base)
    model = copy.deepcopy(base).to("tpu")
    inputs = spec.inputs()
    ref_loss = _train_loss(base(**inputs))
    ref_loss.backward()
    before = torchtpu.stats()
    dev_inputs = _to(inputs, "tpu")
    if mode == "compile":
        torch._dynamo.reset()
        loss = _train_loss(torch.compile(model, backend="torchtpu")(**dev_inputs))
        loss.backward()
    else:
        with torchtpu.eager.mode(mode):
            loss = _train_loss(model(**dev_inputs))
            loss.backward()
    fell_back = _device_fallbacks(before)
    ok, worst = _compare_step(base, model, ref_loss, loss)
    result.train_max_rel = worst
    result.train = "mismatch" if not ok else ("fallback" if fell_back else "pass")
    for k, v in fell_back.items():
        result.fallbacks[k] = result.fallbacks.get(k, 0) + v


def run_device_mode(spec, mode: str, train: bool = False, timing_rounds: int = 3) -> ModeResult:
    """The model moved to tpu (`.to("tpu")`, inputs too) and run in `mode`, against CPU eager
    on the same weights and inputs, with the zoo's tolerances; CPU fallbacks (eager or in a
    compiled graph) make it "fallback". Never raises: failures are recorded."""
    import torchtpu

    result = ModeResult(mode)
    try:
        model = spec.build()
        inputs = spec.inputs()
        on_tpu = copy.deepcopy(model).to("tpu")
        dev_inputs = _to(inputs, "tpu")
        with torch.no_grad():
            ref = tensor_leaves(model(**inputs))
            run = _mode_runner(mode, on_tpu)
            before = torchtpu.stats()
            t0 = time.perf_counter()
            got = run(**dev_inputs)
            result.first_s = time.perf_counter() - t0
            result.fallbacks = _device_fallbacks(before)
        ok, _, result.max_rel = compare(ref, got, OUT_ATOL, OUT_RTOL)
        result.status = "mismatch" if not ok else ("fallback" if result.fallbacks else "pass")
        if timing_rounds:
            ratios = []
            with torch.no_grad():
                for _ in range(timing_rounds):
                    e = _timed(model, inputs)
                    d = _timed(run, dev_inputs)
                    ratios.append(e / d)
            result.speed = statistics.median(ratios)
    except Exception as e:  # recorded, the zoo goes on
        result.error = _one_line(e)
        traceback.print_exc()
    if train and result.status != "error":
        try:
            _train_on_device(spec, mode, result)
        except Exception as e:
            result.train = "error"
            result.error = (result.error + " | " if result.error else "") + "train: " + _one_line(e)
            traceback.print_exc()
    torch._dynamo.reset()
    return result
