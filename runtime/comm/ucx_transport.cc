#include "runtime/comm/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <sstream>
#include <thread>
#include <utility>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Match every bit of the tag: callers encode (kind, rank, sequence) in it themselves.
constexpr ucp_tag_t kFullTagMask = ~ucp_tag_t{0};
// A forced close finishes locally; this only bounds it against a misbehaving transport.
constexpr auto kForceCloseBound = std::chrono::seconds(2);

std::string hex_tag(std::uint64_t tag) {
  std::ostringstream os;
  os << "0x" << std::hex << tag;
  return os.str();
}

[[noreturn]] void throw_ucx(const std::string& what, ucs_status_t status) {
  LIBAI_THROW(CommunicationError, what, ": ", ucs_status_string(status));
}

// Filled by UCX callbacks; lives on the stack of the blocking call, which never returns
// before `done` is set, so UCX can never write through a dangling pointer.
struct Completion {
  bool done = false;
  ucs_status_t status = UCS_OK;
  std::size_t length = 0;
};

void on_send(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* c = static_cast<Completion*>(user_data);
  c->status = status;
  c->done = true;
}

void on_recv(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
             void* user_data) {
  auto* c = static_cast<Completion*>(user_data);
  c->status = status;
  c->length = info != nullptr ? info->length : 0;
  c->done = true;
}

// Progresses until the completion fires or the deadline passes. Yields when idle so that two
// processes polling on a small machine do not starve each other.
bool progress_until(ucp_worker_h worker, const Completion& c, Clock::time_point deadline) {
  while (!c.done) {
    if (ucp_worker_progress(worker) == 0) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
  }
  return true;
}

// Waits for a request that reports through ucp_request_check_status (endpoint close).
ucs_status_t wait_request(ucp_worker_h worker, void* request, Clock::time_point deadline) {
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    if (ucp_worker_progress(worker) == 0 && Clock::now() >= deadline) break;
  }
  ucp_request_free(request);  // an unfinished request is released by UCX when it completes
  return status;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
UcxContext::UcxContext() {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) throw_ucx("ucp_config_read", status);
  ucp_params_t params{};
  // Workers of one context may run on different threads (one per stage or channel).
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  params.mt_workers_shared = 1;
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) throw_ucx("ucp_init", status);
}

UcxContext::~UcxContext() {
  if (context_ != nullptr) ucp_cleanup(context_);
}

// ---------------------------------------------------------------------------------------------
UcxWorker::UcxWorker(UcxContext& context, std::string name) : name_(std::move(name)) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t status = ucp_worker_create(context.native(), &params, &worker_);
  if (status != UCS_OK) throw_ucx(str_cat("ucp_worker_create for ", name_), status);
  logger("ucx")->debug("worker {} created", name_);
}

UcxWorker::~UcxWorker() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
}

std::vector<std::uint8_t> UcxWorker::address() const {
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  ucs_status_t status = ucp_worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) throw_ucx(str_cat("ucp_worker_get_address of ", name_), status);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(address);
  std::vector<std::uint8_t> out(bytes, bytes + length);
  ucp_worker_release_address(worker_, address);
  return out;
}

bool UcxWorker::progress() { return ucp_worker_progress(worker_) != 0; }

std::size_t UcxWorker::recv(std::uint64_t tag, void* data, std::size_t capacity, UcxTimeout timeout,
                            const std::string& peer) {
  const auto deadline = Clock::now() + timeout;
  Completion c;
  ucp_tag_recv_info_t info{};
  ucp_request_param_t param{};
  // UCX 1.13 leaves recv_info's length unset when a receive completes at once, so immediate
  // completion is turned off: the length always comes from the callback.
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = on_recv;
  param.user_data = &c;
  param.recv_info.tag_info = &info;
  const auto what = [&] {
    return str_cat("UCX recv on ", name_, " of tag ", hex_tag(tag), " from ", peer);
  };

  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, data, capacity, tag, kFullTagMask, &param);
  if (UCS_PTR_IS_ERR(request)) {  // failed at once (e.g. an already arrived message too large)
    c = {true, UCS_PTR_STATUS(request), 0};
  } else if (request == nullptr) {  // the message was already there: no callback
    c = {true, UCS_OK, info.length};
  } else if (!progress_until(worker_, c, deadline)) {
    // An unmatched receive is cancelled at once; a matched one finishes or fails its transfer.
    // Either way wait for the callback, so that `data` is never written after we return.
    ucp_request_cancel(worker_, request);
    while (!c.done) ucp_worker_progress(worker_);
    ucp_request_free(request);
    if (c.status == UCS_ERR_CANCELED) {
      LIBAI_THROW(CommunicationError, what(), " (", capacity, " bytes) timed out after ",
                  timeout.count(), " ms");
    }
  } else {
    ucp_request_free(request);
  }
  if (c.status == UCS_ERR_MESSAGE_TRUNCATED) {
    LIBAI_THROW(CommunicationError, what(), ": message larger than the ", capacity, "-byte buffer");
  }
  if (c.status != UCS_OK) throw_ucx(what(), c.status);
  return c.length;
}

// ---------------------------------------------------------------------------------------------
struct UcxEndpoint::State {
  UcxWorker* worker = nullptr;
  ucp_ep_h ep = nullptr;
  std::string peer;
  bool broken = false;
  ucs_status_t error = UCS_OK;

  // Called by UCX (from progress) when the peer dies or the connection fails.
  static void on_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* self = static_cast<State*>(arg);
    self->broken = true;
    self->error = status;
    logger("ucx")->warn("endpoint {} -> {} failed: {}", self->worker->name(), self->peer,
                        ucs_status_string(status));
  }

  // Force-closing completes every outstanding request with UCS_ERR_CANCELED (how a timed-out
  // send gets its buffer back) and needs nothing from the peer. A flushing close waits for the
  // peer's acknowledgement, so it needs the peer to progress; returns whether it completed.
  bool close(bool force, Clock::time_point deadline) {
    if (ep == nullptr) return true;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    ep = nullptr;
    if (request == nullptr) return true;
    if (UCS_PTR_IS_ERR(request)) return false;
    return wait_request(worker->native(), request, deadline) == UCS_OK;
  }
  void force_close() { close(/*force=*/true, Clock::now() + kForceCloseBound); }
};

UcxEndpoint::UcxEndpoint(UcxWorker& worker, std::span<const std::uint8_t> peer_address,
                         std::string peer_name)
    : state_(std::make_unique<State>()) {
  state_->worker = &worker;
  state_->peer = std::move(peer_name);
  LIBAI_CHECK_KIND(CommunicationError, !peer_address.empty(), "UCX endpoint to ", state_->peer,
                   ": empty worker address");
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &State::on_error;
  params.err_handler.arg = state_.get();  // stable: State is on the heap, moves keep it
  ucs_status_t status = ucp_ep_create(worker.native(), &params, &state_->ep);
  if (status != UCS_OK) {
    throw_ucx(str_cat("ucp_ep_create ", worker.name(), " -> ", state_->peer), status);
  }
}

// Our sends are blocking, so nothing is left to flush here: a forced close is enough and never
// waits for a peer that may already be gone.
UcxEndpoint::~UcxEndpoint() {
  if (state_) state_->force_close();
}

UcxEndpoint::UcxEndpoint(UcxEndpoint&&) noexcept = default;

UcxEndpoint& UcxEndpoint::operator=(UcxEndpoint&& other) noexcept {
  if (this != &other) {
    if (state_) state_->force_close();
    state_ = std::move(other.state_);
  }
  return *this;
}

bool UcxEndpoint::close(UcxTimeout timeout) {
  return state_->close(/*force=*/false, Clock::now() + timeout);
}

const std::string& UcxEndpoint::peer_name() const { return state_->peer; }
bool UcxEndpoint::broken() const { return state_->broken; }

void UcxEndpoint::send(std::uint64_t tag, const void* data, std::size_t size, UcxTimeout timeout) {
  State& s = *state_;
  const auto what = [&] {
    return str_cat("UCX send ", s.worker->name(), " -> ", s.peer, " of tag ", hex_tag(tag), " (",
                   size, " bytes)");
  };
  if (s.broken) {
    LIBAI_THROW(CommunicationError, what(), ": endpoint failed earlier (",
                ucs_status_string(s.error), ")");
  }
  LIBAI_CHECK_KIND(CommunicationError, s.ep != nullptr, what(), ": endpoint is closed");
  const auto deadline = Clock::now() + timeout;
  Completion c;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send;
  param.user_data = &c;

  ucs_status_ptr_t request = ucp_tag_send_nbx(s.ep, data, size, tag, &param);
  if (request == nullptr) return;  // completed in place (eager)
  if (UCS_PTR_IS_ERR(request)) {
    s.broken = true;
    s.error = UCS_PTR_STATUS(request);
    throw_ucx(what(), s.error);
  }
  if (!progress_until(s.worker->native(), c, deadline)) {
    s.broken = true;
    s.error = UCS_ERR_TIMED_OUT;
    s.force_close();
    while (!c.done) ucp_worker_progress(s.worker->native());
    ucp_request_free(request);
    LIBAI_THROW(CommunicationError, what(), " timed out after ", timeout.count(),
                " ms; the endpoint is closed");
  }
  ucp_request_free(request);
  if (c.status != UCS_OK) {
    s.broken = true;
    s.error = c.status;
    throw_ucx(what(), c.status);
  }
}

std::size_t UcxEndpoint::recv(std::uint64_t tag, void* data, std::size_t capacity,
                              UcxTimeout timeout) {
  return state_->worker->recv(tag, data, capacity, timeout, state_->peer);
}

}  // namespace libai::comm
