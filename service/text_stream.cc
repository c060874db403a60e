#include "service/text_stream.h"

#include <algorithm>

#include "runtime/error.h"

namespace libai::service {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool ends_incomplete(const std::string& text) {
  return text.size() >= kReplacement.size() &&
         text.compare(text.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

}  // namespace

TextStream::TextStream(const tokenizers::Tokenizer* tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  LIBAI_CHECK(tokenizer_ != nullptr || stop_.empty(),
              "stop strings need the model folder's tokenizer (this one has none)");
}

std::string TextStream::decode(size_t begin, size_t end) const {
  if (begin >= end) return {};
  return tokenizer_->decode(std::vector<int32_t>(tokens_.begin() + begin, tokens_.begin() + end),
                            /*skip_special_tokens=*/true);
}

size_t TextStream::pending_stop(size_t from) const {
  size_t longest = 0;
  for (const std::string& stop : stop_) {
    const size_t most = std::min(stop.size() - 1, text_.size() - from);
    for (size_t n = most; n > longest; --n)
      if (text_.compare(text_.size() - n, n, stop, 0, n) == 0) {
        longest = n;
        break;
      }
  }
  return longest;
}

std::string TextStream::push(int64_t token) {
  if (tokenizer_ == nullptr || stopped_) return {};
  tokens_.push_back(int32_t(token));
  const std::string context = decode(prefix_offset_, read_offset_);
  const std::string window = decode(prefix_offset_, tokens_.size());
  if (window.size() <= context.size() || ends_incomplete(window)) return {};
  text_ += window.substr(context.size());
  prefix_offset_ = read_offset_;
  read_offset_ = tokens_.size();

  // A stop string could only start in the part not yet shown: anything shown was, when shown,
  // no prefix of a stop string.
  const size_t from = shown_.size();
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stop_) stop_at = std::min(stop_at, text_.find(stop, from));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    text_.resize(stop_at);
  }
  const size_t end = stopped_ ? text_.size() : text_.size() - pending_stop(from);
  std::string piece = text_.substr(from, end - from);
  shown_ += piece;
  return piece;
}

std::string TextStream::finish() {
  if (tokenizer_ == nullptr || stopped_) return {};
  // Tokens after read_offset_ ended in an incomplete character: take them as they decode.
  const std::string context = decode(prefix_offset_, read_offset_);
  const std::string window = decode(prefix_offset_, tokens_.size());
  if (window.size() > context.size()) text_ += window.substr(context.size());
  read_offset_ = prefix_offset_ = tokens_.size();
  std::string piece = text_.substr(shown_.size());
  shown_ = text_;
  return piece;
}

}  // namespace libai::service
