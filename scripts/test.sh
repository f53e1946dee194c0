#!/usr/bin/env bash
# Builds everything and runs every test: the release build (CUDA code compiled when nvcc exists;
# `gpu` tests run on a GPU and report SKIPPED elsewhere), then an AddressSanitizer +
# UndefinedBehaviorSanitizer build of the unit and CPU tests. Exit status 0 = all passed.
set -euo pipefail
source "$(dirname "$0")/common.sh"
command -v node >/dev/null || extra=(nodejs npm)
fs_install_packages "${extra[@]}"

build="$FS_ROOT/build/release"
asan="$FS_ROOT/build/asan"
jobs=$(nproc)

echo "== release build ($build)"
fs_build "$build" -DCMAKE_BUILD_TYPE=Release
echo "== tests: all labels"
ctest --test-dir "$build" --output-on-failure -j"$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build ($asan)"
fs_build "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHSERVE_CUDA=OFF \
  -DFLASHSERVE_SANITIZE=address,undefined -DFLASHSERVE_BUILD_BENCH=OFF
echo "== sanitizer tests: unit and cpu"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$asan" --output-on-failure -j"$jobs" -L 'unit|cpu'
