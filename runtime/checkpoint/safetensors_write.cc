// Writing safetensors: serialise in memory, then a temp file + fsync + rename.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/safetensors_format.h"

namespace libai::checkpoint {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

// A CPU, contiguous tensor with the same values (a copy only when needed).
Tensor host_contiguous(const Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  out.copy_from(t);
  return out;
}

}  // namespace

std::string serialize_safetensors(const NamedTensors& given, const Metadata& metadata) {
  // Wider dtypes first (stable otherwise): with an 8-aligned data section every tensor is then
  // aligned for its dtype, so readers can map it without a copy (the reference writer does too).
  NamedTensors tensors = given;
  std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.second.defined() && b.second.defined() &&
           a.second.element_size() > b.second.element_size();
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    LIBAI_CHECK(tensor.defined(), "save_safetensors: tensor '", name, "' is undefined");
    LIBAI_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved");
    LIBAI_CHECK(seen.insert(name).second, "save_safetensors: tensor name '", name,
                "' appears twice");
    const uint64_t end = offset + tensor.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does:
  // then every tensor view of a mapped file is aligned for its dtype.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((len >> (8 * i)) & 0xff));
  out += text;
  for (const auto& entry : tensors) {
    Tensor host = host_contiguous(entry.second);
    out.append(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata) {
  const std::string bytes = serialize_safetensors(tensors, metadata);
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LIBAI_CHECK_KIND(IoError, fd >= 0, "cannot create ", temp, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      LIBAI_THROW(IoError, "cannot write ", temp, ": ", std::strerror(err));
    }
    done += size_t(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_err = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    ::unlink(temp.c_str());
    LIBAI_THROW(IoError, "cannot flush ", temp, ": ", std::strerror(synced ? errno : sync_err));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    LIBAI_THROW(IoError, "cannot rename ", temp, " to ", path, ": ", std::strerror(err));
  }
}

}  // namespace libai::checkpoint
