// What GraphBuilder (models/onnx/graph.cc) hands the ONNX writer plugin
// (models/onnx/plugin/writer.cc): the graph as plain standard-library values, element types
// as ONNX's TensorProto.DataType numbers, weights as pointers into memory the builder owns.
//
// Note [ONNX writer plugin]: Debian's libsentencepiece (linked by libai_models for .model
// tokenizers) carries its own copy of protobuf-lite (its third_party/ folder) and exports its
// symbols. In a process that also loads libprotobuf 3.21 (which libonnx needs), whichever library
// the dynamic linker finds first serves both, and libprotobuf's own start-up code then runs
// sentencepiece's copy and crashes (or, the other way round, sentencepiece parses with another
// version's internals). So protobuf never enters libai_models' link: the writer is a plugin,
// libai_onnx_writer.so beside libai_models.so, linking only libonnx and libprotobuf and loaded on
// first use with RTLD_LOCAL | RTLD_DEEPBIND, which makes the plugin and its libraries resolve their
// symbols among themselves before the process's. Only this header crosses the boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace libai::models::onnx::plugin {

struct DimData {
  int64_t size = -1;  // a fixed size, or -1 with a symbol
  std::string symbol;
};

struct ValueInfoData {
  std::string name;
  int32_t elem_type = 0;
  std::vector<DimData> dims;
};

struct TensorData {
  std::string name;
  int32_t elem_type = 0;
  std::vector<int64_t> dims;
  const void* data = nullptr;  // raw little-endian bytes (inline tensors)
  int64_t bytes = 0;
  int64_t external_offset = -1;  // >= 0: in the external data file at this offset
};

enum class AttributeKind { i, f, s, ints, floats, tensor };

struct AttributeData {
  std::string name;
  AttributeKind kind = AttributeKind::i;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  TensorData tensor;
};

struct NodeData {
  std::string type, name;
  std::vector<std::string> inputs, outputs;
  std::vector<AttributeData> attributes;
};

struct GraphData {
  std::string name, producer_version;
  int opset = 0;
  std::vector<ValueInfoData> inputs, outputs;
  std::vector<NodeData> nodes;
  std::vector<TensorData> initializers;
};

struct WriteRequest {
  const GraphData* graph = nullptr;
  std::string model_path;
  std::string data_location;  // the external data file's name, relative to the model
};

// error: 0 none, 1 I/O (a file could not be written), 2 ONNX rejected the graph.
struct WriteResult {
  int error = 0;
  std::string message;
};

// The plugin's one entry point (extern "C" so dlsym finds it by this name).
using WriteFunction = void (*)(const WriteRequest& request, WriteResult& result);
constexpr const char* kWriteSymbol = "libai_onnx_write";
constexpr const char* kPluginFile = "libai_onnx_writer.so";

}  // namespace libai::models::onnx::plugin
