#include "actors/jobs/distributed_model.h"

#include "actors/messages.h"
#include "actors/jobs/model_jobs.h"
#include "ops/ops.h"
#include "runtime/logging.h"

namespace libai::actors {

std::vector<int> even_stage_of(int num_layers, int stages) {
  LIBAI_CHECK(stages >= 1 && stages <= num_layers, "cannot cut ", num_layers, " layers into ",
              stages, " pipeline stages");
  std::vector<int> stage_of;
  for (int s = 0; s < stages; ++s) {
    const int count = num_layers / stages + (s < num_layers % stages ? 1 : 0);
    stage_of.insert(stage_of.end(), size_t(count), s);
  }
  return stage_of;
}

DistributedModel::DistributedModel(const std::filesystem::path& folder,
                                   const DistributedModelOptions& options)
    : config_(models::HfConfig::load(folder)) {
  const LayoutSizes& sizes = options.sizes;
  LIBAI_CHECK(sizes.dp >= 1 && sizes.pp >= 1 && sizes.tp >= 1, folder.string(),
              ": a distributed model needs dp, pp and tp of at least 1, got dp ", sizes.dp,
              ", pp ", sizes.pp, ", tp ", sizes.tp);
  const int groups = options.groups > 0 ? options.groups : sizes.dp * sizes.pp;
  LIBAI_CHECK(groups >= sizes.dp, folder.string(), ": ", groups,
              " groups leave some of the ", sizes.dp, " replicas without work");
  const int layers = models::stages::pipeline_num_layers(config_);
  std::vector<int> stage_of =
      options.stage_of.empty() ? even_stage_of(layers, sizes.pp) : options.stage_of;
  LIBAI_CHECK(int(stage_of.size()) == layers, folder.string(), ": stage_of lists ",
              stage_of.size(), " layers, the model has ", layers);
  LIBAI_CHECK(stage_of.back() == sizes.pp - 1, folder.string(), ": stage_of puts the last layer on stage ",
              stage_of.back(), " of ", sizes.pp);
  layout_ = make_layout(sizes, groups);
  layout_.by_arrival = true;  // forward() may be called again and again
  system_config_ = std::make_unique<caf::actor_system_config>();
  configure_actor_system(*system_config_);
  system_ = std::make_unique<caf::actor_system>(*system_config_);
  pipeline_ = std::make_unique<LocalPipeline>(
      *system_, layout_, model_stage_factory(folder, layout_, stage_of, options.dtype));
  next_step_.assign(size_t(groups), 0);
}

DistributedModel::~DistributedModel() {
  try {
    auto& client = pipeline_->client();
    if (!client.failed()) {
      for (int g = 0; g < int(next_step_.size()); ++g)
        client.submit(layout_.replica_of_group(g),
                      Packet{.group = g, .step = next_step_[size_t(g)], .done = true, .tensors = {}});
    }
    pipeline_->wait();
  } catch (const std::exception& e) {
    logger("actors")->warn("distributed model: {}", e.what());  // a destructor does not throw
  }
}

models::TensorMap DistributedModel::forward(const models::TensorMap& inputs) {
  LIBAI_CHECK(!inputs.empty(), config_.path(), ": forward was given no inputs");
  int64_t batch = -1;
  for (const auto& [name, t] : inputs) {
    LIBAI_CHECK(t.dim() >= 1, config_.path(), ": input ", name,
                " has no batch dimension (a distributed model cuts every input by rows)");
    if (batch < 0) batch = t.size(0);
    LIBAI_CHECK(t.size(0) == batch, config_.path(), ": input ", name, " has ", t.size(0),
                " rows, the others ", batch);
  }
  LIBAI_CHECK(batch > 0, config_.path(), ": forward was given an empty batch");
  const int64_t parts = std::min<int64_t>(batch, int64_t(next_step_.size()));
  auto& client = pipeline_->client();
  for (int64_t g = 0, start = 0; g < parts; ++g) {
    const int64_t rows = batch / parts + (g < batch % parts ? 1 : 0);
    models::TensorMap micro;
    for (const auto& [name, t] : inputs) micro[name] = ops::contiguous(ops::narrow(t, 0, start, rows));
    start += rows;
    client.submit(layout_.replica_of_group(int(g)),
                  Packet{.group = int(g), .step = next_step_[size_t(g)]++, .done = false,
                         .tensors = std::move(micro)});
  }
  std::vector<models::TensorMap> outputs;
  for (int64_t g = 0; g < parts; ++g) outputs.push_back(client.wait(int(g)).tensors);
  if (parts == 1) return outputs.front();
  models::TensorMap out;
  for (const auto& [name, first] : outputs.front()) {
    if (first.dim() == 0) {
      out[name] = first;
      continue;
    }
    std::vector<Tensor> pieces;
    for (const auto& o : outputs) {
      auto it = o.find(name);
      LIBAI_CHECK(it != o.end(), config_.path(), ": the last stage returned ", name,
                  " for some micro-batches only");
      pieces.push_back(it->second);
    }
    out[name] = ops::cat(pieces, 0);
  }
  return out;
}

}  // namespace libai::actors
