# Control messages that cross processes (see docs/DESIGN.md, actors/): small, evolved by field
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
  layerSeconds @4 :Float64;      # one of the job's layers timed on the device; 0: not timed
  layerStepSeconds @5 :Float64;  # its decoding step (model jobs that generate); 0: not timed
  timings @6 :List(PrecisionTiming);  # that layer at each precision a stage may hold
}

# The job's layer timed at one precision (train.dist.stage_precision).
struct PrecisionTiming {
  precision @0 :Text;            # "f32", "bf16", "int8", "q4:32", ...
  layerSeconds @1 :Float64;
  layerStepSeconds @2 :Float64;
}

# Sent by a node agent to node 0; the token must match the cluster token.
struct JoinRequest {
  nodeRank @0 :UInt32;
  token @1 :Text;
  hostname @2 :Text;
  devices @3 :List(DeviceProfile);
  controlRttSeconds @4 :Float64; # the node's measured round trip to node 0 over the control plane
  hostKey @5 :Text;              # equal on nodes that can share memory (runtime/host_identity.h)
  controlBandwidthGbs @6 :Float64; # the node's measured bandwidth to node 0 over the control plane (0: not measured)
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

# One named tensor of a packet; its bytes are one payload block of the packet's message.
struct NamedTensor {
  name @0 :Text;
  header @1 :TensorHeader;       # header.tag is unused here
}

# A packet between pipeline stages, as the header of a message on the message plane
# (runtime/comm/message_plane.h): the work item (group, step) and its tensors, whose bytes
# follow as the message's payload, one block per tensor in list order.
# A `done` packet carries no tensors: the group has finished and leaves every later step.
struct PacketHeader {
  group @0 :UInt32;
  step @1 :UInt32;
  done @2 :Bool;
  tensors @3 :List(NamedTensor);
  tag @4 :UInt32;                # unused (was the UCX tag of the packed bytes)
  bytes @5 :UInt64;              # sum of the tensors' bytes
  # Training (Note [Training packets] in actors/train_stage_actor.h): a gradient flows
  # upstream, an activation downstream; `chunk` is the receiving stage's model chunk (virtual
  # stage), `group` the micro-batch and `step` the training step.
  gradient @6 :Bool;
  chunk @7 :UInt32;
}

# A consumer freed `slots` input slots: the producer may send that many more packets. The
# message plane's channel names the link (actors/packet_inbox.h: credit_channel).
struct Credit {
  slots @0 :UInt32;
  chunk @1 :UInt32;              # unused (the channel names the link)
}

# The job ends everywhere; `reason` names the cause (a dead node and its stages, Ctrl-C, ...).
struct Abort {
  reason @0 :Text;
  node @1 :Int32;                # the node that saw it first (-1: unknown)
}

# Node 0 to every node once all have joined: the resolved job config (YAML), the plan's
# decisions (so that no node re-decides them), and where the data plane meets.
struct Assignment {
  configYaml @0 :Text;
  stageOf @1 :List(Int32);       # layer -> pipeline stage
  deviceOfStage @2 :List(Int32); # pipeline stage -> device position in the pipeline's node order
  dataPort @3 :UInt16;           # node 0's rendezvous port of the UCX data plane (0: one node)
  devices @4 :List(DeviceProfile);  # every device of the cluster, in node order
  localHopSeconds @5 :Float64;   # measured: one packet hop between actors of one process
  remoteHopSeconds @6 :Float64;  # measured: one packet hop between nodes (0: one node)
  transport @7 :Text;            # the data plane between the nodes: "shm" or "ucx" ("": one node)
  interNodeBandwidthGbs @8 :Float64; # measured: the slowest node's control-plane bandwidth to node 0 (0: one node)
}

# What one stage did, for the per-stage utilisation report.
struct StageReport {
  name @0 :Text;
  node @1 :Int32;
  busySeconds @2 :Float64;       # compute (and emulated slow-down) on its pinned thread
  actions @3 :UInt64;
  bytesReceived @4 :UInt64;
}

# A named figure of a training step's report.
struct NamedValue {
  name @0 :Text;
  value @1 :Float64;
}

# What one training stage reports after a step (TrainStageCompute::end_step).
struct StepSummary {
  lossSum @0 :Float64;
  lossCount @1 :Int64;
  gradNorm @2 :Float64;
  skipped @3 :Bool;
  extra @4 :List(NamedValue);
}

# What the train driver asks of every training stage between steps (TrainStageCompute::control).
enum TrainControlKind {
  save @0;       # write the whole-model checkpoint `folder`/`name` (world rank 0 writes)
  load @1;       # read this stage's parts and their optimizer state from `folder`
  evaluate @2;   # forward the validation micro-batches through the stages
}

struct TrainControl {
  kind @0 :TrainControlKind;
  folder @1 :Text;
  name @2 :Text;
  maxToKeep @3 :Int32;
  iteration @4 :Int64;           # save: the trainer's progress, recorded in trainer.json
  consumedSamples @5 :Int64;
  bestMetric @6 :Float64;
  hasBest @7 :Bool;
  seed @8 :UInt64;
}

# What one stage is doing, for the cluster's watchdog (Note [Liveness] in actors/cluster_node.h).
struct StageProgress {
  name @0 :Text;
  actions @1 :UInt64;            # actions its thread has ended so far
  doing @2 :Text;                # what its thread does now ("computing F3 s0"); empty: nothing
  doingSeconds @3 :Float64;      # since when (no progress for that long)
  waiting @4 :Text;              # what its next action waits for; empty: nothing of its own
  waitingSeconds @5 :Float64;
}

# A node's answer to node 0's heartbeat `seq`: every stage of the node, as it is now.
struct Heartbeat {
  seq @0 :UInt64;
  node @1 :Int32;
  stages @2 :List(StageProgress);
}
