#include "models/vision/image.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "runtime/error.h"

namespace libai::vision {

namespace {

// stb_image's internal checks throw instead of aborting, so that no input can end the process
// (decode_image turns this into CorruptInput naming the file).
struct StbFailure {
  const char* condition;
};

}  // namespace

}  // namespace libai::vision

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC  // private to this file: no clash with another copy of stb_image
#define STBI_NO_STDIO     // files are read here, for errors that name them
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNM
#define STBI_ONLY_BMP
#define STBI_MAX_DIMENSIONS (1 << 14)  // refuse absurd headers before allocating for them
#define STBI_ASSERT(x) ((x) ? (void)0 : throw ::libai::vision::StbFailure{#x})
#include <stb_image.h>

namespace libai::vision {

namespace fs = std::filesystem;

namespace {

// stb_image 2.27 (Debian 12's) trusts the symbol counts of a JPEG Huffman table: counts that
// sum past 256 overflow its tables (fixed upstream in 2.28). Walk the JPEG's segments, including
// those between the scans of a progressive file, and refuse such a table first.
void check_jpeg_huffman_tables(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) return;  // not a JPEG
  size_t at = 2;
  while (at + 4 <= size) {
    if (data[at] != 0xFF) {  // entropy-coded data: skip to the next marker
      ++at;
      continue;
    }
    const uint8_t marker = data[at + 1];
    if (marker == 0xFF || marker == 0x00 || (marker >= 0xD0 && marker <= 0xD8)) {
      at += marker == 0xFF ? 1 : 2;  // fill byte, stuffed zero, restart marker, SOI
      continue;
    }
    if (marker == 0xD9) return;  // EOI
    const size_t length = size_t(data[at + 2]) << 8 | data[at + 3];
    const size_t end = at + 2 + length;
    if (marker == 0xC4) {
      // DHT: tables of [class/id, 16 counts, symbols] while the segment lasts; stb_image reads
      // each table whole even when it runs past the segment's length, and so does this check.
      for (size_t table = at + 4; table < end && table < size;) {
        size_t symbols = 0;  // counts past the end of the file read as 0, as stb_image reads them
        for (size_t i = 1; i <= 16 && table + i < size; ++i) symbols += data[table + i];
        LIBAI_CHECK_KIND(CorruptInput, symbols <= 256, "image ", name,
                         ": corrupt JPEG (a Huffman table of ", symbols, " symbols)");
        table += 17 + symbols;
      }
    }
    at = std::max(end, at + 2);
  }
}

}  // namespace

Tensor decode_image(const void* data, size_t size, const std::string& name) {
  LIBAI_CHECK_KIND(CorruptInput, size > 0, "image ", name, ": the file is empty");
  LIBAI_CHECK_KIND(Unsupported, size <= size_t(INT_MAX), "image ", name, ": ", size,
                   " bytes is too large to decode");
  check_jpeg_huffman_tables(static_cast<const uint8_t*>(data), size, name);
  int width = 0, height = 0, channels = 0;
  stbi_uc* pixels = nullptr;
  try {
    pixels = stbi_load_from_memory(static_cast<const stbi_uc*>(data), int(size), &width, &height,
                                   &channels, 3);
  } catch (const StbFailure& e) {
    LIBAI_CHECK_KIND(CorruptInput, false, "image ", name, ": cannot decode (internal check ",
                     e.condition, " failed)");
  }
  LIBAI_CHECK_KIND(CorruptInput, pixels != nullptr, "image ", name,
                   ": not a readable PNG, JPEG, PNM or BMP image (", stbi_failure_reason(), ")");
  std::shared_ptr<void> owner(pixels, [](void* p) { stbi_image_free(p); });
  return Tensor::from_blob(pixels, {height, width, 3}, DType::u8, std::move(owner));
}

Tensor load_image(const fs::path& path) {
  LIBAI_CHECK_KIND(NotFound, fs::exists(path), "image ", path.string(), " does not exist");
  std::ifstream in(path, std::ios::binary);
  LIBAI_CHECK_KIND(IoError, in.good() && !fs::is_directory(path), "image ", path.string(),
                   " cannot be read");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LIBAI_CHECK_KIND(IoError, !in.bad(), "image ", path.string(), ": read error");
  return decode_image(bytes.data(), bytes.size(), path.string());
}

// Note [PIL resampling]
// PIL resizes in two separable passes. Output pixel i of a pass covers the input interval
// centred on (i + 0.5) * scale, scale = in / out; when shrinking, the filter is stretched by the
// scale (support = filter support * scale, argument divided by scale), so every input pixel
// contributes: an antialiasing average rather than a 2-tap interpolation. The taps of each
// output pixel are normalised to sum to 1 and converted to fixed point with 22 fractional bits
// (rounded away from zero); each pass rounds and clamps its result to 8 bits, so the order of
// the passes shows in the last bit. Pillow runs the horizontal pass first, except (since
// Pillow 13) when the height shrinks by more than twice as many pixels as the width, when the
// vertical pass goes first; older Pillow differs there by a level or so. A pass whose size does
// not change is skipped. This reproduces Pillow 13's Image.resize bit for bit.
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double filter_support(Resample r) {
  switch (r) {
    case Resample::box: return 0.5;
    case Resample::bilinear:
    case Resample::hamming: return 1.0;
    case Resample::bicubic: return 2.0;
    case Resample::lanczos: return 3.0;
  }
  return 1.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double filter_value(Resample r, double x) {
  switch (r) {
    case Resample::box: return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
    case Resample::bilinear: x = std::fabs(x); return x < 1.0 ? 1.0 - x : 0.0;
    case Resample::hamming:
      x = std::fabs(x);
      if (x == 0.0) return 1.0;
      if (x >= 1.0) return 0.0;
      x *= M_PI;
      return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));  // PIL's float constants
    case Resample::bicubic: {
      constexpr double a = -0.5;
      x = std::fabs(x);
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
      if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
      return 0.0;
    }
    case Resample::lanczos: return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0;
  }
  return 0.0;
}

// The taps of one pass: output i reads `count[i]` inputs from `first[i]` with `weights[i * taps
// ...]`.
struct Taps {
  int64_t taps = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // fixed point, kPrecisionBits fractional bits
};

Taps make_taps(int64_t in_size, int64_t out_size, Resample r) {
  const double scale = double(in_size) / double(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double inverse_scale = 1.0 / filter_scale;  // PIL multiplies by it (not divides)
  const double support = filter_support(r) * filter_scale;
  Taps t;
  t.taps = int64_t(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(size_t(out_size * t.taps), 0);
  std::vector<double> w(size_t(t.taps));
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = (double(i) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(int64_t(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(int64_t(center + support + 0.5), in_size);
    const int64_t n = hi - lo;
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      w[k] = filter_value(r, (double(k + lo) - center + 0.5) * inverse_scale);
      sum += w[k];
    }
    for (int64_t k = 0; k < n; ++k) {
      const double v = sum != 0.0 ? w[k] / sum : w[k];
      const double fixed = v * double(1 << kPrecisionBits);
      t.weights[size_t(i * t.taps + k)] = int32_t(v < 0 ? fixed - 0.5 : fixed + 0.5);
    }
    t.first[i] = lo;
    t.count[i] = n;
  }
  return t;
}

uint8_t clip8(int64_t accumulated) {
  return uint8_t(std::clamp<int64_t>(accumulated >> kPrecisionBits, 0, 255));
}

// One pass along one axis of an interleaved image, for each of `lines` lines (rows for the
// horizontal pass, columns for the vertical one): output sample i of each channel sums
// taps.count[i] inputs from taps.first[i]. *_line: elements between lines; *_step: elements
// between neighbouring samples along the resized axis.
void resample_pass(const uint8_t* in, uint8_t* out, int64_t lines, int64_t out_size,
                   int64_t channels, int64_t in_line, int64_t in_step, int64_t out_line,
                   int64_t out_step, const Taps& taps) {
  for (int64_t line = 0; line < lines; ++line)
    for (int64_t i = 0; i < out_size; ++i) {
      const int32_t* w = &taps.weights[size_t(i * taps.taps)];
      const uint8_t* src = in + line * in_line + taps.first[i] * in_step;
      for (int64_t c = 0; c < channels; ++c) {
        int64_t acc = int64_t(1) << (kPrecisionBits - 1);
        for (int64_t k = 0; k < taps.count[i]; ++k) acc += int64_t(src[k * in_step + c]) * w[k];
        out[line * out_line + i * out_step + c] = clip8(acc);
      }
    }
}

// A u8 image [height, width, channels], row-major.
struct Pixels {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> data;
};

// Each row to `out_width` samples; the image itself when the width does not change.
Pixels resample_horizontal(Pixels in, int64_t out_width, Resample r) {
  if (out_width == in.width) return in;
  const int64_t c = in.channels;
  Pixels out{in.height, out_width, c, std::vector<uint8_t>(size_t(in.height * out_width * c))};
  resample_pass(in.data.data(), out.data.data(), in.height, out_width, c, in.width * c, c,
                out_width * c, c, make_taps(in.width, out_width, r));
  return out;
}

// Each column to `out_height` samples; the image itself when the height does not change.
Pixels resample_vertical(Pixels in, int64_t out_height, Resample r) {
  if (out_height == in.height) return in;
  const int64_t c = in.channels, row = in.width * c;
  Pixels out{out_height, in.width, c, std::vector<uint8_t>(size_t(out_height * row))};
  resample_pass(in.data.data(), out.data.data(), in.width, out_height, c, c, row, c, row,
                make_taps(in.height, out_height, r));
  return out;
}

}  // namespace

Tensor resize(const Tensor& rgb, int64_t out_height, int64_t out_width, Resample resample) {
  LIBAI_CHECK(rgb.dim() == 3 && rgb.dtype() == DType::u8,
              "resize: expected a [height, width, channels] u8 image, got ", shape_str(rgb.shape()),
              " ", dtype_name(rgb.dtype()));
  LIBAI_CHECK(out_height > 0 && out_width > 0, "resize: output size ", out_height, "x", out_width,
              " should be positive");
  Pixels image{rgb.size(0), rgb.size(1), rgb.size(2), rgb.to_vector<uint8_t>()};
  LIBAI_CHECK(image.height > 0 && image.width > 0, "resize: the image is empty (", image.height,
              "x", image.width, ")");
  const bool vertical_first =
      out_height < image.height && image.height - out_height > 2 * (image.width - out_width);
  if (vertical_first) image = resample_vertical(image, out_height, resample);
  image = resample_horizontal(image, out_width, resample);
  image = resample_vertical(image, out_height, resample);
  Tensor out = Tensor::empty({out_height, out_width, image.channels}, DType::u8);
  std::copy(image.data.begin(), image.data.end(), out.data<uint8_t>());
  return out;
}

namespace {

const nlohmann::json* find_key(const nlohmann::json& json, const char* key) {
  auto it = json.find(key);
  return it == json.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const nlohmann::json& json, const char* key, bool fallback, const std::string& path) {
  const auto* v = find_key(json, key);
  if (!v) return fallback;
  LIBAI_CHECK_KIND(CorruptInput, v->is_boolean(), path, ": \"", key,
                   "\" should be true or false, got ", v->dump());
  return v->get<bool>();
}

double get_number(const nlohmann::json& v, const char* key, const std::string& path) {
  LIBAI_CHECK_KIND(CorruptInput, v.is_number(), path, ": \"", key, "\" should be a number, got ",
                   v.dump());
  return v.get<double>();
}

int64_t get_size(const nlohmann::json& v, const char* key, const std::string& path) {
  LIBAI_CHECK_KIND(CorruptInput, v.is_number_integer() && v.get<int64_t>() > 0, path, ": \"", key,
                   "\" should be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

// image_mean / image_std: three numbers, or one for every channel.
std::array<double, 3> get_triple(const nlohmann::json& json, const char* key,
                                 std::array<double, 3> fallback, const std::string& path) {
  const auto* v = find_key(json, key);
  if (!v) return fallback;
  if (v->is_number()) return {v->get<double>(), v->get<double>(), v->get<double>()};
  LIBAI_CHECK_KIND(CorruptInput, v->is_array() && v->size() == 3, path, ": \"", key,
                   "\" should be a number or a list of 3 numbers, got ", v->dump());
  return {get_number((*v)[0], key, path), get_number((*v)[1], key, path),
          get_number((*v)[2], key, path)};
}

}  // namespace

ImageProcessor ImageProcessor::load(const fs::path& folder_or_file) {
  const fs::path path = fs::is_directory(folder_or_file)
                            ? folder_or_file / "preprocessor_config.json"
                            : folder_or_file;
  LIBAI_CHECK_KIND(NotFound, fs::exists(path), "image processor: ", path.string(),
                   " does not exist");
  std::ifstream in(path);
  LIBAI_CHECK_KIND(IoError, in.good(), "image processor: cannot read ", path.string());
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    LIBAI_CHECK_KIND(CorruptInput, false, "image processor: ", path.string(),
                     " is not valid JSON: ", e.what());
  }
  return from_json(json, path.string());
}

ImageProcessor ImageProcessor::from_json(const nlohmann::json& json, const std::string& path) {
  LIBAI_CHECK_KIND(CorruptInput, json.is_object(), path, ": not a JSON object");
  ImageProcessor p;
  p.do_resize = get_bool(json, "do_resize", p.do_resize, path);
  if (const auto* size = find_key(json, "size")) {
    if (size->is_number()) {
      p.height = p.width = get_size(*size, "size", path);
    } else {
      LIBAI_CHECK_KIND(CorruptInput, size->is_object(), path,
                       ": \"size\" should be an object, got ", size->dump());
      LIBAI_CHECK_KIND(Unsupported, size->contains("height") && size->contains("width"), path,
                       ": \"size\" ", size->dump(),
                       " is not supported (only {\"height\", \"width\"})");
      p.height = get_size(size->at("height"), "size.height", path);
      p.width = get_size(size->at("width"), "size.width", path);
    }
  }
  if (const auto* r = find_key(json, "resample")) {
    const int64_t code = r->is_number_integer() ? r->get<int64_t>() : -1;
    LIBAI_CHECK_KIND(Unsupported, code >= 1 && code <= 5, path, ": \"resample\" ", r->dump(),
                     " is not supported (1 lanczos, 2 bilinear, 3 bicubic, 4 box, 5 hamming)");
    p.resample = Resample(code);
  }
  p.do_rescale = get_bool(json, "do_rescale", p.do_rescale, path);
  if (const auto* f = find_key(json, "rescale_factor"))
    p.rescale_factor = get_number(*f, "rescale_factor", path);
  p.do_normalize = get_bool(json, "do_normalize", p.do_normalize, path);
  p.image_mean = get_triple(json, "image_mean", p.image_mean, path);
  p.image_std = get_triple(json, "image_std", p.image_std, path);
  for (double s : p.image_std)
    LIBAI_CHECK_KIND(CorruptInput, s != 0.0, path, ": \"image_std\" has a zero entry");
  LIBAI_CHECK_KIND(Unsupported, !get_bool(json, "do_center_crop", false, path), path,
                   ": do_center_crop is not supported");
  LIBAI_CHECK_KIND(Unsupported, !get_bool(json, "do_pad", false, path), path,
                   ": do_pad is not supported");
  return p;
}

Tensor ImageProcessor::preprocess(const Tensor& rgb) const {
  LIBAI_CHECK(rgb.dim() == 3 && rgb.size(2) == 3 && rgb.dtype() == DType::u8,
              "image processor: expected a [height, width, 3] u8 RGB image, got ",
              shape_str(rgb.shape()), " ", dtype_name(rgb.dtype()));
  Tensor image = rgb;
  if (do_resize && (rgb.size(0) != height || rgb.size(1) != width))
    image = resize(rgb, height, width, resample);
  const int64_t h = image.size(0), w = image.size(1), plane = h * w;
  const std::vector<uint8_t> in = image.to_vector<uint8_t>();
  Tensor out = Tensor::empty({1, 3, h, w}, DType::f32);
  float* dst = out.data<float>();
  // The processor's arithmetic: f64 rescale rounded to f32, then f32 normalisation.
  for (int64_t c = 0; c < 3; ++c) {
    const float mean = float(image_mean[c]), std = float(image_std[c]);
    for (int64_t i = 0; i < plane; ++i) {
      float v = do_rescale ? float(double(in[size_t(i * 3 + c)]) * rescale_factor)
                           : float(in[size_t(i * 3 + c)]);
      if (do_normalize) v = (v - mean) / std;
      dst[c * plane + i] = v;
    }
  }
  return out;
}

}  // namespace libai::vision
