#include "runtime/comm/p2p_frames.h"

namespace libai::comm::p2p {

void wait_frames(int peer, std::shared_ptr<Waiter> waiter, std::shared_ptr<Arrivals> arrivals) {
  for (;;) {
    WorkHandle receive;
    {
      std::unique_lock lock(waiter->mutex);
      waiter->changed.wait(lock, [&] { return waiter->next || waiter->stop; });
      if (!waiter->next) return;
      receive = std::move(waiter->next);
    }
    try {
      receive->wait();  // bounded by the communicator's deadline for posted receives
    } catch (const std::exception&) {
      // The receive thread takes the error from the receive itself.
    }
    {
      std::lock_guard lock(arrivals->mutex);
      arrivals->ready.push_back(peer);
    }
    arrivals->changed.notify_one();
  }
}


}  // namespace libai::comm::p2p
