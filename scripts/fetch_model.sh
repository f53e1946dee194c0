#!/usr/bin/env bash
# Downloads the default model, stories260K (a TinyStories Llama trained by Andrej Karpathy, MIT),
# from its public home, the karpathy/tinyllamas repository on Hugging Face, into models/.
# Only needed where ../shared/models/stories260K is not present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/models/stories260K"
base="https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K"
mkdir -p "$dest"
for f in stories260K.bin tok512.model; do
  if [ ! -f "$dest/$f" ]; then
    curl -fL --retry 3 -o "$dest/$f.part" "$base/$f"
    mv "$dest/$f.part" "$dest/$f"
  fi
done
echo "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696  $dest/stories260K.bin" |
  sha256sum -c -
echo "model in $dest"
