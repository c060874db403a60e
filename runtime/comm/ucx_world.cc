#include "runtime/comm/ucx_world.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <thread>

#include "runtime/comm/ucx_transport.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::comm::detail {
namespace {

constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
constexpr ucp_tag_t kKindMask = ucp_tag_t{0xf} << 60;
constexpr std::size_t kMaxAbortNote = 4096;
// Local clean-up (force close, cancelled receives) needs nothing from a peer; this only
// bounds it against a misbehaving transport.
constexpr auto kLocalBound = std::chrono::seconds(2);
constexpr auto kGoodbyeBound = std::chrono::seconds(10);
constexpr auto kBrokenFlushBound = std::chrono::milliseconds(500);
constexpr auto kNoteGrace = std::chrono::milliseconds(100);
// Idle polling: spin (yielding) this long, then sleep kIdleSleep between polls.
constexpr auto kSpinTime = std::chrono::microseconds(200);
constexpr auto kIdleSleep = std::chrono::microseconds(50);

void on_send(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* t = static_cast<Transfer*>(user_data);
  t->status = status;
  t->done = true;
}

void on_recv(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
             void* user_data) {
  auto* t = static_cast<Transfer*>(user_data);
  t->status = status;
  if (info != nullptr && status == UCS_OK) {
    t->length = info->length;
    t->peer = int((info->sender_tag >> 36) & 0xfff);  // for the abort listener (any sender)
  }
  t->done = true;
}

// Waits (bounded) for a request reported through ucp_request_check_status, then frees it.
void wait_request(ucp_worker_h worker, void* request, Clock::time_point deadline) {
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < deadline) {
    if (ucp_worker_progress(worker) == 0) std::this_thread::yield();
  }
  ucp_request_free(request);  // an unfinished one is released by UCX when it completes
}

const char* status_text(int status) { return ucs_status_string(ucs_status_t(status)); }

}  // namespace

void IdleBackoff::idle() {
  idle([](std::chrono::microseconds d) { std::this_thread::sleep_for(d); });
}

void IdleBackoff::idle(const std::function<void(std::chrono::microseconds)>& sleep) {
  const auto now = Clock::now();
  if (idle_since_ == Clock::time_point{}) idle_since_ = now;
  if (now - idle_since_ < kSpinTime) {
    std::this_thread::yield();
  } else {
    sleep(std::chrono::duration_cast<std::chrono::microseconds>(kIdleSleep));
  }
}

std::uint64_t make_tag(TagKind kind, std::uint32_t group, int sender, std::uint64_t low) {
  return (std::uint64_t(kind) << 60) | (std::uint64_t(group & 0xfff) << 48) |
         (std::uint64_t(sender & 0xfff) << 36) | (low & ((std::uint64_t{1} << 36) - 1));
}

std::uint64_t collective_tag(TagKind kind, std::uint32_t group, int sender, std::uint32_t sequence,
                             std::uint32_t step) {
  return make_tag(kind, group, sender, (std::uint64_t(sequence & 0xfffff) << 16) | (step & 0xffff));
}

struct UcxWorld::Endpoint {
  ucp_ep_h ep = nullptr;
  int rank = -1;
  bool failed = false;
  ucs_status_t error = UCS_OK;

  static void on_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* self = static_cast<Endpoint*>(arg);
    self->failed = true;
    self->error = status;
    logger("comm")->warn("connection to rank {} failed: {}", self->rank, ucs_status_string(status));
  }
};

UcxWorld::UcxWorld(const RendezvousOptions& options)
    : rank_(options.rank), size_(options.size), timeout_(options.timeout) {
  LIBAI_CHECK(size_ >= 1 && size_ <= kMaxWorldSize && rank_ >= 0 && rank_ < size_,
              "ucx communicator: rank ", rank_, " of world size ", size_, " (at most ",
              kMaxWorldSize, " ranks)");
  context_ = std::make_unique<UcxContext>();
  worker_ = std::make_unique<UcxWorker>(*context_, str_cat("rank ", rank_));
  endpoints_.resize(std::size_t(size_));
  try {
    abort_note_ = std::make_shared<std::vector<char>>(kMaxAbortNote);
    auto listener = std::make_shared<Transfer>();
    listener->tag = make_tag(TagKind::abort, 0, 0, 0);
    listener->bytes = abort_note_->size();
    abort_listener_ = post(listener, abort_note_->data());
    if (size_ == 1) return;
    Rendezvous store(options);
    const std::vector<Blob> addresses = store.exchange(worker_->address());
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      auto endpoint = std::make_unique<Endpoint>();
      endpoint->rank = peer;
      ucp_ep_params_t params{};
      params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER;
      params.address = reinterpret_cast<const ucp_address_t*>(addresses[std::size_t(peer)].data());
      params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      params.err_handler.cb = &Endpoint::on_error;
      params.err_handler.arg = endpoint.get();
      const ucs_status_t status = ucp_ep_create(worker_->native(), &params, &endpoint->ep);
      LIBAI_CHECK_KIND(CommunicationError, status == UCS_OK, "ucx communicator: rank ", rank_,
                       " cannot connect to rank ", peer, ": ", ucs_status_string(status));
      endpoints_[std::size_t(peer)] = std::move(endpoint);
    }
    // Wires every connection up both ways and proves every rank is there.
    exchange_with_all(TagKind::handshake, /*tolerate_failures=*/false, Clock::now() + timeout_);
  } catch (const std::exception& e) {
    broken_reason_ = e.what();
    shutdown();
    throw;
  }
}

UcxWorld::~UcxWorld() { shutdown(); }

TransferPtr UcxWorld::post(TransferPtr t, void* data) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = t.get();
  ucs_status_ptr_t request;
  if (t->is_send) {
    param.cb.send = on_send;
    request =
        ucp_tag_send_nbx(endpoints_[std::size_t(t->peer)]->ep, data, t->bytes, t->tag, &param);
  } else {
    // UCX 1.13 leaves recv_info unset when a receive completes in place, so always take the
    // callback, which reports the length and the sender.
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = on_recv;
    const bool any_sender = t->tag >> 60 == std::uint64_t(TagKind::abort);
    request = ucp_tag_recv_nbx(worker_->native(), data, t->bytes, t->tag,
                               any_sender ? kKindMask : kFullMask, &param);
  }
  if (request == nullptr) {  // a send completed in place: no callback comes
    t->done = true;
    t->length = t->bytes;
  } else if (UCS_PTR_IS_ERR(request)) {
    t->done = true;
    t->status = UCS_PTR_STATUS(request);
  } else {
    t->request = request;
    in_flight_.push_back(t);
  }
  return t;
}

TransferPtr UcxWorld::send(int peer, std::uint64_t tag, const void* data, std::size_t bytes,
                           std::shared_ptr<const void> owner) {
  LIBAI_CHECK_KIND(CommunicationError, !broken(), "ucx communicator is broken: ", broken_reason_);
  LIBAI_ASSERT(peer >= 0 && peer < size_ && peer != rank_);
  auto t = std::make_shared<Transfer>();
  t->peer = peer;
  t->is_send = true;
  t->tag = tag;
  t->bytes = bytes;
  t->owner = std::move(owner);
  if (endpoints_[std::size_t(peer)]->failed) {  // UCX would report it too; name it plainly
    t->done = true;
    t->status = endpoints_[std::size_t(peer)]->error;
    return t;
  }
  return post(t, const_cast<void*>(data));
}

TransferPtr UcxWorld::recv(int peer, std::uint64_t tag, void* data, std::size_t bytes,
                           std::shared_ptr<const void> owner) {
  LIBAI_CHECK_KIND(CommunicationError, !broken(), "ucx communicator is broken: ", broken_reason_);
  LIBAI_ASSERT(peer >= 0 && peer < size_ && peer != rank_);
  auto t = std::make_shared<Transfer>();
  t->peer = peer;
  t->tag = tag;
  t->bytes = bytes;
  t->owner = std::move(owner);
  return post(t, data);
}

void UcxWorld::sweep() {
  std::erase_if(in_flight_, [](const TransferPtr& t) {
    if (!t->done) return false;
    ucp_request_free(t->request);
    t->request = nullptr;
    return true;
  });
}

bool UcxWorld::progress() {
  const bool any = ucp_worker_progress(worker_->native()) != 0;
  if (any) sweep();
  return any;
}

bool UcxWorld::noted() const {
  return abort_listener_ && abort_listener_->done && abort_listener_->status == UCS_OK;
}

std::string UcxWorld::failure(const Transfer& t) {
  if (t.done && t.status == UCS_OK) return {};
  // Another rank's note first: it carries the first cause (a neighbour that saw a death and
  // then closed must not hide the rank that died).
  if (noted()) {
    const std::size_t n = std::min(abort_listener_->length, abort_note_->size());
    return str_cat("rank ", abort_listener_->peer,
                   " reported: ", std::string(abort_note_->data(), n));
  }
  const Endpoint* endpoint = endpoints_[std::size_t(t.peer)].get();
  if (endpoint != nullptr && endpoint->failed) {
    return str_cat("rank ", t.peer, " failed (", ucs_status_string(endpoint->error), ")");
  }
  if (!t.done) return {};
  if (t.status == UCS_ERR_MESSAGE_TRUNCATED) {
    return str_cat("the message from rank ", t.peer, " is larger than the ", t.bytes,
                   "-byte buffer");
  }
  return str_cat(t.is_send ? "send to" : "receive from", " rank ", t.peer,
                 " failed: ", status_text(t.status));
}

std::string UcxWorld::settled_failure(const Transfer& t) {
  std::string f = failure(t);
  if (f.empty() || noted()) return f;
  // A rank that aborts sends its note and then closes; its connections may report the close
  // before the note is read (they are separate sockets), so give the note a moment.
  const auto now = Clock::now();
  if (failure_seen_ == Clock::time_point{}) failure_seen_ = now;
  return now - failure_seen_ >= kNoteGrace ? f : std::string();
}

void UcxWorld::wait(std::span<const TransferPtr> transfers, Clock::time_point deadline,
                    const std::function<std::string()>& what) {
  IdleBackoff backoff;
  while (true) {
    if (abort_requested()) throw CommunicationError(str_cat(what(), ": ", requested_reason()));
    bool all_done = true;
    for (const TransferPtr& t : transfers) {
      if (const std::string f = settled_failure(*t); !f.empty()) {
        throw CommunicationError(str_cat(what(), ": ", f));
      }
      all_done = all_done && t->done;
    }
    if (all_done) return;
    if (progress()) {
      backoff.busy();
      continue;
    }
    if (Clock::now() >= deadline) {
      std::string pending;
      for (const TransferPtr& t : transfers) {
        if (t->done) continue;
        const std::string item = str_cat("rank ", t->peer, t->is_send ? " (send" : " (receive",
                                         ", ", t->bytes, " bytes)");
        if (pending.find(item) == std::string::npos) {
          pending += str_cat(pending.empty() ? "" : ", ", item);
        }
      }
      throw CommunicationError(
          str_cat(what(), ": timed out after ", timeout_.count(), " ms waiting for ", pending));
    }
    backoff.idle();
  }
}

void UcxWorld::exchange_with_all(TagKind kind, bool tolerate_failures, Clock::time_point deadline) {
  static const std::uint32_t hello = 0x4c42;  // the payload is not used
  std::vector<TransferPtr> transfers;
  auto owner = std::make_shared<std::vector<std::uint32_t>>(std::size_t(size_));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || (tolerate_failures && endpoints_[std::size_t(peer)]->failed)) continue;
    transfers.push_back(send(peer, make_tag(kind, 0, rank_, 0), &hello, sizeof hello, nullptr));
    transfers.push_back(
        recv(peer, make_tag(kind, 0, peer, 0), &(*owner)[std::size_t(peer)], sizeof hello, owner));
  }
  if (!tolerate_failures) {
    wait(transfers, deadline, [&] {
      return str_cat("ucx communicator: rank ", rank_, " connecting to the other ", size_ - 1,
                     " ranks");
    });
    return;
  }
  // Goodbye: a peer that failed, aborted or never answers in time counts as gone.
  IdleBackoff backoff;
  while (Clock::now() < deadline) {
    const bool settled = std::all_of(transfers.begin(), transfers.end(), [&](const TransferPtr& t) {
      return t->done || !failure(*t).empty();
    });
    if (settled) break;
    progress() ? backoff.busy() : backoff.idle();
  }
}

void UcxWorld::request_abort(const std::string& reason) {
  std::lock_guard lock(requested_mutex_);
  if (abort_requested_.load()) return;
  requested_reason_ = reason;
  abort_requested_.store(true, std::memory_order_release);
}

std::string UcxWorld::requested_reason() const {
  std::lock_guard lock(requested_mutex_);
  return requested_reason_;
}

void UcxWorld::abort(const std::string& reason) {
  if (broken()) return;
  broken_reason_ = reason.empty() ? "aborted" : reason;
  for (const TransferPtr& t : in_flight_) {
    if (!t->is_send && !t->done) ucp_request_cancel(worker_->native(), t->request);
  }
  const auto note = std::make_shared<std::string>(broken_reason_.substr(0, kMaxAbortNote));
  std::vector<TransferPtr> notes;
  for (const auto& endpoint : endpoints_) {
    if (endpoint == nullptr || endpoint->failed) continue;
    auto t = std::make_shared<Transfer>();
    t->peer = endpoint->rank;
    t->is_send = true;
    t->tag = make_tag(TagKind::abort, 0, rank_, 0);
    t->bytes = note->size();
    t->owner = note;
    notes.push_back(post(t, note->data()));
  }
  // Let the notes leave (they are small: eager); never wait on a peer for long.
  const auto deadline = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < deadline &&
         !std::all_of(notes.begin(), notes.end(), [](const TransferPtr& t) { return t->done; })) {
    if (!progress()) std::this_thread::yield();
  }
  logger("comm")->debug("rank {} aborted: {}", rank_, broken_reason_);
}

void UcxWorld::shutdown() {
  if (!worker_) return;
  ucp_worker_h worker = worker_->native();
  if (!broken() && size_ > 1) {
    exchange_with_all(TagKind::goodbye, /*tolerate_failures=*/true,
                      Clock::now() + std::min<Clock::duration>(timeout_, kGoodbyeBound));
  }
  if (size_ > 1) {  // after an abort: the notes; a transfer no peer will take bounds it
    ucp_request_param_t param{};
    wait_request(worker, ucp_worker_flush_nbx(worker, &param),
                 Clock::now() + (broken() ? kBrokenFlushBound : kLocalBound));
  }
  for (const TransferPtr& t : in_flight_) {
    if (!t->is_send && !t->done) ucp_request_cancel(worker, t->request);
  }
  for (auto& endpoint : endpoints_) {
    if (endpoint == nullptr || endpoint->ep == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    wait_request(worker, ucp_ep_close_nbx(endpoint->ep, &param), Clock::now() + kLocalBound);
    endpoint->ep = nullptr;
  }
  const auto deadline = Clock::now() + kLocalBound;
  while (!in_flight_.empty() && Clock::now() < deadline) {
    ucp_worker_progress(worker);
    sweep();
  }
  if (!in_flight_.empty()) {
    logger("comm")->warn("rank {}: {} transfers still in flight at shutdown", rank_,
                         in_flight_.size());
  }
  // Let UCX's own traffic settle first: destroying the worker while a wire-up reply to a rank
  // that closes at the same moment is still queued trips an assertion in UCX 1.13
  // (ucp_request_send_state_ff: "got REP message"; seen when every rank aborts at once).
  auto quiet_since = Clock::now();
  const auto settle_deadline = quiet_since + std::chrono::seconds(1);
  while (Clock::now() < settle_deadline &&
         Clock::now() - quiet_since < std::chrono::milliseconds(100)) {
    if (ucp_worker_progress(worker) != 0) quiet_since = Clock::now();
    std::this_thread::yield();
  }
  worker_.reset();  // releases what UCX still held; then the buffers' owners may go
  context_.reset();
  in_flight_.clear();
}

}  // namespace libai::comm::detail
