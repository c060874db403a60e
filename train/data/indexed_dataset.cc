#include "train/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/error.h"

namespace libai::train::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
// magic, u64 version, u8 type code, u64 N, u64 D.
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

template <typename T>
T load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));  // the files are little-endian, as is every host we run on
  return value;
}

// One token of type `type` at `at`, as int64. Float tokens must hold whole numbers (the format
// allows float arrays; as token ids only integral values make sense).
int64_t load_token(const uint8_t* at, TokenDType type) {
  switch (type) {
    case TokenDType::u8: return *at;
    case TokenDType::i8: return int8_t(*at);
    case TokenDType::i16: return load<int16_t>(at);
    case TokenDType::u16: return load<uint16_t>(at);
    case TokenDType::i32: return load<int32_t>(at);
    case TokenDType::i64: return load<int64_t>(at);
    case TokenDType::f32:
    case TokenDType::f64: {
      const double v = type == TokenDType::f32 ? double(load<float>(at)) : load<double>(at);
      LIBAI_CHECK_KIND(CorruptInput, std::isfinite(v) && v == std::floor(v) && std::abs(v) < 9e18,
                       "indexed dataset: float token ", v, " is not a whole number");
      return int64_t(v);
    }
  }
  return 0;
}

std::pair<int64_t, int64_t> token_range(TokenDType type) {
  switch (type) {
    case TokenDType::u8: return {0, 255};
    case TokenDType::i8: return {-128, 127};
    case TokenDType::i16: return {-32768, 32767};
    case TokenDType::u16: return {0, 65535};
    case TokenDType::i32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default: return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

}  // namespace

size_t token_dtype_size(TokenDType type) {
  switch (type) {
    case TokenDType::u8:
    case TokenDType::i8: return 1;
    case TokenDType::i16:
    case TokenDType::u16: return 2;
    case TokenDType::i32:
    case TokenDType::f32: return 4;
    case TokenDType::i64:
    case TokenDType::f64: return 8;
  }
  return 0;
}

const char* token_dtype_name(TokenDType type) {
  switch (type) {
    case TokenDType::u8: return "uint8";
    case TokenDType::i8: return "int8";
    case TokenDType::i16: return "int16";
    case TokenDType::i32: return "int32";
    case TokenDType::i64: return "int64";
    case TokenDType::f64: return "float64";
    case TokenDType::f32: return "float32";
    case TokenDType::u16: return "uint16";
  }
  return "?";
}

bool is_valid_token_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::u16 : TokenDType::i32;
}

// ---- reading ----------------------------------------------------------------------------------

struct IndexedDataset::Bytes {
  std::string path;
  const uint8_t* data = nullptr;
  size_t size = 0;
  void* mapping = nullptr;  // munmap'ed by the destructor when set
  std::string owned;        // open_bytes: the copy

  Bytes() = default;
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  ~Bytes() {
    if (mapping != nullptr) munmap(mapping, size);
  }

  static std::shared_ptr<const Bytes> map(const std::string& path) {
    auto bytes = std::make_shared<Bytes>();
    bytes->path = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == ENOENT) LIBAI_THROW(NotFound, "indexed dataset: ", path, " does not exist");
      LIBAI_THROW(IoError, "indexed dataset: cannot open ", path, ": ", std::strerror(error));
    }
    struct stat info {};
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      LIBAI_THROW(IoError, "indexed dataset: ", path, " is not a regular file");
    }
    bytes->size = size_t(info.st_size);
    if (bytes->size > 0) {  // mmap of 0 bytes fails; an empty .bin is valid (no tokens)
      void* at = mmap(nullptr, bytes->size, PROT_READ, MAP_PRIVATE, fd, 0);
      const int error = errno;
      ::close(fd);
      LIBAI_CHECK_KIND(IoError, at != MAP_FAILED, "indexed dataset: cannot map ", path, ": ",
                       std::strerror(error));
      bytes->mapping = at;
      bytes->data = static_cast<const uint8_t*>(at);
    } else {
      ::close(fd);
    }
    return bytes;
  }

  static std::shared_ptr<const Bytes> copy(std::string_view data, const std::string& path) {
    auto bytes = std::make_shared<Bytes>();
    bytes->path = path;
    bytes->owned.assign(data);
    bytes->data = reinterpret_cast<const uint8_t*>(bytes->owned.data());
    bytes->size = bytes->owned.size();
    return bytes;
  }
};

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  IndexedDataset dataset;
  dataset.prefix_ = prefix;
  dataset.idx_ = Bytes::map(prefix + ".idx");
  dataset.bin_ = Bytes::map(prefix + ".bin");
  dataset.validate_and_load();
  return dataset;
}

IndexedDataset IndexedDataset::open_bytes(std::string_view idx, std::string_view bin,
                                          const std::string& prefix) {
  IndexedDataset dataset;
  dataset.prefix_ = prefix;
  dataset.idx_ = Bytes::copy(idx, prefix + ".idx");
  dataset.bin_ = Bytes::copy(bin, prefix + ".bin");
  dataset.validate_and_load();
  return dataset;
}

void IndexedDataset::validate_and_load() {
  const Bytes& idx = *idx_;
  const std::string& path = idx.path;
  const auto fail = [&](size_t offset, const std::string& field, const std::string& what) {
    LIBAI_THROW(CorruptInput, path, ": ", field, " at byte ", offset, ": ", what);
  };
  if (idx.size < kHeaderBytes)
    fail(0, "header",
         str_cat("file has ", idx.size, " bytes, the header alone needs ", kHeaderBytes,
                 " (truncated?)"));
  if (std::memcmp(idx.data, kMagic, sizeof kMagic) != 0)
    fail(0, "magic", "not an indexed dataset index (expected \"MMIDIDX\\0\\0\")");
  const uint64_t version = load<uint64_t>(idx.data + 9);
  if (version != kVersion) fail(9, "version", str_cat(version, ", only version 1 is known"));
  const uint8_t code = idx.data[17];
  if (!is_valid_token_dtype_code(code))
    fail(17, "dtype code", str_cat(int(code), ", expected 1..8 (uint8 .. uint16)"));
  token_dtype_ = TokenDType(code);
  const uint64_t n = load<uint64_t>(idx.data + 18);
  const uint64_t d = load<uint64_t>(idx.data + 26);
  // N and D must fit the file exactly: 12 bytes per sequence, 8 per document-index entry. The
  // bounds keep the products below from overflowing whatever the header claims.
  const uint64_t body = idx.size - kHeaderBytes;
  if (n > body / 12)
    fail(18, "sequence count",
         str_cat(n, " sequences need ", "12 bytes each, the file has ", body,
                 " bytes after the header (truncated?)"));
  if (d > (body - 12 * n) / 8 || 12 * n + 8 * d != body)
    fail(
        26, "document count",
        str_cat(d, " entries with ", n, " sequences need ", kHeaderBytes + 12 * n + 8 * d,
                " bytes, the file has ", idx.size, d > (body - 12 * n) / 8 ? " (truncated?)" : ""));
  if (d < 1) fail(26, "document count", "0; the document index starts with an entry 0");
  count_ = int64_t(n);
  lengths_ = idx.data + kHeaderBytes;
  pointers_ = lengths_ + 4 * n;
  const uint8_t* documents = pointers_ + 8 * n;

  const size_t item = token_dtype_size(token_dtype_);
  uint64_t expected_pointer = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t length = load<int32_t>(lengths_ + 4 * i);
    if (length < 0)
      fail(kHeaderBytes + 4 * i, "sequence length",
           str_cat(length, " of sequence ", i, " is negative"));
    const int64_t pointer = load<int64_t>(pointers_ + 8 * i);
    if (uint64_t(pointer) != expected_pointer || pointer < 0)
      fail(kHeaderBytes + 4 * n + 8 * i, "sequence pointer",
           str_cat(pointer, " of sequence ", i, ", expected ", expected_pointer,
                   " (the sum of the earlier lengths x ", item, " bytes)"));
    expected_pointer += uint64_t(length) * item;
    total_tokens_ += length;
  }
  if (expected_pointer != bin_->size)
    LIBAI_THROW(CorruptInput, bin_->path, ": file has ", bin_->size, " bytes, its index ", path,
                " describes ", expected_pointer, " (", total_tokens_, " ",
                token_dtype_name(token_dtype_), " tokens)",
                expected_pointer > bin_->size ? "; truncated?" : "");

  document_indices_.resize(d);
  for (uint64_t k = 0; k < d; ++k) {
    const int64_t value = load<int64_t>(documents + 8 * k);
    const size_t offset = kHeaderBytes + 12 * n + 8 * k;
    if (k == 0 && value != 0)
      fail(offset, "document index", str_cat("entry 0 is ", value, ", expected 0"));
    if (k > 0 && value < document_indices_[k - 1])
      fail(offset, "document index",
           str_cat("entry ", k, " is ", value, ", below entry ", k - 1, " (",
                   document_indices_[k - 1], ")"));
    if (value > count_)
      fail(offset, "document index",
           str_cat("entry ", k, " is ", value, ", past the ", count_, " sequences"));
    document_indices_[k] = value;
  }
  if (document_indices_.back() != count_)
    fail(kHeaderBytes + 12 * n + 8 * (d - 1), "document index",
         str_cat("last entry is ", document_indices_.back(), ", expected the sequence count ",
                 count_));
}

int64_t IndexedDataset::length(int64_t i) const {
  LIBAI_CHECK(i >= 0 && i < count_, prefix_, ": sequence ", i, " out of range [0, ", count_, ")");
  return load<int32_t>(lengths_ + 4 * i);
}

std::vector<int64_t> IndexedDataset::get(int64_t i, int64_t offset, int64_t count) const {
  const int64_t total = length(i);
  if (count < 0) count = total - offset;
  LIBAI_CHECK(offset >= 0 && offset <= total && count >= 0 && count <= total - offset, prefix_,
              ": tokens [", offset, ", ", offset + count, ") of sequence ", i, " out of its ",
              total);
  const size_t item = token_dtype_size(token_dtype_);
  const uint8_t* at = bin_->data + load<int64_t>(pointers_ + 8 * i) + offset * int64_t(item);
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  if (token_dtype_ == TokenDType::u16) {  // the common case, kept tight
    for (int64_t k = 0; k < count; ++k) tokens[k] = load<uint16_t>(at + 2 * k);
  } else {
    for (int64_t k = 0; k < count; ++k)
      tokens[k] = load_token(at + k * int64_t(item), token_dtype_);
  }
  return tokens;
}

// ---- writing ----------------------------------------------------------------------------------

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType token_dtype)
    : prefix_(prefix), token_dtype_(token_dtype) {
  LIBAI_CHECK(token_dtype != TokenDType::f32 && token_dtype != TokenDType::f64,
              "IndexedDatasetWriter: token type must be an integer type, got ",
              token_dtype_name(token_dtype));
  // The process id keeps two writers of the same prefix (a rerun racing a stale one) apart.
  const std::string suffix = ".tmp" + std::to_string(::getpid());
  bin_temp_ = prefix + ".bin" + suffix;
  idx_temp_ = prefix + ".idx" + suffix;
  bin_ = std::fopen(bin_temp_.c_str(), "wb");
  LIBAI_CHECK_KIND(IoError, bin_ != nullptr, "indexed dataset: cannot create ", bin_temp_, ": ",
                   std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
  if (!finished_) {
    std::error_code ignored;
    std::filesystem::remove(bin_temp_, ignored);
    std::filesystem::remove(idx_temp_, ignored);
  }
}

void IndexedDatasetWriter::add_sequence(const std::vector<int64_t>& tokens) {
  add_sequence(tokens.data(), tokens.size());
}

void IndexedDatasetWriter::add_sequence(const int64_t* tokens, size_t count) {
  LIBAI_CHECK(!finished_, "IndexedDatasetWriter ", prefix_, ": add_sequence after finish()");
  LIBAI_CHECK(count <= size_t(std::numeric_limits<int32_t>::max()), "IndexedDatasetWriter ",
              prefix_, ": a sequence of ", count, " tokens does not fit the int32 length field");
  const auto [low, high] = token_range(token_dtype_);
  const size_t item = token_dtype_size(token_dtype_);
  buffer_.resize(count * item);
  uint8_t* out = buffer_.data();
  for (size_t k = 0; k < count; ++k) {
    const int64_t t = tokens[k];
    LIBAI_CHECK(t >= low && t <= high, "IndexedDatasetWriter ", prefix_, ": token ", t,
                " at position ", k, " of sequence ", lengths_.size(), " does not fit ",
                token_dtype_name(token_dtype_));
    switch (item) {  // little-endian hosts: the low bytes of the value are the token
      case 1: {
        const uint8_t v = uint8_t(t);
        std::memcpy(out + k, &v, 1);
        break;
      }
      case 2: {
        const uint16_t v = uint16_t(t);
        std::memcpy(out + 2 * k, &v, 2);
        break;
      }
      case 4: {
        const int32_t v = int32_t(t);
        std::memcpy(out + 4 * k, &v, 4);
        break;
      }
      default: std::memcpy(out + 8 * k, &t, 8);
    }
  }
  if (!buffer_.empty())
    LIBAI_CHECK_KIND(IoError,
                     std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) == buffer_.size(),
                     "indexed dataset: writing ", bin_temp_, " failed: ", std::strerror(errno));
  lengths_.push_back(int32_t(count));
  tokens_ += int64_t(count);
}

void IndexedDatasetWriter::end_document() {
  LIBAI_CHECK(!finished_, "IndexedDatasetWriter ", prefix_, ": end_document after finish()");
  document_indices_.push_back(int64_t(lengths_.size()));
}

void IndexedDatasetWriter::finish() {
  LIBAI_CHECK(!finished_, "IndexedDatasetWriter ", prefix_, ": finish() called twice");
  const bool bin_ok = std::fclose(bin_) == 0;
  bin_ = nullptr;
  LIBAI_CHECK_KIND(IoError, bin_ok, "indexed dataset: closing ", bin_temp_, " failed");

  std::string idx(kMagic, sizeof kMagic);
  const auto put = [&idx](const auto& value) {
    idx.append(reinterpret_cast<const char*>(&value), sizeof value);
  };
  put(kVersion);
  put(uint8_t(token_dtype_));
  put(uint64_t(lengths_.size()));
  put(uint64_t(document_indices_.size()));
  idx.append(reinterpret_cast<const char*>(lengths_.data()), lengths_.size() * 4);
  int64_t pointer = 0;
  const auto item = int64_t(token_dtype_size(token_dtype_));
  for (int32_t length : lengths_) {
    put(pointer);
    pointer += length * item;
  }
  idx.append(reinterpret_cast<const char*>(document_indices_.data()), document_indices_.size() * 8);
  std::FILE* out = std::fopen(idx_temp_.c_str(), "wb");
  LIBAI_CHECK_KIND(IoError, out != nullptr, "indexed dataset: cannot create ", idx_temp_, ": ",
                   std::strerror(errno));
  const bool written = std::fwrite(idx.data(), 1, idx.size(), out) == idx.size();
  const bool closed = std::fclose(out) == 0;
  LIBAI_CHECK_KIND(IoError, written && closed, "indexed dataset: writing ", idx_temp_, " failed");

  // .bin first: a reader opening the pair sees the new .idx only with its .bin in place.
  std::error_code error;
  std::filesystem::rename(bin_temp_, prefix_ + ".bin", error);
  if (!error) std::filesystem::rename(idx_temp_, prefix_ + ".idx", error);
  LIBAI_CHECK_KIND(IoError, !error, "indexed dataset: cannot rename into ", prefix_,
                   ".{bin,idx}: ", error.message());
  finished_ = true;
}

}  // namespace libai::train::data
