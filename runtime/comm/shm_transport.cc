#include "runtime/comm/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "runtime/error.h"

namespace libai::comm::shm {
namespace {

// A peer on the other core answers within microseconds; past this, sleep on the doorbell.
constexpr auto kSpinTime = std::chrono::microseconds(50);
// The longest sleep between checks of the peers' processes and of the deadline.
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

std::string errno_text(int error) { return std::strerror(error); }

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr,
                   0);
}

// State and start time of /proc/<pid>/stat; false when it cannot be read (no such process).
bool read_stat(std::int32_t pid, char* state, std::uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  std::ifstream in(path);
  std::string text;
  if (!std::getline(in, text)) return false;
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  *state = text[close + 2];
  // Fields after comm start at field 3 (state); start time is field 22.
  const char* p = text.c_str() + close + 2;
  for (int field = 3; field < 22 && *p != '\0'; ++p) {
    if (*p == ' ') ++field;
  }
  *start_time = std::strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

ProcessId this_process() {
  ProcessId id;
  id.pid = std::int32_t(::getpid());
  char state = 0;
  LIBAI_CHECK_KIND(CommunicationError, read_stat(id.pid, &state, &id.start_time),
                   "shm: cannot read /proc/", id.pid, "/stat for this process's start time");
  return id;
}

bool process_alive(const ProcessId& process) {
  if (::kill(process.pid, 0) != 0 && errno == ESRCH) return false;
  char state = 0;
  std::uint64_t start = 0;
  if (!read_stat(process.pid, &state, &start)) return false;
  return state != 'Z' && state != 'X' && start == process.start_time;
}

std::string random_job_id() {
  std::uint64_t value = 0;
  LIBAI_CHECK_KIND(CommunicationError,
                   ::getrandom(&value, sizeof value, 0) == ssize_t(sizeof value),
                   "shm: getrandom failed: ", errno_text(errno));
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string segment_name(const std::string& job, const std::string& kind, int rank) {
  return str_cat("/libai-", job, "-", kind, "-", rank);
}

Segment Segment::create(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  LIBAI_CHECK_KIND(CommunicationError, fd >= 0, "shm: cannot create segment ", name, ": ",
                   errno_text(errno));
  Segment segment;
  segment.name_ = name;
  segment.owns_name_ = true;  // from here on, every error path unlinks it (the destructor)
  if (::ftruncate(fd, off_t(bytes)) != 0) {
    const int error = errno;
    ::close(fd);
    LIBAI_THROW(CommunicationError, "shm: cannot size segment ", name, " to ", bytes, " bytes: ",
                errno_text(error));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);
  LIBAI_CHECK_KIND(CommunicationError, data != MAP_FAILED, "shm: cannot map segment ", name, " (",
                   bytes, " bytes): ", errno_text(error));
  segment.data_ = static_cast<std::uint8_t*>(data);
  segment.size_ = bytes;
  return segment;
}

Segment Segment::open(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  LIBAI_CHECK_KIND(CommunicationError, fd >= 0, "shm: cannot open segment ", name, ": ",
                   errno_text(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || std::size_t(info.st_size) != bytes) {
    ::close(fd);
    LIBAI_THROW(CommunicationError, "shm: segment ", name, " has ", info.st_size,
                " bytes, expected ", bytes, " (another job's segment, or another version?)");
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);
  LIBAI_CHECK_KIND(CommunicationError, data != MAP_FAILED, "shm: cannot map segment ", name, ": ",
                   errno_text(error));
  Segment segment;
  segment.name_ = name;
  segment.data_ = static_cast<std::uint8_t*>(data);
  segment.size_ = bytes;
  return segment;
}

Segment::~Segment() {
  unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    unlink();
    if (data_ != nullptr) ::munmap(data_, size_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

void Segment::unlink() {
  if (owns_name_) ::shm_unlink(name_.c_str());
  owns_name_ = false;
}

void ring_doorbell(Doorbell& bell) {
  bell.sequence.fetch_add(1, std::memory_order_seq_cst);
  if (bell.sleepers.load(std::memory_order_seq_cst) != 0) {
    futex(&bell.sequence, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void mark_broken(SegmentHeader& header, const std::string& reason) {
  std::uint32_t expected = 0;
  // 1: being written; 2: the reason is complete.
  if (!header.broken.compare_exchange_strong(expected, 1)) return;
  const std::size_t n = std::min(reason.size(), sizeof header.reason - 1);
  std::memcpy(header.reason, reason.data(), n);
  header.reason[n] = '\0';
  header.broken.store(2, std::memory_order_release);
  ring_doorbell(header.doorbell);
}

std::string broken_reason(const SegmentHeader& header) {
  const std::uint32_t state = header.broken.load(std::memory_order_acquire);
  if (state == 0) return "";
  if (state == 1) return "failed";  // its reason is being written: the next look has it
  return std::string(header.reason, strnlen(header.reason, sizeof header.reason));
}

bool AbortState::trip(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (tripped_.load()) return false;
  reason_ = reason;
  tripped_.store(true, std::memory_order_release);
  return true;
}

std::string AbortState::reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

void sleep_on(Doorbell& mine, const std::function<bool()>& wake, std::chrono::nanoseconds longest) {
  // Announce the sleep, then re-check: a ring between the check and the sleep changes the
  // sequence, and the futex returns at once.
  mine.sleepers.fetch_add(1, std::memory_order_seq_cst);
  const std::uint32_t sequence = mine.sequence.load(std::memory_order_seq_cst);
  if (!wake()) {
    const std::int64_t nanos = std::max<std::int64_t>(longest.count(), 1000);
    timespec timeout{time_t(nanos / 1000000000), long(nanos % 1000000000)};
    futex(&mine.sequence, FUTEX_WAIT, sequence, &timeout);
  }
  mine.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void wait_until(Doorbell& mine, const AbortState& abort, const std::function<bool()>& ready,
                const WaitSpec& spec) {
  const auto fail = [&](const std::string& cause) {
    LIBAI_THROW(CommunicationError, spec.what(), ": ", cause);
  };
  const auto start = Clock::now();
  auto next_liveness = start + kLivenessPeriod;
  for (int spins = 0;; ++spins) {
    if (ready()) return;
    if (abort.tripped()) fail(abort.reason());
    const bool progressed = spec.progress && spec.progress();
    if (progressed) {
      spins = 0;
      continue;
    }
    const auto now = Clock::now();
    if (spec.peer_failure) {
      const bool thorough = now >= next_liveness;
      if (thorough) next_liveness = now + kLivenessPeriod;
      if (std::string cause = spec.peer_failure(thorough); !cause.empty()) fail(cause);
    }
    if (now >= spec.deadline) {
      fail(str_cat("timed out after ", spec.timeout.count(), " ms waiting for ",
                   spec.waiting_for ? spec.waiting_for() : std::string("the peers")));
    }
    if (now - start < kSpinTime) {
      if (spins % 16 == 15) std::this_thread::yield();
      continue;
    }
    const auto until = std::min({spec.deadline, next_liveness, now + kLivenessPeriod});
    sleep_on(mine, [&] { return ready() || abort.tripped(); }, until - now);
  }
}

void Ring::initialise(RingHeader* header, std::uint64_t capacity) {
  LIBAI_ASSERT(capacity > 0 && (capacity & (capacity - 1)) == 0, "ring capacity ", capacity,
               " is not a power of two");
  header->capacity = capacity;
}

std::size_t Ring::readable() const {
  return std::size_t(header_->head.load(std::memory_order_acquire) -
                     header_->tail.load(std::memory_order_relaxed));
}

std::size_t Ring::writable() const {
  return std::size_t(header_->capacity - (header_->head.load(std::memory_order_relaxed) -
                                          header_->tail.load(std::memory_order_acquire)));
}

std::size_t Ring::write(const void* data, std::size_t bytes) {
  const std::uint64_t capacity = header_->capacity;
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  const std::size_t n = std::min(bytes, writable());
  const std::size_t at = std::size_t(head & (capacity - 1));
  const std::size_t first = std::min(n, std::size_t(capacity) - at);
  const auto* from = static_cast<const std::uint8_t*>(data);
  std::memcpy(data_ + at, from, first);
  std::memcpy(data_, from + first, n - first);
  header_->head.store(head + n, std::memory_order_seq_cst);
  return n;
}

std::size_t Ring::read(void* data, std::size_t bytes) {
  const std::uint64_t capacity = header_->capacity;
  const std::uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  const std::size_t n = std::min(bytes, readable());
  const std::size_t at = std::size_t(tail & (capacity - 1));
  const std::size_t first = std::min(n, std::size_t(capacity) - at);
  auto* to = static_cast<std::uint8_t*>(data);
  std::memcpy(to, data_ + at, first);
  std::memcpy(to + first, data_, n - first);
  header_->tail.store(tail + n, std::memory_order_seq_cst);
  return n;
}

bool Ring::read_exact(void* data, std::size_t bytes) {
  if (readable() < bytes) return false;
  read(data, bytes);
  return true;
}

namespace {

// Moves `bytes` with process_vm_readv/writev, resuming after partial transfers.
template <typename Call>
void cma_move(const ProcessId& process, std::uint8_t* local, std::uint64_t remote,
              std::size_t bytes, const std::function<std::string()>& what, Call call) {
  while (bytes > 0) {
    iovec here{local, bytes};
    iovec there{reinterpret_cast<void*>(remote), bytes};
    const ssize_t moved = call(process.pid, &here, 1, &there, 1, 0);
    if (moved <= 0) {
      const int error = moved < 0 ? errno : EIO;
      if (error == EINTR) continue;
      LIBAI_THROW(CommunicationError, what(), " (pid ", process.pid, ") failed: ",
                  errno_text(error), error == ESRCH ? ": the process died" : "");
    }
    local += moved;
    remote += std::uint64_t(moved);
    bytes -= std::size_t(moved);
  }
}

}  // namespace

bool cma_probe(const ProcessId& process, std::uint64_t remote, const void* expected,
               std::size_t bytes) {
  std::string got(bytes, '\0');
  iovec here{got.data(), bytes};
  iovec there{reinterpret_cast<void*>(remote), bytes};
  return ::process_vm_readv(process.pid, &here, 1, &there, 1, 0) == ssize_t(bytes) &&
         std::memcmp(got.data(), expected, bytes) == 0;
}

void cma_read(const ProcessId& process, void* local, std::uint64_t remote, std::size_t bytes,
              const std::function<std::string()>& what) {
  cma_move(process, static_cast<std::uint8_t*>(local), remote, bytes, what,
           [](pid_t pid, const iovec* l, unsigned long ln, const iovec* r, unsigned long rn,
              unsigned long flags) { return ::process_vm_readv(pid, l, ln, r, rn, flags); });
}

void cma_write(const ProcessId& process, const void* local, std::uint64_t remote,
               std::size_t bytes, const std::function<std::string()>& what) {
  cma_move(process, const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(local)), remote,
           bytes, what,
           [](pid_t pid, const iovec* l, unsigned long ln, const iovec* r, unsigned long rn,
              unsigned long flags) { return ::process_vm_writev(pid, l, ln, r, rn, flags); });
}

}  // namespace libai::comm::shm
