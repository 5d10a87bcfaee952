"""Replays a reproduction written by `repro.py`: compiles and runs its IR as the backend did."""

from __future__ import annotations

import re
import sys

import torch

from torchtpu.compiled.executor import compile_ir
from torchtpu.errors import TorchTPUError


def _header(text: str, key: str, default: str) -> str:
    m = re.search(rf"^// {key}: (.*)$", text, re.M)
    return m.group(1).strip() if m else default


def replay(ir_path: str) -> int:
    """Compiles and runs the IR at `ir_path` as the backend did; returns 1 when it fails with
    a torchtpu error (the failure reproduced), 0 when it runs."""
    with open(ir_path) as f:
        text = f.read()
    passes = _header(text, "passes", "")
    donate = {"true": True, "false": False}.get(_header(text, "donate", "default"))
    try:
        run = compile_ir(text, passes, donate)
        run([torch.zeros(shape, dtype=dtype) for dtype, shape in run.input_types])
    except TorchTPUError as e:
        print(f"reproduced: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("did not reproduce: the graph compiled and ran", file=sys.stderr)
    return 0
