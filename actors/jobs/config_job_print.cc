// What node 0 prints of a config job (`libai-actor run`): its plan and its results, as text
// or JSON. Split from config_job.cc, which runs the job.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "actors/jobs/config_job.h"
#include "models/pipelines/pipelines.h"

namespace libai::actors {

void ConfigJob::print_plan(std::ostream& out, const wire::Assignment& assignment) const {
  print_job_plan(out, shape_ ? *shape_ : shape(), chosen_plan(), wire::from_wire(assignment.devices));
}

namespace {

void print_training_results(std::ostream& out, bool json, const std::vector<TrainStepResult>& steps) {
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const TrainStepResult& r : steps)
      list.push_back({{"step", r.step},
                      {"seconds", r.seconds},
                      {"loss_sum", r.total.loss_sum},
                      {"loss_count", r.total.loss_count},
                      {"grad_norm", r.total.grad_norm},
                      {"skipped", r.total.skipped},
                      {"extra", r.total.extra}});
    out << nlohmann::json{{"train", {{"steps", list}}}}.dump() << "\n";
    return;
  }
  for (const TrainStepResult& r : steps) {
    char line[200];
    std::snprintf(line, sizeof line, "step %d: %.4f s, loss sum %.6g over %lld, grad norm %.4g%s\n",
                  r.step, r.seconds, r.total.loss_sum, static_cast<long long>(r.total.loss_count),
                  r.total.grad_norm, r.total.skipped ? " (skipped)" : "");
    out << line;
  }
}

}  // namespace

void ConfigJob::print_results(std::ostream& out, bool json) const {
  if (training_) {
    print_training_results(out, json, train_results_);
    return;
  }
  if (kind_ == JobKind::generate) {
    if (json) {
      nlohmann::json seqs = nlohmann::json::array();
      size_t k = 0;
      for (size_t p = 0; p < generated_.size(); ++p)
        for (const auto& tokens : generated_[p]) {
          nlohmann::json prompt = p < prompt_texts_.size() ? nlohmann::json(prompt_texts_[p])
                                                           : nlohmann::json(prompts_[p]);
          // As `libai-actor generate` prints them: the decoder's new tokens for T5.
          std::vector<int64_t> ids = encoder_decoder_ ? std::vector<int64_t>() : prompts_[p];
          ids.insert(ids.end(), tokens.begin(), tokens.end());
          seqs.push_back({{"prompt", prompt}, {"token_ids", ids}, {"text", generated_text_[k++]}});
        }
      out << nlohmann::json{{"sequences", seqs}}.dump(2) << "\n";
      return;
    }
    size_t k = 0;
    for (size_t p = 0; p < generated_.size(); ++p)
      for (const auto& tokens : generated_[p]) {
        out << "prompt " << p << ": "
            << (p < prompt_texts_.size() ? "\"" + prompt_texts_[p] + "\"" : std::string("ids"))
            << "\n  -> \"" << generated_text_[k++] << "\"\n     new token ids [";
        for (size_t i = 0; i < tokens.size(); ++i) out << (i ? ", " : "") << tokens[i];
        out << "]\n";
      }
    return;
  }
  if (kind_ == JobKind::encode) {
    if (json) {
      out << nlohmann::json{{"embeddings", embeddings_}}.dump() << "\n";
      return;
    }
    for (size_t i = 0; i < embeddings_.size(); ++i) {
      out << "text " << i << ": \"" << texts_[i] << "\" -> " << embeddings_[i].size()
          << " dims [" << embeddings_[i][0] << ", " << embeddings_[i][1] << ", ...]\n";
    }
    if (embeddings_.size() > 1) {
      out << "cosine similarity:\n";
      for (size_t i = 0; i < embeddings_.size(); ++i) {
        out << "  ";
        for (size_t j = 0; j < embeddings_.size(); ++j) {
          char cell[16];
          std::snprintf(cell, sizeof cell, "%7.4f",
                        models::pipelines::cosine(embeddings_[i], embeddings_[j]));
          out << cell;
        }
        out << "\n";
      }
    }
  }
}

}  // namespace libai::actors
