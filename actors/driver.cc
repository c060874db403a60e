#include "actors/driver.h"

#include "actors/pinned_thread.h"
#include "runtime/error.h"

namespace libai::actors {

void PipelineClient::attach(caf::actor driver) {
  std::lock_guard lock(mutex_);
  driver_ = std::move(driver);
}

void PipelineClient::submit(int replica, Packet packet) {
  caf::actor driver;
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) LIBAI_THROW(CommunicationError, failure_);
    driver = driver_;
  }
  LIBAI_CHECK(driver != nullptr, "PipelineClient::submit before the driver started");
  caf::anon_send(driver, submit_atom::value, replica,
                 PacketPtr(std::make_shared<const Packet>(std::move(packet))));
}

Packet PipelineClient::wait(int group) {
  std::unique_lock lock(mutex_);
  arrived_.wait(lock, [&] { return !failure_.empty() || !outputs_[group].empty(); });
  if (!failure_.empty()) LIBAI_THROW(CommunicationError, failure_);
  Packet p = std::move(outputs_[group].front());
  outputs_[group].pop_front();
  return p;
}

void PipelineClient::fail(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = reason;
  }
  arrived_.notify_all();
}

bool PipelineClient::failed() const {
  std::lock_guard lock(mutex_);
  return !failure_.empty();
}

void PipelineClient::deliver(Packet packet) {
  {
    std::lock_guard lock(mutex_);
    outputs_[packet.group].push_back(std::move(packet));
  }
  arrived_.notify_all();
}

namespace {

struct DriverState {
  DriverSetup setup;
  DriverRoutesPtr routes;
  std::vector<std::vector<int>> credits;           // [replica][tp rank]
  std::vector<std::deque<PacketPtr>> queued;       // [replica]
  std::vector<std::uint32_t> seq_out;              // [replica]: packets sent to its first stage
  std::vector<comm::WorkHandle> pending_sends;
  std::unique_ptr<PinnedThread> thread;            // takes remote outputs off the data plane
  static inline const char* name = "libai.driver";
};

using Self = caf::stateful_actor<DriverState>;

void flush(Self* self, int replica) {
  auto& st = self->state;
  const ReplicaRoutes& r = (*st.routes)[size_t(replica)];
  auto& credits = st.credits[size_t(replica)];
  auto& queue = st.queued[size_t(replica)];
  while (!queue.empty()) {
    PacketPtr packet = queue.front();
    // A done packet takes no input slot (Note [Done packets] in stage_actor.cc).
    if (!packet->done)
      for (int c : credits)
        if (c == 0) return;
    queue.pop_front();
    const std::uint32_t seq = st.seq_out[size_t(replica)]++;
    for (size_t rank = 0; rank < r.first_stage.size(); ++rank) {
      if (!packet->done) --credits[rank];
      // Stage-0 inputs are token ids and masks: small enough to pack here.
      StageOutput out = prepare_output(*packet, r.first_stage[rank], st.setup.node,
                                       st.setup.data_plane.get(), seq, &st.pending_sends);
      deliver(self, r.first_stage[rank], out);
    }
  }
}

// The replica whose last stage sent the current message, or -1.
int replica_of_sender(Self* self) {
  const auto sender = self->current_sender();
  const auto& routes = *self->state.routes;
  for (size_t i = 0; i < routes.size(); ++i)
    if (routes[i].last_stage.actor && caf::actor_cast<caf::strong_actor_ptr>(
                                          routes[i].last_stage.actor) == sender)
      return int(i);
  return -1;
}

caf::behavior driver_behavior(Self* self, DriverSetup setup) {
  self->state.setup = std::move(setup);
  self->state.thread = std::make_unique<PinnedThread>("driver", Device::cpu());
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->state.thread->stop();
    self->quit(msg.reason);
  });
  return {
      [=](routes_atom, const DriverRoutesPtr& routes) {
        auto& st = self->state;
        st.routes = routes;
        st.credits.clear();
        for (const ReplicaRoutes& r : *routes)
          st.credits.emplace_back(r.first_stage.size(), r.first_stage_slots);
        st.queued.resize(routes->size());
        st.seq_out.assign(routes->size(), 0);
        for (size_t i = 0; i < routes->size(); ++i) flush(self, int(i));
      },
      [=](submit_atom, int replica, const PacketPtr& packet) {
        auto& st = self->state;
        try {
          LIBAI_CHECK(st.routes && replica >= 0 && size_t(replica) < st.routes->size(),
                      "driver: no replica ", replica);
          st.queued[size_t(replica)].push_back(packet);
          flush(self, replica);
        } catch (const std::exception& e) {
          st.setup.client->fail(e.what());
        }
      },
      [=](credit_atom, std::uint32_t slots) {
        auto& st = self->state;
        const auto sender = self->current_sender();
        for (size_t i = 0; i < st.routes->size(); ++i) {
          const auto& first = (*st.routes)[i].first_stage;
          for (size_t rank = 0; rank < first.size(); ++rank)
            if (caf::actor_cast<caf::strong_actor_ptr>(first[rank].actor) == sender) {
              st.credits[i][rank] += int(slots);
              flush(self, int(i));
              return;
            }
        }
      },
      [=](credit_atom, const wire::Bytes& bytes) {
        auto& st = self->state;
        try {
          const auto credit = wire::decode<wire::Credit>(bytes);
          const auto sender = self->current_sender();
          for (size_t i = 0; i < st.routes->size(); ++i) {
            const auto& first = (*st.routes)[i].first_stage;
            for (size_t rank = 0; rank < first.size(); ++rank)
              if (caf::actor_cast<caf::strong_actor_ptr>(first[rank].actor) == sender) {
                st.credits[i][rank] += int(credit.slots);
                flush(self, int(i));
                return;
              }
          }
        } catch (const std::exception& e) {
          st.setup.client->fail(e.what());
        }
      },
      [=](packet_atom, const PacketPtr& packet) {
        const int replica = replica_of_sender(self);
        self->state.setup.client->deliver(*packet);
        if (replica >= 0 && !packet->done)
          send_credit(self, (*self->state.routes)[size_t(replica)].last_stage,
                      self->state.setup.node);
      },
      [=](packet_atom, const wire::Bytes& header_bytes) {
        auto& st = self->state;
        const int replica = replica_of_sender(self);
        try {
          LIBAI_CHECK_KIND(CorruptInput, replica >= 0, "driver: a packet from an unknown actor");
          const Route from = (*st.routes)[size_t(replica)].last_stage;
          auto header = wire::decode<wire::PacketHeader>(header_bytes);
          auto client = st.setup.client;
          auto data_plane = st.setup.data_plane;
          st.thread->post([client, data_plane, from, header] {
            try {
              client->deliver(receive_packet(header, from.node, *data_plane));
            } catch (const std::exception& e) {
              client->fail(e.what());
            }
          });
          if (!header.done) send_credit(self, from, st.setup.node);
        } catch (const std::exception& e) {
          st.setup.client->fail(e.what());
        }
      },
      [=](stop_atom) {
        auto& st = self->state;
        for (auto& w : st.pending_sends) w->wait();
        st.thread->stop();
        self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_driver(caf::actor_system& system, DriverSetup setup) {
  auto client = setup.client;
  caf::actor driver = system.spawn(driver_behavior, std::move(setup));
  client->attach(driver);
  return driver;
}

}  // namespace libai::actors
