// The ONNX writer plugin (Note [ONNX writer plugin] in graph_data.h): GraphData to a
// ModelProto, strict shape inference, the file, then onnx::checker on the written file.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <fstream>

#include "models/onnx/plugin/graph_data.h"

namespace {

namespace pb = ::onnx;
using namespace libai::models::onnx::plugin;

void fill_tensor(pb::TensorProto& proto, const TensorData& t, const std::string& location) {
  proto.set_name(t.name);
  proto.set_data_type(t.elem_type);
  for (int64_t d : t.dims) proto.add_dims(d);
  if (t.external_offset < 0) {
    proto.set_raw_data(t.data, size_t(t.bytes));
    return;
  }
  proto.set_data_location(pb::TensorProto_DataLocation_EXTERNAL);
  auto entry = [&](const char* key, const std::string& value) {
    auto* e = proto.add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  entry("location", location);
  entry("offset", std::to_string(t.external_offset));
  entry("length", std::to_string(t.bytes));
}

void fill_value(pb::ValueInfoProto& info, const ValueInfoData& v) {
  info.set_name(v.name);
  auto* type = info.mutable_type()->mutable_tensor_type();
  type->set_elem_type(v.elem_type);
  auto* shape = type->mutable_shape();
  for (const DimData& d : v.dims) {
    auto* dim = shape->add_dim();
    if (d.symbol.empty())
      dim->set_dim_value(d.size);
    else
      dim->set_dim_param(d.symbol);
  }
}

void fill_attribute(pb::AttributeProto& proto, const AttributeData& a) {
  proto.set_name(a.name);
  switch (a.kind) {
    case AttributeKind::i:
      proto.set_type(pb::AttributeProto_AttributeType_INT);
      proto.set_i(a.i);
      break;
    case AttributeKind::f:
      proto.set_type(pb::AttributeProto_AttributeType_FLOAT);
      proto.set_f(a.f);
      break;
    case AttributeKind::s:
      proto.set_type(pb::AttributeProto_AttributeType_STRING);
      proto.set_s(a.s);
      break;
    case AttributeKind::ints:
      proto.set_type(pb::AttributeProto_AttributeType_INTS);
      for (int64_t x : a.ints) proto.add_ints(x);
      break;
    case AttributeKind::floats:
      proto.set_type(pb::AttributeProto_AttributeType_FLOATS);
      for (float x : a.floats) proto.add_floats(x);
      break;
    case AttributeKind::tensor:
      proto.set_type(pb::AttributeProto_AttributeType_TENSOR);
      fill_tensor(*proto.mutable_t(), a.tensor, "");
      break;
  }
}

pb::ModelProto to_model(const GraphData& g, const std::string& location) {
  pb::ModelProto m;
  m.set_ir_version(pb::IR_VERSION);
  m.set_producer_name("libai-actor");
  m.set_producer_version(g.producer_version);
  auto* import = m.add_opset_import();
  import->set_domain("");
  import->set_version(g.opset);
  auto* graph = m.mutable_graph();
  graph->set_name(g.name);
  for (const auto& v : g.inputs) fill_value(*graph->add_input(), v);
  for (const auto& v : g.outputs) fill_value(*graph->add_output(), v);
  for (const auto& t : g.initializers) fill_tensor(*graph->add_initializer(), t, location);
  for (const auto& n : g.nodes) {
    auto* node = graph->add_node();
    node->set_op_type(n.type);
    node->set_name(n.name);
    for (const auto& i : n.inputs) node->add_input(i);
    for (const auto& o : n.outputs) node->add_output(o);
    for (const auto& a : n.attributes) fill_attribute(*node->add_attribute(), a);
  }
  return m;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void libai_onnx_write(const WriteRequest& request,
                                                                        WriteResult& result) {
  pb::ModelProto model = to_model(*request.graph, request.data_location);
  // Strict shape inference first: an exporter's type or rank mistake is named by node here,
  // where the checker alone would pass it (it checks structure, not types).
  try {
    pb::ShapeInferenceOptions strict{/*check_type=*/true, /*error_mode=*/1,
                                     /*enable_data_propagation=*/false};
    pb::shape_inference::InferShapes(model, pb::OpSchemaRegistry::Instance(), strict);
  } catch (const std::exception& e) {
    result = {2, std::string("the graph fails ONNX shape inference: ") + e.what()};
    return;
  }
  {
    std::ofstream out(request.model_path, std::ios::binary | std::ios::trunc);
    if (!out.good() || !model.SerializeToOstream(&out)) {
      result = {1, "cannot write " + request.model_path};
      return;
    }
  }
  try {
    // With external data, the written file, so that the data file is checked too; without,
    // the model in memory (reading back a large file would double the time and memory).
    if (request.data_location.empty())
      pb::checker::check_model(model);
    else
      pb::checker::check_model(request.model_path);
  } catch (const std::exception& e) {
    result = {2, std::string("onnx::checker rejects it: ") + e.what()};
    return;
  }
  result = {};
}
