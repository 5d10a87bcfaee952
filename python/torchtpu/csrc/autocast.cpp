// Autocast for the `tpu` device (PyTorch's AutocastPrivateUse1 key), registered by
// `torchtpu.device` when the device registers (`_device_shim.register_autocast`).
//
// PyTorch registers its cast policies only for its own backends; a PrivateUse1 backend gets no
// kernel at all for AutocastPrivateUse1, so `torch.autocast("tpu")` failed on the first op. The
// policies here are CUDA's: the op lists come from the installed torch's
// ATen/autocast_mode.h (the same lists CUDA's registration expands), so they follow that torch.
// The casts run above the tpu kernels, so every eager mode and torch.compile (whose fake tensors
// carry the same key) see the same lower-precision graph.

#include <torch/extension.h>

#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <memory>

namespace {

// CUDA refuses binary_cross_entropy under autocast (unsafe in float16); so does tpu.
at::Tensor binary_cross_entropy_banned(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torchtpu: binary_cross_entropy (nn.BCELoss) is not autocast on tpu, as on CUDA: its input is a "
      "probability that loses too much in low precision. Pass logits to "
      "binary_cross_entropy_with_logits (nn.BCEWithLogitsLoss), which autocast runs in float32.");
}

std::unique_ptr<torch::Library> fallthrough_library;
std::unique_ptr<torch::Library> policy_library;

}  // namespace

// Registers the fallthrough (ops outside the lists run unchanged) and CUDA's policies for
// AutocastPrivateUse1; idempotent.
bool register_autocast() {
  if (policy_library) {
    return true;
  }
  fallthrough_library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  fallthrough_library->fallback(torch::CppFunction::makeFallthrough());

  policy_library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  torch::Library& m = *policy_library;  // the name the header's KERNEL macros register on
  // The header's signatures name ATen's types unqualified (CUDA registers inside namespace at).
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;

#define TPU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

  AT_FORALL_LOWER_PRECISION_FP(TPU_LOWER_PRECISION_FP)
  AT_FORALL_FP32(TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_PROMOTE)

#undef TPU_LOWER_PRECISION_FP
#undef TPU_FP32
#undef TPU_FP32_SET_OPT_DTYPE
#undef TPU_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
  return true;
}
