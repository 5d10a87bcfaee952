"""The tests' shared models (`tiny_llama`, `small`, the zoo), importable as `models` by the tests
and, through `importable`, by the scripts they run in a new process."""

from __future__ import annotations

import os

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def importable(env: dict) -> dict:
    """`env` with the tests directory first on `PYTHONPATH`, so a script run with it can
    `from models import tiny_llama`."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (TESTS_DIR, env.get("PYTHONPATH")) if p)}
