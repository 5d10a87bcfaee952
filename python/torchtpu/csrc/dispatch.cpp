// The tpu device's per-op path in native code: the boxed PrivateUse1 fallback and the kernels of
// the ops registered by name (torchtpu/device/_kernels.py) are this file's `native_kernel`.
//
// It only registers and converts. A view runs PyTorch's own Meta kernel on the tpu tensors
// (sizes, strides, offset and the shared storage are PyTorch's). Any other op's arguments become
// `ArgRecord`s (native_api.h) and the Rust per-op path (python/src/eager) keys, looks up and
// launches its program; a miss, or a case Rust does not take, runs the Python path
// (torchtpu.device._dispatch.run), which traces and compiles the program and tells Rust how to run
// it next time.

#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "native_api.h"

namespace torchtpu {
// device_guard.cpp
void check_device_index(c10::DeviceIndex index);
c10::DeviceIndex current_device_index();
PyObject* storage_slot(const c10::Storage& storage);
at::Tensor tensor_with_slot(const int64_t* shape, size_t ndim, c10::ScalarType dtype, c10::DeviceIndex device,
                            PyObject* slot);
}  // namespace torchtpu

namespace {

using torchtpu::ArgRecord;
using torchtpu::OutRecord;

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

const torchtpu::NativeApi* api = nullptr;  // set once the device code loads (`install`)
PyObject* python_kernel = nullptr;          // `kernel(op, *args, **kwargs)`: the Python path
// Whether the calling thread's mode takes the native path: Rust's answer (the mode's one copy).
bool native_on() {
  return api != nullptr && api->takes_native() != 0;
}
std::atomic<uint64_t> native_ops{0};        // ops the native path ran (views included)

// What an operator's schema says, read once per operator: its kind is Rust's classification
// (`api->classify`, torchtpu_eager::schema); this file only converts the schema for it.
struct OpShape {
  bool view = false;                  // returns alias an argument, nothing is written
  std::string name;                   // "aten::add.Tensor"
  std::vector<uint32_t> arg_flags;    // kFlagOut for out= arguments
  std::vector<int32_t> return_alias;  // per return: the argument it is, or -1 (a new tensor)
  bool list_return = false;           // one Tensor[] return: every new tensor, as a list
};

std::mutex shapes_lock;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpShape>> shapes;

// An argument's or return's alias set before the call, as `classify` reads it: "" for none.
std::string alias_set(const c10::AliasInfo* alias) {
  if (alias == nullptr) {
    return "";
  }
  std::vector<std::string> names;
  for (const c10::Symbol& s : alias->beforeSets()) {
    names.push_back(s.toUnqualString());
  }
  std::sort(names.begin(), names.end());
  std::string joined;
  for (const std::string& n : names) {
    joined += (joined.empty() ? "" : "|") + n;
  }
  return joined;
}

// Needs `api` (installed): callers check it first.
const OpShape& shape_of(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* schema = &op.schema();
  std::lock_guard<std::mutex> guard(shapes_lock);
  auto found = shapes.find(schema);
  if (found != shapes.end()) {
    return *found->second;
  }
  auto s = std::make_unique<OpShape>();
  const auto& args = schema->arguments();
  const auto& rets = schema->returns();
  s->name = schema->operator_name().name;
  if (!schema->overload_name().empty()) {
    s->name += "." + schema->overload_name();
  }
  // The strings outlive the call: `params` points into them.
  std::vector<std::string> aliases;
  aliases.reserve(args.size() + rets.size());
  std::vector<torchtpu::SchemaParam> params;
  params.reserve(args.size() + rets.size());
  auto add = [&](const c10::Argument& a) {
    const c10::AliasInfo* alias = a.alias_info();
    aliases.push_back(alias_set(alias));
    params.push_back({static_cast<uint32_t>(alias != nullptr), aliases.back().c_str(),
                      static_cast<uint32_t>(alias != nullptr && alias->isWrite()),
                      static_cast<uint32_t>(a.kwarg_only())});
  };
  for (const auto& a : args) {
    add(a);
  }
  for (const auto& r : rets) {
    add(r);
  }
  s->arg_flags.resize(args.size(), 0);
  s->return_alias.resize(rets.size(), -1);
  int32_t kind = api->classify(params.data(), args.size(), params.data() + args.size(), rets.size(),
                               s->arg_flags.data(), s->return_alias.data());
  s->view = kind == torchtpu::kKindView;
  s->list_return = rets.size() == 1 && rets[0].type()->kind() == c10::TypeKind::ListType;
  return *shapes.emplace(schema, std::move(s)).first->second;
}

// ---------------------------------------------------------------- the Python path

// An argument as the Python kernel takes it (a dtype as torch.dtype, not its integer).
pybind11::object to_python(const c10::Argument& arg, const c10::IValue& v) {
  if (v.isNone()) {
    return pybind11::none();
  }
  auto is = [&](c10::TypeKind kind) {
    const auto& t = arg.real_type();
    if (t->kind() == kind) {
      return true;
    }
    auto optional = t->cast<c10::OptionalType>();
    return optional != nullptr && optional->getElementType()->kind() == kind;
  };
  if (is(c10::TypeKind::ScalarTypeType)) {
    return pybind11::reinterpret_borrow<pybind11::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(v.toInt()))));
  }
  if (is(c10::TypeKind::LayoutType)) {
    return pybind11::reinterpret_borrow<pybind11::object>(
        reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt()))));
  }
  if (is(c10::TypeKind::MemoryFormatType)) {
    return pybind11::reinterpret_steal<pybind11::object>(
        torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt())));
  }
  return torch::jit::toPyObject(v);
}

bool is_default(const c10::Argument& arg, const c10::IValue& v) {
  return arg.default_value().has_value() && *arg.default_value() == v;
}

// Runs the op through a Python kernel, as PyTorch calls its own Python kernels: the op first
// where `with_op` (the fallback's signature), positional arguments up to the trailing defaults,
// keyword-only ones that are not their default. GIL held.
void call_kernel(PyObject* kernel, bool with_op, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK(kernel != nullptr, "torchtpu: the tpu device's kernels are not registered");
  const auto& schema = op.schema();
  const auto& params = schema.arguments();
  std::vector<c10::IValue> args = torch::jit::pop(*stack, params.size());
  size_t kwarg_start = params.size();
  while (kwarg_start > 0 && params[kwarg_start - 1].kwarg_only()) {
    --kwarg_start;
  }
  size_t positional = kwarg_start;
  while (positional > 0 && is_default(params[positional - 1], args[positional - 1])) {
    --positional;
  }
  const size_t first = with_op ? 1 : 0;
  pybind11::tuple py_args(positional + first);
  if (with_op) {
    py_args[0] = torch::detail::getTorchApiFunction(op);
  }
  for (size_t i = 0; i < positional; ++i) {
    py_args[i + first] = to_python(params[i], args[i]);
  }
  pybind11::dict kwargs;
  for (size_t i = kwarg_start; i < params.size(); ++i) {
    if (!is_default(params[i], args[i])) {
      kwargs[pybind11::str(params[i].name())] = to_python(params[i], args[i]);
    }
  }
  PyObject* out = PyObject_Call(kernel, py_args.ptr(), kwargs.ptr());
  if (out == nullptr) {
    throw python_error();
  }
  pybind11::object result = pybind11::reinterpret_steal<pybind11::object>(out);
  const auto& rets = schema.returns();
  if (rets.empty()) {
    return;
  }
  if (rets.size() == 1) {
    torch::jit::push(stack, torch::jit::toIValue(result, rets[0].real_type()));
    return;
  }
  pybind11::sequence seq = result.cast<pybind11::sequence>();
  TORCH_CHECK(seq.size() == rets.size(), "torchtpu: ", schema.name(), " returned ", seq.size(), " values, not ",
              rets.size());
  for (size_t i = 0; i < rets.size(); ++i) {
    torch::jit::push(stack, torch::jit::toIValue(seq[i], rets[i].real_type()));
  }
}

// The Python path of every op but `empty`: torchtpu.device._fallback(op, *args, **kwargs).
void call_python(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  call_kernel(python_kernel, true, op, stack);
}

// ---------------------------------------------------------------- the native path

void record_tensor(const at::Tensor& t, uint32_t flags, std::vector<ArgRecord>& out) {
  ArgRecord r{};
  r.flags = flags;
  if (!t.defined()) {
    r.tag = torchtpu::kArgNone;
  } else if (t.device().type() == kTpu) {
    r.tag = torchtpu::kArgTensor;
    r.dtype = static_cast<int32_t>(t.scalar_type());
    r.ndim = static_cast<int32_t>(t.dim());
    r.sizes = t.sizes().data();
    r.strides = t.strides().data();
    r.offset = t.storage_offset();
    r.device = t.device().index();
    r.flags |= (t.is_conj() ? torchtpu::kFlagConj : 0) | (t.is_neg() ? torchtpu::kFlagNeg : 0);
    r.slot = torchtpu::storage_slot(t.storage());
  } else if (t.device().is_cpu() && t.dim() == 0 && !t.is_complex() && t.layout() == c10::kStrided) {
    r.tag = torchtpu::kArgCpuScalar;
    r.dtype = static_cast<int32_t>(t.scalar_type());
    r.flags |= t.unsafeGetTensorImpl()->is_wrapped_number() ? torchtpu::kFlagWrapped : 0;
    c10::Scalar v = t.item();
    if (v.isFloatingPoint()) {
      r.flags |= torchtpu::kFlagFloating;
      r.float_value = v.toDouble();
    } else {
      r.int_value = v.toLong();
    }
  } else {
    r.tag = torchtpu::kArgOther;
  }
  out.push_back(r);
}

void record(const c10::IValue& v, uint32_t flags, std::vector<ArgRecord>& out) {
  ArgRecord r{};
  r.flags = flags;
  if (v.isTensor()) {
    record_tensor(v.toTensor(), flags, out);
    return;
  }
  if (v.isNone()) {
    r.tag = torchtpu::kArgNone;
  } else if (v.isBool()) {
    r.tag = torchtpu::kArgBool;
    r.int_value = v.toBool() ? 1 : 0;
  } else if (v.isInt()) {
    r.tag = torchtpu::kArgInt;
    r.int_value = v.toInt();
  } else if (v.isDouble()) {
    r.tag = torchtpu::kArgFloat;
    r.float_value = v.toDouble();
  } else if (v.isDevice()) {
    r.tag = torchtpu::kArgEnum;
    r.int_value = static_cast<int64_t>(v.toDevice().type()) * 65536 + v.toDevice().index();
  } else if (v.isString()) {
    const std::string& text = v.toStringRef();
    r.tag = torchtpu::kArgString;
    r.int_value = static_cast<int64_t>(text.size());
    r.text = text.data();
  } else if (v.isList()) {
    c10::List<c10::IValue> items = v.toList();
    r.tag = torchtpu::kArgList;
    r.int_value = static_cast<int64_t>(items.size());
    out.push_back(r);
    for (const c10::IValue& item : items) {
      record(item, flags, out);
    }
    return;
  } else {
    r.tag = torchtpu::kArgOther;
  }
  out.push_back(r);
}

// Asks Rust to run the op; true if it did (the returns are on the stack). GIL held.
int32_t try_native(const c10::OperatorHandle& op, const OpShape& shape, torch::jit::Stack* stack) {
  thread_local std::vector<ArgRecord> records;
  thread_local std::vector<OutRecord> outs;
  const size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  records.clear();
  for (size_t i = 0; i < n; ++i) {
    record(args[i], shape.arg_flags[i], records);
  }
  outs.resize(std::max<size_t>(records.size() + 16, outs.size()));
  size_t n_outs = 0;
  int32_t r = api->call(reinterpret_cast<uint64_t>(&op.schema()), shape.name.c_str(), records.data(), records.size(),
                        outs.data(), outs.size(), &n_outs);
  if (r == torchtpu::kError) {
    throw python_error();
  }
  if (r != torchtpu::kHit) {
    return r;
  }
  std::vector<at::Tensor> made;
  made.reserve(n_outs);
  for (size_t i = 0; i < n_outs; ++i) {
    const OutRecord& o = outs[i];
    made.push_back(torchtpu::tensor_with_slot(o.sizes, static_cast<size_t>(o.ndim), static_cast<c10::ScalarType>(o.dtype),
                                              static_cast<c10::DeviceIndex>(o.device), o.slot));
  }
  std::vector<c10::IValue> inputs = torch::jit::pop(*stack, n);
  if (shape.list_return && shape.return_alias[0] < 0) {
    torch::jit::push(stack, c10::IValue(made));
    return r;
  }
  size_t next = 0;
  for (int alias : shape.return_alias) {
    if (alias >= 0) {
      torch::jit::push(stack, inputs[static_cast<size_t>(alias)]);
    } else {
      TORCH_CHECK(next < made.size(), "torchtpu: the native path made ", made.size(), " tensors for ", shape.name,
                  " (a bug)");
      torch::jit::push(stack, std::move(made[next++]));
    }
  }
  TORCH_CHECK(next == made.size(), "torchtpu: the native path made ", made.size(), " tensors for ", shape.name,
              ", which returns ", next, " (a bug)");
  return r;
}

// A view: PyTorch's Meta kernel on the tpu tensors themselves computes sizes, strides and offset,
// and the result shares the argument's storage, hence its device data.
void run_view(const c10::OperatorHandle& op, const OpShape& shape, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
  const size_t n = op.schema().returns().size();
  for (const c10::IValue& v : torch::jit::last(*stack, n)) {
    TORCH_CHECK(!v.isTensor() || v.toTensor().device().type() == kTpu, "torchtpu: view op ", shape.name,
                " did not alias its tpu argument");
  }
  native_ops.fetch_add(1, std::memory_order_relaxed);
}

struct DoneOnExit {
  ~DoneOnExit() {
    api->done();
  }
};

// Runs the op through Rust: a hit natively, a miss through the Python path, which teaches Rust
// the recipe (`done` ends the pending key). False where Rust does not take the call. GIL held.
bool run_through_rust(const c10::OperatorHandle& op, const OpShape& shape, torch::jit::Stack* stack) {
  int32_t r = try_native(op, shape, stack);
  if (r == torchtpu::kHit) {
    native_ops.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (r == torchtpu::kMiss) {
    DoneOnExit done;
    call_python(op, stack);
    return true;
  }
  return false;
}

void native_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
  if (api == nullptr) {  // before the device code loads, the Python path takes every op
    pybind11::gil_scoped_acquire gil;
    call_python(op, stack);
    return;
  }
  const OpShape& shape = shape_of(op);
  if (shape.view) {
    run_view(op, shape, stack);
    return;
  }
  pybind11::gil_scoped_acquire gil;
  if (native_on() && run_through_rust(op, shape, stack)) {
    return;
  }
  call_python(op, stack);
}

std::vector<std::unique_ptr<torch::Library>> libraries;

PyObject* python_empty = nullptr;  // the Python `empty.memory_format` kernel: errors, before `install`

bool tpu_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kByte: case c10::kChar: case c10::kShort: case c10::kInt: case c10::kLong: case c10::kHalf:
    case c10::kFloat: case c10::kDouble: case c10::kComplexFloat: case c10::kComplexDouble: case c10::kBool:
    case c10::kBFloat16:
      return true;
    default:
      return false;
  }
}

// `empty.memory_format(size, dtype, layout, device, pin_memory, memory_format)`: a tensor whose
// storage has a slot and no buffer yet (zeros when first read), in every mode. A negative size
// or a dtype tpu lacks takes the Python kernel, which raises eager's error.
void native_empty(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 6);
  std::vector<int64_t> sizes = args[0].toIntVector();
  c10::ScalarType dtype = args[1].isNone() ? c10::typeMetaToScalarType(c10::get_default_dtype()) : args[1].toScalarType();
  bool negative = std::any_of(sizes.begin(), sizes.end(), [](int64_t d) { return d < 0; });
  pybind11::gil_scoped_acquire gil;
  if (api == nullptr || negative || !tpu_dtype(dtype)) {
    call_kernel(python_empty, false, op, stack);
    return;
  }
  c10::DeviceIndex device = torchtpu::current_device_index();
  if (!args[3].isNone() && args[3].toDevice().has_index()) {
    device = args[3].toDevice().index();
  }
  torchtpu::check_device_index(device);
  PyObject* dtype_object = reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype));
  PyObject* slot = api->new_slot(static_cast<int32_t>(dtype), dtype_object, sizes.data(), sizes.size(), device);
  if (slot == nullptr) {
    throw python_error();
  }
  at::Tensor t = torchtpu::tensor_with_slot(sizes.data(), sizes.size(), dtype, device, slot);
  torch::jit::drop(*stack, 6);
  torch::jit::push(stack, std::move(t));
  native_ops.fetch_add(1, std::memory_order_relaxed);
}

PyObject* python_copy = nullptr;  // the Python `copy_` kernel: every copy but a buffer's reuse

// `copy_(self, src, non_blocking)`: a copy between two whole tpu tensors of one dtype, shape and
// device is the source buffer's reuse (buffers are immutable), natively in every mode. In strict
// mode any other copy on one device (a view, a cast, a broadcast) is an in-place op like the
// others: its cached program runs natively, and a miss runs the fallback's Python path, which
// teaches Rust. The rest (across devices, to and from the host) is the Python kernel's.
void native_copy(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 3);
  pybind11::gil_scoped_acquire gil;
  if (api != nullptr && args[0].isTensor() && args[1].isTensor()) {
    const at::Tensor& dst = args[0].toTensor();
    const at::Tensor& src = args[1].toTensor();
    if (dst.device().type() == kTpu && src.device().type() == kTpu) {
      std::vector<ArgRecord> records;
      record_tensor(dst, 0, records);
      record_tensor(src, 0, records);
      int32_t r = api->copy(&records[0], &records[1]);
      if (r < 0) {
        throw python_error();
      }
      if (r == 1) {
        c10::IValue self = args[0];
        torch::jit::drop(*stack, 3);
        torch::jit::push(stack, std::move(self));
        native_ops.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      if (dst.device() == src.device() && native_on() && run_through_rust(op, shape_of(op), stack)) {
        return;
      }
    }
  }
  call_kernel(python_copy, false, op, stack);
}

using BoxedKernel = void (*)(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack*);

// Registers `kernel` as the tpu kernel of each aten op in `names`, for the process.
template <BoxedKernel kernel>
void register_aten(const std::vector<std::string>& names) {
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                              __LINE__);
  for (const std::string& name : names) {
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<kernel>());
  }
  libraries.push_back(std::move(lib));
}

// Keeps a Python kernel (a strong reference) in `slot`, letting go of the one before.
void keep(PyObject*& slot, const pybind11::object& kernel) {
  Py_XDECREF(slot);
  slot = kernel.inc_ref().ptr();
}

}  // namespace

void init_dispatch(pybind11::module& m) {
  m.def("register_fallback", [](const pybind11::object& kernel) {
    keep(python_kernel, kernel);
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__,
                                                __LINE__);
    lib->fallback(torch::CppFunction::makeFromBoxedFunction<&native_kernel>());
    libraries.push_back(std::move(lib));
  });
  m.def("register_kernels", [](const std::vector<std::string>& names) {
    register_aten<&native_kernel>(names);
    return names.size();
  });
  m.def("register_empty", [](const pybind11::object& kernel) {
    keep(python_empty, kernel);
    register_aten<&native_empty>({"empty.memory_format"});
  });
  m.def("register_copy", [](const pybind11::object& kernel) {
    keep(python_copy, kernel);
    register_aten<&native_copy>({"copy_"});
  });
  m.def("install_native", [](const pybind11::capsule& capsule) {
    auto* table = static_cast<const torchtpu::NativeApi*>(PyCapsule_GetPointer(capsule.ptr(), "torchtpu._C.native_api"));
    if (table == nullptr) {
      throw python_error();
    }
    TORCH_CHECK(table->version == torchtpu::kNativeApiVersion, "torchtpu: torchtpu._C's native API is version ",
                table->version, ", the device shim's ", torchtpu::kNativeApiVersion, "; rebuild both (make setup)");
    capsule.inc_ref();  // the table lives as long as the extension: keep its capsule
    api = table;
  });
  m.def("native_ops", []() { return native_ops.load(); });
  m.def("tensor_slot", [](const at::Tensor& t) -> pybind11::object {
    if (!t.defined() || t.device().type() != kTpu || !t.has_storage()) {
      return pybind11::none();
    }
    PyObject* slot = torchtpu::storage_slot(t.storage());
    return slot == nullptr ? pybind11::none() : pybind11::reinterpret_borrow<pybind11::object>(slot);
  });
  m.def("storage_slot", [](const pybind11::handle& storage) -> pybind11::object {
    TORCH_CHECK(THPStorage_Check(storage.ptr()), "torchtpu: storage_slot takes a storage");
    PyObject* slot = torchtpu::storage_slot(THPStorage_Unpack(storage.ptr()));
    return slot == nullptr ? pybind11::none() : pybind11::reinterpret_borrow<pybind11::object>(slot);
  });
  m.def("scalar_type_code", [](c10::ScalarType t) { return static_cast<int>(t); });
}
