// preprocess (text -> indexed datasets) against the Hugging Face token ids of the GPT-2 fixture's
// tokenizer (tests/data/models/gpt2/tokenizer_reference.json), Megatron's preprocess_data.py
// rules (lists, empty strings, eod, one output per key), worker-count independence, and the
// file:line errors of bad input.
#include "train/data/preprocess.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "models/tokenizers/tokenizer.h"
#include "runtime/error.h"
#include "tests/config/test_files.h"

namespace libai::train::data {
namespace {

using nlohmann::json;
const std::string kGpt2 = LIBAI_SOURCE_DIR "/tests/data/models/gpt2";

json reference() {
  std::ifstream in(kGpt2 + "/tokenizer_reference.json");
  return json::parse(in);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

PreprocessOptions options_for(const std::string& input, const std::string& prefix) {
  PreprocessOptions o;
  o.input = input;
  o.tokenizer = kGpt2;
  o.output_prefix = prefix;
  o.progress = false;
  return o;
}

TEST(Preprocess, JsonLinesReadBackAsTheHuggingFaceIdsPlusEod) {
  const json ref = reference();
  config::testing::TempDir scratch;
  std::string lines;
  for (const auto& c : ref["cases"]) lines += json{{"text", c["text"]}, {"id", 7}}.dump() + "\n";
  PreprocessOptions o = options_for(scratch.write("corpus.jsonl", lines), scratch.file("out/c"));
  o.append_eod = true;
  std::filesystem::create_directories(scratch.file("out"));
  const PreprocessResult r = preprocess(o);

  const int64_t eos = ref["special_token_ids"]["eos_token"];
  EXPECT_EQ(r.eod_id, eos);
  EXPECT_EQ(r.token_dtype, TokenDType::u16);  // vocabulary 503 < 65500
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].prefix, scratch.file("out/c_text_document"));
  EXPECT_EQ(r.documents, int64_t(ref["cases"].size()));
  EXPECT_EQ(r.input_bytes, int64_t(lines.size()));
  const auto data = IndexedDataset::open(r.outputs[0].prefix);
  ASSERT_EQ(data.size(), int64_t(ref["cases"].size()));
  std::vector<int64_t> documents{0};
  for (size_t i = 0; i < ref["cases"].size(); ++i) {
    auto expected = ref["cases"][i]["input_ids"].get<std::vector<int64_t>>();
    expected.push_back(eos);
    EXPECT_EQ(data.get(int64_t(i)), expected) << ref["cases"][i]["text"];
    documents.push_back(int64_t(i) + 1);
  }
  EXPECT_EQ(data.document_indices(), documents);
  EXPECT_EQ(r.outputs[0].tokens, data.total_tokens());
}

TEST(Preprocess, MegatronRulesForListsEmptyTextsAndSeveralKeys) {
  config::testing::TempDir scratch;
  const std::string lines =
      R"({"text": ["Hello, world!", "", "over the lazy dog."], "title": "A title"})"
      "\n"
      R"({"text": "", "title": "x"})"
      "\n"
      R"({"text": [], "title": ""})"
      "\n"
      R"({"text": "end", "title": ["t1", "t2"]})"
      "\n";
  PreprocessOptions o = options_for(scratch.write("c.jsonl", lines), scratch.file("p"));
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  const PreprocessResult r = preprocess(o);
  const auto tokenizer = tokenizers::load_tokenizer(kGpt2);
  const auto ids = [&](const std::string& text) {
    const auto e = tokenizer->encode(text, false).ids;
    return std::vector<int64_t>(e.begin(), e.end());
  };
  const auto with_eod = [&](std::vector<int64_t> v) {
    v.push_back(r.eod_id);
    return v;
  };
  ASSERT_EQ(r.outputs.size(), 2u);
  const auto text = IndexedDataset::open(scratch.file("p_text_document"));
  // Document 0: two sequences (the empty string dropped), eod on the last; documents 1 and 2
  // tokenize to nothing (the index repeats, no eod); document 3 one sequence.
  ASSERT_EQ(text.size(), 3);
  EXPECT_EQ(text.get(0), ids("Hello, world!"));
  EXPECT_EQ(text.get(1), with_eod(ids("over the lazy dog.")));
  EXPECT_EQ(text.get(2), with_eod(ids("end")));
  EXPECT_EQ(text.document_indices(), (std::vector<int64_t>{0, 2, 2, 2, 3}));
  const auto title = IndexedDataset::open(scratch.file("p_title_document"));
  ASSERT_EQ(title.size(), 4);
  EXPECT_EQ(title.get(0), with_eod(ids("A title")));
  EXPECT_EQ(title.get(1), with_eod(ids("x")));
  EXPECT_EQ(title.get(2), ids("t1"));
  EXPECT_EQ(title.get(3), with_eod(ids("t2")));
  EXPECT_EQ(title.document_indices(), (std::vector<int64_t>{0, 1, 2, 2, 4}));
  EXPECT_EQ(r.outputs[1].documents, 4);
  EXPECT_EQ(r.outputs[1].sequences, 4);
}

TEST(Preprocess, OutputDoesNotDependOnTheWorkerCount) {
  const json ref = reference();
  config::testing::TempDir scratch;
  std::string lines;
  std::vector<std::string> texts;
  for (int i = 0; i < 1500; ++i) {
    texts.push_back(std::to_string(i) + " " + ref["cases"][i % 9]["text"].get<std::string>());
    lines += json{{"text", texts.back()}}.dump() + "\n";
  }
  const std::string input = scratch.write("many.jsonl", lines);
  const auto tokenizer = tokenizers::load_tokenizer(kGpt2);
  std::string first_bin, first_idx;
  for (int workers : {1, 2, 5}) {
    SCOPED_TRACE(workers);
    PreprocessOptions o = options_for(input, scratch.file("w" + std::to_string(workers)));
    o.workers = workers;
    o.batch_bytes = 500;  // many small batches, finishing out of order
    const auto prefix = preprocess(o).outputs[0].prefix;
    const auto data = IndexedDataset::open(prefix);
    ASSERT_EQ(data.size(), int64_t(texts.size()));
    for (size_t i = 0; i < texts.size(); i += 97) {
      const auto e = tokenizer->encode(texts[i], false).ids;
      EXPECT_EQ(data.get(int64_t(i)), std::vector<int64_t>(e.begin(), e.end())) << i;
    }
    if (workers == 1) {
      first_bin = read_bytes(prefix + ".bin");
      first_idx = read_bytes(prefix + ".idx");
    } else {
      EXPECT_EQ(read_bytes(prefix + ".bin"), first_bin);
      EXPECT_EQ(read_bytes(prefix + ".idx"), first_idx);
    }
  }
}

TEST(Preprocess, PlainTextLinesAndParagraphs) {
  config::testing::TempDir scratch;
  const std::string text =
      "first line\r\n\n  \nsecond line\nthird\n\n\nfourth";  // no final newline
  const std::string input = scratch.write("c.txt", text);
  const auto tokenizer = tokenizers::load_tokenizer(kGpt2);
  const auto ids = [&](const std::string& t) {
    const auto e = tokenizer->encode(t, false).ids;
    return std::vector<int64_t>(e.begin(), e.end());
  };
  const auto lines = preprocess(options_for(input, scratch.file("lines")));
  const auto by_line = IndexedDataset::open(lines.outputs[0].prefix);
  ASSERT_EQ(by_line.size(), 4);  // blank lines skipped
  EXPECT_EQ(by_line.get(0), ids("first line"));
  EXPECT_EQ(by_line.get(3), ids("fourth"));
  PreprocessOptions o = options_for(input, scratch.file("para"));
  o.split_paragraphs = true;
  const auto paragraphs = IndexedDataset::open(preprocess(o).outputs[0].prefix);
  ASSERT_EQ(paragraphs.size(), 3);
  EXPECT_EQ(paragraphs.get(0), ids("first line"));
  EXPECT_EQ(paragraphs.get(1), ids("second line\nthird"));
  EXPECT_EQ(paragraphs.get(2), ids("fourth"));
}

// The error names file:line and nothing is left behind.
void expect_bad_line(const std::string& lines, int workers,
                     const std::vector<std::string>& expected) {
  config::testing::TempDir scratch;
  PreprocessOptions o = options_for(scratch.write("bad.jsonl", lines), scratch.file("out"));
  o.workers = workers;
  o.batch_bytes = 64;
  try {
    (void)preprocess(o);
    ADD_FAILURE() << "no error for " << lines;
  } catch (const CorruptInput& e) {
    for (const auto& piece : expected)
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
  }
  for (const auto& entry : std::filesystem::directory_iterator(scratch.path()))
    EXPECT_EQ(entry.path().filename(), "bad.jsonl") << "left behind: " << entry.path();
}

TEST(Preprocess, BadLinesNameFileAndLine) {
  std::string good;
  for (int i = 0; i < 40; ++i) good += R"({"text": "fine line )" + std::to_string(i) + "\"}\n";
  for (int workers : {1, 3}) {
    expect_bad_line(good + "{\"text\": \"unterminated\n" + good, workers,
                    {"bad.jsonl:41:", "invalid JSON"});
    expect_bad_line(good + "{\"txt\": \"a\"}\n" + good + "{\"text\" 1}\n", workers,
                    {"bad.jsonl:41:", "no key \"text\""});
    expect_bad_line(good + good + "{\"text\": 3}\n", workers,
                    {"bad.jsonl:81:", "number", "string"});
    expect_bad_line(good + "{\"text\": [\"a\", null]}\n", workers,
                    {"bad.jsonl:41:", "list of strings"});
    expect_bad_line(good + "[1, 2]\n", workers, {"bad.jsonl:41:", "expected a JSON object"});
    expect_bad_line("\n", workers, {"bad.jsonl:1:", "invalid JSON"});
  }
}

TEST(Preprocess, OptionErrors) {
  config::testing::TempDir scratch;
  EXPECT_THROW(preprocess(options_for(scratch.file("none.jsonl"), scratch.file("o"))), NotFound);
  PreprocessOptions o = options_for(scratch.write("a.jsonl", "{}\n"), scratch.file("o"));
  o.split_paragraphs = true;
  EXPECT_THROW(preprocess(o), InvalidArgument);
  o.split_paragraphs = false;
  o.workers = 0;
  EXPECT_THROW(preprocess(o), InvalidArgument);
}

}  // namespace
}  // namespace libai::train::data
