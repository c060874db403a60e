// The one table of model families (models/family.h): adding a family is its folder under
// models/ and one line here (docs/MODELS.md, "Adding a family").
#include "models/bert/bert.h"
#include "models/family.h"
#include "models/gpt2/gpt2.h"
#include "models/llama/llama.h"
#include "models/swin/swin.h"
#include "models/t5/t5.h"
#include "models/vit/vit.h"
#include "runtime/logging.h"

namespace libai::models {

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> table = {
      &gpt2_family(), &bert_family(), &roberta_family(), &vit_family(), &t5_family(), &mt5_family(),
      &llama_family(), &mistral_family(), &qwen2_family(), &swin_family(), &swinv2_family(),
  };
  return table;
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
