// The BPE model: merges applied lowest rank first (leftmost on ties), one pair at a time, as
// the Hugging Face implementation does (Note [BPE merge order]).
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix, end_of_word_suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
};

class Bpe : public VocabModel {
 public:
  Bpe(std::vector<std::pair<std::string, int32_t>> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
      const JsonPlace& place)
      : VocabModel(std::move(vocab)), options_(std::move(options)) {
    const size_t prefix = options_.continuing_subword_prefix.size();
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [a, b] = merges[rank];
      auto ia = vocab_.find(a), ib = vocab_.find(b);
      // The merged token drops b's continuation prefix, as HF does.
      std::string joined =
          a +
          (prefix && b.rfind(options_.continuing_subword_prefix, 0) == 0 ? b.substr(prefix) : b);
      auto ij = vocab_.find(joined);
      if (ia == vocab_.end() || ib == vocab_.end() || ij == vocab_.end())
        LIBAI_THROW(CorruptInput, place.file, ": field '", place.at("merges").field, "[", rank,
                    "]': merge '", a, " ", b, "' uses a token missing from the vocabulary");
      merges_.emplace(pair_key(ia->second, ib->second),
                      std::pair<uint32_t, int32_t>(static_cast<uint32_t>(rank), ij->second));
    }
    if (options_.unk_token && !vocab_.count(*options_.unk_token))
      unk_error_ = str_cat(place.file, ": field '", place.at("unk_token").field, "': '",
                           *options_.unk_token, "' is not in the vocabulary");
  }

  void tokenize(const std::string& piece, std::vector<Token>& out) const override {
    if (piece.empty()) return;
    if (options_.ignore_merges) {
      if (auto it = vocab_.find(piece); it != vocab_.end()) {
        out.push_back({it->second, piece});
        return;
      }
    }
    std::vector<Symbol> symbols;
    const std::u32string chars = utf8_decode(piece);
    bool last_was_unk = false;
    for (size_t i = 0; i < chars.size(); ++i) {
      std::string text = utf8_encode(std::u32string_view(chars).substr(i, 1));
      if (i > 0) text = options_.continuing_subword_prefix + text;
      if (i + 1 == chars.size()) text += options_.end_of_word_suffix;
      if (auto it = vocab_.find(text); it != vocab_.end()) {
        symbols.push_back({it->second, text});
        last_was_unk = false;
        continue;
      }
      if (options_.byte_fallback && push_bytes(text, symbols)) continue;
      if (!options_.unk_token) continue;  // dropped, as HF does without an unknown token
      LIBAI_CHECK_KIND(CorruptInput, unk_error_.empty(), unk_error_);
      const int32_t unk = vocab_.at(*options_.unk_token);
      if (options_.fuse_unk && last_was_unk) continue;
      symbols.push_back({unk, *options_.unk_token});
      last_was_unk = true;
    }
    merge_all(symbols);
    for (auto& s : symbols) out.push_back({s.id, std::move(s.text)});
  }

 private:
  struct Symbol {
    int32_t id;
    std::string text;
  };

  // Note [BPE merge order]
  // The pair of lowest merge rank is merged first, the leftmost of equal ranks, until no pair
  // has a merge. A heap of candidate pairs over a linked list of symbols does it in
  // O(n log n): a text with no pre-tokenizer (Llama 2's tokenizer.json) is one word of the
  // whole text's length, where rescanning every pair after each merge was quadratic. A popped
  // candidate whose symbols have changed since it was pushed is stale and skipped.
  void merge_all(std::vector<Symbol>& symbols) const {
    const size_t n = symbols.size();
    if (n < 2) return;
    std::vector<size_t> next(n), prev(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) next[i] = i + 1, prev[i] = i == 0 ? n : i - 1;
    struct Candidate {
      uint32_t rank;
      size_t pos;
      int32_t merged;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto consider = [&](size_t left) {
      if (left >= n || next[left] >= n) return;
      auto it = merges_.find(pair_key(symbols[left].id, symbols[next[left]].id));
      if (it != merges_.end()) heap.push({it->second.first, left, it->second.second});
    };
    for (size_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      const Candidate top = heap.top();
      heap.pop();
      const size_t left = top.pos;
      if (!alive[left] || next[left] >= n) continue;
      const size_t right = next[left];
      auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
      if (it == merges_.end() || it->second.first != top.rank) continue;  // stale
      symbols[left].id = top.merged;
      symbols[left].text = id_to_token_.at(top.merged);
      alive[right] = false;
      next[left] = next[right];
      if (next[left] < n) prev[next[left]] = left;
      if (prev[left] < n) consider(prev[left]);
      consider(left);
    }
    std::vector<Symbol> kept;
    for (size_t i = 0; i < n; i = next[i]) kept.push_back(std::move(symbols[i]));
    symbols = std::move(kept);
  }

  template <typename Symbols>
  bool push_bytes(const std::string& text, Symbols& symbols) const {
    std::vector<int32_t> ids;
    for (unsigned char b : text) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = vocab_.find(name);
      if (it == vocab_.end()) return false;
      ids.push_back(it->second);
    }
    for (int32_t id : ids) symbols.push_back({id, id_to_token_.at(id)});
    return true;
  }

  BpeOptions options_;
  std::string unk_error_;  // set when the unknown token is missing; raised when first needed
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges_;  // -> (rank, merged id)
};

std::optional<std::string> optional_string(const json& section, const char* key,
                                           const JsonPlace& place) {
  if (!section.contains(key) || section[key].is_null()) return std::nullopt;
  return json_string(section, key, place);
}

}  // namespace

std::unique_ptr<Model> make_bpe(std::vector<std::pair<std::string, int32_t>> vocab,
                                std::vector<std::pair<std::string, std::string>> merges,
                                std::optional<std::string> unk_token) {
  BpeOptions options;
  options.unk_token = std::move(unk_token);
  return std::make_unique<Bpe>(std::move(vocab), merges, std::move(options),
                               JsonPlace{"merges.txt", ""});
}

std::unique_ptr<Model> make_bpe_from_json(const json& section, const JsonPlace& place) {
  const json& vocab_json = json_field(section, "vocab", place);
  if (!vocab_json.is_object()) json_error(place.at("vocab"), "expected an object token -> id");
  std::vector<std::pair<std::string, int32_t>> vocab;
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    if (!it.value().is_number_integer())
      json_error(place.at("vocab." + it.key()), "expected an id");
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  }
  const json& merges_json = json_field(section, "merges", place);
  if (!merges_json.is_array()) json_error(place.at("merges"), "expected an array");
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const json& m = merges_json[i];
    if (m.is_string()) {  // "a b" (older files)
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos)
        json_error(place.at("merges"), "merge '" + s + "' has no space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      json_error(place.at("merges[" + std::to_string(i) + "]"), "expected \"a b\" or [a, b]");
    }
  }
  BpeOptions options;
  options.unk_token = optional_string(section, "unk_token", place);
  options.continuing_subword_prefix =
      optional_string(section, "continuing_subword_prefix", place).value_or("");
  options.end_of_word_suffix = optional_string(section, "end_of_word_suffix", place).value_or("");
  options.fuse_unk = json_bool(section, "fuse_unk", false, place);
  options.byte_fallback = json_bool(section, "byte_fallback", false, place);
  options.ignore_merges = json_bool(section, "ignore_merges", false, place);
  if (section.contains("dropout") && !section["dropout"].is_null() &&
      section["dropout"].get<double>() > 0)
    LIBAI_THROW(Unsupported, place.file, ": field '", place.at("dropout").field,
                "': BPE dropout is not supported");
  return std::make_unique<Bpe>(std::move(vocab), merges, std::move(options), place);
}

}  // namespace libai::tokenizers
