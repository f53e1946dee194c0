#!/usr/bin/env bash
# Builds everything and runs every test (the README's test command; .ci/run calls it). Each test
# runs once, in the strictest build that can run it:
#  1. release build (clang, unity): the product, the benchmarks and the CUDA code (compiled when
#     nvcc exists), and the tests that need release speed or memory: soak, load, the Node
#     clients, the container, the slow fault tests; `gpu` tests run on a GPU and report SKIPPED
#     elsewhere. The container test (mostly downloads) starts first and runs beside everything
#     else;
#  2. AddressSanitizer + UndefinedBehaviorSanitizer build: unit, cpu and server tests, then each
#     libFuzzer target for FS_FUZZ_SECONDS (default 10) on its seeds, from the same instrumented
#     libraries;
#  3. ThreadSanitizer build: the engine thread and the server (handler threads, cancellation).
# The sanitizer builds use clang too, at -O1, as unity builds.
# FS_TEST_STAGES picks stages (default "release asan tsan"). Prints each stage's time (build
# and tests); docs/BENCHMARKS.md#ci has the measured ones, docs/CONVENTIONS.md#ci-time what keeps
# them short.
# Installs what it needs (Debian/Ubuntu, as root). Exit status 0 = all passed.
set -euo pipefail
source "$(dirname "$0")/common.sh"
extra=(clang libclang-rt-dev lld tmux libedit-dev nginx curl python3-jsonschema podman runc)
command -v node >/dev/null || extra+=(nodejs npm)
fs_install_packages "${extra[@]}"

stages=${FS_TEST_STAGES:-release asan tsan}
# Tests the release stage runs: all but unit/cpu/server, plus these (a ctest regex) of them that
# need release throughput or memory, or release binaries: every test_openai_node* (npm clients),
# the load test, and the quantizer's test (a Python test that runs flashserve-random-model and
# flashserve-generate, which the sanitizer stages do not build).
release_only='openai_node|^test_server_load$|^test_quantize_checkpoint$'
# Fault tests that need release-build throughput: the release stage runs them, the sanitizer
# stages run the rest of their programs.
slow_tests="FaultHttp.ClientThatNeverReadsItsStreamIsCancelled:FaultLoad.KvCacheExhaustion*"
slow_programs=(test_fault_http test_fault_load)
jobs=$(nproc)
# Sanitizer builds at -O1 with line tables only: the usual setting for ASan/TSan, and 2.5x faster
# to compile than -O2 -g (measured on server/http_server.cpp with ASan: 35 s -> 14 s).
# Built with clang, which compiles them 1.5-3x faster than gcc (http_server.cpp: 6.4 vs 18.3 s),
# and as unity builds: a library's files are compiled a batch at a time, so the JSON and standard
# headers' templates are instantiated and optimised once per batch, not once per file (file-local
# names must then differ between the files of a library).
san_build=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1" -DCMAKE_UNITY_BUILD=ON)
san_configure() { CC=clang CXX=clang++ fs_configure "$@"; }
# Every stage: no ccache here, so the test programs share one precompiled gtest + JSON header;
# and lld links, 3-4x faster than GNU ld (an ASan test program: 1.5 s -> 0.4 s; the ASan stage
# links about 120 programs).
every_tree=(-DFLASHSERVE_PCH=ON -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld)
declare -A took
junits=()  # one JUnit file per ctest run, for the closing "skipped N tests: why" line
# run_ctest DIR NAME [ctest args...]: ctest over DIR, keeping its JUnit report as DIR/NAME.xml.
run_ctest() {
  local dir=$1 name=$2; shift 2
  junits+=("$dir/$name.xml")
  ctest --test-dir "$dir" --output-junit "$dir/$name.xml" "$@"
}
selected() { [[ " $stages " == *" $1 "* ]]; }
stage() {  # stage NAME: true when NAME is selected; starts its clock
  selected "$1" || return 1
  echo "== $1"
  start=$SECONDS
}
built() { built_at=$SECONDS; echo "== $1 built in $((built_at - start)) s"; }
done_stage() {
  took[$1]="$((SECONDS - start)) s (build $((built_at - start)) s, tests $((SECONDS - built_at)) s)"
  echo "== $1 took ${took[$1]}"
}
# test_names DIR CTEST_ARGS...: the tests that `ctest CTEST_ARGS` selects in the tree DIR.
test_names() {
  local dir=$1; shift
  ctest --test-dir "$dir" -N "$@" | sed -n 's/^ *Test *#[0-9]*: *//p'
}
# stage_targets DIR CTEST_ARGS...: the programs of the tests that `ctest CTEST_ARGS` selects in
# the configured tree DIR (a test program's target has the test's name and depends on the
# binaries it starts; a script test has none), so that a stage builds only what it runs.
stage_targets() {
  local dir=$1; shift
  test_names "$dir" "$@" | grep -Fx -f <(ninja -C "$dir" -t targets all | sed 's/:.*//') || true
}
# executables_but DIR NAME...: every executable of the tree DIR except the named ones.
executables_but() {
  local dir=$1; shift
  ninja -C "$dir" -t targets all | sed -n 's/^\(.*\): [A-Z]*_EXECUTABLE_LINKER__.*/\1/p' \
    | grep -v -E "(^|/)($(IFS='|'; echo "$*"))\$" || true
}
regex_of() { echo "^($(IFS='|'; echo "$*"))\$"; }

# Each stage's tree: where it is, how it is configured, what it builds and runs.
asan="$FS_ROOT/build/asan"
# The server tests start build/asan/server/flashserve: the server itself runs instrumented.
# Left out: the release stage's tests above. The bench programs are configured so that the tests
# of their command lines (label cpu) build them; their own C++ compiles at -O0, as the test
# programs' does. The parsing libraries are also instrumented for libFuzzer's coverage
# (tests/fuzz/CMakeLists.txt), so the fuzz targets link the same objects.
asan_tests=(-L 'unit|cpu|server' -E "$release_only")
configure_asan() {
  san_configure "$asan" "${san_build[@]}" -DFLASHSERVE_CUDA=OFF "${every_tree[@]}" \
    -DFLASHSERVE_SANITIZE=address,undefined -DFLASHSERVE_BENCH_UNOPTIMIZED=ON \
    -DFLASHSERVE_FUZZ=ON -DFLASHSERVE_FUZZ_SECONDS="${FS_FUZZ_SECONDS:-10}"
}
asan_targets() {
  echo flashserve $(stage_targets "$asan" "${asan_tests[@]}") $(stage_targets "$asan" -L fuzz)
}
tsan="$FS_ROOT/build/tsan"
# The server tests whose assertions need throughput (test_server_load, and two fault tests that
# wait for megabytes of tokens) are left out: TSan makes the server ~10x slower.
tsan_tests=(test_engine_fake test_engine_model test_completion test_server_e2e
            test_server_errors test_server_disconnect test_fault_http test_fault_load
            test_fault_hostile test_parallel_unit test_tensor_parallel_cpu)
tsan_regex=$(regex_of "${tsan_tests[@]}")
configure_tsan() {
  san_configure "$tsan" "${san_build[@]}" -DFLASHSERVE_CUDA=OFF "${every_tree[@]}" \
    -DFLASHSERVE_SANITIZE=thread -DFLASHSERVE_BUILD_BENCH=OFF
}
tsan_targets() { stage_targets "$tsan" -R "$tsan_regex"; }

# While a stage's tests run, the next stage's tree builds at the lowest priority: it takes only
# the CPU the tests leave idle (servers waiting on sockets, npm downloading). It is stopped when
# the tests end, keeping what it compiled, and the next stage's own build goes on from there.
idle_pid=""
idle_build() {  # idle_build DIR TARGET...
  local dir=$1; shift
  # ninja itself (nice execs it), so that SIGTERM reaches it: it stops its compilers and removes
  # their unfinished outputs.
  nice -n 19 ninja -C "$dir" -j"$jobs" "$@" >"$dir/idle_build.log" 2>&1 &
  idle_pid=$!
}
stop_idle_build() {
  [ -n "$idle_pid" ] || return 0
  kill -TERM "$idle_pid" 2>/dev/null || true
  wait "$idle_pid" 2>/dev/null || true
  idle_pid=""
}
# idle_next STAGE: when STAGE is selected, configures its tree and starts its build idly.
idle_next() {
  selected "$1" || return 0
  "configure_$1" && idle_build "${!1}" $("$1_targets")
}
# build_stage STAGE: configures and builds a sanitizer stage's tree (the variable named STAGE
# holds its folder; configure_STAGE and STAGE_targets say how and what).
build_stage() {
  "configure_$1"
  cmake --build "${!1}" -j"$jobs" --target $("$1_targets")
  built "$1"
}
docker_pid=""
trap 'kill "$docker_pid" 2>/dev/null || true; stop_idle_build' EXIT
if stage release; then
  build="$FS_ROOT/build/release"
  # No GPU runs CI: one architecture proves the CUDA code compiles, as PTX only (no ptxas: about
  # a third less per file) except the Hopper-only kernels, which need sm_90a code. What CI
  # compiles but does not run is built without optimisation: the benchmark programs' C++, the GPU
  # tests' C++, and the CUDA code (host side; NVVM too where only PTX is made). The C++ is a
  # clang unity build, as in the sanitizer stages (which also proves the CUDA backend's host
  # files unity-clean).
  CC=clang CXX=clang++ fs_configure "$build" -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_CUDA=AUTO \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_CUDA_ARCHITECTURES=90a-virtual \
    -DFLASHSERVE_BENCH_UNOPTIMIZED=ON -DFLASHSERVE_GPU_UNOPTIMIZED=ON "${every_tree[@]}"
  # The container test builds its own image (downloads, then a niced compile): it needs nothing
  # from this tree's build, so it runs from now until the end, beside the other stages.
  run_ctest "$build" docker --output-on-failure -R '^test_docker$' >"$build/docker.log" 2>&1 &
  docker_pid=$!
  mapfile -t release_tests < <(test_names "$build" -LE 'unit|cpu|server' -E '^test_docker$')
  mapfile -t -O "${#release_tests[@]}" release_tests < <(test_names "$build" -R "$release_only")
  # Test programs that the ASan stage runs are not built here.
  mapfile -t asan_only < <(test_names "$build" -L 'unit|cpu|server' \
    -E "$release_only|$(regex_of "${slow_programs[@]}")")
  cmake --build "$build" -j"$jobs" --target $(executables_but "$build" "${asan_only[@]}")
  built release
  idle_next asan
  GTEST_FILTER="$slow_tests" run_ctest "$build" slow --output-on-failure -j"$jobs" \
    -R "$(regex_of "${slow_programs[@]}")"
  run_ctest "$build" release --output-on-failure -j"$jobs" -R "$(regex_of "${release_tests[@]}")"
  stop_idle_build
  done_stage release
fi

if stage asan; then
  build_stage asan
  idle_next tsan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    GTEST_FILTER="-$slow_tests" run_ctest "$asan" asan --output-on-failure -j"$jobs" "${asan_tests[@]}"
  # Every registered target (tests/fuzz/CMakeLists.txt): 10 s each on 2 cores by default.
  run_ctest "$asan" fuzz --output-on-failure -j"$jobs" -L fuzz
  stop_idle_build
  done_stage asan
fi

if stage tsan; then
  build_stage tsan
  # Uninstrumented Debian libraries (cpp-httplib, SentencePiece) are suppressed: see the file.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 exitcode=66 suppressions=$FS_ROOT/tests/fault/tsan.supp" \
    GTEST_FILTER="-$slow_tests" run_ctest "$tsan" tsan --output-on-failure -j"$jobs" -R "$tsan_regex"
  done_stage tsan
fi

if [ -n "$docker_pid" ]; then
  start=$SECONDS
  docker_rc=0
  wait "$docker_pid" || docker_rc=$?
  echo "== container test (waited $((SECONDS - start)) s for it after the last stage)"
  cat "$build/docker.log"
  [ "$docker_rc" -eq 0 ] || exit "$docker_rc"
fi

for s in release asan tsan; do
  [ -n "${took[$s]:-}" ] && echo "stage $s: ${took[$s]}"
done
echo "all tests passed"
# Last line: the tests that did not run and why (ctest counts a skipped test as passing).
python3 "$FS_ROOT/scripts/skipped_tests.py" "${junits[@]}"
