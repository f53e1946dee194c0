"""The modules behind tools/quantize_checkpoint.py: reading a Hugging Face checkpoint (one file
or shards), quantizing its projections on every core, writing the quantized folder."""
