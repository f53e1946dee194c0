"""The part of the `sentencepiece` module that llama.cpp's convert_hf_to_gguf.py uses to read a
tokenizer.model (piece, score and type per id), for GPU machines whose Python lacks the package.
Put this folder on PYTHONPATH only when `import sentencepiece` fails. It parses the model's
protobuf (ModelProto field 1: repeated SentencePiece {1: piece, 2: score, 3: type}) with the
standard library; it cannot encode text, which the converter does not need.
"""
import struct

_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6


def _varint(buf, i):
    value, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def _fields(buf):
    """(field number, wire type, value) of a protobuf message: ints, floats or bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = struct.unpack("<f", buf[i:i + 4])[0], i + 4
        else:
            raise ValueError(f"tokenizer.model: protobuf wire type {wire} not expected")
        yield num, wire, value


class SentencePieceProcessor:
    def __init__(self, model_file=None):
        self._pieces = []  # (piece, score, type)
        if model_file is not None:
            self.LoadFromFile(model_file)

    def LoadFromFile(self, path):
        with open(path, "rb") as f:
            buf = f.read()
        self._pieces = []
        for num, wire, value in _fields(buf):
            if num != 1 or wire != 2:
                continue  # trainer and normalizer specs
            piece, score, kind = "", 0.0, _NORMAL
            for n, _, v in _fields(value):
                if n == 1:
                    piece = bytes(v).decode("utf-8")
                elif n == 2:
                    score = v
                elif n == 3:
                    kind = v
            self._pieces.append((piece, score, kind))
        return True

    Load = LoadFromFile

    def vocab_size(self):
        return len(self._pieces)

    def IdToPiece(self, i):
        return self._pieces[i][0]

    def GetScore(self, i):
        return self._pieces[i][1]

    def IsUnknown(self, i):
        return self._pieces[i][2] == _UNKNOWN

    def IsControl(self, i):
        return self._pieces[i][2] == _CONTROL

    def IsUnused(self, i):
        return self._pieces[i][2] == _UNUSED

    def IsByte(self, i):
        return self._pieces[i][2] == _BYTE
