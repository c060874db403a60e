#include "runtime/cluster_env.h"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "runtime/config/config.h"
#include "runtime/error.h"

namespace libai {
namespace {

// Where a field's value came from. `group` orders and names the source ("LiBai env"), `name`
// is the variable or key within it, `described` is what an error message shows.
struct Origin {
  std::string group;
  std::string name;
  std::string described;
};

template <typename T>
struct Resolved {
  T value{};
  Origin origin;
};

// The sources in precedence order; ClusterSpec::source lists them in this order.
const char* const kGroups[] = {"flags", "LiBai env", "torchrun env", "Slurm", "config", "defaults"};

std::string trim(std::string_view text) {
  const char* space = " \t\r\n";
  size_t begin = text.find_first_not_of(space);
  if (begin == std::string_view::npos) return "";
  size_t end = text.find_last_not_of(space);
  return std::string(text.substr(begin, end - begin + 1));
}

// One variable of one convention, read and trimmed; empty counts as unset.
struct EnvValue {
  std::string group;
  std::string variable;
  std::string text;

  std::string described() const { return str_cat(variable, "=", text, " (", group, ")"); }
  Origin origin() const { return {group, variable, described()}; }
};

class Environment {
 public:
  explicit Environment(const EnvLookup& env) : env_(env) {}

  std::optional<EnvValue> get(const std::string& group, const char* variable) const {
    std::optional<std::string> raw = env_(variable);
    if (!raw) return std::nullopt;
    std::string text = trim(*raw);
    if (text.empty()) return std::nullopt;
    return EnvValue{group, variable, std::move(text)};
  }
  bool has(const char* variable) const { return get("", variable).has_value(); }

  // The first of `variables` that is set.
  std::optional<EnvValue> first(const std::string& group,
                                std::initializer_list<const char*> variables) const {
    for (const char* variable : variables)
      if (auto value = get(group, variable)) return value;
    return std::nullopt;
  }

 private:
  const EnvLookup& env_;
};

int parse_int(const EnvValue& value) {
  const std::string& text = value.text;
  int result = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, result);
  LIBAI_CHECK(error == std::errc() && ptr == end, "cluster: ", value.described(),
              " is not an integer");
  return result;
}

// The candidates of the conventions that give one field, highest precedence first; they
// must all agree.
std::optional<Resolved<int>> agreed_int(const std::vector<EnvValue>& candidates) {
  if (candidates.empty()) return std::nullopt;
  Resolved<int> first{parse_int(candidates[0]), candidates[0].origin()};
  for (size_t i = 1; i < candidates.size(); ++i) {
    int other = parse_int(candidates[i]);
    LIBAI_CHECK(other == first.value, "cluster: ", candidates[0].described(), " disagrees with ",
                candidates[i].described(),
                "; the launch conventions must agree: unset one of them");
  }
  return first;
}

std::optional<Resolved<std::string>> agreed_string(const std::vector<EnvValue>& candidates) {
  if (candidates.empty()) return std::nullopt;
  for (size_t i = 1; i < candidates.size(); ++i)
    LIBAI_CHECK(candidates[i].text == candidates[0].text, "cluster: ", candidates[0].described(),
                " disagrees with ", candidates[i].described(),
                "; the launch conventions must agree: unset one of them");
  return Resolved<std::string>{candidates[0].text, candidates[0].origin()};
}

void add(std::vector<EnvValue>& candidates, std::optional<EnvValue> value) {
  if (value) candidates.push_back(std::move(*value));
}

// The environment's view of the cluster, one optional per field.
struct FromEnv {
  std::optional<Resolved<int>> nodes, node_rank, port;
  std::optional<Resolved<std::string>> addr, token;
};

FromEnv read_environment(const EnvLookup& lookup) {
  Environment env(lookup);
  const std::string libai = "LiBai env", torchrun = "torchrun env", slurm = "Slurm";
  // NODE_RANK belongs to both LiBai and torchrun: name it after the one whose other
  // variables are present.
  bool libai_present = env.has("NODE") || env.has("ADDR") || env.has("PORT");
  bool torchrun_present = env.has("NNODES") || env.has("MASTER_ADDR") || env.has("MASTER_PORT");
  const std::string& rank_group = !libai_present && torchrun_present ? torchrun : libai;
  // Slurm's variables describe a launch only inside a task (srun or a batch script); an
  // salloc shell has the allocation's SLURM_NNODES but no task rank.
  bool in_slurm_task = env.has("SLURM_NODEID") || env.has("SLURM_PROCID");

  FromEnv result;
  std::vector<EnvValue> nodes, node_rank, port, addr;
  add(nodes, env.get(libai, "NODE"));
  add(nodes, env.get(torchrun, "NNODES"));
  add(node_rank, env.get(rank_group, "NODE_RANK"));
  add(addr, env.get(libai, "ADDR"));
  add(addr, env.get(torchrun, "MASTER_ADDR"));
  add(port, env.get(libai, "PORT"));
  add(port, env.get(torchrun, "MASTER_PORT"));
  if (in_slurm_task) {
    add(nodes, env.first(slurm, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}));
    add(node_rank, env.first(slurm, {"SLURM_NODEID", "SLURM_PROCID"}));
  }
  result.nodes = agreed_int(nodes);
  result.node_rank = agreed_int(node_rank);
  result.port = agreed_int(port);
  result.addr = agreed_string(addr);
  if (!result.addr && in_slurm_task) {
    if (auto list =
            env.first(slurm, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
      std::string host;
      try {
        host = first_slurm_host(list->text);
      } catch (const InvalidArgument& error) {
        LIBAI_THROW(InvalidArgument, "cluster: ", list->described(), ": ", error.what());
      }
      result.addr = Resolved<std::string>{host, list->origin()};
    } else if (auto ip = env.get(slurm, "SLURM_LAUNCH_NODE_IPADDR")) {
      result.addr = Resolved<std::string>{ip->text, ip->origin()};
    }
  }
  // A token is a secret: never echo it in messages.
  if (auto token = env.get(libai, "LIBAI_CLUSTER_TOKEN"))
    result.token = Resolved<std::string>{token->text, {libai, token->variable, token->variable}};
  return result;
}

const config::Node* config_value(const config::Config* cfg, const char* key) {
  if (cfg == nullptr) return nullptr;
  const config::Node* node = cfg->root().find_path(str_cat("train.cluster.", key));
  return node == nullptr || node->is_null() ? nullptr : node;
}

// flags > environment > config > default, for one field.
template <typename T>
Resolved<T> pick(const char* key, const std::optional<T>& flag,
                 const std::optional<Resolved<T>>& from_env, const config::Config* cfg,
                 T fallback) {
  if (flag) return {*flag, {"flags", key, str_cat(key, "=", *flag, " (flags)")}};
  if (from_env) return *from_env;
  if (const config::Node* node = config_value(cfg, key))
    return {node->as<T>(), {"config", key, str_cat(node->describe(), " = ", node->repr())}};
  return {fallback, {"defaults", key, str_cat(key, "=", fallback, " (default)")}};
}

std::string describe_sources(const std::vector<Origin>& origins) {
  std::string out;
  for (const char* group : kGroups) {
    std::string names;
    for (const Origin& origin : origins)
      if (origin.group == group) names += (names.empty() ? "" : ", ") + origin.name;
    if (names.empty()) continue;
    out += str_cat(out.empty() ? "" : "; ", group, " (", names, ")");
  }
  return out;
}

// Splits at the commas outside brackets.
std::vector<std::string_view> split_hosts(std::string_view list) {
  std::vector<std::string_view> pieces;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == '[') {
      LIBAI_CHECK(depth == 0, "nested '[' at offset ", i, " of host list '", list, "'");
      ++depth;
    } else if (c == ']') {
      LIBAI_CHECK(depth == 1, "unmatched ']' at offset ", i, " of host list '", list, "'");
      --depth;
    } else if (c == ',' && depth == 0) {
      pieces.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  LIBAI_CHECK(depth == 0, "unclosed '[' in host list '", list, "'");
  pieces.push_back(list.substr(start));
  for (std::string_view piece : pieces)
    LIBAI_CHECK(!piece.empty(), "empty host name in host list '", list, "'");
  return pieces;
}

uint64_t parse_index(std::string_view digits, std::string_view list) {
  uint64_t value = 0;
  auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  LIBAI_CHECK(!digits.empty() && error == std::errc() && ptr == digits.data() + digits.size(),
              "expected a number or a range like 01-04 in the brackets of host list '", list,
              "', got '", digits, "'");
  return value;
}

std::string padded(uint64_t value, size_t width) {
  std::string text = std::to_string(value);
  if (text.size() < width) text.insert(0, width - text.size(), '0');
  return text;
}

// The names one bracket stands for: "01-03,7" -> 01 02 03 7. With `first_only`, just the
// first.
std::vector<std::string> expand_bracket(std::string_view inside, std::string_view list,
                                        bool first_only, size_t limit) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= inside.size()) {
    size_t comma = inside.find(',', start);
    std::string_view item = inside.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    size_t dash = item.find('-');
    std::string_view low_text = item.substr(0, dash);
    uint64_t low = parse_index(low_text, list);
    uint64_t high = dash == std::string_view::npos ? low : parse_index(item.substr(dash + 1), list);
    LIBAI_CHECK(low <= high, "range '", item, "' runs backwards in host list '", list, "'");
    LIBAI_CHECK(first_only || (high - low < limit && names.size() + (high - low) < limit),
                "host list '", list, "' names more than ", limit, " hosts");
    for (uint64_t i = low; i <= high; ++i) {
      names.push_back(padded(i, low_text.size()));
      if (first_only) return names;
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return names;
}

constexpr size_t kMaxHosts = 1'000'000;

// One host pattern ("r[1-2]n[01-02]") multiplied out, appended to `hosts`.
void expand_pattern(std::string_view pattern, std::string_view list, bool first_only,
                    std::vector<std::string>& hosts) {
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < pattern.size()) {
    size_t open = pattern.find('[', i);
    std::string_view text = pattern.substr(i, open == std::string_view::npos ? open : open - i);
    for (std::string& name : partial) name += text;
    if (open == std::string_view::npos) break;
    size_t close = pattern.find(']', open);  // split_hosts checked the brackets
    std::vector<std::string> choices =
        expand_bracket(pattern.substr(open + 1, close - open - 1), list, first_only, kMaxHosts);
    LIBAI_CHECK(partial.size() * choices.size() + hosts.size() <= kMaxHosts, "host list '", list,
                "' names more than ", kMaxHosts, " hosts");
    std::vector<std::string> next;
    next.reserve(partial.size() * choices.size());
    for (const std::string& head : partial)
      for (const std::string& choice : choices) next.push_back(head + choice);
    partial = std::move(next);
    i = close + 1;
  }
  for (std::string& name : partial) hosts.push_back(std::move(name));
}

}  // namespace

std::optional<std::string> real_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::vector<std::string> expand_slurm_nodelist(std::string_view nodelist) {
  std::string_view list = nodelist;
  std::vector<std::string> hosts;
  for (std::string_view pattern : split_hosts(list)) expand_pattern(pattern, list, false, hosts);
  return hosts;
}

std::string first_slurm_host(std::string_view nodelist) {
  std::vector<std::string> hosts;
  expand_pattern(split_hosts(nodelist).front(), nodelist, true, hosts);
  return hosts.front();
}

ClusterSpec resolve_cluster(const ClusterFlags& flags, const config::Config* cfg,
                            const EnvLookup& env) {
  FromEnv from_env = read_environment(env);
  ClusterSpec defaults;
  auto nodes = pick<int>("nodes", flags.nodes, from_env.nodes, cfg, defaults.nodes);
  auto node_rank =
      pick<int>("node_rank", flags.node_rank, from_env.node_rank, cfg, defaults.node_rank);
  auto addr = pick<std::string>("addr", flags.addr, from_env.addr, cfg, defaults.addr);
  auto port = pick<int>("port", flags.port, from_env.port, cfg, defaults.port);
  // The token is a secret: its origin is named, its value never shown.
  Resolved<std::string> token;
  if (flags.token) {
    token = {*flags.token, {"flags", "token", "token (flags)"}};
  } else if (from_env.token) {
    token = *from_env.token;
  } else if (const config::Node* node = config_value(cfg, "token")) {
    token = {node->as_string(), {"config", "token", node->describe()}};
  }

  LIBAI_CHECK(nodes.value >= 1, "cluster: nodes must be at least 1, got ", nodes.origin.described);
  LIBAI_CHECK(node_rank.value >= 0 && node_rank.value < nodes.value,
              "cluster: node_rank must be in [0, nodes) = [0, ", nodes.value, "), got ",
              node_rank.origin.described, " with ", nodes.origin.described);
  LIBAI_CHECK(port.value >= 0 && port.value <= 65535,
              "cluster: port must be in [1, 65535] (or 0 for a single node), got ",
              port.origin.described);
  LIBAI_CHECK(port.value != 0 || nodes.value == 1,
              "cluster: port 0 (any free port) works only for a single node, since the other "
              "nodes must know where node 0 listens; got ",
              port.origin.described, " with ", nodes.origin.described);
  LIBAI_CHECK(!addr.value.empty(), "cluster: node 0's address is empty: ", addr.origin.described);

  std::vector<Origin> origins = {nodes.origin, node_rank.origin, addr.origin, port.origin};
  if (!token.origin.group.empty()) origins.push_back(token.origin);
  ClusterSpec spec;
  spec.nodes = nodes.value;
  spec.node_rank = node_rank.value;
  spec.addr = std::move(addr.value);
  spec.port = port.value;
  spec.token = std::move(token.value);
  spec.source = describe_sources(origins);
  return spec;
}

}  // namespace libai
