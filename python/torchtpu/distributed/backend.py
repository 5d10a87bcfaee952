"""`TpuDistBackend`: the c10d backend of the `tpu` device (a Python `torch.distributed`
Backend, through torch's PyBackend trampoline).

Every collective, in order: (1) its sequence number in the group goes up; (2) unless
TORCHTPU_DIST_CHECK=0, the ranks exchange a fingerprint (sequence number and a hash of op,
shapes, dtypes, reduce op, root) and a mismatch raises `CollectiveMismatchError` naming each
rank's call, before any data moves; (3) the group's transport (`transport.py`) moves the
values and writes them into the user's tpu outputs; (4) the call returns a `Work` on the
transport's future. Failures of the transport (a dead peer, a timeout) become
`CollectiveError` naming the op and sequence number, on `wait()` and on the future alike.
"""

from __future__ import annotations

import os
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as C10DBackend
from torch._C._distributed_c10d import PrefixStore, ReduceOp
from torch.futures import Future

from torchtpu.distributed import transport as _transport
from torchtpu.distributed._errors import CollectiveError, CollectiveMismatchError

NAME = "tpu_dist"
CHECK_ENV = "TORCHTPU_DIST_CHECK"
RedOpType = ReduceOp.RedOpType


def check_enabled() -> bool:
    return os.environ.get(CHECK_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class Work(dist._Work):
    """The Work of one collective: `wait()` blocks until the outputs are written and raises
    the collective's error; `get_future()` is the same completion (DDP's reducer and comm
    hooks chain on it)."""

    def __init__(self, fut: Future, op: str, seq: int):
        super().__init__()
        self._fut, self._op, self._seq = fut, op, seq

    def wait(self, timeout: timedelta | None = None) -> bool:
        self._fut.wait()  # raises the collective's error
        return True

    def get_future(self) -> Future:
        # Chained: a future handed to C++ (DDP's reducer, or Python through torch's Work
        # wrapper) loses an error set with set_exception (it comes back as the value); a
        # `then` callback's error survives, as a RuntimeError carrying the message.
        return self._fut.then(_reraise)

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        if not self._fut.done():
            return False
        try:
            self._fut.value()
            return True
        except Exception:
            return False

    def exception(self):
        try:
            self._fut.value()
        except Exception as e:
            return e
        return None

    def result(self):
        return self._fut.value()

    def synchronize(self) -> None:
        self.wait()


def _reraise(f: Future):
    return f.value()


def _sig(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def _sigs(ts) -> str:
    return ", ".join(_sig(t) for t in ts)


def _check_tpu(op: str, tensors) -> None:
    for t in tensors:
        if t.device.type != "tpu":
            raise ValueError(
                f"tpu_dist: {op} got a tensor on {t.device}; this backend serves tpu tensors (CPU tensors go to the group's gloo backend)"
            )


def _barrier_device(opts):
    """The tpu device a barrier's options name (`device_ids=[i]`), or None."""
    ids = list(getattr(opts, "device_ids", None) or [])
    device = getattr(opts, "device", None)
    if ids:
        return torch.device("tpu", ids[0])
    if isinstance(device, torch.device) and device.type == "tpu" and device.index is not None:
        return device
    return None


class TpuDistBackend(C10DBackend):
    """One group's backend: rank/size in the group, its transport, its collective count."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, group_name: str = "", global_ranks=None):
        super().__init__(rank, size)
        self._group_name = group_name or "default"
        self._timeout = timeout
        self._store = PrefixStore("tpu_dist/", store)
        self._transport = _transport.pick_transport(self._store, rank, size, timeout, global_ranks)
        self._seq = 0
        self._check = check_enabled() and size > 1
        self._coalesced: list | None = None  # the Works of an open coalescing block

    def getBackendName(self) -> str:
        return NAME

    def set_timeout(self, timeout: timedelta) -> None:
        """`dist.set_timeout(timeout, group)` (c10d's `setTimeout`, which reaches a Python backend
        under this name): the group's collectives from now on fail after `timeout` without
        their peers, on every transport."""
        self._timeout = timeout
        self._transport.set_timeout(timeout)

    @property
    def supports_coalescing(self) -> bool:
        return True

    @property
    def transport(self):
        return self._transport

    # ------------------------------------------------------------------ the common path

    def _sync(self, opts) -> bool:
        from torchtpu.device import _defer

        # DeferAndFuse: outputs are written in the caller (the mode's recording is process-wide,
        # a callback thread must not record into it).
        return _defer.state.in_mode or not getattr(opts, "asyncOp", True)

    def _collective(self, op: str, signature: str, launch, opts=None, checked: bool = True) -> Work:
        from torchtpu.device import _defer

        self._seq += 1
        seq = self._seq
        with _defer.cause("collective", op):
            # A transport that compares the ranks' calls itself where they meet needs no exchange.
            if checked and self._check and not getattr(self._transport, "matches_calls", False):
                self._check_fingerprint(op, signature, seq)
            try:
                fut = launch(self._sync(opts))
            except CollectiveMismatchError:
                raise
            except Exception as e:
                raise self._failure(op, seq, e) from e
        work = Work(self._typed(fut, op, seq), op, seq)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _typed(self, fut: Future, op: str, seq: int) -> Future:
        """`fut` with its error made a `CollectiveError` naming the op (set_exception keeps the
        type: `wait()` and the future raise it as itself)."""
        out = Future()

        def done(f):
            try:
                value = f.value()
            except Exception as e:
                err = e if isinstance(e, (CollectiveError, CollectiveMismatchError)) else self._failure(op, seq, e)
                if err is not e:
                    err.__cause__ = e
                out.set_exception(err)
                return
            out.set_result(value)

        fut.add_done_callback(done)
        return out

    def _failure(self, op: str, seq: int, e: BaseException) -> CollectiveError:
        return CollectiveError(
            f"tpu_dist: {op} (collective #{seq} of group {self._group_name!r}, rank {self.rank()} of {self.size()}) "
            f"failed on the {self._transport.name} transport ({type(e).__name__}: {e}). A peer that died, or did not "
            f"arrive within the group's timeout ({self._timeout.total_seconds():g} s), ends a collective this way",
            op,
            self.rank(),
            seq,
        )

    def _check_fingerprint(self, op: str, signature: str, seq: int) -> None:
        """The desync check: one exchange of [seq, hash] among the group; on a mismatch each
        rank posts its call's description to the store and reads the others'."""
        h = zlib.crc32(signature.encode()) & 0x7FFF_FFFF
        try:
            rows = self._transport.exchange([seq, h])
        except Exception as e:
            raise self._failure(op, seq, e) from e
        if all(r == [seq, h] for r in rows):
            return
        key = f"desync/{seq}/"
        self._store.set(key + str(self.rank()), signature)
        theirs = {}
        for r, row in enumerate(rows):
            if row != [seq, h]:
                try:
                    theirs[r] = self._store.get(key + str(r)).decode()
                except Exception:
                    theirs[r] = f"a collective with fingerprint {row[1]:#x} at sequence number {row[0]}"
        others = "; ".join(f"rank {r} called {d}" for r, d in sorted(theirs.items()))
        raise CollectiveMismatchError(
            f"tpu_dist: collectives differ across the ranks of group {self._group_name!r} at collective #{seq}: "
            f"rank {self.rank()} (this one) called {signature}; {others}. Every rank of a group must call the same "
            f"collectives in the same order with the same shapes and dtypes ({CHECK_ENV}=0 turns this check off)",
            op,
            self.rank(),
            seq,
            theirs,
        )

    def _reduction(self, reduce_op) -> _transport.Reduction:
        op = reduce_op.op if hasattr(reduce_op, "op") else reduce_op
        if op == RedOpType.AVG:
            return _transport.Reduction(RedOpType.SUM, post=self.size(), name="AVG")
        if op == RedOpType.PREMUL_SUM:
            factor = getattr(reduce_op, "factor", None)
            if isinstance(factor, torch.Tensor):
                factor = float(factor.item())
            if factor is None:
                raise NotImplementedError("tpu_dist: PREMUL_SUM without a readable factor")
            return _transport.Reduction(RedOpType.SUM, pre=float(factor), name=f"PREMUL_SUM({factor:g})")
        return _transport.Reduction(op)

    # ------------------------------------------------------------------ collectives

    def allreduce(self, tensors, opts):
        _check_tpu("all_reduce", tensors)
        red = self._reduction(opts.reduceOp)
        return self._collective(
            "all_reduce",
            f"all_reduce({red.name}; {_sigs(tensors)})",
            lambda sync: self._transport.all_reduce(tensors, red, sync),
            opts,
        )

    def allreduce_coalesced(self, tensors, opts):
        _check_tpu("all_reduce_coalesced", tensors)
        red = self._reduction(opts.reduceOp)
        return self._collective(
            "all_reduce_coalesced",
            f"all_reduce_coalesced({red.name}; {_sigs(tensors)})",
            lambda sync: self._transport.all_reduce(tensors, red, sync),
            opts,
        )

    def broadcast(self, tensors, opts):
        _check_tpu("broadcast", tensors)
        root = opts.rootRank
        return self._collective(
            "broadcast",
            f"broadcast(root {root}; {_sigs(tensors)})",
            lambda sync: self._transport.broadcast(tensors, root, sync),
            opts,
        )

    def reduce(self, tensors, opts):
        _check_tpu("reduce", tensors)
        red, root = self._reduction(opts.reduceOp), opts.rootRank
        return self._collective(
            "reduce",
            f"reduce({red.name}, root {root}; {_sigs(tensors)})",
            lambda sync: self._transport.reduce(tensors, root, red, sync),
            opts,
        )

    def allgather(self, output_tensors, input_tensors, opts):
        _check_tpu("all_gather", input_tensors)
        for outs in output_tensors:
            _check_tpu("all_gather", outs)
        return self._collective(
            "all_gather",
            f"all_gather({_sigs(input_tensors)})",
            lambda sync: self._transport.all_gather(output_tensors, input_tensors, sync),
            opts,
        )

    def allgather_coalesced(self, output_lists, input_tensors, opts):
        return self.allgather(output_lists, input_tensors, opts)

    def _allgather_base(self, output, input, opts):
        return self._all_gather_into([output], [input], opts, "all_gather_into_tensor")

    def all_gather_single(self, output, input, opts):
        return self._all_gather_into([output], [input], opts, "all_gather_into_tensor")

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        return self._all_gather_into(outputs, inputs, opts, "all_gather_into_tensor_coalesced")

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        return self._all_gather_into(outputs, inputs, opts, "all_gather_into_tensor_coalesced")

    def _all_gather_into(self, outputs, inputs, opts, op):
        _check_tpu(op, list(outputs) + list(inputs))
        for o, i in zip(outputs, inputs):
            if o.numel() != i.numel() * self.size():
                raise ValueError(
                    f"tpu_dist: {op}: output has {o.numel()} elements, expected {self.size()} x {i.numel()} (input {_sig(i)})"
                )
        return self._collective(
            op, f"{op}({_sigs(inputs)})", lambda sync: self._transport.all_gather_into(outputs, inputs, sync), opts
        )

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        _check_tpu("reduce_scatter", output_tensors)
        red = self._reduction(opts.reduceOp)
        return self._collective(
            "reduce_scatter",
            f"reduce_scatter({red.name}; {_sigs(output_tensors)})",
            lambda sync: self._transport.reduce_scatter(output_tensors, input_tensors, red, sync),
            opts,
        )

    def _reduce_scatter_base(self, output, input, opts):
        return self._reduce_scatter_tensor([output], [input], opts, "reduce_scatter_tensor")

    def reduce_scatter_single(self, output, input, opts):
        return self._reduce_scatter_tensor([output], [input], opts, "reduce_scatter_tensor")

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        return self._reduce_scatter_tensor(outputs, inputs, opts, "reduce_scatter_tensor_coalesced")

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        return self._reduce_scatter_tensor(outputs, inputs, opts, "reduce_scatter_tensor_coalesced")

    def _reduce_scatter_tensor(self, outputs, inputs, opts, op):
        _check_tpu(op, list(outputs) + list(inputs))
        for o, i in zip(outputs, inputs):
            if i.numel() != o.numel() * self.size():
                raise ValueError(
                    f"tpu_dist: {op}: input has {i.numel()} elements, expected {self.size()} x {o.numel()} (output {_sig(o)})"
                )
        red = self._reduction(opts.reduceOp)
        return self._collective(
            op,
            f"{op}({red.name}; {_sigs(inputs)})",
            lambda sync: self._transport.reduce_scatter_tensor(outputs, inputs, red, sync),
            opts,
        )

    def alltoall(self, output_tensors, input_tensors, opts):
        _check_tpu("all_to_all", list(output_tensors) + list(input_tensors))
        # Shapes may differ per peer; the fingerprint holds the dtypes and the count.
        sig = (
            f"all_to_all({len(input_tensors)} x {str(input_tensors[0].dtype).removeprefix('torch.')})"
            if input_tensors
            else "all_to_all()"
        )
        return self._collective(
            "all_to_all", sig, lambda sync: self._transport.all_to_all(output_tensors, input_tensors, sync), opts
        )

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        _check_tpu("all_to_all_single", [output, input])
        # Uneven splits make dim 0 differ per rank: the fingerprint has the dtype and the other dims.
        sig = f"all_to_all_single({str(input.dtype).removeprefix('torch.')}{list(input.shape[1:])})"
        return self._collective(
            "all_to_all_single",
            sig,
            lambda sync: self._transport.all_to_all_single(output, input, output_split_sizes, input_split_sizes, sync),
            opts,
        )

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def gather(self, output_tensors, input_tensors, opts):
        _check_tpu("gather", input_tensors)
        root = opts.rootRank
        return self._collective(
            "gather",
            f"gather(root {root}; {_sigs(input_tensors)})",
            lambda sync: self._transport.gather(output_tensors, input_tensors, root, sync),
            opts,
        )

    def scatter(self, output_tensors, input_tensors, opts):
        _check_tpu("scatter", output_tensors)
        root = opts.rootRank
        return self._collective(
            "scatter",
            f"scatter(root {root}; {_sigs(output_tensors)})",
            lambda sync: self._transport.scatter(output_tensors, input_tensors, root, sync),
            opts,
        )

    # Point to point: not a group collective (each rank calls its own), so neither counted in
    # the group's sequence nor fingerprinted.
    def send(self, tensors, dst, tag=0):
        _check_tpu("send", tensors)
        return self._p2p("send", lambda sync: self._transport.send(tensors, dst, tag, sync))

    def recv(self, tensors, src, tag=0):
        _check_tpu("recv", tensors)
        return self._p2p("recv", lambda sync: self._transport.recv(tensors, src, tag, sync))

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError(
            "tpu_dist: recv from any source (dist.recv without src) is not supported; name the source rank"
        )

    def _p2p(self, op: str, launch) -> Work:
        from torchtpu.device import _defer

        with _defer.cause("collective", op):
            try:
                fut = launch(_defer.state.in_mode)
            except Exception as e:
                raise self._failure(op, self._seq, e) from e
        seq = self._seq
        return Work(self._typed(fut, op, seq), op, seq)

    def barrier(self, opts=None):
        """`dist.barrier(device_ids=[i])` names the device the barrier runs on, as NCCL runs it as
        a one-element all-reduce on that GPU's stream: the device must exist, and its work
        queued before the barrier is finished before the ranks meet."""
        device = _barrier_device(opts)
        if device is not None:
            from torchtpu.device import _devices

            _devices.check_index(device)
            _devices.synchronize_all()
        return self._collective("barrier", "barrier()", lambda sync: self._transport.barrier(sync), opts)

    def monitored_barrier(self, opts=None, wait_all_ranks: bool = False):
        return self.barrier(opts)

    # ------------------------------------------------------------------ coalescing

    def start_coalescing(self):
        if self._coalesced is not None:
            raise RuntimeError("tpu_dist: a coalescing block is already open on this group")
        self._coalesced = []

    def end_coalescing(self):
        works, self._coalesced = self._coalesced or [], None
        futs = [w.get_future() for w in works]
        joined = Future()
        if not futs:
            joined.set_result([])
            return Work(joined, "coalesced", self._seq)

        def done(all_done):
            try:
                value = [t for f in all_done.value() for t in (f.value() or [])]
            except Exception as e:  # the first failed collective's own typed error
                joined.set_exception(e)
                return
            joined.set_result(value)

        torch.futures.collect_all(futs).add_done_callback(done)
        return Work(joined, "coalesced", self._seq)

    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing
