// Generates text from a model folder through the installed headers and libraries only.
//
//   installed_app MODEL_DIR PROMPT [MAX_NEW_TOKENS]
//
// It prints the token ids (prompt and new tokens, comma-separated) on the first line and the
// new text on the second.
#include <cstdio>
#include <exception>
#include <string>

#include "models/pipelines/pipelines.h"

int main(int argc, char** argv) {
  using namespace libai::models;
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPT [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  try {
    auto model = pipelines::TextModel::load(argv[1]);
    generation::GenerationConfig config;  // greedy
    config.max_new_tokens = argc == 4 ? std::stoll(argv[3]) : 20;
    const auto out = pipelines::generate_text(model, {argv[2]}, config).at(0);
    std::string ids;
    for (int64_t id : out.token_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    std::printf("%s\n%s\n", ids.c_str(), out.text.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "installed_app: %s\n", e.what());
    return 1;
  }
}
