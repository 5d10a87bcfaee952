"""The ops on tpu with kernels of their own, each written once with where its kernel is: the one
list. `torchtpu.device` registers every op here when torch starts and imports a kernel's module
only at its first call, so `import torch` stays fast; every other op reaches the boxed fallback
(`_dispatch.run`). A new eager kernel: write the function in its module (by job: `_random`,
`_dynamic`, `_norms`, `_optim`, `_attention`, else `_kernels`) and add its line here."""

from __future__ import annotations

import importlib

# ATen overload name -> "module:function", the module under torchtpu.device.
KERNELS: dict[str, str] = {
    # Tensor creation, copies across devices, host reads, storage (`_kernels`).
    "empty.memory_format": "_kernels:empty_memory_format",
    "empty_strided": "_kernels:empty_strided",
    "copy_": "_kernels:copy_",
    "_copy_from": "_kernels:_copy_from",
    "_copy_from_and_resize": "_kernels:_copy_from_and_resize",
    "_local_scalar_dense": "_kernels:_local_scalar_dense",
    "resize_": "_kernels:resize_",
    "as_strided_": "_kernels:as_strided_",
    "_to_copy": "_kernels:_to_copy",
    "equal": "_kernels:equal",
    "set_.source_Storage_storage_offset": "_kernels:set_storage_offset",
    "set_.source_Storage": "_kernels:set_storage",
    "record_stream": "_kernels:record_stream",
    "convolution_overrideable": "_kernels:convolution_overrideable",
    "convolution_backward_overrideable": "_kernels:convolution_backward_overrideable",
    "_assert_async": "_kernels:assert_async",
    "_assert_async.msg": "_kernels:assert_async",
    # Random numbers from the device generator (`_random`).
    "normal_": "_random:normal_",
    "uniform_": "_random:uniform_",
    "random_": "_random:random_",
    "random_.to": "_random:random_to",
    "random_.from": "_random:random_from",
    "bernoulli_.float": "_random:bernoulli_float",
    "bernoulli_.Tensor": "_random:bernoulli_tensor",
    "bernoulli": "_random:bernoulli",
    "native_dropout": "_random:native_dropout",
    "bernoulli.p": "_random:bernoulli_p",
    "exponential_": "_random:exponential_",
    "geometric_": "_random:geometric_",
    "cauchy_": "_random:cauchy_",
    "log_normal_": "_random:log_normal_",
    "normal.Tensor_Tensor": "_random:normal_tensor_tensor",
    "normal.Tensor_float": "_random:normal_tensor_float",
    "normal.float_Tensor": "_random:normal_float_tensor",
    "multinomial": "_random:multinomial",
    "randperm.generator_out": "_random:randperm_out",
    # Outputs whose size depends on the data (`_dynamic`).
    "nonzero": "_dynamic:nonzero",
    "masked_select": "_dynamic:masked_select",
    "index.Tensor": "_dynamic:index",
    "index_put_": "_dynamic:index_put_",
    "_index_put_impl_": "_dynamic:_index_put_impl_",
    "index_put": "_dynamic:index_put",
    # Batch norm with its running statistics (`_norms`).
    "native_batch_norm": "_norms:native_batch_norm",
    "_native_batch_norm_legit": "_norms:_native_batch_norm_legit",
    "_batch_norm_with_update": "_norms:_batch_norm_with_update",
    "_batch_norm_no_update": "_norms:_batch_norm_no_update",
    # The fused optimizers (`_optim`).
    "_fused_adam_": "_optim:_fused_adam_",
    "_fused_adam_.tensor_lr": "_optim:_fused_adam_",
    "_fused_adamw_": "_optim:_fused_adamw_",
    "_fused_adamw_.tensor_lr": "_optim:_fused_adamw_",
    "_fused_sgd_": "_optim:_fused_sgd_",
    "_fused_sgd_.tensor_lr": "_optim:_fused_sgd_",
    # nn.MultiheadAttention's and TransformerEncoderLayer's fast paths (`_attention`).
    "_native_multi_head_attention": "_attention:_native_multi_head_attention",
    "_transformer_encoder_layer_fwd": "_attention:_transformer_encoder_layer_fwd",
}


def resolve(name: str):
    """The kernel function of op `name`, its module imported now."""
    module, function = KERNELS[name].split(":")
    return getattr(importlib.import_module(f"torchtpu.device.{module}"), function)
