// A libai::Service whose generation runs through a pipeline of model stages (one process or a
// cluster): the engine of service/batcher.h with one lane per group (Note [Lanes]), each lane's
// steps a round trip through the pipeline under the stage contract of
// models/stages/stage.h, so a request's tokens are those of the same request on one model.
//
//   PipelineLayout layout = make_layout({.pp = 2}, /*groups=*/2);
//   layout.by_arrival = true;                                  // lanes step when they have work
//   LocalPipeline pipeline(system, layout, model_stage_factory(folder, layout, stage_of));
//   auto svc = make_pipeline_service(pipeline.client(), layout, folder, {.max_batch = 8});
//   svc->generate({.prompt = "Hello", .max_new_tokens = 8});
//   svc.reset();                                               // every group's done packet
//   pipeline.wait();
//
// Decoder-only models; an encoder-decoder (T5) is Unsupported (its steps are one request at a
// time: serve it from one process, libai::Service::open).
#pragma once

#include <filesystem>
#include <memory>

#include "actors/driver.h"
#include "actors/pipeline.h"
#include "service/service.h"

namespace libai::actors {

// `layout` must run by arrival (Note [Stage programs]); options.max_batch is shared out over
// its groups (each lane decodes up to ceil(max_batch / groups) rows); `client` must outlive
// the service. Destroying the service ends the requests as ~Service does, then sends every
// group's done packet.
std::unique_ptr<Service> make_pipeline_service(PipelineClient& client,
                                               const PipelineLayout& layout,
                                               const std::filesystem::path& folder,
                                               const ServiceOptions& options);

}  // namespace libai::actors
