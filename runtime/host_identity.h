// Whether two processes can share memory: the same kernel (boot id), the same IPC namespace
// (the same /dev/shm and futexes) and the same PID namespace (a peer's pid means the same
// process, which the shared-memory data plane needs to tell that a peer died and to copy
// between processes). Containers on one machine share the boot id but not always the
// namespaces; two hosts never share the boot id.
//
//   JoinRequest{..., .host_key = host_identity()};
//   bool same = all_of(keys, [&](auto& k) { return k == keys[0]; });   // shm is possible
#pragma once

#include <string>

namespace libai {

// "boot <id> ipc <inode> pid <inode>", or "" when any part cannot be read (then the caller
// must assume the processes cannot share memory).
std::string host_identity();

}  // namespace libai
