#include "runtime/comm/communicator.h"

namespace libai::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

void Communicator::barrier() {
  // A one-element all-reduce: it completes on a rank only once every rank has contributed.
  Tensor token = Tensor::zeros({1});
  all_reduce(token);
}

}  // namespace libai::comm
