// Internal: the allow-list of globals and the hooks that turn torch's pickled calls into
// tensor descriptions (no code runs: each allowed global maps to a fixed C++ behaviour).
#pragma once

#include <string>

#include "runtime/checkpoint/pickle.h"
#include "runtime/checkpoint/torch_zip.h"
#include "runtime/checkpoint/zip_reader.h"

namespace libai::checkpoint {

// Opaque tags of the values the hooks make; payloads are TorchStorage / TorchTensorInfo.
inline constexpr const char* kTorchStorageTag = "torch.storage";
inline constexpr const char* kTorchTensorTag = "torch.tensor";

struct TorchStorage {
  std::string key;
  DType dtype = DType::f32;
  int64_t numel = 0;
};

// `data_folder` is "<prefix>/data/"; storages are checked against the zip's entries.
pickle::Hooks torch_pickle_hooks(const ZipReader& zip, const std::string& data_folder);

}  // namespace libai::checkpoint
