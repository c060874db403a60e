// CAF 0.17 as the project uses it, with real actors and no mocks: an actor_system built
// without CAF_MAIN, event-based request/response with atom_constant atoms, monitors and
// down_msg, request timeouts, and a remote actor in a second process whose death is seen.
// Every blocking receive has a timeout, so a broken stack fails a test instead of hanging it.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "tests/common/child_process.h"
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using libai::testing::ChildProcess;
using libai::testing::read_all;

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using count_atom = caf::atom_constant<caf::atom("count")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using down_atom = caf::atom_constant<caf::atom("down")>;

// An embedded actor system: the config must outlive the system, hence one owner for both.
struct CafSystem {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  CafSystem() {
    config.load<caf::io::middleman>();
    config.set("scheduler.max-threads", 2);  // the test machines have 2 cores
    system = std::make_unique<caf::actor_system>(config);
  }
};

struct ponger_state {
  int pings = 0;
};

// Answers (ping, n) with (pong, n) and counts what it answered.
caf::behavior ponger(caf::stateful_actor<ponger_state>* self) {
  return {
      [=](ping_atom, int n) {
        ++self->state.pings;
        return std::make_tuple(pong_atom::value, n);
      },
      [=](count_atom) { return self->state.pings; },
      [=](stop_atom) { self->quit(caf::exit_reason::user_shutdown); },
  };
}

struct pinger_state {
  int matched = 0;
};

// Plays `rounds` sequential request/response rounds against `peer`, then answers the
// original (start, rounds) request with the number of pongs that echoed the right value.
void play_round(caf::stateful_actor<pinger_state>* self, caf::actor peer, int rounds, int i,
                caf::response_promise promise) {
  if (i == rounds) {
    promise.deliver(self->state.matched);
    return;
  }
  self->request(peer, 5s, ping_atom::value, i)
      .then(
          [=](pong_atom, int echoed) mutable {
            if (echoed == i) ++self->state.matched;
            play_round(self, peer, rounds, i + 1, promise);
          },
          [=](caf::error& err) mutable { promise.deliver(std::move(err)); });
}

caf::behavior pinger(caf::stateful_actor<pinger_state>* self, caf::actor peer) {
  return {
      [=](start_atom, int rounds) {
        auto promise = self->make_response_promise();
        play_round(self, peer, rounds, 0, promise);
        return promise;
      },
  };
}

// Monitors `target` from an event-based actor and reports the down_msg to `report_to`.
caf::behavior watcher(caf::event_based_actor* self, caf::actor target, caf::actor report_to) {
  self->monitor(target);
  self->set_down_handler([=](caf::down_msg& msg) {
    self->send(report_to, down_atom::value, msg.source == target.address(),
               msg.reason == caf::exit_reason::user_shutdown);
    self->quit();
  });
  return {[](ping_atom, int) {}};
}

struct silent_state {
  std::vector<caf::response_promise> held;
};

// Accepts a request and never answers it: the requester's timeout must fire.
caf::behavior silent(caf::stateful_actor<silent_state>* self) {
  return {[=](ping_atom, int) {
    self->state.held.push_back(self->make_response_promise());
    return self->state.held.back();
  }};
}

// ---------------------------------------------------------------------------------------------
// Two processes: the child publishes a ponger on 127.0.0.1 port 0 and dies abruptly when told;
// the parent pings it through the middleman and must see the remote actor go down.

[[noreturn]] void remote_child(int fd) {
  int code = 1;
  try {
    CafSystem caf;
    auto pong = caf.system->spawn(ponger);
    auto port = caf.system->middleman().publish(pong, 0, "127.0.0.1");
    if (port) {
      const std::uint16_t value = *port;
      char go_away = 0;
      if (::write(fd, &value, sizeof value) == sizeof value && read_all(fd, &go_away, 1, 20000)) {
        code = 0;
      }
    }
    // Die like a crashed node: no actor_system shutdown, sockets closed by the kernel.
    ::_exit(code);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caf child: %s\n", e.what());
  }
  ::_exit(code);
}

// First in the file, so that the fork happens before this process has run other actor systems.
TEST(CafSmoke_Dist, RemoteActorAcrossProcessesAndItsDeathIsSeen) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    remote_child(fds[1]);  // never returns into gtest
  }
  ChildProcess child(pid);
  ::close(fds[1]);
  std::uint16_t port = 0;
  ASSERT_TRUE(read_all(fds[0], &port, sizeof port, 20000)) << "child did not publish";
  ASSERT_NE(port, 0);

  CafSystem caf;
  auto remote = caf.system->middleman().remote_actor("127.0.0.1", port);
  ASSERT_TRUE(remote) << caf.system->render(remote.error());
  caf::scoped_actor self{*caf.system};
  for (int i = 0; i < 10; ++i) {
    self->request(*remote, 5s, ping_atom::value, 40 + i)
        .receive([&](pong_atom, int n) { EXPECT_EQ(n, 40 + i); },
                 [&](caf::error& err) { ADD_FAILURE() << caf.system->render(err); });
  }

  self->monitor(*remote);
  const char go_away = 1;
  ASSERT_EQ(::write(fds[0], &go_away, 1), 1);
  bool down = false;
  self->receive([&](caf::down_msg& msg) { down = msg.source == remote->address(); },
                caf::after(10s) >> [] {});
  EXPECT_TRUE(down) << "no down_msg for the dead remote actor within 10 s";
  EXPECT_EQ(child.wait(10s), 0);
  ::close(fds[0]);
}

TEST(CafSmoke, PingPongRoundsAreCounted) {
  CafSystem caf;
  auto pong = caf.system->spawn(ponger);
  auto ping = caf.system->spawn(pinger, pong);
  caf::scoped_actor self{*caf.system};
  constexpr int kRounds = 200;
  int matched = -1, pings = -1;
  self->request(ping, 10s, start_atom::value, kRounds)
      .receive([&](int n) { matched = n; },
               [&](caf::error& err) { ADD_FAILURE() << caf.system->render(err); });
  self->request(pong, 5s, count_atom::value)
      .receive([&](int n) { pings = n; },
               [&](caf::error& err) { ADD_FAILURE() << caf.system->render(err); });
  EXPECT_EQ(matched, kRounds);
  EXPECT_EQ(pings, kRounds);
  self->send_exit(ping, caf::exit_reason::user_shutdown);
  self->send_exit(pong, caf::exit_reason::user_shutdown);
}

TEST(CafSmoke, MonitorOfAQuittingActorGetsDownMsg) {
  CafSystem caf;
  auto worker = caf.system->spawn(ponger);
  caf::scoped_actor self{*caf.system};
  auto watch = caf.system->spawn(watcher, worker, caf::actor{self});  // event-based monitor
  self->monitor(worker);                                              // blocking monitor
  self->send(worker, stop_atom::value);

  bool blocking_seen = false;
  self->receive(
      [&](caf::down_msg& msg) {
        blocking_seen =
            msg.source == worker.address() && msg.reason == caf::exit_reason::user_shutdown;
      },
      caf::after(5s) >> [] {});
  EXPECT_TRUE(blocking_seen) << "no down_msg at the scoped_actor";

  bool source_ok = false, reason_ok = false;
  self->receive(
      [&](down_atom, bool source, bool reason) {
        source_ok = source;
        reason_ok = reason;
      },
      caf::after(5s) >> [] {});
  EXPECT_TRUE(source_ok && reason_ok) << "the watcher's down handler did not report";
}

TEST(CafSmoke, RequestToADeadActorIsAnErrorNotAHang) {
  CafSystem caf;
  auto worker = caf.system->spawn(ponger);
  caf::scoped_actor self{*caf.system};
  self->monitor(worker);
  self->send(worker, stop_atom::value);
  self->receive([](caf::down_msg&) {}, caf::after(5s) >> [] { ADD_FAILURE() << "not down"; });
  bool got_error = false;
  self->request(worker, 2s, ping_atom::value, 1)
      .receive([](pong_atom, int) { ADD_FAILURE() << "a dead actor answered"; },
               [&](caf::error&) { got_error = true; });
  EXPECT_TRUE(got_error);
}

TEST(CafSmoke, UnansweredRequestTimesOut) {
  CafSystem caf;
  auto mute = caf.system->spawn(silent);
  caf::scoped_actor self{*caf.system};
  const auto start = Clock::now();
  caf::error error;
  self->request(mute, 200ms, ping_atom::value, 1)
      .receive([](pong_atom, int) { ADD_FAILURE() << "silent actor answered"; },
               [&](caf::error& err) { error = std::move(err); });
  EXPECT_EQ(error, caf::sec::request_timeout) << caf.system->render(error);
  EXPECT_LT(Clock::now() - start, 3s);
  self->send_exit(mute, caf::exit_reason::user_shutdown);
}

}  // namespace
