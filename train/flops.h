// Floating-point operations a training step does per token, for the achieved GFLOP/s the
// console and TensorBoard show (scalar "gflops" = flops per token x tokens per second / 1e9).
//
//   double per_token = train::training_flops_per_token(hf_config, /*sequence=*/1024);
//   double gflops = per_token * tokens_per_second / 1e9;
//
// Note [Training FLOPs per token]
// Megatron-LM's count (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
// on GPU Clusters using Megatron-LM", appendix), which counts matrix products only:
//   forward  = 2 x P + 4 x A x W x S     per token
//   training = 3 x forward               (backward: gradients of inputs and of weights)
//            = 6 x P + 12 x A x W x S
// P: the parameters of every matrix a token goes through (attention q, k, v, output; the MLP;
//    the LM head's vocab x hidden, tied or not, as that product runs per token), not the
//    embedding lookups, biases or norms;
// A: attention blocks (layers; a T5 decoder layer has two: self and cross);
// W: attention width (heads x head dim); S: the keys each query sees (the sequence length;
//    causal masking is not discounted, as in Megatron).
// For GPT-2 this is Megatron's 72 l h^2 (1 + S / 6h + V / 12 l h). These are model FLOPs:
// activation checkpointing's second forward is not counted, so achieved GFLOP/s compares
// configurations by useful work (as "MFU" does).
#pragma once

#include <cstdint>

#include "models/hf_config.h"

namespace libai::train {

double training_flops_per_token(double matrix_parameters, int64_t attention_blocks,
                                int64_t attention_width, int64_t sequence);

// P, A and W as the config's model family declares them (models/family.h, FlopsShape):
//   gpt2                 l x (4 h^2 + 2 h ff) + V h (the tied LM head)
//   bert, roberta        l x (4 h^2 + 2 h ff) + h^2 + V h (the masked-LM head's transform and
//                        decoder, on every position as Hugging Face computes them)
//   t5, mt5              per position of source and target together (both `sequence` long):
//                        encoder layers (4 h w + 2 or 3 h ff) + decoder layers (8 h w + 2 or 3
//                        h ff) + V h; A = encoder layers + 2 x decoder layers
//   vit                  l x (4 h^2 + 2 h ff) + channels x patch area x h (the patch
//                        projection); S = patches + 1 from image_size and patch_size
//                        (`sequence` is ignored; pass 0)
// Unsupported for a family that declares no count.
double training_flops_per_token(const models::HfConfig& config, int64_t sequence);

}  // namespace libai::train
