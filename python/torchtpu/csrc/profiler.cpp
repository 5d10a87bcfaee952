// torch.profiler's view of the tpu device: a Kineto activity profiler registered as
// PrivateUse1's (PyTorch's `PrivateUse1ProfilerRegistry`). It records nothing itself: it turns
// Kineto's session calls into the runtime's (profiler_api.h) and each activity the runtime
// recorded into a Kineto activity, linked to the op that launched it.
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/extension.h>

#include <IActivityProfiler.h>
#include <libkineto.h>

#include "profiler_api.h"

namespace {

const torchtpu::ProfilerApi* api = nullptr;

// Kineto's types for the device's activities: the ones PyTorch reads as PrivateUse1's device
// time (kernels, memcpys), which a profile asking for ProfilerActivity.PrivateUse1 gets, and
// as its host runtime (launches, compiles), which a CPU profile gets too, as CUDA's launches.
libkineto::ActivityType kineto_type(uint32_t kind) {
  switch (kind) {
    case torchtpu::kExecute:
      return libkineto::ActivityType::CONCURRENT_KERNEL;
    case torchtpu::kCompile:
    case torchtpu::kLaunch:
      return libkineto::ActivityType::PRIVATEUSE1_RUNTIME;
    default:
      return libkineto::ActivityType::GPU_MEMCPY;
  }
}

bool on_host(uint32_t kind) {
  return kind == torchtpu::kCompile || kind == torchtpu::kLaunch;
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::set<libkineto::ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    api->start();
    status_ = libkineto::TraceStatus::RECORDING;
  }
  void stop() override {
    api->stop();
    status_ = libkineto::TraceStatus::PROCESSING;
  }
  std::vector<std::string> errors() override { return {}; }
  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    struct Context {
      Session* self;
      libkineto::getLinkedActivityCallback* linked;
    } context{this, &linked};
    api->drain(
        [](void* raw, const torchtpu::ActivityRecord* r) {
          auto* c = static_cast<Context*>(raw);
          c->self->convert(*r, *c->linked);
        },
        &context);
    for (const auto& a : activities_) {
      a->log(logger);
    }
    status_ = libkineto::TraceStatus::READY;
  }
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{kDeviceRow, kDeviceRow, "tpu", "tpu"});
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return resources_; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }
  void pushCorrelationId(uint64_t id) override { api->push_correlation(id); }
  void popCorrelationId() override { api->pop_correlation(); }

 private:
  // The trace's process row for the devices: one row (resource) per device below it.
  static constexpr int64_t kDeviceRow = 1 << 20;

  void convert(const torchtpu::ActivityRecord& r, libkineto::getLinkedActivityCallback& linked) {
    auto type = kineto_type(r.kind);
    if (!types_.count(type)) {
      return;
    }
    std::string name(r.name, r.name_len);
    auto a = std::make_unique<libkineto::GenericTraceActivity>(
        span_, type, r.kind == torchtpu::kLaunch ? "launch " + name : name);
    a->startTime = r.start_ns;
    a->endTime = r.end_ns;
    a->id = static_cast<int32_t>(r.correlation);
    a->linked = r.correlation == 0 ? nullptr : linked(static_cast<int32_t>(r.correlation));
    // Host work is on its op's thread (the op that launched it ran there); device work on the
    // device's row.
    a->device = static_cast<int32_t>(on_host(r.kind) ? libkineto::processId() : kDeviceRow);
    a->resource = !on_host(r.kind) ? r.device
                  : a->linked != nullptr ? a->linked->resourceId()
                                         : libkineto::systemThreadId();
    if (a->linked != nullptr) {
      a->flow.id = static_cast<uint32_t>(r.correlation);
      a->flow.type = libkineto::kLinkAsyncCpuGpu;
      a->flow.start = false;
    }
    if (r.device >= 0) {
      a->addTypedMetadata("device", static_cast<int64_t>(r.device));
    }
    if (r.bytes != 0) {
      a->addTypedMetadata("bytes", static_cast<int64_t>(r.bytes));
    }
    if (!on_host(r.kind) && r.device >= 0 && seen_devices_.insert(r.device).second) {
      resources_.push_back(libkineto::ResourceInfo{r.device, r.device, kDeviceRow, "tpu:" + std::to_string(r.device)});
    }
    activities_.push_back(std::move(a));
  }

  std::set<libkineto::ActivityType> types_;
  libkineto::TraceSpan span_{0, 0, "tpu"};
  std::vector<std::unique_ptr<libkineto::GenericTraceActivity>> activities_;
  std::set<int32_t> seen_devices_;
  std::vector<libkineto::ResourceInfo> resources_;
};

class Profiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return types_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& requested,
                                                                 const libkineto::Config&) override {
    // Only the requested types are recorded: ProfilerActivity.PrivateUse1 brings the device's,
    // ProfilerActivity.CPU the host runtime's.
    std::set<libkineto::ActivityType> types;
    for (auto t : requested) {
      if (types_.count(t)) {
        types.insert(t);
      }
    }
    if (types.empty()) {
      return nullptr;
    }
    return std::make_unique<Session>(std::move(types));
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& requested,
                                                                 const libkineto::Config& config) override {
    return configure(requested, config);
  }

 private:
  std::string name_{"torchtpu"};
  std::set<libkineto::ActivityType> types_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                           libkineto::ActivityType::GPU_MEMCPY,
                                           libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

}  // namespace

void init_profiler(pybind11::module& m) {
  m.def("install_profiler", [](const pybind11::capsule& capsule) {
    auto* table =
        static_cast<const torchtpu::ProfilerApi*>(PyCapsule_GetPointer(capsule.ptr(), "torchtpu._C.profiler_api"));
    if (table == nullptr) {
      throw pybind11::error_already_set();
    }
    TORCH_CHECK(table->version == torchtpu::kProfilerApiVersion, "torchtpu: torchtpu._C's profiler API is version ",
                table->version, ", the device shim's ", torchtpu::kProfilerApiVersion, "; rebuild both (make setup)");
    if (api != nullptr) {
      return;
    }
    capsule.inc_ref();  // the table lives as long as the extension: keep its capsule
    api = table;
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        [] { return std::unique_ptr<libkineto::IActivityProfiler>(new Profiler()); });
  });
}
