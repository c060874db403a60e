// Control messages as bytes: plain C++ values <-> Cap'n Proto (actors/wire/control.capnp).
//
//   libai::wire::JoinRequest join{.node_rank = 1, .token = "s3cret", .hostname = "node1"};
//   std::vector<std::uint8_t> bytes = libai::wire::encode(join);
//   auto back = libai::wire::decode<libai::wire::JoinRequest>(bytes);  // CorruptInput if bad
//
// Bytes come from other processes, so decoding trusts nothing: the reader is bounded (traversal
// and nesting limits), the whole message is validated and copied into values before anything
// is returned, and every Cap'n Proto failure (kj::Exception) becomes libai::CorruptInput.
// Other schemas use the lower level pair to_bytes(builder) / read_message<Schema>(bytes, fn).
#pragma once

#include <capnp/message.h>
#include <kj/exception.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/wire/control.capnp.h"
#include "runtime/device_profile.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace libai::wire {

using Bytes = std::vector<std::uint8_t>;

// The job's layer timed at one precision (train.dist.stage_precision prices each).
struct PrecisionTiming {
  std::string precision;  // "f32", "bf16", "int8", "q4:32", ...
  double layer_seconds = 0, layer_step_seconds = 0;
  bool operator==(const PrecisionTiming&) const = default;
};

struct DeviceProfile {
  std::string name;  // "cpu:0", "cuda:1"
  double matmul_gflops = 0;
  double memory_bandwidth_gbs = 0;
  std::uint64_t free_memory_bytes = 0;
  double layer_seconds = 0;       // one of the job's layers timed on the device; 0: not timed
  double layer_step_seconds = 0;  // its decoding step (model jobs that generate); 0: not timed
  std::vector<PrecisionTiming> timings;  // that layer per precision a stage may hold
  bool operator==(const DeviceProfile&) const = default;
};

// The planner's device description (runtime/device_profile.h) as it travels, and back: the
// fields a plan reads (a profile's thread count and emulated slow-down stay on its node).
DeviceProfile to_wire(const libai::DeviceProfile& profile);
libai::DeviceProfile from_wire(const DeviceProfile& profile);
std::vector<DeviceProfile> to_wire(const std::vector<libai::DeviceProfile>& profiles);
std::vector<libai::DeviceProfile> from_wire(const std::vector<DeviceProfile>& profiles);

struct JoinRequest {
  std::uint32_t node_rank = 0;
  std::string token;
  std::string hostname;
  std::vector<DeviceProfile> devices;
  double control_rtt_seconds = 0;
  std::string host_key;  // equal on nodes that can share memory (runtime/host_identity.h)
  double control_bandwidth_gbs = 0;  // measured to node 0 over the control plane (0: not)
  bool operator==(const JoinRequest&) const = default;
};

struct JoinReply {
  bool accepted = false;
  std::string reason;
  bool operator==(const JoinReply&) const = default;
};

// Describes tensor bytes that travel on the data plane under the UCX tag `tag`.
// Decoding checks that `bytes` equals numel(shape) * dtype_size(dtype) and that the tensor is
// one this runtime can hold (Note [Bounded tensor headers]).
struct TensorHeader {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
  std::uint64_t tag = 0;
  bool operator==(const TensorHeader&) const = default;
};

// Note [Bounded tensor headers]
// A receiver allocates a tensor from its header before the bytes arrive, and Tensor keeps
// element counts, strides and byte sizes in 64-bit integers. So a header must describe a tensor
// whose every stride and size fits: at most kMaxTensorRank dimensions, none negative, and the
// product of the non-zero dimensions times the element size (what the largest stride reaches,
// also for an empty tensor) at most kMaxTensorBytes, 256 TiB: above any host's memory, below
// where the allocator's size classes and the int64 arithmetic would overflow. (A header of
// shape [2^62, 2] u8 passes a plain `bytes == numel * size` check in unsigned 64-bit
// arithmetic, yet its element count overflows int64; [0, 2^40, 2^40] holds no bytes, yet its
// first stride overflows.)
inline constexpr std::size_t kMaxTensorRank = 64;
inline constexpr std::uint64_t kMaxTensorBytes = std::uint64_t(1) << 48;

struct NamedTensor {
  std::string name;
  TensorHeader header;
  bool operator==(const NamedTensor&) const = default;
};

// Announces a packet between pipeline stages: the header of a message-plane message whose
// payload is the tensors' bytes, one block per tensor in list order (actors/packet_inbox.h).
// Decoding checks every tensor header and that `bytes` is their sum.
struct PacketHeader {
  std::uint32_t group = 0;
  std::uint32_t step = 0;
  bool done = false;
  std::vector<NamedTensor> tensors;
  std::uint64_t bytes = 0;
  bool gradient = false;   // training: flows upstream
  std::uint32_t chunk = 0; // training: the receiving stage's model chunk
  bool operator==(const PacketHeader&) const = default;
};

struct Credit {
  std::uint32_t slots = 1;
  std::uint32_t chunk = 0;  // unused by the runtime: the message plane's channel names the link
  bool operator==(const Credit&) const = default;
};

struct Abort {
  std::string reason;
  std::int32_t node = -1;
  bool operator==(const Abort&) const = default;
};

struct Assignment {
  std::string config_yaml;
  std::vector<std::int32_t> stage_of;
  std::vector<std::int32_t> device_of_stage;
  std::uint16_t data_port = 0;
  std::vector<DeviceProfile> devices;
  double local_hop_seconds = 0;
  double remote_hop_seconds = 0;
  std::string transport;  // the data plane between the nodes: "shm" or "ucx" ("": one node)
  // Measured: the slowest node's bandwidth to node 0 over the control plane (0: one node or
  // not measured), the link between nodes the auto-parallel search prices when the config
  // leaves it unset.
  double inter_node_bandwidth_gbs = 0;
  bool operator==(const Assignment&) const = default;
};

struct StageReport {
  std::string name;
  std::int32_t node = 0;
  double busy_seconds = 0;
  std::uint64_t actions = 0;
  std::uint64_t bytes_received = 0;
  bool operator==(const StageReport&) const = default;
};

// What one stage is doing (actors/stage_progress.h), and a node's heartbeat carrying its stages.
struct StageProgress {
  std::string name;
  std::uint64_t actions = 0;
  std::string doing;
  double doing_seconds = 0;
  std::string waiting;
  double waiting_seconds = 0;
  bool operator==(const StageProgress&) const = default;
};

struct Heartbeat {
  std::uint64_t seq = 0;
  std::int32_t node = 0;
  std::vector<StageProgress> stages;
  bool operator==(const Heartbeat&) const = default;
};

// What one training stage reports after a step. Fields a stage has nothing for stay 0; the
// driver sums losses, counts and extras over stages and takes the largest norm (every stage
// reports the same global norm after its reduction).
struct StepSummary {
  double loss_sum = 0;
  std::int64_t loss_count = 0;
  double grad_norm = 0;
  bool skipped = false;
  std::map<std::string, double> extra;
  bool operator==(const StepSummary&) const = default;
};

// What the train driver asks of every training stage between steps (save and load a
// checkpoint, evaluate); the progress fields are a save's (train::TrainingProgress).
enum class TrainControlKind : std::uint8_t { save, load, evaluate };
struct TrainControl {
  TrainControlKind kind = TrainControlKind::save;
  std::string folder;  // save: the output folder; load: the checkpoint folder
  std::string name;    // save: the checkpoint's name (model_0000100, model_final, ...)
  std::int32_t max_to_keep = 0;
  std::int64_t iteration = 0;
  std::int64_t consumed_samples = 0;
  double best_metric = 0;
  bool has_best = false;
  std::uint64_t seed = 0;
  bool operator==(const TrainControl&) const = default;
};

// Control messages are small: 1 Mi words (8 MiB) of traversal is far above any real one and
// still stops amplification tricks (lists of empty structs) cold.
struct ReadLimits {
  std::uint64_t traversal_limit_words = 1u << 20;
  int nesting_limit = 32;
};

Bytes encode(const JoinRequest& message);
Bytes encode(const JoinReply& message);
Bytes encode(const TensorHeader& message);
Bytes encode(const DeviceProfile& message);
Bytes encode(const PacketHeader& message);
Bytes encode(const Credit& message);
Bytes encode(const Abort& message);
Bytes encode(const Assignment& message);
Bytes encode(const StageReport& message);
Bytes encode(const StepSummary& message);
Bytes encode(const TrainControl& message);
Bytes encode(const Heartbeat& message);

// Defined for the value types above; throws CorruptInput on malformed bytes.
template <typename T>
T decode(std::span<const std::uint8_t> bytes, const ReadLimits& limits = {});

// Flat bytes (segment table + segments) of a built message.
Bytes to_bytes(capnp::MessageBuilder& message);

// A validated, aligned, bounded reader over bytes: the framing is checked, nothing may follow
// the message, and the whole pointer graph is walked once (totalSize) so that later field
// reads cannot meet a bad pointer.
class BoundedReader {
 public:
  BoundedReader(std::span<const std::uint8_t> bytes, const ReadLimits& limits);
  ~BoundedReader();
  BoundedReader(const BoundedReader&) = delete;
  BoundedReader& operator=(const BoundedReader&) = delete;

  template <typename Schema>
  typename Schema::Reader root() {
    auto root = message().getRoot<Schema>();
    root.totalSize();  // validates every pointer within the traversal limit
    return root;
  }

 private:
  capnp::MessageReader& message();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs `read(root)` on a message of `Schema` and returns its result; the reader is valid only
// inside `read`. Any Cap'n Proto failure, framing or field access, becomes CorruptInput.
template <typename Schema, typename Fn>
auto read_message(std::span<const std::uint8_t> bytes, Fn&& read, const ReadLimits& limits = {}) {
  try {
    BoundedReader reader(bytes, limits);
    return std::forward<Fn>(read)(reader.template root<Schema>());
  } catch (const kj::Exception& e) {
    LIBAI_THROW(CorruptInput, "malformed control message (", bytes.size(),
                " bytes): ", e.getDescription().cStr());
  }
}

}  // namespace libai::wire
