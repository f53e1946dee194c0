"""The quantized folder: safetensors shards written as the tensors arrive (one shard's worth
held at a time), the index as transformers writes it, config.json with the quantization_config,
and the tokenizer and generation files copied beside, so the folder is served as it is."""
import fnmatch
import json
import os
import re
import shutil

from . import safetensors
from .errors import QuantizeError
from .source import INDEX

# Files a server or transformers reads beside the weights: tokenizers (HF, SentencePiece, BPE
# vocab + merges, tiktoken, remote-code tokenizers), their special tokens, chat templates and
# generation defaults.
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
              "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "*.tiktoken",
              "tokenization_*.py", "generation_config.json", "chat_template.jinja",
              "chat_template.json", "preprocessor_config.json")
SIDE_FOLDERS = ("additional_chat_templates",)  # transformers' named extra templates

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SHARD = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")


def parse_size(text):
    """'5GB' (10^9), '2GiB' (2^30), '500MB', or bytes -> bytes, as transformers' max_shard_size."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?B|B)?\s*", text.upper())
    if not m or float(m.group(1)) <= 0:
        raise QuantizeError(f"--max-shard-size {text!r}: want a size such as 5GB, 2GiB or 500MB")
    return int(float(m.group(1)) * _UNITS[m.group(2) or ""])


def prepare(out, source):
    """Creates `out`, refusing the source folder itself, and removes weight files of an earlier
    run there (a folder holding both model.safetensors and shards would be ambiguous)."""
    if source and os.path.exists(out) and os.path.samefile(out, source):
        raise QuantizeError(f"--out {out} is the source folder; write the quantized copy elsewhere")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        if name in ("model.safetensors", INDEX) or _SHARD.match(name) or name.endswith(".part"):
            os.remove(os.path.join(out, name))


class ShardWriter:
    """Takes tensors in output order and writes them into shards of at most max_bytes each (a
    tensor larger than that gets a shard of its own), as transformers' save_pretrained fills
    them: in order, a new shard when the next tensor would not fit. One shard: model.safetensors
    and no index."""

    def __init__(self, out, max_bytes):
        self.out, self.max_bytes = out, max_bytes
        self.current, self.current_bytes = {}, 0
        self.parts = []  # [(part file, [tensor names])]
        self.total_bytes = 0

    def add(self, name, dtype, arr):
        size = arr.nbytes
        if self.current and self.current_bytes + size > self.max_bytes:
            self._flush()
        self.current[name] = (dtype, arr)
        self.current_bytes += size
        self.total_bytes += size

    def _flush(self):
        path = os.path.join(self.out, f"model-{len(self.parts) + 1:05d}.safetensors.part")
        safetensors.write(path, self.current)
        self.parts.append((path, sorted(self.current)))
        self.current, self.current_bytes = {}, 0

    def abandon(self):
        """Removes the parts written so far (a run that stops leaves no partial weights)."""
        for path, _ in self.parts:
            os.remove(path)
        self.parts, self.current = [], {}

    def finish(self):
        """Renames the parts to their final names and writes the index; returns the file names."""
        if self.current or not self.parts:
            self._flush()
        n = len(self.parts)
        if n == 1:
            os.replace(self.parts[0][0], os.path.join(self.out, "model.safetensors"))
            return ["model.safetensors"]
        weight_map, names = {}, []
        for i, (path, tensors) in enumerate(self.parts):
            name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            os.replace(path, os.path.join(self.out, name))
            weight_map.update({t: name for t in tensors})
            names.append(name)
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
        with open(os.path.join(self.out, INDEX), "w") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
        return names


def copy_side_files(source, out):
    """Copies the tokenizer, chat-template and generation files of `source` into `out`;
    returns their names."""
    copied = []
    for name in sorted(os.listdir(source)):
        path = os.path.join(source, name)
        if os.path.isfile(path) and any(fnmatch.fnmatchcase(name, p) for p in SIDE_FILES):
            shutil.copyfile(path, os.path.join(out, name))
            copied.append(name)
        elif os.path.isdir(path) and name in SIDE_FOLDERS:
            shutil.copytree(path, os.path.join(out, name), dirs_exist_ok=True)
            copied.append(name + "/")
    return copied


def write_config(out, config):
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
