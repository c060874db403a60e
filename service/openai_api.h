// The OpenAI-style request and response bodies of the HTTP server (docs/SERVER.md), as pure
// functions over JSON: no sockets here, so every rule about fields can be read in one place.
//
//   ApiContext api{.model_name = "gpt2", .max_positions = 1024};
//   CompletionRequest c = parse_completion(nlohmann::json::parse(body), api, /*chat=*/false);
//   GenerateResult r = service.generate(c.generate);
//   std::string out = completion_response(c, api, r, "cmpl-1", created).dump();
//
// A bad request throws ApiError: the HTTP status, OpenAI's error type and the offending field
// (`param`), which the server turns into {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "service/service.h"

namespace libai::http {

using nlohmann::json;

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
};

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code);
json error_body(const ApiError& error);

// A service error (libai::Error) as the HTTP error it answers: the caller's mistakes 400, an
// overloaded or stopping service 503, our own failures 500.
ApiError api_error_from(const std::exception& error);

struct ApiContext {
  std::string model_name;     // the one name `model` may carry
  int64_t max_positions = 0;  // prompt + new tokens (0: unbounded)
};

// One of /v1/completions or /v1/chat/completions.
struct CompletionRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
  bool has_seed = false;       // false: the server draws one
  GenerateRequest generate;    // without on_token / cancel (the server sets them)
};

// `body` is the parsed JSON; `chat` selects /v1/chat/completions (messages instead of prompt).
CompletionRequest parse_completion(const json& body, const ApiContext& api, bool chat);

// The prompt of a chat: Note [Chat prompt] in openai_api.cc.
std::string chat_prompt(const json& messages);

json completion_response(const CompletionRequest& request, const ApiContext& api,
                         const GenerateResult& result, const std::string& id, int64_t created);
// One server-sent event's JSON: text so far unsent (`finish_reason` empty while running).
json completion_chunk(const CompletionRequest& request, const ApiContext& api,
                      const std::string& text, const std::string& finish_reason,
                      const std::string& id, int64_t created, bool first);
json usage_json(const GenerateResult& result);
// "stop" for eos and stop strings (as OpenAI), "length", "cancelled".
std::string finish_reason_name(FinishReason reason);

struct EmbeddingRequest {
  std::vector<std::string> texts;
};
EmbeddingRequest parse_embeddings(const json& body, const ApiContext& api);
json embeddings_response(const std::vector<std::vector<float>>& vectors, const ApiContext& api,
                         int64_t prompt_tokens);

json models_response(const ApiContext& api, int64_t created);

// How many bytes of `text` can be sent now: all but a tail that might be (the start of) a stop
// string, which generation may still turn into the end of the text (Note [Holding back stop
// strings] in openai_api.cc).
size_t sendable_length(const std::string& text, const std::vector<std::string>& stops);

}  // namespace libai::http
