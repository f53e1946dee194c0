#!/usr/bin/env python3
"""llama.cpp's convert_hf_to_gguf.py for flashserve's random-weight models.

    convert.py LLAMA_CPP_DIR MODEL_DIR --outtype bf16 --outfile OUT.gguf

The random models carry Llama 2's SentencePiece tokenizer.model whatever their family, while
llama.cpp reads the Qwen 3 MoE and gpt-oss vocabularies from their own tokenizer.json: here every
family's vocabulary is read as SentencePiece. The token list does not change the speed. Where the
machine's Python lacks the sentencepiece package, this folder's sentencepiece.py reads the file.
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
llama_cpp = os.path.abspath(sys.argv[1])
sys.path[:0] = [llama_cpp, os.path.join(llama_cpp, "gguf-py")]
try:
    import sentencepiece  # noqa: F401
except ImportError:
    sys.path.insert(0, here)

import convert_hf_to_gguf  # noqa: E402
from conversion.base import TextModel  # noqa: E402

TextModel._set_vocab_gpt2 = lambda self: self._set_vocab_sentencepiece()
sys.argv = [os.path.join(llama_cpp, "convert_hf_to_gguf.py")] + sys.argv[2:]
convert_hf_to_gguf.main()
