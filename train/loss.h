// The loss head of each task, with Hugging Face's semantics: what `model(**batch).loss` is in
// transformers for the same batch, differentiable w.r.t. the model's parameters.
//
//   auto out = train::compute_loss(*model, {{"input_ids", ids}, {"labels", labels}});
//   autograd::backward(out.loss);        // scalar f32: the mean over the batch's targets
//   out.parts.at("mlm_loss");            // BERT pretraining also reports its two terms
//
// Per task (the batch's keys; a missing one raises an error naming it and the task):
//   causal_lm (GPT-2)        input_ids, optional labels (default: input_ids, with positions whose
//                            attention_mask is 0 set to -100, as Hugging Face's LM collator does);
//                            position j predicts labels[j + 1]; -100 is ignored. Or
//                            shifted_labels instead of labels: position j predicts
//                            shifted_labels[j] (packed samples of seq + 1 tokens, whose last
//                            position has a target: Megatron's; train/data/gpt_dataset.h)
//   masked_lm (BERT, RoBERTa) labels, -100 ignored
//   pretraining (BERT)       labels + next_sentence_label: loss = mlm_loss + nsp_loss
//   sequence_classification  labels: config.problem_type, else num_labels == 1 -> MSE on
//   image_classification     float labels (regression), num_labels > 1 with i64 labels ->
//                            cross-entropy; multi-label (BCE) is not supported
//   seq2seq_lm (T5, MT5)     labels; decoder_input_ids, when absent, is labels shifted right
//                            behind decoder_start_token_id with -100 replaced by pad_token_id
// The model's inputs are the batch's other keys, passed through.
//
// Under tensor parallelism the LM heads hand this rank's logits shard to the loss
// (Note [Logits shard] in models/model.h), which reduces over the group without gathering the
// logits (ops/vocab_parallel_cross_entropy.h); every rank gets the same loss.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "models/model.h"

namespace libai::train {

struct LossOptions {
  double label_smoothing = 0.0;  // cross-entropy terms only (PyTorch's label_smoothing)
};

struct LossOutput {
  Tensor loss;  // scalar f32, differentiable: the mean over the batch's targets
  std::map<std::string, Tensor>
      parts;            // detached scalars, e.g. "mlm_loss", "nsp_loss" (BERT pretraining)
  int64_t targets = 0;  // targets that counted (labels != -100)
  Tensor logits;        // classification tasks: the logits, detached (accuracy without a
                        // second forward); undefined for the others
};

LossOutput compute_loss(models::Model& model, const models::TensorMap& batch,
                        const LossOptions& options = {});

// What `model` is run on for `batch`'s loss: the batch itself, except that a seq2seq model's
// first part (or whole model) without decoder_input_ids gets them from labels as above. A
// pipeline's first stage, which does not compute the loss, feeds its part this.
models::TensorMap model_inputs(const models::Model& model, const models::TensorMap& batch);

}  // namespace libai::train
