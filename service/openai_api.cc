#include "service/openai_api.h"

#include <algorithm>
#include <limits>

#include "runtime/error.h"

namespace libai::http {
namespace {

const char* type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unknown value";
  }
}

ApiError wrong_type(const std::string& field, const char* expected, const json& got) {
  return ApiError(400, field + " must be " + expected + ", got " + type_name(got), field);
}

// A present, non-null field; null counts as absent (OpenAI's clients send nulls for defaults).
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

double get_number(const json& body, const char* name, double fallback, double low, double high) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) throw wrong_type(name, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= low && x <= high))
    throw ApiError(400, str_cat(name, " must be in [", low, ", ", high, "], got ", x), name);
  return x;
}

int64_t get_integer(const json& body, const char* name, int64_t fallback, int64_t low,
                    int64_t high) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw wrong_type(name, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(high))
    throw ApiError(400, str_cat(name, " must be at most ", high), name);
  const int64_t x = v->get<int64_t>();
  if (x < low || x > high)
    throw ApiError(400, str_cat(name, " must be in [", low, ", ", high, "], got ", x), name);
  return x;
}

void refuse_unsupported(const json& body, const char* name, const json& neutral) {
  const json* v = field(body, name);
  if (v && *v != neutral)
    throw ApiError(400, str_cat(name, " is not supported by this server (only ", neutral.dump(),
                                ")"),
                   name);
}

void check_model(const json& body, const ApiContext& api) {
  const json* v = field(body, "model");
  if (!v) return;
  if (!v->is_string()) throw wrong_type("model", "a string", *v);
  if (v->get<std::string>() != api.model_name)
    throw ApiError(404,
                   "The model '" + v->get<std::string>() + "' does not exist; this server serves '" +
                       api.model_name + "'",
                   "model", "invalid_request_error", "model_not_found");
}

std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) throw wrong_type("stop", "a string or a list of strings", *v);
      stops.push_back(s.get<std::string>());
    }
  } else {
    throw wrong_type("stop", "a string or a list of strings", *v);
  }
  if (stops.size() > 16) throw ApiError(400, "stop takes at most 16 strings", "stop");
  for (const auto& s : stops)
    if (s.empty()) throw ApiError(400, "stop strings must not be empty", "stop");
  return stops;
}

void parse_prompt(const json& body, GenerateRequest& g) {
  const json* v = field(body, "prompt");
  if (!v) throw ApiError(400, "prompt is required", "prompt");
  if (v->is_string()) {
    g.prompt = v->get<std::string>();
    return;
  }
  // A list of token ids, or a list of one text (batches of prompts are a request each here).
  if (v->is_array() && !v->empty() && v->front().is_number()) {
    for (const json& id : *v) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        throw ApiError(400, "prompt: a list of token ids must hold non-negative integers",
                       "prompt");
      g.prompt_ids.push_back(id.get<int64_t>());
    }
    return;
  }
  if (v->is_array() && v->size() == 1 && v->front().is_string()) {
    g.prompt = v->front().get<std::string>();
    return;
  }
  if (v->is_array() && v->size() > 1)
    throw ApiError(400, "prompt: one prompt per request (send a request for each)", "prompt");
  throw wrong_type("prompt", "a string or a list of token ids", *v);
}

}  // namespace

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

json error_body(const ApiError& error) {
  return error_body(error.what(), error.type, error.param, error.code);
}

ApiError api_error_from(const std::exception& error) {
  if (const auto* api = dynamic_cast<const ApiError*>(&error)) return *api;
  if (const auto* e = dynamic_cast<const Error*>(&error)) {
    switch (e->kind()) {
      case ErrorKind::invalid_argument:
      case ErrorKind::unsupported:
      case ErrorKind::not_found: return ApiError(400, e->what());
      case ErrorKind::unavailable:  // a full queue or a service shutting down
      case ErrorKind::communication:
        return ApiError(503, e->what(), "", "server_overloaded", "service_unavailable");
      default: break;
    }
  }
  return ApiError(500, error.what(), "", "server_error");
}

// Note [Chat prompt]
// The tokenizer loader (models/tokenizers) reads no chat template, so a chat becomes one text in
// a fixed, documented format: each message as "role: content\n", then "assistant:" for the
// model to continue. Content is a string or a list of {"type": "text", "text": ...} parts,
// joined. A model trained with its own template answers better through /v1/completions with
// the prompt formatted by the client.
std::string chat_prompt(const json& messages) {
  if (!messages.is_array()) throw wrong_type("messages", "a list of messages", messages);
  if (messages.empty()) throw ApiError(400, "messages must not be empty", "messages");
  std::string prompt;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw wrong_type(where, "an object", m);
    const json* role = field(m, "role");
    if (!role || !role->is_string())
      throw ApiError(400, where + ".role must be a string", where + ".role");
    const json* content = field(m, "content");
    std::string text;
    if (!content) {
      throw ApiError(400, where + ".content is required", where + ".content");
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        const json* t = part.is_object() ? field(part, "text") : nullptr;
        if (!t || !t->is_string() || part.value("type", "text") != "text")
          throw ApiError(400, where + ".content parts must be {\"type\": \"text\", \"text\": ...}",
                         where + ".content");
        text += t->get<std::string>();
      }
    } else {
      throw wrong_type(where + ".content", "a string or a list of text parts", *content);
    }
    prompt += role->get<std::string>() + ": " + text + "\n";
  }
  return prompt + "assistant:";
}

CompletionRequest parse_completion(const json& body, const ApiContext& api, bool chat) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  CompletionRequest c;
  c.chat = chat;
  check_model(body, api);
  GenerateRequest& g = c.generate;
  if (chat) {
    const json* messages = field(body, "messages");
    if (!messages) throw ApiError(400, "messages is required", "messages");
    g.prompt = chat_prompt(*messages);
  } else {
    parse_prompt(body, g);
  }
  const int64_t limit = api.max_positions > 0 ? api.max_positions : (int64_t(1) << 30);
  // Chat's newer name first; an explicit max_tokens wins when both are given.
  int64_t max_tokens = get_integer(body, "max_completion_tokens", 16, 1, limit);
  max_tokens = get_integer(body, "max_tokens", max_tokens, 1, std::numeric_limits<int64_t>::max());
  if (max_tokens > limit)
    throw ApiError(400,
                   str_cat("max_tokens is ", max_tokens, ", more than the model's context of ",
                           limit, " tokens"),
                   "max_tokens");
  g.max_new_tokens = int(max_tokens);
  g.min_new_tokens = int(get_integer(body, "min_tokens", 0, 0, max_tokens));  // vLLM's extension
  // OpenAI's defaults: temperature 1 (sampling); 0 asks for greedy decoding.
  const double temperature = get_number(body, "temperature", 1.0, 0.0, 2.0);
  g.do_sample = temperature > 0;
  g.temperature = g.do_sample ? temperature : 1.0;
  g.top_p = get_number(body, "top_p", 1.0, 0.0, 1.0);
  if (g.top_p <= 0) throw ApiError(400, "top_p must be above 0", "top_p");
  const int64_t top_k = get_integer(body, "top_k", 0, -1, std::numeric_limits<int>::max());
  g.top_k = top_k < 0 ? 0 : int(top_k);  // -1: off, as vLLM
  g.repetition_penalty = get_number(body, "repetition_penalty", 1.0, 1e-6, 100.0);
  // Without a seed each request draws its own (the server fills it in); with one, the same
  // tokens whatever else runs.
  const json* seed = field(body, "seed");
  if (seed) {
    c.has_seed = true;
    if (!seed->is_number_integer()) throw wrong_type("seed", "an integer", *seed);
    g.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : uint64_t(seed->get<int64_t>());
  }
  g.stop = get_stop(body);
  c.stream = get_bool(body, "stream", false);
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) throw wrong_type("stream_options", "an object", *options);
    c.include_usage = get_bool(*options, "include_usage", false);
  }
  // What this server does not do is refused by name rather than ignored: a client asking for
  // three choices must not get one without being told.
  refuse_unsupported(body, "n", 1);
  refuse_unsupported(body, "best_of", 1);
  refuse_unsupported(body, "echo", false);
  refuse_unsupported(body, "logprobs", chat ? json(false) : json(nullptr));
  refuse_unsupported(body, "top_logprobs", 0);
  refuse_unsupported(body, "presence_penalty", 0);
  refuse_unsupported(body, "frequency_penalty", 0);
  refuse_unsupported(body, "suffix", "");
  refuse_unsupported(body, "tools", json::array());
  return c;
}

std::string finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::eos:
    case FinishReason::stop: return "stop";
    case FinishReason::cancelled: return "cancelled";
  }
  return "stop";
}

json usage_json(const GenerateResult& result) {
  return {{"prompt_tokens", result.prompt_tokens},
          {"completion_tokens", result.completion_tokens},
          {"total_tokens", result.prompt_tokens + result.completion_tokens}};
}

json completion_response(const CompletionRequest& request, const ApiContext& api,
                         const GenerateResult& result, const std::string& id, int64_t created) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason_name(result.finish_reason)}};
  if (request.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", result.text}};
  } else {
    choice["text"] = result.text;
    choice["logprobs"] = nullptr;
  }
  return {{"id", id},
          {"object", request.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", api.model_name},
          {"choices", json::array({choice})},
          {"usage", usage_json(result)}};
}

json completion_chunk(const CompletionRequest& request, const ApiContext& api,
                      const std::string& text, const std::string& finish_reason,
                      const std::string& id, int64_t created, bool first) {
  json choice = {{"index", 0},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  if (request.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  return {{"id", id},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", api.model_name},
          {"choices", json::array({choice})}};
}

EmbeddingRequest parse_embeddings(const json& body, const ApiContext& api) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_model(body, api);
  const json* input = field(body, "input");
  if (!input) throw ApiError(400, "input is required", "input");
  EmbeddingRequest r;
  if (input->is_string()) {
    r.texts.push_back(input->get<std::string>());
  } else if (input->is_array()) {
    for (const json& t : *input) {
      if (!t.is_string()) throw wrong_type("input", "a string or a list of strings", *input);
      r.texts.push_back(t.get<std::string>());
    }
  } else {
    throw wrong_type("input", "a string or a list of strings", *input);
  }
  if (r.texts.empty()) throw ApiError(400, "input must not be empty", "input");
  if (r.texts.size() > 2048) throw ApiError(400, "input takes at most 2048 texts", "input");
  refuse_unsupported(body, "encoding_format", "float");
  refuse_unsupported(body, "dimensions", nullptr);
  return r;
}

json embeddings_response(const std::vector<std::vector<float>>& vectors, const ApiContext& api,
                         int64_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vectors[i]}});
  return {{"object", "list"},
          {"data", data},
          {"model", api.model_name},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

json models_response(const ApiContext& api, int64_t created) {
  json model = {{"id", api.model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "libai-actor"}};
  if (api.max_positions > 0) model["max_model_len"] = api.max_positions;
  return {{"object", "list"}, {"data", json::array({model})}};
}

// Note [Holding back stop strings]
// Tokens arrive one piece of text at a time, and a stop string can span pieces: with stop
// "\n\n", a piece ending in "\n" may be the first half of it. The result's text ends before the
// stop string, so sending that "\n" at once would make the stream differ from the result. The
// stream therefore sends a piece only once no stop string can start within it: it holds back
// the longest tail that is a prefix of a stop string (and everything from a whole stop string
// on), and the last event sends the rest of the result's text.
size_t sendable_length(const std::string& text, const std::vector<std::string>& stops) {
  size_t sendable = text.size();
  for (const auto& stop : stops) {
    const size_t whole = text.find(stop);
    if (whole != std::string::npos) sendable = std::min(sendable, whole);
    for (size_t k = std::min(stop.size() - 1, text.size()); k > 0; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        sendable = std::min(sendable, text.size() - k);
        break;
      }
    }
  }
  return sendable;
}

}  // namespace libai::http
