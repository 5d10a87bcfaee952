"""The in-process transport: a group whose ranks are threads of this process, each on its own
tpu device (`torchtpu.distributed.spawn`). Each collective is one replicated StableHLO
program over the ranks' devices (`torchtpu._C.compile_replicated`: the compiler's `c10d.*`
ops, through the same driver and caches as every program), cached by (op, dtypes, shapes,
devices). The ranks meet at a hub: every rank hands its device buffers for its n-th
collective; the last to arrive runs the program for all and writes each rank's outputs.
Nothing crosses the host.

What the programs do not cover (a bitwise reduce op, an integer average, uneven all-to-all
splits, differing shapes across ranks) goes through the group's host transport instead,
counted in `inprocess.STATS["host_fallbacks"]` by op: a slower route, never a wrong one.
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from datetime import timedelta

import torch
from torch._C._distributed_c10d import ReduceOp
from torch.futures import Future

from torchtpu.distributed._errors import CollectiveError, CollectiveMismatchError
from torchtpu.ir_text import (
    GraphWriter,
    dims_text,
    float_text,
    group_attrs,
    signature,
    string_text,
    type_text,
    without_names,
)

RedOpType = ReduceOp.RedOpType
_REDUCE_NAMES = {RedOpType.SUM: "sum", RedOpType.PRODUCT: "product", RedOpType.MIN: "min", RedOpType.MAX: "max"}

# Hubs by token (one per group), shared by the group's threads; a hub lives as long as a
# transport of its group does.
_hubs: weakref.WeakValueDictionary[str, _Hub] = weakref.WeakValueDictionary()
_hubs_lock = threading.Lock()
_watchdog: threading.Thread | None = None
# This process, as the group's ranks publish it: a pid alone repeats across hosts.
_PROCESS = uuid.uuid4().hex
# Compiled replicated programs by key (op, dtypes, shapes, devices, attributes).
_programs: dict[tuple, object] = {}
_programs_lock = threading.Lock()
STATS = {"programs_compiled": 0, "collectives": 0, "host_fallbacks": {}}


def members_in_process(store, rank: int, size: int) -> str | None:
    """The hub token if every rank of the group is a thread of this process on a distinct tpu
    device (each rank publishes its pid and current device), else None. Every rank reads the
    same entries, so every rank decides alike."""
    device = torch.tpu.current_device()
    store.set(f"inproc/member/{rank}", f"{_PROCESS}:{device}")
    if rank == 0:
        store.set("inproc/token", uuid.uuid4().hex)
    rows = [store.get(f"inproc/member/{r}").decode().split(":") for r in range(size)]
    processes = {p for p, _ in rows}
    devices = [int(d) for _, d in rows]
    if processes != {_PROCESS} or len(set(devices)) != size:
        return None
    return store.get("inproc/token").decode()


class _Round:
    """One collective of the group: what each rank handed in, and the futures to complete."""

    __slots__ = ("key", "op", "payloads", "futures", "started", "timeout")

    def __init__(self, size: int, key, op: str, timeout: float):
        self.key, self.op = key, op
        self.payloads = [None] * size
        self.futures = [None] * size
        self.started, self.timeout = time.monotonic(), timeout


class _Hub:
    """Where a group's threads meet, one round per collective sequence number. A watchdog
    thread fails the rounds that waited longer than the group's timeout."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.rounds: dict[int, _Round] = {}
        self.mailboxes: dict[tuple, list] = {}  # (src, dst, tag) -> buffers sent, in order
        self.mail = threading.Condition(self.lock)

    def expire(self, now: float) -> None:
        """Fails the rounds that waited longer than the group's timeout."""
        with self.lock:
            late = [(seq, r) for seq, r in self.rounds.items() if now - r.started > r.timeout]
            for seq, _ in late:
                del self.rounds[seq]
        for seq, rnd in late:
            missing = [r for r, f in enumerate(rnd.futures) if f is None]
            fail(
                rnd,
                CollectiveError(
                    f"tpu_dist: {rnd.op} (collective #{seq}): ranks {missing} did not arrive within the group's "
                    f"timeout ({rnd.timeout:g} s)",
                    rnd.op,
                    -1,
                    seq,
                ),
            )


def _watch() -> None:
    """The one watchdog thread of the process: every quarter second, each live hub's late rounds."""
    while True:
        time.sleep(0.25)
        with _hubs_lock:
            hubs = list(_hubs.values())
        now = time.monotonic()
        for hub in hubs:
            hub.expire(now)
        del hubs


def fail(rnd: _Round, e: BaseException) -> None:
    for f in rnd.futures:
        if f is not None and not f.done():
            f.set_exception(e)


def _hub(token: str, size: int) -> _Hub:
    global _watchdog
    with _hubs_lock:
        hub = _hubs.get(token)
        if hub is None:
            hub = _hubs[token] = _Hub(size)
        if _watchdog is None:
            _watchdog = threading.Thread(target=_watch, name="tpu_dist-watchdog", daemon=True)
            _watchdog.start()
        return hub


def _after(fut: Future, finish) -> Future:
    """`fut`, then `finish()` (its errors first)."""

    def run(f):
        f.value()
        return finish()

    return fut.then(run)


def _buffer(t: torch.Tensor):
    """`t`'s values as a dense device buffer of its shape, on its device (a pending value in
    DeferAndFuse is computed first: the backend names the cut "collective")."""
    from torchtpu.device import _defer, _storage

    return _defer.resolved([_storage.read(t)], "collective")[0]


def _write(t: torch.Tensor, buffer) -> None:
    from torchtpu.device import _storage

    _storage.write(t, buffer)


def _writer(outputs: list, keep: bool = True):
    """The `finish` of a collective whose program's outputs are `outputs`, in order: writes
    them (where `keep`: a root-only result elsewhere is dropped) and returns `outputs`."""

    def finish(bufs):
        if keep:
            for t, b in zip(outputs, bufs):
                _write(t, b)
        return outputs

    return finish


def _ty(t) -> str:
    return type_text(t.dtype, t.shape)


class InProcessTransport:
    """The `Transport` (transport.py) of a group of threads of one process on distinct tpu
    devices. `host` is the group's host transport, for the forms the programs do not cover."""

    name = "in-process"
    # The ranks' calls meet at the hub under a key of op, reduction, dtypes and shapes: a
    # mismatch raises there (`_meet`), so the backend's fingerprint exchange would be a second
    # meeting per collective for nothing.
    matches_calls = True

    def __init__(self, token: str, rank: int, size: int, timeout: timedelta, host):
        self.rank, self.size, self.timeout = rank, size, timeout
        self.hub = _hub(token, size)
        self.host = host
        self.seq = 0
        self.groups = ", ".join(str(r) for r in range(size))

    def set_timeout(self, timeout: timedelta) -> None:
        # Rounds started from now on (the watchdog reads each round's own); recv's wait too.
        self.timeout = timeout
        self.host.set_timeout(timeout)

    # ------------------------------------------------------------------ the meeting

    def _meet(self, op: str, key, payload, action, sync: bool) -> Future:
        """Hands `payload` in for this rank's next collective. The last rank to arrive runs
        `action(payloads)` (a list of per-rank results) and completes every rank's future;
        ranks still missing when the group's timeout passes fail every waiting future."""
        from torchtpu.distributed.threads import _refuse_defer

        if self.size > 1:
            _refuse_defer()  # the mode turned on inside a rank: its region would mix the ranks' ops
        self.seq += 1
        seq, fut = self.seq, Future()
        hub = self.hub
        with hub.lock:
            rnd = hub.rounds.get(seq)
            if rnd is None:
                rnd = hub.rounds[seq] = _Round(self.size, key, op, self.timeout.total_seconds())
            theirs = rnd.key if rnd.key != key else None
            rnd.payloads[self.rank], rnd.futures[self.rank] = payload, fut
            complete = all(f is not None for f in rnd.futures)
            if complete or theirs is not None:
                hub.rounds.pop(seq, None)
        if theirs is not None:
            err = CollectiveMismatchError(
                f"tpu_dist: rank {self.rank} called {key[0]} {key[1:]} as collective #{seq} of its group, where "
                f"another rank called {theirs[0]} {theirs[1:]}",
                op,
                self.rank,
                seq,
                {},
            )
            fail(rnd, err)
            raise err
        if complete:
            try:
                results = action(rnd.payloads)
            except BaseException as e:  # every rank gets the failure
                fail(rnd, e)
            else:
                STATS["collectives"] += 1
                for f, r in zip(rnd.futures, results):
                    f.set_result(r)
        if sync:
            fut.wait()
        return fut

    # ------------------------------------------------------------------ programs

    def _program(self, key: tuple, text: str, devices: list[int]):
        from torchtpu import _C

        full = key + (tuple(devices),)
        with _programs_lock:
            program = _programs.get(full)
            if program is None:
                program = _programs[full] = _C.compile_replicated(text, devices)
                STATS["programs_compiled"] += 1
        return program

    def _run(self, op: str, key: tuple, text: str, inputs: list, finish, sync: bool, devices_from=None) -> Future:
        """Runs the replicated program `text` on this rank's `inputs` (tensors) and every
        other rank's; this rank's future is `finish(its output buffers)`, which writes them
        into its outputs (in this rank's thread when `sync`)."""
        payload = ([_buffer(t) for t in inputs], (devices_from or inputs[0]).device.index or 0)

        def action(payloads):
            devices = [d for _, d in payloads]
            if len(set(devices)) != len(devices):
                raise CollectiveError(
                    f"tpu_dist: {op}: the group's ranks hold their tensors on devices {devices}; the in-process "
                    "transport needs one distinct tpu device per rank (torch.tpu.set_device(rank))",
                    op,
                    self.rank,
                    self.seq,
                )
            return self._program(key, text, devices).run([bufs for bufs, _ in payloads])

        fut = self._meet(op, key, payload, action, sync)
        return fut.then(lambda f: finish(f.value()))

    def _fallback(self, op: str):
        counts = STATS["host_fallbacks"]
        counts[op] = counts.get(op, 0) + 1
        return self.host

    @staticmethod
    def _shapes(ts) -> tuple:
        return tuple((str(t.dtype), tuple(t.shape)) for t in ts)

    def _graph(self, name: str, inputs: list, build) -> str:
        """A program of this group's collectives: `build(writer, params)` writes its ops on the
        inputs' values and returns its outputs and their types."""
        w = GraphWriter(name)
        params = [w.param(_ty(t)) for t in inputs]
        outputs, types = build(w, params)
        return w.text(outputs, types)

    def _group(self) -> list:
        return group_attrs(self.size)

    def _agree(self, op: str, sig, ok: bool = True) -> bool:
        """Whether the programs can run this collective: every rank's `sig` (shapes, dtypes)
        equal and every rank's `ok`. One meeting, so every rank decides alike (one rank on the
        host transport and another in a program would wait for each other forever)."""
        rows = self._meet(op + "/agree", (op + "/agree",), (sig, ok), lambda p: [p] * self.size, True).value()
        return all(r == (sig, True) for r in rows)

    # ------------------------------------------------------------------ the collectives

    def exchange(self, values: list[int]) -> list[list[int]]:
        return self._meet("exchange", ("exchange", len(values)), list(values), lambda p: [p] * self.size, True).value()

    def barrier(self, sync):
        return self._meet("barrier", ("barrier",), None, lambda p: [None] * self.size, sync)

    def _reduce_kind(self, tensors, red) -> str | None:
        kind = _REDUCE_NAMES.get(red.op)
        if kind is None:
            return None
        if red.post is not None:  # AVG: red.post is this group's size
            if not all(t.is_floating_point() or t.is_complex() for t in tensors):
                return None  # NCCL's truncating integer average: the host transport's
            return "avg"
        return kind

    def _reduced(self, w: GraphWriter, x: str, in_ty: str, red, kind: str, op="all_reduce", dims=(), out_ty=None):
        """`x` (scaled first for a pre-multiplied average) reduced by `c10d.{op}`: its value."""
        if red.pre is not None:
            x = w.op("aten.mul.Tensor", [x], [("other", float_text(float(red.pre)))], in_ty)
        attrs = [*dims, *self._group(), ("reduce_op", string_text(kind))]
        return w.op(f"c10d.{op}", [x], attrs, out_ty or in_ty)

    def _reduce_all(self, name: str, tensors, red, kind: str) -> str:
        def build(w, params):
            types = [_ty(t) for t in tensors]
            return [self._reduced(w, x, ty, red, kind) for x, ty in zip(params, types)], types

        return self._graph(name, tensors, build)

    def all_reduce(self, tensors, red, sync):
        kind = self._reduce_kind(tensors, red)
        if kind is None:
            return self._fallback("all_reduce").all_reduce(tensors, red, sync)
        text = self._reduce_all("all_reduce", tensors, red, kind)
        key = ("all_reduce", kind, red.pre, self._shapes(tensors))

        return self._run("all_reduce", key, text, tensors, _writer(tensors), sync)

    def reduce(self, tensors, root, red, sync):
        kind = self._reduce_kind(tensors, red)
        if kind is None:
            return self._fallback("reduce").reduce(tensors, root, red, sync)
        text = self._reduce_all("reduce", tensors, red, kind)
        key = ("all_reduce", kind, red.pre, self._shapes(tensors))  # the same program

        return self._run("reduce", key, text, tensors, _writer(tensors, self.rank == root), sync)

    def broadcast(self, tensors, root, sync):
        def build(w, params):
            types = [_ty(t) for t in tensors]
            attrs = [*self._group(), ("src", str(int(root)))]
            return [w.op("c10d.broadcast", [x], attrs, ty) for x, ty in zip(params, types)], types

        text = self._graph("broadcast", tensors, build)
        key = ("broadcast", root, self._shapes(tensors))

        return self._run("broadcast", key, text, tensors, _writer(tensors, self.rank != root), sync)

    def all_gather(self, outputs, inputs, sync):
        if not self._agree("all_gather", self._shapes(inputs)):
            return self._fallback("all_gather").all_gather(outputs, inputs, sync)

        def build(w, params):
            outs, types = [], []
            for x, t in zip(params, inputs):
                one, full = (1, *t.shape), (self.size, *t.shape)
                u = w.op("aten.view.default", [x], [("size", dims_text(one))], type_text(t.dtype, one))
                g = w.op("c10d.all_gather", [u], [("dim", "0"), *self._group()], type_text(t.dtype, full))
                for r in range(self.size):  # one output per rank's piece
                    outs.append(w.op("aten.select.int", [g], [("dim", "0"), ("index", str(r))], _ty(t)))
                    types.append(_ty(t))
            return outs, types

        text = self._graph("all_gather", inputs, build)
        key = ("all_gather", self._shapes(inputs))

        return self._run("all_gather", key, text, inputs, _writer([o for outs in outputs for o in outs]), sync)

    def all_gather_into(self, outputs, inputs, sync):
        if not self._agree("all_gather_into", self._shapes(inputs)):
            return self._fallback("all_gather_into").all_gather_into(outputs, inputs, sync)

        def build(w, params):
            outs = []
            for x, o, t in zip(params, outputs, inputs):
                n = t.numel()
                f = w.op("aten.view.default", [x], [("size", dims_text([n]))], type_text(t.dtype, [n]))
                g = w.op("c10d.all_gather", [f], [("dim", "0"), *self._group()], type_text(t.dtype, [n * self.size]))
                outs.append(w.op("aten.view.default", [g], [("size", dims_text(o.shape))], _ty(o)))
            return outs, [_ty(o) for o in outputs]

        text = self._graph("all_gather_into", inputs, build)
        key = ("all_gather_into", self._shapes(inputs), self._shapes(outputs))

        return self._run("all_gather_into", key, text, inputs, _writer(outputs), sync)

    def reduce_scatter_tensor(self, outputs, inputs, red, sync):
        kind = self._reduce_kind(inputs, red)
        if kind is None:
            return self._fallback("reduce_scatter_tensor").reduce_scatter_tensor(outputs, inputs, red, sync)

        def build(w, params):
            outs = []
            for x, o, t in zip(params, outputs, inputs):
                n = t.numel()
                flat = type_text(t.dtype, [n])
                f = w.op("aten.view.default", [x], [("size", dims_text([n]))], flat)
                part = type_text(t.dtype, [n // self.size])
                r = self._reduced(w, f, flat, red, kind, "reduce_scatter", [("dim", "0")], part)
                outs.append(w.op("aten.view.default", [r], [("size", dims_text(o.shape))], _ty(o)))
            return outs, [_ty(o) for o in outputs]

        text = self._graph("reduce_scatter", inputs, build)
        key = ("reduce_scatter_tensor", kind, red.pre, self._shapes(inputs), self._shapes(outputs))

        return self._run("reduce_scatter_tensor", key, text, inputs, _writer(outputs), sync)

    def reduce_scatter(self, outputs, inputs, red, sync):
        # inputs[i]: this rank's `size` pieces for output i: stacked, then one tensor op.
        same = all(len({(p.dtype, tuple(p.shape)) for p in pieces}) == 1 for pieces in inputs)
        if not self._agree("reduce_scatter", tuple(self._shapes(p) for p in inputs), same):
            return self._fallback("reduce_scatter").reduce_scatter(outputs, inputs, red, sync)
        stacked = [torch.stack(list(pieces)) for pieces in inputs]
        return self.reduce_scatter_tensor(outputs, stacked, red, sync)

    def all_to_all_single(self, output, input, out_splits, in_splits, sync):
        even = (not out_splits or len(set(out_splits)) == 1) and (not in_splits or len(set(in_splits)) == 1)
        if not self._agree("all_to_all", self._shapes([input]), even and input.shape[0] % self.size == 0):
            return self._fallback("all_to_all_single").all_to_all_single(output, input, out_splits, in_splits, sync)

        def build(w, params):
            attrs = [("concat_dim", "0"), *self._group(), ("split_dim", "0")]
            r = w.op("c10d.all_to_all", params, attrs, _ty(input))
            return [w.op("aten.view.default", [r], [("size", dims_text(output.shape))], _ty(output))], [_ty(output)]

        text = self._graph("all_to_all", [input], build)
        key = ("all_to_all_single", self._shapes([input]), self._shapes([output]))

        return self._run("all_to_all_single", key, text, [input], _writer([output]), sync)

    def all_to_all(self, outputs, inputs, sync):
        shapes = {(t.dtype, tuple(t.shape)) for t in list(inputs) + list(outputs)}
        if not self._agree("all_to_all_list", self._shapes(inputs), len(shapes) == 1):
            return self._fallback("all_to_all").all_to_all(outputs, inputs, sync)
        stacked = torch.stack(list(inputs))
        received = torch.empty_like(stacked)
        fut = self.all_to_all_single(received, stacked, [], [], sync)

        def finish():
            for r, o in enumerate(outputs):
                o.copy_(received[r])
            return outputs

        return _after(fut, finish)

    def gather(self, outputs, inputs, root, sync):
        # outputs: [[size tensors]] on the root, [] elsewhere: an all-gather kept by the root.
        if not self._agree("gather", self._shapes(inputs)):
            return self._fallback("gather").gather(outputs, inputs, root, sync)
        scratch = [[torch.empty_like(t) for _ in range(self.size)] for t in inputs]
        fut = self.all_gather(scratch, inputs, sync)

        def finish():
            if self.rank == root:
                for outs, got in zip(outputs, scratch):
                    for o, g in zip(outs, got):
                        o.copy_(g)
            return [o for outs in outputs for o in outs]

        return _after(fut, finish)

    def scatter(self, outputs, inputs, root, sync):
        # The root's pieces through an all-to-all: every rank sends `size` pieces (the others
        # their own outputs as stand-ins) and keeps the one from the root.
        if len(outputs) != 1:
            return self._fallback("scatter").scatter(outputs, inputs, root, sync)
        out = outputs[0]
        pieces = list(inputs[0]) if self.rank == root else [out] * self.size
        stacked = torch.stack(pieces)
        received = torch.empty_like(stacked)
        fut = self.all_to_all_single(received, stacked, [], [], sync)

        def finish():
            out.copy_(received[root])
            return outputs

        return _after(fut, finish)

    def send(self, tensors, dst, tag, sync):
        # A device-to-device copy onto the receiver's device, left in a mailbox.
        copies = [_buffer(t) for t in tensors]
        hub = self.hub
        with hub.mail:
            hub.mailboxes.setdefault((self.rank, dst, tag), []).append(copies)
            hub.mail.notify_all()
        fut = Future()
        fut.set_result(tensors)
        return fut

    def recv(self, tensors, src, tag, sync):
        hub = self.hub
        box = (src, self.rank, tag)
        fut = Future()

        def take():
            deadline = self.timeout.total_seconds()
            with hub.mail:
                if not hub.mail.wait_for(lambda: hub.mailboxes.get(box), timeout=deadline):
                    raise CollectiveError(
                        f"tpu_dist: recv from rank {src} (tag {tag}): nothing arrived within the group's timeout "
                        f"({deadline:g} s)",
                        "recv",
                        self.rank,
                        self.seq,
                    )
                bufs = hub.mailboxes[box].pop(0)
            for t, b in zip(tensors, bufs):
                device = t.device.index or 0
                _write(t, b if b.device == device else b.copy_to(device))
            return tensors

        if sync:
            fut.set_result(take())
            return fut

        def worker():
            try:
                fut.set_result(take())
            except Exception as e:
                fut.set_exception(e)

        threading.Thread(target=worker, name="tpu_dist-recv", daemon=True).start()
        return fut


class ReplicatedGraph:
    """The program of a compiled graph with in-process collectives (`torchtpu.collectives`):
    compiled once for the group's devices (known when the ranks first meet) and run once per
    call of all ranks. Looks to `executor.CompiledGraph` like a one-device program that runs on
    tpu buffers. `group`: the graph's `collectives.Group`."""

    def __init__(self, text: str, group, name: str):
        self.text, self.group, self.name = text, group, name
        self.input_types, self.output_types = signature(text)
        # Each rank compiled the graph itself: the same IR but for the graph's name and comments.
        self.key = ("graph", without_names(text))

    def run_device(self, buffers: list, wait: bool = False, device: int = 0) -> list:
        return run_graph(self.group.transport, self.key, self.text, self.name, buffers, device)

    def run(self, tensors):
        from torchtpu.errors import InputError

        raise InputError(
            f"{self.name}: this graph holds collectives of an in-process group: its inputs must be tpu tensors, "
            "each rank's on its own device",
            0,
        )


def run_graph(transport: InProcessTransport, key: tuple, text: str, name: str, buffers: list, device: int) -> list:
    """One call of a compiled graph with in-process collectives (`ReplicatedGraph`)
    by this rank: its input buffers (on `device`) meet the other ranks' calls, the graph's
    replicated program runs once for all, and this rank's output buffers come back."""

    def action(payloads):
        devices = [d for _, d in payloads]
        if len(set(devices)) != len(devices):
            raise CollectiveError(
                f"tpu_dist: compiled graph {name}: the ranks' inputs are on devices {devices}; each rank needs its own "
                "tpu device (torch.tpu.set_device(rank))",
                name,
                transport.rank,
                transport.seq,
            )
        return transport._program(key, text, devices).run([bufs for bufs, _ in payloads])

    return transport._meet(f"graph {name}", key, (list(buffers), device), action, True).value()
