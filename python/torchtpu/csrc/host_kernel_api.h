// The ABI between the runtime's XLA FFI handlers (runtime/src/host_kernels/aten.rs, which
// declares the same structs) and ATen's CPU kernels (host_kernels.cpp): XLA's buffers go in as
// pointers and shapes, the kernel writes its result into XLA's result buffer. Bump
// `kHostKernelApiVersion` on both sides with any change.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchtpu {

constexpr uint32_t kHostKernelApiVersion = 1;

enum HostDtype : int32_t {
  kHostF32 = 0,
  kHostF64 = 1,
  kHostBF16 = 2,
  kHostF16 = 3,
};

// One dense row-major buffer of XLA's.
struct HostTensor {
  void* data;
  int32_t dtype;  // HostDtype
  int32_t rank;
  const int64_t* dims;
};

enum MatmulFlag : uint32_t {
  kTransposeA = 1,  // `a` holds A's transpose: A is its last two dims swapped
  kTransposeB = 2,
};

// out = A @ B (rank 2: mm; rank 3: bmm). Returns 0, or non-zero with a message in `error`.
using MatmulFn = int32_t (*)(uint32_t flags, const HostTensor* a, const HostTensor* b, const HostTensor* out,
                             char* error, size_t error_size);

struct HostKernelApi {
  uint32_t version;
  MatmulFn matmul;
};

}  // namespace torchtpu
