#include "models/pipelines/pipelines.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models::pipelines {

namespace fs = std::filesystem;

TextModel TextModel::load(const fs::path& folder, const LoadOptions& options) {
  TextModel m;
  m.folder_ = folder;
  m.model_ = load_model(folder, options);
  if (tokenizers::has_tokenizer(folder)) m.tokenizer_ = tokenizers::load_tokenizer(folder);
  return m;
}

const tokenizers::Tokenizer& TextModel::tokenizer() const {
  if (tokenizer_ == nullptr) tokenizers::throw_no_tokenizer(folder_);
  return *tokenizer_;
}

namespace {

// Encodings of equal length as [batch, len] tensors.
EncodedBatch batch_tensors(const std::vector<tokenizers::Encoding>& encodings) {
  const int64_t batch = int64_t(encodings.size());
  const int64_t len = batch ? int64_t(encodings[0].ids.size()) : 0;
  std::vector<int64_t> ids, mask;
  for (const auto& e : encodings) {
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    mask.insert(mask.end(), e.attention_mask.begin(), e.attention_mask.end());
  }
  return {Tensor::from_vector(ids, {batch, len}), Tensor::from_vector(mask, {batch, len}),
          Tensor::zeros({batch, len}, DType::i64)};
}

tokenizers::EncodeOptions truncated_to(size_t max_length) {
  tokenizers::EncodeOptions options;
  options.truncation = max_length > 0;
  options.max_length = max_length;
  return options;
}

}  // namespace

EncodedBatch encode_batch(const tokenizers::Tokenizer& tokenizer, const std::vector<std::string>& texts,
                          size_t max_length) {
  tokenizers::EncodeOptions options = truncated_to(max_length);
  options.padding = tokenizers::Padding::longest;
  return batch_tensors(tokenizer.encode_batch(texts, options));
}

namespace {

nlohmann::json read_json_if_exists(const fs::path& path) {
  if (!fs::exists(path)) return nlohmann::json::object();
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    LIBAI_CHECK_KIND(CorruptInput, false, path.string(), " is not valid JSON: ", e.what());
  }
  return {};
}

std::vector<int64_t> int_list(const nlohmann::json& j) {
  if (j.is_number_integer()) return {j.get<int64_t>()};
  std::vector<int64_t> out;
  if (j.is_array())
    for (const auto& x : j)
      if (x.is_number_integer()) out.push_back(x.get<int64_t>());
  return out;
}

}  // namespace

void complete_generation_config(const TextModel& m, generation::GenerationConfig& config) {
  complete_generation_config(m.folder(), m.config_json(), config);
}

void complete_generation_config(const fs::path& folder, const nlohmann::json& model_cfg,
                                generation::GenerationConfig& config) {
  const auto gen = read_json_if_exists(folder / "generation_config.json");
  auto pick = [&](const char* key) -> nlohmann::json {
    if (gen.contains(key) && !gen[key].is_null()) return gen[key];
    if (model_cfg.contains(key) && !model_cfg[key].is_null()) return model_cfg[key];
    return nullptr;
  };
  if (config.eos_token_ids.empty()) config.eos_token_ids = int_list(pick("eos_token_id"));
  if (!config.pad_token_id) {
    auto pad = int_list(pick("pad_token_id"));
    if (!pad.empty()) config.pad_token_id = pad[0];
    else if (!config.eos_token_ids.empty()) config.pad_token_id = config.eos_token_ids[0];
  }
}

std::vector<GeneratedText> generate_ids(TextModel& m, const std::vector<std::vector<int64_t>>& prompts,
                                        generation::GenerationConfig config) {
  auto* lm = m.model().generative();
  LIBAI_CHECK_KIND(Unsupported, lm != nullptr, m.folder().string(), ": a ",
                   task_name(m.model().task()), " model cannot generate text");
  complete_generation_config(m, config);
  auto results = generation::generate(*lm, prompts, config);
  std::vector<GeneratedText> out;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (const auto& seq : results[p]) {
      GeneratedText g;
      if (!lm->is_encoder_decoder()) g.token_ids = prompts[p];
      g.token_ids.insert(g.token_ids.end(), seq.tokens.begin(), seq.tokens.end());
      if (m.has_tokenizer())
        g.text = m.tokenizer().decode(std::vector<int32_t>(seq.tokens.begin(), seq.tokens.end()),
                                      /*skip_special_tokens=*/true);
      g.score = seq.score;
      out.push_back(std::move(g));
    }
  }
  return out;
}

std::vector<GeneratedText> generate_text(TextModel& m, const std::vector<std::string>& prompts,
                                         generation::GenerationConfig config) {
  std::vector<std::vector<int64_t>> ids;
  for (const auto& p : prompts) {
    auto e = m.tokenizer().encode(p);
    LIBAI_CHECK(!e.ids.empty(), "generate: prompt \"", p, "\" encodes to no tokens");
    ids.emplace_back(e.ids.begin(), e.ids.end());
  }
  auto out = generate_ids(m, ids, config);
  const size_t per_prompt = prompts.empty() ? 0 : out.size() / prompts.size();
  for (size_t i = 0; i < out.size(); ++i) out[i].prompt = prompts[i / per_prompt];
  return out;
}

size_t embedding_max_length(const fs::path& folder, const HfConfig& config) {
  const auto st = read_json_if_exists(folder / "sentence_bert_config.json");
  size_t max_length = size_t(config.get_int("max_position_embeddings", 512));
  if (st.contains("max_seq_length") && st["max_seq_length"].is_number_integer())
    max_length = std::min(max_length, st["max_seq_length"].get<size_t>());
  return max_length;
}

std::vector<std::vector<float>> mean_pool_normalize(const Tensor& last_hidden_state,
                                                    const Tensor& attention_mask) {
  const Tensor& h = last_hidden_state;  // [batch, seq, hidden]
  Tensor mask = Tensor::empty(attention_mask.shape(), h.dtype());
  mask.copy_from(attention_mask);
  Tensor summed = ops::sum(h * ops::unsqueeze(mask, -1), {1});  // [batch, hidden]
  Tensor counts = ops::unsqueeze(ops::sum(mask, {1}), -1);      // [batch, 1]
  Tensor mean = summed / counts;
  const int64_t batch = mean.size(0), hidden = mean.size(1);
  auto v = mean.to_vector<float>();
  std::vector<std::vector<float>> out;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> e(v.begin() + b * hidden, v.begin() + (b + 1) * hidden);
    double norm = 0;
    for (float x : e) norm += double(x) * x;
    norm = std::max(std::sqrt(norm), 1e-12);
    for (float& x : e) x = float(x / norm);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::vector<float>> embed(TextModel& m, const std::vector<std::string>& texts,
                                      const EmbedOptions& options) {
  autograd::NoGradGuard no_grad;
  const size_t max_length = embedding_max_length(m.folder(), m.model().config());
  const auto pooling = read_json_if_exists(m.folder() / "1_Pooling" / "config.json");
  LIBAI_CHECK_KIND(Unsupported,
                   !pooling.contains("pooling_mode_mean_tokens") ||
                       pooling["pooling_mode_mean_tokens"] == true,
                   m.folder().string(), ": only mean pooling is supported (1_Pooling/config.json)");
  LIBAI_CHECK(options.batch_size > 0, "embed: batch_size must be positive");
  const auto& tok = m.tokenizer();
  // Tokenized once, unpadded; each batch is then padded to its own longest row.
  const auto encodings = tok.encode_batch(texts, truncated_to(max_length));
  std::vector<size_t> order(texts.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (options.sort_by_length)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return encodings[a].ids.size() > encodings[b].ids.size();
    });
  tokenizers::EncodeOptions padding;
  padding.padding = tokenizers::Padding::longest;
  std::vector<std::vector<float>> out(texts.size());
  for (size_t start = 0; start < order.size(); start += options.batch_size) {
    const size_t end = std::min(order.size(), start + options.batch_size);
    std::vector<tokenizers::Encoding> chunk;
    for (size_t i = start; i < end; ++i) chunk.push_back(encodings[order[i]]);
    tok.pad(chunk, padding);
    const auto enc = batch_tensors(chunk);
    auto result = m.model().forward({{"input_ids", enc.input_ids},
                                     {"attention_mask", enc.attention_mask},
                                     {"token_type_ids", enc.token_type_ids}});
    auto vectors = mean_pool_normalize(result.at("last_hidden_state"), enc.attention_mask);
    for (size_t i = start; i < end; ++i) out[order[i]] = std::move(vectors[i - start]);
    if (options.on_batch) options.on_batch(end - start);
  }
  return out;
}

std::vector<std::vector<float>> embed(TextModel& m, const std::vector<std::string>& texts,
                                      size_t batch_size) {
  EmbedOptions options;
  options.batch_size = batch_size;
  return embed(m, texts, options);
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  LIBAI_CHECK(a.size() == b.size(), "cosine: vectors of ", a.size(), " and ", b.size(), " elements");
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return dot / std::max(std::sqrt(na * nb), 1e-30);
}

namespace {

std::vector<double> softmax_row(const std::vector<float>& logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp(double(logits[i]) - top);
  for (double& x : p) x /= total;
  return p;
}

}  // namespace

std::vector<std::vector<MaskGuess>> fill_mask(TextModel& m, const std::string& text, int64_t top_k) {
  autograd::NoGradGuard no_grad;
  LIBAI_CHECK_KIND(Unsupported, m.model().task() == Task::masked_lm, m.folder().string(),
                   ": fill-mask needs a masked-LM model, this one is ", task_name(m.model().task()));
  const auto& tok = m.tokenizer();
  const std::string mask_token = tok.special_tokens().mask.empty() ? "[MASK]" : tok.special_tokens().mask;
  auto mask_id = tok.token_to_id(mask_token);
  LIBAI_CHECK(mask_id.has_value(), m.folder().string(), ": the tokenizer has no mask token");
  auto enc = encode_batch(tok, {text}, 0);
  auto ids = enc.input_ids.to_vector<int64_t>();
  std::vector<int64_t> positions;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == *mask_id) positions.push_back(int64_t(i));
  LIBAI_CHECK(!positions.empty(), "fill-mask: the text has no ", mask_token, " token: \"", text, "\"");
  Tensor logits = m.model().forward({{"input_ids", enc.input_ids},
                                     {"attention_mask", enc.attention_mask},
                                     {"token_type_ids", enc.token_type_ids}}).at("logits");
  std::vector<std::vector<MaskGuess>> out;
  for (int64_t pos : positions) {
    auto p = softmax_row(ops::select(ops::select(logits, 0, 0), 0, pos).to_vector<float>());
    std::vector<int64_t> order(p.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    const int64_t k = std::min<int64_t>(top_k, int64_t(p.size()));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    std::vector<MaskGuess> guesses;
    for (int64_t i = 0; i < k; ++i) {
      MaskGuess g;
      g.token_id = order[i];
      g.token = tok.decode({int32_t(order[i])}, false);
      g.score = p[order[i]];
      std::vector<int32_t> filled(ids.begin(), ids.end());
      filled[pos] = int32_t(order[i]);
      g.sequence = tok.decode(filled, true);
      guesses.push_back(std::move(g));
    }
    out.push_back(std::move(guesses));
  }
  return out;
}

std::vector<LabelScore> scores_from_logits(const Model& model, const Tensor& logits_row) {
  auto p = softmax_row(logits_row.to_vector<float>());
  auto labels = model.config().labels();
  std::vector<LabelScore> out;
  for (size_t i = 0; i < p.size(); ++i)
    out.push_back({i < labels.size() && !labels[i].empty() ? labels[i] : "LABEL_" + std::to_string(i), p[i]});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  return out;
}

std::vector<LabelScore> classify_text(TextModel& m, const std::string& text) {
  autograd::NoGradGuard no_grad;
  LIBAI_CHECK_KIND(Unsupported, m.model().task() == Task::sequence_classification, m.folder().string(),
                   ": text classification needs a sequence-classification model, this one is ",
                   task_name(m.model().task()));
  auto enc = encode_batch(m.tokenizer(), {text}, size_t(m.model().config().get_int("max_position_embeddings", 512)));
  Tensor logits = m.model().forward({{"input_ids", enc.input_ids},
                                     {"attention_mask", enc.attention_mask},
                                     {"token_type_ids", enc.token_type_ids}}).at("logits");
  return scores_from_logits(m.model(), ops::select(logits, 0, 0));
}

}  // namespace libai::models::pipelines
