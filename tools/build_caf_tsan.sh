#!/usr/bin/env bash
# Builds CAF (the actor framework, the version of the installed libcaf-dev) with
# -fsanitize=thread into BUILD/caf-tsan, for `make tsan`.
#
# Why: Debian's libcaf_core and libcaf_io are not instrumented. CAF hands work between threads
# through its own lock-free queues (atomics inside the library), which ThreadSanitizer sees
# only when the library itself is instrumented: with Debian's build every actor spawned by one
# thread and run by a scheduler thread is reported as a race (docs/TESTING.md, "ThreadSanitizer").
# Suppressing those would hide every race in our actors too, since every actor's stack passes
# through the library; so the TSan build links an instrumented CAF instead.
#
# The source is Debian's own: the orig tarball of the installed version, fetched with apt from
# the machine's configured mirrors as a deb-src entry (a private list directory: the system's
# apt state is not touched) and checked against the .dsc's SHA-256.
#
#   tools/build_caf_tsan.sh BUILD      # prints the prefix (BUILD/caf-tsan) when done
set -euo pipefail
build=$(realpath -m "${1:?usage: tools/build_caf_tsan.sh BUILD}")
prefix="$build/caf-tsan"
work="$build/caf-src"
version=$(dpkg-query -W -f='${source:Version}' libcaf-dev 2>/dev/null) || {
  echo "build_caf_tsan: libcaf-dev is not installed (tools/install_deps.sh)" >&2; exit 1; }
upstream=${version%-*}
upstream=${upstream#*:}
if [ -f "$prefix/lib/libcaf_core.so" ] && [ "$(cat "$prefix/version" 2>/dev/null)" = "$version" ]; then
  echo "$prefix"
  exit 0
fi
mkdir -p "$work/lists/partial" "$work/parts"
cd "$work"

# deb-src entries for the mirrors apt already uses.
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sed 's/^Types:.*\bdeb\b.*$/Types: deb-src/' "$f" > "parts/$(basename "$f")"
done
if [ -f /etc/apt/sources.list ]; then
  sed -n 's/^deb \(.*\)$/deb-src \1/p' /etc/apt/sources.list > parts/from-sources-list.list
fi
apt_options=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/parts"
             -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root -qq)
orig="actor-framework_${upstream}.orig.tar.gz"
if [ ! -f "$orig" ]; then
  echo "build_caf_tsan: fetching the source of CAF $version (apt, deb-src)" >&2
  apt-get "${apt_options[@]}" update > apt.log 2>&1 || true
  # The Debian packaging tarball is not needed (the orig tarball is CAF's release); a mirror
  # that lacks it makes apt-get exit non-zero after the orig tarball came.
  apt-get "${apt_options[@]}" source --download-only "actor-framework=$version" >> apt.log 2>&1 || true
fi
dsc="actor-framework_${version#*:}.dsc"
if [ ! -f "$orig" ] || [ ! -f "$dsc" ]; then
  cat apt.log >&2
  echo "build_caf_tsan: could not fetch $orig and $dsc with apt-get source" >&2
  echo "  (needs the Debian mirrors apt uses; make tsan cannot run without an instrumented CAF)" >&2
  exit 1
fi
expected=$(awk '/^Checksums-Sha256:/{f=1; next} /^[^ ]/{f=0} f && $3 == "'"$orig"'" {print $1}' "$dsc")
actual=$(sha256sum "$orig" | awk '{print $1}')
if [ -z "$expected" ] || [ "$expected" != "$actual" ]; then
  echo "build_caf_tsan: $orig does not match the SHA-256 of $dsc" >&2
  exit 1
fi
rm -rf "source" && mkdir source && tar xzf "$orig" -C source --strip-components=1

# CAF 0.17.6's receive_buffer.hpp uses std::numeric_limits without including <limits>, which
# GCC 12's headers no longer bring in by the way; -include adds it to every file.
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "build_caf_tsan: building CAF $upstream with -fsanitize=thread into $prefix" >&2
cmake -S source -B objects -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -include limits" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_OPENSSL=yes -DCAF_NO_TOOLS=yes \
  -DCAF_NO_PYTHON=yes -DCAF_NO_OPENCL=yes -DCAF_NO_SUMMARY=yes \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib "${launcher[@]}" > cmake.log 2>&1 ||
  { cat cmake.log >&2; exit 1; }
cmake --build objects -j "${JOBS:-$(nproc)}" --target install > build.log 2>&1 ||
  { tail -50 build.log >&2; exit 1; }
echo "$version" > "$prefix/version"
echo "$prefix"
