#include "models/weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sys/mman.h>
#include <unistd.h>
#include <set>
#include <variant>

#include "models/gguf.h"
#include "models/layers/linear.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/checkpoint/torch_zip.h"
#include "runtime/logging.h"

namespace libai::models {

namespace fs = std::filesystem;

struct WeightSource::Impl {
  std::string path;
  std::variant<std::monostate, checkpoint::SafetensorsFile, checkpoint::ShardedSafetensors,
               checkpoint::TorchCheckpoint, GgufWeights>
      file;
  std::vector<std::string> names;
  checkpoint::Metadata metadata;
  ops::QuantSpec quantization;           // a quantized checkpoint's
  std::set<std::string> quantized;       // its weights stored as W.q, W.scale (, W.min)

  bool file_contains(const std::string& name) const;
  Tensor file_tensor(const std::string& name) const;
};

bool WeightSource::Impl::file_contains(const std::string& name) const {
  return std::visit(
      [&](const auto& f) {
        if constexpr (std::is_same_v<std::decay_t<decltype(f)>, std::monostate>) return false;
        else return f.contains(name);
      },
      file);
}

Tensor WeightSource::Impl::file_tensor(const std::string& name) const {
  return std::visit(
      [&](const auto& f) {
        if constexpr (std::is_same_v<std::decay_t<decltype(f)>, std::monostate>) return Tensor();
        else return f.tensor(name);
      },
      file);
}

namespace {

bool is_torch_file(const fs::path& p) {
  const auto ext = p.extension().string();
  return ext == ".bin" || ext == ".pt" || ext == ".pth";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A quantized checkpoint (Note [Quantized checkpoints] in ops/packed_linear.h): W.q, W.scale
// and W.min are listed as W.
void find_quantized(WeightSource::Impl& impl) {
  auto it = impl.metadata.find("quantization");
  if (it == impl.metadata.end()) return;
  impl.quantization = ops::parse_quantization(it->second, impl.path + ": metadata quantization");
  LIBAI_CHECK_KIND(CorruptInput, impl.quantization.kind != ops::Quantization::none, impl.path,
                   ": metadata quantization is none");
  for (const auto& n : impl.names)
    if (ends_with(n, ".q")) impl.quantized.insert(n.substr(0, n.size() - 2));
  std::vector<std::string> names;
  for (const auto& n : impl.names) {
    bool part = false;
    for (const char* suffix : {".q", ".scale", ".min"})
      if (ends_with(n, suffix))
        part = part || impl.quantized.count(n.substr(0, n.size() - std::strlen(suffix)));
    if (!part) names.push_back(n);
  }
  for (const auto& w : impl.quantized)
    if (!impl.file_contains(w)) names.push_back(w);
  impl.names = std::move(names);
}

}  // namespace

WeightSource WeightSource::open(const fs::path& path, WeightFormat format) {
  auto impl = std::make_shared<Impl>();
  auto open_file = [&](const fs::path& file) {
    impl->path = file.string();
    if (is_gguf(file)) {
      auto gguf = GgufWeights::open(file);
      impl->names = gguf.names();
      impl->file = std::move(gguf);
    } else if (is_torch_file(file)) {
      auto ckpt = checkpoint::TorchCheckpoint::open(file.string());
      impl->names = ckpt.names();
      impl->file = std::move(ckpt);
    } else {
      auto st = checkpoint::SafetensorsFile::open(file.string());
      impl->names = st.names();
      impl->metadata = st.metadata();
      impl->file = std::move(st);
      find_quantized(*impl);
    }
  };
  LIBAI_CHECK_KIND(NotFound, fs::exists(path), "model weights: ", path.string(), " does not exist");
  if (!fs::is_directory(path)) {
    open_file(path);
  } else {
    const bool st = format != WeightFormat::torch, pt = format != WeightFormat::safetensors;
    if (st && fs::exists(path / "model.safetensors")) {
      open_file(path / "model.safetensors");
    } else if (st && fs::exists(path / "model.safetensors.index.json")) {
      auto sharded = checkpoint::load_index(path.string());
      impl->path = (path / "model.safetensors.index.json").string();
      impl->names = sharded.names();
      impl->metadata = sharded.metadata();
      impl->file = std::move(sharded);
    } else if (pt && fs::exists(path / "pytorch_model.bin")) {
      open_file(path / "pytorch_model.bin");
    } else {
      LIBAI_CHECK_KIND(NotFound, false, "model weights: ", path.string(), " has no ",
                       st ? "model.safetensors, model.safetensors.index.json" : "",
                       st && pt ? " or " : "", pt ? "pytorch_model.bin" : "");
    }
  }
  WeightSource source;
  source.impl_ = std::move(impl);
  return source;
}

const std::vector<std::string>& WeightSource::names() const { return impl_->names; }

bool WeightSource::contains(const std::string& name) const {
  return impl_->quantized.count(name) || impl_->file_contains(name);
}

Tensor WeightSource::get(const std::string& name) const {
  if (impl_->file_contains(name) || !impl_->quantized.count(name)) return impl_->file_tensor(name);
  const ops::QuantizedTensors t = *quantized(name);
  LIBAI_CHECK_KIND(CorruptInput, t.q.dim() == 2, impl_->path, ": ", name, ".q should be 2-D, has shape ",
                   shape_str(t.q.shape()));
  const int64_t n = t.q.size(0);
  const int64_t k = impl_->quantization.kind == ops::Quantization::q4 ? 2 * t.q.size(1) : t.q.size(1);
  const Tensor shape_of = Tensor::empty({n, k}, DType::f32);
  return ops::dequantized(ops::pack_quantized(shape_of, impl_->quantization, t, impl_->path + ": " + name));
}

const ops::QuantSpec& WeightSource::quantization() const { return impl_->quantization; }

std::optional<ops::QuantizedTensors> WeightSource::quantized(const std::string& name) const {
  if (!impl_->quantized.count(name)) return std::nullopt;
  ops::QuantizedTensors t;
  auto part = [&](const char* suffix) {
    const std::string n = name + suffix;
    LIBAI_CHECK_KIND(CorruptInput, impl_->file_contains(n), impl_->path, ": quantized weight ", name,
                     " has no ", n);
    return impl_->file_tensor(n);
  };
  t.q = part(".q");
  t.scale = part(".scale");
  if (impl_->quantization.with_min) t.min = part(".min");
  return t;
}

const std::string& WeightSource::path() const { return impl_->path; }

const checkpoint::Metadata& WeightSource::metadata() const { return impl_->metadata; }

void WeightMap::add(std::string parameter, std::string source) {
  rules.push_back({std::move(parameter), {std::move(source)}});
}

void WeightMap::add_transposed(std::string parameter, std::string source) {
  rules.push_back({std::move(parameter), {std::move(source)}, true});
}

void WeightMap::add_heads(std::string parameter, std::vector<std::string> sources, int64_t parts,
                          int64_t heads, bool transpose) {
  rules.push_back({std::move(parameter), std::move(sources), transpose, heads, parts});
}

void WeightMap::add_grouped_qkv(std::string parameter, std::vector<std::string> qkv,
                                int64_t heads, int64_t kv_heads) {
  LIBAI_CHECK(qkv.size() == 3 && kv_heads > 0 && heads % kv_heads == 0,
              "add_grouped_qkv: q, k, v sources and heads divisible by kv_heads expected");
  WeightRule rule{std::move(parameter), std::move(qkv)};
  rule.heads = heads;
  rule.kv_heads = kv_heads;
  rules.push_back(std::move(rule));
}

void WeightMap::ignore(std::string suffix) { ignored.push_back(std::move(suffix)); }

namespace {

// [parts * heads * d, rest...] <-> [heads * parts * d, rest...]
Tensor swap_blocks(const Tensor& t, int64_t outer, int64_t inner) {
  Shape shape = t.shape();
  const int64_t rows = shape[0];
  LIBAI_CHECK_KIND(CorruptInput, rows % (outer * inner) == 0, "tensor of shape ",
                   shape_str(shape), " does not split into ", outer, " x ", inner, " blocks");
  Shape split = {outer, inner, rows / (outer * inner)};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  std::vector<int64_t> perm(split.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
  std::swap(perm[0], perm[1]);
  return ops::reshape(ops::contiguous(ops::permute(ops::reshape(t, split), perm)), shape);
}

// q [kv * g * d, rest...], k, v [kv * d, rest...] <-> [kv * (g + 2) * d, rest...] by group.
Tensor fuse_groups(const WeightRule& rule, const std::vector<Tensor>& qkv) {
  const int64_t kv = rule.kv_heads, g = rule.heads / rule.kv_heads;
  const Tensor& q = qkv[0];
  LIBAI_CHECK_KIND(CorruptInput, q.dim() >= 1 && q.size(0) % rule.heads == 0, "q of shape ",
                   shape_str(q.shape()), " does not split into ", rule.heads, " heads");
  const int64_t d = q.size(0) / rule.heads;
  std::vector<Tensor> blocks;
  for (size_t i = 0; i < 3; ++i) {
    Shape shape = qkv[i].shape();
    const int64_t rows = kv * (i == 0 ? g : 1) * d;
    LIBAI_CHECK_KIND(CorruptInput, qkv[i].dim() == q.dim() && shape[0] == rows, "tensor of shape ",
                     shape_str(shape), " is not ", rows, " rows of ", kv, " key/value groups");
    shape[0] = rows / kv;
    shape.insert(shape.begin(), kv);
    blocks.push_back(ops::reshape(qkv[i], shape));
  }
  Tensor t = ops::cat(blocks, 1);  // [kv, (g + 2) d, rest...]
  Shape out = q.shape();
  out[0] = kv * (g + 2) * d;
  return ops::reshape(ops::contiguous(t), out);
}

std::vector<Tensor> split_groups(const WeightRule& rule, const Tensor& t) {
  const int64_t kv = rule.kv_heads, g = rule.heads / rule.kv_heads;
  const int64_t d = t.size(0) / (kv * (g + 2));
  Shape grouped = t.shape();
  grouped[0] = (g + 2) * d;
  grouped.insert(grouped.begin(), kv);
  Tensor v = ops::reshape(t, grouped);
  std::vector<Tensor> out;
  const int64_t starts[] = {0, g * d, (g + 1) * d}, lengths[] = {g * d, d, d};
  for (int i = 0; i < 3; ++i) {
    Shape shape = t.shape();
    shape[0] = kv * lengths[i];
    out.push_back(ops::reshape(ops::contiguous(ops::narrow(v, 1, starts[i], lengths[i])), shape));
  }
  return out;
}

Tensor make_parameter(const WeightRule& rule, const std::vector<Tensor>& sources) {
  if (rule.kv_heads > 0) return fuse_groups(rule, sources);
  std::vector<Tensor> parts;
  for (const Tensor& s : sources) parts.push_back(rule.transpose ? ops::transpose(s, 0, 1) : s);
  Tensor t = parts.size() == 1 ? parts[0] : ops::cat(parts, 0);
  if (rule.heads > 0) t = swap_blocks(t, rule.parts, rule.heads);
  return t;
}

// Drops the pages of a checkpoint tensor that is a view of a file mapping once it has been
// copied, so that loading a shard never keeps the whole file resident: the pages are clean
// (read-only use of a private mapping) and are read again from the file if touched.
void release_pages(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || t.storage()->allocator != nullptr) return;
  static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.storage()->data);
  const uintptr_t end = begin + t.storage()->nbytes;
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

// dst <- src in blocks of rows, dropping the checkpoint's mapped pages after each block, so
// loading a large tensor keeps at most one block of the file resident beside the parameter.
void copy_releasing(Tensor& dst, const Tensor& src, const std::vector<Tensor>& sources) {
  constexpr int64_t kBlockBytes = 8 << 20;
  const int64_t rows = dst.dim() == 0 ? 1 : dst.size(0);
  const int64_t row_bytes = rows > 0 ? int64_t(dst.nbytes()) / std::max<int64_t>(rows, 1) : 0;
  const int64_t block = std::max<int64_t>(1, kBlockBytes / std::max<int64_t>(row_bytes, 1));
  if (dst.dim() == 0 || rows <= block) {
    dst.copy_from(src);
  } else {
    for (int64_t r = 0; r < rows; r += block) {
      const int64_t n = std::min(block, rows - r);
      Tensor part = ops::narrow(dst, 0, r, n);
      part.copy_from(ops::narrow(src, 0, r, n));
      for (const Tensor& t : sources) release_pages(t);
    }
  }
  for (const Tensor& t : sources) release_pages(t);
}


}  // namespace

LoadReport load_parameters(Module& module, const WeightSource& source, const WeightMap& map,
                           const std::function<void(const ParameterInfo&)>& loaded) {
  autograd::NoGradGuard no_grad;
  // Packed copies would keep the old values (Note [Packed inference weights]): new weights
  // drop them; the caller packs again if it wants.
  unpack_weights(module);
  std::map<std::string, const WeightRule*> by_parameter;
  for (const auto& rule : map.rules) by_parameter[rule.parameter] = &rule;
  auto resolve = [&](const std::string& name) -> std::string {
    for (const auto& prefix : map.source_prefixes)
      if (source.contains(prefix + name)) return prefix + name;
    return "";
  };
  std::vector<std::string> problems;
  std::set<std::string> used;
  LoadReport report;
  for (auto& info : module.parameter_infos()) {
    const std::string& name = info.name;
    Tensor* param = info.tensor;
    auto it = by_parameter.find(name);
    if (it == by_parameter.end()) {
      problems.push_back(str_cat("no rule for parameter ", name));
      continue;
    }
    std::vector<Tensor> tensors;
    for (const auto& s : it->second->sources) {
      std::string found = resolve(s);
      if (found.empty()) {
        problems.push_back(str_cat("missing ", s, " (for ", name, " ", shape_str(info.logical_shape), ")"));
        continue;
      }
      used.insert(found);
      tensors.push_back(source.get(found));
    }
    if (tensors.size() != it->second->sources.size()) continue;
    bool dtype_ok = true;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (is_floating(tensors[i].dtype()) != is_floating(param->dtype())) {
        problems.push_back(str_cat("dtype mismatch for ", name, ": expected ", param->dtype(), ", ",
                                   it->second->sources[i], " is ", tensors[i].dtype()));
        dtype_ok = false;
      }
    }
    if (!dtype_ok) continue;
    std::string shapes;
    for (size_t i = 0; i < tensors.size(); ++i)
      shapes += str_cat(i ? ", " : "", it->second->sources[i], " ", shape_str(tensors[i].shape()));
    Tensor value;
    try {
      value = make_parameter(*it->second, tensors);
    } catch (const Error&) {
      value = Tensor();
    }
    if (!value.defined() || value.shape() != info.logical_shape) {
      problems.push_back(str_cat("shape mismatch for ", name, ": expected ", shape_str(info.logical_shape),
                                 ", checkpoint has ", shapes));
      continue;
    }
    Tensor dst = *param;
    if (info.partly_replicated()) {  // this rank's rows (Note [Partly replicated parameters])
      int64_t at = 0;
      for (const TpRows& range : info.rows[size_t(info.tp_rank)]) {
        ops::narrow(*param, 0, at, range.length)
            .copy_from(ops::narrow(value, 0, range.start, range.length));
        at += range.length;
      }
      ++report.loaded;
      if (loaded) loaded(info);
      continue;
    }
    if (info.split_dim >= 0) {  // this rank's block (a view: only its bytes are read)
      const int d = info.split_dim;
      const int64_t part = param->size(d), start = info.tp_rank * part;
      const int64_t length = std::clamp<int64_t>(info.logical_shape[d] - start, 0, part);
      if (length < part) {  // the padded tail of an uneven split is zero
        Tensor tail = ops::narrow(*param, d, length, part - length);
        tail.copy_from(Tensor::zeros(tail.shape(), tail.dtype()));
      }
      dst = ops::narrow(*param, d, 0, length);
      value = ops::narrow(value, d, start, length);
    }
    copy_releasing(dst, value, tensors);
    ++report.loaded;
    if (loaded) loaded(info);
  }
  if (!problems.empty()) {
    std::string message = str_cat("cannot load ", source.path(), ": ", problems.size(), " problem",
                                  problems.size() > 1 ? "s" : "", ":");
    for (const auto& p : problems) message += "\n  " + p;
    throw Error(ErrorKind::corrupt_input, message);
  }
  for (const auto& name : source.names()) {
    if (used.count(name)) continue;
    bool skip = false;
    for (const auto& suffix : map.ignored) skip = skip || ends_with(name, suffix);
    if (!skip) report.unexpected.push_back(name);
  }
  if (!report.unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < report.unexpected.size() && i < 8; ++i)
      list += str_cat(i ? ", " : "", report.unexpected[i]);
    logger("models")->warn("{}: {} unused tensor(s) in the checkpoint: {}{}", source.path(),
                           report.unexpected.size(), list, report.unexpected.size() > 8 ? ", ..." : "");
  }
  return report;
}

checkpoint::NamedTensors export_parameters(Module& module, const WeightMap& map) {
  autograd::NoGradGuard no_grad;
  std::map<std::string, const WeightRule*> by_parameter;
  for (const auto& rule : map.rules) by_parameter[rule.parameter] = &rule;
  const std::string prefix = map.source_prefixes.empty() ? "" : map.source_prefixes[0];
  checkpoint::NamedTensors out;
  for (auto& info : module.parameter_infos()) {
    LIBAI_CHECK_KIND(Unsupported, !info.split(), "export: parameter ",
                     info.name, " is split over ", info.tp_size,
                     " tensor-parallel ranks; export from a model loaded on one device");
    const std::string& name = info.name;
    Tensor* param = info.tensor;
    auto it = by_parameter.find(name);
    LIBAI_CHECK(it != by_parameter.end(), "export: no rule for parameter ", name);
    const WeightRule& rule = *it->second;
    Tensor t = param->detach();
    if (rule.heads > 0 && rule.kv_heads == 0) t = swap_blocks(t, rule.heads, rule.parts);
    auto pieces = rule.kv_heads > 0            ? split_groups(rule, t)
                  : rule.sources.size() == 1 ? std::vector<Tensor>{t}
                                             : ops::chunk(t, int64_t(rule.sources.size()), 0);
    for (size_t i = 0; i < rule.sources.size(); ++i) {
      Tensor p = rule.transpose ? ops::transpose(pieces[i], 0, 1) : pieces[i];
      out.emplace_back(prefix + rule.sources[i], ops::contiguous(p).clone_raw());
    }
  }
  return out;
}

}  // namespace libai::models
