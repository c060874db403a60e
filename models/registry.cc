// The one table of model families (models/family.h): adding a family is its folder under
// models/ and one line here (docs/MODELS.md, "Adding a family"); a program outside the library
// adds its own with register_family (Note [Families from outside the library]).
#include <mutex>

#include "models/bert/bert.h"
#include "models/family.h"
#include "models/gpt2/gpt2.h"
#include "models/llama/llama.h"
#include "models/swin/swin.h"
#include "models/t5/t5.h"
#include "models/vit/vit.h"
#include "runtime/logging.h"

namespace libai::models {

namespace {

std::vector<const Family*>& table() {
  static std::vector<const Family*> table = {
      &gpt2_family(), &bert_family(), &roberta_family(), &vit_family(), &t5_family(), &mt5_family(),
      &llama_family(), &mistral_family(), &qwen2_family(), &swin_family(), &swinv2_family(),
  };
  return table;
}

}  // namespace

const std::vector<const Family*>& families() { return table(); }

void register_family(const Family& family) {
  static std::mutex registering;
  std::lock_guard<std::mutex> lock(registering);
  LIBAI_CHECK(!family.model_type.empty(), "register_family: the family has no model_type");
  LIBAI_CHECK(!family.heads.empty() && family.num_layers != nullptr, "register_family: family \"",
              family.model_type, "\" needs at least one head and num_layers");
  for (const FamilyHead& head : family.heads)
    LIBAI_CHECK(head.make != nullptr, "register_family: family \"", family.model_type,
                "\": head \"", head.architecture, "\" has no make function");
  LIBAI_CHECK(find_family(family.model_type) == nullptr, "register_family: model_type \"",
              family.model_type, "\" is already declared (declared: ", family_names(), ")");
  table().push_back(&family);
}

const Family* find_family(const std::string& model_type) {
  for (const Family* family : families())
    if (family->model_type == model_type) return family;
  return nullptr;
}

std::string family_names(bool (*has)(const Family&)) {
  std::string names;
  for (const Family* family : families())
    if (!has || has(*family)) names += (names.empty() ? "" : ", ") + family->model_type;
  return names;
}

const Family& family_of(const HfConfig& config) {
  const std::string type = config.model_type();
  LIBAI_CHECK_KIND(CorruptInput, !type.empty(), config.path(), ": \"model_type\" is missing");
  const Family* family = find_family(type);
  LIBAI_CHECK_KIND(Unsupported, family, config.path(), ": model_type \"", type,
                   "\" is not supported (supported: ", family_names(), ")");
  return *family;
}

const FamilyHead& Family::head(const HfConfig& config) const {
  const std::string arch = config.architecture();
  const FamilyHead* fallback = nullptr;
  std::string known;
  for (const auto& head : heads) {
    if (!arch.empty() && head.architecture == arch) return head;
    if (head.architecture.empty()) fallback = &head;
    known +=
        (known.empty() ? "" : ", ") + (head.architecture.empty() ? "(base)" : head.architecture);
  }
  LIBAI_CHECK_KIND(Unsupported, fallback, config.path(), ": architecture \"", arch,
                   "\" of model_type \"", model_type, "\" is not supported (supported: ", known,
                   ")");
  if (!arch.empty())
    logger("models")->warn("{}: architecture {} is not known; loading the {} base model",
                           config.path(), arch, model_type);
  return *fallback;
}

}  // namespace libai::models
