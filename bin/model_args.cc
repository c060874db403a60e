#include "bin/model_args.h"

#include "models/gguf.h"

#include "bin/commands.h"
#include "runtime/comm/spmd.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <unistd.h>

#include "models/gguf.h"
#include "models/vision/image.h"
#include "runtime/error.h"

namespace libai::cli {

namespace fs = std::filesystem;
using models::Task;

void add_model_flags(CLI::App& command, ModelFlags& flags, bool with_dtype) {
  command.add_option("--model", flags.folder, "model folder (config.json, weights, tokenizer) or GGUF file")
      ->required();
  command.add_option("--tensor-parallel-size", flags.tensor_parallel_size,
                     "split the model over N ranks (threads of this process)")
      ->check(CLI::Range(1, 64));
  command.add_flag("--no-pack-weights", flags.no_pack,
                   "do not pack the weights for the CPU's inference kernel (saves a copy of the "
                   "linear weights' memory; slower)");
  command.add_option("--packed-dtype", flags.packed_dtype,
                     "dtype of the packed weight copies: f32, or bf16 (rounds the linear and "
                     "output weights to bf16: half the bytes to read per decoded token; the "
                     "activations stay f32)");
  add_quantize_flags(command, flags.quantize, flags.quantize_keep);
  if (with_dtype)
    command.add_option("--dtype", flags.dtype, "parameter and activation dtype: f32 or bf16");
}

void add_quantize_flags(CLI::App& command, std::string& quantize,
                        std::vector<std::string>& keep) {
  command.add_option("--quantize", quantize,
                     "quantized packed weights: none, int8 (int8 weights, f32 activations), "
                     "int8-dynamic (and the rows of multi-row products quantized at run time), "
                     "q4 (4-bit weights in groups of 32 inputs), q4:GROUP or q4:GROUP:min");
  command.add_option("--quantize-keep", keep,
                     "a layer left unquantized under --quantize (a module name such as layers.0 or "
                     "layers.11.mlp.down, or output for the LM head); repeatable");
}

DType parse_dtype_flag(const std::string& text, const char* flag) {
  if (text == "f32" || text == "float32") return DType::f32;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  LIBAI_THROW(InvalidArgument, flag, ": '", text, "' is not a supported dtype (f32 or bf16)");
}

void check_model_folder(const std::string& folder, const std::string& flag) {
  LIBAI_CHECK_KIND(NotFound, fs::exists(folder), flag, " ", folder, ": no such folder or file");
  if (models::is_gguf(folder)) return;  // a GGUF file (models/gguf.h)
  LIBAI_CHECK_KIND(NotFound, fs::is_directory(folder), flag, " ", folder,
                   ": neither a model folder nor a GGUF file");
  LIBAI_CHECK_KIND(NotFound, fs::exists(fs::path(folder) / "config.json"), flag, " ", folder,
                   ": no config.json (not a Hugging Face or libai model folder)");
}

namespace {

using Clock = std::chrono::steady_clock;

void require_task(const models::Model& model, const std::string& folder, const std::string& command,
                  std::initializer_list<Task> accepted) {
  if (accepted.size() == 0) return;
  std::string names;
  size_t i = 0;
  for (Task task : accepted) {
    if (task == model.task()) return;
    names += std::string(i == 0                     ? ""
                         : i + 1 == accepted.size() ? " or "
                                                    : ", ") +
             models::task_name(task);
    ++i;
  }
  LIBAI_THROW(Unsupported, folder, ": ", command, " needs a model of kind ", names,
              ", this one is ", models::task_name(model.task()), " (",
              model.config().architecture(), ")");
}

// A failed command prints exactly one line, so the load line (progress, not a result) is printed
// on a terminal, or in a log when the load took long enough to matter.
void print_loaded(const std::string& folder, models::Model& model, DType dtype,
                  Clock::time_point start) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (seconds < 1.0 && !isatty(fileno(stderr))) return;
  std::fprintf(stderr, "[load] %s: %s (%s), %.2f M parameters, %s, %.2f s\n", folder.c_str(),
               model.config().model_type().c_str(), models::task_name(model.task()),
               double(model.parameter_count()) / 1e6, dtype_name(dtype), seconds);
  std::fflush(stderr);
}

models::LoadOptions load_options(const ModelFlags& flags) {
  check_model_folder(flags.folder);
  models::LoadOptions options;
  options.dtype = parse_dtype_flag(flags.dtype);
  options.tp = flags.tp;
  options.pack_weights = !flags.no_pack;  // every command loading through here only runs forward
  options.pack_dtype = parse_dtype_flag(flags.packed_dtype, "--packed-dtype");
  LIBAI_CHECK(options.pack_dtype == DType::f32 || options.pack_weights,
              "--packed-dtype ", flags.packed_dtype, " needs packed weights (drop --no-pack-weights)");
  options.quantize = ops::parse_quantization(flags.quantize, "--quantize");
  options.quantize_keep = flags.quantize_keep;
  const bool quantized = options.quantize.kind != ops::Quantization::none;
  LIBAI_CHECK(!quantized || options.pack_weights, "--quantize ", flags.quantize,
              " needs packed weights (drop --no-pack-weights)");
  LIBAI_CHECK(!quantized || options.pack_dtype == DType::f32, "--quantize ", flags.quantize,
              " and --packed-dtype ", flags.packed_dtype, " exclude each other (the layers ",
              "kept unquantized stay f32)");
  LIBAI_CHECK(!quantized || options.dtype == DType::f32, "--quantize ", flags.quantize,
              " needs --dtype f32 (the activations are f32), not ", flags.dtype);
  LIBAI_CHECK(quantized || options.quantize_keep.empty(),
              "--quantize-keep needs --quantize (nothing is quantized)");
  return options;
}

}  // namespace

models::pipelines::TextModel load_text_model(const ModelFlags& flags, const std::string& command,
                                             std::initializer_list<Task> accepted) {
  const auto start = Clock::now();
  const models::LoadOptions options = load_options(flags);
  const DType dtype = options.dtype;
  std::optional<models::pipelines::TextModel> loaded;
  try {
    loaded = models::pipelines::TextModel::load(flags.folder, options);
  } catch (const NotFound&) {
    // No tokenizer: a model of the wrong kind (a ViT given to a text command) says so instead.
    require_task(*models::load_model(flags.folder, options), flags.folder, command, accepted);
    throw;
  }
  auto& m = *loaded;
  require_task(m.model(), flags.folder, command, accepted);
  if (flags.leader) print_loaded(flags.folder, m.model(), dtype, start);
  return std::move(m);
}

std::unique_ptr<models::Model> load_bare_model(const ModelFlags& flags, const std::string& command,
                                               std::initializer_list<Task> accepted) {
  const auto start = Clock::now();
  const models::LoadOptions options = load_options(flags);
  const DType dtype = options.dtype;
  auto model = models::load_model(flags.folder, options);
  require_task(*model, flags.folder, command, accepted);
  if (flags.leader) print_loaded(flags.folder, *model, dtype, start);
  return model;
}

int run_on_ranks(const ModelFlags& flags, const std::function<int(const ModelFlags&)>& command) {
  if (flags.tensor_parallel_size <= 1) return command(flags);
  check_model_folder(flags.folder);  // one error line, before any rank starts
  int leader_code = kExitOk;
  comm::run_spmd_threads(flags.tensor_parallel_size, [&](comm::Communicator& c) {
    ModelFlags mine = flags;
    mine.tp = std::shared_ptr<comm::Communicator>(&c, [](comm::Communicator*) {});
    mine.leader = c.rank() == 0;
    const int code = command(mine);
    if (mine.leader) leader_code = code;
  });
  return leader_code;
}

std::vector<int64_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int64_t> ids;
  size_t start = 0;
  for (int position = 1;; ++position) {
    const size_t comma = text.find(',', start);
    const std::string raw = text.substr(start, comma == std::string::npos ? comma : comma - start);
    const size_t first = raw.find_first_not_of(" \t");
    const std::string item = first == std::string::npos
                                 ? ""
                                 : raw.substr(first, raw.find_last_not_of(" \t") - first + 1);
    LIBAI_CHECK(!item.empty(), flag, " '", text, "': item ", position,
                " is empty (expected integer token ids like 1,2,3)");
    size_t used = 0;
    int64_t id = 0;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    LIBAI_CHECK(used == item.size(), flag, " '", text, "': item ", position, " '", item,
                "' is not an integer token id");
    LIBAI_CHECK(id >= 0, flag, " '", text, "': item ", position, " is negative (", id, ")");
    ids.push_back(id);
    if (comma == std::string::npos) return ids;
    start = comma + 1;
  }
}

std::vector<std::vector<int64_t>> parse_id_lists(const std::vector<std::string>& texts,
                                                 const std::string& flag) {
  std::vector<std::vector<int64_t>> lists;
  for (const std::string& text : texts) lists.push_back(parse_id_list(text, flag));
  return lists;
}

void check_ids_in_vocab(const models::Model& model, const std::vector<std::vector<int64_t>>& lists,
                        const std::vector<std::string>& texts, const std::string& flag) {
  const int64_t vocab = model.config().get_int("vocab_size", 0);
  if (vocab <= 0) return;
  for (size_t i = 0; i < lists.size(); ++i)
    for (int64_t id : lists[i])
      LIBAI_CHECK(id < vocab, flag, " '", texts[i], "': id ", id,
                  " is outside the model's vocabulary (vocab_size ", vocab, ")");
}

PaddedBatch pad_right(const std::vector<std::vector<int64_t>>& rows, int64_t pad) {
  size_t longest = 0;
  for (const auto& row : rows) longest = std::max(longest, row.size());
  std::vector<int64_t> ids, mask;
  for (const auto& row : rows)
    for (size_t i = 0; i < longest; ++i) {
      ids.push_back(i < row.size() ? row[i] : pad);
      mask.push_back(i < row.size() ? 1 : 0);
    }
  const Shape shape{int64_t(rows.size()), int64_t(longest)};
  return {Tensor::from_vector(ids, shape), Tensor::from_vector(mask, shape)};
}

Tensor pixel_values(const std::string& folder, const Tensor& rgb, DType dtype) {
  const auto processor = vision::ImageProcessor::load(folder);
  Tensor pixels = processor.preprocess(rgb);  // [1, 3, height, width]
  if (pixels.dtype() == dtype) return pixels;
  Tensor converted = Tensor::empty(pixels.shape(), dtype);
  converted.copy_from(pixels);
  return converted;
}

void print_json(const Json& document) {
  // Invalid UTF-8 (a token decoded mid-character) is replaced rather than thrown.
  std::cout << document.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
}

std::string format_values(const std::vector<float>& values, size_t count) {
  std::string out = "[";
  char buffer[32];
  for (size_t i = 0; i < values.size() && i < count; ++i) {
    std::snprintf(buffer, sizeof buffer, "%s%.4f", i ? ", " : "", double(values[i]));
    out += buffer;
  }
  if (values.size() > count) out += ", ...";
  return out + "]";
}

std::string in_quotes(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '"')
      out += "\\\"";
    else
      out += c;
  }
  return out + "\"";
}

}  // namespace libai::cli
