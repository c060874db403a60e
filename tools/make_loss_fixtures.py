#!/usr/bin/env python3
"""Builds the loss-head fixtures: what `model(**batch).loss` is in transformers, and the gradient of a
few named parameters, for a tiny model of every task; plus the BertForPreTraining model fixture.

    .venv/bin/python tools/make_loss_fixtures.py     # after tools/make_fixtures.py

Writes
  tests/data/models/bert_pretraining/   BertForPreTraining (the sizes of tests/data/models/bert), with
                                        reference.safetensors: its inputs and outputs
  tests/data/models/bert_regression/    BertForSequenceClassification with num_labels = 1 (MSE)
  tests/data/losses/<case>.safetensors  the batch (labels with -100 included), "loss", and "grad.<name>"
  tests/data/losses/<case>.json         the model fixture, our name of each parameter, versions
The other cases reuse the model fixtures of tools/make_fixtures.py and their reference inputs.
Seeded: a rerun with the same torch / transformers versions rewrites the same files. Eval mode (no
dropout), float32, gradients through torch.autograd.
"""
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import transformers  # noqa: E402
from transformers import (AutoModelForImageClassification, AutoModelForMaskedLM, AutoModelForSeq2SeqLM,  # noqa: E402
                          AutoModelForSequenceClassification, BertConfig, BertForPreTraining,
                          BertForSequenceClassification, GPT2LMHeadModel)

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODELS = os.path.join(REPO, "tests", "data", "models")
OUT = os.path.join(REPO, "tests", "data", "losses")


def reinit(model, seed, std=0.2):
    """normal(0, std) weights, norm weights 1 + normal(0, 0.1), biases normal(0, 0.1) (make_fixtures' rule)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "LayerNorm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias") or "LayerNorm" in name:
                p.copy_(0.1 * noise)
            else:
                p.copy_(std * noise)
    return model.eval()


def reference_inputs(folder, keys):
    f = safe_open(os.path.join(MODELS, folder, "reference.safetensors"), "pt")
    return {k: f.get_tensor(k) for k in keys}


def bert_config(**kw):
    return BertConfig(vocab_size=403, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                      intermediate_size=100, hidden_act="gelu", max_position_embeddings=64,
                      type_vocab_size=2, pad_token_id=0, layer_norm_eps=1e-12, **kw)


def make_bert_pretraining():
    folder = os.path.join(MODELS, "bert_pretraining")
    shutil.rmtree(folder, ignore_errors=True)
    torch.manual_seed(311)
    model = reinit(BertForPreTraining(bert_config()), 311)
    model.save_pretrained(folder)
    inputs = reference_inputs("bert", ["input_ids", "attention_mask", "token_type_ids"])
    with torch.no_grad():
        out = BertForPreTraining.from_pretrained(folder).eval()(**inputs)
    tensors = dict(inputs)
    tensors["prediction_logits"] = out.prediction_logits.contiguous()
    tensors["seq_relationship_logits"] = out.seq_relationship_logits.contiguous()
    save_file(tensors, os.path.join(folder, "reference.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump({"model_class": "BertForPreTraining", "generated_by": "tools/make_loss_fixtures.py",
                   "transformers_version": transformers.__version__, "torch_version": torch.__version__.split("+")[0],
                   "seed": 311, "inputs": "those of tests/data/models/bert",
                   "mode": "eval(), torch.no_grad(), float32"}, f, indent=2)


def make_bert_regression():
    folder = os.path.join(MODELS, "bert_regression")
    shutil.rmtree(folder, ignore_errors=True)
    torch.manual_seed(312)
    reinit(BertForSequenceClassification(bert_config(num_labels=1)), 312).save_pretrained(folder)


def masked_labels(ids, mask, seed, vocab, keep=0.3):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, vocab, ids.shape, generator=gen)
    chosen = torch.rand(ids.shape, generator=gen) < keep
    if mask is not None:
        chosen &= mask.bool()
    return torch.where(chosen, labels, torch.full_like(labels, -100))


def write_case(name, folder, auto, batch, grads, note):
    """grads: {transformers' parameter name: ours}."""
    model = auto.from_pretrained(os.path.join(MODELS, folder)).eval()
    params = dict(model.named_parameters())
    out = model(**batch)
    out.loss.backward()
    tensors = {k: v.contiguous() for k, v in batch.items()}
    tensors["loss"] = out.loss.detach().reshape(())
    for hf in grads:
        tensors["grad." + hf] = params[hf].grad.contiguous()
    os.makedirs(OUT, exist_ok=True)
    save_file(tensors, os.path.join(OUT, name + ".safetensors"), metadata={"format": "pt"})
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump({"model": folder, "model_class": type(model).__name__, "grads": grads, "batch": note,
                   "loss": out.loss.item(), "generated_by": "tools/make_loss_fixtures.py",
                   "transformers_version": transformers.__version__,
                   "torch_version": torch.__version__.split("+")[0],
                   "mode": "eval(), float32, model(**batch).loss then backward()"}, f, indent=2)
    print(f"{name}: loss {out.loss.item():.6f}")


def main():
    torch.set_grad_enabled(True)
    make_bert_pretraining()
    make_bert_regression()
    bert_in = reference_inputs("bert", ["input_ids", "attention_mask", "token_type_ids"])
    bert_grads = {"bert.embeddings.word_embeddings.weight": "embed.word.weight",
                  "bert.encoder.layer.0.attention.output.dense.weight": "layers.0.attention.out.weight",
                  "cls.predictions.bias": "mlm.output.bias",
                  "cls.predictions.transform.dense.weight": "mlm.dense.weight"}

    gpt2 = reference_inputs("gpt2", ["input_ids", "attention_mask"])
    labels = gpt2["input_ids"].masked_fill(gpt2["attention_mask"] == 0, -100)
    labels[0, 7] = -100
    write_case("gpt2", "gpt2", GPT2LMHeadModel, dict(gpt2, labels=labels),
               {"transformer.wte.weight": "embed.weight",
                "transformer.h.0.ln_1.weight": "layers.0.attention_norm.weight",
                "transformer.h.1.attn.c_proj.bias": "layers.1.attention.out.bias",
                "transformer.ln_f.bias": "final_norm.bias"},
               "reference inputs of gpt2; labels = input_ids, -100 on padding and at [0, 7]")

    mlm = dict(bert_in, labels=masked_labels(bert_in["input_ids"], bert_in["attention_mask"], 5, 403))
    write_case("bert_mlm", "bert", AutoModelForMaskedLM, mlm, bert_grads,
               "reference inputs of bert; labels random ids at ~30% of real positions, else -100")

    pre = dict(mlm, next_sentence_label=torch.tensor([1, 0]))
    write_case("bert_pretraining", "bert_pretraining", BertForPreTraining, pre,
               dict(bert_grads, **{"cls.seq_relationship.weight": "nsp.weight",
                                   "bert.pooler.dense.weight": "pooler.weight"}),
               "bert_mlm's batch plus next_sentence_label [1, 0]")

    rob = reference_inputs("roberta", ["input_ids", "attention_mask"])
    rob["labels"] = masked_labels(rob["input_ids"], rob["attention_mask"], 6, 503)
    write_case("roberta_mlm", "roberta", AutoModelForMaskedLM, rob,
               {"roberta.embeddings.word_embeddings.weight": "embed.word.weight",
                "lm_head.bias": "mlm.output.bias",
                "roberta.encoder.layer.1.output.dense.weight": "layers.1.mlp.down.weight"},
               "reference inputs of roberta; labels random ids at ~30% of real positions, else -100")

    cls_grads = {"classifier.weight": "classifier.out.weight", "bert.pooler.dense.weight": "pooler.weight",
                 "bert.encoder.layer.1.intermediate.dense.weight": "layers.1.mlp.up.weight"}
    write_case("bert_cls", "bert_cls", AutoModelForSequenceClassification,
               dict(bert_in, labels=torch.tensor([2, 0])), cls_grads,
               "reference inputs of bert; labels [2, 0] (3 labels, cross-entropy)")
    write_case("bert_regression", "bert_regression", AutoModelForSequenceClassification,
               dict(bert_in, labels=torch.tensor([0.5, -1.25])), cls_grads,
               "reference inputs of bert; float labels [0.5, -1.25] (num_labels 1, MSE)")

    t5 = reference_inputs("t5", ["input_ids", "attention_mask"])
    gen = torch.Generator().manual_seed(7)
    t5_labels = torch.randint(2, 251, (2, 10), generator=gen)
    t5_labels[1, 6:] = -100
    t5_labels[0, 2] = -100
    write_case("t5", "t5", AutoModelForSeq2SeqLM, dict(t5, labels=t5_labels),
               {"shared.weight": "shared.weight",
                "decoder.block.1.layer.2.DenseReluDense.wo.weight": "decoder.layers.1.mlp.down.weight",
                "encoder.block.0.layer.0.SelfAttention.o.weight": "encoder.layers.0.attention.out.weight"},
               "reference inputs of t5 (no decoder_input_ids: labels shifted right); labels random, -100 at "
               "[0, 2] and [1, 6:]")

    vit = reference_inputs("vit", ["pixel_values"])
    write_case("vit", "vit", AutoModelForImageClassification, dict(vit, labels=torch.tensor([4, 1])),
               {"classifier.weight": "classifier.weight", "vit.layernorm.weight": "final_norm.weight",
                "vit.layers.0.attention.o_proj.weight": "layers.0.attention.out.weight"},
               "reference pixel_values of vit; labels [4, 1]")


if __name__ == "__main__":
    main()
