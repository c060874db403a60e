# Runs transformers' generate() on the toy model of tests/models/toy_generation.h (logits are a
# hash of the last two tokens and the length of the history; hashed_logits(7) there) and
# prints the expected token ids and scores of GenerateTransformers.TokenIdsAndScoresMatch.
#
#   .venv/bin/python tools/make_generation_fixtures.py
import torch
from transformers import GenerationConfig, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

MASK = (1 << 64) - 1


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def toy_logit(history, v):
    prev2 = history[-2] if len(history) >= 2 else 999
    key = (((prev2 * 131 + history[-1]) * 131 + len(history)) * 131 + v) & MASK
    return float(mix(key) >> 40) * 6.0 / float(1 << 24) - 3.0


class ToyConfig(PretrainedConfig):
    model_type = "libai_toy"

    def __init__(self, vocab_size=7, **kw):
        super().__init__(**kw)
        self.vocab_size = vocab_size


class ToyModel(PreTrainedModel, GenerationMixin):
    config_class = ToyConfig

    def __init__(self, config):
        super().__init__(config)
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.post_init()

    def forward(self, input_ids=None, **kwargs):
        rows = []
        for history in input_ids.tolist():
            rows.append([toy_logit(history, v) for v in range(self.config.vocab_size)])
        logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], self.config.vocab_size)
        logits[:, -1, :] = torch.tensor(rows, dtype=torch.float32)
        return CausalLMOutput(logits=logits)

    def prepare_inputs_for_generation(self, input_ids, **kwargs):
        return {"input_ids": input_ids}


CASES = [
    # name, prompt, generate kwargs
    ("greedy", [3, 1, 4], dict(max_new_tokens=8)),
    ("greedy_eos", [2, 6], dict(max_new_tokens=10, eos_token_id=0)),
    ("greedy_penalties", [5, 5, 1], dict(max_new_tokens=10, repetition_penalty=1.3, no_repeat_ngram_size=2)),
    ("greedy_min_new", [2, 6], dict(max_new_tokens=10, eos_token_id=0, min_new_tokens=4)),
    ("beam3", [3, 1, 4], dict(max_new_tokens=6, num_beams=3, num_return_sequences=3)),
    ("beam4_eos", [2, 6], dict(max_new_tokens=8, num_beams=4, eos_token_id=0, num_return_sequences=4)),
    ("beam3_eos_lp2", [1], dict(max_new_tokens=8, num_beams=3, eos_token_id=[0, 3], length_penalty=2.0, num_return_sequences=3)),
    ("beam3_eos_lpneg", [6, 6], dict(max_new_tokens=8, num_beams=3, eos_token_id=0, length_penalty=-1.0, num_return_sequences=3)),
    ("beam4_penalties", [5, 5, 1], dict(max_new_tokens=8, num_beams=4, eos_token_id=0, repetition_penalty=1.5,
                                        no_repeat_ngram_size=2, min_new_tokens=3, num_return_sequences=2)),
    # early_stopping=True stops once num_beams hypotheses are finished; False keeps going
    # while the best running beam could still beat the worst hypothesis at the current length.
    ("beam3_early_false", [0, 1], dict(max_new_tokens=7, num_beams=3, eos_token_id=[0, 6], num_return_sequences=3)),
    ("beam3_early_true", [0, 1], dict(max_new_tokens=7, num_beams=3, eos_token_id=[0, 6], early_stopping=True,
                                      num_return_sequences=3)),
    ("beam2_heuristic_stop", [0, 3], dict(max_new_tokens=7, num_beams=2, eos_token_id=[0, 6], num_return_sequences=2)),
]


def main():
    model = ToyModel(ToyConfig()).eval()
    for name, prompt, kwargs in CASES:
        config = GenerationConfig(do_sample=False, use_cache=False, output_scores=True,
                                  return_dict_in_generate=True, pad_token_id=0, **kwargs)
        out = model.generate(torch.tensor([prompt]), generation_config=config)
        eos = kwargs.get("eos_token_id", [])
        eos = [eos] if isinstance(eos, int) else eos
        beams = getattr(out, "sequences_scores", None)
        if beams is None:  # greedy: the sum of the log-softmax of the processed scores
            steps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        for i, seq in enumerate(out.sequences.tolist()):
            new = seq[len(prompt):]
            ends = [k for k, t in enumerate(new) if t in eos]
            new = new[: ends[0] + 1] if ends else new
            score = beams[i].item() if beams is not None else steps[i, : len(new)].sum().item()
            print(f'  {{"{name}", {i}, {{{", ".join(map(str, new))}}}, {score!r}}},')

if __name__ == "__main__":
    main()
