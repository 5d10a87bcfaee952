// ATen's CPU kernels for XLA programs on the host platform: the runtime's typed-FFI handler
// for `torchtpu_aten_matmul_*` reads XLA's call frame and calls `matmul` here through the table
// `host_kernel_api()` hands to torchtpu._C. XLA's buffers are wrapped as tensors without a
// copy and the result is written into XLA's result buffer (docs/performance.md, "Host kernels").
#include <ATen/ATen.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <torch/extension.h>

#include <dlfcn.h>

#include <cstdio>
#include <exception>

#include "host_kernel_api.h"

namespace {

// The thread-count settings of the OpenMP runtime torch loaded and of the MKL linked into it
// (`mkl_set_num_threads_local` of mkl.h is `MKL_Set_Num_Threads_Local`), found at run time:
// a torch built without either has none to set.
template <typename F>
F symbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}
const auto omp_get_threads = symbol<int (*)()>("omp_get_max_threads");
const auto omp_set_threads = symbol<void (*)(int)>("omp_set_num_threads");
const auto mkl_set_threads_local = symbol<int (*)(int)>("MKL_Set_Num_Threads_Local");

using torchtpu::HostTensor;

// ATen's kernels inside an XLA program run on the calling thread alone. With ATen's OpenMP
// team on, its worker and XLA's Eigen pool, each spin-waiting between their parallel loops,
// take turns at the cores: measured on 2 cores, the quickstart transformer with every matmul
// in ATen's GEMM took 2.4 ms a call against XLA's 1.36 ms, while each product alone was
// faster. The choice between kernels is measured this way too.
class SingleThreaded {
 public:
  SingleThreaded() {
    if (omp_get_threads && omp_set_threads) {
      omp_ = omp_get_threads();
      omp_set_threads(1);
    }
    if (mkl_set_threads_local) {
      mkl_ = mkl_set_threads_local(1);
    }
  }
  ~SingleThreaded() {
    if (omp_ > 0) {
      omp_set_threads(omp_);
    }
    if (mkl_set_threads_local) {
      mkl_set_threads_local(mkl_);
    }
  }

 private:
  int omp_ = 0;
  int mkl_ = 0;  // 0: the global setting
};

c10::ScalarType scalar_type(int32_t dtype) {
  switch (dtype) {
    case torchtpu::kHostF32:
      return c10::ScalarType::Float;
    case torchtpu::kHostF64:
      return c10::ScalarType::Double;
    case torchtpu::kHostBF16:
      return c10::ScalarType::BFloat16;
    case torchtpu::kHostF16:
      return c10::ScalarType::Half;
    default:
      TORCH_CHECK(false, "torchtpu host kernel: unknown dtype code ", dtype);
  }
}

at::Tensor wrap(const HostTensor& t) {
  TORCH_CHECK(t.rank >= 0 && (t.rank == 0 || t.dims != nullptr), "torchtpu host kernel: malformed buffer");
  auto options = at::TensorOptions().dtype(scalar_type(t.dtype)).device(at::kCPU);
  return at::from_blob(t.data, at::IntArrayRef(t.dims, static_cast<size_t>(t.rank)), options);
}

int32_t matmul(uint32_t flags, const HostTensor* a, const HostTensor* b, const HostTensor* out, char* error,
               size_t error_size) {
  try {
    TORCH_CHECK(a && b && out, "torchtpu host kernel: null operand");
    // Inside an XLA program: no autograd, and none of the calling thread's modes (a Python
    // dispatch mode, functorch, autocast, functionalization) sees ATen's internal calls.
    c10::InferenceMode guard;
    SingleThreaded one_thread;
    c10::impl::ExcludeDispatchKeyGuard no_modes(c10::DispatchKeySet({
        c10::DispatchKey::Python,
        c10::DispatchKey::PythonTLSSnapshot,
        c10::DispatchKey::PythonDispatcher,
        c10::DispatchKey::PreDispatch,
        c10::DispatchKey::Functionalize,
        c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
        c10::DispatchKey::FuncTorchDynamicLayerBackMode,
        c10::DispatchKey::AutocastCPU,
    }));
    at::Tensor x = wrap(*a), y = wrap(*b), result = wrap(*out);
    if (flags & torchtpu::kTransposeA) {
      x = x.transpose(-1, -2);
    }
    if (flags & torchtpu::kTransposeB) {
      y = y.transpose(-1, -2);
    }
    // ATen's CPU kernels themselves (MKL / oneDNN GEMMs), not the dispatcher.
    if (x.dim() == 2) {
      at::cpu::mm_out(result, x, y);
    } else {
      at::cpu::bmm_out(result, x, y);
    }
    TORCH_CHECK(result.data_ptr() == out->data, "torchtpu host kernel: the result moved out of XLA's buffer");
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

const torchtpu::HostKernelApi api{torchtpu::kHostKernelApiVersion, &matmul};

}  // namespace

void init_host_kernels(pybind11::module& m) {
  m.def("host_kernel_api", []() {
    return pybind11::capsule(static_cast<const void*>(&api), "torchtpu._device_shim.host_kernel_api");
  });
}
