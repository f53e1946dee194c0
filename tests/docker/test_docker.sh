#!/usr/bin/env bash
# Builds the repository's Dockerfile with podman (no registry, no Docker engine: see
# /work/shared/docs/CONTAINERS.md and docs/DOCKER.md) on a locally made Debian bookworm base, runs
# the image with stories260K mounted read-only, checks /health, the HEALTHCHECK and a completion
# on 127.0.0.1, then stops it with SIGTERM and requires exit code 0.
#   test_docker.sh SOURCE_DIR WORK_DIR MODELS_DIR
# Exit 0 = passed, 77 = skipped (podman cannot work on this machine; the reason is printed).
set -euo pipefail
src=$(cd "$1" && pwd)
W=$2
models=$3
image=localhost/flashserve:test
base=localhost/debian:bookworm

log() { echo "[test_docker] $*"; }
skip() { echo "[test_docker] SKIPPED: $*"; exit 77; }
fail() { echo "[test_docker] FAILED: $*"; exit 1; }

# ---- packages --------------------------------------------------------------------------------
need=()
for p in podman runc debootstrap curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    skip "missing packages (${need[*]}) and not root with apt-get to install them"
  fi
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${need[@]}" >/dev/null \
    || skip "apt-get could not install ${need[*]}"
fi
[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman with storage in $W)"

# ---- podman state in the work folder ---------------------------------------------------------
source "$(dirname "$0")/podman_state.sh"
podman_state

# ---- base image: debootstrap bookworm once, cached in the work folder -------------------------
if ! podman image exists "$base"; then
  if [ ! -f "$W/rootfs.done" ]; then
    log "debootstrap --variant=minbase bookworm (once)"
    rm -rf "$W/rootfs"
    debootstrap --variant=minbase bookworm "$W/rootfs" >"$W/debootstrap.log" 2>&1 \
      || { tail -20 "$W/debootstrap.log"; fail "debootstrap failed (log: $W/debootstrap.log)"; }
    touch "$W/rootfs.done"
  fi
  tar -C "$W/rootfs" --numeric-owner -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
fi

# ---- build the image (layers are cached in the work folder's storage) -----------------------
# Each source change leaves the previous build stage behind as an unnamed image (~0.6 GB); past
# 4 GB they are removed (the next build then also reinstalls the build packages).
if [ "$(du -sm "$W/storage" | cut -f1)" -gt 4096 ]; then
  log "pruning unnamed images"
  podman image prune -f >/dev/null || true
fi
log "podman build (log: $W/build.log)"
t0=$(date +%s)
# Niced: in CI the other tests run beside it, and their timeouts come before this compile. A unity
# build with the JSON PCH, as CI's own trees: the same sources, g++ CPU time 663 -> 296 s.
if ! nice -n 10 podman build --format docker --pull=never --network host \
      --build-arg BUILD_IMAGE=$base --build-arg RUNTIME_IMAGE=$base \
      --build-arg "CMAKE_ARGS=-DCMAKE_UNITY_BUILD=ON -DFLASHSERVE_PCH=ON" \
      -t "$image" -f "$src/Dockerfile" "$src" >"$W/build.log" 2>&1; then
  tail -40 "$W/build.log"
  fail "podman build failed"
fi
log "built in $(( $(date +%s) - t0 )) s; $(grep -m1 '^runtime packages:' "$W/build.log" || true)"
[ "$(podman image inspect -f '{{.Config.User}}' "$image")" = flashserve ] || fail "image does not run as a non-root user"

# ---- run it on a free loopback port ---------------------------------------------------------
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=$(( 20000 + RANDOM % 20000 ))
while ! port_free $port; do port=$(( 20000 + RANDOM % 20000 )); done
cid=
cleanup() { [ -n "$cid" ] && podman rm -f -t 5 "$cid" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cid=$(podman run -d -p "127.0.0.1:$port:8000" -v "$models/stories260K:/model:ro" "$image" \
        --model /model --backend cpu --threads 1)
log "container ${cid:0:12} on 127.0.0.1:$port"

health=0
for _ in $(seq 1 150); do
  health=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
  [ "$health" = 200 ] && break
  [ "$(podman inspect -f '{{.State.Running}}' "$cid")" = true ] || break
  sleep 0.2
done
if [ "$health" != 200 ]; then
  podman logs "$cid" 2>&1 | tail -20
  fail "/health did not answer 200 (last: $health)"
fi
log "/health 200"

body=$(curl -s -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/completions" \
        -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}')
echo "$body" | grep -q '"object":"text_completion"' || fail "completion: $body"
text=$(echo "$body" | sed -n 's/.*"text":"\([^"]*\)".*/\1/p')
[ -n "$text" ] || fail "empty completion text: $body"
log "completion: $text"

podman healthcheck run "$cid" >/dev/null 2>&1 && log "HEALTHCHECK: healthy" \
  || fail "the image's HEALTHCHECK reports unhealthy"

# ---- SIGTERM -> clean exit 0 ------------------------------------------------------------------
podman stop -t 30 "$cid" >/dev/null   # SIGTERM, SIGKILL only after 30 s
code=$(podman inspect -f '{{.State.ExitCode}}' "$cid")
podman logs "$cid" >"$W/container.log" 2>&1 || true
[ "$code" = 0 ] || { tail -20 "$W/container.log"; fail "exit code after SIGTERM: $code"; }
grep -q "signal 15" "$W/container.log" || fail "the server did not log the SIGTERM"
log "stopped by SIGTERM, exit code 0"
log "PASSED"
