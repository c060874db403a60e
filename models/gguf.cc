#include "models/gguf.h"

#include <map>
#include <set>

#include "models/family.h"
#include "models/hf_config.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::models {

namespace fs = std::filesystem;
using checkpoint::GgufFile;

// Note [GGUF models]
// A GGUF file holds what a Hugging Face folder spreads over config.json, the weights and the
// tokenizer files; the runtime reads it through the same three doors, so every command that
// takes a model folder takes a .gguf file (run, generate, serve, pipeline stages):
//   - HfConfig::load: the family whose GgufArchitecture lists general.architecture writes the
//     config.json the file amounts to (sizes from "<arch>.*" keys, special ids from
//     "tokenizer.ggml.*", vocab_size from the token embedding's rows).
//   - WeightSource::open: the file's tensors under the checkpoint names the family's WeightMap
//     reads, so WeightMap, tensor parallel slicing and pipeline parts work unchanged. Tensors
//     are dequantised or converted to f32 when read (F32 ones are views of the mapping). A
//     Q4_0 file loaded with --quantize q4 gets its weights back exactly: a Q4_0 block's values
//     requantize to the same scale and nibbles (its largest magnitude is -8 d, so d is found
//     again; tests/models/gguf_parity_test.cc checks this bit for bit).
//   - load_tokenizer: models/tokenizers/gguf_vocab.cc.
// llama.cpp's converter stores each Llama q and k projection with the two halves of every
// head's rotary pairs interleaved (row 2i + j of a head is Hugging Face's row j * d / 2 + i),
// because ggml's default rotary kernel rotates adjacent pairs; GgufTensor::Op::unrope undoes
// it. Qwen2's rotary kernel is the NeoX one and its rows are stored as they are. GPT-2's
// Conv1D weights are stored [out, in] and transposed back.

bool is_gguf(const fs::path& path) {
  return fs::is_regular_file(path) && checkpoint::is_gguf_file(path.string());
}

namespace {

const Family& family_of_architecture(const GgufFile& file, std::string& arch) {
  arch = file.get_string("general.architecture");
  std::string known;
  for (const Family* f : families()) {
    if (!f->gguf) continue;
    for (const auto& a : f->gguf->architectures) {
      if (a == arch) return *f;
      known += (known.empty() ? "" : ", ") + a;
    }
  }
  LIBAI_THROW(Unsupported, "GGUF file ", file.path(), ": general.architecture '", arch,
              "' is not supported (supported: ", known, ")");
}

// The config.json of `file`, by the family that reads its architecture.
HfConfig config_of(const GgufFile& file, const Family*& family) {
  std::string arch;
  family = &family_of_architecture(file, arch);
  return HfConfig::from_json(family->gguf->config(file, arch), file.path() + " (GGUF metadata)");
}

}  // namespace

HfConfig gguf_config(const fs::path& path) {
  const Family* family = nullptr;
  return config_of(GgufFile::open(path.string()), family);
}

GgufWeights::GgufWeights(GgufFile file, GgufTensors rules)
    : file_(std::move(file)), rules_(std::move(rules)) {
  std::set<std::string> taken;
  for (size_t i = 0; i < rules_.size(); ++i) {
    names_.push_back(rules_[i].first);
    rule_of_.emplace(rules_[i].first, i);
    taken.insert(rules_[i].second.source);
  }
  for (const auto& name : file_.names())
    if (!taken.count(name)) names_.push_back(name);
  listed_.insert(names_.begin(), names_.end());
}

GgufWeights GgufWeights::open(const fs::path& path) {
  GgufFile file = GgufFile::open(path.string());
  const Family* family = nullptr;
  const HfConfig config = config_of(file, family);
  GgufTensors rules;
  for (auto& [name, rule] : family->gguf->tensors(file, config))
    if (file.contains(rule.source)) rules.emplace_back(std::move(name), std::move(rule));
  GgufWeights weights(std::move(file), std::move(rules));
  const std::string types = weights.type_summary();
  logger("models")->info("{}: GGUF tensors {}, dequantised to f32 as they load{}", path.string(),
                         types,
                         types.find("Q4_0") != std::string::npos
                             ? " (--quantize q4 multiplies by the Q4_0 blocks' own values)"
                             : "");
  return weights;
}

bool GgufWeights::contains(const std::string& name) const { return listed_.count(name) > 0; }

namespace {

Tensor transposed(const Tensor& t, const std::string& what) {
  LIBAI_CHECK_KIND(CorruptInput, t.dim() == 2, what, " should be 2-D, has shape ",
                   shape_str(t.shape()));
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor out = Tensor::empty({cols, rows}, DType::f32);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  return out;
}

Tensor unroped(const Tensor& t, int64_t heads, const std::string& what) {
  const int64_t rows = t.size(0);
  LIBAI_CHECK_KIND(CorruptInput, heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, what,
                   ": ", rows, " rows do not split into ", heads, " heads of an even size");
  const int64_t d = rows / heads, width = t.numel() / rows;
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::copy_n(src + (h * d + 2 * i + j) * width, width, dst + (h * d + j * d / 2 + i) * width);
  return out;
}

}  // namespace

Tensor GgufWeights::tensor(const std::string& name) const {
  if (auto it = rule_of_.find(name); it != rule_of_.end()) {
    const GgufTensor& rule = rules_[it->second].second;
    const std::string what = "GGUF file " + file_.path() + ": tensor '" + rule.source + "'";
    switch (rule.op) {
      case GgufTensor::Op::copy:  // F32: a view of the mapping; other types: f32 copies, so
                                  // that rules joining tensors of mixed types (fused q/k/v) work
        return file_.info(rule.source).type == checkpoint::GgmlType::f32
                   ? file_.tensor(rule.source)
                   : file_.tensor_f32(rule.source);
      case GgufTensor::Op::transpose: return transposed(file_.tensor_f32(rule.source), what);
      case GgufTensor::Op::unrope: return unroped(file_.tensor_f32(rule.source), rule.heads, what);
    }
  }
  return file_.tensor(name);  // a tensor no rule takes (NotFound when the file lacks it)
}

std::string GgufWeights::type_summary() const {
  std::map<std::string, int> counts;
  for (const auto& name : file_.names()) ++counts[ggml_type_name(file_.info(name).type)];
  std::string out;
  for (const auto& [type, n] : counts) out += (out.empty() ? "" : ", ") + type + " x " + std::to_string(n);
  return out;
}

int64_t gguf_int(const GgufFile& f, const std::string& arch, const std::string& key) {
  return f.get_int(arch + "." + key);
}

int64_t gguf_int(const GgufFile& f, const std::string& arch, const std::string& key,
                 int64_t fallback) {
  return f.get_int(arch + "." + key, fallback);
}

double gguf_real(const GgufFile& f, const std::string& arch, const std::string& key,
                 double fallback) {
  return f.get_real(arch + "." + key, fallback);
}

void gguf_common_config(const GgufFile& f, const std::string& embedding, nlohmann::json& config) {
  const auto& shape = f.info(embedding).shape;
  LIBAI_CHECK_KIND(CorruptInput, shape.size() == 2, "GGUF file ", f.path(), ": tensor '",
                   embedding, "' should be 2-D, has shape ", shape_str(shape));
  config["vocab_size"] = shape[0];
  for (const char* id : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    const std::string key = std::string("tokenizer.ggml.") +
                            (std::string(id) == "pad_token_id" ? "padding_token_id" : id);
    if (f.find(key)) config[id] = f.get_int(key);
  }
}

}  // namespace libai::models
