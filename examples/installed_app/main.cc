// A service outside the tree: generates text from a model folder through the installed
// headers and libraries only (libai::Service, docs/SERVICE.md).
//
//   installed_app MODEL_DIR PROMPT [MAX_NEW_TOKENS]
//
// The text streams to stderr as it is made; stdout gets three lines: the new token ids
// (comma-separated), the new text, and "prompt_tokens N".
#include <cstdio>
#include <exception>
#include <string>

#include "service/service.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPT [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  try {
    auto service = libai::Service::open({.model_dir = argv[1]});
    libai::GenerateRequest request;  // greedy
    request.prompt = argv[2];
    request.max_new_tokens = argc == 4 ? std::stoi(argv[3]) : 20;
    request.on_token = [](const libai::TokenEvent& event) {
      std::fputs(event.text.c_str(), stderr);
      return true;  // false would cancel
    };
    const libai::GenerateResult out = service->generate(request);
    std::fputc('\n', stderr);
    std::string ids;
    for (int64_t id : out.token_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    std::printf("%s\n%s\nprompt_tokens %lld\n", ids.c_str(), out.text.c_str(),
                static_cast<long long>(out.prompt_tokens));
  } catch (const std::exception& e) {  // libai::Error: one line naming what was wrong
    std::fprintf(stderr, "installed_app: %s\n", e.what());
    return 1;
  }
}
