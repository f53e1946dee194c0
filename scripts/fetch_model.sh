#!/usr/bin/env bash
# Downloads the default model, stories260K (a TinyStories Llama trained by Andrej Karpathy, MIT),
# from its public home, the karpathy/tinyllamas repository on Hugging Face, into models/.
# Only needed where ../shared/models/stories260K is not present.
#   scripts/fetch_model.sh [--dest DIR] [--dry-run]
# --dest DIR   where to put it (default models/stories260K, where scripts/run.sh looks)
# --dry-run    no download, no install: checks the files already in DIR and lists the URLs of
#              the missing ones
# Both files are checked by SHA-256 (the hashes of the published files): a download is moved into
# place only when its hash matches; a file already present with another hash is an error.
# Needs curl: installed with apt-get when run as root (scripts/common.sh), else asked for.
set -euo pipefail
source "$(dirname "$0")/common.sh"

dest="$FS_ROOT/models/stories260K"
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dest) dest=${2:?--dest needs a folder}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch_model.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

base="https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K"
declare -A sha256=(
  [stories260K.bin]=b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696
  [tok512.model]=822b28dcdee7b4f2de3332e0066a3f33688e08afb26e9e7808a58aa6426bd55b
)
files=(stories260K.bin tok512.model)

hash_ok() {  # hash_ok FILE NAME: FILE has NAME's published SHA-256
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "${sha256[$2]}" ]
}

missing=()
for f in "${files[@]}"; do
  if [ -f "$dest/$f" ]; then
    if ! hash_ok "$dest/$f" "$f"; then
      echo "fetch_model.sh: $dest/$f is not the published file (SHA-256 differs);" \
           "remove it and run again" >&2
      exit 1
    fi
    echo "ok: $dest/$f"
  else
    missing+=("$f")
  fi
done

if [ "$dry_run" = 1 ]; then
  for f in ${missing[@]+"${missing[@]}"}; do echo "would download: $base/$f -> $dest/$f"; done
  exit 0
fi

if [ ${#missing[@]} -gt 0 ] && ! command -v curl >/dev/null; then
  fs_apt_install curl || true
  if ! command -v curl >/dev/null; then
    echo "fetch_model.sh: needs curl to download the model; install it (apt-get install curl," \
         "as root) or copy ${missing[*]} into $dest by hand" >&2
    exit 1
  fi
fi

mkdir -p "$dest"
for f in ${missing[@]+"${missing[@]}"}; do
  curl -fL --retry 3 -o "$dest/$f.part" "$base/$f"
  if ! hash_ok "$dest/$f.part" "$f"; then
    rm -f "$dest/$f.part"
    echo "fetch_model.sh: downloaded $f does not have the published SHA-256; not kept" >&2
    exit 1
  fi
  mv "$dest/$f.part" "$dest/$f"
  echo "downloaded: $dest/$f"
done
echo "model in $dest"
