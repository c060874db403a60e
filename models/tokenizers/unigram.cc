// The Unigram model: the best segmentation by Viterbi over the piece scores (log
// probabilities); characters no piece covers score min_score - 10 as the unknown piece, and
// consecutive unknowns fuse into one token, as the Hugging Face implementation does.
#include <cstdio>
#include <unordered_map>

#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

constexpr double kUnknownPenalty = 10.0;

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

class Unigram : public Model {
 public:
  Unigram(std::vector<std::pair<std::string, double>> pieces, std::optional<int32_t> unk_id,
          bool byte_fallback)
      : pieces_(std::move(pieces)), unk_id_(unk_id), byte_fallback_(byte_fallback) {
    for (size_t id = 0; id < pieces_.size(); ++id) {
      ids_.emplace(pieces_[id].first, static_cast<int32_t>(id));
      min_score_ = std::min(min_score_, pieces_[id].second);
      max_length_ = std::max(max_length_, pieces_[id].first.size());
    }
  }

  void tokenize(const std::string& s, std::vector<Token>& out) const override {
    struct Best {
      int32_t id = -1;
      double score = 0;
      size_t start = SIZE_MAX;  // SIZE_MAX: not reached yet
    };
    const size_t n = s.size();
    const double unk_score = min_score_ - kUnknownPenalty;
    std::vector<Best> best(n + 1);
    auto relax = [&](size_t from, size_t to, int32_t id, double score) {
      const double candidate = best[from].score + score;
      if (best[to].start == SIZE_MAX || candidate > best[to].score)
        best[to] = {id, candidate, from};
    };
    for (size_t start = 0; start < n;) {
      const size_t char_len =
          std::min(utf8_length(static_cast<unsigned char>(s[start])), n - start);
      bool single = false;
      // Prefixes in increasing length, like the trie's common-prefix search.
      for (size_t len = 1; len <= std::min(max_length_, n - start); ++len) {
        auto it = ids_.find(s.substr(start, len));
        if (it == ids_.end()) continue;
        relax(start, start + len, it->second, pieces_[it->second].second);
        single = single || len == char_len;
      }
      if (!single) relax(start, start + char_len, unk_id_.value_or(-1), unk_score);
      start += char_len;
    }
    std::vector<std::string> strings;
    std::string unknown;  // consecutive unknown pieces, fused
    for (size_t end = n; end > 0;) {
      const Best& node = best[end];
      std::string piece = s.substr(node.start, end - node.start);
      if (unk_id_ && node.id == *unk_id_) {
        unknown = piece + unknown;
      } else {
        if (!unknown.empty()) strings.push_back(std::move(unknown));
        unknown.clear();
        strings.push_back(std::move(piece));
      }
      end = node.start;
    }
    if (!unknown.empty()) strings.push_back(std::move(unknown));
    for (auto it = strings.rbegin(); it != strings.rend(); ++it) push(*it, out);
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return std::nullopt;
    return pieces_[id].first;
  }
  size_t vocab_size() const override { return pieces_.size(); }

 private:
  void push(const std::string& piece, std::vector<Token>& out) const {
    if (auto it = ids_.find(piece); it != ids_.end()) {
      out.push_back({it->second, piece});
      return;
    }
    if (byte_fallback_) {
      std::vector<Token> bytes;
      for (unsigned char b : piece) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        auto it = ids_.find(name);
        if (it == ids_.end()) break;
        bytes.push_back({it->second, name});
      }
      if (bytes.size() == piece.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        return;
      }
    }
    LIBAI_CHECK_KIND(CorruptInput, unk_id_.has_value(),
                     "Unigram: the text needs the unknown token but the model has no unk_id");
    out.push_back({*unk_id_, piece});
  }

  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string, int32_t> ids_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_;
  double min_score_ = 0;
  size_t max_length_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_unigram_from_json(const json& section, const JsonPlace& place) {
  const json& vocab = json_field(section, "vocab", place);
  if (!vocab.is_array()) json_error(place.at("vocab"), "expected an array of [piece, score]");
  std::vector<std::pair<std::string, double>> pieces;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const json& p = vocab[i];
    if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !p[1].is_number())
      json_error(place.at("vocab[" + std::to_string(i) + "]"), "expected [piece, score]");
    pieces.emplace_back(p[0].get<std::string>(), p[1].get<double>());
  }
  std::optional<int32_t> unk_id;
  if (section.contains("unk_id") && !section["unk_id"].is_null()) {
    const json& u = section["unk_id"];
    if (!u.is_number_unsigned() || u.get<size_t>() >= pieces.size())
      json_error(place.at("unk_id"), "expected an index into the vocabulary");
    unk_id = u.get<int32_t>();
  }
  return std::make_unique<Unigram>(std::move(pieces), unk_id,
                                   json_bool(section, "byte_fallback", false, place));
}

}  // namespace libai::tokenizers
