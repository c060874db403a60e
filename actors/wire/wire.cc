#include "actors/wire/wire.h"

#include <capnp/serialize.h>

#include <cstring>
#include <limits>

namespace libai::wire {
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
}

DeviceProfile read_device(schema::DeviceProfile::Reader in) {
  return {in.getName().cStr(), in.getMatmulGflops(), in.getMemoryBandwidthGbs(),
          in.getFreeMemoryBytes()};
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
  });
}

Bytes encode(const JoinReply& m) {
  return build<schema::JoinReply>([&](schema::JoinReply::Builder root) {
    root.setAccepted(m.accepted);
    root.setReason(m.reason);
  });
}

Bytes encode(const TensorHeader& m) {
  return build<schema::TensorHeader>([&](schema::TensorHeader::Builder root) {
    root.setDtype(to_schema(m.dtype));
    auto shape = root.initShape(static_cast<unsigned>(m.shape.size()));
    for (unsigned i = 0; i < m.shape.size(); ++i) shape.set(i, m.shape[i]);
    root.setBytes(m.bytes);
    root.setTag(m.tag);
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
      [](schema::JoinRequest::Reader root) {
        JoinRequest m{root.getNodeRank(), root.getToken().cStr(), root.getHostname().cStr(), {}};
        for (auto device : root.getDevices()) m.devices.push_back(read_device(device));
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

template <>
TensorHeader decode<TensorHeader>(std::span<const std::uint8_t> bytes, const ReadLimits& limits) {
  TensorHeader m = read_message<schema::TensorHeader>(
      bytes,
      [&](schema::TensorHeader::Reader root) {
        TensorHeader h;
        h.dtype = from_schema(root.getDtype(), bytes.size());
        for (std::int64_t d : root.getShape()) h.shape.push_back(d);
        h.bytes = root.getBytes();
        h.tag = root.getTag();
        return h;
      },
      limits);
  // A header that lies about its size would make the data plane read past a buffer.
  std::uint64_t expected = dtype_size(m.dtype);
  for (std::int64_t d : m.shape) {
    if (d < 0) corrupt(bytes.size(), str_cat("negative dimension in shape ", m.shape));
    const auto dim = static_cast<std::uint64_t>(d);
    if (dim != 0 && expected > std::numeric_limits<std::uint64_t>::max() / dim) {
      corrupt(bytes.size(), str_cat("shape ", m.shape, " overflows 64 bits"));
    }
    expected *= dim;
  }
  if (expected != m.bytes) {
    corrupt(bytes.size(), str_cat("tensor header says ", m.bytes, " bytes but ",
                                  dtype_name(m.dtype), " ", m.shape, " needs ", expected));
  }
  return m;
}

}  // namespace libai::wire
