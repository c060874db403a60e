// A minimal ZIP reader for PyTorch checkpoints: end of central directory (with zip64), central
// directory entries, local headers, stored entries. torch.save writes stored (uncompressed)
// entries aligned to 64 bytes, so an entry is a zero-copy span of the file.
//
//   ZipReader zip(region);                          // CorruptInput on any bad offset
//   const ZipEntry* pkl = zip.find("archive/data.pkl");
//   auto bytes = zip.read(*pkl);                    // Unsupported if compressed
//
// Every offset and size is bounds-checked against the file; CRCs are not verified (the data
// is never executed, and checking gigabytes would defeat the zero-copy load).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/checkpoint/mapped_file.h"

namespace libai::checkpoint {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 = stored
  uint16_t flags = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // from the local header; valid for stored entries
};

class ZipReader {
 public:
  explicit ZipReader(const ByteRegion& region);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;
  // The entry's bytes inside the region (stored entries only).
  std::span<const uint8_t> read(const ZipEntry& entry) const;
  const ByteRegion& region() const { return region_; }

 private:
  void parse();
  void parse_local_header(ZipEntry& entry) const;

  ByteRegion region_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace libai::checkpoint
