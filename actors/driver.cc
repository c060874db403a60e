#include "actors/driver.h"

#include "actors/credits.h"
#include "actors/packet_inbox.h"
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

std::string PipelineClient::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
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
  std::vector<std::vector<Credits>> credits;       // [replica][tp rank]
  std::vector<std::deque<PacketPtr>> queued;       // [replica]
  std::map<int, int> replica_of_group;             // from the submits: where outputs come from
  // Sends packets to first stages on other nodes (a send blocks until its bytes left: not on
  // an actor), in submit order.
  std::unique_ptr<PinnedThread> thread;
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
      for (const Credits& c : credits)
        if (c.available() == 0) return;
    queue.pop_front();
    for (size_t rank = 0; rank < r.first_stage.size(); ++rank) {
      if (!packet->done) credits[rank].take();
      const Route& to = r.first_stage[rank];
      if (to.node == st.setup.node) {
        self->send(to.actor, packet_atom::value, packet);
        continue;
      }
      LIBAI_CHECK(st.setup.plane != nullptr, "driver: a first stage on node ", to.node,
                  " but this process has no message plane");
      st.thread->post([plane = st.setup.plane, client = st.setup.client, to, packet] {
        try {
          send_packet(*plane, to.node, to.channel, *packet);
        } catch (const std::exception& e) {
          client->fail(e.what());
        }
      });
    }
  }
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
          st.credits.emplace_back(r.first_stage.size(), Credits(r.first_stage_slots));
        st.queued.resize(routes->size());
        for (size_t i = 0; i < routes->size(); ++i) flush(self, int(i));
      },
      [=](submit_atom, int replica, const PacketPtr& packet) {
        auto& st = self->state;
        try {
          LIBAI_CHECK(st.routes && replica >= 0 && size_t(replica) < st.routes->size(),
                      "driver: no replica ", replica);
          st.replica_of_group[packet->group] = replica;
          st.queued[size_t(replica)].push_back(packet);
          flush(self, replica);
        } catch (const std::exception& e) {
          st.setup.client->fail(e.what());
        }
      },
      [=](credit_atom, std::uint32_t slots, std::uint32_t link) {
        auto& st = self->state;
        for (size_t i = 0; st.routes && i < st.routes->size(); ++i) {
          const auto& first = (*st.routes)[i].first_stage;
          for (size_t rank = 0; rank < first.size(); ++rank)
            if (first[rank].channel == link) {
              try {
                st.credits[i][rank].give_back(slots, str_cat(first[rank].name, " on link ", link));
              } catch (const Error& e) {
                st.setup.client->fail(str_cat("driver: ", e.what()));
                return;
              }
              flush(self, int(i));
              return;
            }
        }
        st.setup.client->fail(str_cat("driver: a credit for link ", link, ", which it does not feed"));
      },
      [=](packet_atom, const PacketPtr& packet) {
        auto& st = self->state;
        try {
          auto it = st.replica_of_group.find(packet->group);
          LIBAI_CHECK_KIND(CorruptInput, it != st.replica_of_group.end(),
                           "driver: an output of group ", packet->group, ", which it never submitted");
          st.setup.client->deliver(*packet);
          if (!packet->done)
            send_credit(self, (*st.routes)[size_t(it->second)].last_stage, st.setup.node,
                        st.setup.plane.get());
        } catch (const std::exception& e) {
          st.setup.client->fail(e.what());
        }
      },
      [=](stop_atom) {
        self->state.thread->stop();
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
