"""The fused optimizer steps (`torch.optim.Adam/AdamW/SGD(fused=True)`, HF Trainer's default
`adamw_torch_fused`) on the `tpu` device, as foreach programs instead of CPU fallbacks.

These ops write five lists of tensors, which the generic path does not model. Each kernel
here computes the step with `_foreach_*` ops (one device program per op for the whole list)
and writes the results into the arguments, with the semantics of PyTorch's CPU kernels:
gradients are unscaled in place by `grad_scale`; `maximize` negates them for the update only;
a nonzero `found_inf` leaves every argument unchanged, decided on the device (no host read).
"""

from __future__ import annotations

import torch


def _unscale(grads, grad_scale):
    if grad_scale is not None:
        inv = grad_scale.reciprocal().to(grads[0].dtype)
        return torch._foreach_mul(grads, inv)
    return list(grads)


def _write(targets, values, found_inf) -> None:
    """Copies `values` into `targets`, or keeps `targets` where `found_inf` is nonzero."""
    if found_inf is not None:
        skip = found_inf.ne(0)
        values = [torch.where(skip, t, v) for t, v in zip(targets, values)]
    torch._foreach_copy_(list(targets), values)


def _adam(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    state_steps,
    *,
    lr,
    beta1,
    beta2,
    weight_decay,
    eps,
    amsgrad,
    maximize,
    grad_scale,
    found_inf,
    decoupled: bool,
) -> None:
    if not params:
        return
    if isinstance(lr, torch.Tensor):
        lr = lr.to(params[0].device)
    unscaled = _unscale(grads, grad_scale)
    g = torch._foreach_neg(unscaled) if maximize else unscaled
    p = list(params)
    if weight_decay != 0:
        if decoupled:
            p = torch._foreach_mul(p, 1 - lr * weight_decay)
        else:
            g = torch._foreach_add(g, p, alpha=weight_decay)
    m = torch._foreach_lerp(list(exp_avgs), g, 1 - beta1)
    v = torch._foreach_add(torch._foreach_mul(list(exp_avg_sqs), beta2), torch._foreach_mul(g, g), alpha=1 - beta2)
    steps = [s.to(torch.float32) for s in state_steps]  # already incremented by the optimizer
    bias1 = [1 - torch.pow(beta1, s) for s in steps]
    bias2_sqrt = [torch.sqrt(1 - torch.pow(beta2, s)) for s in steps]
    if amsgrad:
        vmax = torch._foreach_maximum(list(max_exp_avg_sqs), v)
        _write(max_exp_avg_sqs, vmax, found_inf)
        second = vmax
    else:
        second = v
    denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(second), bias2_sqrt), eps)
    step_size = [(lr / b).to(t.dtype) for b, t in zip(bias1, p)]
    new_p = torch._foreach_sub(p, torch._foreach_mul(torch._foreach_div(m, denom), step_size))
    _write(exp_avgs, m, found_inf)
    _write(exp_avg_sqs, v, found_inf)
    _write(params, new_p, found_inf)
    if grad_scale is not None:
        _write(grads, unscaled, found_inf)


def _fused_adam_(
    self,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    state_steps,
    *,
    lr,
    beta1,
    beta2,
    weight_decay,
    eps,
    amsgrad,
    maximize,
    grad_scale=None,
    found_inf=None,
):
    _adam(
        self,
        grads,
        exp_avgs,
        exp_avg_sqs,
        max_exp_avg_sqs,
        state_steps,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        amsgrad=amsgrad,
        maximize=maximize,
        grad_scale=grad_scale,
        found_inf=found_inf,
        decoupled=False,
    )


def _fused_adamw_(
    self,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    state_steps,
    *,
    lr,
    beta1,
    beta2,
    weight_decay,
    eps,
    amsgrad,
    maximize,
    grad_scale=None,
    found_inf=None,
):
    _adam(
        self,
        grads,
        exp_avgs,
        exp_avg_sqs,
        max_exp_avg_sqs,
        state_steps,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        amsgrad=amsgrad,
        maximize=maximize,
        grad_scale=grad_scale,
        found_inf=found_inf,
        decoupled=True,
    )


def _fused_sgd_(
    self,
    grads,
    momentum_buffer_list,
    *,
    weight_decay,
    momentum,
    lr,
    dampening,
    nesterov,
    maximize,
    is_first_step,
    grad_scale=None,
    found_inf=None,
):
    if not self:
        return
    unscaled = _unscale(grads, grad_scale)
    g = torch._foreach_neg(unscaled) if maximize else unscaled
    if weight_decay != 0:
        g = torch._foreach_add(g, list(self), alpha=weight_decay)
    if momentum != 0:
        if is_first_step:
            buf = [t.clone() for t in g]
        else:
            buf = torch._foreach_add(torch._foreach_mul(list(momentum_buffer_list), momentum), g, alpha=1 - dampening)
        _write(momentum_buffer_list, buf, found_inf)
        g = torch._foreach_add(g, buf, alpha=momentum) if nesterov else buf
    if isinstance(lr, torch.Tensor):
        lr = lr.to(self[0].device)
    new_p = torch._foreach_sub(list(self), torch._foreach_mul(g, lr))
    _write(self, new_p, found_inf)
    if grad_scale is not None:
        _write(grads, unscaled, found_inf)
