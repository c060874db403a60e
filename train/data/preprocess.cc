#include "train/data/preprocess.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>

#include "models/tokenizers/tokenizer.h"
#include "runtime/error.h"
#include "runtime/progress.h"

namespace libai::train::data {

namespace {

// One input document: its text (a JSON line or plain text) and the line it starts on.
struct Record {
  int64_t line = 0;
  std::string text;
  int64_t end_offset = 0;  // input bytes read through its last line (for progress)
};

// A batch's tokens for one key: documents' tokens concatenated, each document's sequence
// lengths, and how many sequences each document has.
struct KeyTokens {
  std::vector<int64_t> tokens;
  std::vector<int64_t> sequence_lengths;
  std::vector<int32_t> sequences_per_document;
};

struct BatchResult {
  std::vector<KeyTokens> keys;
  int64_t documents = 0, end_offset = 0;
};

// Reads lines of any length in 1 MB blocks, counting them from 1.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      if (errno == ENOENT) LIBAI_THROW(NotFound, "preprocess: input ", path, " does not exist");
      LIBAI_THROW(IoError, "preprocess: cannot open ", path, ": ", std::strerror(errno));
    }
    buffer_.resize(size_t(1) << 20);
  }
  ~LineReader() { std::fclose(file_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its "\n" (or "\r\n"); false at the end. `bytes` grows by what was read.
  bool next(std::string& line, int64_t& bytes) {
    line.clear();
    for (;;) {
      if (position_ == filled_) {
        filled_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
        position_ = 0;
        if (filled_ == 0) {
          LIBAI_CHECK_KIND(IoError, !std::ferror(file_), "preprocess: reading ", path_, " failed");
          if (line.empty() && !pending_) return false;
          pending_ = false;
          ++number_;
          return true;
        }
      }
      const char* begin = buffer_.data() + position_;
      const auto* end = static_cast<const char*>(std::memchr(begin, '\n', filled_ - position_));
      if (end == nullptr) {
        line.append(begin, filled_ - position_);
        bytes += int64_t(filled_ - position_);
        pending_ = true;
        position_ = filled_;
        continue;
      }
      line.append(begin, size_t(end - begin));
      bytes += int64_t(end - begin) + 1;
      position_ = size_t(end - buffer_.data()) + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      pending_ = false;
      ++number_;
      return true;
    }
  }
  int64_t line_number() const { return number_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;
  size_t position_ = 0, filled_ = 0;
  bool pending_ = false;  // a partial last line is in `line`
  int64_t number_ = 0;
};

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; });
}

// Tokenizes one batch (on a worker thread). Megatron's Encoder.encode: per key, each string of
// the value tokenized; empty results dropped; eod appended to the last sequence of a non-empty
// document.
BatchResult encode_batch(const std::vector<Record>& batch, const PreprocessOptions& options,
                         bool json_lines, const tokenizers::Tokenizer& tokenizer, int64_t eod) {
  BatchResult out;
  out.keys.resize(json_lines ? options.json_keys.size() : 1);
  std::vector<const std::string*> strings;
  for (const Record& record : batch) {
    out.end_offset = record.end_offset;
    ++out.documents;
    nlohmann::json object;
    if (json_lines) {
      const auto where = [&] { return str_cat(options.input, ":", record.line, ": "); };
      try {
        object = nlohmann::json::parse(record.text);
      } catch (const nlohmann::json::exception& e) {
        LIBAI_THROW(CorruptInput, where(), "invalid JSON: ", e.what());
      }
      LIBAI_CHECK_KIND(CorruptInput, object.is_object(), where(), "expected a JSON object, got ",
                       object.type_name());
    }
    for (size_t k = 0; k < out.keys.size(); ++k) {
      strings.clear();
      if (json_lines) {
        const std::string& key = options.json_keys[k];
        const auto found = object.find(key);
        LIBAI_CHECK_KIND(CorruptInput, found != object.end(), options.input, ":", record.line,
                         ": no key \"", key, "\"");
        const auto bad_value = [&] {
          LIBAI_THROW(CorruptInput, options.input, ":", record.line, ": \"", key, "\" is a JSON ",
                      found->type_name(), ", expected a string or a list of strings");
        };
        if (found->is_string()) {
          strings.push_back(found->get_ptr<const std::string*>());
        } else if (found->is_array()) {
          for (const auto& item : *found) {
            if (!item.is_string()) bad_value();
            strings.push_back(item.get_ptr<const std::string*>());
          }
        } else {
          bad_value();
        }
      } else {
        strings.push_back(&record.text);
      }
      KeyTokens& keyed = out.keys[k];
      int32_t sequences = 0;
      for (const std::string* text : strings) {
        const auto ids = tokenizer.encode(*text, /*add_special_tokens=*/false).ids;
        if (ids.empty()) continue;
        keyed.tokens.insert(keyed.tokens.end(), ids.begin(), ids.end());
        keyed.sequence_lengths.push_back(int64_t(ids.size()));
        ++sequences;
      }
      if (sequences > 0 && eod >= 0) {
        keyed.tokens.push_back(eod);
        ++keyed.sequence_lengths.back();
      }
      keyed.sequences_per_document.push_back(sequences);
    }
  }
  return out;
}

}  // namespace

PreprocessResult preprocess(const PreprocessOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  LIBAI_CHECK(options.workers >= 1, "preprocess: --workers must be at least 1, got ",
              options.workers);
  LIBAI_CHECK(!options.output_prefix.empty(), "preprocess: --output-prefix is empty");
  bool json_lines = options.format == InputFormat::jsonl;
  if (options.format == InputFormat::automatic) {
    const std::string extension = std::filesystem::path(options.input).extension().string();
    json_lines = extension == ".jsonl" || extension == ".json" || extension == ".ndjson";
  }
  LIBAI_CHECK(!(json_lines && options.split_paragraphs), "preprocess: --split-paragraphs is for ",
              "plain text input, ", options.input, " is read as JSON lines");
  LIBAI_CHECK(!json_lines || !options.json_keys.empty(), "preprocess: no --json-keys given");

  const auto tokenizer = tokenizers::load_tokenizer(options.tokenizer);
  PreprocessResult result;
  if (options.append_eod) {
    // The end-of-document token: eos, else [SEP] (Megatron's BERT tokenizers use SEP as eod).
    const auto& special = tokenizer->special_tokens();
    std::optional<int32_t> id;
    if (!special.eos.empty()) id = tokenizer->token_to_id(special.eos);
    if (!id && !special.sep.empty()) id = tokenizer->token_to_id(special.sep);
    LIBAI_CHECK(id.has_value(), "preprocess: --append-eod needs an end-of-document token, the ",
                "tokenizer of ", options.tokenizer, " names no eos or sep token");
    result.eod_id = *id;
  }
  result.token_dtype = optimal_token_dtype(int64_t(tokenizer->vocab_size()));

  LineReader reader(options.input);
  std::error_code size_error;
  const auto input_size = int64_t(std::filesystem::file_size(options.input, size_error));

  const std::vector<std::string> keys =
      json_lines ? options.json_keys : std::vector<std::string>{"text"};
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& key : keys) {
    PreprocessOutput& output = result.outputs.emplace_back();
    output.key = key;
    output.prefix = options.output_prefix + "_" + key + "_document";
    writers.push_back(std::make_unique<IndexedDatasetWriter>(output.prefix, result.token_dtype));
  }

  // Progress in KiB of input (the unit the ETA needs), with documents/s and MB/s beside it.
  Progress progress("preprocess", size_error ? 0 : (input_size + 1023) / 1024, "KiB");
  int64_t bytes_done = 0, kib_reported = 0;
  char detail[128] = "";
  const auto write = [&](BatchResult batch) {
    for (size_t k = 0; k < keys.size(); ++k) {
      const KeyTokens& keyed = batch.keys[k];
      IndexedDatasetWriter& writer = *writers[k];
      size_t sequence = 0;
      int64_t offset = 0;
      for (int32_t count : keyed.sequences_per_document) {
        for (int32_t s = 0; s < count; ++s, ++sequence) {
          const int64_t length = keyed.sequence_lengths[sequence];
          writer.add_sequence(keyed.tokens.data() + offset, size_t(length));
          offset += length;
        }
        writer.end_document();
      }
    }
    result.documents += batch.documents;
    bytes_done = batch.end_offset;
    if (options.progress) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int64_t kib = bytes_done / 1024;
      std::snprintf(detail, sizeof detail, "%lld docs  %.0f docs/s  %.2f MB/s",
                    static_cast<long long>(result.documents),
                    double(result.documents) / std::max(seconds, 1e-9),
                    double(bytes_done) / 1e6 / std::max(seconds, 1e-9));
      progress.advance(kib - kib_reported, detail);
      kib_reported = kib;
    }
  };

  std::deque<std::future<BatchResult>> in_flight;
  std::vector<Record> batch;
  size_t batch_size = 0;
  const auto submit = [&] {
    if (batch.empty()) return;
    if (in_flight.size() >= size_t(options.workers)) {
      write(in_flight.front().get());
      in_flight.pop_front();
    }
    in_flight.push_back(std::async(
        std::launch::async,
        [records = std::move(batch), &options, json_lines, &tokenizer, eod = result.eod_id] {
          return encode_batch(records, options, json_lines, *tokenizer, eod);
        }));
    batch = {};
    batch_size = 0;
  };
  const auto add = [&](Record record) {
    batch_size += record.text.size();
    batch.push_back(std::move(record));
    if (batch_size >= options.batch_bytes) submit();
  };

  std::string line;
  int64_t read_bytes = 0;
  Record paragraph;
  while (reader.next(line, read_bytes)) {
    if (json_lines) {
      add({reader.line_number(), line, read_bytes});
    } else if (!options.split_paragraphs) {
      if (!is_blank(line)) add({reader.line_number(), line, read_bytes});
    } else if (is_blank(line)) {
      if (!paragraph.text.empty()) add(std::move(paragraph));
      paragraph = {};
    } else {
      if (paragraph.text.empty())
        paragraph.line = reader.line_number();
      else
        paragraph.text += '\n';
      paragraph.text += line;
      paragraph.end_offset = read_bytes;
    }
  }
  if (!paragraph.text.empty()) add(std::move(paragraph));
  submit();
  while (!in_flight.empty()) {
    write(in_flight.front().get());
    in_flight.pop_front();
  }

  // The last line: the whole input done (blank lines skipped at the end included).
  const int64_t total_kib = size_error ? 0 : (input_size + 1023) / 1024;
  if (options.progress && kib_reported < total_kib)
    progress.advance(total_kib - kib_reported, detail);
  for (size_t k = 0; k < keys.size(); ++k) {
    writers[k]->finish();
    result.outputs[k].documents = writers[k]->documents();
    result.outputs[k].sequences = writers[k]->sequences();
    result.outputs[k].tokens = writers[k]->tokens();
  }
  result.input_bytes = read_bytes;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace libai::train::data
