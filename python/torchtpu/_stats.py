"""Counters behind torchtpu.stats(): what was compiled, what fell back and why, what ran."""

from __future__ import annotations

import collections
import threading

_lock = threading.Lock()


def _fresh() -> dict:
    return {
        "graphs_seen": 0,  # Dynamo graphs handed to the backend (graph breaks make several)
        "graphs_compiled": 0,  # ATen graphs (or partitions of them) compiled to PJRT programs
        "graphs_fallback": 0,  # ATen graphs that ran (wholly or partly) in eager
        # Compiled graphs rebuilt from a saved artifact, without tracing: AOTAutograd's cache or
        # an aot_compile'd function loaded (warm_start.py); each also counts in graphs_compiled.
        "graphs_loaded": 0,
        # New input signatures of graphs with symbolic shapes, each exported for its sizes
        # and compiled (or found in a cache): one per new sequence length under generate().
        "specialisations": 0,
        "partitions_compiled": 0,
        "partitions_eager": 0,
        "fallback_ops": collections.Counter(),  # op name -> count of nodes run eagerly
        # One dict per fallback decision: kind (unsupported, compile, plugin, execution,
        # internal), where (graph or partition), message, ops; repro for internal errors.
        "fallback_reasons": [],
        "fallback_kinds": collections.Counter(),  # kind -> count of fallback decisions
        "executions": 0,  # PJRT program executions (counted by _C, see stats())
        "compile_seconds": 0.0,
        "cache_hits": 0,  # programs found in a cache: memory_hits + disk_hits
        "memory_hits": 0,  # found in this process's executable cache
        "disk_hits": 0,  # loaded from the persistent cache (no XLA compile)
        # Of those, read after waiting for another process (a rank of this host) that was
        # compiling the same program and held its lock (docs/cache.md).
        "disk_hits_after_wait": 0,
        "cache_misses": 0,  # compiled by XLA
        "compile_seconds_saved": 0.0,  # XLA compile time the disk hits did not spend
        # Per compiled graph: the compiler's peak-memory estimate (peak_bytes, peak_at, ...).
        "graphs": {},
        # Per graph with symbolic sizes (buckets.py): its bucket list, the sizes padded to
        # buckets, those kept exact with the reason, and programs compiled per bucket
        # ("s0=8,s1=5": each size symbol's value in the program).
        "buckets": {},
        # Each recompile, named (recompiles.py): kind ("dynamo": a frame Dynamo compiled again;
        # "signature": a new program for new sizes of a symbolic graph), graph, what changed.
        "recompiles": [],
        # The eager tpu device (docs/eager.md): ops dispatched, one-op programs compiled
        # (each key once), and ops that ran on the CPU for want of a program (op -> count).
        "eager_ops": 0,
        "eager_programs_compiled": 0,
        # Of those, compiled by XLA and found in the executable caches (memory or disk), and
        # the seconds spent: a new shape in eager costs a compile per op (docs/eager.md).
        "eager_cache_misses": 0,
        "eager_cache_hits": 0,
        "eager_compile_seconds": 0.0,
        # Ahead of use (the same ops at new sizes, docs/eager.md "A new shape"): of
        # eager_programs_compiled, those an op found predicted (then built by the pool, or by
        # the op's thread where the pool had not started it) and those the pool built; the
        # pool's compiles (those plus predictions no op took, yet or ever); seconds ops waited
        # for a program the pool was building.
        "eager_ahead_predicted": 0,
        "eager_programs_ahead": 0,
        "eager_ahead_compiles": 0,
        "eager_ahead_wait_seconds": 0.0,
        # The eager program and region caches started afresh at their bound (docs/eager.md).
        "eager_cache_resets": 0,
        "eager_cpu_fallbacks": collections.Counter(),
        # DeferAndFuse (docs/eager.md): ops recorded instead of run, regions run, regions
        # compiled (each also counts in eager_programs_compiled) and found in the region cache.
        "eager_ops_deferred": 0,
        "eager_regions": 0,
        "eager_regions_compiled": 0,
        "eager_region_hits": 0,
    }


_stats = _fresh()
# _C counts executions (a per-call Python counter costs ~1 us); stats() reports the count
# since the last reset.
_executions_at_reset = 0


def _executions() -> int:
    from torchtpu import _C

    return _C.executions()


def _native_ops() -> int:
    """Ops the tpu device's native path ran (0 before the device is used: not imported here)."""
    import sys

    guard = sys.modules.get("torchtpu._device_shim")
    return guard.native_ops() if guard is not None else 0


_native_ops_at_reset = 0


def count_eager_op() -> None:
    """One more op on the tpu device: the per-op path, so no lock (the GIL makes a lost count
    possible only when user threads dispatch tpu ops at once)."""
    _stats["eager_ops"] += 1


def bump(key: str, amount=1) -> None:
    with _lock:
        _stats[key] += amount


# "collective": a graph split at a collective of a group across processes (collectives.py).
FALLBACK_KINDS = ("unsupported", "compile", "plugin", "execution", "internal", "collective")


def record_fallback(kind: str, where: str, message: str, ops=(), repro: str | None = None) -> None:
    """One fallback decision (see policy.py): `kind` says why, `ops` what ran eagerly."""
    if kind not in FALLBACK_KINDS:
        raise ValueError(f"unknown fallback kind {kind!r}")
    entry = {"kind": kind, "where": where, "message": message, "ops": list(ops)}
    if repro is not None:
        entry["repro"] = repro
    with _lock:
        _stats["fallback_reasons"].append(entry)
        _stats["fallback_kinds"][kind] += 1
        for op in ops:
            _stats["fallback_ops"][op] += 1


def record_eager_fallback(op: str) -> None:
    with _lock:
        _stats["eager_cpu_fallbacks"][op] += 1


def record_graph(name: str, info: dict) -> None:
    with _lock:
        _stats["graphs"][name] = dict(info)


def record_buckets(name: str, plan, buckets: tuple) -> None:
    with _lock:
        entry = _stats["buckets"].setdefault(name, {"programs": {}})
        entry.update(
            buckets=list(buckets) if plan.any else [],
            padded=sorted(str(s) for s in plan.padded),
            exact=dict(plan.exact),
        )


RECOMPILES_KEPT = 1000  # the newest recompile records kept


def record_recompile(rec: dict) -> None:
    with _lock:
        recs = _stats["recompiles"]
        recs.append(rec)
        del recs[:-RECOMPILES_KEPT]


def count_bucket_program(name: str, label: str) -> None:
    with _lock:
        programs = _stats["buckets"].setdefault(name, {"programs": {}})["programs"]
        programs[label] = programs.get(label, 0) + 1


def record_sharding(name: str, plan: dict) -> None:
    """The SPMD plan of graph `name` (mesh, num_partitions, layouts, collectives, bytes per
    device) under `stats()["graphs"][name]["sharding"]`."""
    with _lock:
        _stats["graphs"].setdefault(name, {})["sharding"] = plan


def stats() -> dict:
    """A snapshot of torchtpu's counters (a copy: mutate freely)."""
    with _lock:
        snap = dict(_stats)
        snap["executions"] = _stats["executions"] + _executions() - _executions_at_reset
        snap["eager_ops"] = _stats["eager_ops"] + _native_ops() - _native_ops_at_reset
        snap["fallback_ops"] = dict(_stats["fallback_ops"])
        snap["fallback_reasons"] = [dict(r) for r in _stats["fallback_reasons"]]
        snap["fallback_kinds"] = dict(_stats["fallback_kinds"])
        snap["eager_cpu_fallbacks"] = dict(_stats["eager_cpu_fallbacks"])
        snap["graphs"] = {k: dict(v) for k, v in _stats["graphs"].items()}
        snap["recompiles"] = [dict(r) for r in _stats["recompiles"]]
        snap["buckets"] = {
            k: {**v, "programs": dict(v["programs"]), "exact": dict(v.get("exact", {}))}
            for k, v in _stats["buckets"].items()
        }
    from torchtpu import host_kernels

    # The engine's measured choice between XLA's and ATen's kernel per matmul shape (process-wide:
    # a reset keeps the measurements, as the programs built from them stay cached).
    snap["kernel_choices"] = host_kernels.choices()
    return snap


def reset_stats() -> None:
    global _stats, _executions_at_reset, _native_ops_at_reset
    with _lock:
        _stats = _fresh()
        _executions_at_reset = _executions()
        _native_ops_at_reset = _native_ops()


# _C counts executions (a per-call Python counter costs ~1 us); stats() reports the count
# since the last reset.
_executions_at_reset = 0


def _executions() -> int:
    from torchtpu import _C

    return _C.executions()
