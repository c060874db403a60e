// Internal to the process-group backends (ucx and shm): the checks of a caller's arguments,
// with the error text both give, the backend's name first ("shm all_gather: ...").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm/process_group.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/tensor.h"

namespace libai::comm::detail {

// The rank is in the world and the timeout is positive ("ucx communicator: ...").
void check_group_options(const char* backend, const ProcessGroupOptions& options);
RendezvousOptions rendezvous_options(const ProcessGroupOptions& options);

// Defined, on the host, contiguous and (when the operation reduces) of a floating dtype.
void check_tensor(const char* backend, const Tensor& t, const char* what, bool reduces);
void check_root(const char* backend, int root, int size);
void check_peer(const char* backend, const char* what, int peer, int rank, int size);
void check_group_ranks(const char* backend, const std::vector<int>& ranks, int size);

// "ucx send to rank 1 (tag 7, 400 bytes) on rank 0 of 2": the prefix of a transfer's errors.
std::string point_to_point_what(const char* backend, bool is_send, int peer, std::uint32_t tag,
                                std::size_t bytes, int rank, int size);

}  // namespace libai::comm::detail
