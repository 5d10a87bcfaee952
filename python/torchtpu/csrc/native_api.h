// The ABI between the dispatcher shim (dispatch.cpp) and the Rust per-op path
// (python/src/eager/abi.rs, which declares the same structs). The shim turns a boxed call's
// arguments into `ArgRecord`s and asks Rust to run it; Rust answers with `OutRecord`s, the slots
// of the tensors the shim then makes. Bump `kNativeApiVersion` on both sides with any change.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>

namespace torchtpu {

constexpr uint32_t kNativeApiVersion = 6;

enum ArgTag : int32_t {
  kArgNone = 0,
  kArgTensor = 1,     // a tpu tensor: dtype, sizes, strides, offset, flags, slot
  kArgCpuScalar = 2,  // a 0-d CPU tensor: dtype, its value in int_value or float_value
  kArgInt = 3,
  kArgBool = 4,
  kArgFloat = 5,
  kArgEnum = 6,       // a dtype, layout, memory format or device, as an integer
  kArgList = 7,       // int_value elements follow
  kArgOther = 8,      // anything else (CPU tensors, complex numbers): not cached
  kArgString = 9,     // a string (`approximate="tanh"`): int_value bytes at text
};

enum ArgFlag : uint32_t {
  kFlagConj = 1,
  kFlagNeg = 2,
  kFlagWrapped = 4,   // a wrapped number (`x + 1`)
  kFlagOut = 8,       // an out= argument: written, not read
  kFlagFloating = 16, // a CPU scalar whose value is float_value
};

struct ArgRecord {
  int32_t tag;
  int32_t dtype;  // c10::ScalarType
  int32_t ndim;
  uint32_t flags;
  int64_t int_value;
  double float_value;
  const int64_t* sizes;
  const int64_t* strides;
  int64_t offset;
  int32_t device;
  PyObject* slot;    // borrowed: the storage's slot, or null
  const char* text;  // a string's bytes (not NUL-terminated), valid for the call
};

struct OutRecord {
  PyObject* slot;  // a new reference, given to the tensor's storage
  int32_t dtype;
  int32_t ndim;
  int32_t device;
  const int64_t* sizes;  // valid until the next call on this thread
};

enum CallResult : int32_t {
  kHit = 0,    // ran: outs hold n_outs new tensors' slots, written targets are done
  kMiss = 1,   // not cached, a key is pending: run the op in Python, then call `done`
  kSkip = 2,   // not a case the native path takes: run the op in Python
  kError = -1, // a Python exception is set
};

// One schema argument or return, as its annotation says, for `classify`.
struct SchemaParam {
  uint32_t aliased;   // it carries an alias annotation (`Tensor(a)`, `Tensor(a)[]`)
  const char* alias;  // its alias set before the call ("a"; several joined by '|'), or "": NUL-terminated
  uint32_t writes;
  uint32_t kwarg_only;
};

// An operator's kind (torchtpu_eager::schema::Kind's codes).
enum OpKind : int32_t {
  kKindView = 0,
  kKindFunctional = 1,
  kKindInPlace = 2,
  kKindOut = 3,
  kKindMutating = 4,
};

struct NativeApi {
  uint32_t version;
  // Called with the GIL held. `op` identifies the operator; `name` is its full name.
  int32_t (*call)(uint64_t op, const char* name, const ArgRecord* args, size_t n, OutRecord* outs,
                  size_t max_outs, size_t* n_outs);
  // Ends the pending key of the last `call` that missed (GIL held).
  void (*done)();
  // A new slot holding no buffer yet, for a storage of `sizes` in `dtype` (its torch.dtype and
  // code) on tpu:`device`: a new reference, or null with a Python error set (GIL held).
  PyObject* (*new_slot)(int32_t code, PyObject* dtype, const int64_t* sizes, size_t ndim, int32_t device);
  // `dst.copy_(src)` where it is only a buffer's reuse (tpu to tpu, one device, dtype and shape,
  // both whole): 1 done, 0 not such a copy (run the Python kernel), -1 a Python error (GIL held).
  int32_t (*copy)(const ArgRecord* dst, const ArgRecord* src);
  // Whether the calling thread's mode takes the native path (strict and DeferAndFuse, not
  // debug): 1 or 0. The mode is Rust's (`torchtpu_eager::mode`); the shim keeps no copy.
  int32_t (*takes_native)();
  // Classifies an operator's schema (torchtpu_eager::schema, the one classification): returns its
  // OpKind and fills `arg_flags` (kFlagOut for each out= argument; room for `n_args`) and
  // `return_alias` (per return the argument it is, or -1; room for `n_returns`). No GIL needed.
  int32_t (*classify)(const SchemaParam* args, size_t n_args, const SchemaParam* returns, size_t n_returns,
                      uint32_t* arg_flags, int32_t* return_alias);
};

}  // namespace torchtpu
