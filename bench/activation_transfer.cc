// Activation packets between two processes on the runtime's data plane, against memcpy
// measured in the same run: rank 0 packs a packet of one f32 activation tensor
// (actors/packet.h: a Cap'n Proto header + one contiguous byte tensor) and posts its bytes on
// the ucx communicator, as a stage's thread does (prepare_output); rank 1 takes them off with
// receive_packet (buffer_for + recv + unpack), as the next stage's thread does.
//
//   build/bench/bench_activation_transfer [--sizes-mb 1,4,16,64] [--rounds 9] [--json FILE]
//
// Per size, after a warm-up, `rounds` rounds of, in turn:
//   memcpy   one thread copies `bytes` between two warm buffers (rank 0, rank 1 idle)
//   pack     pack() alone; unpack: unpack() of a packed buffer alone (rank 0)
//   raw      rank 0 streams N tensors of `bytes` with send_async, rank 1 recv()s each into
//            one buffer, then sends a 4-byte ack: the transport alone
//   packet   the same N as packets: pack, header, send_async; receive_packet on the other side
// A stream's time runs on rank 0 from its first call to the ack, so one small-message
// latency (~60 us) is spread over N packets (N = 512 MB / bytes, from 4 to 128). GB/s =
// N x bytes / time; each ratio is taken within a round, then the median and min-max over rounds.
//
// The header goes here as a 1 KiB UCX message (length + Cap'n Proto bytes) on its own tag; in
// the runtime it goes through CAF beside the credit messages. Both are one small message.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "actors/packet.h"
#include "actors/stage_actor.h"
#include "runtime/comm/spmd.h"
#include "runtime/error.h"
#include "runtime/progress.h"
#include "bench/summary.h"

namespace libai::actors {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kHeaderTag = 1, kAckTag = 2, kRawTag = 3, kChannel = 1;
constexpr std::int64_t kHeaderCapacity = 1024;

struct Options {
  std::vector<int> sizes_mb{1, 4, 16, 64};
  int rounds = 9;
  std::string json;
};

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using bench::Summary;
using bench::summarize;

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

void send_ack(comm::Communicator& comm) { comm.send(Tensor::zeros({1}, DType::f32), 0, kAckTag); }

void wait_ack(comm::Communicator& comm) {
  Tensor ack = Tensor::empty({1}, DType::f32);
  comm.recv(ack, 1, kAckTag);
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

// The transport alone: rank 0 sends `n` tensors, rank 1 receives each into one buffer.
double raw_stream(comm::Communicator& comm, Tensor& x, int n) {
  if (comm.rank() == 1) {
    for (int i = 0; i < n; ++i) {
      comm.recv(x, 0, kRawTag);
      check(x, 7, "raw");
    }
    send_ack(comm);
    return 0;
  }
  mark(x, 7);
  const auto start = Clock::now();
  std::vector<comm::WorkHandle> sends;
  for (int i = 0; i < n; ++i) sends.push_back(comm.send_async(x, 1, kRawTag));
  for (auto& w : sends) w->wait();
  wait_ack(comm);
  return since(start);
}

// Packets as the stage actors move them between processes.
double packet_stream(comm::Communicator& comm, Tensor& x, int n) {
  if (comm.rank() == 1) {
    Tensor control = Tensor::empty({kHeaderCapacity}, DType::u8);
    for (int i = 0; i < n; ++i) {
      comm.recv(control, 0, kHeaderTag);
      std::uint32_t length = 0;
      std::memcpy(&length, control.data_ptr(), sizeof length);
      const auto* bytes = static_cast<const std::uint8_t*>(control.data_ptr()) + sizeof length;
      const auto header = wire::decode<wire::PacketHeader>({bytes, length});
      Packet packet = receive_packet(header, 0, comm);
      LIBAI_CHECK(packet.step == i, "packet: expected step ", i, ", got ", describe(packet));
      check(packet.tensors.at("hidden_states"), i, "packet");
    }
    send_ack(comm);
    return 0;
  }
  const auto start = Clock::now();
  std::vector<comm::WorkHandle> pending;
  for (int i = 0; i < n; ++i) {
    mark(x, i);
    Packet packet{.group = 0, .step = i, .done = false, .tensors = {{"hidden_states", x}}};
    PackedPacket packed = pack(packet, packet_tag(kChannel, std::uint32_t(i)));
    const wire::Bytes header = wire::encode(packed.header);
    LIBAI_CHECK(std::int64_t(header.size() + 4) <= kHeaderCapacity, "header of ", header.size(),
                " bytes");
    Tensor control = Tensor::zeros({kHeaderCapacity}, DType::u8);
    const auto length = std::uint32_t(header.size());
    std::memcpy(control.data_ptr(), &length, sizeof length);
    std::memcpy(static_cast<std::uint8_t*>(control.data_ptr()) + sizeof length, header.data(),
                header.size());
    pending.push_back(comm.send_async(control, 1, kHeaderTag));
    pending.push_back(comm.send_async(packed.bytes, 1, packed.header.tag));
    // As the stage's thread does: let the finished sends' buffers go back to the pool.
    std::erase_if(pending, [](const comm::WorkHandle& w) { return w->completed(); });
  }
  for (auto& w : pending) w->wait();
  wait_ack(comm);
  return since(start);
}

// Packets per stream: about 512 MB per stream, so that one ack is noise.
int packets_for(std::int64_t bytes) {
  return int(std::clamp<std::int64_t>((std::int64_t(512) << 20) / bytes, 4, 128));
}

struct Row {
  std::int64_t bytes = 0;
  int packets = 0;
  std::vector<double> memcpy_gbs, raw_gbs, packet_gbs, pack_us, unpack_us;
};

void print(const std::vector<Row>& rows, const Options& o) {
  std::printf(
      "\n| size | packets per stream | memcpy GB/s | raw UCX GB/s | packet GB/s | packet / "
      "memcpy | packet / (memcpy / 2) | raw / memcpy | packet / raw | pack us | unpack us |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
  for (const Row& r : rows) {
    std::vector<double> vs_copy, vs_two, raw_vs_copy, vs_raw;
    for (size_t i = 0; i < r.memcpy_gbs.size(); ++i) {
      vs_copy.push_back(r.packet_gbs[i] / r.memcpy_gbs[i]);
      vs_two.push_back(2 * r.packet_gbs[i] / r.memcpy_gbs[i]);
      raw_vs_copy.push_back(r.raw_gbs[i] / r.memcpy_gbs[i]);
      vs_raw.push_back(r.packet_gbs[i] / r.raw_gbs[i]);
    }
    const Summary copy = summarize(r.memcpy_gbs), raw = summarize(r.raw_gbs),
                  packet = summarize(r.packet_gbs), a = summarize(vs_copy), b = summarize(vs_two),
                  c = summarize(raw_vs_copy), d = summarize(vs_raw), pk = summarize(r.pack_us),
                  un = summarize(r.unpack_us);
    std::printf(
        "| %lld MB | %d | %.2f | %.3f | %.3f | %.4f (%.4f-%.4f) | %.4f (%.4f-%.4f) | %.4f "
        "(%.4f-%.4f) | %.2f (%.2f-%.2f) | %.0f | %.1f |\n",
        (long long)(r.bytes >> 20), r.packets, copy.median, raw.median, packet.median, a.median,
        a.min, a.max, b.median, b.min, b.max, c.median, c.min, c.max, d.median, d.min, d.max,
        pk.median, un.median);
    if (json)
      std::fprintf(json,
                   "{\"bench\": \"activation_transfer\", \"bytes\": %lld, \"packets\": %d, "
                   "\"rounds\": %zu, \"memcpy_gbs\": %.3f, \"raw_gbs\": %.4f, \"packet_gbs\": "
                   "%.4f, \"packet_vs_memcpy\": %.5f, \"packet_vs_memcpy_min\": %.5f, "
                   "\"packet_vs_memcpy_max\": %.5f, \"raw_vs_memcpy\": %.5f, "
                   "\"packet_vs_raw\": %.4f, \"pack_us\": %.1f, \"unpack_us\": %.2f}\n",
                   (long long)r.bytes, r.packets, r.memcpy_gbs.size(), copy.median, raw.median,
                   packet.median, a.median, a.min, a.max, c.median, d.median, pk.median, un.median);
  }
  if (json) std::fclose(json);
  std::fflush(stdout);
}

void run_rank(comm::Communicator& comm, const Options& o) {
  const bool report = comm.rank() == 0;
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
    for (int round = 0; round <= o.rounds; ++round) {  // round 0: warm-up, not recorded
      double copy = 0, pack_s = 0, unpack_s = 0;
      if (report) {
        copy = median_seconds(copies, [&] {
          std::memcpy(to.data(), from.data(), from.size());
          asm volatile("" : : "r"(to.data()) : "memory");
        });
        Packet packet{.group = 0, .step = 0, .done = false, .tensors = {{"hidden_states", x}}};
        PackedPacket packed;
        pack_s = median_seconds(copies, [&] { packed = pack(packet, 1); });
        unpack_s = median_seconds(copies, [&] {
          Packet back = unpack(packed.header, packed.bytes);
          asm volatile("" : : "r"(&back) : "memory");
        });
      }
      comm.barrier();
      const double raw = raw_stream(comm, x, row.packets);
      comm.barrier();
      const double packets = packet_stream(comm, x, row.packets);
      comm.barrier();
      if (report && round > 0) {
        const double moved = double(row.bytes) * row.packets;
        row.memcpy_gbs.push_back(double(row.bytes) / copy * 1e-9);
        row.raw_gbs.push_back(moved / raw * 1e-9);
        row.packet_gbs.push_back(moved / packets * 1e-9);
        row.pack_us.push_back(pack_s * 1e6);
        row.unpack_us.push_back(unpack_s * 1e6);
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
  if (report) print(rows, o);
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
  CLI::App app{"Activation packets between two processes (pack + UCX + unpack) against memcpy"};
  app.add_option("--sizes-mb", sizes, "packet sizes in MiB, comma-separated");
  app.add_option("--rounds", o.rounds, "timed rounds per size")->check(CLI::PositiveNumber);
  app.add_option("--json", o.json, "also write one JSON line per size to this file");
  app.allow_extras();  // tools/run_benchmarks.sh passes Google Benchmark's flags to every bench
  CLI11_PARSE(app, argc, argv);
  try {
    o.sizes_mb = libai::actors::parse_list(sizes);
    std::printf(
        "activation packets between 2 processes (ucx communicator on loopback), f32, "
        "sizes %s MiB, %d rounds\n",
        sizes.c_str(), o.rounds);
    std::fflush(stdout);
    // Forks before this process starts any thread of its own (runtime/comm/spmd.h).
    libai::comm::run_spmd_processes(
        2, [&](libai::comm::Communicator& comm) { libai::actors::run_rank(comm, o); },
        std::chrono::seconds(300));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_activation_transfer: %s\n", e.what());
    return 1;
  }
  return 0;
}
