// Text to indexed datasets, as Megatron's tools/preprocess_data.py does it: each input document
// tokenized (no special tokens) into one sequence per string (a JSON list gives one sequence per
// non-empty item), the tokenizer's end-of-document id appended to a non-empty document on
// request, one dataset per JSON key named <prefix>_<key>_document.{bin,idx}, uint16 tokens for
// vocabularies under 65500 else int32.
//
//   PreprocessOptions o{.input = "corpus.jsonl", .tokenizer = "models/gpt2",
//                       .output_prefix = "data/corpus", .append_eod = true, .workers = 4};
//   PreprocessResult r = preprocess(o);   // data/corpus_text_document.{bin,idx}
//
// Inputs: JSON lines (one object per line, `json_keys` read from each) or plain text, one
// document per line (blank lines skipped) or, with `split_paragraphs`, documents separated by
// blank lines (their lines joined with "\n"). A bad line (invalid JSON, a missing key, a value
// that is not a string or a list of strings) is one CorruptInput naming file:line.
//
// Note [Ordered parallel tokenizing]: the reader cuts the input into batches of whole documents
// (about 1 MB); up to `workers` batches are tokenized at once on their own threads while the
// calling thread reads the next batch and writes finished batches strictly in input order, so
// the output does not depend on the worker count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/data/indexed_dataset.h"

namespace libai::train::data {

enum class InputFormat { automatic, jsonl, text };  // automatic: .jsonl / .json / .ndjson are JSON

struct PreprocessOptions {
  std::string input;
  std::string tokenizer;  // a model folder or tokenizer file (models/tokenizers loads it)
  std::string output_prefix;
  std::vector<std::string> json_keys = {"text"};
  InputFormat format = InputFormat::automatic;
  bool split_paragraphs = false;  // plain text only
  bool append_eod = false;
  int workers = 1;
  size_t batch_bytes = size_t(1) << 20;
  bool progress = true;  // a line on stderr each second: docs/s, MB/s, ETA
};

struct PreprocessOutput {
  std::string key, prefix;  // the dataset is prefix.{bin,idx}
  int64_t documents = 0, sequences = 0, tokens = 0;
};

struct PreprocessResult {
  std::vector<PreprocessOutput> outputs;  // one per JSON key (plain text: key "text")
  int64_t documents = 0, input_bytes = 0;
  double seconds = 0;
  TokenDType token_dtype = TokenDType::u16;
  int64_t eod_id = -1;  // -1 without append_eod
};

PreprocessResult preprocess(const PreprocessOptions& options);

}  // namespace libai::train::data
