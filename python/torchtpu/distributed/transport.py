"""How a `tpu_dist` group's bytes move: the transport seam.

`pick_transport` chooses one transport per group when the group is made. Every transport
offers the same methods (the `Transport` protocol below): each takes the user's tpu tensors,
moves their values among the group's ranks, writes the results into the user's tpu output
tensors and returns a `torch.futures.Future` that completes, with the future's value torch
expects, once the outputs are written. `sync=True` asks for the work to be done before the
call returns (the future is then already complete); otherwise it may finish on another thread.

Transports today:
- `HostTransport`: ranks in different processes (or any group). The bytes travel through
  PyTorch's own gloo ProcessGroup, made from the group's store, as CPU copies of the tpu
  tensors (`t.cpu()` in, `out.copy_(cpu)` back): the XLA CPU plugin cannot run a collective
  across processes. Its cost is measured in docs/distributed.md.

Planned (not here): an `InProcessTransport` for groups whose ranks are threads of one
process on distinct tpu devices, where each collective is one replicated StableHLO program.
It plugs in at `pick_transport`, implementing the same methods; nothing else changes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

import torch
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    PrefixStore,
    ProcessGroupGloo,
    ReduceOp,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)
from torch.futures import Future

RedOpType = ReduceOp.RedOpType


class Reduction:
    """A reduce op as every transport runs it: `op` (SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR),
    each input multiplied by `pre` first (PREMUL_SUM), the result divided by `post` after
    (AVG). Gloo has neither AVG nor PREMUL_SUM, and the in-process transport will not need
    them either."""

    __slots__ = ("op", "pre", "post", "name")

    def __init__(self, op: RedOpType, pre: float | None = None, post: int | None = None, name: str = ""):
        self.op, self.pre, self.post, self.name = op, pre, post, name or op.name


class Transport(Protocol):
    name: str

    def exchange(self, values: list[int]) -> list[list[int]]:
        """Every rank's `values` (same length on each), in rank order; synchronous. The desync
        check's fingerprint exchange."""

    def all_reduce(self, tensors: list, red: Reduction, sync: bool) -> Future: ...
    def broadcast(self, tensors: list, root: int, sync: bool) -> Future: ...
    def reduce(self, tensors: list, root: int, red: Reduction, sync: bool) -> Future: ...
    def all_gather(self, outputs: list[list], inputs: list, sync: bool) -> Future: ...
    def all_gather_into(self, outputs: list, inputs: list, sync: bool) -> Future: ...
    def reduce_scatter(self, outputs: list, inputs: list[list], red: Reduction, sync: bool) -> Future: ...
    def reduce_scatter_tensor(self, outputs: list, inputs: list, red: Reduction, sync: bool) -> Future: ...
    def all_to_all(self, outputs: list, inputs: list, sync: bool) -> Future: ...
    def all_to_all_single(self, output, input, out_splits: list, in_splits: list, sync: bool) -> Future: ...
    def gather(self, outputs: list[list], inputs: list, root: int, sync: bool) -> Future: ...
    def scatter(self, outputs: list, inputs: list[list], root: int, sync: bool) -> Future: ...
    def send(self, tensors: list, dst: int, tag: int, sync: bool) -> Future: ...
    def recv(self, tensors: list, src: int, tag: int, sync: bool) -> Future: ...
    def barrier(self, sync: bool) -> Future: ...
    def set_timeout(self, timeout: timedelta) -> None:
        """`dist.set_timeout`: how long the group's collectives wait for their peers from now on."""


TRANSPORT_ENV = "TORCHTPU_DIST_TRANSPORT"


def pick_transport(store, rank: int, size: int, timeout: timedelta, global_ranks: list[int] | None) -> Transport:
    """The transport of one group (the seam): a group whose ranks are all threads of this
    process on distinct tpu devices (`torchtpu.distributed.spawn`) gets the in-process
    transport (inprocess.py: one replicated program per collective, with this host transport
    for the forms it does not cover); every other group, one process per rank, the host
    transport. TORCHTPU_DIST_TRANSPORT=host makes every group take the host transport (to
    compare the two, or to step around the in-process one)."""
    from torchtpu.distributed import inprocess

    host = HostTransport(store, rank, size, timeout)
    choice = os.environ.get(TRANSPORT_ENV, "").strip().lower()
    if choice not in ("", "host", "auto"):
        raise ValueError(f"{TRANSPORT_ENV}={choice!r}: expected 'host' or 'auto'")
    token = None if choice == "host" else inprocess.members_in_process(store, rank, size)
    if token is None:
        # GPU/TPU plugins whose client spans this group's processes: XLA programs across them
        # (multinode.py); the CPU plugin cannot, so there the host transport.
        from torchtpu.distributed import multinode

        return multinode.transport_for(store, rank, size, timeout, global_ranks, host) or host
    return inprocess.InProcessTransport(token, rank, size, timeout, host)


# ------------------------------------------------------------------------ the host transport


def _host(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of a tpu tensor's values (a host read: in DeferAndFuse a cut, named
    "collective" by the backend's `_defer.cause`)."""
    return t.detach().to("cpu").contiguous()


def _done(value) -> Future:
    fut = Future()
    fut.set_result(value)
    return fut


class HostTransport:
    """Ranks talk through a gloo ProcessGroup of their own (store prefix `host/`, so it never
    shares keys or sequence numbers with the group's other backends), on CPU copies of the tpu
    tensors. Gloo runs the exchange on its own threads; the copies back into the tpu outputs
    run when it completes (`then`), or in the caller for `sync`."""

    name = "host"

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        self.rank, self.size = rank, size
        self.gloo = ProcessGroupGloo(PrefixStore("host/", store), rank, size, timeout)

    def set_timeout(self, timeout: timedelta) -> None:
        self.gloo.set_timeout(timeout)  # gloo's own: its later Works wait this long

    # Every collective: start(): the gloo Work on the CPU copies; finish(): the copies back,
    # returning the future's value.
    def _run(self, start: Callable, finish: Callable, sync: bool) -> Future:
        works = start()
        works = works if isinstance(works, list) else [works]
        if sync:
            for w in works:
                w.wait()
            return _done(finish())
        try:
            futs = [w.get_future() for w in works]
        except RuntimeError:  # "Work::getFuture not implemented" (send, recv, list reduce_scatter)
            futs = None
        out = Future()
        if futs is None:
            # A thread waits for gloo's Works instead.
            def waiter():
                try:
                    for w in works:
                        w.wait()
                    value = finish()
                except Exception as e:
                    out.set_exception(e)
                    return
                out.set_result(value)

            threading.Thread(target=waiter, name="tpu_dist-wait", daemon=True).start()
            return out
        # Completed by hand, not with `then`: a `then` callback's error reaches its future
        # wrapped in a RuntimeError; set_exception keeps gloo's (or finish's) own.
        remaining = [len(futs)]
        lock = threading.Lock()

        def one_done(_):
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            try:
                for f in futs:
                    f.value()
                value = finish()
            except Exception as e:
                out.set_exception(e)
                return
            out.set_result(value)

        for f in futs:
            f.add_done_callback(one_done)
        return out

    @staticmethod
    def _prepare(cpu: list, red: Reduction) -> None:
        if red.pre is not None:
            for c in cpu:
                c.mul_(red.pre)

    @staticmethod
    def _average(c: torch.Tensor, red: Reduction) -> torch.Tensor:
        if red.post is None:
            return c
        if c.is_floating_point() or c.is_complex():
            return c.div_(red.post)
        return c.div_(red.post, rounding_mode="trunc")  # as NCCL's integer average

    def exchange(self, values: list[int]) -> list[list[int]]:
        mine = torch.tensor(values, dtype=torch.int64)
        out = torch.empty(self.size * len(values), dtype=torch.int64)
        self.gloo._allgather_base(out, mine).wait()
        return out.view(self.size, len(values)).tolist()

    def all_reduce(self, tensors, red, sync):
        cpu = [_host(t) for t in tensors]
        self._prepare(cpu, red)

        def start():
            if len(cpu) > 1:
                opts = AllreduceCoalescedOptions()
                opts.reduceOp = ReduceOp(red.op)
                return self.gloo.allreduce_coalesced(cpu, opts)
            opts = AllreduceOptions()
            opts.reduceOp = ReduceOp(red.op)
            return self.gloo.allreduce(cpu, opts)

        def finish():
            for t, c in zip(tensors, cpu):
                t.copy_(self._average(c, red))
            return tensors

        return self._run(start, finish, sync)

    def broadcast(self, tensors, root, sync):
        cpu = [_host(t) for t in tensors]
        opts = BroadcastOptions()
        opts.rootRank = root

        def finish():
            if self.rank != root:
                for t, c in zip(tensors, cpu):
                    t.copy_(c)
            return tensors

        return self._run(lambda: self.gloo.broadcast(cpu, opts), finish, sync)

    def reduce(self, tensors, root, red, sync):
        cpu = [_host(t) for t in tensors]
        self._prepare(cpu, red)
        opts = ReduceOptions()
        opts.rootRank, opts.reduceOp = root, ReduceOp(red.op)

        def finish():
            if self.rank == root:
                for t, c in zip(tensors, cpu):
                    t.copy_(self._average(c, red))
            return tensors

        return self._run(lambda: self.gloo.reduce(cpu, opts), finish, sync)

    def all_gather(self, outputs, inputs, sync):
        cpu_in = [_host(t) for t in inputs]
        cpu_out = [[torch.empty(o.shape, dtype=o.dtype) for o in outs] for outs in outputs]

        def finish():
            for outs, couts in zip(outputs, cpu_out):
                for o, c in zip(outs, couts):
                    o.copy_(c)
            return [o for outs in outputs for o in outs]

        return self._run(lambda: self.gloo.allgather(cpu_out, cpu_in, AllgatherOptions()), finish, sync)

    def all_gather_into(self, outputs, inputs, sync):
        cpu_in = [_host(t) for t in inputs]
        cpu_out = [torch.empty(o.shape, dtype=o.dtype) for o in outputs]

        def start():  # several (coalesced): one gloo op each, queued in order
            return [self.gloo._allgather_base(o, i) for o, i in zip(cpu_out, cpu_in)]

        def finish():
            for o, c in zip(outputs, cpu_out):
                o.copy_(c)
            return outputs

        return self._run(start, finish, sync)

    def reduce_scatter(self, outputs, inputs, red, sync):
        cpu_in = [[_host(t) for t in ins] for ins in inputs]
        for ins in cpu_in:
            self._prepare(ins, red)
        cpu_out = [torch.empty(o.shape, dtype=o.dtype) for o in outputs]
        opts = ReduceScatterOptions()
        opts.reduceOp = ReduceOp(red.op)

        def finish():
            for o, c in zip(outputs, cpu_out):
                o.copy_(self._average(c, red))
            return outputs

        return self._run(lambda: self.gloo.reduce_scatter(cpu_out, cpu_in, opts), finish, sync)

    def reduce_scatter_tensor(self, outputs, inputs, red, sync):
        if len(outputs) > 1:  # coalesced
            return self._reduce_scatter_each(outputs, inputs, red, sync)
        cpu_in = _host(inputs[0])
        self._prepare([cpu_in], red)
        cpu_out = torch.empty(outputs[0].shape, dtype=outputs[0].dtype)
        opts = ReduceScatterOptions()
        opts.reduceOp = ReduceOp(red.op)

        def finish():
            outputs[0].copy_(self._average(cpu_out, red))
            return outputs

        return self._run(lambda: self.gloo._reduce_scatter_base(cpu_out, cpu_in, opts), finish, sync)

    def _reduce_scatter_each(self, outputs, inputs, red, sync):
        cpu_in = [_host(i) for i in inputs]
        self._prepare(cpu_in, red)
        cpu_out = [torch.empty(o.shape, dtype=o.dtype) for o in outputs]
        opts = ReduceScatterOptions()
        opts.reduceOp = ReduceOp(red.op)
        # gloo has no coalesced form: one gloo op each, queued in order.

        def finish():
            for o, c in zip(outputs, cpu_out):
                o.copy_(self._average(c, red))
            return outputs

        return self._run(
            lambda: [self.gloo._reduce_scatter_base(o, i, opts) for o, i in zip(cpu_out, cpu_in)], finish, sync
        )

    def all_to_all(self, outputs, inputs, sync):
        cpu_in = [_host(t) for t in inputs]
        cpu_out = [torch.empty(o.shape, dtype=o.dtype) for o in outputs]

        def finish():
            for o, c in zip(outputs, cpu_out):
                o.copy_(c)
            return outputs

        return self._run(lambda: self.gloo.alltoall(cpu_out, cpu_in, AllToAllOptions()), finish, sync)

    def all_to_all_single(self, output, input, out_splits, in_splits, sync):
        cpu_in = _host(input)
        cpu_out = torch.empty(output.shape, dtype=output.dtype)

        def finish():
            output.copy_(cpu_out)
            return [output]

        return self._run(
            lambda: self.gloo.alltoall_base(cpu_out, cpu_in, list(out_splits), list(in_splits), AllToAllOptions()),
            finish,
            sync,
        )

    def gather(self, outputs, inputs, root, sync):
        cpu_in = [_host(t) for t in inputs]
        cpu_out = [[torch.empty(o.shape, dtype=o.dtype) for o in outs] for outs in outputs]
        opts = GatherOptions()
        opts.rootRank = root

        def finish():
            for outs, couts in zip(outputs, cpu_out):
                for o, c in zip(outs, couts):
                    o.copy_(c)
            return [o for outs in outputs for o in outs]

        return self._run(lambda: self.gloo.gather(cpu_out, cpu_in, opts), finish, sync)

    def scatter(self, outputs, inputs, root, sync):
        cpu_in = [[_host(t) for t in ins] for ins in inputs]
        cpu_out = [torch.empty(o.shape, dtype=o.dtype) for o in outputs]
        opts = ScatterOptions()
        opts.rootRank = root

        def finish():
            for o, c in zip(outputs, cpu_out):
                o.copy_(c)
            return outputs

        return self._run(lambda: self.gloo.scatter(cpu_out, cpu_in, opts), finish, sync)

    def send(self, tensors, dst, tag, sync):
        cpu = [_host(t) for t in tensors]
        return self._run(lambda: self.gloo.send(cpu, dst, tag), lambda: tensors, sync)

    def recv(self, tensors, src, tag, sync):
        cpu = [torch.empty(t.shape, dtype=t.dtype) for t in tensors]

        def finish():
            for t, c in zip(tensors, cpu):
                t.copy_(c)
            return tensors

        return self._run(lambda: self.gloo.recv(cpu, src, tag), finish, sync)

    def barrier(self, sync):
        return self._run(lambda: self.gloo.barrier(BarrierOptions()), lambda: [], sync)
