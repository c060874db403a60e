// The one table of libai-actor's subcommands (see commands.h).
#include "bin/commands.h"

#include <iostream>

namespace libai::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "run a job config on this node (run it on every node with the same config)",
       setup_run},
      {"train", "train or fine-tune a model from a config (--resume continues a run)", setup_train},
      {"generate", "generate text from a model", setup_generate},
      {"plan", "print the pipeline plan of a job config (split, timeline, step time)", setup_plan},
      {"convert", "convert a checkpoint between Hugging Face and libai layouts", setup_convert},
      {"export", "export a model to another format: `export onnx --model DIR --out FILE`",
       setup_export},
      {"checkpoint", "training checkpoints: merge one (whole or sharded) into a Hugging Face folder",
       setup_checkpoint},
      {"preprocess", "tokenize text into Megatron indexed datasets (.bin + .idx)",
       setup_preprocess},
      {"bench", "list or run the runtime benchmarks (bench/RESULTS.md has their figures)",
       setup_bench},
      {"serve", "serve a model over HTTP with an OpenAI-style API (docs/SERVER.md)", setup_serve},
      {"embed", "mean-pooled, L2-normalised sentence embeddings", setup_embed},
      {"fill-mask", "predict the [MASK] tokens of a text", setup_fill_mask},
      {"classify", "classify a text or an image", setup_classify},
      {"forward", "raw logits or hidden states of a model, for parity checks", setup_forward},
      {"config", "show a resolved config", setup_config},
  };
  return table;
}

}  // namespace libai::cli
