#include "runtime/checkpoint/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

namespace libai::checkpoint {

namespace {

struct Mapping {
  void* address = nullptr;
  size_t length = 0;
  ~Mapping() {
    if (address != nullptr) munmap(address, length);
  }
};

struct AlignedBuffer {
  static constexpr std::align_val_t kAlign{64};
  void* address = nullptr;
  explicit AlignedBuffer(size_t n) : address(::operator new(n == 0 ? 1 : n, kAlign)) {}
  ~AlignedBuffer() { ::operator delete(address, kAlign); }
};

}  // namespace

ByteRegion map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) LIBAI_THROW(NotFound, "checkpoint file ", path, " does not exist");
    LIBAI_THROW(IoError, "cannot open ", path, ": ", std::strerror(err));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    LIBAI_THROW(IoError, "cannot read ", path, ": not a regular file");
  }
  ByteRegion region;
  region.name = path;
  region.size = size_t(st.st_size);
  auto mapping = std::make_shared<Mapping>();
  if (region.size > 0) {
    void* address = mmap(nullptr, region.size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (address == MAP_FAILED) LIBAI_THROW(IoError, "cannot map ", path, ": ", std::strerror(err));
    mapping->address = address;
    mapping->length = region.size;
    region.data = static_cast<const uint8_t*>(address);
    region.file_backed = true;
  } else {
    ::close(fd);
    static const uint8_t kEmpty = 0;
    region.data = &kEmpty;
  }
  region.owner = std::move(mapping);
  return region;
}

void drop_pages(const ByteRegion& region, size_t offset, size_t bytes) {
  if (!region.file_backed || bytes == 0 || offset >= region.size) return;
  static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(region.data) + offset;
  const uintptr_t end = begin + std::min(bytes, region.size - offset);
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

ByteRegion copy_bytes(const void* data, size_t size, std::string name) {
  auto buffer = std::make_shared<AlignedBuffer>(size);
  if (size > 0) std::memcpy(buffer->address, data, size);
  ByteRegion region;
  region.data = static_cast<const uint8_t*>(buffer->address);
  region.size = size;
  region.owner = std::move(buffer);
  region.name = std::move(name);
  return region;
}

void check_bool_bytes(const uint8_t* data, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    LIBAI_CHECK_KIND(CorruptInput, data[i] <= 1, what, ": bool element ", i, " has byte value ",
                     int(data[i]), ", expected 0 or 1");
  }
}

Tensor view_bytes(const ByteRegion& region, size_t offset, const Shape& shape, DType dtype) {
  const uint8_t* address = region.data + offset;
  if (dtype == DType::boolean) {
    check_bool_bytes(address, size_t(shape_numel(shape)), region.name);
  }
  // Storage is written through only by the caller's own in-place ops (copy-on-write pages).
  void* mutable_address = const_cast<uint8_t*>(address);
  if (reinterpret_cast<uintptr_t>(address) % dtype_size(dtype) == 0) {
    return Tensor::from_blob(mutable_address, shape, dtype, region.owner);
  }
  Tensor copy = Tensor::empty(shape, dtype);
  std::memcpy(copy.data_ptr(), address, copy.nbytes());
  return copy;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

bool checked_numel(const Shape& shape, uint64_t& out) {
  out = 1;
  for (int64_t s : shape) {
    if (s < 0 || !checked_mul(out, uint64_t(s), out)) return false;
  }
  return out <= uint64_t(INT64_MAX);
}

}  // namespace libai::checkpoint
