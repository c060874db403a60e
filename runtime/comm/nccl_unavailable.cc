// make_nccl_communicator in a build without the CUDA toolkit: the backend is absent, and says so.
#ifndef LIBAI_HAVE_CUDA
#include "runtime/comm/nccl_communicator.h"

#include "runtime/error.h"

namespace libai::comm {

bool nccl_available() { return false; }

std::shared_ptr<Communicator> make_nccl_communicator(const NcclGroupOptions&) {
  LIBAI_CHECK_KIND(Unsupported, false,
                   "nccl communicator: this build has no CUDA toolkit (configure with the toolkit "
                   "installed, -DLIBAI_WITH_CUDA=ON), use the ucx or local backend");
  return nullptr;
}

}  // namespace libai::comm
#endif
