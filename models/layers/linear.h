// The basic parameterised layers: Linear, Embedding, LayerNorm, RMSNorm, and the activation
// functions that configs name ("gelu", "gelu_new", "relu", "silu", ...).
//
//   Linear proj(ctx, /*in=*/768, /*out=*/3072);          // weight [out, in] (torch layout), bias
//   [out] Tensor y = proj.forward(x);                          // [..., 768] -> [..., 3072]
//   Embedding wte(ctx, vocab, 768);  Tensor h = wte.forward(ids);   // ids [b, s] -> [b, s, 768]
//   Norm ln(ctx, NormKind::layer, 768, 1e-5);  Tensor n = ln.forward(h);
//   Tensor a = apply_activation(Activation::gelu_tanh, h);
#pragma once

#include <optional>
#include <string>

#include "models/module.h"
#include "ops/norm.h"
#include "ops/packed_linear.h"

namespace libai::models {

// How a layer is split over the tensor-parallel group (Megatron's patterns):
//   column: the output features are split; the input is the whole activation (its gradient
//           is all-reduced); the output is this rank's slice of the features.
//   row:    the input features are split (the input is a column-parallel layer's output); the
//           partial products are all-reduced, then the (whole) bias is added.
enum class Parallel { none, column, row };

// ops::linear under the thread's TrainingMode::autocast (Note [Autocast] in linear.cc): with
// autocast bf16 / f16 and f32 operands, the product runs in 16 bits and returns f32; otherwise
// it is ops::linear. Every Linear and vocab_parallel_logits go through it.
Tensor autocast_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// A column-parallel layer whose ranks hold given rows of the whole rather than equal blocks,
// some rows held by several ranks (Note [Partly replicated parameters] in module.h).
struct ReplicatedRows {
  std::vector<std::vector<TpRows>> rows;  // every tp rank's output rows of the whole
  // This rank's block rows [shared_start, shared_start + shared_length) are held by the ranks
  // of `group` too: their weight (and bias) gradients are summed over it.
  int64_t shared_start = 0, shared_length = 0;
  std::shared_ptr<comm::Communicator> group;
};

enum class Activation { gelu, gelu_tanh, relu, silu, tanh, quick_gelu };

// Note [Packed inference weights]
// pack() copies a CPU f32 weight into the packed GEMM's layout (ops/packed_linear.h); from
// then on forward multiplies by that copy whenever nothing needs a gradient (autograd off, or
// neither input nor parameters require one) and no autocast applies, and fuses the
// activation and the residual add it is given into the product. Other calls take the
// ordinary path, so packing never changes what training computes. The copy does not follow
// later writes into the weight: models are packed after their weights are loaded (LoadOptions
// ::pack_weights, pack_for_inference), load_parameters drops the copies of the module it loads
// into, and unpack() drops one. A single row (one sequence decoding) keeps OpenBLAS's gemv on
// the weight as stored, as fast there. It costs one more copy of the weight's memory.
//
// pack(DType::bf16) first rounds the f32 weight in place to bf16 values, then packs those as
// bf16: the products read half the bytes (decoding is bound by reading the weights), and every
// path, packed or not, single rows included, multiplies by the same rounded weight in f32,
// as a float32 model holding bf16 weights would (transformers' model.to(bfloat16) then
// .to(float32)). Single rows take the packed kernel too: it is their half of the bytes.
//
// quantize(spec) does the same with an int8 or 4-bit copy (ops/packed_linear.h): the weight is
// replaced in place by the dequantised values, so every path multiplies by the same levels;
// under int8-dynamic the packed products of several rows also quantize their input rows. An
// output table (Embedding) keeps its exact values for lookups: only the head's products read
// the quantized copy. Note [Which layers are quantized] in linear.cc.
class Linear : public Module {
 public:
  Linear(const LayerContext& ctx, int64_t in_features, int64_t out_features, bool bias = true,
         Parallel parallel = Parallel::none);
  // Column-parallel over `rows` (out_features is the whole's).
  Linear(const LayerContext& ctx, int64_t in_features, int64_t out_features, bool bias,
         const ReplicatedRows& rows);
  Tensor forward(const Tensor& x) const;
  // act(x wᵀ + b) + residual: one fused product when packed, else the ops one after another.
  Tensor forward(const Tensor& x, std::optional<Activation> act, const Tensor& residual) const;
  Tensor& weight() { return weight_; }
  Tensor* bias() { return bias_; }
  // Note [Packed inference weights]. pack() returns false (and packs nothing) for a weight
  // that is not a CPU f32 matrix; dtype: of the copy, f32 or bf16 (rounds the weight).
  bool pack(DType dtype = DType::f32);
  // The quantized copy (Note [Packed inference weights]); false for a weight that is not a CPU
  // f32 matrix. InvalidArgument for a q4 group that does not divide the input width.
  // `replace_values` false: the f32 weight keeps its values, for a caller that releases it
  // at once (Note [Streaming packed loads]).
  bool quantize(const ops::QuantSpec& spec, bool replace_values = true);
  // The quantized copy from a checkpoint's stored values (Note [Quantized checkpoints] in
  // ops/packed_linear.h), the weight already holding their dequantisation: nothing is
  // requantized. `what` names the tensor in errors.
  void install_quantized(const ops::QuantSpec& spec, const ops::QuantizedTensors& t,
                         const std::string& what);
  void unpack() { packed_ = ops::PackedWeight(); }
  bool packed() const { return packed_.defined(); }
  const ops::PackedWeight& packed_weight() const { return packed_; }
  // Note [Released weights] in linear.cc: drops the f32 weight of a quantized or bf16-packed
  // layer (the bytes freed; 0 when its packed copy does not serve every forward, or already
  // released).
  int64_t release_weight();
  bool released() const { return released_; }
  Parallel parallel() const { return parallel_; }
  // A row-parallel rank of a tensor-parallel group (its products are partial sums).
  bool row_parallel() const { return parallel_ == Parallel::row && tp_ != nullptr; }

 private:
  // t (the weight or the bias) whose shared rows' gradient is summed over shared_.group.
  Tensor with_shared_grad(const Tensor& t) const;
  Tensor forward_unpacked(const Tensor& x) const;
  bool use_packed(const Tensor& x, const Tensor& residual) const;
  // Note [Quantized tensor parallelism] in linear.cc.
  bool use_quantized_partial(const Tensor& x) const;
  Tensor quantized_row_parallel(const Tensor& x) const;
  void check_not_released(const char* what) const;

  Parallel parallel_;
  std::shared_ptr<comm::Communicator> tp_;
  Tensor& weight_;  // [out, in] (this rank's block)
  Tensor* bias_ = nullptr;
  ReplicatedRows shared_;  // group null: no rows shared
  ops::PackedWeight packed_;
  bool released_ = false;
};

// An embedding table, whole on every rank, or split over the tensor-parallel group:
//   vocab: rows split (Megatron's VocabParallelEmbedding): each rank looks up the ids in its
//          range, zeros the others, and the partial results are all-reduced;
//   dim:   columns split (T5's relative-position bias by head): the output is this rank's
//          slice of the last dim.
enum class EmbeddingParallel { none, vocab, dim };

class Embedding : public Module {
 public:
  Embedding(const LayerContext& ctx, int64_t count, int64_t dim,
            EmbeddingParallel parallel = EmbeddingParallel::none);
  // ids [...] (i64/i32) -> [..., dim] (or [..., dim / tp] when split by dim)
  Tensor forward(const Tensor& ids) const;
  Tensor& weight() { return weight_; }
  int64_t count() const { return count_; }  // the whole vocabulary
  // The first row this rank holds (vocab-parallel), else 0.
  int64_t first_row() const { return first_row_; }
  // The tensor-parallel group the table is split over (null when whole).
  const std::shared_ptr<comm::Communicator>& group() const { return tp_; }
  // Marks the table as an output projection too (an LM head, tied or not, through
  // vocab_parallel_logits): the models mark their heads. lookups false: an untied head, whose
  // rows are never looked up (its f32 values may then be released once quantized).
  void serve_as_output(bool lookups = true) {
    output_ = true;
    output_only_ = !lookups;
  }
  bool serves_as_output() const { return output_; }
  bool output_only() const { return output_ && output_only_; }
  // Packs an output table for the products of vocab_parallel_logits (Note [Packed inference
  // weights]); false, packing nothing, for a table that is not an output projection (nobody
  // would multiply by the copy) or not CPU f32. Lookups always read the table itself (with
  // dtype bf16, rounded in place like a Linear's weight: a tied table's lookups see the same
  // rounded values).
  bool pack(DType dtype = DType::f32);
  // A quantized copy for the head's products; lookups keep reading the exact table.
  bool quantize(const ops::QuantSpec& spec);
  void install_quantized(const ops::QuantSpec& spec, const ops::QuantizedTensors& t,
                         const std::string& what);
  void unpack() { packed_ = ops::PackedWeight(); }
  const ops::PackedWeight& packed() const { return packed_; }
  // Note [Released weights]: an output-only table's f32 values, once quantized or bf16-packed.
  int64_t release_weight();
  bool released() const { return released_; }

 private:
  EmbeddingParallel parallel_;
  std::shared_ptr<comm::Communicator> tp_;
  int64_t count_, first_row_ = 0;
  Tensor& weight_;  // [count, dim] (this rank's block)
  bool output_ = false, output_only_ = false, released_ = false;
  ops::PackedWeight packed_;
};

// LayerNorm (weight and optional bias) or RMSNorm (weight only) over the last dim.
class Norm : public Module {
 public:
  Norm(const LayerContext& ctx, ops::NormKind kind, int64_t dim, double eps, bool bias = true);
  Tensor forward(const Tensor& x) const;

 private:
  ops::NormKind kind_;
  double eps_;
  Tensor& weight_;
  Tensor* bias_ = nullptr;
};

// Logits over the whole vocabulary from a (possibly vocab-parallel) table used as the output
// projection (tied LM heads): h [..., dim] -> [..., count]. Each rank multiplies by its rows;
// the slices are gathered and the padding rows dropped. bias_shard: this rank's rows of the
// bias (split like the table, padded), or undefined.
Tensor vocab_parallel_logits(const Tensor& h, const Embedding& table, const Tensor& bias_shard = Tensor());
// The two halves of it: this rank's product [..., rows] (padding rows included; h's gradient
// is all-reduced over the group), and the gather of those shards into [..., count].
Tensor vocab_parallel_logits_shard(const Tensor& h, const Embedding& table,
                                   const Tensor& bias_shard = Tensor());
Tensor gather_vocab_logits(const Tensor& shard, const Embedding& table);

// How pack_for_inference packs: copies of `dtype` (f32 or bf16), or quantized as `quantize`
// says except the modules `keep` names, which get `dtype` copies: a module's name under the
// root ("layers.0", "layers.11.mlp.down"; a name keeps what lies under it too), or "output"
// for the output tables (LM heads, tied or not).
struct PackSpec {
  DType dtype = DType::f32;
  ops::QuantSpec quantize;
  std::vector<std::string> keep;
  // The f32 weights are released right after (Note [Streaming packed loads]): pack_module
  // packs only what that releases (quantized copies, bf16 ones but a row-parallel rank's), and
  // a quantized Linear's weight is not first replaced by its dequantised values.
  bool releasing = false;
};

// Packs every Linear and Embedding under `root` (Note [Packed inference weights]) as `dtype`
// (f32 or bf16); returns how many weights were packed.
// A Linear or table whose f32 weight was released (Note [Released weights]) is packed already
// and skipped.
int pack_for_inference(Module& root, DType dtype = DType::f32);
int pack_for_inference(Module& root, const PackSpec& spec);
// One module as pack_for_inference packs it (`name`: its name under the root, for the keep
// list and errors); whether it packed. A module that is neither Linear nor Embedding: false.
bool pack_module(const std::string& name, Module& module, const PackSpec& spec);
// The name of the weight of the module `name` under a root ("layers.0.mlp.up.weight").
inline std::string weight_name(const std::string& module) {
  return module.empty() ? "weight" : module + ".weight";
}
// Whether a PackSpec::keep entry names the module `name` (equal, or its start up to a dot).
bool keep_names(const std::string& keep, const std::string& name);
// The bytes the packed copies under `root` hold (what products read), by kind.
struct PackedBytes {
  int64_t f32 = 0, bf16 = 0, quantized = 0;
  int64_t total() const { return f32 + bf16 + quantized; }
};
PackedBytes packed_bytes(Module& root);
// Drops every packed copy under `root`.
void unpack_weights(Module& root);
// Note [Released weights]: release_weight() on every quantized or bf16-packed Linear and output
// table under root; the bytes freed. has_released_weights: whether any was released.
int64_t release_packed_weights(Module& root);
bool has_released_weights(Module& root);

// Hugging Face's names: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, tanh,
// quick_gelu. Throws InvalidArgument naming `name` and `where` for anything else.
Activation parse_activation(const std::string& name, const std::string& where);
Tensor apply_activation(Activation act, const Tensor& x);

}  // namespace libai::models
