"""The deterministic subset of the model zoo (python/tests/models/zoo.py, SUBSET): each model's
forward under torch.compile(backend="torchtpu") matches eager with zero fallback ops, and the
models in zoo.TRAIN also match on one training step (loss and every gradient). Tolerances are
those of models/harness.py. The full zoo: `make zoo` (writes docs/model-coverage.md)."""

import warnings

import pytest

from models import harness, zoo


@pytest.mark.parametrize("name", zoo.SUBSET)
def test_zoo_model_matches_eager(name):
    spec = zoo.BY_NAME[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = harness.run_model(spec, train=name in zoo.TRAIN, timing_rounds=0)
    assert result.status == "pass", (
        f"{name}: {result.status}, max rel err {result.max_rel:.2e}, fallback ops {result.fallback_ops}, {result.error}"
    )
    if name in zoo.TRAIN:
        assert result.train == "pass", (
            f"{name} training step: {result.train}, max rel err {result.train_max_rel:.2e}, {result.error}"
        )
