// Tensor parallelism across processes: the families of tensor_parallel_test.cc, each
// rank a separate process talking over UCX on loopback (run_spmd_processes), against one
// device. Children write their logits and gradient shards to files; the parent compares.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "ops/ops.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "tests/common/child_process.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;
using testing::families;

void in_child(const std::function<void()>& fn) { ASSERT_EQ(testing::run_in_child(fn), 0); }

TensorMap inputs_for(const testing::Family& f) {
  if (f.name == "vit") return {{"pixel_values", testing::normal_tensor({2, 3, 16, 16}, 99)}};
  TensorMap in{{"input_ids", testing::ids_tensor({2, 7}, 98, 37)}};
  Tensor mask = Tensor::ones({2, 7}, DType::i64);
  for (int64_t j = 5; j < 7; ++j) mask.data<int64_t>()[7 + j] = 0;
  in["attention_mask"] = mask;
  if (f.name.rfind("t5", 0) == 0) in["decoder_input_ids"] = testing::ids_tensor({2, 5}, 97, 37);
  return in;
}

// Logits and, under "grad.<name>", this process's gradient shards.
checkpoint::NamedTensors run_and_collect(Model& model, const TensorMap& inputs) {
  model.set_requires_grad(true);
  Tensor logits = model.forward(inputs).at("logits");
  autograd::backward(ops::sum_all(logits * testing::normal_tensor(logits.shape(), 7)));
  checkpoint::NamedTensors out{{"logits", logits.detach().clone_raw()}};
  for (auto& info : model.parameter_infos())
    out.emplace_back("grad." + info.name, info.tensor->grad());
  return out;
}

class TensorParallelProcesses : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(TensorParallelProcesses, OutputsAndGradientsMatchOneDevice) {
  const auto [family_index, tp] = GetParam();
  const auto family = families()[family_index];
  const fs::path out = fs::temp_directory_path() / ("libai_tpdist_" + std::to_string(::getpid()));
  fs::create_directories(out);
  const std::string tag = "dist_" + std::to_string(::getpid());
  in_child([&] { testing::save_random_model(family, tag); });
  const fs::path dir = fs::temp_directory_path() / ("libai_tp_" + family.name + "_" + tag);
  ASSERT_TRUE(fs::exists(dir / "config.json")) << dir;
  const TensorMap inputs = inputs_for(family);
  comm::run_spmd_processes(tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    auto model = load_model(dir, {.tp = group});
    checkpoint::save_safetensors(
        (out / ("rank" + std::to_string(c.rank()) + ".safetensors")).string(),
        run_and_collect(*model, inputs));
  });
  auto single = load_model(dir);
  auto expected = run_and_collect(*single, inputs);
  for (int rank = 0; rank < tp; ++rank) {
    auto got = checkpoint::SafetensorsFile::open(
        (out / ("rank" + std::to_string(rank) + ".safetensors")).string());
    for (const auto& [name, want] : expected) {
      ASSERT_TRUE(got.contains(name)) << name;
      Tensor g = got.tensor(name);
      Tensor w = want;
      if (g.shape() != w.shape()) {  // a split parameter: take rank's block of the whole
        int d = 0;
        while (g.size(d) == w.size(d)) ++d;
        const int64_t part = g.size(d), start = rank * part;
        const int64_t length = std::min(part, w.size(d) - start);
        Tensor block = Tensor::zeros(g.shape());
        ops::narrow(block, d, 0, length).copy_from(ops::narrow(w, d, start, length));
        w = block;
      }
      EXPECT_LE(testing::relative_error(g, w), 1e-5)
          << family.name << " " << name << " rank " << rank;
    }
  }
  fs::remove_all(out);
  fs::remove_all(dir);
}

// Every family at 2 ranks; GPT-2 and T5 (the two decoders) also at 4.
INSTANTIATE_TEST_SUITE_P(Families, TensorParallelProcesses,
                         ::testing::Values(std::make_tuple(0, 2), std::make_tuple(0, 4),
                                           std::make_tuple(1, 2), std::make_tuple(2, 2),
                                           std::make_tuple(3, 2), std::make_tuple(4, 2),
                                           std::make_tuple(4, 4), std::make_tuple(5, 2),
                                           std::make_tuple(6, 2)),
                         [](const auto& info) {
                           return families()[std::get<0>(info.param)].name + "_tp" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace libai::models
