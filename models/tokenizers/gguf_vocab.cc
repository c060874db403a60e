// Tokenizers from GGUF metadata (Note [GGUF vocabularies]).
#include <algorithm>
#include <fstream>
#include <map>
#include <unordered_map>

#include "models/tokenizers/pipeline.h"
#include "runtime/checkpoint/gguf.h"
#include "runtime/error.h"

namespace libai::tokenizers {

namespace fs = std::filesystem;
using checkpoint::GgufFile;

// Note [GGUF vocabularies]
// A GGUF file describes its tokenizer in tokenizer.ggml.*: the model ("gpt2": byte-level BPE
// with its merges; "llama": SentencePiece BPE, tokens with scores), the tokens, their types
// (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), the special ids and the
// pre-tokenizer ("pre": gpt-2, llama-bpe, qwen2). We write the tokenizer.json that transformers
// would have for it and build that, so both paths share every component:
//   - gpt2: a BPE model over the normal and byte tokens with the file's merges, the pre-type's
//     split pattern before the byte-level mapping (llama-bpe also matches whole words first,
//     ignore_merges, as Llama 3's tokenizer.json does; qwen2 normalizes to NFC first).
//   - llama: SentencePiece merges the adjacent pair whose joined piece scores highest; the
//     equivalent BPE ranks the merges (a, b) of every piece a + b by that piece's score
//     (ties: by its id, then a's, then b's, as transformers' converter orders them), with byte
//     fallback to the <0xXX> tokens, "▁" for spaces and a leading "▁" (add_space_prefix).
//   - control and unknown tokens are special added tokens, user-defined ones plain added
//     tokens; bos / eos are added when add_bos_token / add_eos_token say so (llama default: bos).

bool is_gguf_path(const fs::path& path) {
  return fs::is_regular_file(path) && checkpoint::is_gguf_file(path.string());
}

bool gguf_has_tokenizer(const fs::path& path) {
  return GgufFile::open(path.string()).find("tokenizer.ggml.tokens") != nullptr;
}

namespace {

constexpr int64_t kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

// The split patterns of the pre-tokenizer types this loader knows (their tokenizer.json's).
const char* split_pattern(const std::string& pre) {
  if (pre == "llama-bpe")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
           "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "qwen2")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}"
           "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  return nullptr;
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
          {"use_regex", use_regex}};
}

json template_processing(const std::vector<std::string>& tokens, int64_t bos, int64_t eos) {
  json single = json::array(), pair = json::array(), special = json::object();
  auto add = [&](int64_t id) {
    single.push_back({{"SpecialToken", {{"id", tokens[size_t(id)]}, {"type_id", 0}}}});
    special[tokens[size_t(id)]] = {{"id", tokens[size_t(id)]},
                                   {"ids", {id}},
                                   {"tokens", {tokens[size_t(id)]}}};
  };
  if (bos >= 0) add(bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos >= 0) add(eos);
  pair = single;
  for (const auto& part : single) {
    json p = part;
    if (p.contains("Sequence")) p["Sequence"] = {{"id", "B"}, {"type_id", 1}};
    else p["SpecialToken"]["type_id"] = 1;
    pair.push_back(p);
  }
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair},
          {"special_tokens", special}};
}

// SentencePiece BPE merges from the scores (Note [GGUF vocabularies]).
json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                        const std::vector<int64_t>& types) {
  std::unordered_map<std::string, int64_t> id;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == 1) id.emplace(tokens[i], int64_t(i));
  struct Merge {
    double score;
    int64_t merged, left, right;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != 1) continue;
    const std::string& t = tokens[i];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      auto l = id.find(t.substr(0, cut)), r = id.find(t.substr(cut));
      if (l != id.end() && r != id.end()) merges.push_back({scores[i], int64_t(i), l->second, r->second});
    }
  }
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.merged != b.merged) return a.merged < b.merged;
    if (a.left != b.left) return a.left < b.left;
    return a.right < b.right;
  });
  json out = json::array();
  for (const auto& m : merges) out.push_back({tokens[size_t(m.left)], tokens[size_t(m.right)]});
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const fs::path& path) {
  return gguf_tokenizer(GgufFile::open(path.string()));
}

namespace {

// The tokenizer.json of the metadata (Note [GGUF vocabularies]) and its special tokens.
json tokenizer_json(const GgufFile& f, SpecialTokens& special) {
  const std::string where = "GGUF file " + f.path() + ": ";
  LIBAI_CHECK_KIND(NotFound, f.find("tokenizer.ggml.tokens"), where,
                   "no tokenizer (no tokenizer.ggml.tokens)");
  const std::string model = f.get_string("tokenizer.ggml.model");
  const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
  const size_t n = tokens.size();
  std::vector<int64_t> types(n, 1);
  if (f.find("tokenizer.ggml.token_type")) {
    const auto& t = f.get_ints("tokenizer.ggml.token_type");
    LIBAI_CHECK_KIND(CorruptInput, t.size() == n, where, "tokenizer.ggml.token_type has ",
                     t.size(), " entries for ", n, " tokens");
    types = t;
  }
  auto special_id = [&](const char* key) -> int64_t {
    const std::string k = std::string("tokenizer.ggml.") + key;
    if (!f.find(k)) return -1;
    const int64_t id = f.get_int(k);
    LIBAI_CHECK_KIND(CorruptInput, id >= 0 && size_t(id) < n, where, k, " is ", id, ", not one of the ",
                     n, " tokens");
    return id;
  };
  const int64_t bos = special_id("bos_token_id"), eos = special_id("eos_token_id"),
                unk = special_id("unknown_token_id"), pad = special_id("padding_token_id");
  const bool spm = model == "llama";
  LIBAI_CHECK_KIND(Unsupported, spm || model == "gpt2", where, "tokenizer.ggml.model '", model,
                   "' is not supported (gpt2, llama)");
  const bool add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spm);
  const bool add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);

  json root, vocab = json::object(), added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const int64_t type = types[i];
    const bool is_added = type == kControl || type == kUserDefined || type == kUnknown;
    if (!is_added || spm) vocab[tokens[i]] = int64_t(i);
    if (is_added)
      added.push_back({{"id", int64_t(i)}, {"content", tokens[i]}, {"special", type != kUserDefined},
                       {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}});
  }
  root["added_tokens"] = added;
  if (spm) {
    LIBAI_CHECK_KIND(CorruptInput, f.find("tokenizer.ggml.scores"), where,
                     "a llama tokenizer needs tokenizer.ggml.scores");
    const auto scores = f.get_reals("tokenizer.ggml.scores");
    LIBAI_CHECK_KIND(CorruptInput, scores.size() == n, where, "tokenizer.ggml.scores has ",
                     scores.size(), " entries for ", n, " tokens");
    const bool prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
    const bool has_bytes = std::count(types.begin(), types.end(), kByte) > 0;
    root["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges_from_scores(tokens, scores, types)},
                     {"byte_fallback", has_bytes}, {"fuse_unk", true}};
    if (unk >= 0) root["model"]["unk_token"] = tokens[size_t(unk)];
    json norm = json::array();
    if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    root["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
    if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    root["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  } else {
    const auto& merge_lines = f.get_strings("tokenizer.ggml.merges");
    const std::string pre = f.get_string("tokenizer.ggml.pre", "default");
    json merges = json::array();
    for (const auto& m : merge_lines) {
      const size_t space = m.find(' ');
      LIBAI_CHECK_KIND(CorruptInput, space != std::string::npos && space > 0 && space + 1 < m.size(),
                       where, "tokenizer.ggml.merges entry '", m, "' is not two tokens");
      merges.push_back({m.substr(0, space), m.substr(space + 1)});
    }
    root["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges},
                     {"ignore_merges", pre == "llama-bpe"}};
    if (pre == "gpt-2" || pre == "default") {
      root["pre_tokenizer"] = byte_level(true);
    } else if (const char* pattern = split_pattern(pre)) {
      root["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"},
             {"invert", false}},
            byte_level(false)}}};
      if (pre == "qwen2") root["normalizer"] = {{"type", "NFC"}};
    } else {
      LIBAI_THROW(Unsupported, where, "tokenizer.ggml.pre '", pre,
                  "' is not supported (gpt-2, default, llama-bpe, qwen2)");
    }
    root["decoder"] = byte_level(true);
  }
  LIBAI_CHECK_KIND(CorruptInput, !(add_bos && bos < 0) && !(add_eos && eos < 0), where,
                   "add_bos_token / add_eos_token without the token's id");
  if (add_bos || add_eos) root["post_processor"] = template_processing(tokens, add_bos ? bos : -1,
                                                                       add_eos ? eos : -1);
  special = SpecialTokens();
  if (bos >= 0) special.bos = tokens[size_t(bos)];
  if (eos >= 0) special.eos = tokens[size_t(eos)];
  if (unk >= 0) special.unk = tokens[size_t(unk)];
  if (pad >= 0) special.pad = tokens[size_t(pad)];
  return root;
}

}  // namespace

std::unique_ptr<Tokenizer> gguf_tokenizer(const GgufFile& f) {
  SpecialTokens special;
  const json root = tokenizer_json(f, special);
  return tokenizer_from_json(root, f.path() + " (GGUF tokenizer)", std::move(special));
}

void write_gguf_tokenizer(const fs::path& gguf, const fs::path& folder) {
  const GgufFile f = GgufFile::open(gguf.string());
  if (!f.find("tokenizer.ggml.tokens")) return;
  SpecialTokens special;
  const json root = tokenizer_json(f, special);
  std::ofstream(folder / "tokenizer.json") << root.dump(1) << "\n";
  json map = json::object();
  for (const auto& [key, value] : {std::pair<const char*, std::string*>{"bos_token", &special.bos},
                                   {"eos_token", &special.eos}, {"unk_token", &special.unk},
                                   {"pad_token", &special.pad}})
    if (!value->empty()) map[key] = *value;
  std::ofstream(folder / "special_tokens_map.json") << map.dump(1) << "\n";
}

}  // namespace libai::tokenizers
