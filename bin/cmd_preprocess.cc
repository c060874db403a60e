// `libai-actor preprocess --input FILE --tokenizer DIR --output-prefix P [--json-keys K ...]
// [--split-paragraphs] [--append-eod] [--workers N] [--json]`: text to Megatron indexed
// datasets, as Megatron's tools/preprocess_data.py writes them (train/data/preprocess.h):
// P_<key>_document.{bin,idx} per JSON key (plain text: P_text_document).
//
//   human: one line per output (documents, sequences, tokens, token type), then the throughput
//   --json: {"outputs": [{"key", "prefix", "documents", "sequences", "tokens"}], "documents",
//            "input_bytes", "seconds", "token_dtype", "eod_id"}
// Progress (docs/s, MB/s, ETA) goes to stderr each second.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bin/commands.h"
#include "train/data/preprocess.h"

namespace libai::cli {
namespace {

namespace data = train::data;

struct PreprocessFlags {
  data::PreprocessOptions options;
  std::string format = "auto";
  bool json = false;
};

int preprocess(PreprocessFlags& flags) {
  if (flags.format == "jsonl") flags.options.format = data::InputFormat::jsonl;
  if (flags.format == "text") flags.options.format = data::InputFormat::text;
  const data::PreprocessResult r = data::preprocess(flags.options);
  if (flags.json) {
    nlohmann::ordered_json out;
    out["outputs"] = nlohmann::ordered_json::array();
    for (const auto& o : r.outputs)
      out["outputs"].push_back({{"key", o.key},
                                {"prefix", o.prefix},
                                {"documents", o.documents},
                                {"sequences", o.sequences},
                                {"tokens", o.tokens}});
    out["documents"] = r.documents;
    out["input_bytes"] = r.input_bytes;
    out["seconds"] = r.seconds;
    out["token_dtype"] = data::token_dtype_name(r.token_dtype);
    out["eod_id"] = r.eod_id;
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  for (const auto& o : r.outputs)
    std::printf("%s.{bin,idx}: %lld documents, %lld sequences, %lld %s tokens\n", o.prefix.c_str(),
                static_cast<long long>(o.documents), static_cast<long long>(o.sequences),
                static_cast<long long>(o.tokens), data::token_dtype_name(r.token_dtype));
  std::printf("%lld documents, %.2f MB in %.2f s: %.0f docs/s, %.2f MB/s\n",
              static_cast<long long>(r.documents), double(r.input_bytes) / 1e6, r.seconds,
              double(r.documents) / std::max(r.seconds, 1e-9),
              double(r.input_bytes) / 1e6 / std::max(r.seconds, 1e-9));
  return kExitOk;
}

}  // namespace

CommandAction setup_preprocess(CLI::App& command) {
  auto flags = std::make_shared<PreprocessFlags>();
  data::PreprocessOptions& o = flags->options;
  command.add_option("--input", o.input, "JSON lines (.jsonl) or plain text")->required();
  command.add_option("--tokenizer", o.tokenizer, "a model folder or tokenizer file")->required();
  command.add_option("--output-prefix", o.output_prefix, "writes <prefix>_<key>_document.bin/.idx")
      ->required();
  command.add_option("--json-keys", o.json_keys, "keys read from each JSON line (default text)");
  command.add_option("--format", flags->format, "input format: auto (by extension), jsonl, text")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}));
  command.add_flag("--split-paragraphs", o.split_paragraphs,
                   "plain text: documents are separated by blank lines (default: one per line)");
  command.add_flag("--append-eod", o.append_eod, "end each document with the tokenizer's eos");
  command.add_option("--workers", o.workers, "tokenizing threads")->check(CLI::PositiveNumber);
  command.add_flag("--json", flags->json, "print one JSON document");
  return [flags] { return preprocess(*flags); };
}

}  // namespace libai::cli
