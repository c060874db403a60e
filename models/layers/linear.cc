#include "models/layers/linear.h"

#include <algorithm>

#include "models/training_mode.h"
#include "ops/collective.h"
#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models {

// Note [Autocast]
// Under TrainingMode::autocast = bf16 or f16, a product whose parameters are f32 casts its
// input, weight and bias to the 16-bit dtype (ops::cast: the backward converts gradients
// back, so f32 parameters get f32 gradients), multiplies in 16 bits with an f32 accumulator,
// rounds the result to 16 bits as torch.autocast does, and casts it back to f32. Everything
// else (residual stream, norms, activations, softmax, losses) stays f32: numerically what
// torch's type promotion of the 16-bit product with an f32 residual gives. (torch.autocast
// runs activations such as GELU in 16 bits too; here they run in f32 on the rounded product.)
Tensor autocast_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType compute = training_mode().autocast;
  const bool cast = (compute == DType::bf16 || compute == DType::f16) &&
                    weight.dtype() == DType::f32 && x.dtype() == DType::f32;
  if (!cast) return ops::linear(x, weight, bias);
  Tensor y = ops::linear(ops::cast(x, compute), ops::cast(weight, compute),
                         bias.defined() ? ops::cast(bias, compute) : Tensor());
  return ops::cast(y, DType::f32);
}

Linear::Linear(const LayerContext& ctx, int64_t in_features, int64_t out_features, bool bias,
               Parallel parallel)
    : parallel_(parallel),
      tp_(ctx.tp_size() > 1 ? ctx.tp : nullptr),
      weight_(add_parameter("weight", {out_features, in_features}, ctx,
                            parallel == Parallel::column ? 0
                            : parallel == Parallel::row  ? 1
                                                         : -1)) {
  if (bias)
    bias_ = &add_parameter("bias", {out_features}, ctx, parallel == Parallel::column ? 0 : -1);
}

Linear::Linear(const LayerContext& ctx, int64_t in_features, int64_t out_features, bool bias,
               const ReplicatedRows& rows)
    : parallel_(Parallel::column),
      tp_(ctx.tp_size() > 1 ? ctx.tp : nullptr),
      weight_(add_parameter("weight", {out_features, in_features}, ctx, rows.rows)),
      shared_(rows) {
  if (bias) bias_ = &add_parameter("bias", {out_features}, ctx, rows.rows);
  shared_.rows.clear();  // kept by the parameters' infos
  if (shared_.group && shared_.group->size() == 1) shared_.group = nullptr;
}

// Each rank's product with the shared rows gives the gradient of its own queries only; the
// copies' gradients summed over the ranks sharing them are the whole model's. The sum goes on
// the weight, not on the product's output: the input's gradient (all-reduced over tp by
// copy_to_group) must count each rank's share once.
Tensor Linear::with_shared_grad(const Tensor& t) const {
  if (!shared_.group || !t.requires_grad() || !autograd::grad_enabled()) return t;
  const int64_t n = t.size(0), s = shared_.shared_start, len = shared_.shared_length;
  std::vector<Tensor> parts;
  if (s > 0) parts.push_back(ops::narrow(t, 0, 0, s));
  parts.push_back(ops::copy_to_group(ops::narrow(t, 0, s, len), shared_.group));
  if (s + len < n) parts.push_back(ops::narrow(t, 0, s + len, n - s - len));
  return parts.size() == 1 ? parts[0] : ops::cat(parts, 0);
}

namespace {

// The op the packed kernel fuses for `act`, if it fuses it (quick_gelu is no single op).
std::optional<ops::UnaryOp> fused_op(Activation act) {
  std::optional<ops::UnaryOp> op;
  switch (act) {
    case Activation::gelu: op = ops::UnaryOp::gelu_erf; break;
    case Activation::gelu_tanh: op = ops::UnaryOp::gelu_tanh; break;
    case Activation::relu: op = ops::UnaryOp::relu; break;
    case Activation::silu: op = ops::UnaryOp::silu; break;
    case Activation::tanh: op = ops::UnaryOp::tanh; break;
    case Activation::quick_gelu: break;
  }
  return op && ops::fusable(*op) ? op : std::nullopt;
}

bool needs_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

// Whether a product by a packed copy of `weight` may stand in for ops::linear here: nothing
// needs a gradient, no autocast, and the weight is still the tensor that was packed. A single
// row (one sequence decoding) reads the whole weight for one row of output either way, at the
// memory's rate; OpenBLAS's gemv on the f32 weight as stored measured a few percent faster
// there than f32 panels (bench/RESULTS.md, issue 19), so it keeps the ordinary path; bf16
// panels are half the bytes, and take single rows too.
bool packed_applies(const ops::PackedWeight& packed, const Tensor& weight, const Tensor* bias,
                    const Tensor& x, const Tensor& residual, bool released = false) {
  if (!packed.defined() || (!released && packed.source() != weight.data_ptr())) return false;
  if (x.dtype() != DType::f32 || !x.device().is_cpu() || x.dim() == 0) return false;
  if (packed.dtype() == DType::f32 && !packed.quantized() && x.numel() <= x.size(-1))
    return false;  // one row
  const DType autocast = training_mode().autocast;
  if (autocast == DType::bf16 || autocast == DType::f16) return false;
  return !autograd::grad_enabled() ||
         !(needs_grad(x) || needs_grad(weight) || (bias && needs_grad(*bias)) ||
           needs_grad(residual));
}

// The weight's values replaced by the nearest bf16 ones (Note [Packed inference weights]).
void round_to_bf16(Tensor& weight) {
  autograd::NoGradGuard no_grad;
  weight.copy_from(ops::cast(ops::cast(weight, DType::bf16), DType::f32));
}

// ops::pack_weight refuses other dtypes (before any rounding: only bf16 rounds).
ops::PackedWeight pack_as(Tensor& weight, DType dtype) {
  if (dtype == DType::bf16) round_to_bf16(weight);
  return ops::pack_weight(weight, dtype);
}

}  // namespace

bool Linear::pack(DType dtype) {
  check_not_released("pack");
  if (!ops::packable(weight_)) return false;
  packed_ = pack_as(weight_, dtype);
  return true;
}

bool Linear::quantize(const ops::QuantSpec& spec, bool replace_values) {
  check_not_released("quantize");
  if (!ops::packable(weight_)) return false;
  // A row-parallel rank holds a block of the inputs: its q4 groups must be whole ones, so that
  // the split quantizes as one device does (Note [Quantized tensor parallelism]).
  if (spec.kind == ops::Quantization::q4 && parallel_ == Parallel::row && tp_) {
    const int64_t local = weight_.size(1), whole = local * tp_->size();
    LIBAI_CHECK_KIND(InvalidArgument, local % spec.group == 0, "q4 groups of ", spec.group,
                     " do not split over ", tp_->size(), " tensor-parallel ranks: each holds ",
                     local, " of the ", whole, " inputs (a multiple of the group is needed)");
  }
  packed_ = ops::pack_weight(weight_, spec);
  if (packed_.quantized() && replace_values) {
    autograd::NoGradGuard no_grad;
    weight_.copy_from(ops::dequantized(packed_));  // in place: the copy's source stays valid
  }
  return true;
}

// Note [Quantized tensor parallelism]
void Linear::install_quantized(const ops::QuantSpec& spec, const ops::QuantizedTensors& t,
                               const std::string& what) {
  check_not_released("install a quantized copy");
  packed_ = ops::pack_quantized(weight_, spec, t, what);
}

// Row-parallel products under tensor parallelism sum partial products first: they keep the
// ordinary order (the bias and the rest after the all-reduce). f32 and bf16 copies leave the
// partial product to the ordinary path; a quantized copy computes it (the rank's block of the
// inputs by its block of the quantized weight), then the all-reduce and the rest follow.
// Column-parallel ranks hold whole rows, quantized as one device quantizes them. Row-parallel
// ranks hold a block of each row: q4 groups must not straddle ranks (Linear::quantize refuses
// a split that is not a multiple of the group), and then every group is the one device's; an
// int8 scale covers the rank's block of the row (max |w| over it), not the whole row, so
// row-parallel int8 weights differ from one device's within the quantization step.
bool Linear::use_packed(const Tensor& x, const Tensor& residual) const {
  return (parallel_ != Parallel::row || !tp_) &&
         packed_applies(packed_, weight_, bias_, x, residual, released_);
}

bool Linear::use_quantized_partial(const Tensor& x) const {
  return parallel_ == Parallel::row && tp_ && packed_.quantized() &&
         packed_applies(packed_, weight_, bias_, x, Tensor(), released_);
}

// Note [Released weights]
// A quantized layer of a model loaded only to run forward need not keep its f32 weight: the
// quantized copy is what every packed product reads, and decoding a 1.1 B Llama from Q4_0
// otherwise holds 4.4 GB of f32 beside 0.6 GB of q4 (bench/RESULTS.md). A bf16-packed layer
// likewise (its panels take single rows too), but for a row-parallel rank's, whose partial
// product runs unpacked; so a bf16 stage holds half of f32's bytes, as the planner prices it
// (Note [Precision per pipeline stage] in schedule/precision.h). release_weight()
// puts a one-element zero viewed at the weight's shape (stride 0) in the parameter's place, so
// shapes and names stay; from then on a call the packed copy cannot serve (gradients,
// autocast, inputs that are not f32 on the CPU), packing again, or saving the parameters is an
// error saying why, never a product by the placeholder. Embedding tables are kept (lookups
// read them), but for an untied head (serve_as_output(lookups = false)), never looked up.
namespace {

// A one-element zero viewed at the weight's shape in its place; the bytes freed.
int64_t replace_by_placeholder(Tensor& weight) {
  const int64_t bytes = weight.numel() * int64_t(dtype_size(weight.dtype()));
  const Shape shape = weight.shape();
  weight = Tensor::zeros({1}, weight.dtype()).as_strided(shape, Shape(shape.size(), 0), 0);
  return bytes;
}

// A bf16 copy serves every f32 CPU forward but a row-parallel rank's (its partial product runs
// unpacked; Note [Quantized tensor parallelism]), so only a quantized one releases there.
bool serves_every_forward(const ops::PackedWeight& packed, bool row_parallel) {
  return packed.quantized() || (packed.defined() && packed.dtype() == DType::bf16 && !row_parallel);
}

}  // namespace

int64_t Linear::release_weight() {
  if (released_ || !serves_every_forward(packed_, row_parallel())) return 0;
  released_ = true;
  return replace_by_placeholder(weight_);
}

int64_t Embedding::release_weight() {
  if (released_ || !output_only() || !serves_every_forward(packed_, false)) return 0;
  released_ = true;
  return replace_by_placeholder(weight_);
}

void Linear::check_not_released(const char* what) const {
  LIBAI_CHECK_KIND(Unsupported, !released_, "linear layer: cannot ", what, ": its f32 weight was "
                   "released once packed (LoadOptions::keep_f32_weights false; Note "
                   "[Released weights]): this model runs forward only, without gradients or "
                   "autocast, on f32 CPU inputs");
}

Tensor Linear::quantized_row_parallel(const Tensor& x) const {
  Tensor y = ops::reduce_from_group(ops::linear_packed(x, packed_, Tensor()), tp_);
  return bias_ ? y + *bias_ : y;
}

Tensor Linear::forward(const Tensor& x) const {
  if (use_packed(x, Tensor())) return ops::linear_packed(x, packed_, bias_ ? *bias_ : Tensor());
  if (use_quantized_partial(x)) return quantized_row_parallel(x);
  check_not_released("run this product");
  return forward_unpacked(x);
}

Tensor Linear::forward(const Tensor& x, std::optional<Activation> act,
                       const Tensor& residual) const {
  if (use_quantized_partial(x)) {
    Tensor y = quantized_row_parallel(x);
    if (act) y = apply_activation(*act, y);
    return residual.defined() ? residual + y : y;
  }
  if (use_packed(x, residual)) {
    const Tensor bias = bias_ ? *bias_ : Tensor();
    const std::optional<ops::UnaryOp> op = act ? fused_op(*act) : std::nullopt;
    if (!act || op) return ops::linear_packed(x, packed_, bias, {.act = op, .residual = residual});
    Tensor y = apply_activation(*act, ops::linear_packed(x, packed_, bias));
    return residual.defined() ? residual + y : y;
  }
  check_not_released("run this product");
  Tensor y = forward_unpacked(x);
  if (act) y = apply_activation(*act, y);
  return residual.defined() ? residual + y : y;
}

Tensor Linear::forward_unpacked(const Tensor& x) const {
  switch (parallel_) {
    case Parallel::column:
      if (shared_.group)
        return autocast_linear(ops::copy_to_group(x, tp_), with_shared_grad(weight_),
                               bias_ ? with_shared_grad(*bias_) : Tensor());
      return autocast_linear(ops::copy_to_group(x, tp_), weight_, bias_ ? *bias_ : Tensor());
    case Parallel::row: {
      // The partial products round to 16 bits under autocast, then sum in f32.
      Tensor y = ops::reduce_from_group(autocast_linear(x, weight_, Tensor()), tp_);
      return bias_ ? y + *bias_ : y;
    }
    default: return autocast_linear(x, weight_, bias_ ? *bias_ : Tensor());
  }
}

Embedding::Embedding(const LayerContext& ctx, int64_t count, int64_t dim,
                     EmbeddingParallel parallel)
    : parallel_(parallel),
      tp_(ctx.tp_size() > 1 ? ctx.tp : nullptr),
      count_(count),
      weight_(add_parameter("weight", {count, dim}, ctx,
                            parallel == EmbeddingParallel::vocab ? 0
                            : parallel == EmbeddingParallel::dim ? 1
                                                                 : -1,
                            /*pad_uneven=*/parallel == EmbeddingParallel::vocab)) {
  if (parallel == EmbeddingParallel::vocab) first_row_ = ctx.tp_rank() * weight_.size(0);
}

Tensor Embedding::forward(const Tensor& ids) const {
  LIBAI_CHECK_KIND(Unsupported, !released_, "embedding: an output-only table whose f32 values "
                   "were released once packed (Note [Released weights]) has no rows to look up");
  if (parallel_ != EmbeddingParallel::vocab || !tp_) return ops::embedding(weight_, ids);
  // Ids outside this rank's rows look up row 0 and are zeroed before the all-reduce.
  const int64_t rows = weight_.size(0);
  auto all = ids.to_vector<int64_t>();
  std::vector<int64_t> local(all.size());
  std::vector<float> keep(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    LIBAI_CHECK(all[i] >= 0 && all[i] < count_, "embedding: id ", all[i], " at position ", i,
                " is outside the vocabulary of ", count_);
    const bool mine = all[i] >= first_row_ && all[i] < first_row_ + rows;  // never a pad row
    local[i] = mine ? all[i] - first_row_ : 0;
    keep[i] = mine ? 1.0f : 0.0f;
  }
  Shape mask_shape = ids.shape();
  mask_shape.push_back(1);
  Tensor mask = Tensor::empty(mask_shape, weight_.dtype());
  mask.copy_from(Tensor::from_vector(keep, mask_shape));
  Tensor partial = ops::embedding(weight_, Tensor::from_vector(local, ids.shape())) * mask;
  return ops::reduce_from_group(partial, tp_);
}

bool Embedding::pack(DType dtype) {
  LIBAI_CHECK_KIND(Unsupported, !released_, "embedding: cannot pack a released table");
  if (!output_ || !ops::packable(weight_)) return false;
  packed_ = pack_as(weight_, dtype);
  return true;
}

bool Embedding::quantize(const ops::QuantSpec& spec) {
  LIBAI_CHECK_KIND(Unsupported, !released_, "embedding: cannot quantize a released table");
  if (!output_ || !ops::packable(weight_)) return false;
  packed_ = ops::pack_weight(weight_, spec);
  return true;
}

void Embedding::install_quantized(const ops::QuantSpec& spec, const ops::QuantizedTensors& t,
                                  const std::string& what) {
  packed_ = ops::pack_quantized(weight_, spec, t, what);
}

int pack_for_inference(Module& root, DType dtype) {
  return pack_for_inference(root, PackSpec{.dtype = dtype});
}

bool keep_names(const std::string& keep, const std::string& name) {
  return name == keep || (name.size() > keep.size() && name.compare(0, keep.size(), keep) == 0 &&
                          name[keep.size()] == '.');
}

namespace {

bool kept(const std::string& name, bool output, const std::vector<std::string>& keep) {
  return std::any_of(keep.begin(), keep.end(), [&](const std::string& k) {
    return (k == "output" && output) || keep_names(k, name);
  });
}

}  // namespace

// Note [Which layers are quantized]
// Every Linear and every output table (the LM head's products) under the root, unless `keep`
// names it. Never quantized: embedding lookups (they read the exact table, tied or not), norms,
// biases, and products outside Linear (attention's). The head is a third of GPT-2 small's
// weights and as much of a decoded token's bytes, so it is quantized by default; what keeping
// it (keep: [output]) or the first and last layers would cost and gain is not measured yet.
bool pack_module(const std::string& name, Module& module, const PackSpec& spec) {
  auto* linear = dynamic_cast<Linear*>(&module);
  auto* table = dynamic_cast<Embedding*>(&module);
  if (!linear && !table) return false;
  const bool quantize = spec.quantize.kind != ops::Quantization::none &&
                        !kept(name, table && table->serves_as_output(), spec.keep);
  // Releasing: only a copy that serves every forward (quantized, or bf16 off a row-parallel
  // rank), which is released next; the rest is left for the pack after the load.
  if (spec.releasing && !quantize &&
      !(spec.dtype == DType::bf16 && !(linear && linear->row_parallel())))
    return false;
  try {
    if (linear)
      return quantize ? linear->quantize(spec.quantize, !spec.releasing) : linear->pack(spec.dtype);
    return quantize ? table->quantize(spec.quantize) : table->pack(spec.dtype);
  } catch (const InvalidArgument& e) {
    LIBAI_THROW(InvalidArgument, name.empty() ? std::string("the model") : name, ": ", e.what());
  }
}

int pack_for_inference(Module& root, const PackSpec& spec) {
  int packed = 0;
  for (auto& [name, module] : root.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(module);
    auto* table = dynamic_cast<Embedding*>(module);
    if ((linear && linear->released()) || (table && table->released())) continue;
    packed += pack_module(name, *module, spec);
  }
  return packed;
}

PackedBytes packed_bytes(Module& root) {
  PackedBytes out;
  for (auto& [name, module] : root.named_modules()) {
    const ops::PackedWeight* w = nullptr;
    if (auto* linear = dynamic_cast<Linear*>(module)) w = &linear->packed_weight();
    if (auto* table = dynamic_cast<Embedding*>(module)) w = &table->packed();
    if (!w || !w->defined()) continue;
    (w->quantized() ? out.quantized : w->dtype() == DType::bf16 ? out.bf16 : out.f32) += w->bytes();
  }
  return out;
}

int64_t release_packed_weights(Module& root) {
  int64_t bytes = 0;
  for (auto& [name, module] : root.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(module)) bytes += linear->release_weight();
    if (auto* table = dynamic_cast<Embedding*>(module)) bytes += table->release_weight();
  }
  return bytes;
}

bool has_released_weights(Module& root) {
  for (auto& [name, module] : root.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(module); linear && linear->released()) return true;
    if (auto* table = dynamic_cast<Embedding*>(module); table && table->released()) return true;
  }
  return false;
}

void unpack_weights(Module& root) {
  for (auto& [name, module] : root.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(module)) linear->unpack();
    if (auto* table = dynamic_cast<Embedding*>(module)) table->unpack();
  }
}

Norm::Norm(const LayerContext& ctx, ops::NormKind kind, int64_t dim, double eps, bool bias)
    : kind_(kind), eps_(eps), weight_(add_parameter("weight", {dim}, ctx)) {
  if (bias && kind == ops::NormKind::layer) bias_ = &add_parameter("bias", {dim}, ctx);
}

Tensor Norm::forward(const Tensor& x) const {
  if (kind_ == ops::NormKind::rms) return ops::rms_norm(x, weight_, eps_);
  return ops::layer_norm(x, weight_, bias_ ? *bias_ : Tensor(), eps_);
}

Activation parse_activation(const std::string& name, const std::string& where) {
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return Activation::gelu_tanh;
  if (name == "relu") return Activation::relu;
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "tanh") return Activation::tanh;
  if (name == "quick_gelu") return Activation::quick_gelu;
  LIBAI_CHECK(false, where, ": unsupported activation \"", name,
              "\" (supported: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, "
              "tanh, quick_gelu)");
  return Activation::gelu;
}

Tensor apply_activation(Activation act, const Tensor& x) {
  switch (act) {
    case Activation::gelu: return ops::gelu(x);
    case Activation::gelu_tanh: return ops::gelu(x, ops::GeluApprox::tanh);
    case Activation::relu: return ops::relu(x);
    case Activation::silu: return ops::silu(x);
    case Activation::tanh: return ops::tanh(x);
    case Activation::quick_gelu: return ops::mul(x, ops::sigmoid(ops::scale(x, 1.702)));
  }
  return x;
}

}  // namespace libai::models

namespace libai::models {

Tensor vocab_parallel_logits_shard(const Tensor& h, const Embedding& table, const Tensor& bias_shard) {
  auto& weight = const_cast<Embedding&>(table).weight();
  if (packed_applies(table.packed(), weight, bias_shard.defined() ? &bias_shard : nullptr, h,
                     Tensor(), table.released()))
    return ops::linear_packed(h, table.packed(), bias_shard);  // copy_to_group: identity forward
  LIBAI_CHECK_KIND(Unsupported, !table.released(), "LM head: its f32 table was released after "
                   "quantizing (Note [Released weights]): this model runs forward only, without "
                   "gradients or autocast, on f32 CPU inputs");
  return autocast_linear(ops::copy_to_group(h, table.group()), weight, bias_shard);  // [..., rows]
}

Tensor gather_vocab_logits(const Tensor& shard, const Embedding& table) {
  const auto& tp = table.group();
  if (!tp) return shard;
  Tensor all = ops::gather_last_dim(shard, tp);  // [..., tp * rows], padded past count
  return all.size(-1) == table.count() ? all : ops::narrow(all, -1, 0, table.count());
}

Tensor vocab_parallel_logits(const Tensor& h, const Embedding& table, const Tensor& bias_shard) {
  return gather_vocab_logits(vocab_parallel_logits_shard(h, table, bias_shard), table);
}

}  // namespace libai::models
