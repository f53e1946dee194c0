# Sourced by the podman tests (tests/docker/test_docker.sh, tests/deploy/kube_play.sh): rootful
# podman with its storage, run state and config in the work folder $W, as this container allows
# (podman's default ulimits exceed what it may grant, so runc would fail; cgroupfs, file events).
# Calls the caller's skip() when podman cannot run here.
podman_state() {
  mkdir -p "$W/storage" "$W/run/libpod-tmp" "$W/tmp"
  cat > "$W/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$W/storage"
runroot = "$W/run"
CONF
  cat > "$W/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$W/events.log"
tmp_dir = "$W/run/libpod-tmp"
CONF
  export CONTAINERS_STORAGE_CONF=$W/storage.conf CONTAINERS_CONF=$W/containers.conf TMPDIR=$W/tmp
  podman info > "$W/podman-info.log" 2>&1 || { tail -5 "$W/podman-info.log"; skip "podman info fails here"; }
}
