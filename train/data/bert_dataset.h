// BERT pretraining samples (Megatron's BertDataset semantics): two segments of consecutive
// sentences of a document, swapped half of the time (next_sentence_label 1, "B is not A's
// continuation"), [CLS] A [SEP] B [SEP] padded to seq_length, and masked-LM targets.
//
//   data::BertDataset dataset(sentences, documents, {.seq_length = 128, .vocab_size = 30522,
//                                                    .tokens = {.cls = 101, .sep = 102,
//                                                               .mask = 103, .pad = 0}});
//   auto s = dataset.get(i);  // input_ids, token_type_ids, attention_mask, labels [seq_length]
//                             // next_sentence_label [] (i64): BertForPreTraining's batch keys
//
// Note [BERT sample construction]:
//  - chunks: each document's sentences are grouped greedily into chunks of at least two
//    sentences holding up to seq_length - 3 tokens (a chunk ends once it reaches that size or
//    the document ends; a last one-sentence chunk is dropped). Sample i uses chunk i mod chunks.
//  - A = the chunk's first a sentences, a uniform in [1, sentences - 1], B = the rest; with
//    probability 1/2 they are swapped and next_sentence_label = 1 (Megatron's random next).
//  - while A + B exceed seq_length - 3 tokens, the longer one (B on a tie) loses a token from
//    its front or its back, 1/2 each (Megatron's truncate_seq_pair).
//  - masked LM: round(tokens x masked_lm_prob) of the non-special positions (at least one),
//    chosen uniformly; each becomes [MASK] with probability 0.8, a uniform token of
//    [0, vocab_size) with 0.1, stays with 0.1; labels hold the original token there, -100
//    elsewhere.
//  - every draw comes from SampleRng(seed, "bert_pretraining", i): samples are reproducible
//    one by one (resume), whatever was drawn before.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "train/data/dataset.h"

namespace libai::train::data {

struct BertSpecialTokens {
  int64_t cls = 101, sep = 102, mask = 103, pad = 0;  // bert-base-uncased's
};

struct BertDatasetOptions {
  int64_t seq_length = 512;
  int64_t vocab_size = 30522;
  BertSpecialTokens tokens;
  double masked_lm_prob = 0.15;
  int64_t num_samples = 0;  // 0: one sample per chunk
  uint64_t seed = 1234;
};

class BertDataset : public Dataset {
 public:
  // sentences: one sequence per sentence; document_indices: Megatron's document index
  // (0, then the end of each document in sentences).
  BertDataset(std::shared_ptr<const TokenSource> sentences, std::vector<int64_t> document_indices,
              BertDatasetOptions options);

  int64_t size() const override { return size_; }
  models::TensorMap get(int64_t index) const override;
  int64_t num_chunks() const { return int64_t(chunks_.size()); }

 private:
  struct Chunk {
    int64_t begin, end;  // sentences
  };
  std::shared_ptr<const TokenSource> sentences_;
  BertDatasetOptions options_;
  std::vector<Chunk> chunks_;
  int64_t size_ = 0;
};

}  // namespace libai::train::data
