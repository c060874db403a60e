// Megatron / LiBai indexed datasets: token sequences in `prefix.bin` (the token arrays
// concatenated, no header) described by `prefix.idx` (lengths, byte offsets, document
// boundaries). Files written by Megatron's preprocess_data.py (and LiBai's copy of it) are read
// as they are; ours are byte-identical to theirs for the same sequences.
//
//   IndexedDatasetWriter writer("out/corpus_text_document", TokenDType::u16);
//   writer.add_sequence({15496, 995});  writer.end_document();    // one document, one sequence
//   writer.finish();                                              // renames the files into place
//
//   auto data = IndexedDataset::open("out/corpus_text_document");  // mmap, validated
//   data.size();               // 1 sequence
//   data.get(0);               // {15496, 995}
//   data.document_indices();   // {0, 1}: document d is sequences [doc[d], doc[d + 1])
//
// Note [Indexed dataset layout]: `.idx`, little-endian: the 9-byte magic "MMIDIDX\0\0", u64
// version (1), u8 token type code (TokenDType), u64 N sequences, u64 D document-index entries,
// int32[N] sequence lengths, int64[N] byte offsets into .bin (cumulative from 0), int64[D]
// document indices (0 first, then the sequence count after each document, so N last). `.bin`
// holds exactly the N arrays. Megatron picks uint16 tokens for vocabularies under 65500, else
// int32 (optimal_token_dtype). A document that tokenized to nothing repeats the previous index,
// so the document indices are non-decreasing.
//
// Note [Validated at open]: every field is checked against the others and the file sizes
// before the first read (magic, version, type code, N and D against the .idx size, lengths
// non-negative, offsets cumulative, the .bin exactly as long as the index says, document
// indices from 0 to N), so a truncated or lying pair is one CorruptInput naming the file, the
// field and its byte offset, and get() afterwards never reads outside the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace libai::train::data {

// Megatron's token type codes (its DType enum). Our DType has no 16-bit or 8-bit integers:
// tokens of every type are returned as int64.
enum class TokenDType : uint8_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f64 = 6,
  f32 = 7,
  u16 = 8
};

size_t token_dtype_size(TokenDType type);
const char* token_dtype_name(TokenDType type);  // "uint16", "int32", ... (numpy's names)
bool is_valid_token_dtype_code(uint8_t code);
// Megatron's choice: uint16 when vocab_size < 65500, else int32.
TokenDType optimal_token_dtype(int64_t vocab_size);

class IndexedDataset {
 public:
  // Maps prefix.idx and prefix.bin and validates them. NotFound for a missing file, CorruptInput
  // naming the file, the field and its byte offset for anything inconsistent.
  static IndexedDataset open(const std::string& prefix);
  // The same from bytes in memory (copied), for the fuzzer and tests; `prefix` names them.
  static IndexedDataset open_bytes(std::string_view idx, std::string_view bin,
                                   const std::string& prefix);

  int64_t size() const { return count_; }  // sequences
  int64_t length(int64_t i) const;         // tokens of sequence i
  // Tokens [offset, offset + count) of sequence i (count -1: to its end).
  std::vector<int64_t> get(int64_t i, int64_t offset = 0, int64_t count = -1) const;
  // Megatron's doc_idx: starts at 0, non-decreasing, ends at size().
  const std::vector<int64_t>& document_indices() const { return document_indices_; }
  int64_t document_count() const { return int64_t(document_indices_.size()) - 1; }
  TokenDType token_dtype() const { return token_dtype_; }
  int64_t total_tokens() const { return total_tokens_; }
  const std::string& prefix() const { return prefix_; }

  struct Bytes;  // a mapped file or an owned copy

 private:
  IndexedDataset() = default;
  void validate_and_load();

  std::string prefix_;
  std::shared_ptr<const Bytes> idx_, bin_;
  TokenDType token_dtype_ = TokenDType::u16;
  int64_t count_ = 0, total_tokens_ = 0;
  const uint8_t* lengths_ = nullptr;   // int32[N], unaligned in general: read with memcpy
  const uint8_t* pointers_ = nullptr;  // int64[N]
  std::vector<int64_t> document_indices_;
};

// Writes prefix.bin as sequences arrive and prefix.idx at finish(), both under temporary names
// renamed into place at finish() (a writer destroyed before finish() removes them), so a reader
// never sees a half-written pair.
class IndexedDatasetWriter {
 public:
  // Integer token types only. IoError when the files cannot be created.
  IndexedDatasetWriter(const std::string& prefix, TokenDType token_dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // InvalidArgument when a token does not fit the token type (naming it and its position).
  void add_sequence(const std::vector<int64_t>& tokens);
  void add_sequence(const int64_t* tokens, size_t count);
  // Closes the current document (the sequences added since the last end_document).
  void end_document();
  void finish();

  int64_t sequences() const { return int64_t(lengths_.size()); }
  int64_t documents() const { return int64_t(document_indices_.size()) - 1; }
  int64_t tokens() const { return tokens_; }

 private:
  std::string prefix_, bin_temp_, idx_temp_;
  TokenDType token_dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<uint8_t> buffer_;
  int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace libai::train::data
