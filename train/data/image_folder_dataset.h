// Image classification samples from a folder tree (torchvision's ImageFolder layout):
// root/<class name>/<image files>. Classes are the sub-folders sorted by name, labelled by
// that index; each class's files are sorted by name; images are decoded and preprocessed as
// the model's ImageProcessor does (models/vision/image.h).
//
//   auto processor = vision::ImageProcessor::load("google/vit-base-patch16-224");
//   data::ImageFolderDataset dataset("imagenet/train", processor);
//   auto s = dataset.get(0);   // pixel_values [3, 224, 224] f32, labels [] i64
//   dataset.classes();         // {"n01440764", ...}
//
// Files with other extensions than .jpg .jpeg .png .bmp .ppm .pgm are skipped (hidden files
// too); a file that does not decode raises the decoder's error naming it when its sample is read.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "models/vision/image.h"
#include "train/data/dataset.h"

namespace libai::train::data {

class ImageFolderDataset : public Dataset {
 public:
  ImageFolderDataset(const std::filesystem::path& root, vision::ImageProcessor processor);

  int64_t size() const override { return int64_t(files_.size()); }
  models::TensorMap get(int64_t index) const override;
  const std::vector<std::string>& classes() const { return classes_; }
  const std::filesystem::path& file(int64_t index) const { return files_.at(size_t(index)); }
  int64_t label(int64_t index) const { return labels_.at(size_t(index)); }

 private:
  vision::ImageProcessor processor_;
  std::vector<std::string> classes_;
  std::vector<std::filesystem::path> files_;
  std::vector<int64_t> labels_;
};

}  // namespace libai::train::data
