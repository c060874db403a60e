#include "actors/wire/wire.h"

#include <capnp/serialize.h>

#include <cstring>
#include <limits>

namespace libai::wire {

DeviceProfile to_wire(const libai::DeviceProfile& p) {
  DeviceProfile out{.name = p.name,
                    .matmul_gflops = p.matmul_gflops,
                    .memory_bandwidth_gbs = p.memory_bandwidth_gbs,
                    .free_memory_bytes = p.free_memory_bytes,
                    .layer_seconds = p.layer_seconds,
                    .layer_step_seconds = p.layer_step_seconds,
                    .timings = {}};
  for (const auto& t : p.timings) out.timings.push_back({t.precision, t.layer_seconds, t.layer_step_seconds});
  return out;
}

libai::DeviceProfile from_wire(const DeviceProfile& p) {
  libai::DeviceProfile out;
  out.name = p.name;
  out.matmul_gflops = p.matmul_gflops;
  out.memory_bandwidth_gbs = p.memory_bandwidth_gbs;
  out.free_memory_bytes = p.free_memory_bytes;
  out.layer_seconds = p.layer_seconds;
  out.layer_step_seconds = p.layer_step_seconds;
  for (const auto& t : p.timings) out.timings.push_back({t.precision, t.layer_seconds, t.layer_step_seconds});
  return out;
}

std::vector<DeviceProfile> to_wire(const std::vector<libai::DeviceProfile>& profiles) {
  std::vector<DeviceProfile> out;
  for (const auto& p : profiles) out.push_back(to_wire(p));
  return out;
}

std::vector<libai::DeviceProfile> from_wire(const std::vector<DeviceProfile>& profiles) {
  std::vector<libai::DeviceProfile> out;
  for (const auto& p : profiles) out.push_back(from_wire(p));
  return out;
}

namespace {

[[noreturn]] void corrupt(std::size_t size, const std::string& why) {
  LIBAI_THROW(CorruptInput, "malformed control message (", size, " bytes): ", why);
}

schema::DType to_schema(DType dtype) {
  switch (dtype) {
    case DType::f32: return schema::DType::F32;
    case DType::f64: return schema::DType::F64;
    case DType::bf16: return schema::DType::BF16;
    case DType::f16: return schema::DType::F16;
    case DType::i64: return schema::DType::I64;
    case DType::i32: return schema::DType::I32;
    case DType::u8: return schema::DType::U8;
    case DType::boolean: return schema::DType::BOOLEAN;
  }
  LIBAI_THROW(InvalidArgument, "encode: unknown dtype ", static_cast<int>(dtype));
}

// A peer may run a newer schema or send garbage: an unknown enumerant is corrupt input here.
DType from_schema(schema::DType dtype, std::size_t size) {
  switch (dtype) {
    case schema::DType::F32: return DType::f32;
    case schema::DType::F64: return DType::f64;
    case schema::DType::BF16: return DType::bf16;
    case schema::DType::F16: return DType::f16;
    case schema::DType::I64: return DType::i64;
    case schema::DType::I32: return DType::i32;
    case schema::DType::U8: return DType::u8;
    case schema::DType::BOOLEAN: return DType::boolean;
  }
  corrupt(size, str_cat("unknown dtype enumerant ", static_cast<int>(dtype)));
}

// Note [Amplified lists]
// Cap'n Proto charges a list of zero-sized structs one word of traversal per element, so a
// message of a few dozen bytes may claim a million elements within the traversal limit, and
// copying them into values would allocate some hundred megabytes from it. Every list element
// our encoders write takes at least 4 bytes of the message (Int32 lists; structs take whole
// words), so a list with more elements than a quarter of the message's bytes was not written
// by them and is refused before anything is copied.
template <typename List>
List bounded(List list, std::size_t size, const char* what) {
  if (list.size() > size / 4)
    corrupt(size, str_cat("a list of ", list.size(), " ", what, " cannot fit in the message"));
  return list;
}

template <typename Schema, typename Fill>
Bytes build(Fill&& fill) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<Schema>());
  return to_bytes(message);
}

void fill_device(schema::DeviceProfile::Builder out, const DeviceProfile& in) {
  out.setName(in.name);
  out.setMatmulGflops(in.matmul_gflops);
  out.setMemoryBandwidthGbs(in.memory_bandwidth_gbs);
  out.setFreeMemoryBytes(in.free_memory_bytes);
  out.setLayerSeconds(in.layer_seconds);
  out.setLayerStepSeconds(in.layer_step_seconds);
  auto timings = out.initTimings(unsigned(in.timings.size()));
  for (size_t i = 0; i < in.timings.size(); ++i) {
    timings[unsigned(i)].setPrecision(in.timings[i].precision);
    timings[unsigned(i)].setLayerSeconds(in.timings[i].layer_seconds);
    timings[unsigned(i)].setLayerStepSeconds(in.timings[i].layer_step_seconds);
  }
}

DeviceProfile read_device(schema::DeviceProfile::Reader in) {
  DeviceProfile out{in.getName().cStr(),     in.getMatmulGflops(),  in.getMemoryBandwidthGbs(),
                    in.getFreeMemoryBytes(), in.getLayerSeconds(), in.getLayerStepSeconds()};
  for (auto t : in.getTimings())
    out.timings.push_back({t.getPrecision().cStr(), t.getLayerSeconds(), t.getLayerStepSeconds()});
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
struct BoundedReader::Impl {
  kj::Array<capnp::word> words;  // an aligned copy: the input bytes may sit anywhere
  kj::Own<capnp::FlatArrayMessageReader> reader;
};

BoundedReader::BoundedReader(std::span<const std::uint8_t> bytes, const ReadLimits& limits)
    : impl_(std::make_unique<Impl>()) {
  try {
    if (bytes.empty()) corrupt(0, "empty");
    if (bytes.size() % sizeof(capnp::word) != 0)
      corrupt(bytes.size(), "not a whole number of words");
    impl_->words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
    std::memcpy(impl_->words.begin(), bytes.data(), bytes.size());
    capnp::ReaderOptions options;
    options.traversalLimitInWords = limits.traversal_limit_words;
    options.nestingLimit = limits.nesting_limit;
    impl_->reader = kj::heap<capnp::FlatArrayMessageReader>(impl_->words.asPtr(), options);
    if (impl_->reader->getEnd() != impl_->words.end()) {
      corrupt(bytes.size(), "bytes follow the end of the message");
    }
  } catch (const kj::Exception& e) {
    corrupt(bytes.size(), e.getDescription().cStr());
  }
}

BoundedReader::~BoundedReader() = default;

capnp::MessageReader& BoundedReader::message() { return *impl_->reader; }

Bytes to_bytes(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto chars = words.asBytes();
  return Bytes(chars.begin(), chars.end());
}

// ---------------------------------------------------------------------------------------------
Bytes encode(const DeviceProfile& m) {
  return build<schema::DeviceProfile>([&](auto root) { fill_device(root, m); });
}

Bytes encode(const JoinRequest& m) {
  return build<schema::JoinRequest>([&](schema::JoinRequest::Builder root) {
    root.setNodeRank(m.node_rank);
    root.setToken(m.token);
    root.setHostname(m.hostname);
    auto devices = root.initDevices(static_cast<unsigned>(m.devices.size()));
    for (unsigned i = 0; i < m.devices.size(); ++i) fill_device(devices[i], m.devices[i]);
    root.setControlRttSeconds(m.control_rtt_seconds);
    root.setHostKey(m.host_key);
    root.setControlBandwidthGbs(m.control_bandwidth_gbs);
  });
}

Bytes encode(const JoinReply& m) {
  return build<schema::JoinReply>([&](schema::JoinReply::Builder root) {
    root.setAccepted(m.accepted);
    root.setReason(m.reason);
  });
}

template <>
DeviceProfile decode<DeviceProfile>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::DeviceProfile>(bytes, read_device, limits);
}

template <>
JoinRequest decode<JoinRequest>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::JoinRequest>(
      bytes,
      [&](schema::JoinRequest::Reader root) {
        JoinRequest m;
        m.node_rank = root.getNodeRank();
        m.token = root.getToken().cStr();
        m.hostname = root.getHostname().cStr();
        for (auto device : bounded(root.getDevices(), bytes.size(), "devices"))
          m.devices.push_back(read_device(device));
        m.control_rtt_seconds = root.getControlRttSeconds();
        m.host_key = root.getHostKey().cStr();
        m.control_bandwidth_gbs = root.getControlBandwidthGbs();
        return m;
      },
      limits);
}

template <>
JoinReply decode<JoinReply>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::JoinReply>(
      bytes,
      [](schema::JoinReply::Reader root) {
        return JoinReply{root.getAccepted(), root.getReason().cStr()};
      },
      limits);
}

namespace {

void fill_tensor(schema::TensorHeader::Builder root, const TensorHeader& m) {
  root.setDtype(to_schema(m.dtype));
  auto shape = root.initShape(static_cast<unsigned>(m.shape.size()));
  for (unsigned i = 0; i < m.shape.size(); ++i) shape.set(i, m.shape[i]);
  root.setBytes(m.bytes);
  root.setTag(m.tag);
}

TensorHeader read_tensor(schema::TensorHeader::Reader root, std::size_t size) {
  TensorHeader h;
  h.dtype = from_schema(root.getDtype(), size);
  for (std::int64_t d : bounded(root.getShape(), size, "dimensions")) h.shape.push_back(d);
  h.bytes = root.getBytes();
  h.tag = root.getTag();
  return h;
}

// A header that lies about its size would make the data plane read past a buffer; one that
// describes a tensor too large to hold would overflow the receiver's size arithmetic
// (Note [Bounded tensor headers]).
void check_tensor(const TensorHeader& m, std::size_t size) {
  if (m.shape.size() > kMaxTensorRank)
    corrupt(size, str_cat("a tensor of rank ", m.shape.size(), " (at most ", kMaxTensorRank, ")"));
  const std::uint64_t element = dtype_size(m.dtype);
  std::uint64_t extent = element;  // product of the non-zero dimensions, in bytes
  bool empty = false;
  for (std::int64_t d : m.shape) {
    if (d < 0) corrupt(size, str_cat("negative dimension in shape ", m.shape));
    if (d == 0) {
      empty = true;
      continue;
    }
    if (extent > kMaxTensorBytes / static_cast<std::uint64_t>(d))
      corrupt(size, str_cat("shape ", m.shape, " of ", dtype_name(m.dtype), " exceeds ",
                            kMaxTensorBytes, " bytes"));
    extent *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t expected = empty ? 0 : extent;
  if (expected != m.bytes) {
    corrupt(size, str_cat("tensor header says ", m.bytes, " bytes but ", dtype_name(m.dtype), " ",
                          m.shape, " needs ", expected));
  }
}

}  // namespace

Bytes encode(const TensorHeader& m) {
  return build<schema::TensorHeader>(
      [&](schema::TensorHeader::Builder root) { fill_tensor(root, m); });
}

template <>
TensorHeader decode<TensorHeader>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  TensorHeader m = read_message<schema::TensorHeader>(
      bytes, [&](schema::TensorHeader::Reader root) { return read_tensor(root, bytes.size()); },
      limits);
  check_tensor(m, bytes.size());
  return m;
}

Bytes encode(const PacketHeader& m) {
  return build<schema::PacketHeader>([&](schema::PacketHeader::Builder root) {
    root.setGroup(m.group);
    root.setStep(m.step);
    root.setDone(m.done);
    auto tensors = root.initTensors(static_cast<unsigned>(m.tensors.size()));
    for (unsigned i = 0; i < m.tensors.size(); ++i) {
      tensors[i].setName(m.tensors[i].name);
      fill_tensor(tensors[i].initHeader(), m.tensors[i].header);
    }
    root.setBytes(m.bytes);
    root.setGradient(m.gradient);
    root.setChunk(m.chunk);
  });
}

template <>
PacketHeader decode<PacketHeader>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  PacketHeader m = read_message<schema::PacketHeader>(
      bytes,
      [&](schema::PacketHeader::Reader root) {
        PacketHeader h;
        h.group = root.getGroup();
        h.step = root.getStep();
        h.done = root.getDone();
        for (auto t : bounded(root.getTensors(), bytes.size(), "tensors"))
          h.tensors.push_back({t.getName().cStr(), read_tensor(t.getHeader(), bytes.size())});
        h.bytes = root.getBytes();
        h.gradient = root.getGradient();
        h.chunk = root.getChunk();
        return h;
      },
      limits);
  std::uint64_t total = 0;
  for (const NamedTensor& t : m.tensors) {
    check_tensor(t.header, bytes.size());
    if (t.header.bytes > std::numeric_limits<std::uint64_t>::max() - total)
      corrupt(bytes.size(), "packet size overflows 64 bits");
    total += t.header.bytes;
  }
  if (total != m.bytes)
    corrupt(bytes.size(), str_cat("packet header says ", m.bytes, " bytes but its ",
                                  m.tensors.size(), " tensors hold ", total));
  if (m.done && !m.tensors.empty())
    corrupt(bytes.size(), "a done packet carries tensors");
  return m;
}

Bytes encode(const Credit& m) {
  return build<schema::Credit>([&](schema::Credit::Builder root) {
    root.setSlots(m.slots);
    root.setChunk(m.chunk);
  });
}

template <>
Credit decode<Credit>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  Credit m = read_message<schema::Credit>(
      bytes,
      [](schema::Credit::Reader root) { return Credit{root.getSlots(), root.getChunk()}; },
      limits);
  if (m.slots == 0) corrupt(bytes.size(), "a credit of zero slots");
  return m;
}

Bytes encode(const Abort& m) {
  return build<schema::Abort>([&](schema::Abort::Builder root) {
    root.setReason(m.reason);
    root.setNode(m.node);
  });
}

template <>
Abort decode<Abort>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::Abort>(
      bytes,
      [](schema::Abort::Reader root) { return Abort{root.getReason().cStr(), root.getNode()}; },
      limits);
}

Bytes encode(const Assignment& m) {
  return build<schema::Assignment>([&](schema::Assignment::Builder root) {
    root.setConfigYaml(m.config_yaml);
    auto stage_of = root.initStageOf(static_cast<unsigned>(m.stage_of.size()));
    for (unsigned i = 0; i < m.stage_of.size(); ++i) stage_of.set(i, m.stage_of[i]);
    auto device_of = root.initDeviceOfStage(static_cast<unsigned>(m.device_of_stage.size()));
    for (unsigned i = 0; i < m.device_of_stage.size(); ++i) device_of.set(i, m.device_of_stage[i]);
    root.setDataPort(m.data_port);
    auto devices = root.initDevices(static_cast<unsigned>(m.devices.size()));
    for (unsigned i = 0; i < m.devices.size(); ++i) fill_device(devices[i], m.devices[i]);
    root.setLocalHopSeconds(m.local_hop_seconds);
    root.setRemoteHopSeconds(m.remote_hop_seconds);
    root.setTransport(m.transport);
    root.setInterNodeBandwidthGbs(m.inter_node_bandwidth_gbs);
  });
}

template <>
Assignment decode<Assignment>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::Assignment>(
      bytes,
      [&](schema::Assignment::Reader root) {
        Assignment m;
        m.config_yaml = root.getConfigYaml().cStr();
        for (std::int32_t s : bounded(root.getStageOf(), bytes.size(), "layers"))
          m.stage_of.push_back(s);
        for (std::int32_t d : bounded(root.getDeviceOfStage(), bytes.size(), "stages"))
          m.device_of_stage.push_back(d);
        m.data_port = root.getDataPort();
        for (auto device : bounded(root.getDevices(), bytes.size(), "devices"))
          m.devices.push_back(read_device(device));
        m.local_hop_seconds = root.getLocalHopSeconds();
        m.remote_hop_seconds = root.getRemoteHopSeconds();
        m.transport = root.getTransport().cStr();
        m.inter_node_bandwidth_gbs = root.getInterNodeBandwidthGbs();
        return m;
      },
      limits);
}

Bytes encode(const StageReport& m) {
  return build<schema::StageReport>([&](schema::StageReport::Builder root) {
    root.setName(m.name);
    root.setNode(m.node);
    root.setBusySeconds(m.busy_seconds);
    root.setActions(m.actions);
    root.setBytesReceived(m.bytes_received);
  });
}

template <>
StageReport decode<StageReport>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::StageReport>(
      bytes,
      [](schema::StageReport::Reader root) {
        return StageReport{root.getName().cStr(), root.getNode(), root.getBusySeconds(),
                           root.getActions(), root.getBytesReceived()};
      },
      limits);
}

Bytes encode(const Heartbeat& m) {
  return build<schema::Heartbeat>([&](schema::Heartbeat::Builder root) {
    root.setSeq(m.seq);
    root.setNode(m.node);
    auto stages = root.initStages(static_cast<unsigned>(m.stages.size()));
    for (unsigned i = 0; i < m.stages.size(); ++i) {
      const StageProgress& p = m.stages[i];
      stages[i].setName(p.name);
      stages[i].setActions(p.actions);
      stages[i].setDoing(p.doing);
      stages[i].setDoingSeconds(p.doing_seconds);
      stages[i].setWaiting(p.waiting);
      stages[i].setWaitingSeconds(p.waiting_seconds);
    }
  });
}

template <>
Heartbeat decode<Heartbeat>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::Heartbeat>(
      bytes,
      [&](schema::Heartbeat::Reader root) {
        Heartbeat m{root.getSeq(), root.getNode(), {}};
        for (auto p : bounded(root.getStages(), bytes.size(), "stages"))
          m.stages.push_back({p.getName().cStr(), p.getActions(), p.getDoing().cStr(),
                              p.getDoingSeconds(), p.getWaiting().cStr(), p.getWaitingSeconds()});
        return m;
      },
      limits);
}

Bytes encode(const StepSummary& m) {
  return build<schema::StepSummary>([&](schema::StepSummary::Builder root) {
    root.setLossSum(m.loss_sum);
    root.setLossCount(m.loss_count);
    root.setGradNorm(m.grad_norm);
    root.setSkipped(m.skipped);
    auto extra = root.initExtra(static_cast<unsigned>(m.extra.size()));
    unsigned i = 0;
    for (const auto& [name, value] : m.extra) {
      extra[i].setName(name);
      extra[i].setValue(value);
      ++i;
    }
  });
}

template <>
StepSummary decode<StepSummary>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::StepSummary>(
      bytes,
      [&](schema::StepSummary::Reader root) {
        StepSummary m;
        m.loss_sum = root.getLossSum();
        m.loss_count = root.getLossCount();
        m.grad_norm = root.getGradNorm();
        m.skipped = root.getSkipped();
        for (auto e : bounded(root.getExtra(), bytes.size(), "figures")) {
          const std::string name = e.getName().cStr();
          if (!m.extra.emplace(name, e.getValue()).second)
            corrupt(bytes.size(), str_cat("step summary: '", name, "' appears twice"));
        }
        return m;
      },
      limits);
}

Bytes encode(const TrainControl& m) {
  return build<schema::TrainControl>([&](schema::TrainControl::Builder root) {
    root.setKind(static_cast<schema::TrainControlKind>(m.kind));
    root.setFolder(m.folder);
    root.setName(m.name);
    root.setMaxToKeep(m.max_to_keep);
    root.setIteration(m.iteration);
    root.setConsumedSamples(m.consumed_samples);
    root.setBestMetric(m.best_metric);
    root.setHasBest(m.has_best);
    root.setSeed(m.seed);
  });
}

template <>
TrainControl decode<TrainControl>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  return read_message<schema::TrainControl>(
      bytes,
      [&](schema::TrainControl::Reader root) {
        const auto kind = root.getKind();
        if (kind != schema::TrainControlKind::SAVE && kind != schema::TrainControlKind::LOAD &&
            kind != schema::TrainControlKind::EVALUATE)
          corrupt(bytes.size(), str_cat("train control: unknown kind ", int(kind)));
        TrainControl m;
        m.kind = static_cast<TrainControlKind>(kind);
        m.folder = root.getFolder().cStr();
        m.name = root.getName().cStr();
        m.max_to_keep = root.getMaxToKeep();
        m.iteration = root.getIteration();
        m.consumed_samples = root.getConsumedSamples();
        m.best_metric = root.getBestMetric();
        m.has_best = root.getHasBest();
        m.seed = root.getSeed();
        return m;
      },
      limits);
}

}  // namespace libai::wire
