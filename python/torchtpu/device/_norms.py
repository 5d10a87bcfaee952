"""Batch norm on the `tpu` device. `native_batch_norm` updates its running statistics in
place although its schema does not say so; a generic kernel would lose that update. These
kernels run the functional form (`_native_batch_norm_legit_functional`, which returns the new
statistics) and write the statistics back, or the no-training form in eval mode."""

from __future__ import annotations

import torch

from torchtpu.device import _dispatch

aten = torch.ops.aten


def _norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    if running_mean is None or running_var is None:
        return _dispatch.run(aten._native_batch_norm_legit.no_stats, input, weight, bias, training, momentum, eps)
    if not training:
        return _dispatch.run(
            aten._native_batch_norm_legit_no_training.default,
            input,
            weight,
            bias,
            running_mean,
            running_var,
            momentum,
            eps,
        )
    out, mean, rstd, new_mean, new_var = _dispatch.run(
        aten._native_batch_norm_legit_functional.default,
        input,
        weight,
        bias,
        running_mean,
        running_var,
        True,
        momentum,
        eps,
    )
    running_mean.copy_(new_mean)
    running_var.copy_(new_var)
    return out, mean, rstd


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


def _native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


def _reserve(input):
    return torch.empty(0, dtype=torch.uint8, device=input.device)


def _batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, rstd = _norm(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, mean, rstd, _reserve(input)


def _batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, rstd = _norm(input, weight, bias, running_mean, running_var, False, momentum, eps)
    return out, mean, rstd, _reserve(input)
