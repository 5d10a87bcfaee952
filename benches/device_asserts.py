"""What the device asserts cost (`_assert_async` as a device check, index_checks.py; docs/eager.md
"Index checks"): a graph with them against the same graph without, interleaved in one process,
medians of rounds.

    .venv/bin/python benches/device_asserts.py [--rounds N] [--json FILE]

- compiled: an MoE router (logits 256x8, top-2, `F.one_hot(experts, 8)` summed into a dispatch
  mask, then the mask times the tokens): one_hot's decomposition asserts the class range twice
  (`_assert_async`), which becomes two reductions and a flag output read after the call; the
  same router with `zeros.scatter_(-1, experts, 1)` (one_hot's decomposition without the
  asserts) is the baseline. Index checks off in both, so only the asserts differ. CPU and tpu
  tensors.
- eager device (strict mode): a step of eight small ops with `torch._assert_async(cond)` after
  each against the same step without; a host read per step.

Each row is with / without: how much longer the asserted version takes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from index_checks import _copy, _order, _summary, _time_ms  # noqa: E402 - the same method

import torchtpu  # noqa: E402,F401 - the tpu device and the backend

TPU = "tpu"


def _router_one_hot(logits, tokens):
    experts = logits.topk(2, dim=-1).indices
    mask = F.one_hot(experts, 8).sum(1).to(tokens.dtype)  # asserts 0 <= experts < 8
    return (mask.t() @ tokens).sum()


def _router_scatter(logits, tokens):
    experts = logits.topk(2, dim=-1).indices
    mask = torch.zeros(*experts.shape, 8, dtype=torch.long, device=logits.device).scatter_(-1, experts.unsqueeze(-1), 1)
    return (mask.sum(1).to(tokens.dtype).t() @ tokens).sum()


def compiled_rows(rounds: int) -> dict:
    rows = {}
    for dev in ("cpu", TPU):
        g = torch.Generator().manual_seed(0)
        logits, tokens = torch.randn(256, 8, generator=g).to(dev), torch.randn(256, 64, generator=g).to(dev)
        torch.testing.assert_close(_router_one_hot(logits, tokens), _router_scatter(logits, tokens))
        paths = {}
        for asserted, fn in ((True, _router_one_hot), (False, _router_scatter)):
            compiled = torch.compile(_copy(fn), backend="torchtpu", options={"check_indices": False})
            run = lambda compiled=compiled: compiled(logits, tokens).item()  # noqa: E731
            run()
            run()
            paths[asserted] = run
        samples = {True: [], False: []}
        for r in range(rounds):
            for asserted in _order(r):
                samples[asserted].append(_time_ms(paths[asserted], 100))
        rows[f"compiled, {dev} tensors: MoE router"] = _summary(samples[True], samples[False])
    return rows


def _eager_step(x, asserted: bool):
    y = x
    for _ in range(8):
        y = (y * 1.01).relu() + 0.1
        if asserted:
            torch._assert_async((y >= 0).all(), "negative")
    return y.sum().item()


def eager_rows(rounds: int) -> dict:
    x = torch.randn(64, 32).to(TPU)
    for asserted in (True, False):
        _eager_step(x, asserted)
    samples = {True: [], False: []}
    for r in range(rounds):
        for asserted in _order(r):
            samples[asserted].append(_time_ms(lambda a=asserted: _eager_step(x, a), 10))
    return {"eager device, strict: 8 ops with an assert after each": _summary(samples[True], samples[False])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = {**compiled_rows(args.rounds), **eager_rows(args.rounds)}
    print(f"{'case':56} {'with ms':>9} {'without':>9} {'ratio':>6} {'min ratio':>9}")
    for name, r in rows.items():
        print(f"{name:56} {r['on']:9.4f} {r['off']:9.4f} {r['on'] / r['off']:6.2f} {r['on_min'] / r['off_min']:9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
