// Image input for vision models: decoding image files to RGB, and the preprocessing of Hugging
// Face's ViTImageProcessor (resize, rescale, normalise) read from preprocessor_config.json.
//
//   Tensor rgb = vision::load_image("cat.jpg");                  // [height, width, 3] u8
//   auto processor = vision::ImageProcessor::load("google/vit-base-patch16-224");
//   Tensor pixels = processor.preprocess(rgb);                   // [1, 3, 224, 224] f32
//   model->forward({{"pixel_values", pixels}});
//
// Decoding uses stb_image: PNG (palette, grey, alpha), baseline and progressive JPEG (grey,
// YCbCr, CMYK), PNM (PPM, PGM) and BMP. Grey images are replicated to three channels and alpha
// is dropped, as PIL's convert("RGB") does, so PNG, PNM and BMP pixels equal PIL's; JPEG pixels
// differ from libjpeg's by up to 3 levels (the decoders round the IDCT and chroma upsampling
// differently); 16-bit images keep their high byte (PIL clips them instead). JPEG EXIF
// orientation is not applied (a PIL image handed to the processor is not rotated either). A
// missing, unreadable or corrupt file raises an error naming it; bad bytes never crash.
//
// Resizing follows PIL's Image.resize (Note [PIL resampling] in image.cc), which is what
// ViTImageProcessor runs, so pixel values equal the processor's for lossless input.
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/tensor.h"

namespace libai::vision {

// The file's pixels as [height, width, 3] u8 RGB. NotFound / IoError for a file that cannot be
// read, CorruptInput for bytes that are not a supported image (the message names the file).
Tensor load_image(const std::filesystem::path& path);
// The same from bytes in memory; `name` is used in errors.
Tensor decode_image(const void* data, size_t size, const std::string& name = "<memory>");

// PIL's resampling filters, by PIL's numbers (Image.Resampling), as preprocessor configs store
// them. Nearest (0) is not supported.
enum class Resample { lanczos = 1, bilinear = 2, bicubic = 3, box = 4, hamming = 5 };

// rgb [height, width, channels] u8 -> [out_height, out_width, channels] u8, like PIL's
// Image.resize((out_width, out_height), resample): separable, antialiased when shrinking (the
// filter's support grows with the scale), 8-bit fixed-point with rounding after each pass.
Tensor resize(const Tensor& rgb, int64_t out_height, int64_t out_width,
              Resample resample = Resample::bilinear);

// ViTImageProcessor's settings (the keys of preprocessor_config.json).
struct ImageProcessor {
  bool do_resize = true;
  int64_t height = 224, width = 224;  // "size": {"height", "width"} (or one int for both)
  Resample resample = Resample::bilinear;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean = {0.5, 0.5, 0.5};
  std::array<double, 3> image_std = {0.5, 0.5, 0.5};

  // `folder_or_file`: a folder with preprocessor_config.json, or the file itself. Keys this
  // processor cannot honour (size by shortest_edge, do_center_crop) raise Unsupported.
  static ImageProcessor load(const std::filesystem::path& folder_or_file);
  static ImageProcessor from_json(const nlohmann::json& json, const std::string& path = "<config>");

  // rgb [height, width, 3] u8 -> pixel_values [1, 3, height, width] f32: resize, then
  // x * rescale_factor, then (x - mean) / std per channel, in f32 as the processor computes.
  Tensor preprocess(const Tensor& rgb) const;
};

}  // namespace libai::vision
