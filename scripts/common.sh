# Shared by scripts/run.sh, scripts/test.sh and scripts/fetch_model.sh: installs what the build
# needs (Debian/Ubuntu, when root), and configures + builds a tree. Sourced, not run.

FS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# fs_install_packages [PKG...]: the build's packages and PKG... (see fs_apt_install).
fs_install_packages() {
  fs_apt_install cmake ninja-build g++ pkg-config libsentencepiece-dev libcpp-httplib-dev \
                 nlohmann-json3-dev libgtest-dev libpcre2-dev libutf8proc-dev libcli11-dev \
                 python3-numpy python3-jinja2 python3-sentencepiece nettle-dev "$@"
}

# fs_apt_install PKG...: installs those of the Debian/Ubuntu packages PKG... that are missing,
# with apt-get, when root; otherwise prints the missing ones and returns 1.
fs_apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "missing packages: ${missing[*]} (install them with apt-get as root)" >&2
    return 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
}

# fs_configure DIR [cmake args...]: configures DIR with Ninja. CMake's progress is hidden; its
# "flashserve:" summary (compiler, CUDA or not and why, GPU architectures) and its warnings are
# shown. A failed configure prints everything.
fs_configure() {
  local dir=$1; shift
  local log; log=$(mktemp)
  if ! cmake -S "$FS_ROOT" -B "$dir" -G Ninja "$@" >"$log"; then
    cat "$log"; rm -f "$log"; return 1
  fi
  sed -n 's/^-- \(flashserve.*\)$/\1/p' "$log"
  rm -f "$log"
}

# fs_build DIR [cmake args...] [-- targets...]: configure and build DIR: everything, or only the
# targets named after "--".
fs_build() {
  local dir=$1; shift
  local args=() targets=()
  while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; targets=("$@"); break; fi
    args+=("$1"); shift
  done
  fs_configure "$dir" "${args[@]}" || return 1
  cmake --build "$dir" -j"$(nproc)" ${targets[@]:+--target "${targets[@]}"}
}

# The default model: ../shared/models/stories260K beside the checkout, else models/stories260K
# (what scripts/fetch_model.sh downloads).
fs_default_model() {
  for d in "$FS_ROOT/../shared/models/stories260K" "$FS_ROOT/models/stories260K"; do
    [ -f "$d/stories260K.bin" ] && { echo "$d"; return 0; }
  done
  echo "no default model: run scripts/fetch_model.sh, or pass --model DIR" >&2
  return 1
}
