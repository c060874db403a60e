#!/usr/bin/env python3
"""Trains two tiny SentencePiece models and records reference encodings for them:

    tests/data/tokenizers/sentencepiece/spiece.model           T5-style unigram
        (pad 0, eos 1, unk 2, control symbols <extra_id_0..2>, eos appended)
    tests/data/tokenizers/sentencepiece_llama/tokenizer.model  Llama-style BPE
        (unk 0, bos 1, eos 2, byte fallback, bos prepended)

and an expected.json next to each (the format of tests/data/tokenizers/*/expected.json).

    .venv/bin/pip install sentencepiece protobuf   # protobuf: for the transformers cross-check
    .venv/bin/python tools/make_sentencepiece_fixtures.py

Reference. transformers 5 has no slow (sentencepiece-based) T5Tokenizer or LlamaTokenizer, so
the ids come from `sentencepiece.SentencePieceProcessor` driven the way the slow classes drove it
(legacy mode): the text is split on the special tokens, each other part is encoded on its own,
then eos is appended (T5) or bos prepended (Llama). Decoding runs sp.decode over each run of
ordinary pieces with the special tokens kept verbatim, a run after a special token keeping its
leading space (as the Metaspace decoders of transformers' converted tokenizers do). The script
then checks every case against transformers' own T5Tokenizer / LlamaTokenizer (converted from the
.model file) and records how many agree in the json's "reference" field.

The T5-style model uses a small custom normalization rule table instead of nmt_nfkc, whose
precompiled map alone is ~240 KB; the rules still exercise the precompiled-charsmap path. The
Llama-style one keeps Llama's identity normalization and whitespace. The corpus is
make_tokenizer_fixtures.py's (which imports `tokenizers`) plus a few sentences.
"""
import io
import json
import os
import tempfile

import sentencepiece as spm

from make_tokenizer_fixtures import CORPUS

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizers")

EXTRA_CORPUS = [
    "Fill in the blanks: the cat sat on the mat, the dog slept by the door.",
    "Translate English to German: the house is wonderful and the garden is green.",
    "Summarize: sentencepiece trains subword units directly from raw sentences.",
    "Straße, Grüße, Ærø, Łódź, São Paulo, Zürich, Kraków, Dvořák, Işık.",
    "北京欢迎你。机器学习很有趣。日本の春は桜がきれいです。",
    "数字 0 1 2 3 4 5 6 7 8 9 and letters A B C D E F G.",
]

# Custom normalization (codepoints in hex): full-width A, NBSP / tab / newline / CR -> space,
# e + combining acute -> é, the fi ligature -> "fi".
RULES = "FF21\t41\nA0\t20\n9\t20\nA\t20\nD\t20\n65 301\tE9\nFB01\t66 69\n"

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "你好世界，今天天气很好。",
    "東京タワーに行きました",
    "안녕하세요 세계",
    "Emoji: 😀 🤖 ❤️ 👍 and 👨‍👩‍👧",
    "Café au lait, naïve résumé, Ångström",
    "cafe\u0301 \uff21\u00a0\ufb01ne",
    "a  b\t\tc\n\nd   ",
    "   leading spaces",
    "trailing spaces   ",
    "",
    " ",
    "hello </s> world",
    "x</s>y</s>",
    "<s>starts with bos",
    "<pad>padded<unk>",
    "fill <extra_id_0> the <extra_id_1> blanks<extra_id_2>",
    "Привет мир! Ελληνικά",
    "unseenwordqzxv ⚙ ℤ",
    "Numbers like 12345 , 3.14 .",
    "\u2581already\u2581metaspace",
    "مرحبا नमस्ते",
]


def train(path, rules, **options):
    path = os.path.abspath(path)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        # A relative rule file name: the trainer stores it in the model, which stays reproducible.
        os.chdir(tmp)
        if rules:
            options["normalization_rule_tsv"] = "rules.tsv"
            with open("rules.tsv", "w") as f:
                f.write(rules)
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(CORPUS + EXTRA_CORPUS), model_writer=model,
                character_coverage=1.0, hard_vocab_limit=False, num_threads=1, minloglevel=2,
                **options)
        finally:
            os.chdir(cwd)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(model.getvalue())
    return spm.SentencePieceProcessor(model_file=path)


def specials_of(sp):
    """The tokens matched in text before sentencepiece sees it: control pieces and unk."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if sp.is_control(i) or sp.is_unknown(i)]


def split_specials(text, specials):
    """Leftmost-longest split of text on the special tokens: [(part, is_special)]."""
    out, start, i = [], 0, 0
    while i < len(text):
        match = max((s for s in specials if text.startswith(s, i)), key=len, default=None)
        if match is None:
            i += 1
            continue
        if i > start:
            out.append((text[start:i], False))
        out.append((match, True))
        i = start = i + len(match)
    if start < len(text):
        out.append((text[start:], False))
    return out


def encode(sp, text, specials, bos, eos):
    ids = []
    for part, special in split_specials(text, specials):
        ids += [sp.piece_to_id(part)] if special else sp.encode(part)
    return ([bos] if bos is not None else []) + ids + ([eos] if eos is not None else [])


def sentinel_of(sp):
    """A plain piece without a space symbol: decoded in front of a run, it keeps sentencepiece
    from dropping the run's leading space (which it does only at the start of a text)."""
    return next(p for p in map(sp.id_to_piece, range(sp.get_piece_size()))
                if "\u2581" not in p and sp.piece_to_id(p) not in
                (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id())
                and not (p.startswith("<") and p.endswith(">")))


def decode(sp, ids, specials, skip):
    tokens = [sp.id_to_piece(i) for i in ids if not (skip and sp.id_to_piece(i) in specials)]
    sentinel = sentinel_of(sp)
    out, run, run_start = "", [], 0

    def flush():
        nonlocal out, run
        if run and run_start == 0:
            out += sp.decode_pieces(run)
        elif run:
            out += sp.decode_pieces([sentinel] + run)[len(sp.decode_pieces([sentinel])):]
        run = []

    for i, token in enumerate(tokens):
        if token in specials:
            flush()
            out += token
        else:
            if not run:
                run_start = i
            run.append(token)
    flush()
    return out


def transformers_tokenizer(cls_name, model_path, options):
    """transformers' own tokenizer for the .model file, or None if it cannot be built."""
    try:
        import transformers
        return getattr(transformers, cls_name).from_pretrained(os.path.dirname(model_path),
                                                               **options)
    except Exception as e:  # a missing optional dependency (protobuf) or API change
        print(f"  no transformers {cls_name} cross-check: {e}")
        return None


def record(name, sp, model_path, cls_name, hf_options, add_bos, add_eos):
    specials = specials_of(sp)
    bos = sp.bos_id() if add_bos else None
    eos = sp.eos_id() if add_eos else None
    cases = []
    for text in TEXTS:
        for add in (True, False):
            ids = encode(sp, text, specials, bos if add else None, eos if add else None)
            cases.append({"text": text, "add_special_tokens": add, "ids": ids,
                          "tokens": [sp.id_to_piece(i) for i in ids],
                          "decode": decode(sp, ids, specials, False),
                          "decode_skip": decode(sp, ids, specials, True)})
    reference = (f"sentencepiece {spm.__version__} SentencePieceProcessor, split on "
                 f"{specials}, {'bos prepended' if add_bos else 'eos appended'} "
                 "(transformers 5 has no slow sentencepiece-based class)")
    hf = transformers_tokenizer(cls_name, model_path, hf_options)
    if hf is not None:
        agree = {"ids": 0, "decode": 0, "decode_skip": 0}
        for c in cases:
            hf_ids = hf(c["text"], add_special_tokens=c["add_special_tokens"])["input_ids"]
            got = {"ids": hf_ids, "decode": hf.decode(c["ids"]),
                   "decode_skip": hf.decode(c["ids"], skip_special_tokens=True)}
            for key in agree:
                if got[key] == c[key]:
                    agree[key] += 1
                else:
                    print(f"  {name}: transformers {key} differs for {c['text']!r} "
                          f"(add={c['add_special_tokens']}): {got[key]!r} vs {c[key]!r}")
        import transformers
        reference += (f"; transformers {transformers.__version__} {cls_name} agrees on "
                      + ", ".join(f"{k} {v}/{len(cases)}" for k, v in agree.items()))
    print(f"{name}: {sp.get_piece_size()} pieces, {os.path.getsize(model_path)} bytes; {reference}")
    with open(os.path.join(os.path.dirname(model_path), "expected.json"), "w",
              encoding="utf-8") as f:
        json.dump({"reference": reference, "cases": cases, "batches": []}, f,
                  ensure_ascii=False, indent=0)


if __name__ == "__main__":
    t5_path = os.path.join(ROOT, "sentencepiece", "spiece.model")
    t5 = train(t5_path, RULES, model_type="unigram", vocab_size=300, pad_id=0, eos_id=1, unk_id=2,
               bos_id=-1, control_symbols=[f"<extra_id_{i}>" for i in range(3)])
    record("sentencepiece", t5, t5_path, "T5Tokenizer", {"extra_ids": 0}, add_bos=False,
           add_eos=True)

    llama_path = os.path.join(ROOT, "sentencepiece_llama", "tokenizer.model")
    # Llama's own normalizer spec: identity, whitespace kept as it is.
    llama = train(llama_path, None, model_type="bpe", vocab_size=600, unk_id=0, bos_id=1,
                  eos_id=2, pad_id=-1, byte_fallback=True, normalization_rule_name="identity",
                  remove_extra_whitespaces=False)
    record("sentencepiece_llama", llama, llama_path, "LlamaTokenizer",
           {"legacy": True, "add_bos_token": True}, add_bos=True, add_eos=False)
