#include "train/loss.h"

#include <vector>

#include "ops/ops.h"
#include "ops/vocab_parallel_cross_entropy.h"
#include "runtime/autograd.h"
#include "runtime/device_copy.h"

namespace libai::train {
namespace {

using models::Model;
using models::Task;
using models::TensorMap;

constexpr int64_t kIgnore = -100;

const Tensor& require_key(const TensorMap& batch, const std::string& key, const Model& model) {
  auto it = batch.find(key);
  LIBAI_CHECK(it != batch.end() && it->second.defined(), "compute_loss: the batch has no \"", key,
              "\", which a ", models::task_name(model.task()), " model (",
              model.config().model_type(), ") needs for its loss");
  return it->second;
}

std::vector<int64_t> host_ids(const Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), DType::i64);
  host.copy_from(t);
  return host.to_vector<int64_t>();
}

int64_t count_targets(const std::vector<int64_t>& labels) {
  int64_t n = 0;
  for (int64_t v : labels) n += v != kIgnore;
  return n;
}

// A differentiable cast to f32 (the loss is reported in f32 whatever the logits' dtype).
Tensor as_f32(const Tensor& x) {
  if (x.dtype() == DType::f32) return x;
  const DType from = x.dtype();
  return autograd::record(
      to_dtype(x.detach(), DType::f32), "loss_to_f32", {x},
      [from](const Tensor& g) { return std::vector<Tensor>{to_dtype(g, from)}; });
}

Tensor detached(const Tensor& t) { return t.detach(); }

// Cross-entropy of an LM head's output: the whole logits, or this rank's shard reduced over
// the tensor-parallel group (Note [Logits shard]). targets [...] i64 on the logits' device.
Tensor lm_cross_entropy(const Model& model, const TensorMap& out, const std::string& name,
                        const Tensor& targets, const LossOptions& options) {
  const ops::CrossEntropyOptions ce{.ignore_index = kIgnore,
                                    .label_smoothing = options.label_smoothing};
  auto shard = out.find("logits_shard");
  if (shard != out.end()) {
    const auto& layout = model.logits_shard_layout();
    return ops::vocab_parallel_cross_entropy(shard->second, targets, layout.vocab, layout.group,
                                             ce);
  }
  auto it = out.find(name);
  LIBAI_CHECK(it != out.end(), "compute_loss: the ", model.config().model_type(),
              " model returned no \"", name, "\"");
  return ops::cross_entropy(it->second, targets, ce);
}

Tensor ids_like(const std::vector<int64_t>& values, const Tensor& like) {
  Tensor host = Tensor::from_vector(values, like.shape());
  if (like.device().is_cpu()) return host;
  Tensor out = Tensor::empty(like.shape(), DType::i64, like.device());
  out.copy_from(host);
  return out;
}

void check_shape(const Tensor& labels, const Shape& want, const char* key, const Model& model) {
  LIBAI_CHECK(labels.shape() == want, "compute_loss: \"", key, "\" of shape ",
              shape_str(labels.shape()), " does not match the ", models::task_name(model.task()),
              " model's ", shape_str(want));
}

// Runs the model with its LM head in shard mode, restoring the flag after.
TensorMap run_model(Model& model, const TensorMap& inputs) {
  struct Restore {
    Model& model;
    bool previous;
    ~Restore() { model.set_logits_shard(previous); }
  } restore{model, model.logits_shard()};
  model.set_logits_shard(true);
  return model.forward(inputs);
}

TensorMap without(const TensorMap& batch, std::initializer_list<const char*> keys) {
  TensorMap inputs = batch;
  for (const char* k : keys) inputs.erase(k);
  return inputs;
}

LossOutput causal_lm(Model& model, const TensorMap& batch, const LossOptions& options) {
  const Tensor& ids = require_key(batch, "input_ids", model);
  LIBAI_CHECK(ids.dim() == 2, "compute_loss: input_ids should be [batch, seq], got ",
              shape_str(ids.shape()));
  const int64_t rows = ids.size(0), seq = ids.size(1);
  auto pre_shifted = batch.find("shifted_labels");
  if (pre_shifted != batch.end() && pre_shifted->second.defined()) {
    // Targets already aligned with the positions (packed samples: Megatron's labels).
    LIBAI_CHECK(!batch.count("labels"),
                "compute_loss: give either \"labels\" or "
                "\"shifted_labels\" to a causal_lm model, not both");
    check_shape(pre_shifted->second, ids.shape(), "shifted_labels", model);
    const auto targets = host_ids(pre_shifted->second);
    TensorMap out = run_model(model, without(batch, {"shifted_labels"}));
    LossOutput result;
    result.loss = as_f32(lm_cross_entropy(model, out, "logits", ids_like(targets, ids), options));
    result.targets = count_targets(targets);
    return result;
  }
  std::vector<int64_t> labels;
  auto given = batch.find("labels");
  if (given != batch.end() && given->second.defined()) {
    check_shape(given->second, ids.shape(), "labels", model);
    labels = host_ids(given->second);
  } else {
    labels = host_ids(ids);
    auto mask = batch.find("attention_mask");
    if (mask != batch.end() && mask->second.defined()) {
      check_shape(mask->second, ids.shape(), "attention_mask", model);
      const auto keep = host_ids(mask->second);
      for (size_t i = 0; i < labels.size(); ++i)
        if (keep[i] == 0) labels[i] = kIgnore;
    }
  }
  // Position j predicts token j + 1: the targets are the labels moved left, -100 last.
  std::vector<int64_t> shifted(labels.size(), kIgnore);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t j = 0; j + 1 < seq; ++j) shifted[b * seq + j] = labels[b * seq + j + 1];
  TensorMap out = run_model(model, without(batch, {"labels"}));
  LossOutput result;
  result.loss = as_f32(lm_cross_entropy(model, out, "logits", ids_like(shifted, ids), options));
  result.targets = count_targets(shifted);
  return result;
}

LossOutput masked_lm(Model& model, const TensorMap& batch, const LossOptions& options) {
  const Tensor& labels = require_key(batch, "labels", model);
  check_shape(labels, require_key(batch, "input_ids", model).shape(), "labels", model);
  TensorMap out = run_model(model, without(batch, {"labels"}));
  LossOutput result;
  result.loss =
      as_f32(lm_cross_entropy(model, out, "logits", to_dtype(labels, DType::i64), options));
  result.targets = count_targets(host_ids(labels));
  return result;
}

LossOutput pretraining(Model& model, const TensorMap& batch, const LossOptions& options) {
  const Tensor& labels = require_key(batch, "labels", model);
  const Tensor& next = require_key(batch, "next_sentence_label", model);
  const Tensor& ids = require_key(batch, "input_ids", model);
  check_shape(labels, ids.shape(), "labels", model);
  LIBAI_CHECK(next.numel() == ids.size(0), "compute_loss: \"next_sentence_label\" of shape ",
              shape_str(next.shape()), " should hold one label per sample (", ids.size(0), ")");
  TensorMap out = run_model(model, without(batch, {"labels", "next_sentence_label"}));
  Tensor mlm = as_f32(
      lm_cross_entropy(model, out, "prediction_logits", to_dtype(labels, DType::i64), options));
  const ops::CrossEntropyOptions ce{.ignore_index = kIgnore,
                                    .label_smoothing = options.label_smoothing};
  Tensor nsp =
      as_f32(ops::cross_entropy(out.at("seq_relationship_logits"),
                                ops::reshape(to_dtype(next, DType::i64), {ids.size(0)}), ce));
  LossOutput result;
  result.loss = mlm + nsp;
  result.parts = {{"mlm_loss", detached(mlm)}, {"nsp_loss", detached(nsp)}};
  result.targets = count_targets(host_ids(labels)) + count_targets(host_ids(next));
  return result;
}

// Hugging Face's problem_type rules for sequence and image classification.
LossOutput classification(Model& model, const TensorMap& batch, const LossOptions& options) {
  const Tensor& labels = require_key(batch, "labels", model);
  TensorMap out = run_model(model, without(batch, {"labels"}));
  const Tensor& logits = out.at("logits");  // [batch, num_labels]
  const int64_t num_labels = logits.size(-1);
  std::string problem = model.config().get_string("problem_type", "");
  const bool integer = labels.dtype() == DType::i64 || labels.dtype() == DType::i32;
  if (problem.empty())
    problem = num_labels == 1 ? "regression"
              : integer       ? "single_label_classification"
                              : "multi_label_classification";
  LossOutput result;
  if (problem == "regression") {
    LIBAI_CHECK(labels.numel() == logits.numel(), "compute_loss: regression \"labels\" of shape ",
                shape_str(labels.shape()), " do not match the logits ", shape_str(logits.shape()));
    Tensor diff = ops::reshape(as_f32(logits), {logits.numel()}) -
                  ops::reshape(to_dtype(labels, DType::f32), {logits.numel()});
    result.loss = ops::mean_all(diff * diff);
    result.targets = labels.numel();
    return result;
  }
  LIBAI_CHECK_KIND(Unsupported, problem == "single_label_classification",
                   "compute_loss: problem_type \"", problem, "\" (", num_labels,
                   " labels, labels of dtype ", labels.dtype(),
                   ") is not supported; give i64 class labels for single-label classification");
  LIBAI_CHECK(integer, "compute_loss: single-label classification needs i64 \"labels\", got ",
              labels.dtype());
  LIBAI_CHECK(labels.numel() == logits.size(0), "compute_loss: \"labels\" of shape ",
              shape_str(labels.shape()), " should hold one class per sample (", logits.size(0),
              ")");
  const ops::CrossEntropyOptions ce{.ignore_index = kIgnore,
                                    .label_smoothing = options.label_smoothing};
  result.loss = as_f32(
      ops::cross_entropy(logits, ops::reshape(to_dtype(labels, DType::i64), {logits.size(0)}), ce));
  result.targets = count_targets(host_ids(labels));
  result.logits = logits.detach();
  return result;
}

LossOutput seq2seq_lm(Model& model, const TensorMap& batch, const LossOptions& options) {
  const Tensor& labels = require_key(batch, "labels", model);
  LIBAI_CHECK(labels.dim() == 2, "compute_loss: labels should be [batch, target_len], got ",
              shape_str(labels.shape()));
  TensorMap inputs = without(model_inputs(model, batch), {"labels"});
  TensorMap out = run_model(model, inputs);
  LossOutput result;
  result.loss =
      as_f32(lm_cross_entropy(model, out, "logits", to_dtype(labels, DType::i64), options));
  result.targets = count_targets(host_ids(labels));
  return result;
}

}  // namespace

TensorMap model_inputs(const models::Model& model, const TensorMap& batch) {
  if (model.task() != Task::seq2seq_lm || !model.part().is_first()) return batch;
  auto given = batch.find("decoder_input_ids");
  if (given != batch.end() && given->second.defined()) return batch;
  const Tensor& labels = require_key(batch, "labels", model);
  LIBAI_CHECK(labels.dim() == 2, "compute_loss: labels should be [batch, target_len], got ",
              shape_str(labels.shape()));
  const auto& c = model.config();
  LIBAI_CHECK(c.has("decoder_start_token_id") && c.has("pad_token_id"), c.path(),
              ": decoder_start_token_id and pad_token_id are needed to build decoder_input_ids "
              "from labels");
  const int64_t start = c.get_int("decoder_start_token_id", 0), pad = c.get_int("pad_token_id", 0);
  const auto values = host_ids(labels);
  const int64_t rows = labels.size(0), length = labels.size(1);
  std::vector<int64_t> shifted(values.size());
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t j = 0; j < length; ++j) {
      const int64_t v = j == 0 ? start : values[b * length + j - 1];
      shifted[b * length + j] = v == kIgnore ? pad : v;
    }
  TensorMap inputs = batch;
  inputs["decoder_input_ids"] = ids_like(shifted, labels);
  return inputs;
}

LossOutput compute_loss(models::Model& model, const models::TensorMap& batch,
                        const LossOptions& options) {
  switch (model.task()) {
    case Task::causal_lm: return causal_lm(model, batch, options);
    case Task::masked_lm: return masked_lm(model, batch, options);
    case Task::pretraining: return pretraining(model, batch, options);
    case Task::sequence_classification:
    case Task::image_classification: return classification(model, batch, options);
    case Task::seq2seq_lm: return seq2seq_lm(model, batch, options);
    case Task::encoder: break;
  }
  LIBAI_CHECK_KIND(Unsupported, false, "compute_loss: a ", models::task_name(model.task()),
                   " model (", model.config().model_type(), ") has no loss head");
  return {};
}

}  // namespace libai::train
