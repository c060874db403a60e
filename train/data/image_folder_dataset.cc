#include "train/data/image_folder_dataset.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace libai::train::data {
namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  static const char* kKnown[] = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm"};
  return std::any_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return ext == k; });
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const fs::path& root, vision::ImageProcessor processor)
    : processor_(std::move(processor)) {
  LIBAI_CHECK_KIND(NotFound, fs::is_directory(root), "ImageFolderDataset: ", root.string(),
                   " is not a folder");
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && entry.path().filename().string()[0] != '.')
      classes_.push_back(entry.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  LIBAI_CHECK(!classes_.empty(), "ImageFolderDataset: ", root.string(),
              " has no class folders (root/<class name>/<images>)");
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(root / classes_[c]))
      if (entry.is_regular_file() && entry.path().filename().string()[0] != '.' &&
          is_image(entry.path()))
        found.push_back(entry.path());
    std::sort(found.begin(), found.end());
    for (auto& f : found) {
      files_.push_back(std::move(f));
      labels_.push_back(int64_t(c));
    }
  }
  LIBAI_CHECK(!files_.empty(), "ImageFolderDataset: no images under ", root.string());
}

models::TensorMap ImageFolderDataset::get(int64_t index) const {
  LIBAI_CHECK(index >= 0 && index < size(), "ImageFolderDataset: sample ", index,
              " out of range [0, ", size(), ")");
  Tensor batch = processor_.preprocess(vision::load_image(files_[size_t(index)]));  // [1, 3, h, w]
  const Shape shape(batch.shape().begin() + 1, batch.shape().end());
  Tensor pixels = Tensor::empty(shape, batch.dtype());
  pixels.copy_from(batch.as_strided(shape, contiguous_strides(shape), batch.offset()));
  return {{"pixel_values", pixels},
          {"labels", Tensor::from_vector(std::vector<int64_t>{labels_[size_t(index)]}, {})}};
}

}  // namespace libai::train::data
