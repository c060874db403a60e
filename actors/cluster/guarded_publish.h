// Publishing an actor on a TCP port (CAF's BASP) so that a peer that does not speak the
// protocol is named in the log and dropped, instead of going unnoticed.
//
//   auto port = publish_guarded(system, caf::actor{self}, 7000, nullptr, true, "node 0");
//   // a port scanner, an HTTP client, a process of another cluster's version:
//   // [cluster] warning: node 0: 32 bytes from 10.0.0.7:51234 on port 7000 that are not the
//   //   cluster's protocol (not a BASP client handshake); dropping the connection
//
// Note [Guarding the control port]
// CAF 0.17's middleman drops a connection whose bytes are not BASP without a word (its log is
// compiled out in the packaged library), so a misdirected client or a stray scanner was
// invisible. A legitimate peer (middleman().remote_actor) sends its client handshake as soon as
// it connects, so the first header a peer sends tells: anything but a well-formed client
// handshake is not ours. We publish with a doorman of our own (the packaged doorman's subclass,
// accepting on a socket bound like publish binds it), whose connections are the packaged
// scribes with one change: the first header read is checked before BASP sees it, and a bad one
// is logged with the peer's address and the connection closed (BASP would have closed it too,
// but may first wait for a payload a bad header claims, up to 4 GiB). Nothing else differs:
// the handshake, messages and heartbeats are CAF's. A peer that ends the connection before a
// whole header came (fewer than 32 bytes, or none) is logged when it ends; one that sends fewer
// bytes and then waits is not seen until then (BASP waits too; the join timeout bounds a real
// node's join).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>

namespace libai::actors {

// Publishes `actor` on `port` (0: any free port) at `addr` (nullptr: every interface) like
// middleman().publish(actor, port, addr, reuse); returns the port. `who` names this process in
// the log ("node 0").
caf::expected<std::uint16_t> publish_guarded(caf::actor_system& system, const caf::actor& actor,
                                             std::uint16_t port, const char* addr, bool reuse,
                                             const std::string& who);

}  // namespace libai::actors
