#include "actors/cluster/guarded_publish.h"

#include <caf/binary_deserializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/scribe_impl.hpp>

#include "runtime/logging.h"

namespace libai::actors {
namespace {

namespace net = caf::io::network;
namespace basp = caf::io::basp;

// The first header a peer sends must be a BASP client handshake (Note [Guarding the control
// port]).
bool is_client_handshake(caf::execution_unit* ctx, const void* bytes, std::size_t size) {
  if (size != basp::header_size) return false;
  caf::binary_deserializer source(ctx, static_cast<const char*>(bytes), size);
  basp::header header;
  if (source(header)) return false;  // an error
  return basp::valid(header) && header.operation == basp::message_type::client_handshake;
}

class GuardedScribe final : public net::scribe_impl {
 public:
  GuardedScribe(net::default_multiplexer& mx, net::native_socket fd, std::string who,
                std::uint16_t port)
      : net::scribe_impl(mx, fd), who_(std::move(who)), local_port_(port), peer_(peer_of(fd)) {}

  bool consume(caf::execution_unit* ctx, const void* bytes, std::size_t size) override {
    if (checked_ || detached()) return scribe::consume(ctx, bytes, size);
    checked_ = true;
    if (is_client_handshake(ctx, bytes, size)) return scribe::consume(ctx, bytes, size);
    logger("cluster")->warn(
        "{}: {} bytes from {} on port {} that are not the cluster's protocol (not a BASP "
        "client handshake); dropping the connection",
        who_, size, peer_, local_port_);
    // BASP never sees the bytes; closing through the broker ends the connection as BASP's own
    // close of a bad peer does (the peer sees the end of the stream).
    parent()->close(hdl());
    return false;  // no more reads on this connection
  }

 protected:
  // The connection ended (the peer closed it, or it failed) before BASP's first header was
  // complete: fewer than 32 bytes, or none, ever came. BASP itself never hears of such a peer.
  caf::message detach_message() override {
    if (!checked_) {
      checked_ = true;
      logger("cluster")->warn(
          "{}: the connection from {} on port {} ended before it sent a whole BASP client "
          "handshake (not the cluster's protocol)",
          who_, peer_, local_port_);
    }
    return scribe::detach_message();
  }

 private:
  static std::string peer_of(net::native_socket fd) {
    auto host = net::remote_addr_of_fd(fd);
    auto port = net::remote_port_of_fd(fd);
    if (!host || !port) return "an unknown peer";
    return *host + ":" + std::to_string(*port);
  }

  const std::string who_;
  const std::uint16_t local_port_;
  const std::string peer_;
  bool checked_ = false;
};

class GuardedDoorman final : public net::doorman_impl {
 public:
  GuardedDoorman(net::default_multiplexer& mx, net::native_socket fd, std::string who)
      : net::doorman_impl(mx, fd), who_(std::move(who)) {}

  // The packaged doorman's accept, with our scribe.
  bool new_connection() override {
    if (detached()) return false;
    auto& mx = acceptor_.backend();
    const net::native_socket fd = acceptor_.accepted_socket();
    (void)net::keepalive(fd, true);
    auto scribe = caf::make_counted<GuardedScribe>(mx, fd, who_, port());
    const auto handle = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mx, handle);
  }

 private:
  const std::string who_;
};

}  // namespace

caf::expected<std::uint16_t> publish_guarded(caf::actor_system& system, const caf::actor& actor,
                                             std::uint16_t port, const char* addr, bool reuse,
                                             const std::string& who) {
  auto& mm = system.middleman();
  auto* mx = dynamic_cast<net::default_multiplexer*>(&mm.backend());
  if (mx == nullptr) return caf::make_error(caf::sec::runtime_error, "not the default multiplexer");
  auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
  if (!fd) return std::move(fd.error());
  auto bound = net::local_port_of_fd(*fd);
  if (!bound) {
    net::close_socket(*fd);
    return std::move(bound.error());
  }
  caf::io::doorman_ptr doorman = caf::make_counted<GuardedDoorman>(*mx, *fd, who);
  // What middleman().publish hands the BASP broker, with our doorman (it listens already: peers
  // that connect meanwhile wait in the socket's backlog).
  const caf::actor basp = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  caf::anon_send(basp, caf::publish_atom::value, std::move(doorman), *bound,
                 caf::actor_cast<caf::strong_actor_ptr>(actor), std::set<std::string>{});
  return *bound;
}

}  // namespace libai::actors
