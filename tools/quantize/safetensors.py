"""safetensors files: lazy reading (a header, then one tensor at a time from the file) and
writing. Format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and [begin, end) byte offsets into the data that follows, then the data."""
import json
import os
import struct

import numpy as np

from .errors import QuantizeError

# Stored dtype -> the numpy type holding its bits (bf16 and FP8 as raw integers).
NUMPY = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
         "I8": np.int8, "F8_E4M3": np.uint8, "BF16": np.uint16}


class TensorRef:
    """Where one stored tensor is: file, dtype, shape and byte range. Picklable, so worker
    processes read their own tensors instead of receiving them."""

    def __init__(self, path, name, dtype, shape, begin, end):
        self.path, self.name, self.dtype, self.shape = path, name, dtype, tuple(shape)
        self.begin, self.end = begin, end

    @property
    def nbytes(self):
        return self.end - self.begin

    def load(self):
        """numpy array [shape] of the stored bits (BF16 as uint16, F8_E4M3 as uint8)."""
        with open(self.path, "rb") as f:
            f.seek(self.begin)
            raw = f.read(self.nbytes)
        if len(raw) != self.nbytes:
            raise QuantizeError(f"{self.path}: truncated file (tensor {self.name} ends at byte "
                                f"{self.end}, the file at {self.begin + len(raw)})")
        return np.frombuffer(raw, dtype=NUMPY[self.dtype]).reshape(self.shape)


def read_header(path):
    """{name: TensorRef} of a safetensors file, checked against the file's size."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise QuantizeError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise QuantizeError(f"{path}: header length {n} past the end of the file")
            header = json.loads(f.read(n))
    except OSError as e:
        raise QuantizeError(f"{path}: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise QuantizeError(f"{path}: bad safetensors header ({e})") from None
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise QuantizeError(f"{path}: tensor {name} has a malformed header entry") from None
        if dtype not in NUMPY:
            raise QuantizeError(f"{path}: tensor {name} has dtype {dtype}, not one of "
                                f"{', '.join(NUMPY)}")
        count = int(np.prod(shape, dtype=np.int64))
        if e - b != count * np.dtype(NUMPY[dtype]).itemsize or b < 0:
            raise QuantizeError(f"{path}: tensor {name} {dtype} {shape} has {e - b} bytes")
        if 8 + n + e > size:
            raise QuantizeError(f"{path}: truncated file (tensor {name} ends at byte "
                                f"{8 + n + e}, the file at {size})")
        out[name] = TensorRef(path, name, dtype, shape, 8 + n + b, 8 + n + e)
    return out


def write(path, tensors):
    """tensors: {name: (dtype string, numpy array)}; laid out by falling element size (then
    name), as the safetensors library lays them out, so every tensor is aligned to its element
    size with no gaps between them."""
    header, blobs, offset = {}, [], 0
    order = sorted(tensors, key=lambda n: (-np.dtype(NUMPY[tensors[n][0]]).itemsize, n))
    for name in order:
        dtype, arr = tensors[name]
        raw = np.ascontiguousarray(arr.astype(NUMPY[dtype], copy=False)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in blobs:
            f.write(raw)
