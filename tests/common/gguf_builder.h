// Writes GGUF bytes field by field, for tests of the reader's checks (runtime/checkpoint/gguf.h):
//
//   GgufBuilder b;
//   b.kv_string("general.architecture", "llama");
//   b.tensor("w", {4, 32}, /*type=*/0, /*offset=*/0);   // dims in the file's order (ne0 first)
//   std::string bytes = b.build(/*data=*/std::string(512, '\0'));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace libai::testing {

class GgufBuilder {
 public:
  uint32_t magic = 0x46554747, version = 3;
  uint64_t alignment = 32;
  // Counts written in the header; -1: the number of entries added.
  int64_t kv_count = -1, tensor_count = -1;

  void u32(std::string& s, uint32_t v) { put(s, &v, 4); }
  void u64(std::string& s, uint64_t v) { put(s, &v, 8); }
  void str(std::string& s, const std::string& v) { u64(s, v.size()); s += v; }

  void kv_raw(const std::string& key, uint32_t type, const std::string& value) {
    str(kvs_, key);
    u32(kvs_, type);
    kvs_ += value;
    ++kvs_n_;
  }
  void kv_string(const std::string& key, const std::string& v) {
    std::string s;
    str(s, v);
    kv_raw(key, 8, s);
  }
  void kv_u32(const std::string& key, uint32_t v) {
    std::string s;
    u32(s, v);
    kv_raw(key, 4, s);
  }
  void kv_f32(const std::string& key, float v) {
    std::string s;
    put(s, &v, 4);
    kv_raw(key, 6, s);
  }
  void kv_strings(const std::string& key, const std::vector<std::string>& v) {
    std::string s;
    u32(s, 8);
    u64(s, v.size());
    for (const auto& e : v) str(s, e);
    kv_raw(key, 9, s);
  }
  void tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
              uint64_t offset) {
    str(tensors_, name);
    u32(tensors_, uint32_t(ne.size()));
    for (uint64_t d : ne) u64(tensors_, d);
    u32(tensors_, type);
    u64(tensors_, offset);
    ++tensors_n_;
  }
  // The header, metadata, tensor table, padding to the alignment, then `data`.
  std::string build(const std::string& data) const {
    std::string s;
    GgufBuilder& self = const_cast<GgufBuilder&>(*this);
    self.u32(s, magic);
    self.u32(s, version);
    self.u64(s, tensor_count < 0 ? tensors_n_ : uint64_t(tensor_count));
    self.u64(s, kv_count < 0 ? kvs_n_ : uint64_t(kv_count));
    s += kvs_ + tensors_;
    while (s.size() % alignment) s += '\0';
    return s + data;
  }

 private:
  static void put(std::string& s, const void* p, size_t n) {
    s.append(static_cast<const char*>(p), n);
  }
  std::string kvs_, tensors_;
  uint64_t kvs_n_ = 0, tensors_n_ = 0;
};

}  // namespace libai::testing
