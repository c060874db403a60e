// Decoders (ByteLevel, WordPiece, Metaspace, Replace, Fuse, Strip, ByteFallback, Sequence) and
// post-processors (RobertaProcessing, BertProcessing, TemplateProcessing, ByteLevel, Sequence).
#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      // A token with a character outside the byte map contributes its raw UTF-8 (HF).
      std::string mapped;
      bool all = true;
      for (char32_t c : utf8_decode(token)) {
        auto b = unicode_to_byte(c);
        if (!b) {
          all = false;
          break;
        }
        mapped.push_back(static_cast<char>(*b));
      }
      bytes += all ? mapped : token;
    }
    return {utf8_lossy(bytes)};
  }
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.rfind(prefix_, 0) == 0)
          t.erase(0, prefix_.size());
        else
          t = " " + t;
      }
      if (cleanup_) t = cleanup(t);  // per token, as HF does
    }
    return tokens;
  }
  static std::string cleanup(std::string t) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) t = replace_all(std::move(t), from, to);
    return t;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepend)
      : replacement_(replacement), prepend_(prepend) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::u32string out;
      for (char32_t c : utf8_decode(tokens[i])) {
        if (c != replacement_)
          out.push_back(c);
        else if (i != 0 || !prepend_)
          out.push_back(U' ');  // the first token loses them all (HF)
      }
      tokens[i] = utf8_encode(out);
    }
    return tokens;
  }

 private:
  char32_t replacement_;
  bool prepend_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) t = replace_all(std::move(t), from_, to_);
    return tokens;
  }

 private:
  std::string from_, to_;
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::u32string s = utf8_decode(t);
      size_t begin = 0, end = s.size();
      for (size_t k = 0; k < start_ && begin < end && s[begin] == content_; ++k) ++begin;
      for (size_t k = 0; k < stop_ && end > begin && s[end - 1] == content_; ++k) --end;
      t = utf8_encode(std::u32string_view(s).substr(begin, end - begin));
    }
    return tokens;
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (!bytes.empty()) out.push_back(utf8_lossy(bytes));
      bytes.clear();
    };
    for (auto& t : tokens) {
      unsigned value = 0;
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>' &&
          std::sscanf(t.c_str() + 3, "%2x", &value) == 1) {
        bytes.push_back(static_cast<char>(value));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> items)
      : items_(std::move(items)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& item : items_) tokens = item->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

// A template: special tokens (each possibly several ids) around the sequence "A".
class Template : public PostProcessor {
 public:
  struct Piece {
    bool sequence = false;
    std::vector<Token> tokens;
  };
  explicit Template(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}
  size_t added_count() const override {
    size_t n = 0;
    for (const auto& p : pieces_) n += p.tokens.size();
    return n;
  }
  void process(Encoding& e) const override {
    Encoding out;
    for (const auto& p : pieces_) {
      if (p.sequence) {
        out.ids.insert(out.ids.end(), e.ids.begin(), e.ids.end());
        out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.end());
        continue;
      }
      for (const auto& t : p.tokens) {
        out.ids.push_back(t.id);
        out.tokens.push_back(t.value);
      }
    }
    out.attention_mask.assign(out.ids.size(), 1);
    e = std::move(out);
  }

 private:
  std::vector<Piece> pieces_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> items)
      : items_(std::move(items)) {}
  size_t added_count() const override {
    size_t n = 0;
    for (const auto& item : items_) n += item->added_count();
    return n;
  }
  void process(Encoding& e) const override {
    for (const auto& item : items_) item->process(e);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

Token token_pair(const json& section, const char* key, const JsonPlace& place) {
  const json& v = json_field(section, key, place);
  if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number_integer())
    json_error(place.at(key), "expected [token, id]");
  return {v[1].get<int32_t>(), v[0].get<std::string>()};
}

char32_t one_char(const json& section, const char* key, const JsonPlace& place) {
  const std::u32string s = utf8_decode(json_string(section, key, place));
  if (s.size() != 1) json_error(place.at(key), "expected one character");
  return s[0];
}

}  // namespace

std::unique_ptr<PostProcessor> make_cls_sep_processor(Token cls, Token sep) {
  return std::make_unique<Template>(std::vector<Template::Piece>{
      {false, {std::move(cls)}}, {true, {}}, {false, {std::move(sep)}}});
}
std::unique_ptr<Decoder> make_byte_level_decoder() { return std::make_unique<ByteLevelDecoder>(); }
std::unique_ptr<Decoder> make_wordpiece_decoder(std::string prefix, bool cleanup) {
  return std::make_unique<WordPieceDecoder>(std::move(prefix), cleanup);
}

std::unique_ptr<PostProcessor> make_post_processor(const json& section, const JsonPlace& place) {
  if (section.is_null()) return nullptr;
  const std::string type = json_type(section, place);
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return make_cls_sep_processor(token_pair(section, "cls", place),
                                  token_pair(section, "sep", place));
  if (type == "ByteLevel")
    return std::make_unique<SequenceProcessor>(std::vector<std::unique_ptr<PostProcessor>>{});
  if (type == "TemplateProcessing") {
    const json& single = json_field(section, "single", place);
    const json& specials = json_field(section, "special_tokens", place);
    if (!single.is_array()) json_error(place.at("single"), "expected an array");
    std::vector<Template::Piece> pieces;
    for (const json& item : single) {
      if (item.contains("Sequence")) {
        pieces.push_back({true, {}});
        continue;
      }
      const JsonPlace at = place.at("single");
      const json& special = json_field(item, "SpecialToken", at);
      const std::string name = json_string(special, "id", at.at("SpecialToken"));
      const JsonPlace sp = place.at("special_tokens").at(name);
      const json& entry = json_field(specials, name, place.at("special_tokens"));
      const json& ids = json_field(entry, "ids", sp);
      const json& tokens = json_field(entry, "tokens", sp);
      if (!ids.is_array() || !tokens.is_array() || ids.size() != tokens.size())
        json_error(sp, "expected ids and tokens of the same length");
      Template::Piece piece;
      for (size_t i = 0; i < ids.size(); ++i)
        piece.tokens.push_back({ids[i].get<int32_t>(), tokens[i].get<std::string>()});
      pieces.push_back(std::move(piece));
    }
    return std::make_unique<Template>(std::move(pieces));
  }
  if (type == "Sequence") {
    const json& list = json_field(section, "processors", place);
    std::vector<std::unique_ptr<PostProcessor>> items;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_post_processor(list[i], place.at("processors[" + std::to_string(i) + "]")))
        items.push_back(std::move(p));
    return std::make_unique<SequenceProcessor>(std::move(items));
  }
  LIBAI_THROW(Unsupported, place.file, ": field '", place.field, ".type': post-processor type '",
              type, "' is not supported");
}

std::unique_ptr<Decoder> make_decoder(const json& section, const JsonPlace& place) {
  if (section.is_null()) return nullptr;
  const std::string type = json_type(section, place);
  if (type == "ByteLevel") return make_byte_level_decoder();
  if (type == "WordPiece") {
    std::string prefix = section.contains("prefix") ? json_string(section, "prefix", place) : "##";
    return make_wordpiece_decoder(std::move(prefix), json_bool(section, "cleanup", true, place));
  }
  if (type == "Metaspace") {
    bool prepend = json_bool(section, "add_prefix_space", true, place);
    if (section.contains("prepend_scheme"))
      prepend = json_string(section, "prepend_scheme", place) != "never";
    return std::make_unique<MetaspaceDecoder>(one_char(section, "replacement", place), prepend);
  }
  if (type == "Replace") {
    const json& pattern = json_field(section, "pattern", place);
    if (!pattern.is_object() || !pattern.contains("String"))
      LIBAI_THROW(Unsupported, place.file, ": field '", place.at("pattern").field,
                  "': only string patterns are supported");
    return std::make_unique<ReplaceDecoder>(pattern["String"].get<std::string>(),
                                            json_string(section, "content", place));
  }
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(one_char(section, "content", place),
                                          json_field(section, "start", place).get<size_t>(),
                                          json_field(section, "stop", place).get<size_t>());
  if (type == "Sequence") {
    const json& list = json_field(section, "decoders", place);
    std::vector<std::unique_ptr<Decoder>> items;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto d = make_decoder(list[i], place.at("decoders[" + std::to_string(i) + "]")))
        items.push_back(std::move(d));
    return std::make_unique<SequenceDecoder>(std::move(items));
  }
  LIBAI_THROW(Unsupported, place.file, ": field '", place.field, ".type': decoder type '", type,
              "' is not supported");
}

}  // namespace libai::tokenizers
