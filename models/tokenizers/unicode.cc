#include "models/tokenizers/unicode.h"

#include <algorithm>
#include <unordered_map>

namespace libai::tokenizers {
namespace {

constexpr char32_t kReplacement = 0xFFFD;
constexpr char32_t kHangulBase = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr uint32_t kHangulCount = 11172, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;

// Entries of a "(first << shift) | value" run table: the run containing c.
uint32_t run_value(const uint32_t* runs, size_t size, char32_t c, int shift) {
  const uint32_t key = (static_cast<uint32_t>(c) << shift) | ((1u << shift) - 1);
  const uint32_t* it = std::upper_bound(runs, runs + size, key);
  if (it == runs) return 0;
  return *(it - 1) & ((1u << shift) - 1);
}

int combining_class(char32_t c) {
  return static_cast<int>(run_value(tables::kCombiningRuns, tables::kCombiningRuns_size, c, 8));
}

const tables::Decomposition* find_decomposition(char32_t c) {
  const auto* begin = tables::kDecompositions;
  const auto* end = begin + tables::kDecompositions_size;
  const auto* it = std::lower_bound(
      begin, end, c, [](const tables::Decomposition& d, char32_t v) { return d.code_point < v; });
  return it != end && it->code_point == c ? it : nullptr;
}

const tables::CompatDecomposition* find_compat_decomposition(char32_t c) {
  const auto* begin = tables::kCompatDecompositions;
  const auto* end = begin + tables::kCompatDecompositions_size;
  const auto* it = std::lower_bound(
      begin, end, c,
      [](const tables::CompatDecomposition& d, char32_t v) { return d.code_point < v; });
  return it != end && it->code_point == c ? it : nullptr;
}

// The full decomposition of c: canonical, or with `compat` compatibility too (NFKD), each part
// decomposed again (a compatibility part may decompose canonically and the other way round).
void decompose(char32_t c, std::u32string& out, bool compat) {
  if (c >= kHangulBase && c < kHangulBase + kHangulCount) {
    const uint32_t s = c - kHangulBase;
    out.push_back(kHangulL + s / kNCount);
    out.push_back(kHangulV + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kHangulT + s % kTCount);
    return;
  }
  if (compat) {
    if (const tables::CompatDecomposition* k = find_compat_decomposition(c)) {
      for (uint32_t i = 0; i < k->count; ++i)
        decompose(tables::kCompatParts[k->first + i], out, true);
      return;
    }
  }
  const tables::Decomposition* d = find_decomposition(c);
  if (d == nullptr) {
    out.push_back(c);
    return;
  }
  decompose(d->first, out, compat);
  if (d->second != 0) decompose(d->second, out, compat);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kHangulL && a < kHangulL + 19 && b >= kHangulV && b < kHangulV + kVCount)
    return kHangulBase + ((a - kHangulL) * kVCount + (b - kHangulV)) * kTCount;
  if (a >= kHangulBase && a < kHangulBase + kHangulCount && (a - kHangulBase) % kTCount == 0 &&
      b > kHangulT && b < kHangulT + kTCount)
    return a + (b - kHangulT);
  static const auto* pairs = [] {
    auto* map = new std::unordered_map<uint64_t, char32_t>();
    for (size_t i = 0; i < tables::kDecompositions_size; ++i) {
      const auto& d = tables::kDecompositions[i];
      if (d.composes) map->emplace((uint64_t{d.first} << 32) | d.second, d.code_point);
    }
    return map;
  }();
  auto it = pairs->find((uint64_t{a} << 32) | b);
  return it == pairs->end() ? 0 : it->second;
}

}  // namespace

CharClass char_class(char32_t c) {
  return static_cast<CharClass>(run_value(tables::kClassRuns, tables::kClassRuns_size, c, 3));
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_alphanumeric(char32_t c) {
  const CharClass k = char_class(c);
  return k == CharClass::letter || k == CharClass::number;
}

char32_t simple_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const auto* begin = tables::kLowerRuns;
  const auto* end = begin + tables::kLowerRuns_size;
  const auto* it = std::upper_bound(
      begin, end, c, [](char32_t v, const tables::LowerRun& r) { return v < r.first; });
  if (it == begin) return c;
  const tables::LowerRun& run = *(it - 1);
  const uint32_t offset = c - run.first;
  if (offset % run.stride != 0 || offset / run.stride >= run.count) return c;
  return static_cast<char32_t>(static_cast<int64_t>(c) + run.delta);
}

void append_lower(std::u32string& out, char32_t c) {
  if (c == 0x130) {  // the one code point whose lowercase is two: i + combining dot above
    out.push_back(U'i');
    out.push_back(0x307);
    return;
  }
  out.push_back(simple_lower(c));
}

namespace {

// Full decomposition, then canonical ordering (the D of NFD and NFKD).
std::u32string decomposed(std::u32string_view text, bool compat) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) decompose(c, out, compat);
  // Canonical ordering: a stable sort by combining class inside each run of non-starters.
  for (size_t i = 0; i < out.size();) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  return out;
}

// Canonical composition of a decomposed, canonically ordered text (the C of NFC and NFKC).
std::u32string composed(const std::u32string& decomposed) {
  std::u32string out;
  out.reserve(decomposed.size());
  size_t starter = std::u32string::npos;
  int last_class = 0;
  for (char32_t c : decomposed) {
    const int cls = combining_class(c);
    if (starter != std::u32string::npos) {
      const bool adjacent = starter + 1 == out.size();
      if (adjacent || (last_class != 0 && last_class < cls)) {
        if (char32_t composite = compose_pair(out[starter], c)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (cls == 0) starter = out.size();
    last_class = cls;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::u32string nfd(std::u32string_view text) { return decomposed(text, false); }
std::u32string nfkd(std::u32string_view text) { return decomposed(text, true); }
std::u32string nfc(std::u32string_view text) { return composed(decomposed(text, false)); }
std::u32string nfkc(std::u32string_view text) { return composed(decomposed(text, true)); }

GraphemeBreak grapheme_break(char32_t c) {
  return static_cast<GraphemeBreak>(
      run_value(tables::kGraphemeRuns, tables::kGraphemeRuns_size, c, 4));
}

// Note [Grapheme clusters]
// UAX #29's extended grapheme cluster rules GB3-GB13 over the Grapheme_Cluster_Break table of
// make_unicode_tables.py. That table is derived from general categories plus short lists
// (Python's unicodedata has no such property), and it leaves out the Indic conjunct rule
// (GB9c, Unicode 15.1), so clusters can differ from Rust's unicode-segmentation on rare
// scripts; they agree on Latin, CJK, Hangul, combining marks, emoji ZWJ sequences and flags.
namespace {

// Whether GB3-GB13 keep `next` in the cluster that ends with `previous`; `emoji_zwj`: that
// cluster ends ExtPict Extend* ZWJ (GB11); `regional`: it ends with this many RIs (GB12/13).
bool grapheme_joins(GraphemeBreak previous, GraphemeBreak next, bool emoji_zwj, size_t regional) {
  using B = GraphemeBreak;
  const auto control = [](B b) { return b == B::cr || b == B::lf || b == B::control; };
  if (previous == B::cr && next == B::lf) return true;
  if (control(previous) || control(next)) return false;
  if (previous == B::l && (next == B::l || next == B::v || next == B::lv || next == B::lvt))
    return true;
  if ((previous == B::lv || previous == B::v) && (next == B::v || next == B::t)) return true;
  if ((previous == B::lvt || previous == B::t) && next == B::t) return true;
  if (next == B::extend || next == B::zwj || next == B::spacing_mark) return true;
  if (previous == B::prepend) return true;
  if (emoji_zwj && next == B::extended_pictographic) return true;
  return regional % 2 == 1 && next == B::regional_indicator;
}

}  // namespace

size_t grapheme_end(std::u32string_view text, size_t begin) {
  using B = GraphemeBreak;
  if (begin >= text.size()) return text.size();
  B previous = grapheme_break(text[begin]);
  bool emoji = previous == B::extended_pictographic;  // the cluster so far ends ExtPict Extend*
  bool emoji_zwj = false;                             // ... ExtPict Extend* ZWJ
  size_t regional = previous == B::regional_indicator ? 1 : 0;
  size_t i = begin + 1;
  for (; i < text.size(); ++i) {
    const B next = grapheme_break(text[i]);
    if (!grapheme_joins(previous, next, emoji_zwj, regional)) break;
    emoji_zwj = next == B::zwj && emoji;
    emoji = next == B::extended_pictographic || (emoji && next == B::extend);
    regional = next == B::regional_indicator ? regional + 1 : 0;
    previous = next;
  }
  return i;
}

std::u32string utf8_decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    int need = 0;
    char32_t cp = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1, cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2, cp = b & 0x0F;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3, cp = b & 0x07;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (int k = 0; k < need; ++k, ++j) {
      const unsigned char min = k == 0 ? lo : 0x80, max = k == 0 ? hi : 0xBF;
      if (j >= n || s[j] < min || s[j] > max) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (s[j] & 0x3F);
    }
    out.push_back(ok ? cp : kReplacement);
    i = j;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) utf8_append(out, c);
  return out;
}

}  // namespace libai::tokenizers
