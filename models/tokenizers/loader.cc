// load_tokenizer: tokenizer.json, or the legacy vocab.txt (BERT) and vocab.json + merges.txt
// (GPT-2) files, with special tokens named by tokenizer_config.json / special_tokens_map.json,
// or a SentencePiece .model file (sentencepiece.cc).
#include <fstream>
#include <sstream>

#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/sentencepiece.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace fs = std::filesystem;

void json_error(const JsonPlace& place, const std::string& what) {
  LIBAI_THROW(CorruptInput, place.file, ": field '", place.field, "': ", what);
}

const json& json_field(const json& object, const std::string& key, const JsonPlace& place) {
  if (!object.is_object()) json_error(place, "expected an object");
  auto it = object.find(key);
  if (it == object.end()) json_error(place.at(key), "missing");
  return *it;
}

std::string json_string(const json& object, const std::string& key, const JsonPlace& place) {
  const json& v = json_field(object, key, place);
  if (!v.is_string()) json_error(place.at(key), "expected a string");
  return v.get<std::string>();
}

bool json_bool(const json& object, const std::string& key, bool fallback, const JsonPlace& place) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  if (!object[key].is_boolean()) json_error(place.at(key), "expected true or false");
  return object[key].get<bool>();
}

std::string json_type(const json& object, const JsonPlace& place) {
  return json_string(object, "type", place);
}

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  LIBAI_CHECK_KIND(NotFound, in.good(), "tokenizer file ", path.string(), " cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json(const fs::path& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number overflow
    LIBAI_THROW(CorruptInput, path.string(), ": malformed JSON: ", e.what());
  }
}

// bos/eos/... from tokenizer_config.json and special_tokens_map.json, either as a string or
// as {"content": ...}.
SpecialTokens read_special_tokens(const fs::path& folder) {
  SpecialTokens out;
  std::pair<const char*, std::string*> names[] = {{"bos_token", &out.bos},  {"eos_token", &out.eos},
                                                  {"pad_token", &out.pad},  {"unk_token", &out.unk},
                                                  {"cls_token", &out.cls},  {"sep_token", &out.sep},
                                                  {"mask_token", &out.mask}};
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path path = folder / file;
    if (!fs::exists(path)) continue;
    const json config = parse_json(path);
    for (auto& [key, slot] : names) {
      if (!config.is_object() || !config.contains(key)) continue;
      const json& v = config[key];
      if (v.is_string())
        *slot = v.get<std::string>();
      else if (v.is_object() && v.contains("content") && v["content"].is_string())
        *slot = v["content"].get<std::string>();
    }
  }
  return out;
}

std::vector<AddedToken> read_added_tokens(const json& root, const JsonPlace& place) {
  std::vector<AddedToken> out;
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return out;
  const json& list = root["added_tokens"];
  if (!list.is_array()) json_error(place.at("added_tokens"), "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonPlace at = place.at("added_tokens[" + std::to_string(i) + "]");
    const json& id = json_field(list[i], "id", at);
    if (!id.is_number_integer()) json_error(at.at("id"), "expected an integer");
    AddedToken t;
    t.content = json_string(list[i], "content", at);
    t.id = id.get<int32_t>();
    t.special = json_bool(list[i], "special", false, at);
    t.single_word = json_bool(list[i], "single_word", false, at);
    t.lstrip = json_bool(list[i], "lstrip", false, at);
    t.rstrip = json_bool(list[i], "rstrip", false, at);
    t.normalized = json_bool(list[i], "normalized", !t.special, at);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_json(const json& root, const std::string& name,
                                               SpecialTokens special) {
  const JsonPlace place{name, ""};
  if (!root.is_object()) json_error(place, "expected a JSON object at the top");
  const json& model_json = json_field(root, "model", place);
  const JsonPlace model_place = place.at("model");
  // Older files omit model.type; the fields tell the model then.
  std::string type;
  if (model_json.is_object() && model_json.contains("type"))
    type = json_type(model_json, model_place);
  else if (model_json.is_object() && model_json.contains("merges"))
    type = "BPE";
  else if (model_json.is_object() && model_json.contains("vocab") && model_json["vocab"].is_array())
    type = "Unigram";
  else if (model_json.is_object() && model_json.contains("continuing_subword_prefix"))
    type = "WordPiece";
  else
    json_error(model_place.at("type"), "missing");
  std::unique_ptr<Model> model;
  if (type == "BPE")
    model = make_bpe_from_json(model_json, model_place);
  else if (type == "WordPiece")
    model = make_wordpiece_from_json(model_json, model_place);
  else if (type == "Unigram")
    model = make_unigram_from_json(model_json, model_place);
  else
    LIBAI_THROW(Unsupported, name, ": field 'model.type': model type '", type,
                "' is not supported (BPE, WordPiece and Unigram are)");
  auto section = [&](const char* key) -> const json& {
    static const json null;
    return root.contains(key) ? root[key] : null;
  };
  if (special.unk.empty() && model_json.contains("unk_token") &&
      model_json["unk_token"].is_string())
    special.unk = model_json["unk_token"].get<std::string>();
  return std::make_unique<Tokenizer>(
      std::move(model), make_normalizer(section("normalizer"), place.at("normalizer")),
      make_pre_tokenizer(section("pre_tokenizer"), place.at("pre_tokenizer")),
      make_post_processor(section("post_processor"), place.at("post_processor")),
      make_decoder(section("decoder"), place.at("decoder")), read_added_tokens(root, place),
      std::move(special));
}

namespace {

std::unique_ptr<Tokenizer> load_tokenizer_json(const fs::path& path) {
  return tokenizer_from_json(parse_json(path), path.string(), read_special_tokens(path.parent_path()));
}

// Special tokens named in the configs become special added tokens (new ids past the vocab
// when the vocabulary lacks them, as HF's add_special_tokens does).
std::vector<AddedToken> special_added_tokens(const SpecialTokens& special, const Model& model) {
  std::vector<AddedToken> out;
  int32_t next = static_cast<int32_t>(model.vocab_size());
  for (const std::string* name : {&special.bos, &special.eos, &special.unk, &special.sep,
                                  &special.pad, &special.cls, &special.mask}) {
    if (name->empty()) continue;
    bool seen = false;
    for (const auto& t : out) seen = seen || t.content == *name;
    if (seen) continue;
    AddedToken t;
    t.content = *name;
    t.id = model.token_to_id(*name).value_or(next);
    if (t.id == next) ++next;
    t.special = true;
    out.push_back(std::move(t));
  }
  return out;
}

std::unique_ptr<Tokenizer> load_bert_vocab(const fs::path& path) {
  std::istringstream lines(read_file(path));
  std::vector<std::pair<std::string, int32_t>> vocab;
  int32_t index = 0;
  for (std::string line; std::getline(lines, line); ++index) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    vocab.emplace_back(line, index);
  }
  LIBAI_CHECK_KIND(CorruptInput, !vocab.empty(), path.string(), ": the vocabulary is empty");
  const fs::path folder = path.parent_path();
  bool lower = true, chinese = true;
  std::optional<bool> strip;
  if (fs::exists(folder / "tokenizer_config.json")) {
    const json config = parse_json(folder / "tokenizer_config.json");
    const JsonPlace place{(folder / "tokenizer_config.json").string(), ""};
    lower = json_bool(config, "do_lower_case", true, place);
    chinese = json_bool(config, "tokenize_chinese_chars", true, place);
    if (config.contains("strip_accents") && config["strip_accents"].is_boolean())
      strip = config["strip_accents"].get<bool>();
  }
  SpecialTokens special = read_special_tokens(folder);
  auto or_default = [](std::string& s, const char* d) {
    if (s.empty()) s = d;
  };
  or_default(special.unk, "[UNK]"), or_default(special.sep, "[SEP]");
  or_default(special.pad, "[PAD]"), or_default(special.cls, "[CLS]");
  or_default(special.mask, "[MASK]");
  auto model = make_wordpiece(std::move(vocab), special.unk, "##", 100);
  auto id_of = [&](const std::string& token) {
    auto id = model->token_to_id(token);
    LIBAI_CHECK_KIND(CorruptInput, id.has_value(), path.string(), ": special token '", token,
                     "' is not in the vocabulary");
    return Token{*id, token};
  };
  auto processor = make_cls_sep_processor(id_of(special.cls), id_of(special.sep));
  auto added = special_added_tokens(special, *model);
  return std::make_unique<Tokenizer>(
      std::move(model), make_bert_normalizer(true, chinese, strip.value_or(lower), lower),
      make_bert_pre_tokenizer(), std::move(processor), make_wordpiece_decoder("##", true),
      std::move(added), std::move(special));
}

std::unique_ptr<Tokenizer> load_gpt2_files(const fs::path& vocab_path,
                                           const fs::path& merges_path) {
  const json vocab_json = parse_json(vocab_path);
  const JsonPlace place{vocab_path.string(), ""};
  if (!vocab_json.is_object()) json_error(place, "expected an object token -> id");
  std::vector<std::pair<std::string, int32_t>> vocab;
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    if (!it.value().is_number_integer()) json_error(place.at(it.key()), "expected an id");
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  }
  std::istringstream lines(read_file(merges_path));
  std::vector<std::pair<std::string, std::string>> merges;
  size_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    const size_t space = line.find(' ');
    LIBAI_CHECK_KIND(CorruptInput, space != std::string::npos, merges_path.string(), ":", number,
                     ": expected 'a b', got '", line, "'");
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  const fs::path folder = vocab_path.parent_path();
  bool prefix_space = false;
  if (fs::exists(folder / "tokenizer_config.json"))
    prefix_space = json_bool(parse_json(folder / "tokenizer_config.json"), "add_prefix_space",
                             false, {(folder / "tokenizer_config.json").string(), ""});
  SpecialTokens special = read_special_tokens(folder);
  auto model = make_bpe(std::move(vocab), std::move(merges), std::nullopt);
  auto added = special_added_tokens(special, *model);
  return std::make_unique<Tokenizer>(
      std::move(model), nullptr, make_byte_level_pre_tokenizer(prefix_space), nullptr,
      make_byte_level_decoder(), std::move(added), std::move(special));
}

}  // namespace

bool has_tokenizer(const fs::path& folder) {
  if (is_gguf_path(folder)) return gguf_has_tokenizer(folder);
  for (const char* name : {"tokenizer.json", "vocab.txt", "spiece.model", "tokenizer.model"})
    if (fs::exists(folder / name)) return true;
  return fs::exists(folder / "vocab.json") && fs::exists(folder / "merges.txt");
}

void throw_no_tokenizer(const fs::path& folder) {
  LIBAI_THROW(NotFound, "no tokenizer in ", folder.string(),
              ": expected tokenizer.json, vocab.json + merges.txt, vocab.txt, spiece.model or "
              "tokenizer.model");
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& path) {
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tokenizer.json")) return load_tokenizer_json(path / "tokenizer.json");
    if (fs::exists(path / "vocab.json") && fs::exists(path / "merges.txt"))
      return load_gpt2_files(path / "vocab.json", path / "merges.txt");
    if (fs::exists(path / "vocab.txt")) return load_bert_vocab(path / "vocab.txt");
    for (const char* name : {"spiece.model", "tokenizer.model"})
      if (fs::exists(path / name)) return load_sentencepiece(path / name);
    throw_no_tokenizer(path);
  }
  LIBAI_CHECK_KIND(NotFound, fs::exists(path), "tokenizer file ", path.string(), " does not exist");
  if (is_gguf_path(path)) return load_gguf_tokenizer(path);
  const std::string name = path.filename().string();
  if (name == "vocab.txt") return load_bert_vocab(path);
  if (name == "vocab.json" || name == "merges.txt") {
    const fs::path folder = path.parent_path();
    LIBAI_CHECK_KIND(NotFound,
                     fs::exists(folder / "merges.txt") && fs::exists(folder / "vocab.json"),
                     path.string(), ": a GPT-2 tokenizer needs both vocab.json and merges.txt");
    return load_gpt2_files(folder / "vocab.json", folder / "merges.txt");
  }
  if (path.extension() == ".model") return load_sentencepiece(path);
  return load_tokenizer_json(path);
}

}  // namespace libai::tokenizers
