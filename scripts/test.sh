#!/usr/bin/env bash
# Builds everything and runs every test (the README's test command; .ci/run calls it):
#  1. release build, every label (CUDA code compiled when nvcc exists; `gpu` tests run on a GPU
#     and report SKIPPED elsewhere; `soak` is the CI-sized soak test);
#  2. AddressSanitizer + UndefinedBehaviorSanitizer build: unit, cpu and server tests;
#  3. ThreadSanitizer build: the engine thread and the server (handler threads, cancellation);
#  4. libFuzzer (clang) build: each fuzz target for FS_FUZZ_SECONDS (default 20) on its seeds.
# FS_TEST_STAGES picks stages (default "release asan tsan fuzz"). Prints each stage's time (build
# and tests); docs/CONVENTIONS.md#ci-time has the measured ones and what keeps them short.
# Installs what it needs (Debian/Ubuntu, as root). Exit status 0 = all passed.
set -euo pipefail
source "$(dirname "$0")/common.sh"
extra=(clang libclang-rt-dev tmux libedit-dev nginx curl python3-jsonschema)
command -v node >/dev/null || extra+=(nodejs npm)
fs_install_packages "${extra[@]}"

stages=${FS_TEST_STAGES:-release asan tsan fuzz}
# Fault tests that need release-build throughput; the sanitizer stages skip them.
slow_tests="FaultHttp.ClientThatNeverReadsItsStreamIsCancelled:FaultLoad.KvCacheExhaustion*"
jobs=$(nproc)
# Sanitizer builds at -O1 with line tables only: the usual setting for ASan/TSan, and 2.5x faster
# to compile than -O2 -g (measured on server/http_server.cpp with ASan: 35 s -> 14 s).
san_build=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1")
# Every stage: no ccache here, so the test programs share one precompiled gtest + JSON header.
pch=-DFLASHSERVE_PCH=ON
declare -A took
junits=()  # one JUnit file per ctest run, for the closing "skipped N tests: why" line
# run_ctest DIR [ctest args...]: ctest over DIR, keeping its JUnit report.
run_ctest() {
  local dir=$1; shift
  junits+=("$dir/ctest-junit.xml")
  ctest --test-dir "$dir" --output-junit "$dir/ctest-junit.xml" "$@"
}
stage() {  # stage NAME: true when NAME is selected; starts its clock
  [[ " $stages " == *" $1 "* ]] || return 1
  echo "== $1"
  start=$SECONDS
}
built() { built_at=$SECONDS; echo "== $1 built in $((built_at - start)) s"; }
done_stage() {
  took[$1]="$((SECONDS - start)) s (build $((built_at - start)) s, tests $((SECONDS - built_at)) s)"
  echo "== $1 took ${took[$1]}"
}
# stage_targets DIR CTEST_ARGS...: the programs of the tests that `ctest CTEST_ARGS` selects in
# the configured tree DIR (a test program's target has the test's name and depends on the
# binaries it starts; a script test has none), so that a stage builds only what it runs.
stage_targets() {
  local dir=$1; shift
  ctest --test-dir "$dir" -N "$@" | sed -n 's/^ *Test *#[0-9]*: *//p' \
    | grep -Fx -f <(ninja -C "$dir" -t targets all | sed 's/:.*//') || true
}

if stage release; then
  build="$FS_ROOT/build/release"
  # No GPU runs CI: one architecture (90a, the Hopper-only code included) proves the CUDA code
  # compiles, in a third of the product default's four (CMakeLists.txt).
  fs_build "$build" -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_CUDA=AUTO -DCMAKE_CUDA_ARCHITECTURES=90a $pch
  built release
  # One slot more than cores: test_docker holds one throughout, mostly waiting on downloads or
  # compiling niced (tests/docker/CMakeLists.txt).
  run_ctest "$build" --output-on-failure -j"$((jobs + 1))"
  done_stage release
fi

if stage asan; then
  asan="$FS_ROOT/build/asan"
  # The server tests start build/asan/server/flashserve: the server itself runs instrumented.
  # Left out: tests whose assertions need release speed or release memory (test_server_load's
  # RSS bound meets ASan's quarantine; two fault tests wait for megabytes of tokens).
  asan_tests=(-L 'unit|cpu|server' -E 'openai_node|test_server_load')
  fs_configure "$asan" "${san_build[@]}" -DFLASHSERVE_CUDA=OFF $pch \
    -DFLASHSERVE_SANITIZE=address,undefined -DFLASHSERVE_BUILD_BENCH=OFF
  cmake --build "$asan" -j"$jobs" --target flashserve $(stage_targets "$asan" "${asan_tests[@]}")
  built asan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    GTEST_FILTER="-$slow_tests" run_ctest "$asan" --output-on-failure -j"$jobs" "${asan_tests[@]}"
  done_stage asan
fi

if stage tsan; then
  tsan="$FS_ROOT/build/tsan"
  # The server tests whose assertions need throughput (test_server_load, and two fault tests
  # that wait for megabytes of tokens) are left out: TSan makes the server ~10x slower.
  tsan_tests=(test_engine_fake test_engine_model test_completion test_server_e2e
              test_server_errors test_server_disconnect test_fault_http test_fault_load
              test_fault_hostile test_parallel_unit test_tensor_parallel_cpu)
  regex="^($(IFS='|'; echo "${tsan_tests[*]}"))\$"
  fs_configure "$tsan" "${san_build[@]}" -DFLASHSERVE_CUDA=OFF $pch \
    -DFLASHSERVE_SANITIZE=thread -DFLASHSERVE_BUILD_BENCH=OFF
  cmake --build "$tsan" -j"$jobs" --target $(stage_targets "$tsan" -R "$regex")
  built tsan
  # Uninstrumented Debian libraries (cpp-httplib, SentencePiece) are suppressed: see the file.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 exitcode=66 suppressions=$FS_ROOT/tests/fault/tsan.supp" \
    GTEST_FILTER="-$slow_tests" run_ctest "$tsan" --output-on-failure -j"$jobs" -R "$regex"
  done_stage tsan
fi

if stage fuzz; then
  fuzz="$FS_ROOT/build/fuzz"
  # Every registered target (tests/fuzz/CMakeLists.txt), 20 s each by default: 12 targets on 2
  # cores fuzz for 120 s in all.
  CC=clang CXX=clang++ fs_configure "$fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHSERVE_CUDA=OFF \
    -DFLASHSERVE_BUILD_BENCH=OFF -DFLASHSERVE_FUZZ=ON \
    -DFLASHSERVE_FUZZ_SECONDS="${FS_FUZZ_SECONDS:-20}" \
    -DFLASHSERVE_SANITIZE=address,undefined,fuzzer-no-link
  cmake --build "$fuzz" -j"$jobs" --target $(stage_targets "$fuzz" -L fuzz)
  built fuzz
  run_ctest "$fuzz" --output-on-failure -j"$jobs" -L fuzz
  done_stage fuzz
fi

for s in release asan tsan fuzz; do
  [ -n "${took[$s]:-}" ] && echo "stage $s: ${took[$s]}"
done
echo "all tests passed"
# Last line: the tests that did not run and why (ctest counts a skipped test as passing).
python3 "$FS_ROOT/scripts/skipped_tests.py" "${junits[@]}"
