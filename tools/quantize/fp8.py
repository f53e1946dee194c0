"""FP8 E4M3 weights: one scale per output channel (compressed-tensors) or per block of
block x block weights (block-wise FP8, scale_inv = amax / 448)."""
import numpy as np

from .numbers import e4m3_encode

# Weights encoded at a time (whole rows, or block rows): temporaries of a few MB, reused from
# the heap. Rows are independent, so the chunk does not change any value.
CHUNK = 1 << 19


def quantize_channel(w):
    """w [out, in] f32 -> codes [out, in] uint8, scales [out, 1] f32."""
    s = np.maximum(np.abs(w).max(1), 1e-12).astype(np.float32) / 448.0
    codes = np.empty(w.shape, np.uint8)
    step = max(1, CHUNK // w.shape[1])
    for r0 in range(0, w.shape[0], step):
        r1 = r0 + step
        codes[r0:r1] = e4m3_encode(w[r0:r1] / s[r0:r1, None])
    return codes, s[:, None]


def quantize_blocks(w, b):
    """w [out, in] f32 -> codes [out, in] uint8, scales [ceil(out / b), ceil(in / b)] f32
    (partial edge blocks scaled by their own amax)."""
    rows, cols = w.shape
    br, bc = -(-rows // b), -(-cols // b)
    s = np.empty((br, bc), np.float32)
    codes = np.empty(w.shape, np.uint8)
    step = max(1, CHUNK // (b * bc * b))  # block rows at a time
    blk = np.zeros((step * b, bc * b), np.float32)  # zero padding leaves each block's amax as is
    for i0 in range(0, br, step):
        i1 = min(br, i0 + step)
        r0, r1 = i0 * b, min(rows, i1 * b)
        part = blk[:(i1 - i0) * b]
        part[:r1 - r0, :cols] = w[r0:r1]
        part[r1 - r0:] = 0  # the last block row's padding
        blocks = part.reshape(i1 - i0, b, bc, b)
        amax = np.abs(blocks).max(axis=(1, 3)).astype(np.float64)
        s[i0:i1] = np.maximum(amax, 1e-12) / 448.0
        q = blocks / s[i0:i1, None, :, None]
        codes[r0:r1] = e4m3_encode(q).reshape(part.shape)[:r1 - r0, :cols]
    return codes, s


def block_scales_full(s, b, shape):
    """scales [ceil(out / b), ceil(in / b)] -> one per weight [out, in]."""
    return np.repeat(np.repeat(s, b, 0), b, 1)[:shape[0], :shape[1]]
