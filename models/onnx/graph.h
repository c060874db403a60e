// A small ONNX graph builder: inputs and outputs with symbolic dims, initializers from our
// Tensors, nodes with attributes, unique names, and a writer that checks the model with
// onnx::checker and ONNX's strict shape inference before it reports success. Protobuf stays
// inside the writer plugin (Note [ONNX writer plugin] in models/onnx/plugin/graph_data.h):
// this header is plain C++, so family exporters (models/<family>/*_onnx.cc) and the export
// call (models/onnx/export.h) never see a generated type.
//
//   GraphBuilder g("gpt2", /*opset=*/17);
//   Value ids = g.input("input_ids", DType::i64, {"batch", "sequence"});
//   Value table = g.initializer("embed.weight", model.find_parameter("embed.weight"));
//   Value h = g.op("Gather", {table, ids});                        // [batch, sequence, hidden]
//   h = g.op("LayerNormalization", {h, w, b}, {{"axis", -1}, {"epsilon", 1e-5}});
//   g.output(h, "last_hidden_state", DType::f32, {"batch", "sequence", 48});
//   WriteSummary s = g.write("model.onnx", {.external_data = false});
//
// Values are graph tensor names; a default Value is an omitted optional input. Nodes get
// unique names from the current scope (Scope, "layers.0.attention") and their op type.
// Floating initializers are written as f32 (bf16 and f16 converted: ONNX Runtime's CPU
// kernels and the 1e-4 parity want f32), integers as they are.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "runtime/tensor.h"

namespace libai::models::onnx {

// The highest opset this build writes and checks (Debian's ONNX 1.12), and the default.
constexpr int kMaxOpset = 17;
constexpr int kDefaultOpset = 17;

struct Value {
  std::string name;  // empty: an omitted optional input
  bool defined() const { return !name.empty(); }
};

// One dimension of a graph input or output: a fixed size or a symbol ("batch").
struct Dim {
  Dim(int64_t size) : size(size) {}                       // NOLINT: {"batch", 48} reads best
  Dim(const char* symbol) : symbol(symbol) {}             // NOLINT
  Dim(std::string symbol) : symbol(std::move(symbol)) {}  // NOLINT
  int64_t size = -1;
  std::string symbol;
};
using Dims = std::vector<Dim>;

// A node attribute: int, float, string, ints, floats, or a tensor (Constant's value).
struct Attribute {
  using Data =
      std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>, Tensor>;
  Attribute(std::string name, int value) : name(std::move(name)), data(int64_t(value)) {}
  Attribute(std::string name, int64_t value) : name(std::move(name)), data(value) {}
  Attribute(std::string name, double value) : name(std::move(name)), data(float(value)) {}
  Attribute(std::string name, const char* value)
      : name(std::move(name)), data(std::string(value)) {}
  Attribute(std::string name, std::string value) : name(std::move(name)), data(std::move(value)) {}
  Attribute(std::string name, std::vector<int64_t> value)
      : name(std::move(name)), data(std::move(value)) {}
  Attribute(std::string name, std::vector<float> value)
      : name(std::move(name)), data(std::move(value)) {}
  Attribute(std::string name, Tensor value) : name(std::move(name)), data(std::move(value)) {}
  std::string name;
  Data data;
};
using Attributes = std::vector<Attribute>;

struct WriteOptions {
  // Weights in `<file>.data` beside the model (ONNX external data, location relative to the
  // model). Forced when the initializers exceed what one protobuf message may hold (2 GB).
  bool external_data = false;
  // The weight bytes past which they go external anyway: protobuf's 2 GB, less a margin for
  // the graph (tests lower it).
  int64_t inline_limit_bytes = int64_t(1900) << 20;
};

struct WriteSummary {
  std::filesystem::path model;               // the .onnx file
  std::filesystem::path data;                // the external data file; empty when inline
  int64_t nodes = 0, initializers = 0;       // counts
  int64_t weight_bytes = 0;                  // bytes of all initializers as written
  std::vector<std::string> inputs, outputs;  // the graph's interface, in order
};

// Whether the ONNX writer can run in this process (Note [ONNX writer plugin] in
// models/onnx/plugin/graph_data.h); `why` says why not.
bool writer_available(std::string* why = nullptr);

class GraphBuilder {
 public:
  GraphBuilder(std::string graph_name, int opset);
  ~GraphBuilder();
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  int opset() const { return opset_; }
  // Unsupported naming `what` and both opsets when the graph needs a newer opset than asked.
  void require_opset(int minimum, const std::string& what) const;

  // Graph inputs and outputs. Names are the model's contract and must be unique
  // (InvalidArgument otherwise); an output of another name is renamed through Identity.
  Value input(const std::string& name, DType dtype, const Dims& dims);
  void output(const Value& value, const std::string& name, DType dtype, const Dims& dims);
  // An input a caller may omit: `fallback` is written as an initializer of the same name, which
  // ONNX Runtime uses when the input is not fed (ONNX's overridable initializers, IR 4 and
  // later). Its dims must fit `dims` (a symbol fits any size).
  Value optional_input(const std::string& name, DType dtype, const Dims& dims,
                       const Tensor& fallback);

  // A weight (f32 as written; see the header note), named `name` as given (not scoped; made
  // unique). The tensor is kept by reference until write(), not copied.
  Value initializer(const std::string& name, const Tensor& tensor);
  // Small constants as initializers named by the scope and `hint`: a 1-d i64 list ({2, -1}:
  // Reshape's shape), a scalar f32 or i64.
  Value ints(const std::vector<int64_t>& values, const std::string& hint = "ints");
  Value scalar(float value, const std::string& hint = "scalar");
  Value scalar_int(int64_t value, const std::string& hint = "scalar");

  // A node of `type` (domain ai.onnx) with one output, or `outputs` outputs.
  Value op(const std::string& type, const std::vector<Value>& inputs,
           const Attributes& attributes = {});
  std::vector<Value> op_n(const std::string& type, const std::vector<Value>& inputs, int outputs,
                          const Attributes& attributes = {});

  // Node and initializer names under a dotted prefix while a Scope lives.
  class Scope {
   public:
    Scope(GraphBuilder& graph, const std::string& name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    GraphBuilder& graph_;
    size_t previous_;
  };

  // Writes the model (and its external data) to `file`, then checks the written model with
  // onnx::checker and strict shape inference; IoError when a file cannot be written,
  // InternalError (a bug in an exporter) when ONNX rejects the graph, Unsupported when the
  // writer cannot be loaded (writer_available). Call once.
  WriteSummary write(const std::filesystem::path& file, const WriteOptions& options = {});

  int64_t node_count() const;

 private:
  std::string unique(const std::string& base);
  std::string scoped(const std::string& name) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int opset_;
  std::string scope_;
};

}  // namespace libai::models::onnx
