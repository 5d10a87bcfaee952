"""The deterministic subset of the model zoo (python/tests/models/zoo.py, SUBSET): each model's
forward under torch.compile(backend="torchtpu") matches eager with zero fallback ops, and the
models in zoo.TRAIN also match on one training step (loss and every gradient). Tolerances are
those of models/harness.py. The full zoo: `make zoo` (writes docs/model-coverage.md); on the
device in every mode too: `make zoo-modes`."""

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


# The zoo on the tpu device in every mode (`make zoo-modes` runs all of it): HF decoders (Llama
# with grouped-query attention, GPT-2), an encoder (BERT), a ViT, a torchvision CNN and an MoE (Mixtral), moved
# with `.to("tpu")`, in strict eager, DeferAndFuse and torch.compile on tpu tensors, each
# forward and one training step against CPU eager with zero CPU fallbacks.
# `make test` runs Llama and resnet18 in every mode; the others are `slow` (`make test-slow`).
DEVICE_SUBSET = ["llama", "gpt2", "bert", "vit", "tv_resnet18", "mixtral"]
DEVICE_IN_MAKE_TEST = {"llama", "tv_resnet18"}
DEVICE_CASES = [
    pytest.param(name, mode, id=f"{name}-{mode}", marks=() if name in DEVICE_IN_MAKE_TEST else pytest.mark.slow)
    for name in DEVICE_SUBSET
    for mode in harness.DEVICE_MODES
]


@pytest.mark.parametrize("name, mode", DEVICE_CASES)
def test_zoo_model_on_tpu_matches_cpu_eager(name, mode):
    spec = zoo.BY_NAME[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = harness.run_device_mode(spec, mode, train=name in zoo.TRAIN, timing_rounds=0)
    assert result.status == "pass", (
        f"{name} {mode}: {result.status}, max rel err {result.max_rel:.2e}, fallbacks {result.fallbacks}, {result.error}"
    )
    assert result.train == "pass", (
        f"{name} {mode} training step: {result.train}, {result.train_max_rel:.2e}, {result.error}"
    )
