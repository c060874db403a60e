#!/usr/bin/env python3
"""Writes models/tokenizers/unicode_tables.cc from Python's unicodedata: the few Unicode
properties the tokenizers need (category classes, lowercase, canonical and compatibility
decomposition, combining classes and grapheme cluster breaks), as compact sorted tables.

    python3 tools/make_unicode_tables.py && clang-format -i models/tokenizers/unicode_tables.cc
"""
import os
import sys
import unicodedata

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tokenizers",
                   "unicode_tables.cc")
MAX = 0x110000

# Must match enum class CharClass in unicode.h.
CLASSES = {"L": 1, "N": 2, "Mn": 3, "P": 4, "C": 5, "other": 0}


def char_class(cp):
    cat = unicodedata.category(chr(cp))
    if cat[0] in "LNPC":
        return CLASSES[cat[0]]
    if cat == "Mn":
        return CLASSES["Mn"]
    return CLASSES["other"]


def class_runs():
    runs, prev = [], None
    for cp in range(MAX):
        cls = char_class(cp)
        if cls != prev:
            runs.append((cp << 3) | cls)
            prev = cls
    return runs


def lower_runs():
    # (first, count, stride, delta): cp = first + i*stride lowers to cp + delta.
    pairs = []
    for cp in range(MAX):
        low = chr(cp).lower()
        if len(low) == 1 and ord(low) != cp:
            pairs.append((cp, ord(low) - cp))
    runs = []
    for cp, delta in pairs:
        if runs:
            first, count, stride, d = runs[-1]
            last = first + (count - 1) * stride
            if d == delta and count == 1 and cp - first in (1, 2):
                runs[-1] = (first, 2, cp - first, d)
                continue
            if d == delta and count > 1 and cp - last == stride:
                runs[-1] = (first, count + 1, stride, d)
                continue
        runs.append((cp, 1, 1, delta))
    return runs


def decompositions():
    # Canonical, one level (applied recursively in C++); Hangul syllables are algorithmic.
    out = []
    for cp in range(MAX):
        if 0xAC00 <= cp <= 0xD7A3:
            continue
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert len(parts) <= 2, hex(cp)
        a, b = parts[0], parts[1] if len(parts) == 2 else 0
        # Primary composite: NFC recomposes the pair into cp (excludes singletons and
        # the composition exclusions).
        composes = b != 0 and unicodedata.normalize("NFC", unicodedata.normalize(
            "NFD", chr(cp))) == chr(cp)
        out.append((cp, a, b, 1 if composes else 0))
    return out


def compat_decompositions():
    # Compatibility ("<tag>"), one level (applied recursively in C++, as the canonical ones):
    # ({code point, first part, part count}, parts).
    entries, parts = [], []
    for cp in range(MAX):
        d = unicodedata.decomposition(chr(cp))
        if not d.startswith("<"):
            continue
        values = [int(x, 16) for x in d.split()[1:]]
        entries.append((cp, len(parts), len(values)))
        parts.extend(values)
    return entries, parts


# Must match enum class GraphemeBreak in unicode.h.
BREAKS = {"other": 0, "CR": 1, "LF": 2, "Control": 3, "Extend": 4, "ZWJ": 5,
          "Regional_Indicator": 6, "Prepend": 7, "SpacingMark": 8, "L": 9, "V": 10, "T": 11,
          "LV": 12, "LVT": 13, "Extended_Pictographic": 14}

# unicodedata has no Grapheme_Cluster_Break, so it is derived from the general categories as
# UAX #29 defines it, with the lists below from PropList.txt and emoji-data.txt (Unicode 14).
OTHER_GRAPHEME_EXTEND = [(0x09BE, 0x09BE), (0x09D7, 0x09D7), (0x0B3E, 0x0B3E), (0x0B57, 0x0B57),
                         (0x0BBE, 0x0BBE), (0x0BD7, 0x0BD7), (0x0CC2, 0x0CC2), (0x0CD5, 0x0CD6),
                         (0x0D3E, 0x0D3E), (0x0D57, 0x0D57), (0x0DCF, 0x0DCF), (0x0DDF, 0x0DDF),
                         (0x1B35, 0x1B35), (0x200C, 0x200C), (0x302E, 0x302F), (0xFF9E, 0xFF9F),
                         (0x1133E, 0x1133E), (0x11357, 0x11357), (0x114B0, 0x114B0),
                         (0x114BD, 0x114BD), (0x115AF, 0x115AF), (0x11930, 0x11930),
                         (0x1D165, 0x1D165), (0x1D16E, 0x1D172), (0xE0020, 0xE007F),
                         (0x1F3FB, 0x1F3FF)]  # the last: emoji modifiers, Extend since 11.0
PREPEND = [(0x0600, 0x0605), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891),
           (0x08E2, 0x08E2), (0x0D4E, 0x0D4E), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
           (0x111C2, 0x111C3), (0x1193F, 0x1193F), (0x11941, 0x11941), (0x11A3A, 0x11A3A),
           (0x11A84, 0x11A89), (0x11D46, 0x11D46)]
SPACING_MARK_EXTRA = [(0x0E33, 0x0E33), (0x0EB3, 0x0EB3)]
EXTENDED_PICTOGRAPHIC = [
    (0x00A9, 0x00A9), (0x00AE, 0x00AE), (0x203C, 0x203C), (0x2049, 0x2049), (0x2122, 0x2122),
    (0x2139, 0x2139), (0x2194, 0x2199), (0x21A9, 0x21AA), (0x231A, 0x231B), (0x2328, 0x2328),
    (0x2388, 0x2388), (0x23CF, 0x23CF), (0x23E9, 0x23F3), (0x23F8, 0x23FA), (0x24C2, 0x24C2),
    (0x25AA, 0x25AB), (0x25B6, 0x25B6), (0x25C0, 0x25C0), (0x25FB, 0x25FE), (0x2600, 0x2605),
    (0x2607, 0x2612), (0x2614, 0x2685), (0x2690, 0x2705), (0x2708, 0x2712), (0x2714, 0x2714),
    (0x2716, 0x2716), (0x271D, 0x271D), (0x2721, 0x2721), (0x2728, 0x2728), (0x2733, 0x2734),
    (0x2744, 0x2744), (0x2747, 0x2747), (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755),
    (0x2757, 0x2757), (0x2763, 0x2767), (0x2795, 0x2797), (0x27A1, 0x27A1), (0x27B0, 0x27B0),
    (0x27BF, 0x27BF), (0x2934, 0x2935), (0x2B05, 0x2B07), (0x2B1B, 0x2B1C), (0x2B50, 0x2B50),
    (0x2B55, 0x2B55), (0x3030, 0x3030), (0x303D, 0x303D), (0x3297, 0x3297), (0x3299, 0x3299),
    (0x1F000, 0x1F0FF), (0x1F10D, 0x1F10F), (0x1F12F, 0x1F12F), (0x1F16C, 0x1F171),
    (0x1F17E, 0x1F17F), (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A), (0x1F1AD, 0x1F1E5),
    (0x1F201, 0x1F20F), (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A),
    (0x1F23C, 0x1F23F), (0x1F249, 0x1F3FA), (0x1F400, 0x1F53D), (0x1F546, 0x1F64F),
    (0x1F680, 0x1F6FF), (0x1F774, 0x1F77F), (0x1F7D5, 0x1F7FF), (0x1F80C, 0x1F80F),
    (0x1F848, 0x1F84F), (0x1F85A, 0x1F85F), (0x1F888, 0x1F88F), (0x1F8AE, 0x1F8FF),
    (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945), (0x1F947, 0x1FAFF), (0x1FC00, 0x1FFFD)]


def in_ranges(cp, ranges):
    return any(a <= cp <= b for a, b in ranges)


def grapheme_break(cp):
    if cp == 0x0D:
        return "CR"
    if cp == 0x0A:
        return "LF"
    if cp == 0x200D:
        return "ZWJ"
    if 0x1F1E6 <= cp <= 0x1F1FF:
        return "Regional_Indicator"
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    if in_ranges(cp, PREPEND):
        return "Prepend"
    cat = unicodedata.category(chr(cp))
    if cat in ("Mn", "Me") or in_ranges(cp, OTHER_GRAPHEME_EXTEND):
        return "Extend"
    if cat in ("Cc", "Cf", "Zl", "Zp") or (cat == "Cs"):
        return "Control"
    if cat == "Mc" or in_ranges(cp, SPACING_MARK_EXTRA):
        return "SpacingMark"
    if in_ranges(cp, EXTENDED_PICTOGRAPHIC):
        return "Extended_Pictographic"
    return "other"


def grapheme_runs():
    runs, prev = [], None
    for cp in range(MAX):
        value = BREAKS[grapheme_break(cp)]
        if value != prev:
            runs.append((cp << 4) | value)
            prev = value
    return runs


def ccc_runs():
    runs, prev = [], 0
    for cp in range(MAX):
        c = unicodedata.combining(chr(cp))
        if c != prev:
            runs.append((cp << 8) | c)
            prev = c
    return runs


def emit(name, ctype, values, per_line=8):
    lines = [f"const {ctype} {name}[] = {{"]
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(values[i:i + per_line]) + ",")
    lines.append("};")
    lines.append(f"const size_t {name}_size = sizeof({name}) / sizeof({name}[0]);")
    return "\n".join(lines)


def main():
    compat = compat_decompositions()
    parts = [
        "// Generated by tools/make_unicode_tables.py from Python's unicodedata "
        f"(Unicode {unicodedata.unidata_version}); do not edit.",
        "// clang-format off",
        '#include "models/tokenizers/unicode.h"',
        "",
        "namespace libai::tokenizers::tables {",
        "",
        "// (first code point << 3) | CharClass, one entry where the class changes.",
        emit("kClassRuns", "uint32_t", [hex(v) for v in class_runs()], 16),
        "",
        "// {first, count, stride, delta}",
        emit("kLowerRuns", "LowerRun", ["{%s,%d,%d,%d}" % (hex(a), b, c, d)
                                        for a, b, c, d in lower_runs()], 8),
        "",
        "// {code point, first, second or 0, is a primary composite}",
        emit("kDecompositions", "Decomposition", ["{%s,%s,%s,%d}" % (hex(a), hex(b), hex(c), d)
                                                  for a, b, c, d in decompositions()], 10),
        "",
        "// {code point, first part in kCompatParts, part count}: compatibility decompositions.",
        emit("kCompatDecompositions", "CompatDecomposition",
             ["{%s,%d,%d}" % (hex(a), b, c) for a, b, c in compat[0]], 10),
        emit("kCompatParts", "uint32_t", [hex(v) for v in compat[1]], 16),
        "",
        "// (first code point << 4) | GraphemeBreak, one entry where it changes.",
        emit("kGraphemeRuns", "uint32_t", [hex(v) for v in grapheme_runs()], 16),
        "",
        "// (first code point << 8) | canonical combining class, where it changes.",
        emit("kCombiningRuns", "uint32_t", [hex(v) for v in ccc_runs()], 16),
        "",
        "}  // namespace libai::tokenizers::tables",
        "",
    ]
    with open(OUT, "w") as f:
        f.write("\n".join(parts))
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
