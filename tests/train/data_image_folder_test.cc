// ImageFolderDataset: classes sorted, labels by class index, pixels as the processor's formula
// gives them for constant-colour images (any resampling keeps a constant), and the batch feeds
// the image-classification loss.
#include <gtest/gtest.h>

#include <fstream>

#include "../models/parity_util.h"
#include "train/data/image_folder_dataset.h"
#include "train/loss.h"

namespace libai::train::data {
namespace {
namespace fs = std::filesystem;

void write_ppm(const fs::path& path, int width, int height, int r, int g, int b) {
  std::ofstream out(path, std::ios::binary);
  out << "P6\n" << width << " " << height << "\n255\n";
  for (int i = 0; i < width * height; ++i) out.put(char(r)).put(char(g)).put(char(b));
}

struct Tree {
  fs::path root = fs::temp_directory_path() / ("libai_image_folder_" + std::to_string(::getpid()));
  Tree() {
    fs::remove_all(root);
    fs::create_directories(root / "zebra");
    fs::create_directories(root / "ant");
    write_ppm(root / "zebra" / "b.ppm", 9, 7, 200, 10, 30);
    write_ppm(root / "zebra" / "a.ppm", 5, 6, 0, 255, 128);
    write_ppm(root / "ant" / "x.ppm", 8, 8, 51, 102, 153);
    std::ofstream(root / "ant" / "notes.txt") << "not an image";
  }
  ~Tree() { fs::remove_all(root); }
};

TEST(ImageFolderDataset, ClassesLabelsAndPixels) {
  Tree tree;
  vision::ImageProcessor processor;
  processor.height = 4;
  processor.width = 6;
  processor.image_mean = {0.485, 0.456, 0.406};
  processor.image_std = {0.229, 0.224, 0.225};
  ImageFolderDataset ds(tree.root, processor);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"ant", "zebra"}));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.file(1).filename(), "a.ppm");
  const int colours[3][3] = {{51, 102, 153}, {0, 255, 128}, {200, 10, 30}};
  for (int64_t i = 0; i < 3; ++i) {
    auto s = ds.get(i);
    EXPECT_EQ(s.at("labels").item<int64_t>(), i == 0 ? 0 : 1);
    ASSERT_EQ(s.at("pixel_values").shape(), (Shape{3, 4, 6}));
    auto px = s.at("pixel_values").to_vector<float>();
    for (int c = 0; c < 3; ++c) {
      const double want = (colours[i][c] / 255.0 - processor.image_mean[size_t(c)]) /
                          processor.image_std[size_t(c)];
      for (int k = 0; k < 24; ++k) ASSERT_NEAR(px[size_t(c * 24 + k)], want, 1e-5) << i << c;
    }
  }
  EXPECT_THROW(ImageFolderDataset(tree.root / "missing", processor), Error);
}

TEST(ImageFolderDataset, BatchesFeedTheClassificationLoss) {
  Tree tree;
  auto model = models::load_model(libai::testing::model_fixture("vit"));
  const int64_t size = model->config().get_int("image_size", 224);
  vision::ImageProcessor processor;
  processor.height = processor.width = size;
  ImageFolderDataset ds(tree.root, processor);
  auto batch = make_batch(ds, {0, 1, 2});
  EXPECT_EQ(batch.at("labels").shape(), (Shape{3}));
  auto out = compute_loss(*model, batch);
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
  EXPECT_EQ(out.targets, 3);
}

}  // namespace
}  // namespace libai::train::data
