#include "train/stage_step.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "models/parallel/data_parallel.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/logging.h"
#include "train/grad_clip.h"

namespace libai::train {

// Note [What a stage stashes]
// forward(chunk, mb) keeps, until backward(chunk, mb): the leaves it made of the received
// floating tensors (their .grad is what goes upstream) and the part's outputs with their
// autograd graph (on the last virtual stage: the loss). Under activation checkpointing the
// part's transformer layers run under TrainingMode::activation_checkpoint and keep only their
// inputs (models/layers/transformer_layer.cc): the stash is then the part's input, the layer
// boundaries and the small graph of the embeddings / head, and each layer recomputes during
// backward from its input under the forward's TrainingMode (captured by the checkpoint), so
// dropout masks and numerics are bitwise those of the forward. Recomputing per layer rather
// than the whole part from its input costs one hidden state per layer of memory and nothing
// in compute; it also keeps the one-device reference and the stage computing the same thing.

namespace {

int64_t batch_size_of(const models::TensorMap& batch) {
  for (const char* key : {"input_ids", "pixel_values", "inputs_embeds", "hidden_states"}) {
    auto it = batch.find(key);
    if (it != batch.end() && it->second.dim() >= 1) return it->second.size(0);
  }
  LIBAI_CHECK(!batch.empty() && batch.begin()->second.dim() >= 1,
              "stage step: a micro-batch has no input_ids, pixel_values or hidden_states to take "
              "its size from");
  return batch.begin()->second.size(0);
}

int size_of(const std::shared_ptr<comm::Communicator>& c) { return c ? c->size() : 1; }
int rank_of(const std::shared_ptr<comm::Communicator>& c) { return c ? c->rank() : 0; }

// `root`'s values on every rank of `group` (the others pass anything; the count travels first).
std::vector<double> broadcast_doubles(std::vector<double> values, comm::Communicator& group,
                                      int root) {
  Tensor n = Tensor::full({1}, double(values.size()), DType::f64);
  group.broadcast(n, root);
  values.resize(size_t(n.data<double>()[0]));
  if (values.empty()) return values;
  Tensor t = Tensor::from_vector<double>(values, {int64_t(values.size())});
  group.broadcast(t, root);
  return t.to_vector<double>();
}

}  // namespace

std::vector<ParamGroup> stage_param_groups(const std::vector<models::Model*>& parts,
                                           const ParamGroupOptions& options) {
  std::set<std::string> used;
  std::vector<ParamGroup> merged;
  for (models::Model* part : parts) {
    // Overrides apply to the parts that hold a parameter they name (a short name such as
    // "bias" or a full dotted name); one that names nothing anywhere is an error below.
    std::set<std::string> names;
    for (auto& [name, tensor] : part->named_parameters()) {
      if (!tensor->requires_grad()) continue;
      names.insert(name);
      names.insert(name.substr(name.rfind('.') + 1));
    }
    ParamGroupOptions mine = options;
    mine.overrides.clear();
    for (const auto& [key, values] : options.overrides)
      if (names.contains(key)) {
        mine.overrides.emplace(key, values);
        used.insert(key);
      }
    for (ParamGroup& group : default_param_groups(*part, mine)) {
      auto same = std::find_if(merged.begin(), merged.end(), [&](const ParamGroup& g) {
        return g.base_lr == group.base_lr && g.weight_decay == group.weight_decay;
      });
      if (same == merged.end()) {
        merged.push_back(std::move(group));
        continue;
      }
      same->names.insert(same->names.end(), group.names.begin(), group.names.end());
      same->params.insert(same->params.end(), group.params.begin(), group.params.end());
    }
  }
  for (const auto& [key, values] : options.overrides)
    LIBAI_CHECK(used.contains(key), "optimizer override '", key,
                "' names no parameter that requires grad on this pipeline stage's parts");
  return merged;
}

struct StageStep::Impl {
  struct Stash {
    models::TensorMap leaves;   // received floating tensors, as leaves requiring grad
    models::TensorMap outputs;  // what forward returned, with its graph (not on the last)
    Tensor loss;                // last virtual stage: the micro-batch's loss
    models::TrainingMode mode;
  };

  std::vector<models::Model*> parts;
  Optimizer& optimizer;
  const LrScheduler* schedule;
  TrainStepOptions options;
  StageLayout layout;
  StageGroups groups;
  std::vector<std::vector<models::ParameterInfo>> infos;  // per chunk
  std::vector<models::ParameterInfo> all_params, norm_params;
  std::vector<std::unique_ptr<models::GradientReducer>> reducers;  // per chunk (dp > 1)
  std::unique_ptr<ZeroShards> zero;  // options.zero_stage > 0: owns the update instead
  std::unique_ptr<GradScaler> scaler;
  // Names of the weights tied between the first and last virtual stage, when this rank holds
  // one of them; the tensors are the copies on this rank.
  std::vector<std::pair<std::string, Tensor*>> tied;
  int first_root = 0, last_root = 0;  // world ranks: (dp 0, tp 0) of the first / last stage
  // This rank holds the tied weights' second copy (the last virtual stage's): Note [Each
  // element counted once] counts them on the first stage, and the first stage saves them.
  bool tied_on_last = false;
  std::set<std::string> tied_names;
  std::set<const TensorImpl*> trainable;  // the optimizer's parameters (the rest is frozen)
  std::map<std::pair<int, int>, Stash> stash;
  int64_t step = 0;
  int64_t micro = -1;
  double loss_sum = 0;
  int64_t targets = 0;
  std::map<std::string, double> part_sums;

  Impl(std::vector<models::Model*> p, Optimizer& o, const LrScheduler* s, TrainStepOptions opt,
       StageLayout l, StageGroups g)
      : parts(std::move(p)),
        optimizer(o),
        schedule(s),
        options(std::move(opt)),
        layout(l),
        groups(std::move(g)) {}

  int virtual_stages() const { return layout.pp * layout.num_chunks; }
  int virtual_stage(int chunk) const { return chunk * layout.pp + layout.stage; }
  bool is_first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool is_last(int chunk) const { return virtual_stage(chunk) == virtual_stages() - 1; }

  models::TrainingMode mode_for(int mb) const {
    const int64_t global = micro * options.num_accumulation_steps * layout.dp;
    models::TrainingMode mode;
    mode.training = options.dropout;
    mode.seed = options.seed;
    mode.step = uint64_t(step);
    // Note [Micro-batch order]
    mode.sample_offset = step * global + (int64_t(mb) * layout.dp + layout.dp_rank) * micro;
    mode.activation_checkpoint = options.activation_checkpoint;
    mode.autocast = options.autocast;
    mode.fetch = zero ? zero->fetcher() : nullptr;
    return mode;
  }

  void check_shared_weights();
  void find_tied_weights();
  void sum_tied_gradients();
  StepResult share_result(bool finite, double grad_norm);
};

// Note [Weights shared by middle stages]
// Only a weight held by the first and the last virtual stage is tied (its gradients summed,
// find_tied_weights). A weight that some other pair of virtual stages both hold (a T5 stack's
// relative position bias table when the stack is cut twice, with more than two stages) would
// get no summed gradient: its copies would drift apart with no error. So the stages of one
// slot compare the names they hold over `groups.pp` and refuse such a layout, naming the
// weight and the stages; a cut that keeps each stack on at most two stages (or ties through
// the boundary stages only) trains.
void StageStep::Impl::check_shared_weights() {
  if (virtual_stages() <= 2 || !groups.pp || groups.pp->size() <= 1) return;
  // Each stage's names, with the virtual stage holding them, as character codes.
  std::string mine;
  for (int c = 0; c < layout.num_chunks; ++c)
    for (auto& [name, tensor] : parts[size_t(c)]->named_parameters())
      mine += std::to_string(virtual_stage(c)) + " " + name + "\n";
  const std::vector<double> codes(mine.begin(), mine.end());
  std::map<std::string, std::set<int>> holders;
  for (int root = 0; root < groups.pp->size(); ++root) {
    const std::vector<double> got = broadcast_doubles(
        groups.pp->rank() == root ? codes : std::vector<double>{}, *groups.pp, root);
    const std::string text(got.begin(), got.end());
    for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
         start = end + 1) {
      const std::string line = text.substr(start, end - start);
      const size_t space = line.find(' ');
      holders[line.substr(space + 1)].insert(std::stoi(line.substr(0, space)));
    }
  }
  const std::set<int> boundary{0, virtual_stages() - 1};
  for (const auto& [name, stages] : holders) {
    if (stages.size() <= 1 || stages == boundary) continue;
    std::string list;
    for (int v : stages) list += (list.empty() ? "" : ", ") + std::to_string(v);
    LIBAI_CHECK_KIND(Unsupported, false, "pipeline training: the weight ", name,
                     " is held by virtual stages ", list, " of ", virtual_stages(),
                     "; only a weight of the first and the last stage can be tied across stages "
                     "(Note [Weights shared by middle stages]): cut the layers so that no more "
                     "than two stages hold it (e.g. a T5 stack on one or two stages)");
  }
}

// Weights tied across stages: the names a part of the first virtual stage and a part of the
// last one both hold (GPT-2's embed.weight: the token embedding and the LM head). The two
// ranks exchange their boundary part's names over `groups.tied`, keep the common ones (so
// both sides agree by construction), check the shapes match and start both copies from the
// first stage's values.
void StageStep::Impl::find_tied_weights() {
  const int first_chunk = 0, last_chunk = layout.num_chunks - 1;
  const bool holds_first = is_first(first_chunk), holds_last = is_last(last_chunk);
  if (virtual_stages() == 1 || (!holds_first && !holds_last)) return;
  LIBAI_CHECK(layout.pp > 1, "stage step: interleaving (", layout.num_chunks,
              " chunks) needs at least 2 pipeline stages");
  LIBAI_CHECK(groups.tied && groups.tied->size() == 2, "stage step: stage ", layout.stage,
              " holds the ", holds_first ? "first" : "last",
              " virtual stage and needs StageGroups::tied: the group of the first and last "
              "stage's ranks of its replica and tensor-parallel rank (2 ranks)");
  models::Model* mine = parts[size_t(holds_first ? first_chunk : last_chunk)];
  // Names as doubles (character codes), '\n'-separated; each side broadcasts its own.
  std::string names;
  for (auto& [name, tensor] : mine->named_parameters()) names += name + "\n";
  const std::vector<double> codes(names.begin(), names.end());
  const int me = groups.tied->rank();
  const std::vector<double> from0 =
      broadcast_doubles(me == 0 ? codes : std::vector<double>{}, *groups.tied, 0);
  const std::vector<double> from1 =
      broadcast_doubles(me == 1 ? codes : std::vector<double>{}, *groups.tied, 1);
  const std::vector<double>& other = me == 0 ? from1 : from0;
  const std::string theirs(other.begin(), other.end());
  std::set<std::string> other_names;
  for (size_t start = 0, end; (end = theirs.find('\n', start)) != std::string::npos;
       start = end + 1)
    other_names.insert(theirs.substr(start, end - start));
  for (auto& [name, tensor] : mine->named_parameters())
    if (other_names.contains(name)) tied.emplace_back(name, tensor);
  // Shapes must agree; then the last stage's copies start as the first stage's.
  for (auto& [name, tensor] : tied) {
    const std::vector<double> shape{double(tensor->numel()), double(tensor->dim())};
    Tensor low = Tensor::from_vector<double>(shape, {2});
    Tensor high = Tensor::from_vector<double>(shape, {2});
    groups.tied->all_reduce(low, comm::ReduceOp::min);
    groups.tied->all_reduce(high, comm::ReduceOp::max);
    const bool same = low.to_vector<double>() == high.to_vector<double>();
    LIBAI_CHECK(same, "stage step: the weight ", name,
                " tied between the first and last stage has different shapes there");
    autograd::NoGradGuard no_grad;
    Tensor values = tensor->detach();
    groups.tied->broadcast(values, 0);
  }
}

StageStep::StageStep(std::vector<models::Model*> parts, Optimizer& optimizer,
                     const LrScheduler* schedule, TrainStepOptions options, StageLayout layout,
                     StageGroups groups)
    : impl_(std::make_unique<Impl>(std::move(parts), optimizer, schedule, std::move(options),
                                   layout, std::move(groups))) {
  Impl& s = *impl_;
  LIBAI_CHECK(s.layout.pp >= 1 && s.layout.stage >= 0 && s.layout.stage < s.layout.pp,
              "stage step: stage ", s.layout.stage, " of ", s.layout.pp, " pipeline stages");
  LIBAI_CHECK(s.layout.num_chunks >= 1 && int(s.parts.size()) == s.layout.num_chunks,
              "stage step: ", s.parts.size(), " parts for ", s.layout.num_chunks, " chunks");
  LIBAI_CHECK(s.layout.dp >= 1 && s.layout.dp_rank >= 0 && s.layout.dp_rank < s.layout.dp,
              "stage step: data-parallel rank ", s.layout.dp_rank, " of ", s.layout.dp);
  LIBAI_CHECK(size_of(s.groups.dp) == s.layout.dp, "stage step: the data-parallel group has ",
              size_of(s.groups.dp), " ranks, the layout says ", s.layout.dp);
  LIBAI_CHECK(size_of(s.groups.pp) == s.layout.pp, "stage step: the pipeline group has ",
              size_of(s.groups.pp), " ranks, the layout says ", s.layout.pp,
              " (StageGroups::pp: this slot on every stage)");
  LIBAI_CHECK(s.options.num_accumulation_steps >= 1,
              "stage step: num_accumulation_steps must be >= 1, got ",
              s.options.num_accumulation_steps);
  LIBAI_CHECK(!s.options.clip_grad_max_norm || *s.options.clip_grad_max_norm > 0,
              "stage step: clip_grad_max_norm must be > 0 (or null for no clipping)");
  const int v = s.layout.num_chunks * s.layout.pp;
  for (int c = 0; c < s.layout.num_chunks; ++c) {
    const models::StageSpec& spec = s.parts[size_t(c)]->part();
    LIBAI_CHECK(spec.num_layers > 0, "stage step: chunk ", c, " is not a model part");
    const int k = s.virtual_stage(c);
    LIBAI_CHECK(spec.is_first() == (k == 0) && spec.is_last() == (k == v - 1), "stage step: chunk ",
                c, " of stage ", s.layout.stage, " is virtual stage ", k, " of ", v,
                " but its part is ", to_string(spec));
    s.infos.push_back(s.parts[size_t(c)]->parameter_infos());
    for (const auto& info : s.infos.back()) s.all_params.push_back(info);
  }
  size_t optimized = 0;
  for (const auto& group : s.optimizer.groups()) {
    optimized += group.params.size();
    for (const Tensor* p : group.params) s.trainable.insert(p->impl_ptr().get());
  }
  LIBAI_CHECK(optimized > 0,
              "stage step: the optimizer holds no parameter: call set_requires_grad(true) on the "
              "parts before building its groups (train::stage_param_groups)");
  LIBAI_CHECK(s.options.zero_stage >= 0 && s.options.zero_stage <= 3,
              "stage step: ZeRO stage must be 0, 1, 2 or 3, got ", s.options.zero_stage);
  if (s.options.loss_scale) s.scaler = std::make_unique<GradScaler>(*s.options.loss_scale);
  if (size_of(s.groups.dp) > 1 && s.options.zero_stage == 0)
    for (models::Model* part : s.parts)
      s.reducers.push_back(std::make_unique<models::GradientReducer>(
          *part, s.groups.dp,
          models::GradientReducerOptions{.bucket_bytes = s.options.bucket_bytes, .average = true}));
  s.check_shared_weights();
  s.find_tied_weights();
  // Note [Each element counted once]: a tied weight counts on the first stage only.
  for (auto& [name, tensor] : s.tied) s.tied_names.insert(name);
  s.tied_on_last = !s.tied.empty() && s.is_last(s.layout.num_chunks - 1) && !s.is_first(0);
  if (s.options.zero_stage > 0)
    s.zero = std::make_unique<ZeroShards>(s.options.zero_stage, s.parts, s.optimizer.groups(),
                                          s.optimizer.options(), s.groups.dp, s.tied_names);
  for (int c = 0; c < s.layout.num_chunks; ++c)
    for (const auto& info : s.infos[size_t(c)])
      if (!(s.is_last(c) && !s.is_first(c) && s.tied_names.contains(info.name)))
        s.norm_params.push_back(info);
  // Who shares the step's results: world ranks of (dp 0, tp 0) on the first and last stage.
  if (s.groups.world && s.groups.world->size() > 1) {
    const bool tp0 = rank_of(s.groups.tp) == 0 && s.layout.dp_rank == 0;
    const int rank = s.groups.world->rank();
    Tensor roots = Tensor::from_vector<double>(
        {tp0 && s.layout.stage == 0 ? double(rank) : -1.0,
         tp0 && s.layout.stage == s.layout.pp - 1 ? double(rank) : -1.0},
        {2});
    s.groups.world->all_reduce(roots, comm::ReduceOp::max);
    s.first_root = int(roots.data<double>()[0]);
    s.last_root = int(roots.data<double>()[1]);
  }
}

StageStep::~StageStep() = default;

int64_t StageStep::steps_done() const { return impl_->step; }
ZeroShards* StageStep::zero() { return impl_->zero.get(); }

int64_t StageStep::optimizer_steps() const {
  return impl_->zero ? impl_->zero->optimizer().steps_taken() : impl_->optimizer.steps_taken();
}

std::vector<OwnedSlice> StageStep::owned_slices() {
  Impl& s = *impl_;
  std::vector<OwnedSlice> out;
  if (s.zero)
    for (OwnedSlice& slice : s.zero->owned())
      if (!(s.tied_on_last && s.tied_names.contains(slice.info.name)))
        out.push_back(std::move(slice));
  if (s.layout.dp_rank != 0) return out;
  // Whole blocks: every parameter without ZeRO, the frozen ones with it.
  const std::map<std::string, Tensor> state =
      s.zero ? std::map<std::string, Tensor>{} : s.optimizer.state_tensors();
  for (const auto& info : s.all_params) {
    const bool sharded = s.zero && s.trainable.contains(info.tensor->impl_ptr().get());
    if (sharded || (s.tied_on_last && s.tied_names.contains(info.name))) continue;
    OwnedSlice slice;
    slice.info = info;
    slice.local_shape = info.tensor->shape();
    slice.begin = 0;
    slice.end = info.tensor->numel();
    slice.values = info.tensor->detach().as_strided({slice.end}, {1}, info.tensor->offset());
    const std::string prefix = info.name + ".";
    for (auto it = state.lower_bound(prefix); it != state.end() && it->first.starts_with(prefix);
         ++it) {
      const std::string key = it->first.substr(prefix.size());
      if (key.find('.') != std::string::npos) continue;  // a longer parameter name
      slice.state[key] = key == "step" ? it->second
                                       : it->second.as_strided({slice.end}, {1}, it->second.offset());
    }
    out.push_back(std::move(slice));
  }
  return out;
}

namespace {

// An optimizer state block in its parameter's shape (copied).
Tensor reshaped(const Tensor& t, const models::ParameterInfo& info) {
  LIBAI_CHECK(t.numel() == info.tensor->numel(), "stage step: the checkpoint's optimizer state of ",
              info.name, " has ", t.numel(), " elements, the parameter ", info.tensor->numel());
  const Tensor c = t.is_contiguous() ? t : t.clone_raw();
  const Shape& shape = info.tensor->shape();
  return c.as_strided(shape, contiguous_strides(shape), c.offset()).clone_raw();
}

}  // namespace

void StageStep::load_state(const ZeroShards::BlockSource& parameter,
                           const ZeroShards::StateSource& state, int64_t optimizer_steps) {
  Impl& s = *impl_;
  autograd::NoGradGuard no_grad;
  if (s.zero) s.zero->load(parameter, state, optimizer_steps);
  const std::vector<std::string> keys = parameter_state_keys(s.optimizer.options());
  std::map<std::string, Tensor> loaded{
      {"step", Tensor::full({}, double(optimizer_steps), DType::i64)}};
  for (const auto& info : s.all_params) {
    const bool is_trainable = s.trainable.contains(info.tensor->impl_ptr().get());
    if (s.zero && is_trainable) continue;
    Tensor block = parameter(info.name);
    LIBAI_CHECK(block.defined(), "stage step ", s.layout.stage, ": the checkpoint has no parameter ",
                info.name);
    LIBAI_CHECK(block.shape() == info.tensor->shape(), "stage step ", s.layout.stage,
                ": the checkpoint's block of ", info.name, " is ", shape_str(block.shape()),
                ", this rank holds ", shape_str(info.tensor->shape()));
    info.tensor->copy_from(block);
    if (!is_trainable) continue;
    for (const std::string& key : keys)
      if (Tensor t = state(info.name, key); t.defined())
        loaded[info.name + "." + key] = key == "step" ? t.clone_raw() : reshaped(t, info);
  }
  if (!s.zero) s.optimizer.load_state_tensors(loaded);
}
void StageStep::set_steps_done(int64_t step) { impl_->step = step; }
GradScaler* StageStep::scaler() { return impl_->scaler.get(); }

models::TensorMap StageStep::forward(int chunk, int mb, const models::TensorMap& batch,
                                     const models::TensorMap& received) {
  Impl& s = *impl_;
  LIBAI_CHECK(chunk >= 0 && chunk < s.layout.num_chunks, "stage step: chunk ", chunk, " of ",
              s.layout.num_chunks);
  LIBAI_CHECK(mb >= 0 && mb < s.options.num_accumulation_steps, "stage step: micro-batch ", mb,
              " of ", s.options.num_accumulation_steps);
  LIBAI_CHECK(!s.stash.contains({chunk, mb}), "stage step: forward of micro-batch ", mb,
              " on chunk ", chunk, " twice in step ", s.step);
  LIBAI_CHECK(s.is_first(chunk) == received.empty(), "stage step: virtual stage ",
              s.virtual_stage(chunk),
              s.is_first(chunk) ? " reads its batch, but received "
                                : " received nothing from the one before");
  const int64_t size = batch_size_of(s.is_first(chunk) || batch.size() ? batch : received);
  if (s.micro < 0) s.micro = s.layout.micro_batch_size > 0 ? s.layout.micro_batch_size : size;
  LIBAI_CHECK(size == s.micro, "stage step: micro-batch ", mb, " has ", size, " samples, expected ",
              s.micro);
  Impl::Stash stash;
  stash.mode = s.mode_for(mb);
  models::TrainingModeGuard guard(stash.mode);
  models::Model& part = *s.parts[size_t(chunk)];
  // The first virtual stage's part runs on the inputs the loss would give the whole model
  // (T5's decoder_input_ids from labels); the last one computes the loss on batch + received.
  models::TensorMap in = s.is_last(chunk) ? batch : model_inputs(part, batch);
  for (const auto& [name, tensor] : received) {
    Tensor t = tensor;
    if (is_floating(tensor.dtype())) {
      t = tensor.detach();
      t.set_requires_grad(true);
      stash.leaves[name] = t;
    }
    in[name] = t;
  }
  models::TensorMap sent;
  if (s.zero) s.zero->before_forward(chunk);
  if (s.is_last(chunk)) {
    LossOutput out = compute_loss(part, in, s.options.loss);
    s.loss_sum += out.loss.item<double>();
    for (const auto& [name, value] : out.parts) s.part_sums[name] += value.item<double>();
    s.targets += out.targets;
    stash.loss = out.loss;
  } else {
    stash.outputs = part.forward(in);
    for (const auto& [name, tensor] : stash.outputs) sent[name] = tensor.detach();
  }
  if (s.zero) s.zero->after_forward(chunk);
  s.stash.emplace(std::pair{chunk, mb}, std::move(stash));
  return sent;
}

models::TensorMap StageStep::backward(int chunk, int mb, const models::TensorMap& output_grads) {
  Impl& s = *impl_;
  auto it = s.stash.find({chunk, mb});
  LIBAI_CHECK(it != s.stash.end(), "stage step: backward of micro-batch ", mb, " on chunk ", chunk,
              " before its forward (step ", s.step, ")");
  Impl::Stash stash = std::move(it->second);
  s.stash.erase(it);
  models::TrainingModeGuard guard(stash.mode);
  if (!s.reducers.empty())
    s.reducers[size_t(chunk)]->set_enabled(mb == s.options.num_accumulation_steps - 1);
  if (s.zero) s.zero->before_backward(chunk);
  if (s.is_last(chunk)) {
    const double loss_scale = s.scaler ? s.scaler->scale() : 1.0;
    autograd::backward(
        ops::scale(stash.loss, loss_scale / double(s.options.num_accumulation_steps)));
  } else {
    std::vector<std::pair<Tensor, Tensor>> roots;
    for (const auto& [name, grad] : output_grads) {
      auto out = stash.outputs.find(name);
      LIBAI_CHECK(out != stash.outputs.end(), "stage step: a gradient for '", name,
                  "', which virtual stage ", s.virtual_stage(chunk), " did not send");
      if (out->second.requires_grad()) roots.emplace_back(out->second, grad);
    }
    LIBAI_CHECK(!roots.empty(), "stage step: no gradient for virtual stage ",
                s.virtual_stage(chunk), "'s outputs (micro-batch ", mb, ")");
    if (roots.size() == 1) {
      autograd::backward(roots[0].first, roots[0].second);
    } else {  // one pass over the graph: d/dx sum_i <out_i, grad_i>
      Tensor total;
      for (auto& [out, grad] : roots) {
        std::vector<int64_t> dims(size_t(out.dim()));
        for (int64_t d = 0; d < out.dim(); ++d) dims[size_t(d)] = d;
        Tensor term = ops::sum(ops::mul(out, grad), dims);
        total = total.defined() ? ops::add(total, term) : term;
      }
      autograd::backward(total);
    }
  }
  if (s.zero) s.zero->after_backward(chunk);
  models::TensorMap grads;
  for (const auto& [name, leaf] : stash.leaves) {
    Tensor g = leaf.grad();
    grads[name] = g.defined() ? g : Tensor::zeros(leaf.shape(), leaf.dtype());
  }
  return grads;
}

void StageStep::Impl::sum_tied_gradients() {
  for (auto& [name, tensor] : tied) {
    Tensor grad = tensor->grad();
    if (!grad.defined()) {
      grad = Tensor::zeros(tensor->shape(), tensor->dtype());
      tensor->set_grad(grad);
    }
    groups.tied->all_reduce(grad);
  }
}

StepResult StageStep::Impl::share_result(bool finite, double grad_norm) {
  StepResult r;
  r.step = step;
  r.samples = micro * options.num_accumulation_steps * layout.dp;
  r.grad_norm = grad_norm;
  r.skipped = !finite;
  r.loss_scale = scaler ? scaler->scale() : 1.0;
  r.lr = optimizer.groups().empty() ? 0.0 : optimizer.groups()[0].lr;
  const double accumulation = double(options.num_accumulation_steps);
  // The last stage's replicas average their losses (as TrainStep does) ...
  const bool last_stage = layout.stage == layout.pp - 1;
  std::vector<double> payload;
  if (last_stage) {
    std::vector<double> values{loss_sum / accumulation, double(targets)};
    for (const auto& [name, sum] : part_sums) values.push_back(sum / accumulation);
    if (groups.dp && groups.dp->size() > 1) {
      Tensor t = Tensor::from_vector<double>(values, {int64_t(values.size())});
      groups.dp->all_reduce(t);
      values = t.to_vector<double>();
      for (size_t i = 0; i < values.size(); ++i)
        if (i != 1) values[i] /= double(layout.dp);
    }
    r.loss = values[0];
    r.targets = int64_t(std::llround(values[1]));
    size_t i = 2;
    for (const auto& [name, sum] : part_sums) r.parts[name] = values[i++];
    // ... and (dp 0, tp 0) of the last stage tells everyone: loss, targets, parts by name.
    payload = {r.loss, double(r.targets)};
    for (const auto& [name, value] : r.parts) {
      payload.push_back(value);
      payload.push_back(double(name.size()));
      payload.insert(payload.end(), name.begin(), name.end());
    }
  }
  if (groups.world && groups.world->size() > 1) {
    const bool root = groups.world->rank() == last_root;
    payload = broadcast_doubles(root ? payload : std::vector<double>{}, *groups.world, last_root);
    r.loss = payload.at(0);
    r.targets = int64_t(std::llround(payload.at(1)));
    r.parts.clear();
    for (size_t i = 2; i < payload.size();) {
      const double value = payload[i++];
      const size_t n = size_t(payload[i++]);
      r.parts[std::string(payload.begin() + long(i), payload.begin() + long(i + n))] = value;
      i += n;
    }
    // The learning rate of the whole model's first group: the first stage's first group.
    Tensor lr = Tensor::full({1}, r.lr, DType::f64);
    groups.world->broadcast(lr, first_root);
    r.lr = lr.data<double>()[0];
  }
  return r;
}

StepResult StageStep::end_step() {
  Impl& s = *impl_;
  LIBAI_CHECK(s.stash.empty(), "stage step: end_step with ", s.stash.size(),
              " micro-batch(es) whose backward has not run (step ", s.step, ")");
  LIBAI_CHECK(s.micro > 0, "stage step: end_step before any forward");
  // 2. Data-parallel buckets (launched during the last micro-batch's backward), or ZeRO's
  //    reduce-scatter into the shards (train/zero.h).
  // 1. Tied weights: both copies get the sum of the two stages' gradients.
  if (s.zero) {
    s.zero->reduce_gradients();
    if (!s.tied.empty()) s.zero->sum_tied(*s.groups.tied);
  } else {
    for (auto& reducer : s.reducers) reducer->finish();
    s.sum_tied_gradients();
  }
  const std::vector<models::ParameterInfo> grads = s.zero ? s.zero->grad_infos() : s.all_params;
  // 3. Non-finite gradients anywhere skip the step everywhere.
  bool finite = true;
  if (s.scaler) finite = s.scaler->unscale(grads, {s.groups.world});
  // 4. The global norm, each element once (tied weights on the first stage; ZeRO's shards
  //    summed over the data-parallel group), and clipping.
  NormGroups norm_groups{.tp = s.groups.tp, .sharded = {s.groups.pp}};
  if (s.zero) norm_groups.sharded.push_back(s.groups.dp);
  const double norm =
      global_grad_norm(s.zero ? s.zero->grad_infos(s.tied_on_last) : s.norm_params,
                       s.options.clip_grad_norm_type, norm_groups);
  if (s.options.clip_grad_max_norm && std::isfinite(norm)) {
    // As clip_grad_norm does (torch's f32 coefficient), over every copy.
    const double coefficient = double(float(*s.options.clip_grad_max_norm) / (float(norm) + 1e-6f));
    if (coefficient < 1.0) scale_grads(grads, coefficient);
  }
  if (!s.scaler && !std::isfinite(norm))
    LIBAI_THROW(InvalidArgument, "train step ", s.step, ": the gradient norm is ", norm,
                "; without loss scaling a non-finite gradient is an error");
  // 5. Learning rate and update (ZeRO: this rank's shard, then every rank gathers).
  for (auto& group : s.optimizer.groups())
    group.lr = s.schedule ? s.schedule->lr(group.base_lr, s.step) : group.base_lr;
  Optimizer& updater = s.zero ? s.zero->optimizer() : s.optimizer;
  if (s.zero)
    for (size_t g = 0; g < updater.groups().size(); ++g)
      updater.groups()[g].lr = s.optimizer.groups()[g].lr;
  if (finite) {
    updater.step();
    if (s.zero) s.zero->gather_parameters();
  } else {
    logger("train")->warn("step {}: gradients hold inf or nan at loss scale {}; step skipped",
                          s.step, s.scaler->scale());
  }
  if (s.scaler) s.scaler->update(!finite);
  StepResult r = s.share_result(finite, norm);
  s.optimizer.zero_grad();
  if (s.zero) s.zero->zero_grad();
  s.loss_sum = 0;
  s.targets = 0;
  s.part_sums.clear();
  ++s.step;
  return r;
}

}  // namespace libai::train
