#!/usr/bin/env bash
# flashserve behind nginx on loopback (docs/DOCKER.md, "Behind a reverse proxy"): the proxy block
# of that page, without TLS. Checks: requests pass; an SSE stream is not buffered
# (proxy_buffering off: the first event arrives long before the stream ends); a client that
# hangs up on nginx cancels the request in flashserve (its KV blocks come back).
# usage: run.sh FLASHSERVE_BINARY MODEL_DIR. Exit 77 (skipped) when nginx or curl is missing.
set -uo pipefail
bin=$1 model=$2
for tool in nginx curl python3; do
  if ! command -v $tool >/dev/null && [ ! -x /usr/sbin/$tool ]; then
    echo "SKIPPED: $tool is not installed (apt-get install nginx curl)"; exit 77
  fi
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
dir=$(mktemp -d /tmp/flashserve_nginx_XXXXXX)
server_pid= nginx_pid= curl_pid=
cleanup() {
  [ -n "$curl_pid" ] && kill "$curl_pid" 2>/dev/null
  [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server log"; tail -20 "$dir/server.log"; echo "--- nginx log"; tail -20 "$dir/error.log"; exit 1; }

# flashserve on a free port; behind a proxy every connection comes from the proxy's address.
"$bin" --model "$model" --backend cpu --threads 1 --port 0 --no-request-log \
  --max-connections-per-client 0 > "$dir/server.out" 2> "$dir/server.log" &
server_pid=$!
for _ in $(seq 100); do
  port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\).*|\1|p' "$dir/server.out" 2>/dev/null)
  [ -n "$port" ] && break; sleep 0.1
done
[ -n "$port" ] || fail "flashserve did not start"
proxy_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

mkdir -p "$dir/tmp"
cat > "$dir/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  upstream flashserve {
    server 127.0.0.1:$port;
    keepalive 32;
  }
  server {
    listen 127.0.0.1:$proxy_port;
    client_header_timeout 10s;
    client_body_timeout 30s;
    client_max_body_size 4m;
    location / {
      proxy_pass http://flashserve;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_buffering off;
      proxy_read_timeout 3600s;
    }
  }
}
CONF
"$nginx_bin" -p "$dir" -c "$dir/nginx.conf" &
nginx_pid=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$proxy_port/health" && break; sleep 0.1; done
url="http://127.0.0.1:$proxy_port"
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] || fail "/health through nginx"
out=$(curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}')
direct=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}')
[ "$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')" = \
  "$(echo "$direct" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')" ] \
  || fail "completion through nginx differs: $out vs $direct"
echo "ok: a completion through nginx equals the direct one"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X GET "$url/v1/completions")" = 405 ] || fail "405 through nginx"

# Streaming: the first byte comes long before the end (not buffered), and the stream ends [DONE].
# The stream is n x 480 tokens, n (2 to 32) sized for about 3 s of this build's decoding, timed on
# 4 x 48 tokens: the sanitizer builds decode ~30x slower than a release build.
calib=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$port/v1/completions" \
  -H 'Content-Type: application/json' \
  -d '{"prompt":"Once","max_tokens":48,"n":4,"ignore_eos":true,"temperature":1,"seed":1}')
n=$(python3 -c "print(max(2, min(32, round(3 * 4 * 48 / $calib / 480))))")
times=$(curl -sN -o "$dir/stream.txt" -w '%{time_starttransfer} %{time_total}' "$url/v1/completions" \
  -H 'Content-Type: application/json' \
  -d '{"prompt":"Once","max_tokens":480,"n":'"$n"',"ignore_eos":true,"temperature":1,"seed":1,"stream":true}')
read -r first total <<< "$times"
grep -q '^data: \[DONE\]' "$dir/stream.txt" || fail "stream without [DONE]"
python3 -c "import sys; f,t=$first,$total; sys.exit(0 if t > 0.3 and f < t / 4 else 1)" \
  || fail "stream buffered: first byte at $first s of $total s"
echo "ok: streamed $n x 480 tokens through nginx: first byte at ${first} s, end at ${total} s, [DONE] seen"

# Disconnect: a long stream through nginx, the client hangs up, the server cancels it.
curl -sN -o /dev/null "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once","max_tokens":480,"n":64,"ignore_eos":true,"temperature":1,"seed":2,"stream":true}' &
curl_pid=$!
for _ in $(seq 100); do [ "$(metric flashserve_kv_blocks_used)" != 0 ] && break; sleep 0.05; done
[ "$(metric flashserve_kv_blocks_used)" != 0 ] || fail "the long stream did not start"
before=$(metric flashserve_client_disconnects_total)
kill "$curl_pid"; wait "$curl_pid" 2>/dev/null; curl_pid=
t0=$(date +%s.%N)
for _ in $(seq 60); do [ "$(metric flashserve_kv_blocks_used)" = 0 ] && break; sleep 0.05; done
t1=$(date +%s.%N)
[ "$(metric flashserve_kv_blocks_used)" = 0 ] || fail "blocks still used 3 s after the client left"
after=$(metric flashserve_client_disconnects_total)
python3 -c "import sys; sys.exit(0 if $after > $before else 1)" || fail "no disconnect counted"
echo "ok: client hang-up through nginx freed the blocks in $(python3 -c "print(round($t1 - $t0, 2))") s"

kill "$server_pid"; wait "$server_pid"; rc=$?; server_pid=
[ $rc = 0 ] || fail "flashserve exit status $rc"
echo "PASSED"
