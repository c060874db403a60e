#include "train/batch_config.h"

#include "runtime/error.h"

namespace libai::train {
namespace {

const char* kKeys =
    "train.train_micro_batch_size, train.num_accumulation_steps and train.global_batch_size";

void check_positive(const std::optional<int64_t>& value, const char* key) {
  LIBAI_CHECK(!value || *value >= 1, key, " must be >= 1, got ", *value);
}

}  // namespace

BatchConfig reconcile_batch(const BatchSizes& given, int64_t data_parallel_size) {
  check_positive(given.micro, "train.train_micro_batch_size");
  check_positive(given.global, "train.global_batch_size");
  check_positive(given.accumulation, "train.num_accumulation_steps");
  LIBAI_CHECK(data_parallel_size >= 1, "train.dist.data_parallel_size must be >= 1, got ",
              data_parallel_size);
  const int64_t dp = data_parallel_size;
  BatchConfig out;
  out.data_parallel = dp;
  auto show = [&](const std::optional<int64_t>& v) {
    return v ? std::to_string(*v) : std::string("null");
  };
  auto disagree = [&](const char* why) {
    LIBAI_THROW(InvalidArgument, kKeys, " disagree (", why, "): train_micro_batch_size ",
                show(given.micro), ", num_accumulation_steps ", show(given.accumulation),
                ", global_batch_size ", show(given.global), ", data_parallel_size ", dp,
                "; global must equal micro x accumulation x data parallel");
  };
  if (given.micro && given.global) {
    out.micro = *given.micro;
    out.global = *given.global;
    if (out.global % (out.micro * dp) != 0)
      disagree("global is not a multiple of micro x data parallel");
    out.accumulation = out.global / (out.micro * dp);
    if (given.accumulation && *given.accumulation != out.accumulation)
      disagree("the accumulation steps do not give the global batch");
  } else if (given.micro) {
    out.micro = *given.micro;
    out.accumulation = given.accumulation.value_or(1);
    out.global = out.micro * out.accumulation * dp;
  } else if (given.global) {
    out.global = *given.global;
    out.accumulation = given.accumulation.value_or(1);
    if (out.global % (out.accumulation * dp) != 0)
      disagree("global is not a multiple of accumulation x data parallel");
    out.micro = out.global / (out.accumulation * dp);
  } else {
    LIBAI_THROW(InvalidArgument, "set train.train_micro_batch_size or train.global_batch_size (",
                kKeys, " are all null)");
  }
  return out;
}

}  // namespace libai::train
