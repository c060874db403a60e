// Activation packets between two processes on the runtime's message plane, against memcpy
// measured in the same run, and the latency of one pipeline hop between the processes.
//
//   build/bench/bench_activation_transfer [--sizes-mb 1,4,16,64] [--rounds 9]
//                                         [--transport shm|ucx] [--hops 2000] [--json FILE]
//
// Two forked processes with the shm communicator (or, --transport ucx, the ucx one on
// loopback, as between hosts); the message plane over it is the one a node of the runtime
// makes (actors/packet_inbox.h, Note [Choosing the message plane]). Per size, after a warm-up, `rounds` rounds
// of, in turn:
//   memcpy   one thread copies `bytes` between two warm buffers (rank 0, rank 1 idle)
//   raw      rank 0 sends N messages of one `bytes` block through the plane; rank 1's handler
//            reads each into one buffer, then answers with an empty message: the plane alone
//   packet   the same N as packets of one f32 tensor, as a stage's thread sends them
//            (send_packet: Cap'n Proto header + the tensor's bytes as they are); rank 1's
//            packet inbox allocates the tensor from the header, reads the bytes into it and
//            hands (packet_atom, PacketPtr) to an actor, which checks it and answers after N
// A stream's time runs on rank 0 from its first send to the answer, so one small-message
// latency is spread over N packets (N = 512 MB / bytes, from 4 to 128). GB/s = N x bytes /
// time; each ratio is taken within a round, then the median and min-max over rounds.
//
// hop: a packet of 16 f32 goes from rank 0's thread to rank 1's actor (through its inbox),
// which hands it to a thread of its own that sends it back the same way: half that round trip
// is one pipeline hop between processes (the message plane, the inbox, the CAF message to the
// stage actor, and the actor's post to its stage thread), median and p90 over --hops.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "actors/messages.h"
#include "actors/packet_inbox.h"
#include "actors/pinned_thread.h"
#include "bench/summary.h"
#include "runtime/comm/spmd.h"
#include "runtime/error.h"
#include "runtime/progress.h"

namespace libai::actors {
namespace {

using Clock = std::chrono::steady_clock;

// Channels: raw blocks, the packet stream, the hop's two directions, the answers.
constexpr std::uint32_t kRawChannel = 1, kPacketChannel = 2, kHopOut = 3, kHopBack = 4, kAnswer = 5;

struct Options {
  std::vector<int> sizes_mb{1, 4, 16, 64};
  int rounds = 9;
  int hops = 2000;
  std::string transport = "shm";
  std::string json;
};

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using bench::summarize;
using bench::Summary;

// Seconds per call: the median over `reps` calls.
template <typename Fn>
double median_seconds(int reps, Fn&& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    t.push_back(since(start));
  }
  return summarize(t).median;
}

// The sentinel values a receiver checks: the first and last elements carry the packet's index.
void mark(Tensor& x, int index) {
  float* data = x.data<float>();
  data[0] = data[x.numel() - 1] = float(index);
}

void check(const Tensor& x, int index, const char* what) {
  const float* data = x.data<float>();
  LIBAI_CHECK(data[0] == float(index) && data[x.numel() - 1] == float(index), what, ": packet ",
              index, " arrived with ", data[0], " ... ", data[x.numel() - 1]);
}

// One process's side: the plane with its inbox, an actor that takes the packets the inbox
// hands over, and the scoped actor of the main thread that waits for answers.
struct Side {
  comm::Communicator& comm;
  caf::actor_system& system;
  std::shared_ptr<comm::MessagePlane> plane;
  std::shared_ptr<PacketInbox> inbox;
  caf::scoped_actor me;
  // The raw stream (rank 1's receive thread): one buffer, the messages counted.
  Tensor raw_buffer;
  std::atomic<int> raw_received{0};
  int raw_expected = 0;
  // Rank 1: streams it took in full. It waits for each before the next barrier: a collective
  // holds the ucx communicator's thread, and with it the plane's transfers.
  std::atomic<int> streams_done{0};
  std::atomic<int> echoed{0};  // rank 1: hop packets sent back

  Side(comm::Communicator& c, caf::actor_system& s) : comm(c), system(s), me(s) {}
};

// Waits for an answer (a credit message) on the main thread.
std::uint32_t wait_answer(Side& side) {
  std::uint32_t got = 0;
  side.me->receive(
      [&](credit_atom, std::uint32_t slots, std::uint32_t) { got = slots; },
      caf::after(std::chrono::seconds(120)) >>
          [] { LIBAI_THROW(CommunicationError, "no answer from rank 1 within 120 s"); });
  return got;
}

void wait_streams(Side& side, int count) {
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (side.streams_done.load() < count) {
    LIBAI_CHECK_KIND(CommunicationError, Clock::now() < deadline, "rank 1: stream ", count,
                     " did not end within 120 s");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// The plane alone: rank 0 sends `n` blocks, rank 1's handler reads each into one buffer.
double raw_stream(Side& side, Tensor& x, int n) {
  if (side.comm.rank() == 1) {
    wait_streams(side, side.streams_done.load() + 1);
    return 0;
  }
  mark(x, 7);
  const auto start = Clock::now();
  const std::vector<comm::ConstBlock> block{{x.data_ptr(), x.nbytes()}};
  for (int i = 0; i < n; ++i) side.plane->send(1, kRawChannel, {}, block);
  LIBAI_CHECK(int(wait_answer(side)) == n, "raw: the answer counts another number");
  return since(start);
}

// Packets as the stage actors move them between processes.
double packet_stream(Side& side, Tensor& x, int n) {
  if (side.comm.rank() == 1) {
    wait_streams(side, side.streams_done.load() + 1);
    return 0;
  }
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    mark(x, i);
    send_packet(*side.plane, 1, kPacketChannel,
                Packet{.group = 0, .step = i, .done = false, .tensors = {{"hidden_states", x}}});
  }
  LIBAI_CHECK(int(wait_answer(side)) == n, "packet: the answer counts another number");
  return since(start);
}

// Rank 1's actor for the packet stream: checks each packet, answers after `n`.
caf::behavior packet_sink(caf::event_based_actor* self, comm::MessagePlane* plane,
                          std::shared_ptr<int> expected, std::atomic<int>* streams_done) {
  (void)self;
  auto count = std::make_shared<int>(0);
  return {
      [=](packet_atom, const PacketPtr& p) {
        check(p->tensors.at("hidden_states"), p->step, "packet");
        if (++*count == *expected) {
          *count = 0;
          send_credit_message(*plane, 0, kAnswer, std::uint32_t(*expected));
          ++*streams_done;
        }
      },
      [=](int n) { *expected = n; },
  };
}

// Rank 1's actor for the hop: like a stage actor, it hands the packet to its thread, which
// sends it back.
caf::behavior hop_echo(caf::event_based_actor* self, comm::MessagePlane* plane,
                       std::shared_ptr<PinnedThread> thread, std::atomic<int>* echoed) {
  (void)self;
  return {
      [=](packet_atom, const PacketPtr& p) {
        thread->post([plane, p, echoed] {
          send_packet(*plane, 0, kHopBack, *p);
          ++*echoed;
        });
      },
  };
}

// Packets per stream: about 512 MB per stream, so that one ack is noise.
int packets_for(std::int64_t bytes) {
  return int(std::clamp<std::int64_t>((std::int64_t(512) << 20) / bytes, 4, 128));
}

struct Row {
  std::int64_t bytes = 0;
  int packets = 0;
  std::vector<double> memcpy_gbs, raw_gbs, packet_gbs;
};

void print(const std::vector<Row>& rows, std::vector<double> hop_seconds, const Options& o,
           const std::string& transport) {
  std::sort(hop_seconds.begin(), hop_seconds.end());
  const Summary hop = summarize(hop_seconds);
  const double p90 = hop_seconds[hop_seconds.size() * 9 / 10];
  std::printf(
      "\n| size | packets per stream | memcpy GB/s | raw plane GB/s | packet GB/s | packet / "
      "memcpy | raw / memcpy | packet / raw |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
  for (const Row& r : rows) {
    std::vector<double> vs_copy, raw_vs_copy, vs_raw;
    for (size_t i = 0; i < r.memcpy_gbs.size(); ++i) {
      vs_copy.push_back(r.packet_gbs[i] / r.memcpy_gbs[i]);
      raw_vs_copy.push_back(r.raw_gbs[i] / r.memcpy_gbs[i]);
      vs_raw.push_back(r.packet_gbs[i] / r.raw_gbs[i]);
    }
    const Summary copy = summarize(r.memcpy_gbs), raw = summarize(r.raw_gbs),
                  packet = summarize(r.packet_gbs), a = summarize(vs_copy),
                  c = summarize(raw_vs_copy), d = summarize(vs_raw);
    std::printf(
        "| %lld MB | %d | %.2f | %.3f | %.3f | %.4f (%.4f-%.4f) | %.4f (%.4f-%.4f) | %.2f "
        "(%.2f-%.2f) |\n",
        (long long)(r.bytes >> 20), r.packets, copy.median, raw.median, packet.median, a.median,
        a.min, a.max, c.median, c.min, c.max, d.median, d.min, d.max);
    if (json)
      std::fprintf(json,
                   "{\"bench\": \"activation_transfer\", \"transport\": \"%s\", \"bytes\": "
                   "%lld, \"packets\": %d, \"rounds\": %zu, \"memcpy_gbs\": %.3f, \"raw_gbs\": "
                   "%.4f, \"packet_gbs\": %.4f, \"packet_vs_memcpy\": %.5f, "
                   "\"packet_vs_memcpy_min\": %.5f, \"packet_vs_memcpy_max\": %.5f, "
                   "\"raw_vs_memcpy\": %.5f, \"packet_vs_raw\": %.4f}\n",
                   transport.c_str(), (long long)r.bytes, r.packets, r.memcpy_gbs.size(),
                   copy.median, raw.median, packet.median, a.median, a.min, a.max, c.median,
                   d.median);
  }
  std::printf("\nhop between processes (%s): median %.1f us, p90 %.1f us, min %.1f us (%d hops)\n",
              transport.c_str(), hop.median * 1e6, p90 * 1e6, hop.min * 1e6, o.hops);
  if (json) {
    std::fprintf(json,
                 "{\"bench\": \"pipeline_hop\", \"transport\": \"%s\", \"hops\": %d, "
                 "\"hop_us\": %.2f, \"hop_p90_us\": %.2f, \"hop_min_us\": %.2f}\n",
                 transport.c_str(), o.hops, hop.median * 1e6, p90 * 1e6, hop.min * 1e6);
    std::fclose(json);
  }
  std::fflush(stdout);
}

// Half of each round trip of a 64-byte packet: rank 0's thread -> rank 1's inbox -> actor ->
// its thread -> rank 0's inbox -> rank 0's (scoped) actor.
std::vector<double> hops(Side& side, int count) {
  std::vector<double> out;
  if (side.comm.rank() == 1) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (side.echoed.load() < count + 50) {
      LIBAI_CHECK_KIND(CommunicationError, Clock::now() < deadline, "rank 1: ", side.echoed.load(),
                       " hops echoed within 120 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return out;
  }
  Tensor x = Tensor::zeros({16});
  for (int i = -50; i < count; ++i) {  // the first 50: warm-up
    const auto start = Clock::now();
    send_packet(*side.plane, 1, kHopOut,
                Packet{.group = 0, .step = i + 50, .done = false, .tensors = {{"x", x}}});
    bool back = false;
    side.me->receive([&](packet_atom, const PacketPtr&) { back = true; },
                     caf::after(std::chrono::seconds(10)) >> [] {});
    LIBAI_CHECK(back, "hop ", i, ": no packet back within 10 s");
    if (i >= 0) out.push_back(since(start) / 2);
  }
  return out;
}

void run_rank(comm::Communicator& comm, const Options& o) {
  const bool report = comm.rank() == 0;
  caf::actor_system_config config;
  configure_actor_system(config, 2);  // as a node of the runtime configures its actor system
  caf::actor_system system{config};
  // The plane closes (at the end of this function) before the communicator does.
  std::shared_ptr<comm::Communicator> world(&comm, [](comm::Communicator*) {});
  Side side(comm, system);
  side.plane = make_node_message_plane(world, std::chrono::seconds(60));
  side.inbox = std::make_shared<PacketInbox>(comm.rank());
  const std::string transport = side.plane->transport();
  auto expected = std::make_shared<int>(0);
  auto echo_thread = std::make_shared<PinnedThread>("echo", Device::cpu());
  caf::actor sink, echo;
  if (comm.rank() == 1) {
    sink = system.spawn(packet_sink, side.plane.get(), expected, &side.streams_done);
    echo = system.spawn(hop_echo, side.plane.get(), echo_thread, &side.echoed);
    side.inbox->add(kPacketChannel, sink);
    side.inbox->add(kHopOut, echo);
  } else {
    side.inbox->add(credit_channel(kAnswer), caf::actor{side.me});
    side.inbox->add(kHopBack, caf::actor{side.me});
  }
  side.plane->start(
      [&side](comm::IncomingMessage& m) {
        if (m.channel() != kRawChannel) return side.inbox->handle(m);
        m.read(side.raw_buffer.data_ptr(), m.payload_bytes());
        check(side.raw_buffer, 7, "raw");
        if (++side.raw_received == side.raw_expected) {
          side.raw_received = 0;
          send_credit_message(*side.plane, 0, kAnswer, std::uint32_t(side.raw_expected));
          ++side.streams_done;
        }
      },
      [](const std::string& error) { std::fprintf(stderr, "message plane: %s\n", error.c_str()); });

  std::int64_t total = 0;
  for (int mb : o.sizes_mb)  // MB moved: two streams per round
    total += 2 * std::int64_t(mb) * packets_for(std::int64_t(mb) << 20) * (o.rounds + 1);
  Progress progress("activation_transfer", total, "MB", 2.0);
  std::vector<Row> rows;
  for (int mb : o.sizes_mb) {
    Row row;
    row.bytes = std::int64_t(mb) << 20;
    row.packets = packets_for(row.bytes);
    const std::int64_t count = row.bytes / 4;
    Tensor x = Tensor::ones({count});  // [count] f32: one stage's activations
    std::vector<char> from(size_t(row.bytes), 1), to(size_t(row.bytes), 0);
    const int copies = int(std::clamp<std::int64_t>((std::int64_t(256) << 20) / row.bytes, 3, 64));
    if (comm.rank() == 1) {
      caf::anon_send(sink, row.packets);
      side.raw_buffer = Tensor::empty(x.shape(), x.dtype());
      side.raw_expected = row.packets;
    }
    comm.barrier();                                    // the receiving side is ready
    for (int round = 0; round <= o.rounds; ++round) {  // round 0: warm-up, not recorded
      double copy = 0;
      if (report)
        copy = median_seconds(copies, [&] {
          std::memcpy(to.data(), from.data(), from.size());
          asm volatile("" : : "r"(to.data()) : "memory");
        });
      const double raw = raw_stream(side, x, row.packets);
      const double packets = packet_stream(side, x, row.packets);
      if (report && round > 0) {
        const double moved = double(row.bytes) * row.packets;
        row.memcpy_gbs.push_back(double(row.bytes) / copy * 1e-9);
        row.raw_gbs.push_back(moved / raw * 1e-9);
        row.packet_gbs.push_back(moved / packets * 1e-9);
      }
      if (report) {
        char detail[96];
        std::snprintf(detail, sizeof detail, "%d MB round %d/%d: raw %.3f GB/s, packet %.3f GB/s",
                      mb, round, o.rounds, double(row.bytes) * row.packets / raw * 1e-9,
                      double(row.bytes) * row.packets / packets * 1e-9);
        progress.advance(2 * std::int64_t(mb) * row.packets, detail);
      }
    }
    if (report) rows.push_back(std::move(row));
  }
  comm.barrier();
  const std::vector<double> hop = hops(side, o.hops);
  comm.barrier();
  if (report) print(rows, hop, o, transport);
  if (sink) caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  if (echo) caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
  side.plane.reset();  // says goodbye to the other rank, which does the same now
  echo_thread->stop();
  side.inbox.reset();
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = text.find(',', start);
    out.push_back(std::stoi(text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace
}  // namespace libai::actors

int main(int argc, char** argv) {
  libai::actors::Options o;
  std::string sizes = "1,4,16,64";
  CLI::App app{
      "Activation packets between two processes on the message plane against memcpy, "
      "and the pipeline hop between them"};
  app.add_option("--sizes-mb", sizes, "packet sizes in MiB, comma-separated");
  app.add_option("--rounds", o.rounds, "timed rounds per size")->check(CLI::PositiveNumber);
  app.add_option("--hops", o.hops, "timed hops")->check(CLI::PositiveNumber);
  app.add_option("--transport", o.transport,
                 "the data plane between the two processes: shm (one host) or ucx (as between "
                 "hosts); the message plane follows it (actors/packet_inbox.h)")
      ->check(CLI::IsMember({"shm", "ucx"}));
  app.add_option("--json", o.json, "also write one JSON line per size to this file");
  app.allow_extras();  // tools/run_benchmarks.sh passes Google Benchmark's flags to every bench
  CLI11_PARSE(app, argc, argv);
  try {
    o.sizes_mb = libai::actors::parse_list(sizes);
    std::printf(
        "activation packets between 2 processes (data plane %s), f32, sizes %s MiB, %d "
        "rounds\n",
        o.transport.c_str(), sizes.c_str(), o.rounds);
    std::fflush(stdout);
    // Forks before this process starts any thread of its own (runtime/comm/spmd.h).
    libai::comm::run_spmd_processes(
        2, [&](libai::comm::Communicator& comm) { libai::actors::run_rank(comm, o); },
        std::chrono::seconds(300), o.transport);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_activation_transfer: %s\n", e.what());
    return 1;
  }
  return 0;
}
