"""What the backend tests share: a fresh Dynamo and torchtpu state per test, and the check
that the compiled path ran with nothing falling back."""

import pytest
import torch

import torchtpu


@pytest.fixture
def fresh_torchtpu():
    """Dynamo's caches and torchtpu's stats reset, seed 0; Dynamo reset again afterwards."""
    torch._dynamo.reset()
    torchtpu.reset_stats()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def assert_compiled_cleanly():
    """Programs were compiled and executed, and nothing ran eagerly."""
    s = torchtpu.stats()
    assert s["executions"] > 0, s
    assert s["graphs_compiled"] > 0, s
    assert s["graphs_fallback"] == 0 and not s["fallback_ops"], s["fallback_reasons"]
