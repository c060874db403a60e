// What the model commands (generate, embed, fill-mask, classify, forward, convert) share: the
// --model / --dtype flags, loading with a timing line, id-list parsing and JSON printing.
//
//   auto flags = std::make_shared<ModelFlags>();
//   add_model_flags(command, *flags);                           // --model DIR, --dtype f32|bf16
//   auto m = load_text_model(*flags, "generate", {Task::causal_lm, Task::seq2seq_lm});
//   // stderr: [load] tests/data/models/gpt2: gpt2 (causal-lm), 0.07 M parameters, f32, 0.01 s
//   auto ids = parse_id_list("1,2,3", "--prompt-ids");        // {1, 2, 3}
//
// Errors are libai::Error with one line that names the flag and the bad value; a model that
// cannot do the command's task is refused before anything is printed.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "runtime/comm/communicator.h"
#include "models/pipelines/pipelines.h"

namespace libai::cli {

struct ModelFlags {
  std::string folder;
  std::string dtype = "f32";
  int tensor_parallel_size = 1;
  bool no_pack = false;  // --no-pack-weights: keep one copy of the weights (less memory)
  std::string packed_dtype = "f32";  // --packed-dtype f32|bf16
  std::string quantize = "none";     // --quantize none|int8|int8-dynamic|q4[:GROUP[:min]]
  std::vector<std::string> quantize_keep;  // --quantize-keep NAME (repeatable)
  // Set per rank by run_on_ranks: the rank's tensor-parallel group, and whether it prints.
  std::shared_ptr<comm::Communicator> tp;
  bool leader = true;
};
// --model DIR (required), --tensor-parallel-size N, --no-pack-weights, --packed-dtype f32|bf16
// and, when `with_dtype`, --dtype f32|bf16.
void add_model_flags(CLI::App& command, ModelFlags& flags, bool with_dtype = true);
// --quantize and --quantize-keep (the model commands and serve share them).
void add_quantize_flags(CLI::App& command, std::string& quantize, std::vector<std::string>& keep);

// Runs `command` once per tensor-parallel rank (threads of this process sharing the local
// communicator; --tensor-parallel-size 1: once, as is) with a copy of `flags` naming the
// rank's group; only rank 0 (flags.leader) prints. Returns rank 0's exit code; an error on any
// rank wakes the others and is rethrown.
int run_on_ranks(const ModelFlags& flags, const std::function<int(const ModelFlags&)>& command);

// The action of a model command: `command(options)` run on every rank, each with its own copy
// of the options (its `model` flags naming the rank's group).
template <typename Options, typename Command>
std::function<int()> on_ranks(std::shared_ptr<Options> options, Command command) {
  return [options, command] {
    return run_on_ranks(options->model, [&](const ModelFlags& rank_flags) {
      Options mine = *options;
      mine.model = rank_flags;
      return command(mine);
    });
  };
}
// "f32" | "bf16" (and their long names); InvalidArgument naming `flag` otherwise.
DType parse_dtype_flag(const std::string& text, const char* flag = "--dtype");
// NotFound when `folder` (given by `flag`) is missing or has no config.json.
void check_model_folder(const std::string& folder, const std::string& flag = "--model");

// Loads the model (and, for the text form, its tokenizer), refuses it with Unsupported when its
// task is not in `accepted` ("<folder>: generate needs a model of kind causal-lm or seq2seq-lm,
// this one is masked-lm"), then prints one "[load] ..." line with the load time to stderr (on a
// terminal, or when loading took a second or more, so that scripts see one line per failure).
models::pipelines::TextModel load_text_model(const ModelFlags& flags, const std::string& command,
                                             std::initializer_list<models::Task> accepted);
std::unique_ptr<models::Model> load_bare_model(const ModelFlags& flags, const std::string& command,
                                               std::initializer_list<models::Task> accepted);

// "1,2,3" -> {1, 2, 3}. Spaces around items are allowed; an empty list, an empty item or a
// non-integer raises InvalidArgument naming `flag`, the item and its position.
std::vector<int64_t> parse_id_list(const std::string& text, const std::string& flag);
std::vector<std::vector<int64_t>> parse_id_lists(const std::vector<std::string>& texts,
                                                 const std::string& flag);

// InvalidArgument when an id is not below config.json's vocab_size; `texts` are the flag's values.
void check_ids_in_vocab(const models::Model& model, const std::vector<std::vector<int64_t>>& lists,
                        const std::vector<std::string>& texts, const std::string& flag);

// Sequences of different lengths right-padded with `pad` into [batch, longest] i64 tensors.
struct PaddedBatch {
  Tensor ids, attention_mask;
};
PaddedBatch pad_right(const std::vector<std::vector<int64_t>>& rows, int64_t pad);

// An image (vision::load_image: [height, width, 3] u8) as the model folder's
// preprocessor_config.json prepares it: pixel_values [1, 3, height, width] in `dtype`.
Tensor pixel_values(const std::string& folder, const Tensor& rgb, DType dtype);

// JSON output keeps keys in the order written ({"prompt", "token_ids", "text"}).
using Json = nlohmann::ordered_json;
// One JSON document on stdout, followed by a newline.
void print_json(const Json& document);
// "[0.1234, -0.5678, ...]": the first `count` values with 4 decimals, "..." when cut.
std::string format_values(const std::vector<float>& values, size_t count);
// Text shown between quotes on one line (newlines and tabs escaped).
std::string in_quotes(const std::string& text);

}  // namespace libai::cli
