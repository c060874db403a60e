#!/usr/bin/env bash
# tools/check_layers.py: passes on this tree, and fails naming the file and line of each wrong
# include planted in a copy of a few of its folders (a lower layer including a higher one, the
# planner including CAF, the cluster including a job, libai-plan's sources including the actors).
set -euo pipefail
source_dir=$1
check="$source_dir/tools/check_layers.py"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

python3 "$check" --root "$source_dir"

plant() {  # plant FILE LINE: a tree of one file whose only include is LINE
  rm -rf "$scratch/tree" && mkdir -p "$scratch/tree/$(dirname "$1")"
  printf '// planted\n#include "runtime/tensor.h"\n%s\n' "$2" > "$scratch/tree/$1"
}
expect_failure() {  # expect_failure FILE LINE EXPECTED: exit 1, a line naming FILE:3 and EXPECTED
  plant "$1" "$2"
  if out=$(python3 "$check" --root "$scratch/tree" 2>&1); then
    echo "FAIL: $1 with $2 passed:"; echo "$out"; exit 1
  fi
  grep -qF "$1:3: " <<<"$out" || { echo "FAIL: $1:3 not named in:"; echo "$out"; exit 1; }
  grep -qF "$3" <<<"$out" || { echo "FAIL: '$3' not in:"; echo "$out"; exit 1; }
  echo "ok: $1 with $2 refused"
}
expect_pass() {
  plant "$1" "$2"
  python3 "$check" --root "$scratch/tree" >/dev/null || { echo "FAIL: $1 with $2 refused"; exit 1; }
  echo "ok: $1 with $2 allowed"
}

expect_failure schedule/bad.cc '#include "actors/stage.h"' 'schedule/ may include only runtime, schedule'
expect_failure runtime/bad.h '#include "models/model.h"' 'runtime/ may include only runtime'
expect_failure plan/bad.cc '#include <caf/all.hpp>' '<caf/all.hpp> belongs to actors/ only'
expect_failure plan/bad.cc '#include "actors/wire/wire.h"' 'plan/ may include only'
expect_failure models/bad.cc '#include "train/optimizer.h"' 'models/ may include only'
expect_failure actors/cluster/bad.cc '#include "actors/jobs/config_job.h"' 'actors/cluster/ is below actors/jobs/'
expect_failure actors/bad.cc '#include "actors/cluster/cluster.h"' 'actors/ is below actors/cluster/'
expect_failure bin/cmd_plan.cc '#include "actors/jobs/config_job.h"' "libai-plan's sources may include only"
expect_failure ops/bad.cc '#include <ucp/api/ucp.h>' 'belongs to runtime/comm/ and actors/ only'
expect_pass actors/jobs/good.cc '#include "actors/cluster/cluster.h"'
expect_pass plan/good.cc '#include "schedule/plan.h"'
expect_pass bin/cmd_run.cc '#include "actors/jobs/config_job.h"'
echo "check_layers: every planted include refused"
