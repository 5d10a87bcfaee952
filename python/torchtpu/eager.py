"""Modes of the eager `tpu` device (docs/eager.md).

    torchtpu.eager.mode("debug")                 # a setter
    with torchtpu.eager.mode("debug", check_finite=True):
        loss = model(x.to("tpu")).sum()          # NaN/Inf named at the op that made it
    torchtpu.eager.fallback("error")             # raise instead of running an op on the CPU
    torchtpu.eager.check_indices(False)          # no index checks (on by default)

Modes: "strict" (the default; TORCHTPU_EAGER_MODE sets it): each op is dispatched as it
comes, asynchronously where the plugin allows. "debug": synchronous, errors carry the op, its
input types and the user's frame (`torchtpu.errors.DeviceOpError`); `check_finite=True` raises
`torchtpu.errors.NonFiniteError` at the first op that produces a NaN or an infinity.
"defer_and_fuse": ops are recorded and nothing runs until a cut (a host read, the end of
`backward()`, an optimizer step, `torch.tpu.synchronize()`, ...); the region between two cuts
is compiled as one program, cached by its structure, and run. `explain()` says where each
region was cut and why, and whether it was compiled.
"""

from __future__ import annotations

from torchtpu.device import _modes
from torchtpu.device._modes import MODES


class _Restore:
    """What `mode(...)` and `fallback(...)` return: the setting is already applied; used as a
    context manager it is undone on exit."""

    def __init__(self, saved: dict):
        self._saved = saved

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for k, v in self._saved.items():
            setattr(_modes.state, k, v)
        return False


def mode(name: str | None = None, *, check_finite: bool | None = None) -> _Restore:
    """Sets the calling thread's eager device mode ("strict", "debug" or "defer_and_fuse") and,
    for debug, whether each op's result is checked for NaN/Inf (other threads keep theirs; a
    thread that never set one has TORCHTPU_EAGER_MODE's). Returns a context manager that
    restores the previous setting on exit; `mode()` with no arguments changes nothing."""
    saved = {"mode": _modes.state.mode, "check_finite": _modes.state.check_finite}
    if name is not None:
        if name not in MODES:
            raise ValueError(f"torchtpu.eager.mode: expected one of {MODES}, got {name!r}")
        _modes.state.mode = name
    if check_finite is not None:
        _modes.state.check_finite = bool(check_finite)
    return _Restore(saved)


def current_mode() -> str:
    return _modes.state.mode


def fallback(policy: str) -> _Restore:
    """ "cpu": an op without a tpu program runs on the CPU (recorded in
    `torchtpu.stats()["eager_cpu_fallbacks"]`, warned once); "error": it raises
    `torchtpu.UnsupportedError`. Default: "error" under TORCHTPU_FALLBACK=error, else "cpu"."""
    if policy not in ("cpu", "error"):
        raise ValueError(f"torchtpu.eager.fallback: expected 'cpu' or 'error', got {policy!r}")
    saved = {"fallback_error": _modes.state.fallback_error}
    _modes.state.fallback_error = policy == "error"
    return _Restore(saved)


def check_indices(on: bool) -> _Restore:
    """Whether ops on the tpu device check their indices (`x[idx]`, `gather`, `embedding`, a
    loss target, ...) as CPU eager does, raising `torchtpu.IndexOutOfRangeError` at the next host
    read (debug mode: at the op); XLA would clamp them. On by default; TORCHTPU_CHECK_INDICES=0
    sets the default off. Returns a context manager that restores the previous setting."""
    saved = {"check_indices": _modes.state.check_indices}
    _modes.state.check_indices = bool(on)
    return _Restore(saved)


def compile_ahead(threads: int) -> int:
    """How many threads build one-op programs ahead of use when ops repeat at new sizes (a new
    prompt length in strict mode: docs/eager.md, "A new shape"); 0 turns it off. Process-wide;
    TORCHTPU_EAGER_AHEAD sets the default (up to 4, one per core). Returns the previous count."""
    from torchtpu.device import _ahead

    return _ahead.set_threads(threads)


class Explained:
    """DeferAndFuse's regions since the last `reset_explain()`: `regions` is one dict per region
    run (reason, detail, where, line, ops, outputs, inputs, key, hit, differs on a miss,
    record_ms, compile_ms, run_ms, bytes_in, bytes_out, bytes_peak); `str()` is a summary
    per cut site."""

    def __init__(self, regions: list):
        self.regions = regions

    @property
    def compiles(self) -> int:
        return sum(1 for r in self.regions if not r["hit"])

    def __len__(self) -> int:
        return len(self.regions)

    def __str__(self) -> str:
        if not self.regions:
            return "DeferAndFuse: no region ran"
        sites: dict = {}
        for r in self.regions:
            s = sites.setdefault(
                (r["reason"], r["where"]), {"n": 0, "miss": 0, "ops": 0, "ms": 0.0, "line": r["line"], "keys": set()}
            )
            s["n"] += 1
            s["miss"] += 0 if r["hit"] else 1
            s["ops"] += r["ops"]
            s["ms"] += r["run_ms"]
            s["keys"].add(r["key"])
        lines = [f"DeferAndFuse: {len(self.regions)} regions, {self.compiles} compiled"]
        for (reason, where), s in sites.items():
            lines.append(
                f"  {reason:<20} {where or '?'}  {s['line']!r}: {s['n']} regions ({s['miss']} compiled, "
                f"{len(s['keys'])} keys), {s['ops'] / s['n']:.0f} ops each, run {s['ms'] / s['n']:.2f} ms each"
            )
        misses = [r for r in self.regions if not r["hit"] and r.get("differs")]
        for r in misses[-5:]:
            lines.append(f"  compiled region {r['key']} ({r['reason']} at {r['where']}): {r['differs']}")
        return "\n".join(lines)


def explain() -> Explained:
    """What DeferAndFuse did: one record per region run (see `Explained`)."""
    from torchtpu.device import _trace

    return Explained(_trace.explained())


def reset_explain() -> None:
    from torchtpu.device import _trace

    _trace.reset()


def flush() -> None:
    """Runs the ops DeferAndFuse has recorded so far (a cut with reason "explicit")."""
    from torchtpu.device import _defer

    _defer.flush("explicit")


def mark_warm() -> None:
    """Ends warm-up now: under TORCHTPU_EAGER_CACHE_ONLY=1 any later region compile raises
    `torchtpu.RecompileError` (otherwise warm-up ends after TORCHTPU_EAGER_WARMUP_STEPS
    optimizer steps, 2 by default)."""
    from torchtpu.device import _defer

    _defer.mark_warm()
