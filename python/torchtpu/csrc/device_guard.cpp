// The native device guard of the `tpu` device (PyTorch's PrivateUse1 backend), built ahead of
// time by scripts/setup.sh into torchtpu/_device_shim*.so (python/setup_shim.py).
//
// PyTorch's Python-backend guard (torch._C._acc.DeviceGuard) pins every device to index 0 and
// reports one device, and autograd sizes its per-device ready queues from that count, so tensors
// on tpu:1 need a guard of their own. This one only keeps state: the current device per thread,
// the device count (set from Python, the PJRT plugin's addressable devices), the current stream
// per thread and device, and events. Whatever needs the device itself (waiting for its work) is
// a Python callback, the same `torch.tpu.synchronize` everything else uses.
//
// It also holds the device's PrivateUse1 hooks (`TpuHooks`): PyTorch's Python hooks object
// cannot implement `resizePrivateUse1Bytes`, which `UntypedStorage.resize_` calls (FSDP2 frees
// and restores its unsharded parameters with it). The resize itself is Python's
// (`torchtpu.device._storage.resize_storage`): the C++ side only hands it the storage.

#include <torch/extension.h>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Storage.h>

#include <atomic>
#include <mutex>
#include <unordered_set>
#include <chrono>
#include <vector>

namespace {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// Devices of the process; unknown (-1) until Python sets it, and then asked of `count_hook`.
std::atomic<c10::DeviceIndex> device_count{-1};
// The device of threads that never chose one (torchrun's LOCAL_RANK, `torch.tpu.set_device` is
// per thread as on CUDA).
std::atomic<c10::DeviceIndex> default_device{0};
thread_local c10::DeviceIndex current = -1;
// Stream ids handed out by getNewStream; 0 is every device's default stream.
std::atomic<c10::StreamId> next_stream{1};
thread_local std::vector<c10::StreamId> current_streams;

// Python callables: `count_hook()` -> int, `sync_hook(device)` and
// `resize_hook(storage, nbytes)`, set by torchtpu.device.
PyObject* count_hook = nullptr;
PyObject* sync_hook = nullptr;
PyObject* resize_hook = nullptr;
// `memory_hook(kind, device)`: kind "counters" -> (live, peak, allocations, frees,
// bytes_allocated, bytes_freed); "info" -> (free, total); "reset_peak", "reset_accumulated".
PyObject* memory_hook = nullptr;

c10::DeviceIndex count() noexcept {
  c10::DeviceIndex n = device_count.load();
  if (n >= 0 || count_hook == nullptr || !Py_IsInitialized()) {
    return n < 0 ? 1 : n;
  }
  // Asked before Python said (autograd's first backward): ask it now. deviceCount must not
  // raise, so a failure reports no devices beyond the first.
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* r = PyObject_CallNoArgs(count_hook);
  if (r != nullptr) {
    long v = PyLong_AsLong(r);
    Py_DECREF(r);
    if (v > 0 && v < 32768) {
      device_count.store(static_cast<c10::DeviceIndex>(v));
    }
  }
  PyErr_Clear();
  PyGILState_Release(gil);
  n = device_count.load();
  return n < 0 ? 1 : n;
}

c10::DeviceIndex current_index() {
  return current >= 0 ? current : default_device.load();
}

void check_index(c10::DeviceIndex index) {
  c10::DeviceIndex n = count();
  TORCH_CHECK(
      index >= 0 && index < n,
      "torchtpu: invalid device tpu:", static_cast<int>(index), ": this process has ", static_cast<int>(n),
      " tpu device", n == 1 ? "" : "s");
}

// Waits for the device's enqueued work, through Python (torch.tpu.synchronize); a Python error
// propagates as itself.
void wait_for(c10::DeviceIndex index) {
  if (sync_hook == nullptr) {
    return;
  }
  pybind11::gil_scoped_acquire gil;
  PyObject* r = PyObject_CallFunction(sync_hook, "i", static_cast<int>(index));
  if (r == nullptr) {
    throw python_error();
  }
  Py_DECREF(r);
}

struct EventState {
  bool recorded = false;
  bool timing = false;
  c10::DeviceIndex device = -1;
  std::chrono::steady_clock::time_point at;
};

struct TpuGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kTpu;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() >= 0 && d.index() != old.index()) {
      setDevice(d);
    }
    return old;
  }

  c10::Device getDevice() const override {
    return c10::Device(kTpu, current_index());
  }

  void setDevice(c10::Device d) const override {
    if (d.index() < 0) {
      return;  // "the current device": nothing to change
    }
    check_index(d.index());
    current = d.index();
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) {
      current = d.index();
    }
  }

  static c10::StreamId& slot(c10::DeviceIndex index) {
    if (current_streams.size() <= static_cast<size_t>(index)) {
      current_streams.resize(static_cast<size_t>(index) + 1, 0);
    }
    return current_streams[static_cast<size_t>(index)];
  }

  static c10::DeviceIndex resolve(c10::Device d) {
    return d.index() >= 0 ? d.index() : current_index();
  }

  c10::Stream getStream(c10::Device d) const override {
    c10::DeviceIndex index = resolve(d);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, index), slot(index));
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, resolve(d)), 0);
  }

  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, resolve(d)), next_stream.fetch_add(1));
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return getNewStream(d, 0);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::DeviceIndex index = s.device_index() >= 0 ? s.device_index() : current_index();
    c10::StreamId& id = slot(index);
    c10::Stream old(c10::Stream::UNSAFE, c10::Device(kTpu, index), id);
    id = s.id();
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return count();
  }

  // Events. The engine runs a device's programs in the order they are issued and PJRT orders
  // each execution after the producers of its inputs, so a stream is an ordering-only name:
  // waiting on an event or a stream adds no order that is not there already.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index, const c10::EventFlag flag)
      const override {
    TORCH_CHECK(
        device_index < 0 || device_index == stream.device_index(), "torchtpu: an event of tpu:",
        static_cast<int>(device_index), " recorded on a stream of tpu:", static_cast<int>(stream.device_index()));
    auto* state = static_cast<EventState*>(*event);
    if (state == nullptr) {
      state = new EventState();
      state->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = state;
    }
    state->device = stream.device_index();
    if (state->timing) {
      // A timing event's time is when the work before it is done: waited for here (free on a
      // synchronous plugin, where it is done already).
      wait_for(state->device);
    }
    state->at = std::chrono::steady_clock::now();
    state->recorded = true;
  }

  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}

  bool queryEvent(void* event) const override {
    auto* state = static_cast<EventState*>(event);
    if (state != nullptr && state->recorded) {
      wait_for(state->device);
    }
    return true;
  }

  void synchronizeEvent(void* event) const override {
    queryEvent(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<EventState*>(event);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    auto* a = static_cast<EventState*>(start);
    auto* b = static_cast<EventState*>(end);
    TORCH_CHECK(a != nullptr && b != nullptr && a->recorded && b->recorded,
                "torchtpu: both events must be recorded before elapsed_time");
    TORCH_CHECK(a->timing && b->timing, "torchtpu: both events must be created with enable_timing=True");
    return std::chrono::duration<double, std::milli>(b->at - a->at).count();
  }

  bool queryStream(const c10::Stream& s) const override {
    wait_for(s.device_index());
    return true;
  }

  void synchronizeStream(const c10::Stream& s) const override {
    wait_for(s.device_index());
  }

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    wait_for(index);
  }
};

TpuGuard* the_guard = nullptr;

void set_hook(PyObject*& hook, const pybind11::object& f) {
  PyObject* old = hook;
  hook = f.is_none() ? nullptr : f.inc_ref().ptr();
  Py_XDECREF(old);
}

// A tpu storage's address: unique while it lives, high in the 64-bit space, far from anything the
// host allocates, and never reused, so that ranges never overlap (a dead storage's range stays
// dead), as a CUDA pointer is. Never dereferenced: the data is a device buffer beside the
// storage (torchtpu/device/_storage.py). It must not be null where the storage has bytes:
// PyTorch takes such a storage for an invalid one (`resize_` and `data_ptr` refuse it).
std::atomic<uintptr_t> next_address{0x7A00000000000000ULL};

// The context of a tpu storage's DataPtr: a strong reference to its slot (the Python object
// holding its device buffer, torchtpu/device/_storage.py), so that the native per-op path
// (dispatch.cpp) finds a tensor's data from its storage alone, with no Python lookup.
// Slots let go by threads that do not hold the GIL (autograd's device threads freeing saved
// tensors), released by the interpreter's next pending call: taking the GIL from such a thread
// could block in a destructor, and at exit the interpreter stops a thread that waits for it.
std::mutex orphans_lock;
std::vector<PyObject*> orphans;
bool drain_scheduled = false;

int drain_orphans(void*) {
  std::vector<PyObject*> now;
  {
    std::lock_guard<std::mutex> guard(orphans_lock);
    now.swap(orphans);
    drain_scheduled = false;
  }
  for (PyObject* slot : now) {
    Py_DECREF(slot);
  }
  return 0;
}

void release_slot(void* ctx) {
  PyObject* slot = static_cast<PyObject*>(ctx);
  if (slot == nullptr || !Py_IsInitialized() || _Py_IsFinalizing()) {
    return;  // at exit the interpreter is going: nothing to release
  }
  if (PyGILState_Check()) {
    Py_DECREF(slot);
    return;
  }
  std::lock_guard<std::mutex> guard(orphans_lock);
  orphans.push_back(slot);
  if (!drain_scheduled && Py_AddPendingCall(&drain_orphans, nullptr) == 0) {
    drain_scheduled = true;
  }
}

c10::DataPtr new_address(size_t nbytes, c10::Device where, PyObject* slot) {
  uintptr_t span = (std::max<size_t>(nbytes, 1) + 4095) / 4096 * 4096;
  return c10::DataPtr(reinterpret_cast<void*>(next_address.fetch_add(span)), slot, &release_slot, where);
}

}  // namespace

namespace torchtpu {

void check_device_index(c10::DeviceIndex index) {
  check_index(index);
}

c10::DeviceIndex current_device_index() {
  return current_index();
}

PyObject* storage_slot(const c10::Storage& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  return ptr.get_deleter() == &release_slot ? static_cast<PyObject*>(ptr.get_context()) : nullptr;
}

// A tensor of `shape` and `dtype` on tpu:`device` whose storage has the tensor's byte count and
// an address of its own but no host bytes: its data is the device buffer of `slot` (a new
// reference the storage keeps).
at::Tensor tensor_with_slot(const int64_t* shape, size_t ndim, c10::ScalarType dtype, c10::DeviceIndex device,
                            PyObject* slot) {
  c10::Device where(kTpu, device);
  std::vector<int64_t> strides(ndim);
  int64_t step = 1;
  int64_t numel = 1;
  for (size_t i = ndim; i-- > 0;) {
    strides[i] = step;
    step *= std::max<int64_t>(shape[i], 1);
    numel *= shape[i];
  }
  size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t{}, 0, c10::GetAllocator(c10::kMeta), /*resizable=*/true);
  storage.set_data_ptr_noswap(new_address(nbytes, where, slot));
  storage.set_nbytes(nbytes);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(c10::IntArrayRef(shape, ndim), strides);
  return t;
}

}  // namespace torchtpu

namespace {

at::Tensor create_empty_tensor(const std::vector<int64_t>& shape, c10::ScalarType dtype, c10::DeviceIndex device,
                               const pybind11::object& slot) {
  check_index(device);
  PyObject* ref = slot.ptr();
  Py_INCREF(ref);
  return torchtpu::tensor_with_slot(shape.data(), shape.size(), dtype, device, ref);
}

// Calls `memory_hook(kind, device)` and returns its result as `n` size_t values (none for a
// hook that returns None); a Python error propagates as itself.
std::vector<size_t> call_memory_hook(const char* kind, c10::DeviceIndex device, size_t n) {
  TORCH_CHECK(memory_hook != nullptr, "torchtpu: tpu memory statistics are not available before the tpu device registers");
  check_index(device);
  pybind11::gil_scoped_acquire gil;
  PyObject* r = PyObject_CallFunction(memory_hook, "si", kind, static_cast<int>(device));
  if (r == nullptr) {
    throw python_error();
  }
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_GetItem(r, static_cast<Py_ssize_t>(i));
    if (item == nullptr) {
      Py_DECREF(r);
      throw python_error();
    }
    out.push_back(PyLong_AsSize_t(item));
    Py_DECREF(item);
  }
  Py_DECREF(r);
  if (PyErr_Occurred()) {
    throw python_error();
  }
  return out;
}

// The device's allocator, registered so that PyTorch's device-generic memory API
// (`torch.accelerator.memory_allocated`, `memory_stats`, `get_memory_info`, `empty_cache`, which
// insist on a `c10::DeviceAllocator`) answers for tpu. torchtpu's memory is its PJRT buffers,
// counted where they are made and freed (Rust, `DeviceBuffer`); the statistics come from there.
// An allocation is what `create_empty_tensor` gives a storage: an address, no host bytes. There
// is no cache between torchtpu and PJRT (a buffer is freed when its last tensor dies), so
// reserved bytes equal allocated bytes and `emptyCache` has nothing to release.
struct TpuAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return new_address(nbytes, c10::Device(kTpu, current_index()), nullptr);
  }

  void copy_data(void* /*dest*/, const void* /*src*/, std::size_t /*count*/) const override {
    TORCH_CHECK(false, "torchtpu: tpu storages hold no host bytes to copy (copy the tensors instead)");
  }

  bool initialized() override {
    return memory_hook != nullptr;
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}

  // Buffers are freed when their tensors die, after the work that reads them (PJRT orders
  // them): nothing to record.
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::vector<size_t> c = call_memory_hook("counters", device, 6);
    auto as_i64 = [](size_t v) { return static_cast<int64_t>(v); };
    c10::CachingDeviceAllocator::DeviceStats stats;
    constexpr size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    for (auto* bytes : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      c10::CachingAllocator::Stat& s = (*bytes)[all];
      s.current = as_i64(c[0]);
      s.peak = as_i64(c[1]);
      s.allocated = as_i64(c[4]);
      s.freed = as_i64(c[5]);
    }
    // Counts of buffers: the peak count is not tracked (only the peak bytes), so it reads as
    // the current count.
    for (auto* counts : {&stats.allocation, &stats.segment, &stats.active}) {
      c10::CachingAllocator::Stat& s = (*counts)[all];
      s.current = as_i64(c[2] - c[3]);
      s.peak = s.current;
      s.allocated = as_i64(c[2]);
      s.freed = as_i64(c[3]);
    }
    stats.num_device_alloc = as_i64(c[2]);
    stats.num_device_free = as_i64(c[3]);
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    call_memory_hook("reset_accumulated", device, 0);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    call_memory_hook("reset_peak", device, 0);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    std::vector<size_t> info = call_memory_hook("info", device, 2);
    return {info[0], info[1]};
  }
};

TpuAllocator the_allocator;

// "Pinned" host memory: PJRT's host-to-device transfer reads ordinary host memory, so page
// locking buys nothing here, but PyTorch code asks for pinned staging buffers and checks that it
// got them (DDP's reducer asserts `is_pinned()` on the buffer it copies its used-parameter map
// through, `find_unused_parameters=True`, HF Trainer's default). This allocator hands out CPU
// allocator memory and remembers which pointers it made, so `is_pinned()` is true exactly for
// the memory `pin_memory()` and `pin_memory=True` made.
struct PinnedHostAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(mutex);
      pinned.insert(data);
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static bool holds(const void* data) {
    std::lock_guard<std::mutex> lock(mutex);
    return pinned.count(data) != 0;
  }

 private:
  static void release(void* data) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      pinned.erase(data);
    }
    c10::free_cpu(data);
  }

  static std::mutex mutex;
  static std::unordered_set<const void*> pinned;
};

std::mutex PinnedHostAllocator::mutex;
std::unordered_set<const void*> PinnedHostAllocator::pinned;
PinnedHostAllocator the_pinned_allocator;

// The hooks PyTorch asks of a PrivateUse1 backend. Every answer but the resize is what PyTorch's
// Python hooks (torch._C._acc.PrivateUse1Hooks with torchtpu's is_built/is_available/
// has_primary_context returning True) gave: the default generator and getDeviceFromPtr keep the
// base class's "not implemented" (torchtpu's generator is its own, `_random.py`), a new
// generator is refused with a message that names what to use. Pinned memory is host memory
// the pinned allocator remembers (above).
struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return true;
  }

  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override {
    return true;
  }

  // `torch.Generator(device="tpu")`: the device has one generator per process, its state in
  // device memory (torchtpu/device/_random.py); a generator object of the user's own is not
  // supported, and this says what to use instead of PyTorch's "implement getNewGenerator".
  at::Generator getNewGenerator(c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK_NOT_IMPLEMENTED(
        false,
        "torchtpu: torch.Generator(device='tpu') is not supported: the tpu device has one generator per process. "
        "Seed it with torch.manual_seed(s) or torch.tpu.manual_seed(s) (torch.random.fork_rng and "
        "torch.tpu.get_rng_state/set_rng_state save and restore it), or draw with a CPU generator and move the "
        "result with .to('tpu')");
  }

  // `pin_memory()` where tpu is the accelerator (a DataLoader's default, HF Trainer's
  // `dataloader_pin_memory=True`, DDP's staging buffers): `PinnedHostAllocator` above.
  at::Allocator* getPinnedMemoryAllocator() const override {
    return &the_pinned_allocator;
  }

  bool isPinnedPtr(const void* data) const override {
    return PinnedHostAllocator::holds(data);
  }

  // `UntypedStorage.resize_(new_bytes)`: Python replaces the storage's device data (its slot),
  // then the storage's byte count follows; a grown storage moves to a new address range, as a
  // reallocation does. A Python error (a size that is not whole elements) propagates as itself.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    TORCH_CHECK(resize_hook != nullptr, "torchtpu: tpu storages cannot be resized before the tpu device registers");
    {
      pybind11::gil_scoped_acquire gil;
      PyObject* py_storage = THPStorage_Wrap(storage);  // the storage's own Python object
      if (py_storage == nullptr) {
        throw python_error();
      }
      PyObject* r = PyObject_CallFunction(resize_hook, "On", py_storage, static_cast<Py_ssize_t>(new_bytes));
      Py_DECREF(py_storage);
      if (r == nullptr) {
        throw python_error();
      }
      Py_DECREF(r);
    }
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    if (new_bytes > impl->nbytes()) {
      // A new address range; the slot moves to it with the storage.
      void* slot = impl->mutable_data_ptr().release_context();
      impl->set_data_ptr_noswap(new_address(new_bytes, storage.device(), static_cast<PyObject*>(slot)));
    }
    impl->set_nbytes(new_bytes);
  }
};

TpuHooks* the_hooks = nullptr;

// Registers the hooks for PrivateUse1; false if others are registered already (then ours are
// not). Before PyTorch's Python hooks, whose registration then returns False.
bool register_hooks() {
  if (at::isPrivateUse1HooksRegistered()) {
    return &at::detail::getPrivateUse1Hooks() == the_hooks;
  }
  the_hooks = new TpuHooks();  // leaked on purpose: PyTorch keeps the pointer for the process
  at::RegisterPrivateUse1HooksInterface(the_hooks);
  return true;
}

// Makes `the_allocator` PrivateUse1's allocator (over PyTorch's Python backend's, which is not
// a DeviceAllocator); false if a caller registered one with a higher priority.
bool register_allocator() {
  c10::SetAllocator(kTpu, &the_allocator, /*priority=*/1);
  return c10::GetAllocator(kTpu) == &the_allocator;
}

// Registers the guard for PrivateUse1; false if one is registered already (then ours is not).
bool register_guard() {
  if (c10::impl::hasDeviceGuardImpl(kTpu)) {
    return c10::impl::getDeviceGuardImpl(kTpu) == the_guard;
  }
  the_guard = new TpuGuard();  // leaked on purpose: PyTorch keeps the pointer for the process
  c10::impl::registerDeviceGuard(kTpu, the_guard);
  return true;
}

}  // namespace

bool register_autocast();                  // autocast.cpp
void init_dispatch(pybind11::module& m);      // dispatch.cpp
void init_host_kernels(pybind11::module& m);  // host_kernels.cpp
void init_profiler(pybind11::module& m);      // profiler.cpp

PYBIND11_MODULE(_device_shim, m) {
  m.doc() = "The tpu device's native PrivateUse1 device guard and hooks (torchtpu.device).";
  m.def("register", &register_guard);
  m.def("register_hooks", &register_hooks);
  m.def("register_allocator", &register_allocator);
  m.def("register_autocast", &register_autocast);
  m.def("set_device_count", [](int n) {
    TORCH_CHECK(n > 0 && n < 32768, "torchtpu: a device count must be positive, got ", n);
    device_count.store(static_cast<c10::DeviceIndex>(n));
  });
  m.def("device_count_known", []() { return device_count.load() >= 0; });
  m.def("set_count_hook", [](const pybind11::object& f) { set_hook(count_hook, f); });
  m.def("set_sync_hook", [](const pybind11::object& f) { set_hook(sync_hook, f); });
  m.def("set_resize_hook", [](const pybind11::object& f) { set_hook(resize_hook, f); });
  m.def("set_memory_hook", [](const pybind11::object& f) { set_hook(memory_hook, f); });
  m.def("set_default_device", [](int index) {
    check_index(static_cast<c10::DeviceIndex>(index));
    default_device.store(static_cast<c10::DeviceIndex>(index));
  });
  m.def("current_device", []() { return static_cast<int>(current_index()); });
  m.def("set_device", [](int index) {
    check_index(static_cast<c10::DeviceIndex>(index));
    current = static_cast<c10::DeviceIndex>(index);
  });
  m.def("create_empty_tensor", &create_empty_tensor);
  init_dispatch(m);
  init_host_kernels(m);
  init_profiler(m);
}
