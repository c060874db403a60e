// default_param_groups: Note [Parameter groups as LiBai forms them] in train/optimizer.h.
#include <set>
#include <sstream>
#include <utility>

#include "models/layers/linear.h"
#include "train/optimizer.h"

namespace libai::train {
namespace {

struct Hyper {
  double lr, weight_decay;
  bool operator==(const Hyper&) const = default;
};

void apply_override(Hyper& hyper, const std::string& key,
                    const std::map<std::string, double>& values) {
  for (const auto& [field, value] : values) {
    if (field == "lr")
      hyper.lr = value;
    else if (field == "weight_decay")
      hyper.weight_decay = value;
    else
      LIBAI_THROW(InvalidArgument, "optimizer override '", key, "': unknown field '", field,
                  "' (expected lr or weight_decay)");
  }
}

}  // namespace

std::vector<ParamGroup> default_param_groups(models::Module& model,
                                             const ParamGroupOptions& options) {
  auto overrides = options.overrides;
  LIBAI_CHECK(!overrides.contains("bias"),
              "optimizer overrides: conflicting overrides for 'bias' (weight_decay_bias sets it)");
  overrides["bias"] = {{"weight_decay", options.weight_decay_bias}};

  std::set<const TensorImpl*> seen;
  std::set<std::string> used;
  std::vector<std::pair<Hyper, std::pair<std::string, Tensor*>>> assigned;
  for (auto& [path, module] : model.named_modules()) {
    const bool is_norm = dynamic_cast<models::Norm*>(module) != nullptr;
    for (auto& [local, tensor] : module->named_parameters()) {
      if (local.find('.') != std::string::npos) continue;  // a child's: visited with the child
      if (!tensor->requires_grad() || !seen.insert(tensor->impl_ptr().get()).second) continue;
      const std::string name = path.empty() ? local : path + "." + local;
      Hyper hyper{options.lr, options.weight_decay};
      if (is_norm) hyper.weight_decay = options.weight_decay_norm;
      for (const std::string& key : {local, name}) {
        auto it = overrides.find(key);
        if (it == overrides.end()) continue;
        apply_override(hyper, key, it->second);
        used.insert(key);
      }
      assigned.push_back({hyper, {name, tensor}});
    }
  }
  for (const auto& [key, values] : options.overrides) {
    if (used.contains(key)) continue;
    std::ostringstream names;
    for (size_t i = 0; i < assigned.size() && i < 8; ++i)
      names << (i ? ", " : "") << assigned[i].second.first;
    LIBAI_THROW(InvalidArgument, "optimizer override '", key,
                "' names no parameter that requires grad (parameters: ", names.str(),
                assigned.size() > 8 ? ", ..." : "", ")");
  }

  std::vector<ParamGroup> groups;
  std::vector<Hyper> keys;
  for (auto& [hyper, entry] : assigned) {
    size_t g = 0;
    while (g < keys.size() && !(keys[g] == hyper)) ++g;
    if (g == keys.size()) {
      keys.push_back(hyper);
      groups.push_back({.base_lr = hyper.lr, .lr = hyper.lr, .weight_decay = hyper.weight_decay});
    }
    groups[g].names.push_back(entry.first);
    groups[g].params.push_back(entry.second);
  }
  return groups;
}

}  // namespace libai::train
