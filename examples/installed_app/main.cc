// A service outside the tree: generates text from a model folder through the installed
// headers and libraries only (libai::Service, docs/SERVICE.md), or through the pipeline
// stages of a cluster that it joins as node 0 (a serve job config; actors/jobs/cluster_service.h).
//
//   installed_app MODEL_DIR PROMPT [MAX_NEW_TOKENS]
//   installed_app --config CONFIG PROMPT [MAX_NEW_TOKENS]   # the other nodes:
//                                                           # libai-actor serve CONFIG --node-rank R
//
// The text streams to stderr as it is made; stdout gets three lines: the new token ids
// (comma-separated), the new text, and "prompt_tokens N".
#include <cstdio>
#include <exception>
#include <string>

#include "actors/jobs/cluster_service.h"
#include "service/service.h"

namespace {

void generate(libai::Service& service, const char* prompt, int max_new_tokens) {
  libai::GenerateRequest request;  // greedy
  request.prompt = prompt;
  request.max_new_tokens = max_new_tokens;
  request.on_token = [](const libai::TokenEvent& event) {
    std::fputs(event.text.c_str(), stderr);
    return true;  // false would cancel
  };
  const libai::GenerateResult out = service.generate(request);
  std::fputc('\n', stderr);
  std::string ids;
  for (int64_t id : out.token_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  std::printf("%s\n%s\nprompt_tokens %lld\n", ids.c_str(), out.text.c_str(),
              static_cast<long long>(out.prompt_tokens));
}

}  // namespace

int main(int argc, char** argv) {
  const bool cluster = argc > 1 && std::string(argv[1]) == "--config";
  const int first = cluster ? 2 : 1;  // CONFIG or MODEL_DIR, then PROMPT
  if (argc < first + 2 || argc > first + 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPT [MAX_NEW_TOKENS]\n"
                         "       %s --config CONFIG PROMPT [MAX_NEW_TOKENS]\n", argv[0], argv[0]);
    return 2;
  }
  const char* prompt = argv[first + 1];
  const int max_new_tokens = argc == first + 3 ? std::stoi(argv[first + 2]) : 20;
  try {
    if (cluster) {
      libai::actors::ServeClusterOptions options;
      options.config = argv[first];
      options.cluster.node_rank = 0;
      libai::actors::serve_cluster(options, [&](libai::Service& service) {
        generate(service, prompt, max_new_tokens);
      });
    } else {
      auto service = libai::Service::open({.model_dir = argv[first]});
      generate(*service, prompt, max_new_tokens);
    }
  } catch (const std::exception& e) {  // libai::Error: one line naming what was wrong
    std::fprintf(stderr, "installed_app: %s\n", e.what());
    return 1;
  }
}
