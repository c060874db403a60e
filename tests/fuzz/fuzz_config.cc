// Fuzz target: the YAML config reader with overrides (runtime/config/config.h), as a node reads
// the config an assignment carries and as `key=value` arguments change it. The input is YAML
// text, then overrides, separated by lines "--8<--" (the first part is the file, each further
// line one override). The config is parsed with the project's schema (aliases, overrides of
// known keys), every override applied, validated, written back as YAML and read again.
// Contract: libai::Error or a config, and the YAML it writes reads back to the same YAML.
#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "app/schema.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

using namespace libai::config;

const Schema& schema() {
  static const Schema s = libai_schema();
  return s;
}

void load_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string cut = "\n--8<--\n";
  const size_t at = text.find(cut);
  const std::string yaml = text.substr(0, at);
  std::vector<std::string> overrides;
  if (at != std::string::npos) {
    size_t begin = at + cut.size();
    while (begin <= text.size()) {
      const size_t end = std::min(text.find('\n', begin), text.size());
      overrides.push_back(text.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  // `_base_` names resolve against the fuzz input's "folder" (none) and the committed configs.
  LoadOptions options;
  options.schema = &schema();
  Config config = Config::parse(yaml, "fuzz.yaml", options);
  for (const std::string& o : overrides) config.apply_override(o, &schema());
  const std::string written = config.to_yaml();
  (void)config.to_json();
  const std::string again = Config::parse(written, "written.yaml").to_yaml();
  if (again != written) __builtin_trap();  // the resolved config does not read back as written
  config.validate(schema());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, load_config);
  return 0;
}
