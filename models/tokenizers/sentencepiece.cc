// SentencePiece .model files as a Tokenizer: a Model, Decoder and PostProcessor over one
// sentencepiece::SentencePieceProcessor, with the special tokens named by the model and by the
// transformers configs next to it. See sentencepiece.h.
#include "models/tokenizers/sentencepiece.h"

#include <sentencepiece_processor.h>

#include <charconv>
#include <fstream>
#include <set>
#include <vector>

#include "models/tokenizers/charsmap.h"
#include "models/tokenizers/pipeline.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

namespace fs = std::filesystem;
using Processor = sentencepiece::SentencePieceProcessor;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, sentencepiece's space

class SentencePieceModel : public Model {
 public:
  explicit SentencePieceModel(std::shared_ptr<const Processor> processor)
      : processor_(std::move(processor)) {}

  void tokenize(const std::string& piece, std::vector<Token>& out) const override {
    std::vector<int> ids;
    const auto status = processor_->Encode(piece, &ids);
    LIBAI_CHECK_KIND(InvalidArgument, status.ok(), "SentencePiece cannot encode '", piece,
                     "': ", status.ToString());
    for (int id : ids) out.push_back({id, processor_->IdToPiece(id)});
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    // PieceToId answers unk_id for a piece it does not know.
    const int id = processor_->PieceToId(token);
    if (id < 0 || processor_->IdToPiece(id) != token) return std::nullopt;
    return id;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id < 0 || id >= processor_->GetPieceSize()) return std::nullopt;
    return processor_->IdToPiece(id);
  }
  size_t vocab_size() const override { return processor_->GetPieceSize(); }

 private:
  std::shared_ptr<const Processor> processor_;
};

// Note [SentencePiece decoding]: runs of ordinary pieces go through the processor's Decode
// (bytes, the dummy-prefix space, unk surface); special tokens are written as they are. The
// processor drops a leading space only at the start of a text, so a run that follows a special
// token is decoded behind a sentinel piece (a plain piece without a space symbol) which is then
// cut off: "a</s> b" keeps its space, as transformers' Metaspace decoders do.
class SentencePieceDecoder : public Decoder {
 public:
  SentencePieceDecoder(std::shared_ptr<const Processor> processor, std::set<std::string> verbatim)
      : processor_(std::move(processor)), verbatim_(std::move(verbatim)) {
    for (int id = 0; id < processor_->GetPieceSize() && !sentinel_; ++id) {
      const std::string& piece = processor_->IdToPiece(id);
      if (!piece.empty() && piece.find(kSpaceSymbol) == std::string::npos &&
          !verbatim_.contains(piece) && !processor_->IsControl(id) && !processor_->IsUnknown(id) &&
          !processor_->IsUnused(id) && !processor_->IsByte(id))
        sentinel_ = piece;
    }
  }

  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string out;
    std::vector<std::string> run;
    bool run_first = true;  // the run starts the text
    auto flush = [&] {
      if (run.empty()) return;
      if (!run_first && sentinel_) run.insert(run.begin(), *sentinel_);
      std::string text;
      const auto status = processor_->Decode(run, &text);
      LIBAI_ASSERT(status.ok(), "SentencePiece Decode: ", status.ToString());
      out += !run_first && sentinel_ ? text.substr(std::min(text.size(), sentinel_->size())) : text;
      run.clear();
    };
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (verbatim_.contains(tokens[i])) {
        flush();
        out += tokens[i];
        continue;
      }
      if (run.empty()) run_first = i == 0;
      run.push_back(std::move(tokens[i]));
    }
    flush();
    return {out};
  }

 private:
  std::shared_ptr<const Processor> processor_;
  std::set<std::string> verbatim_;  // the added tokens' contents
  std::optional<std::string> sentinel_;
};

// bos before / eos after the sequence (LlamaTokenizer / T5Tokenizer).
class SentencePiecePostProcessor : public PostProcessor {
 public:
  SentencePiecePostProcessor(std::optional<Token> bos, std::optional<Token> eos)
      : bos_(std::move(bos)), eos_(std::move(eos)) {}
  size_t added_count() const override { return (bos_ ? 1 : 0) + (eos_ ? 1 : 0); }
  void process(Encoding& e) const override {
    if (bos_) {
      e.ids.insert(e.ids.begin(), bos_->id);
      e.tokens.insert(e.tokens.begin(), bos_->value);
    }
    if (eos_) {
      e.ids.push_back(eos_->id);
      e.tokens.push_back(eos_->value);
    }
  }

 private:
  std::optional<Token> bos_, eos_;
};

// What tokenizer_config.json and special_tokens_map.json say about a sentencepiece tokenizer.
struct Config {
  SpecialTokens named;
  std::optional<bool> add_bos, add_eos;
  std::string tokenizer_class;
  int64_t extra_ids = 0;                // T5's <extra_id_N>
  std::vector<std::string> additional;  // additional_special_tokens
  std::vector<AddedToken> with_ids;     // added_tokens_decoder
};

std::optional<std::string> token_name(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

void read_config(const fs::path& path, Config& config) {
  if (!fs::exists(path)) return;
  std::ifstream in(path, std::ios::binary);
  LIBAI_CHECK_KIND(NotFound, in.good(), "tokenizer file ", path.string(), " cannot be opened");
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    LIBAI_THROW(CorruptInput, path.string(), ": malformed JSON: ", e.what());
  }
  const JsonPlace place{path.string(), ""};
  if (!root.is_object()) json_error(place, "expected a JSON object at the top");
  SpecialTokens& n = config.named;
  std::pair<const char*, std::string*> names[] = {
      {"bos_token", &n.bos}, {"eos_token", &n.eos}, {"pad_token", &n.pad},  {"unk_token", &n.unk},
      {"cls_token", &n.cls}, {"sep_token", &n.sep}, {"mask_token", &n.mask}};
  for (auto& [key, slot] : names)
    if (root.contains(key))
      if (auto name = token_name(root[key])) *slot = *name;
  for (auto [key, slot] :
       {std::pair{"add_bos_token", &config.add_bos}, std::pair{"add_eos_token", &config.add_eos}})
    if (root.contains(key) && !root[key].is_null()) *slot = json_bool(root, key, false, place);
  if (root.contains("tokenizer_class") && root["tokenizer_class"].is_string())
    config.tokenizer_class = root["tokenizer_class"].get<std::string>();
  if (root.contains("extra_ids")) {
    const json& v = root["extra_ids"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000)
      json_error(place.at("extra_ids"), "expected a count from 0 to 100000");
    config.extra_ids = v.get<int64_t>();
  }
  if (root.contains("additional_special_tokens") && root["additional_special_tokens"].is_array())
    for (const json& v : root["additional_special_tokens"])
      if (auto name = token_name(v)) config.additional.push_back(*name);
  if (root.contains("added_tokens_decoder")) {
    const json& decoder = root["added_tokens_decoder"];
    if (!decoder.is_object()) json_error(place.at("added_tokens_decoder"), "expected an object");
    for (auto it = decoder.begin(); it != decoder.end(); ++it) {
      const JsonPlace at = place.at("added_tokens_decoder." + it.key());
      AddedToken t;
      const std::string& key = it.key();
      const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), t.id);
      if (error != std::errc() || end != key.data() + key.size() || t.id < 0)
        json_error(at, "expected a token id as the key");
      t.content = json_string(it.value(), "content", at);
      t.special = json_bool(it.value(), "special", false, at);
      t.single_word = json_bool(it.value(), "single_word", false, at);
      t.lstrip = json_bool(it.value(), "lstrip", false, at);
      t.rstrip = json_bool(it.value(), "rstrip", false, at);
      t.normalized = json_bool(it.value(), "normalized", !t.special, at);
      config.with_ids.push_back(std::move(t));
    }
  }
}

// The fields of one protobuf message: calls `field(number, wire_type, bytes)` for each
// length-delimited field (its payload) and `field(number, wire_type, {})` for the others;
// false when the bytes are not a well-formed message.
template <typename F>
bool for_each_field(std::string_view bytes, F&& field) {
  size_t at = 0;
  auto varint = [&](uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64 && at < bytes.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(bytes[at++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  };
  for (uint64_t tag = 0, value = 0; at < bytes.size();) {
    if (!varint(tag)) return false;
    const int number = int(tag >> 3), type = int(tag & 7);
    switch (type) {
      case 0:  // varint
        if (!varint(value)) return false;
        field(number, type, std::string_view());
        break;
      case 1:  // 64-bit
      case 5:  // 32-bit
        if ((type == 1 ? 8u : 4u) > bytes.size() - at) return false;
        at += type == 1 ? 8 : 4;
        field(number, type, std::string_view());
        break;
      case 2:  // length-delimited
        if (!varint(value) || value > bytes.size() - at) return false;
        field(number, type, bytes.substr(at, size_t(value)));
        at += size_t(value);
        break;
      default: return false;
    }
  }
  return true;
}

// Note [Truncated .model files]: a ModelProto holds its pieces (field 1), then trainer_spec
// (2) and normalizer_spec (3). A file cut between two pieces still parses, as a smaller model;
// every file the trainer or transformers writes has a normalizer_spec, so require one.
bool has_normalizer_spec(std::string_view bytes) {
  bool found = false;
  for_each_field(bytes, [&](int number, int type, std::string_view) {
    found = found || (number == 3 && type == 2);
  });
  return found;
}

// Every precompiled charsmap of the model (Note [Precompiled charsmaps]); throws CorruptInput.
void check_charsmaps(std::string_view model, const fs::path& path) {
  for_each_field(model, [&](int number, int type, std::string_view spec) {
    if ((number != 3 && number != 5) || type != 2) return;
    for_each_field(spec, [&](int field, int field_type, std::string_view blob) {
      if (field != 2 || field_type != 2) return;
      const std::string problem = charsmap_problem(blob);
      LIBAI_CHECK_KIND(CorruptInput, problem.empty(), path.string(), ": the ",
                       number == 3 ? "normalizer_spec" : "denormalizer_spec",
                       "'s precompiled_charsmap is broken: ", problem);
    });
  });
}

std::shared_ptr<const Processor> load_processor(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  LIBAI_CHECK_KIND(NotFound, in.good(), "tokenizer file ", path.string(), " cannot be opened");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LIBAI_CHECK_KIND(CorruptInput, !in.bad(), path.string(), ": read error");
  check_charsmaps(bytes, path);
  auto processor = std::make_shared<Processor>();
  const auto status = processor->LoadFromSerializedProto(bytes);
  LIBAI_CHECK_KIND(CorruptInput, status.ok(), path.string(),
                   ": not a valid SentencePiece model: ", status.ToString());
  LIBAI_CHECK_KIND(CorruptInput, processor->GetPieceSize() > 0 && has_normalizer_spec(bytes),
                   path.string(), ": truncated SentencePiece model (no normalizer_spec)");
  return processor;
}

// The special tokens' names: the configs', else the model's own.
SpecialTokens special_names(const Processor& processor, const Config& config) {
  SpecialTokens names = config.named;
  auto piece_of = [&](int id) { return id >= 0 ? processor.IdToPiece(id) : std::string(); };
  if (names.unk.empty()) names.unk = piece_of(processor.unk_id());
  if (names.bos.empty()) names.bos = piece_of(processor.bos_id());
  if (names.eos.empty()) names.eos = piece_of(processor.eos_id());
  if (names.pad.empty()) names.pad = piece_of(processor.pad_id());
  return names;
}

// Added tokens: explicit ids first, then the model's own special pieces, then T5's extra ids
// and the named tokens, at new ids past the vocabulary when the model lacks them (HF's
// add_special_tokens).
std::vector<AddedToken> added_tokens(const Processor& processor, const Model& model,
                                     const Config& config, const SpecialTokens& names) {
  std::vector<AddedToken> added = config.with_ids;
  auto add = [&](const std::string& content, int32_t id) {
    for (const AddedToken& a : added)
      if (a.content == content) return false;
    added.push_back({.content = content, .id = id, .special = true});
    return true;
  };
  const int32_t size = processor.GetPieceSize();
  for (int32_t id = 0; id < size; ++id) {
    const std::string& piece = processor.IdToPiece(id);
    if (processor.IsControl(id) || processor.IsUnknown(id) || piece.starts_with("<extra_id_"))
      add(piece, id);
  }
  // T5Tokenizer numbers its extra ids down from the top: <extra_id_0> is the last id.
  for (int64_t i = 0; i < config.extra_ids; ++i) {
    const std::string name = "<extra_id_" + std::to_string(i) + ">";
    add(name,
        model.token_to_id(name).value_or(static_cast<int32_t>(size + config.extra_ids - 1 - i)));
  }
  std::vector<std::string> wanted = {names.bos, names.eos, names.unk, names.pad,
                                     names.cls, names.sep, names.mask};
  wanted.insert(wanted.end(), config.additional.begin(), config.additional.end());
  int32_t next = size;
  for (const AddedToken& a : added) next = std::max(next, a.id + 1);
  for (const std::string& name : wanted) {
    const auto in_model = model.token_to_id(name);
    if (!name.empty() && add(name, in_model.value_or(next)) && !in_model) ++next;
  }
  return added;
}

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const fs::path& model_file) {
  auto processor = load_processor(model_file);
  Config config;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"})
    read_config(model_file.parent_path() / name, config);
  auto model = std::make_unique<SentencePieceModel>(processor);
  SpecialTokens names = special_names(*processor, config);
  std::vector<AddedToken> added = added_tokens(*processor, *model, config, names);

  // LlamaTokenizer prepends bos, T5Tokenizer appends eos; the class named in the config decides,
  // else the file's name.
  const std::string& cls = config.tokenizer_class;
  bool llama_style = model_file.filename() == "tokenizer.model";
  if (cls.find("Llama") != std::string::npos) llama_style = true;
  if (cls.find("T5") != std::string::npos) llama_style = false;
  auto token_of = [&](const std::string& name, const char* flag,
                      std::optional<bool> asked) -> std::optional<Token> {
    for (const AddedToken& a : added)
      if (!name.empty() && a.content == name) return Token{a.id, name};
    LIBAI_CHECK_KIND(CorruptInput, !asked.value_or(false), model_file.string(), ": ", flag,
                     " is true in tokenizer_config.json but the tokenizer has no such token");
    return std::nullopt;
  };
  std::optional<Token> bos, eos;
  if (config.add_bos.value_or(llama_style))
    bos = token_of(names.bos, "add_bos_token", config.add_bos);
  if (config.add_eos.value_or(!llama_style))
    eos = token_of(names.eos, "add_eos_token", config.add_eos);

  std::set<std::string> verbatim;
  for (const AddedToken& a : added) verbatim.insert(a.content);
  return std::make_unique<Tokenizer>(
      std::move(model), nullptr, nullptr,
      std::make_unique<SentencePiecePostProcessor>(std::move(bos), std::move(eos)),
      std::make_unique<SentencePieceDecoder>(processor, std::move(verbatim)), std::move(added),
      std::move(names));
}

}  // namespace libai::tokenizers
