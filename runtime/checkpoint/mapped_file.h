// Read-only byte regions for the checkpoint readers: a memory-mapped file or an owned copy of
// a caller's buffer, plus zero-copy tensor views into them.
//
//   ByteRegion file = map_file("model.safetensors");        // NotFound / IoError
//   Tensor w = view_bytes(file, 128, {4, 8}, DType::f32);    // shares the mapping
//
// Files are mapped MAP_PRIVATE with write permission, so a caller who writes into a loaded
// tensor gets private copy-on-write pages and never modifies the checkpoint on disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/tensor.h"

namespace libai::checkpoint {

struct ByteRegion {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> owner;  // keeps `data` valid (the mapping or the owned buffer)
  std::string name;             // the path, for error messages
  bool file_backed = false;     // a private mapping of a file (map_file), read only by use
};

ByteRegion map_file(const std::string& path);
// Drops the resident pages of [offset, offset + bytes) of a file-backed region, once read:
// they are clean and come back from the file if touched again, so that reading a large file
// tensor by tensor never keeps it all resident. Nothing for a region that owns its bytes.
void drop_pages(const ByteRegion& region, size_t offset, size_t bytes);
// Copies `size` bytes into a 64-byte aligned buffer owned by the region.
ByteRegion copy_bytes(const void* data, size_t size, std::string name);

// A contiguous tensor over region bytes [offset, offset + numel(shape) * dtype size). The caller
// has checked the bounds. Zero-copy when the address is aligned for the dtype; otherwise (a
// hand-made file) the bytes are copied, because a misaligned typed access is undefined.
// Bool bytes are validated (check_bool_bytes).
Tensor view_bytes(const ByteRegion& region, size_t offset, const Shape& shape, DType dtype);

// Bool tensors must hold bytes 0 or 1: any other byte read as a C++ bool is undefined
// behaviour. Throws CorruptInput naming `what`.
void check_bool_bytes(const uint8_t* data, size_t n, const std::string& what);

// a * b, or false when it overflows 64 bits (sizes in headers are untrusted).
bool checked_mul(uint64_t a, uint64_t b, uint64_t& out);
bool checked_numel(const Shape& shape, uint64_t& out);

}  // namespace libai::checkpoint
