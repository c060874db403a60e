#!/usr/bin/env bash
# The installed package, used the way a consumer uses it (docs/PACKAGE.md): install this build
# into a temporary prefix, build examples/installed_app against that prefix alone (CMake
# package, then pkg-config), run it and the installed libai-actor on a model fixture, and
# compare their token ids with the build tree's libai-actor. Leaves nothing behind.
#
#   install_test.sh SOURCE_DIR BUILD_DIR CXX_COMPILER GENERATOR MAKE_PROGRAM [SANITIZE]
set -euo pipefail

if [[ $# -lt 5 ]]; then
  echo "usage: $0 SOURCE_DIR BUILD_DIR CXX_COMPILER GENERATOR MAKE_PROGRAM [SANITIZE]" >&2
  exit 2
fi
source_dir=$1 build_dir=$2 cxx=$3 generator=$4 make_program=$5 sanitize=${6:-}
model=$source_dir/tests/data/models/gpt2
prompt="Hello, my name is"
new_tokens=6

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

work=$(mktemp -d -t libai-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
# Nothing but the prefix may supply the package: no library path, no package registry.
unset LD_LIBRARY_PATH CMAKE_PREFIX_PATH PKG_CONFIG_PATH
# Under ThreadSanitizer CAF must be the instrumented build this tree linked (make tsan); its
# folder holds CAF's libraries only (tests/CMakeLists.txt passes it).
if [[ $sanitize == *thread* && -n ${LIBAI_TSAN_CAF_LIBRARY_DIR:-} ]]; then
  export LD_LIBRARY_PATH=$LIBAI_TSAN_CAF_LIBRARY_DIR
fi

cmake --install "$build_dir" --prefix "$prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install $build_dir failed"; }

# The private dependencies stay private: no installed header includes them, and the exported
# targets do not name them (Note [Installed interface] in cmake/LibaiLibrary.cmake).
private='(caf|capnp|kj|ucp|uct|ucs|google/protobuf|onnx|spdlog|fmt|yaml-cpp|CLI|cblas|cuda|cublas)'
if leaks=$(grep -rEn "#include <${private}[/._]" "$prefix/include"); then
  fail "installed headers include private dependencies:"$'\n'"$leaks"
fi
# (IMPORTED_LINK_DEPENDENT_LIBRARIES may name libai_runtime's private UCX: a hint for the
# linker's -rpath-link that a consumer need not define; only the INTERFACE_ properties count.)
if leaks=$(grep -Ei 'INTERFACE_.*(spdlog|yaml|caf|capnp|ucx|protobuf|onnx|openblas)' \
  "$prefix"/lib/cmake/LiBaiActor/*.cmake); then
  fail "the exported CMake package names private dependencies:"$'\n'"$leaks"
fi

# Every installed header compiles with only the prefix on the include path (a header that
# includes one left out of the install fails here).
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cflags=$(pkg-config --cflags libai-actor) || fail "pkg-config --cflags libai-actor"
libs=$(pkg-config --libs libai-actor) || fail "pkg-config --libs libai-actor"
(cd "$prefix/include/libai-actor" && find . -name '*.h' | sort | sed 's|^\./\(.*\)$|#include "\1"|') \
  > "$work/all_headers.cc"
[[ -s $work/all_headers.cc ]] || fail "no headers under $prefix/include/libai-actor"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++20 -fsyntax-only $cflags "$work/all_headers.cc" ||
  fail "the installed headers do not compile on their own"

# A sanitized build's libraries need the sanitizers' runtime first in the program.
san=()
if [[ -n $sanitize ]]; then san=("-fsanitize=$sanitize"); fi
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

# The CMake package: a fresh build folder, the same compiler, CMAKE_PREFIX_PATH the prefix.
cmake -S "$source_dir/examples/installed_app" -B "$work/app" -G "$generator" \
  -DCMAKE_MAKE_PROGRAM="$make_program" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="${san[*]}" -DCMAKE_EXE_LINKER_FLAGS="${san[*]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; fail "configuring examples/installed_app against $prefix"; }
cmake --build "$work/app" > "$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "building examples/installed_app against $prefix"; }

# It runs on the installed libraries, found through its own RUNPATH.
app_libs=$(ldd "$work/app/installed_app" | grep -E 'libai_' || true)
[[ -n $app_libs ]] || fail "installed_app links no libai library"
if stray=$(grep -v "=> $prefix/" <<< "$app_libs"); then
  fail "installed_app loads libraries from outside the prefix:"$'\n'"$stray"
fi

# The reference: the build tree's binary. Its JSON holds "token_ids":[a,b,...].
ids_of_json() { sed -n 's/.*"token_ids":\[\([0-9,]*\)\].*/\1/p'; }
expected=$("$build_dir/bin/libai-actor" generate --model "$model" --prompt "$prompt" \
  --max-new-tokens "$new_tokens" --json | ids_of_json)
[[ -n $expected ]] || fail "no token ids from $build_dir/bin/libai-actor generate"

# installed_app prints the new ids, the text, then "prompt_tokens N": the prompt's N ids
# followed by the new ones must be the build tree's sequence.
check_app() {  # check_app WHAT OUTPUT
  local new prompt_tokens
  new=$(sed -n 1p <<< "$2")
  prompt_tokens=$(sed -n 's/^prompt_tokens \([0-9]*\)$/\1/p' <<< "$2")
  [[ -n $new && -n $prompt_tokens ]] || fail "$1 printed no ids or prompt_tokens: $2"
  local whole
  whole=$(tr ',' '\n' <<< "$expected" | head -n "$prompt_tokens" | paste -sd,),$new
  [[ $whole == "$expected" ]] || fail "$1 gave $whole, the build tree $expected"
}
check_app "installed_app (CMake package)" "$("$work/app/installed_app" "$model" "$prompt" "$new_tokens" 2>/dev/null)"

# The same through pipeline stages: installed_app as node 0 of a two-node serve job, the
# installed libai-actor as node 1 (actors/jobs/cluster_service.h).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '%s\n' "model:" "  weights: $model" "train:" "  dist:" "    pipeline_parallel_size: 2" \
  "  cluster:" "    nodes: 2" "    token: install-test" "    port: $port" \
  "job:" "  _target_: serve" "  max_batch: 4" > "$work/serve.yaml"
"$prefix/bin/libai-actor" serve "$work/serve.yaml" --node-rank 1 > "$work/node1.log" 2>&1 &
node1=$!
app_out=$(timeout 120 "$work/app/installed_app" --config "$work/serve.yaml" "$prompt" "$new_tokens" 2> "$work/node0.log") ||
  { kill "$node1" 2> /dev/null; cat "$work/node0.log" "$work/node1.log" >&2; fail "installed_app --config failed"; }
wait "$node1" || { cat "$work/node1.log" >&2; fail "node 1 (the installed libai-actor serve) failed"; }
check_app "installed_app --config (two-node pipeline)" "$app_out"
installed=$("$prefix/bin/libai-actor" generate --model "$model" --prompt "$prompt" \
  --max-new-tokens "$new_tokens" --json | ids_of_json)
[[ $installed == "$expected" ]] || fail "the installed libai-actor gave $installed, the build tree $expected"

# The same example through pkg-config's flags alone.
# shellcheck disable=SC2086
"$cxx" -std=c++20 $cflags "${san[@]}" \
  "$source_dir/examples/installed_app/main.cc" -o "$work/app_pc" $libs -Wl,-rpath,"$prefix/lib" ||
  fail "building installed_app with pkg-config --cflags --libs libai-actor"
check_app "installed_app (pkg-config)" "$("$work/app_pc" "$model" "$prompt" "$new_tokens" 2>/dev/null)"

# The ONNX writer plugin loads from the install (beside libai_models). The sanitizers' runtime
# cannot load it (RTLD_DEEPBIND), in the tree or installed.
if [[ -z $sanitize ]]; then
  "$prefix/bin/libai-actor" export onnx --model "$model" --out "$work/model.onnx" > "$work/export.log" 2>&1 ||
    { cat "$work/export.log" >&2; fail "the installed libai-actor cannot export ONNX"; }
  [[ -s $work/model.onnx ]] || fail "the installed ONNX export wrote nothing"
fi

echo "installed package OK: $expected"
