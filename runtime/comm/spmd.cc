#include "runtime/comm/spmd.h"

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/local_communicator.h"
#include "runtime/error.h"

namespace libai::comm {
namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void run_spmd_threads(int size, const std::function<void(Communicator&)>& body,
                      std::chrono::milliseconds timeout) {
  auto comms = LocalGroup::create(size, timeout);
  std::mutex mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(size_t(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*comms[r]);
      } catch (...) {
        const std::exception_ptr error = std::current_exception();
        {
          // Recorded before the abort, so an error the abort causes elsewhere comes second.
          std::lock_guard<std::mutex> lock(mutex);
          if (!first_error) first_error = error;
        }
        LocalGroup::abort(*comms[r], str_cat("rank ", r, " failed: ", message_of(error)));
      }
    });
  }
  for (auto& t : threads) t.join();
  comms.clear();  // joins the communicators' workers (what is still queued fails fast once aborted)
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace libai::comm
