"""What the index checks cost (index_checks.py; docs/eager.md "Index checks", docs/backend.md
"Options"): checks on against off, interleaved in one process, medians of rounds.

    .venv/bin/python benches/index_checks.py [--rounds N] [--json FILE]

- compiled: an embedding + gather + cross-entropy model (vocabulary 1000, width 64, batch
  32x16), its inference forward and a training step (forward, backward, SGD), on CPU tensors
  and on tpu tensors (`torch.compile(backend="torchtpu", options={"check_indices": ...})`);
  plus a tiny `x[idx]` graph, where the flag's own read is all there is;
- eager device: an indexing-heavy loop (`x[idx]`, `gather`, `embedding`, `index_select`,
  `scatter_add`, `cross_entropy` on small tensors, a host read every 8 ops) in strict and
  defer_and_fuse modes (`torchtpu.eager.check_indices(...)`).

Each row is on / off: how much longer the checked version takes (medians, and minima: the
least disturbed rounds on a noisy machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import types

import torch
import torch.nn.functional as F

import torchtpu
import torchtpu.eager as E

torch._dynamo.config.recompile_limit = 64
TPU = "tpu"


class Model(torch.nn.Module):
    def __init__(self, vocab=1000, width=64, classes=32):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.proj = torch.nn.Linear(width, classes)

    def forward(self, ids, pick, target):
        h = self.proj(self.emb(ids))
        picked = torch.gather(h, 2, pick)
        return F.cross_entropy(h.flatten(0, 1), target) + picked.square().mean()


def _copy(fn):
    """`fn` with a code object of its own: Dynamo keeps compiled code per code object, so the
    checked and unchecked versions never share (or evict) each other's entries."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _forward(model, ids, pick, target):
    return model(ids, pick, target)


def _train(model, opt, ids, pick, target, compiled):
    loss = compiled(model, ids, pick, target)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _tiny(x, i):
    return x[i]


def _batch(dev, vocab=1000, classes=32):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (32, 16), generator=g)
    pick = torch.randint(0, classes, (32, 16, 1), generator=g)
    target = torch.randint(0, classes, (32 * 16,), generator=g)
    return [t.to(dev) for t in (ids, pick, target)]


def _order(r: int) -> tuple:
    """Which goes first alternates per round (the second of a pair finds warmer caches)."""
    return (True, False) if r % 2 == 0 else (False, True)


def _summary(on: list, off: list) -> dict:
    """Medians and minima (the machine is noisy: the minimum is the least disturbed round)."""
    return {"on": statistics.median(on), "off": statistics.median(off), "on_min": min(on), "off_min": min(off)}


def _time_ms(fn, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner * 1e3


def compiled_rows(rounds: int) -> dict:
    """Per row: {"on": ms, "off": ms} medians, checked and unchecked interleaved."""
    rows = {}
    for dev in ("cpu", TPU):
        torch.manual_seed(0)
        batch = _batch(dev)
        paths = {}
        for on in (True, False):
            opts = {"check_indices": on}
            model = Model().to(dev)
            fwd = torch.compile(_copy(_forward), backend="torchtpu", options=opts)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            tiny = torch.compile(_copy(_tiny), backend="torchtpu", options=opts)
            x, i = torch.randn(64, 8, device=dev), torch.randint(0, 64, (4,), device=dev)

            def infer(model=model, fwd=fwd):
                with torch.no_grad():
                    return fwd(model, *batch).item()

            train = lambda model=model, opt=opt, fwd=fwd: _train(model, opt, *batch, fwd).item()  # noqa: E731
            small = lambda tiny=tiny, x=x, i=i: tiny(x, i).sum().item()  # noqa: E731
            for f in (infer, train, small):
                f()
                f()  # compiled, and warm
            paths[on] = {"inference": infer, "training step": train, "tiny x[idx]": small}
        samples = {(name, on): [] for name in paths[True] for on in (True, False)}
        inner = {"inference": 40, "training step": 10, "tiny x[idx]": 200}
        for r in range(rounds):
            for name in paths[True]:
                for on in _order(r):
                    samples[(name, on)].append(_time_ms(paths[on][name], inner[name]))
        for name in paths[True]:
            rows[f"compiled, {dev} tensors: {name}"] = _summary(samples[(name, True)], samples[(name, False)])
    return rows


def _eager_loop(x, table, idx, rows, target, logits, index2d, steps: int = 4):
    """An indexing-heavy step: six index ops, a host read after every eight ops."""
    for _ in range(steps):
        a = x[idx]
        b = torch.gather(x, 1, index2d)
        c = F.embedding(rows, table)
        d = x.index_select(0, rows)
        e = torch.zeros_like(x).scatter_add_(1, index2d, b)
        loss = F.cross_entropy(logits, target)
        (a.sum() + b.sum() + c.sum() + d.sum() + e.sum() + loss).item()


def eager_rows(rounds: int) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g).to(TPU)
    table = torch.randn(100, 16, generator=g).to(TPU)
    idx = torch.randint(-64, 64, (16,), generator=g).to(TPU)
    rows = torch.randint(0, 64, (16,), generator=g).to(TPU)
    target = torch.randint(0, 10, (16,), generator=g).to(TPU)
    logits = torch.randn(16, 10, generator=g).to(TPU)
    index2d = torch.randint(0, 32, (64, 4), generator=g).to(TPU)
    args = (x, table, idx, rows, target, logits, index2d)
    out = {}
    for mode in ("strict", "defer_and_fuse"):
        samples = {True: [], False: []}
        with E.mode(mode):
            for on in (True, False):
                with E.check_indices(on):
                    _eager_loop(*args)
                    _eager_loop(*args)  # programs (and regions) compiled
            for r in range(rounds):
                for on in _order(r):
                    with E.check_indices(on):
                        samples[on].append(_time_ms(lambda: _eager_loop(*args), 8))
        out[f"eager device, {mode}: indexing loop (4 x 15 ops)"] = _summary(samples[True], samples[False])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json")
    a = parser.parse_args()
    rows = {**compiled_rows(a.rounds), **eager_rows(a.rounds)}
    print("| what | checks on (ms, median) | checks off (ms, median) | on / off (medians) | on / off (minima) |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['on']:.3f} | {r['off']:.3f} | {r['on'] / r['off']:.2f}x | {r['on_min'] / r['off_min']:.2f}x |"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "torchtpu_stats": {k: v for k, v in torchtpu.stats().items() if isinstance(v, (int, float))}}, f, indent=1)


if __name__ == "__main__":
    main()
