// `libai-actor forward --model DIR --input-ids 1,2,3 [--input-ids 4,5 ...]
//                     [--decoder-input-ids 0,7 ...] [--image FILE] [--save FILE.safetensors]
//                     [--json]`:
// one Model::forward on a batch, for parity checks against Hugging Face. Each --input-ids is one
// row; rows of different lengths are right-padded (config.json's pad_token_id, else 0) and
// masked with attention_mask (decoder rows likewise with decoder_attention_mask). --image feeds
// pixel_values to a vision model instead. Every output is printed (name, shape, dtype, first
// values) and, with --save, written under its Hugging Face name (logits, hidden_states.1, ...).
//
//   --json: {"outputs": {"logits": {"shape": [1, 3, 503], "dtype": "f32",
//                                   "first_values": [...]}, ...}, "saved": "out.safetensors"}
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "bin/model_args.h"
#include "models/vision/image.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::cli {
namespace {

constexpr int64_t kShownValues = 6;

struct ForwardOptions {
  ModelFlags model;
  std::vector<std::string> input_ids;
  std::vector<std::string> decoder_input_ids;
  std::string image;
  std::string save;
  bool json = false;
};

models::TensorMap make_inputs(const ForwardOptions& options, const models::Model& model,
                              const Tensor& rgb) {
  models::TensorMap inputs;
  if (rgb.impl_ptr() != nullptr)
    inputs["pixel_values"] =
        pixel_values(options.model.folder, rgb, parse_dtype_flag(options.model.dtype));
  const int64_t pad = model.config().get_int("pad_token_id", 0);
  const auto add_rows = [&](const std::vector<std::string>& texts, const std::string& flag,
                            const std::string& ids_name, const std::string& mask_name) {
    if (texts.empty()) return;
    const auto rows = parse_id_lists(texts, flag);
    check_ids_in_vocab(model, rows, texts, flag);
    PaddedBatch batch = pad_right(rows, pad);
    inputs[ids_name] = batch.ids;
    inputs[mask_name] = batch.attention_mask;
  };
  add_rows(options.input_ids, "--input-ids", "input_ids", "attention_mask");
  add_rows(options.decoder_input_ids, "--decoder-input-ids", "decoder_input_ids",
           "decoder_attention_mask");
  return inputs;
}

std::string shape_text(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::vector<float> first_values(const Tensor& t) {
  if (t.numel() == 0) return {};
  const Tensor flat = ops::flatten(t);
  return ops::narrow(flat, 0, 0, std::min<int64_t>(flat.numel(), kShownValues)).to_vector<float>();
}

int forward(const ForwardOptions& options) {
  LIBAI_CHECK(!options.input_ids.empty() || !options.image.empty(),
              "forward: give --input-ids 1,2,3 (or --image FILE for a vision model)");
  // Bad arguments fail before the model loads.
  parse_id_lists(options.input_ids, "--input-ids");
  parse_id_lists(options.decoder_input_ids, "--decoder-input-ids");
  const Tensor rgb = options.image.empty() ? Tensor() : vision::load_image(options.image);
  auto model = load_bare_model(options.model, "forward", {});
  const models::TensorMap inputs = make_inputs(options, *model, rgb);
  autograd::NoGradGuard no_grad;
  const models::TensorMap outputs = model->forward(inputs);

  if (!options.model.leader) return kExitOk;  // rank 0 prints
  if (!options.save.empty()) {
    checkpoint::NamedTensors named(outputs.begin(), outputs.end());
    checkpoint::save_safetensors(options.save, named,
                                 {{"format", "pt"}, {"model", options.model.folder}});
  }
  if (options.json) {
    Json described = Json::object();
    for (const auto& [name, tensor] : outputs)
      described[name] = {{"shape", tensor.shape()},
                         {"dtype", dtype_name(tensor.dtype())},
                         {"first_values", first_values(tensor)}};
    print_json(
        {{"outputs", described}, {"saved", options.save.empty() ? Json() : Json(options.save)}});
    return kExitOk;
  }
  for (const auto& [name, tensor] : outputs) {
    std::string shown = format_values(first_values(tensor), size_t(kShownValues));
    if (tensor.numel() > kShownValues) shown.insert(shown.size() - 1, ", ...");
    std::printf("%-28s %-16s %-5s %s\n", name.c_str(), shape_text(tensor.shape()).c_str(),
                dtype_name(tensor.dtype()), shown.c_str());
  }
  if (!options.save.empty())
    std::printf("saved %zu tensors to %s\n", outputs.size(), options.save.c_str());
  return kExitOk;
}

}  // namespace

CommandAction setup_forward(CLI::App& command) {
  auto options = std::make_shared<ForwardOptions>();
  add_model_flags(command, options->model);
  command
      .add_option("--input-ids", options->input_ids,
                  "token ids of one row, e.g. 1,2,3 (repeatable)")
      ->allow_extra_args(false);
  command
      .add_option("--decoder-input-ids", options->decoder_input_ids,
                  "decoder token ids of one row, for encoder-decoder models (repeatable)")
      ->allow_extra_args(false);
  command.add_option("--image", options->image, "image file, as pixel_values for a vision model");
  command.add_option("--save", options->save, "write every output to this .safetensors file");
  command.add_flag("--json", options->json, "print one JSON document");
  return on_ranks(options, [](ForwardOptions& o) { return forward(o); });
}

}  // namespace libai::cli
