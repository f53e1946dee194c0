#!/usr/bin/env bash
# `podman kube play` of deploy/kubernetes/flashserve.yaml on this tree's CPU build: the pod
# becomes healthy through the manifest's probe, the API key comes from its Secret, the model from
# the `flashserve-model` volume claim, a completion is served, and `podman kube down` (SIGTERM)
# lets a stream in flight finish ([DONE], every choice "length") before the server exits 0.
# The stop is `podman pod stop -t <terminationGracePeriodSeconds>` (SIGTERM, then SIGKILL after
# the grace period, as Kubernetes does), then `podman kube down`: podman 4.3's `kube down` kills
# the containers at once (exit 137, measured), without a grace period.
#   kube_play.sh FLASHSERVE_BINARY MODEL_DIR MANIFEST WORK_DIR
# The image is made from the binary, the shared libraries it loads, sh and curl: the build tree's
# flashserve in a container, in a second, without a registry or a base image. podman runs an
# httpGet probe as `curl -f URL` through sh inside the container (Kubernetes' kubelet asks
# itself), hence those two, which the product image does without.
# The manifest's changes, all for running it on one machine without a GPU: the image, --backend
# cpu, no GPU limit, one replica, a host port on 127.0.0.1. podman 4.3 reads a secretKeyRef from
# a podman secret holding {"key": base64}, so the manifest's Secret becomes one.
# Exit 0 = passed, 77 = skipped (podman cannot run here; the reason is printed), 1 = failed.
set -uo pipefail
bin=$1 model=$2 manifest=$3
mkdir -p "$4" && W=$(cd "$4" && pwd)
log() { echo "[kube_play] $*"; }
skip() { echo "[kube_play] SKIPPED: $*"; exit 77; }
fail() { echo "[kube_play] FAILED: $*"; [ -n "${ctr:-}" ] && podman logs "$ctr" 2>&1 | tail -20; exit 1; }

command -v podman >/dev/null || skip "podman is not installed (apt-get install podman runc)"
command -v nsenter >/dev/null || skip "nsenter is not installed (util-linux)"
[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman with its storage in $W)"
rm -rf "$W/run" "$W/rootfs"
source "$(dirname "$0")/../docker/podman_state.sh"
podman_state

image=localhost/flashserve:kube-play
cleanup() {
  podman kube down "$W/kube.yaml" > /dev/null 2>&1
  podman secret rm flashserve > /dev/null 2>&1
  podman volume rm -f flashserve-model > /dev/null 2>&1
}
trap cleanup EXIT
cleanup

# ---- the image: the binary, its libraries, bash ------------------------------------------------
R=$W/rootfs
mkdir -p "$R/usr/local/bin" "$R/tmp" "$R/model"
chmod 1777 "$R/tmp"
cp "$bin" "$R/usr/local/bin/flashserve"
mkdir -p "$R/bin"
cp "$(command -v curl)" "$R/usr/local/bin/curl" || skip "curl is not installed"
cp "$(command -v sh)" "$R/bin/sh"
for lib in $( (ldd "$bin"; ldd "$(command -v curl)"; ldd "$(command -v sh)") \
              | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u); do
  mkdir -p "$R$(dirname "$lib")" && cp -L "$lib" "$R$lib"
done
tar -C "$R" -c . | podman import --change 'ENTRYPOINT ["/usr/local/bin/flashserve", "--host", "0.0.0.0", "--port", "8000"]' \
  --change 'ENV PATH=/usr/local/bin' - "$image" > /dev/null || fail "podman import"

# ---- the model volume, the secret, the manifest as played ----------------------------------------
podman volume create flashserve-model > /dev/null || fail "volume create"
cp -r "$model"/. "$(podman volume inspect -f '{{.Mountpoint}}' flashserve-model)/"
key=$(sed -n 's/^ *api-key: *\([^ #]*\).*/\1/p' "$manifest")
[ -n "$key" ] || fail "no api-key in the manifest's Secret"
printf '{"api-key": "%s"}' "$(printf %s "$key" | base64)" > "$W/secret.json"
podman secret create flashserve "$W/secret.json" > /dev/null || fail "secret create"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Every document but the Secret, with the changes above.
awk 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } !/\nkind: Secret\n/' "$manifest" | sed \
  -e "s|image: .*|image: $image|" \
  -e 's|args: \["--model", "/model",|args: ["--model", "/model", "--backend", "cpu", "--threads", "1",|' \
  -e 's|limits: {nvidia.com/gpu: [0-9]*}|limits: {}|' \
  -e 's|replicas: [0-9]*|replicas: 1|' \
  -e "s|- {name: http, containerPort: 8000}|- {name: http, containerPort: 8000, hostPort: $port, hostIP: 127.0.0.1}|" \
  > "$W/kube.yaml"
grep -q "hostPort: $port" "$W/kube.yaml" && grep -q "image: $image" "$W/kube.yaml" && grep -q -- '--backend' "$W/kube.yaml" \
  || fail "the manifest did not take the test's changes (did its lines change?)"
podman kube play "$W/kube.yaml" > "$W/play.log" 2>&1 || { cat "$W/play.log"; fail "podman kube play"; }
ctr=$(podman ps --format '{{.Names}}' | grep -- '-flashserve$' | head -n 1)
[ -n "$ctr" ] || fail "no flashserve container after kube play"
log "pod up: container $ctr on 127.0.0.1:$port"

# ---- healthy through the manifest's probe (podman runs it as the container's healthcheck) -------
probe=$(podman inspect -f '{{json .Config.Healthcheck.Test}}' "$ctr")
grep -q 'http://localhost:8000/health' <<< "$probe" || fail "the healthcheck is not the manifest's probe: $probe"
healthy=
for _ in $(seq 150); do
  podman healthcheck run "$ctr" > /dev/null 2>&1 && { healthy=1; break; }
  sleep 0.2
done
[ -n "$healthy" ] || fail "the probe never passed"
log "healthy through the manifest's probe"

# ---- the API key from the Secret -----------------------------------------------------------------
url=http://127.0.0.1:$port/v1/completions
code=$(curl -s -o /dev/null -w '%{http_code}' "$url" -d '{"prompt":"Once","max_tokens":4}')
[ "$code" = 401 ] || fail "without the key: $code, expected 401"
body=$(curl -s "$url" -H "Authorization: Bearer $key" -d '{"prompt":"Once upon a time","max_tokens":16,"temperature":0}')
grep -q '"finish_reason":"length"' <<< "$body" || fail "completion: $body"
log "completion with the Secret's key (401 without it)"

# ---- SIGTERM with a stream in flight: it finishes, exit 0 ----------------------------------------
# The stream's client sits in the pod's network namespace (as a client through a Service reaches
# the pod's address): podman stops the pod's infra container, and with it the host port's
# forwarding, at once, where Kubernetes keeps a pod's network until its containers have exited.
pid=$(podman inspect -f '{{.State.Pid}}' "$ctr")
nsenter --net="/proc/$pid/ns/net" curl -sN http://127.0.0.1:8000/v1/completions -H "Authorization: Bearer $key" \
  -d '{"prompt":"Once","max_tokens":480,"n":4,"ignore_eos":true,"stream":true}' > "$W/stream.txt" &
curl_pid=$!
for _ in $(seq 100); do [ -s "$W/stream.txt" ] && break; sleep 0.05; done
[ -s "$W/stream.txt" ] || fail "the stream did not start"
grace=$(sed -n 's/^ *terminationGracePeriodSeconds: *\([0-9]*\).*/\1/p' "$manifest")
podman pod stop -t "${grace:-30}" "$(podman inspect -f '{{.Pod}}' "$ctr")" > "$W/down.log" 2>&1 \
  || { cat "$W/down.log"; fail "podman pod stop"; }
wait $curl_pid
grep -q '^data: \[DONE\]' "$W/stream.txt" || fail "the stream was cut (no [DONE]): $(tail -c 300 "$W/stream.txt")"
lengths=$(grep -o '"finish_reason":"length"' "$W/stream.txt" | wc -l)
[ "$lengths" = 4 ] || fail "$lengths of 4 choices finished with length: $(grep -o '"finish_reason":"[a-z_]*"' "$W/stream.txt" | sort | uniq -c)"
exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$ctr")
[ "$exit_code" = 0 ] || fail "exit code after SIGTERM: '$exit_code'"
podman logs "$ctr" > "$W/server.log" 2>&1
grep -q "in-flight requests finished in" "$W/server.log" || fail "the server did not log its drain"
log "SIGTERM: the stream in flight finished (4 choices of 480 tokens, [DONE]), exit 0"
podman kube down "$W/kube.yaml" > "$W/down.log" 2>&1 || { cat "$W/down.log"; fail "podman kube down"; }
log "kube down: the pod is gone"
log "PASSED"
