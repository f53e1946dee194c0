#!/usr/bin/env python3
"""Three flashserve replicas on loopback behind deploy/nginx/prefix-affinity.conf (its server
lines and listen port replaced, nothing else).

Checks:
- every turn of a multi-turn conversation (X-Conversation-Id) lands on one replica, and from turn
  2 its prompt is served from that replica's prefix cache (usage.prompt_tokens_details.cached_tokens
  > 0); the conversations spread over more than one replica;
- a request without the headers falls back to the client address and is served;
- a replica killed (SIGKILL) between turns: its conversations' next turns are answered (200, no
  client error) by another replica, stay there, and are cached again from their second turn
  there (their first turn there is cold: nothing cached); the other conversations keep their
  replica.

usage: replicas_nginx.py FLASHSERVE_BINARY MODEL_DIR NGINX_CONF
Exit 0 passed, 1 failed, 77 skipped (nginx missing; the reason is printed).
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

binary, model, conf_path = sys.argv[1:4]
nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
if nginx is None:
    print("SKIPPED: nginx is not installed (apt-get install nginx)")
    sys.exit(77)

work = tempfile.mkdtemp(prefix="flashserve_replicas_")
procs = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(msg):
    print("FAIL:", msg)
    for name in sorted(os.listdir(work)):
        if name.endswith(".log"):
            with open(os.path.join(work, name), errors="replace") as f:
                print(f"--- {name}\n" + "".join(f.readlines()[-15:]))
    sys.exit(1)


def start_replica(i):
    port = free_port()
    log = open(os.path.join(work, f"replica{i}.log"), "w")
    p = subprocess.Popen([binary, "--model", model, "--backend", "cpu", "--threads", "1",
                          "--host", "127.0.0.1", "--port", str(port),
                          "--max-connections-per-client", "0"],
                         stdout=subprocess.DEVNULL, stderr=log)
    procs.append(p)
    return port, p


def get(port, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    return r.status, r.read()


def wait_healthy(port, what):
    for _ in range(300):
        try:
            if get(port, "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    fail(f"{what} did not become healthy")


def complete(port, prompt, conversation=None):
    """POST a greedy completion through nginx; returns (status, json, upstream address)."""
    headers = {"Content-Type": "application/json"}
    if conversation:
        headers["X-Conversation-Id"] = conversation
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(
        {"prompt": prompt, "max_tokens": 12, "temperature": 0}), headers)
    r = c.getresponse()
    body = r.read()
    try:
        j = json.loads(body)
    except ValueError:
        j = {"raw": body.decode(errors="replace")}
    return r.status, j, r.getheader("X-Flashserve-Upstream", "")


try:
    replicas = [start_replica(i) for i in range(3)]
    for i, (port, _) in enumerate(replicas):
        wait_healthy(port, f"replica {i}")
    by_addr = {f"127.0.0.1:{port}": i for i, (port, _) in enumerate(replicas)}

    # The deploy file with its server lines and listen port replaced, nothing else.
    proxy_port = free_port()
    with open(conf_path) as f:
        lines = f.read().splitlines()
    out, k = [], 0
    for line in lines:
        s = line.strip()
        if s.startswith("server flashserve-"):
            line = line.replace(s.split()[1], f"127.0.0.1:{replicas[k][0]}")
            k += 1
        elif s.startswith("listen "):
            line = line.replace(s, f"listen 127.0.0.1:{proxy_port};")
        out.append(line)
    if k != 3:
        fail(f"{conf_path}: {k} server lines, expected 3")
    os.makedirs(os.path.join(work, "tmp"))
    with open(os.path.join(work, "prefix-affinity.conf"), "w") as f:
        f.write("\n".join(out) + "\n")
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write(f"""daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx_error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {work}/tmp/body;
  proxy_temp_path {work}/tmp/proxy;
  fastcgi_temp_path {work}/tmp/fastcgi;
  uwsgi_temp_path {work}/tmp/uwsgi;
  scgi_temp_path {work}/tmp/scgi;
  include {work}/prefix-affinity.conf;
}}
""")
    procs.append(subprocess.Popen([nginx, "-p", work, "-c", os.path.join(work, "nginx.conf")],
                                  stderr=open(os.path.join(work, "nginx.log"), "w")))
    wait_healthy(proxy_port, "nginx")

    # Conversations: each turn's prompt is the previous prompt, its answer and a new line. They
    # differ from their first token, so a cached block can only be the conversation's own.
    opening = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
               "in the park with her friends and her dog. One day,")
    conversations = {f"conv-{n}": {"prompt": f"{n + 1}. " + opening, "replica": None} for n in range(8)}

    def turn(cid, expect_replica=None, expect_cached=True, label=""):
        c = conversations[cid]
        status, j, upstream = complete(proxy_port, c["prompt"], cid)
        if status != 200:
            fail(f"{cid} {label}: status {status}: {j}")
        replica = by_addr.get(upstream.split(",")[-1].strip())  # after retries: the last one
        if replica is None:
            fail(f"{cid} {label}: upstream '{upstream}' is no replica")
        if expect_replica is not None and replica != expect_replica:
            fail(f"{cid} {label}: served by replica {replica}, its conversation was on {expect_replica}")
        cached = j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        if (cached > 0) != expect_cached:  # a replica that never saw it has nothing cached
            fail(f"{cid} {label}: cached_tokens {cached} on replica {replica} (prompt "
                 f"{j['usage']['prompt_tokens']} tokens)")
        c["prompt"] += j["choices"][0]["text"] + "\nAnd then"
        c["replica"] = replica
        return replica, cached

    for cid in conversations:
        turn(cid, expect_cached=False, label="turn 1")
    for t in (2, 3):
        for cid, c in conversations.items():
            turn(cid, expect_replica=c["replica"], label=f"turn {t}")
    used = sorted({c["replica"] for c in conversations.values()})
    print(f"ok: 8 conversations x 3 turns, each on one replica ({used} used), cached from turn 2 "
          "(none at turn 1)")
    if len(used) < 2:
        fail(f"every conversation hashed to replica {used}: no spreading")

    status, j, upstream = complete(proxy_port, "Lily liked")
    if status != 200:
        fail(f"no headers (fallback to the client address): status {status}")
    print("ok: without the headers the client address picks the replica")

    # Lose the replica holding conv-0's conversation.
    lost = conversations["conv-0"]["replica"]
    replicas[lost][1].send_signal(signal.SIGKILL)
    replicas[lost][1].wait()
    moved = [cid for cid, c in conversations.items() if c["replica"] == lost]
    kept = {cid: c["replica"] for cid, c in conversations.items() if c["replica"] != lost}
    for cid in moved:  # answered elsewhere (a cold prompt there), then stays
        turn(cid, expect_cached=False, label="first turn after its replica died")
        if conversations[cid]["replica"] == lost:
            fail(f"{cid}: still on the dead replica")
    for cid in conversations:
        turn(cid, expect_replica=conversations[cid]["replica"], label="after the loss")
    for cid, r in kept.items():
        if conversations[cid]["replica"] != r:
            fail(f"{cid}: moved from replica {r} though its replica lives")
    print(f"ok: replica {lost} killed: its {len(moved)} conversations moved, answered 200, stay and "
          f"are cached on their new replica; the other {len(kept)} kept theirs")
    print("PASSED")
finally:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)
