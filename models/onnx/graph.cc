#include "models/onnx/graph.h"

#include <dlfcn.h>

#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "models/onnx/plugin/graph_data.h"
#include "runtime/sanitizers.h"

namespace libai::models::onnx {

namespace fs = std::filesystem;

namespace {

// Initializers this small stay inline even when the weights go to an external file (shape
// lists, scalars): the graph stays readable without the data file.
constexpr int64_t kExternalMinBytes = 1024;
// Offsets in the data file are aligned so that runtimes may map tensors in place.
constexpr int64_t kExternalAlignment = 64;

// ONNX's TensorProto.DataType numbers.
int32_t element_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1;
    case DType::u8: return 2;
    case DType::i32: return 6;
    case DType::i64: return 7;
    case DType::boolean: return 9;
    case DType::f16: return 10;
    case DType::f64: return 11;
    case DType::bf16: return 16;
  }
  return 0;
}

// A CPU, contiguous tensor in the dtype it is written as (floating -> f32).
Tensor as_written(const Tensor& t) {
  const DType dtype = is_floating(t.dtype()) ? DType::f32 : t.dtype();
  if (dtype == t.dtype() && t.device().is_cpu() && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  out.copy_from(t);
  return out;
}

plugin::TensorData tensor_data(const std::string& name, const Tensor& t) {
  plugin::TensorData data;
  data.name = name;
  data.elem_type = element_type(t.dtype());
  data.dims = t.shape();
  data.data = t.data_ptr();
  data.bytes = int64_t(t.nbytes());
  return data;
}

plugin::ValueInfoData value_info(const std::string& name, DType dtype, const Dims& dims) {
  plugin::ValueInfoData info{name, element_type(dtype), {}};
  for (const Dim& d : dims) info.dims.push_back({d.size, d.symbol});
  return info;
}

// The plugin (Note [ONNX writer plugin] in plugin/graph_data.h), loaded once, from the folder
// of the library holding this code.
struct Writer {
  plugin::WriteFunction write = nullptr;
  std::string error;
};

const Writer& writer() {
  static const Writer loaded = [] {
    Writer w;
#ifdef LIBAI_SANITIZED_BUILD
    w.error =
        "the ONNX writer is loaded with RTLD_DEEPBIND, which the sanitizers' runtime "
        "does not support (build without LIBAI_SANITIZE)";
    return w;
#else
    Dl_info self{};
    if (!dladdr(reinterpret_cast<const void*>(&writer), &self) || !self.dli_fname) {
      w.error = "cannot find the folder of the library holding the ONNX export";
      return w;
    }
    const fs::path file = fs::path(self.dli_fname).parent_path() / plugin::kPluginFile;
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      const char* why = dlerror();
      w.error = "cannot load " + file.string() + ": " + (why ? why : "unknown error");
      return w;
    }
    w.write = reinterpret_cast<plugin::WriteFunction>(dlsym(handle, plugin::kWriteSymbol));
    if (!w.write) w.error = file.string() + " has no " + plugin::kWriteSymbol;
    return w;
#endif
  }();
  return loaded;
}

}  // namespace

bool writer_available(std::string* why) {
  if (why) *why = writer().error;
  return writer().write != nullptr;
}

struct GraphBuilder::Impl {
  plugin::GraphData graph;
  std::vector<std::pair<std::string, Tensor>> initializers;  // converted at write()
  std::vector<Tensor> attribute_tensors;                     // kept alive for their pointers
  std::set<std::string> names;                               // every value and node name
  std::map<std::string, int> counters;
  std::set<std::string> interface;  // input and output names
  bool written = false;
};

GraphBuilder::GraphBuilder(std::string graph_name, int opset)
    : impl_(std::make_unique<Impl>()), opset_(opset) {
  LIBAI_CHECK_KIND(Unsupported, opset >= 1 && opset <= kMaxOpset, "onnx: opset ", opset,
                   " is not supported (this build writes opsets up to ", kMaxOpset, ")");
  impl_->graph.name = std::move(graph_name);
  impl_->graph.producer_version = LIBAI_VERSION;
  impl_->graph.opset = opset;
}

GraphBuilder::~GraphBuilder() = default;

void GraphBuilder::require_opset(int minimum, const std::string& what) const {
  LIBAI_CHECK_KIND(Unsupported, opset_ >= minimum, "onnx: ", what, " needs opset ", minimum,
                   " or later, but opset ", opset_, " was asked (--opset ", minimum, " to ",
                   kMaxOpset, ")");
}

std::string GraphBuilder::scoped(const std::string& name) const {
  return scope_.empty() ? name : scope_ + "." + name;
}

std::string GraphBuilder::unique(const std::string& base) {
  std::string name = base;
  while (impl_->names.count(name)) name = base + "_" + std::to_string(++impl_->counters[base]);
  impl_->names.insert(name);
  return name;
}

Value GraphBuilder::input(const std::string& name, DType dtype, const Dims& dims) {
  LIBAI_CHECK(!impl_->names.count(name) && !impl_->interface.count(name), "onnx: graph input \"",
              name, "\" is declared twice");
  impl_->names.insert(name);
  impl_->interface.insert(name);
  impl_->graph.inputs.push_back(value_info(name, dtype, dims));
  return {name};
}

void GraphBuilder::output(const Value& value, const std::string& name, DType dtype,
                          const Dims& dims) {
  LIBAI_CHECK(value.defined(), "onnx: graph output \"", name, "\" has no value");
  LIBAI_CHECK(!impl_->interface.count(name), "onnx: graph output \"", name, "\" is declared twice");
  impl_->interface.insert(name);
  if (value.name != name) {
    LIBAI_CHECK(!impl_->names.count(name), "onnx: graph output \"", name,
                "\" names a value already in the graph");
    impl_->names.insert(name);
    impl_->graph.nodes.push_back({"Identity", unique("output." + name), {value.name}, {name}, {}});
  }
  impl_->graph.outputs.push_back(value_info(name, dtype, dims));
}

Value GraphBuilder::optional_input(const std::string& name, DType dtype, const Dims& dims,
                                   const Tensor& fallback) {
  LIBAI_CHECK(fallback.defined() && fallback.dtype() == dtype && fallback.dim() == int64_t(dims.size()),
              "onnx: optional input \"", name, "\" needs a default of its dtype and rank");
  const Value v = input(name, dtype, dims);
  impl_->initializers.emplace_back(name, fallback);
  return v;
}

Value GraphBuilder::initializer(const std::string& name, const Tensor& tensor) {
  LIBAI_CHECK(tensor.defined(), "onnx: initializer \"", name, "\" has no tensor");
  const std::string unique_name = unique(name);
  impl_->initializers.emplace_back(unique_name, tensor);
  return {unique_name};
}

Value GraphBuilder::ints(const std::vector<int64_t>& values, const std::string& hint) {
  return initializer(scoped(hint), Tensor::from_vector(values, {int64_t(values.size())}));
}

Value GraphBuilder::scalar(float value, const std::string& hint) {
  return initializer(scoped(hint), Tensor::full({}, value, DType::f32));
}

Value GraphBuilder::scalar_int(int64_t value, const std::string& hint) {
  return initializer(scoped(hint), Tensor::from_vector(std::vector<int64_t>{value}, {}));
}

std::vector<Value> GraphBuilder::op_n(const std::string& type, const std::vector<Value>& inputs,
                                      int outputs, const Attributes& attributes) {
  plugin::NodeData node;
  node.type = type;
  node.name = unique(scoped(type));
  for (const Value& v : inputs) node.inputs.push_back(v.name);
  std::vector<Value> results;
  for (int i = 0; i < outputs; ++i) {
    results.push_back({unique(node.name + ":" + std::to_string(i))});
    node.outputs.push_back(results.back().name);
  }
  for (const Attribute& a : attributes) {
    plugin::AttributeData data;
    data.name = a.name;
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            data.kind = plugin::AttributeKind::i;
            data.i = v;
          } else if constexpr (std::is_same_v<T, float>) {
            data.kind = plugin::AttributeKind::f;
            data.f = v;
          } else if constexpr (std::is_same_v<T, std::string>) {
            data.kind = plugin::AttributeKind::s;
            data.s = v;
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            data.kind = plugin::AttributeKind::ints;
            data.ints = v;
          } else if constexpr (std::is_same_v<T, std::vector<float>>) {
            data.kind = plugin::AttributeKind::floats;
            data.floats = v;
          } else {
            data.kind = plugin::AttributeKind::tensor;
            impl_->attribute_tensors.push_back(as_written(v));
            data.tensor = tensor_data("", impl_->attribute_tensors.back());
          }
        },
        a.data);
    node.attributes.push_back(std::move(data));
  }
  impl_->graph.nodes.push_back(std::move(node));
  return results;
}

Value GraphBuilder::op(const std::string& type, const std::vector<Value>& inputs,
                       const Attributes& attributes) {
  return op_n(type, inputs, 1, attributes)[0];
}

GraphBuilder::Scope::Scope(GraphBuilder& graph, const std::string& name)
    : graph_(graph), previous_(graph.scope_.size()) {
  graph_.scope_ = graph_.scoped(name);
}

GraphBuilder::Scope::~Scope() { graph_.scope_.resize(previous_); }

int64_t GraphBuilder::node_count() const { return int64_t(impl_->graph.nodes.size()); }

WriteSummary GraphBuilder::write(const fs::path& file, const WriteOptions& options) {
  LIBAI_ASSERT(!impl_->written, "onnx: GraphBuilder::write called twice");
  impl_->written = true;
  std::string unavailable;
  LIBAI_CHECK_KIND(Unsupported, writer_available(&unavailable), "onnx: ", unavailable);

  WriteSummary summary;
  summary.model = file;
  summary.nodes = node_count();
  summary.initializers = int64_t(impl_->initializers.size());
  for (const auto& v : impl_->graph.inputs) summary.inputs.push_back(v.name);
  for (const auto& v : impl_->graph.outputs) summary.outputs.push_back(v.name);

  std::vector<Tensor> written;  // keeps the converted tensors alive until the plugin returns
  for (auto& [name, t] : impl_->initializers) {
    written.push_back(as_written(t));
    impl_->graph.initializers.push_back(tensor_data(name, written.back()));
    summary.weight_bytes += int64_t(written.back().nbytes());
  }
  impl_->initializers.clear();
  const bool external = options.external_data || summary.weight_bytes > options.inline_limit_bytes;

  if (file.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    LIBAI_CHECK_KIND(IoError, !ec, "onnx: cannot create ", file.parent_path().string(), ": ",
                     ec.message());
  }
  plugin::WriteRequest request;
  request.graph = &impl_->graph;
  request.model_path = file.string();
  if (external) {
    summary.data = file.string() + ".data";
    request.data_location = summary.data.filename().string();
    std::ofstream data(summary.data, std::ios::binary | std::ios::trunc);
    LIBAI_CHECK_KIND(IoError, data.good(), "onnx: cannot write ", summary.data.string());
    int64_t offset = 0;
    static const char zeros[kExternalAlignment] = {};
    for (auto& t : impl_->graph.initializers) {
      if (t.bytes < kExternalMinBytes) continue;
      const int64_t pad = (kExternalAlignment - offset % kExternalAlignment) % kExternalAlignment;
      data.write(zeros, pad);
      data.write(static_cast<const char*>(t.data), t.bytes);
      t.external_offset = offset + pad;
      offset += pad + t.bytes;
    }
    data.close();
    LIBAI_CHECK_KIND(IoError, !data.fail(), "onnx: writing ", summary.data.string(), " failed");
  }
  plugin::WriteResult result;
  writer().write(request, result);
  if (result.error == 1) LIBAI_THROW(IoError, "onnx: ", result.message);
  if (result.error != 0)
    LIBAI_THROW(InternalError, "onnx: the exported graph ", file.string(),
                " is invalid: ", result.message);
  return summary;
}

}  // namespace libai::models::onnx
