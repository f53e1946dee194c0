"""The source folder: config.json and the weights, as one model.safetensors or as shards named
by model.safetensors.index.json (Hugging Face's layout, and flashserve-random-model --shards)."""
import json
import os

from . import safetensors
from .errors import QuantizeError

INDEX = "model.safetensors.index.json"


def _read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise QuantizeError(f"{path}: not found ({what})") from None
    except (OSError, ValueError) as e:
        raise QuantizeError(f"{path}: cannot read {what} ({e})") from None


def read_config(folder):
    config = _read_json(os.path.join(folder, "config.json"), "the model's config.json")
    if not isinstance(config, dict):
        raise QuantizeError(f"{folder}/config.json: not a JSON object")
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "?")
        raise QuantizeError(f"{folder}/config.json: the checkpoint is quantized already "
                            f"({method}); quantize an f32, f16 or bf16 one")
    return config


def read_tensors(folder):
    """{name: TensorRef} of every tensor the checkpoint holds. model.safetensors wins where both
    layouts are present, as in flashserve's loader and transformers."""
    single, index = os.path.join(folder, "model.safetensors"), os.path.join(folder, INDEX)
    if os.path.exists(single):
        return safetensors.read_header(single)
    if not os.path.exists(index):
        raise QuantizeError(f"{folder}: no model.safetensors and no {INDEX}")
    weight_map = _read_json(index, "the shards' index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise QuantizeError(f"{index}: no weight_map naming the tensors' shards")
    headers, refs = {}, {}
    for name, shard in sorted(weight_map.items()):
        if not isinstance(shard, str) or os.path.basename(shard) != shard:
            raise QuantizeError(f"{index}: tensor {name} names shard {shard!r}, not a file name")
        if shard not in headers:
            path = os.path.join(folder, shard)
            if not os.path.exists(path):
                raise QuantizeError(f"{path}: not found (a shard {INDEX} names, for {name} "
                                    f"and {sum(s == shard for s in weight_map.values()) - 1} "
                                    f"other tensors)")
            headers[shard] = safetensors.read_header(path)
        if name not in headers[shard]:
            raise QuantizeError(f"{index}: tensor {name} is in {shard} by the weight_map, but "
                                f"{shard} does not hold it")
        refs[name] = headers[shard][name]
    return refs
