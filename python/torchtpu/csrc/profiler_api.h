// The ABI between the Kineto bridge (profiler.cpp) and the runtime's record of device work
// (python/src/profiler.rs, which declares the same structs): the bridge turns Kineto's session
// calls into these, and each recorded activity into a Kineto activity. Bump
// `kProfilerApiVersion` on both sides with any change.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchtpu {

constexpr uint32_t kProfilerApiVersion = 1;

enum ActivityKind : uint32_t {
  kExecute = 0,         // a program ran on a device: device time
  kCompile = 1,         // a program was compiled or loaded: host time
  kHostToDevice = 2,
  kDeviceToHost = 3,
  kDeviceToDevice = 4,
  kLaunch = 5,          // the host's side of an execution (its enqueue): host time
};

struct ActivityRecord {
  uint32_t kind;
  int32_t device;  // PJRT device id, -1 for host-only activities
  int64_t start_ns;  // since the Unix epoch
  int64_t end_ns;
  uint64_t correlation;  // Kineto's correlation id of the launching op, 0 if none
  uint64_t bytes;
  const char* name;  // not NUL-terminated, valid for the sink call
  size_t name_len;
};

using ActivitySink = void (*)(void* context, const ActivityRecord* record);

struct ProfilerApi {
  uint32_t version;
  void (*start)();
  void (*stop)();
  void (*push_correlation)(uint64_t id);
  void (*pop_correlation)();
  // Hands each activity recorded since `start` to `sink`, then forgets them.
  void (*drain)(ActivitySink sink, void* context);
};

}  // namespace torchtpu
