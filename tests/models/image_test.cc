// Image decoding, PIL-compatible resizing and ViTImageProcessor preprocessing, against the
// values PIL and transformers computed (tools/make_image_fixtures.py), and bad files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "models/vision/image.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::vision {
namespace {

namespace fs = std::filesystem;

fs::path data_dir() { return fs::path(LIBAI_SOURCE_DIR) / "tests/data/images"; }

const checkpoint::SafetensorsFile& reference() {
  static const auto file =
      checkpoint::SafetensorsFile::open((data_dir() / "reference.safetensors").string());
  return file;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// max |a - b| over all elements; shapes must agree.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

// A folder per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("libai_image_") + info->name() + "_" + std::to_string(::getpid()));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  fs::path write(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path_ / name, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    return path_ / name;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::string& piece) {
  try {
    fn();
    ADD_FAILURE() << "no error was raised";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
  } catch (const Error& e) {
    ADD_FAILURE() << "wrong error kind " << error_kind_name(e.kind()) << ": " << e.what();
  }
}

TEST(ImageDecode, LosslessFilesMatchPil) {
  for (const std::string name : {"gradient.png", "gradient_grey.png", "tiny.ppm"}) {
    SCOPED_TRACE(name);
    Tensor rgb = load_image(data_dir() / name);
    EXPECT_EQ(rgb.dtype(), DType::u8);
    const std::string stem = fs::path(name).stem().string();
    EXPECT_EQ(max_abs_diff(rgb, reference().tensor(stem + ".rgb")), 0.0);
  }
}

TEST(ImageDecode, JpegMatchesLibjpegWithinRounding) {
  // stb_image and libjpeg round their IDCT and colour conversion differently.
  Tensor rgb = load_image(data_dir() / "photo.jpg");
  EXPECT_LE(max_abs_diff(rgb, reference().tensor("photo.rgb")), 3.0);
}

TEST(ImageResize, MatchesPilForEveryFilterAndSize) {
  Tensor source = reference().tensor("gradient.rgb");
  const std::pair<const char*, Resample> filters[] = {{"lanczos", Resample::lanczos},
                                                      {"bilinear", Resample::bilinear},
                                                      {"bicubic", Resample::bicubic},
                                                      {"box", Resample::box},
                                                      {"hamming", Resample::hamming}};
  for (const auto& [filter, resample] : filters)
    for (const auto& [h, w] : {std::pair{24, 24}, {16, 60}, {80, 45}, {8, 40}}) {
      const std::string key = "gradient.resize." + std::string(filter) + "_" + std::to_string(h) +
                              "x" + std::to_string(w);
      SCOPED_TRACE(key);
      EXPECT_EQ(max_abs_diff(resize(source, h, w, resample), reference().tensor(key)), 0.0);
    }
}

TEST(ImageResize, SameSizeIsACopy) {
  Tensor source = reference().tensor("gradient.rgb");
  EXPECT_EQ(max_abs_diff(resize(source, 37, 45), source), 0.0);
}

TEST(ImagePreprocess, MatchesViTImageProcessor) {
  auto processor = ImageProcessor::load(data_dir());
  // PNG and PPM decode exactly, so only float rounding remains; the JPEG carries the decoders'
  // rounding through the resize (one level is 1 / (255 * 0.225) = 0.017 after normalising).
  for (const auto& [file, tolerance] : {std::pair{"gradient.png", 1e-5},
                                        {"gradient_grey.png", 1e-5},
                                        {"tiny.ppm", 1e-5},
                                        {"photo.jpg", 0.04}}) {
    SCOPED_TRACE(file);
    Tensor pixels = processor.preprocess(load_image(data_dir() / file));
    EXPECT_EQ(pixels.dtype(), DType::f32);
    const std::string stem = fs::path(file).stem().string();
    EXPECT_LE(max_abs_diff(pixels, reference().tensor(stem + ".pixel_values")), tolerance);
  }
  // Upscaling with bicubic, to a size that is not square.
  processor.height = 64;
  processor.width = 56;
  processor.resample = Resample::bicubic;
  Tensor pixels = processor.preprocess(load_image(data_dir() / "gradient.png"));
  EXPECT_LE(max_abs_diff(pixels, reference().tensor("gradient.bicubic_64x56")), 1e-5);
}

TEST(ImageProcessorConfig, ReadsTheKeysAndRejectsWhatItCannotDo) {
  auto p = ImageProcessor::load(data_dir() / "preprocessor_config.json");
  EXPECT_EQ(p.height, 24);
  EXPECT_EQ(p.width, 24);
  EXPECT_EQ(p.resample, Resample::bilinear);
  EXPECT_DOUBLE_EQ(p.image_std[1], 0.224);
  EXPECT_EQ(ImageProcessor::from_json({{"size", 32}}).width, 32);
  EXPECT_EQ(ImageProcessor::from_json({{"image_mean", 0.25}}).image_mean[2], 0.25);
  expect_error<Unsupported>(
      [] {
        ImageProcessor::from_json({{"size", {{"shortest_edge", 224}}}}, "p.json");
      },
      "p.json: \"size\"");
  expect_error<Unsupported>(
      [] {
        ImageProcessor::from_json({{"resample", 0}}, "p.json");
      },
      "resample");
  expect_error<Unsupported>(
      [] {
        ImageProcessor::from_json({{"do_center_crop", true}}, "p.json");
      },
      "do_center_crop");
  expect_error<CorruptInput>(
      [] {
        ImageProcessor::from_json({{"image_std", {1, 2}}}, "p.json");
      },
      "image_std");
  ScratchDir dir;
  const auto bad = dir.write("preprocessor_config.json", "{\"size\": ");
  expect_error<CorruptInput>([&] { ImageProcessor::load(bad); }, bad.string());
  expect_error<NotFound>([&] { ImageProcessor::load(dir.path() / "missing.json"); },
                         "missing.json");
}

TEST(ImageDecode, BadFilesRaiseErrorsNamingThem) {
  ScratchDir dir;
  expect_error<NotFound>([&] { load_image(data_dir() / "no_such.png"); }, "no_such.png");
  const std::string png = read_bytes(data_dir() / "gradient.png");
  const auto truncated = dir.write("truncated.png", png.substr(0, png.size() / 2));
  expect_error<CorruptInput>([&] { load_image(truncated); }, truncated.string());
  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = char(rng());
  const auto random = dir.write("random.bin", noise);
  expect_error<CorruptInput>([&] { load_image(random); }, random.string());
  // A PNG signature followed by garbage.
  const auto fake = dir.write("fake.png", png.substr(0, 8) + noise);
  expect_error<CorruptInput>([&] { load_image(fake); }, "fake.png");
  // A JPEG Huffman table claiming more than 256 symbols (it would overflow stb_image 2.27).
  std::string jpeg = read_bytes(data_dir() / "photo.jpg");
  const size_t dht = jpeg.find("\xFF\xC4");
  ASSERT_NE(dht, std::string::npos);
  for (size_t i = 0; i < 16; ++i) jpeg[dht + 5 + i] = char(0xFF);
  const auto huffman = dir.write("huffman.jpg", jpeg);
  expect_error<CorruptInput>([&] { load_image(huffman); },
                             "huffman.jpg: corrupt JPEG (a Huffman table");
  expect_error<IoError>([&] { load_image(dir.path()); }, dir.path().string());
  const auto empty = dir.write("empty.jpg", "");
  expect_error<CorruptInput>([&] { load_image(empty); }, "empty.jpg");
  expect_error<CorruptInput>([&] { decode_image(noise.data(), 100, "buffer"); }, "buffer");
}

TEST(ImageDecode, EveryTruncationOrBitFlipFailsCleanlyOrDecodes) {
  // Decoding must never crash: each prefix and each single-byte corruption of the fixtures
  // either decodes to an image of the right size or raises CorruptInput.
  for (const std::string name : {"gradient.png", "photo.jpg", "tiny.ppm"}) {
    SCOPED_TRACE(name);
    const std::string bytes = read_bytes(data_dir() / name);
    auto check = [&](const std::string& data) {
      try {
        Tensor rgb = decode_image(data.data(), data.size(), name);
        EXPECT_EQ(rgb.dim(), 3);
        EXPECT_EQ(rgb.size(2), 3);
      } catch (const CorruptInput& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
    };
    for (size_t n = 0; n < bytes.size(); ++n) check(bytes.substr(0, n));
    std::mt19937 rng(11);
    for (int i = 0; i < 300; ++i) {
      std::string corrupted = bytes;
      corrupted[rng() % corrupted.size()] ^= char(1 + rng() % 255);
      check(corrupted);
    }
  }
}

TEST(ImagePreprocess, RejectsImagesThatAreNotRgbU8) {
  ImageProcessor p;
  expect_error<InvalidArgument>([&] { p.preprocess(Tensor::zeros({4, 4, 3})); }, "u8");
  expect_error<InvalidArgument>([&] { p.preprocess(Tensor::zeros({4, 4}, DType::u8)); }, "[4, 4]");
}

}  // namespace
}  // namespace libai::vision
