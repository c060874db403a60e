// Task pipelines: a model folder (config.json, weights, tokenizer files) in, answers out.
// The C++ API behind `libai-actor generate | embed | fill-mask | classify`.
//
//   auto m = pipelines::TextModel::load("all-MiniLM-L6-v2/");
//   auto vectors = pipelines::embed(m, {"A cat sits.", "A dog runs."});   // unit vectors
//   auto gpt2 = pipelines::TextModel::load("gpt2/");
//   generation::GenerationConfig g;  g.max_new_tokens = 20;
//   auto out = pipelines::generate_text(gpt2, {"Hello, my name is"}, g);   // out[0].text
//   auto bert = pipelines::TextModel::load("bert-base-uncased/");
//   auto guesses = pipelines::fill_mask(bert, "Paris is the [MASK] of France.", 5);
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/generation/generate.h"
#include "models/model.h"
#include "models/tokenizers/tokenizer.h"

namespace libai::models::pipelines {

class TextModel {
 public:
  static TextModel load(const std::filesystem::path& folder, const LoadOptions& options = {});
  Model& model() { return *model_; }
  // A folder without tokenizer files loads (generate_ids needs none); tokenizer() then throws
  // NotFound naming the folder, so a text input is refused with that one message.
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const tokenizers::Tokenizer& tokenizer() const;
  const std::filesystem::path& folder() const { return folder_; }
  const nlohmann::json& config_json() const { return model_->config().json(); }

 private:
  std::filesystem::path folder_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<tokenizers::Tokenizer> tokenizer_;
};

// Token ids of a batch of texts, padded (right) into [batch, len] i64 tensors.
struct EncodedBatch {
  Tensor input_ids, attention_mask, token_type_ids;
};
EncodedBatch encode_batch(const tokenizers::Tokenizer& tokenizer, const std::vector<std::string>& texts,
                          size_t max_length);

struct GeneratedText {
  std::string prompt;
  std::vector<int64_t> token_ids;  // decoder-only: prompt + new tokens; seq2seq: new tokens
  std::string text;                // the decoded new tokens; empty without a tokenizer
  double score = 0;
};
// eos / pad / decoder start default to the model folder's generation_config.json or
// config.json when `config` leaves them unset. One result per prompt and returned sequence.
std::vector<GeneratedText> generate_text(TextModel& m, const std::vector<std::string>& prompts,
                                         generation::GenerationConfig config);
std::vector<GeneratedText> generate_ids(TextModel& m, const std::vector<std::vector<int64_t>>& prompts,
                                        generation::GenerationConfig config);
// Fills eos_token_ids / pad_token_id from the folder's generation_config.json or config.json.
void complete_generation_config(const TextModel& m, generation::GenerationConfig& config);
void complete_generation_config(const std::filesystem::path& folder, const nlohmann::json& model_config,
                                generation::GenerationConfig& config);

// Sentence embeddings as sentence-transformers computes them for mean-pooling models: the
// encoder's last hidden state averaged over real tokens, then scaled to unit length. Texts
// are truncated to sentence_bert_config.json's max_seq_length (else the model's limit).
//
// Texts are batched longest first (by token count, stable), as sentence-transformers batches
// them, so that a batch pads little; the vectors come back in the order of `texts`.
struct EmbedOptions {
  size_t batch_size = 32;
  bool sort_by_length = true;  // false: batches in input order (the same vectors, more padding)
  std::function<void(size_t texts)> on_batch;  // called after each batch with its size
};
std::vector<std::vector<float>> embed(TextModel& m, const std::vector<std::string>& texts,
                                      const EmbedOptions& options);
std::vector<std::vector<float>> embed(TextModel& m, const std::vector<std::string>& texts,
                                      size_t batch_size = 32);
// The pooling of embed(): last_hidden_state [batch, seq, hidden] averaged over the rows'
// real tokens (attention_mask [batch, seq]), each row then scaled to unit length.
std::vector<std::vector<float>> mean_pool_normalize(const Tensor& last_hidden_state,
                                                    const Tensor& attention_mask);
// The longest input embed() gives the model: sentence_bert_config.json's max_seq_length when
// smaller than the model's max_position_embeddings.
size_t embedding_max_length(const std::filesystem::path& folder, const HfConfig& config);
double cosine(const std::vector<float>& a, const std::vector<float>& b);

struct MaskGuess {
  int64_t token_id = 0;
  std::string token;
  double score = 0;      // softmax probability
  std::string sequence;  // the text with this guess in place of the mask
};
// For each mask token in `text`, the top_k guesses, best first. InvalidArgument when the text
// has no mask token (naming the model's mask token).
std::vector<std::vector<MaskGuess>> fill_mask(TextModel& m, const std::string& text, int64_t top_k = 5);

struct LabelScore {
  std::string label;
  double score = 0;  // softmax probability
};
// Labels from config.json's id2label (LABEL_i when absent), sorted by score.
std::vector<LabelScore> scores_from_logits(const Model& model, const Tensor& logits_row);
std::vector<LabelScore> classify_text(TextModel& m, const std::string& text);

}  // namespace libai::models::pipelines
