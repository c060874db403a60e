#include "runtime/checkpoint/zip_reader.h"

#include <algorithm>

namespace libai::checkpoint {

namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentralDir = 0x06054b50;
constexpr uint32_t kZip64EndOfCentralDir = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr size_t kEocdSize = 22, kLocatorSize = 20, kZip64EocdSize = 56;
constexpr size_t kCentralSize = 46, kLocalSize = 30;

uint64_t read_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Offset of the end-of-central-directory record, or SIZE_MAX. It sits in the last 22 bytes
// plus at most a 64 KiB comment.
size_t find_eocd(const ByteRegion& region) {
  if (region.size < kEocdSize) return SIZE_MAX;
  const size_t lowest = region.size > kEocdSize + 0xffff ? region.size - kEocdSize - 0xffff : 0;
  for (size_t pos = region.size - kEocdSize + 1; pos-- > lowest;) {
    if (read_le(region.data + pos, 4) == kEndOfCentralDir &&
        pos + kEocdSize + read_le(region.data + pos + 20, 2) == region.size) {
      return pos;
    }
  }
  return SIZE_MAX;
}

}  // namespace

ZipReader::ZipReader(const ByteRegion& region) : region_(region) { parse(); }

#define ZIP_CHECK(cond, ...) \
  LIBAI_CHECK_KIND(CorruptInput, cond, "zip archive ", region_.name, ": ", __VA_ARGS__)

void ZipReader::parse() {
  const uint8_t* base = region_.data;
  const size_t eocd = find_eocd(region_);
  ZIP_CHECK(eocd != SIZE_MAX, "no end-of-central-directory record (not a zip, or truncated)");
  uint64_t count = read_le(base + eocd + 10, 2);
  uint64_t cd_size = read_le(base + eocd + 12, 4);
  uint64_t cd_offset = read_le(base + eocd + 16, 4);
  uint64_t cd_limit = eocd;  // the central directory ends before the record(s) that locate it
  const bool zip64 =
      count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff ||
      (eocd >= kLocatorSize && read_le(base + eocd - kLocatorSize, 4) == kZip64Locator);
  if (zip64) {
    ZIP_CHECK(eocd >= kLocatorSize && read_le(base + eocd - kLocatorSize, 4) == kZip64Locator,
              "zip64 sizes without a zip64 locator before byte ", eocd);
    const uint64_t record = read_le(base + eocd - kLocatorSize + 8, 8);
    ZIP_CHECK(record <= eocd - kLocatorSize && eocd - kLocatorSize - record >= kZip64EocdSize,
              "zip64 end-of-central-directory offset ", record, " is outside the file");
    ZIP_CHECK(read_le(base + record, 4) == kZip64EndOfCentralDir,
              "no zip64 end-of-central-directory signature at byte ", record);
    count = read_le(base + record + 32, 8);
    cd_size = read_le(base + record + 40, 8);
    cd_offset = read_le(base + record + 48, 8);
    cd_limit = record;
  }
  ZIP_CHECK(cd_offset <= cd_limit && cd_size <= cd_limit - cd_offset, "central directory [",
            cd_offset, ", +", cd_size, ") runs past byte ", cd_limit);
  ZIP_CHECK(count <= cd_size / kCentralSize, "central directory of ", cd_size,
            " bytes cannot hold ", count, " entries");
  entries_.reserve(size_t(count));
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    ZIP_CHECK(cd_end - pos >= kCentralSize, "central directory entry ", i, " at byte ", pos,
              " is truncated");
    const uint8_t* p = base + pos;
    ZIP_CHECK(read_le(p, 4) == kCentralHeader, "bad signature of central directory entry ", i,
              " at byte ", pos);
    ZipEntry entry;
    entry.flags = uint16_t(read_le(p + 8, 2));
    entry.method = uint16_t(read_le(p + 10, 2));
    entry.compressed_size = read_le(p + 20, 4);
    entry.size = read_le(p + 24, 4);
    const uint64_t name_len = read_le(p + 28, 2), extra_len = read_le(p + 30, 2),
                   comment_len = read_le(p + 32, 2);
    entry.local_header_offset = read_le(p + 42, 4);
    ZIP_CHECK(cd_end - pos - kCentralSize >= name_len + extra_len + comment_len,
              "central directory entry ", i, " at byte ", pos, " runs past the directory");
    entry.name.assign(reinterpret_cast<const char*>(p + kCentralSize), size_t(name_len));
    // The zip64 extra field holds, in order, the 64-bit values whose 32-bit fields are all ones.
    const uint8_t* extra = p + kCentralSize + name_len;
    for (uint64_t e = 0; e + 4 <= extra_len;) {
      const uint64_t id = read_le(extra + e, 2), len = read_le(extra + e + 2, 2);
      ZIP_CHECK(e + 4 + len <= extra_len, "extra field of entry '", entry.name, "' is truncated");
      if (id == 0x0001) {
        const uint8_t* q = extra + e + 4;
        uint64_t left = len;
        for (uint64_t* field : {&entry.size, &entry.compressed_size, &entry.local_header_offset}) {
          if (*field != 0xffffffff) continue;
          ZIP_CHECK(left >= 8, "zip64 extra field of entry '", entry.name, "' is too short");
          *field = read_le(q, 8);
          q += 8;
          left -= 8;
        }
      }
      e += 4 + len;
    }
    pos += kCentralSize + name_len + extra_len + comment_len;
    parse_local_header(entry);
    ZIP_CHECK(index_.emplace(entry.name, entries_.size()).second, "entry '", entry.name,
              "' appears twice");
    entries_.push_back(std::move(entry));
  }
}

void ZipReader::parse_local_header(ZipEntry& entry) const {
  const uint64_t offset = entry.local_header_offset;
  ZIP_CHECK(offset <= region_.size && region_.size - offset >= kLocalSize, "local header of '",
            entry.name, "' at byte ", offset, " is outside the ", region_.size, "-byte file");
  const uint8_t* p = region_.data + offset;
  ZIP_CHECK(read_le(p, 4) == kLocalHeader, "bad local header signature for '", entry.name,
            "' at byte ", offset);
  const uint64_t name_len = read_le(p + 26, 2), extra_len = read_le(p + 28, 2);
  const uint64_t data = offset + kLocalSize + name_len + extra_len;
  ZIP_CHECK(data <= region_.size, "local header of '", entry.name, "' runs past the file end");
  ZIP_CHECK(std::string_view(reinterpret_cast<const char*>(p + kLocalSize), size_t(name_len)) ==
                entry.name,
            "local header at byte ", offset, " names a different entry than '", entry.name, "'");
  entry.data_offset = data;
  ZIP_CHECK(entry.compressed_size <= region_.size - data, "entry '", entry.name, "' of ",
            entry.compressed_size, " bytes at byte ", data, " runs past the ", region_.size,
            "-byte file");
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::span<const uint8_t> ZipReader::read(const ZipEntry& entry) const {
  LIBAI_CHECK_KIND(Unsupported, (entry.flags & 1) == 0, "zip archive ", region_.name, ": entry '",
                   entry.name, "' is encrypted");
  LIBAI_CHECK_KIND(Unsupported, entry.method == 0, "zip archive ", region_.name, ": entry '",
                   entry.name, "' is compressed (method ", entry.method,
                   "); only stored entries, as torch.save writes them, are supported");
  ZIP_CHECK(entry.size == entry.compressed_size, "stored entry '", entry.name, "' has size ",
            entry.size, " but compressed size ", entry.compressed_size);
  return {region_.data + entry.data_offset, size_t(entry.size)};
}

#undef ZIP_CHECK

}  // namespace libai::checkpoint
