#include "actors/synthetic.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime/device_profile.h"
#include "runtime/error.h"

namespace libai::actors {

models::TensorMap SyntheticCompute::forward(int, const models::TensorMap& inputs) {
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(seconds_));
  if (wait_ == Wait::sleep) {
    sleep_precisely_until(until);
  } else {
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  auto it = inputs.find("x");
  LIBAI_CHECK(it != inputs.end(), "synthetic stage: the packet has no tensor 'x'");
  Tensor x = it->second.clone_raw();
  x.data<float>()[0] += 1.0f;
  return {{"x", x}};
}

std::vector<std::vector<float>> run_synthetic_job(PipelineClient& client, const PipelineLayout& layout,
                                                  int steps, int64_t elements) {
  const int groups = [&] {
    int n = 0;
    for (const auto& g : layout.groups) n += int(g.size());
    return n;
  }();
  std::vector<std::vector<float>> out(static_cast<size_t>(groups));
  auto input = [&](int group, int step) {
    Tensor x = Tensor::zeros({elements}, DType::f32);
    x.data<float>()[0] = float(step * 1000);
    return Packet{.group = group, .step = step, .done = false, .tensors = {{"x", x}}};
  };
  for (int g = 0; g < groups; ++g) client.submit(layout.replica_of_group(g), input(g, 0));
  for (int step = 0; step < steps; ++step)
    for (int g = 0; g < groups; ++g) {
      Packet p = client.wait(g);
      LIBAI_CHECK(p.group == g && p.step == step, "synthetic job: expected group ", g, " step ",
                  step, ", got ", describe(p));
      out[size_t(g)].push_back(p.tensors.at("x").data<float>()[0]);
      const int replica = layout.replica_of_group(g);
      if (step + 1 < steps)
        client.submit(replica, input(g, step + 1));
      else
        client.submit(replica, Packet{.group = g, .step = steps, .done = true, .tensors = {}});
    }
  return out;
}

}  // namespace libai::actors
