// What the actor tests share: a CAF actor system with two scheduler threads, and a random
// model of a family with a chosen number of layers saved as a Hugging Face folder.
#pragma once

#include <caf/all.hpp>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "tests/models/random_models.h"

namespace libai::testing {

struct System {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  System() {
    config.set("scheduler.max-threads", 2);
    system = std::make_unique<caf::actor_system>(config);
  }
};

// `family` (of tests/models/random_models.h) with `layers` layers, saved under a name made of
// `tag`, the layer count and this process's id.
inline std::filesystem::path random_model(const std::string& family, int layers,
                                          const std::string& tag) {
  for (auto f : families())
    if (f.name == family) {
      f.config[family == "gpt2" ? "n_layer" : "num_hidden_layers"] = layers;
      return save_random_model(
          f, tag + std::to_string(layers) + "_" + std::to_string(::getpid()));
    }
  throw std::runtime_error("no family " + family);
}

}  // namespace libai::testing
