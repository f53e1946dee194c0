#!/usr/bin/env bash
# The main job: installs what is missing, builds, and starts the OpenAI-compatible server on
# 127.0.0.1:8000 with the default model (stories260K). Extra arguments go to `flashserve`
# (see `flashserve --help`).
#   scripts/run.sh                      serve the default model
#   scripts/run.sh generate [flags]     print a story with flashserve-generate instead
set -euo pipefail
source "$(dirname "$0")/common.sh"
fs_install_packages
build="$FS_ROOT/build/release"
fs_build "$build" -DCMAKE_BUILD_TYPE=Release >&2

has_model_flag() { for a in "$@"; do [ "$a" = "--model" ] && return 0; done; return 1; }

if [ "${1:-}" = "generate" ]; then
  shift
  has_model_flag "$@" || set -- --model "$(fs_default_model)" "$@"
  exec "$build/tools/flashserve-generate" "$@"
fi
has_model_flag "$@" || set -- --model "$(fs_default_model)" "$@"
exec "$build/server/flashserve" "$@"
