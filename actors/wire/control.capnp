# Control messages that cross processes (see DESIGN.md, actors/): small, evolved by field
# ordinals. Tensor bytes never travel here; a TensorHeader describes bytes sent over UCX.
@0xcf83970314c4eb33;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("libai::wire::schema");  # value types of the same names live in wire.h

# What a node agent measured about one of its devices; the scheduler balances stages with it.
struct DeviceProfile {
  name @0 :Text;                 # "cpu:0", "cuda:1"
  matmulGflops @1 :Float64;
  memoryBandwidthGbs @2 :Float64;
  freeMemoryBytes @3 :UInt64;
}

# Sent by a node agent to node 0; the token must match the cluster token.
struct JoinRequest {
  nodeRank @0 :UInt32;
  token @1 :Text;
  hostname @2 :Text;
  devices @3 :List(DeviceProfile);
}

struct JoinReply {
  accepted @0 :Bool;
  reason @1 :Text;               # why a join was refused; empty when accepted
}

enum DType {
  f32 @0;
  f64 @1;
  bf16 @2;
  f16 @3;
  i64 @4;
  i32 @5;
  u8 @6;
  boolean @7;
}

# Announces a tensor whose bytes follow on the data plane with the UCX tag `tag`.
struct TensorHeader {
  dtype @0 :DType;
  shape @1 :List(Int64);
  bytes @2 :UInt64;
  tag @3 :UInt64;
}
