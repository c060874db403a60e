// `_target_` instantiation: a registry per base type maps names to factories.
//
//   struct Optimizer { virtual ~Optimizer() = default; };
//   struct AdamW : Optimizer {
//     explicit AdamW(const Node& cfg) : lr(cfg.at("lr").as<double>()) {}
//     double lr;
//   };
//   static Registration<Optimizer> adamw("adamw", [](const Node& cfg) {
//     return std::make_unique<AdamW>(cfg);
//   });
//
//   std::unique_ptr<Optimizer> optimizer = instantiate<Optimizer>(cfg.node("optim"));
//   // `optim._target_: adamx` -> "configs/x.yaml:3:13: key 'optim._target_': unknown target
//   //  'adamx' (did you mean 'adamw'?); known targets: adamw, sgd"
//
// A factory receives the whole section (with `_target_`) and reads the keys it needs, so its
// errors name file:line:column too. Registry<Base>::global() is the one shared registry of a
// base type; separate Registry objects serve tests and scoped uses.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/node.h"
#include "runtime/config/suggest.h"
#include "runtime/error.h"

namespace libai::config {

template <typename Base>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Base>(const Node&)>;

  static Registry& global() {
    static Registry registry;
    return registry;
  }

  // Registering a name twice is a bug in the program, not in a config.
  void add(const std::string& name, Factory factory) {
    std::lock_guard<std::mutex> lock(mutex_);
    LIBAI_ASSERT(factories_.count(name) == 0, "target '", name, "' registered twice");
    factories_.emplace(name, std::move(factory));
  }

  bool contains(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return factories_.count(name) != 0;
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& entry : factories_) out.push_back(entry.first);
    return out;  // sorted: std::map
  }

  // `section` is a map with a string `_target_`.
  std::unique_ptr<Base> instantiate(const Node& section) const {
    LIBAI_CHECK(section.is_map() && section.find("_target_") != nullptr, section.describe(),
                ": expected a map with a '_target_' key naming what to build, got ",
                section.repr());
    const Node& target = *section.find("_target_");
    const std::string& name = target.as_string();
    Factory factory;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto found = factories_.find(name);
      if (found != factories_.end()) factory = found->second;
    }
    if (!factory) {
      const std::vector<std::string> known = names();
      LIBAI_THROW(NotFound, target.describe(), ": unknown target '", name, "'",
                  did_you_mean(name, known), "; known targets: ", join_names(known));
    }
    return factory(section);
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Factory> factories_;
};

// Static registration into Registry<Base>::global().
template <typename Base>
struct Registration {
  Registration(const std::string& name, typename Registry<Base>::Factory factory) {
    Registry<Base>::global().add(name, std::move(factory));
  }
};

template <typename Base>
std::unique_ptr<Base> instantiate(const Node& section) {
  return Registry<Base>::global().instantiate(section);
}

}  // namespace libai::config
