"""FP8 E4M3 weights: one scale per output channel (compressed-tensors) or per block of
block x block weights (block-wise FP8, scale_inv = amax / 448)."""
import numpy as np

from .numbers import e4m3_encode

ROWS_AT_ONCE = 512  # rows encoded at a time (bounds f64 temporaries; rows are independent)


def quantize_channel(w):
    """w [out, in] f32 -> codes [out, in] uint8, scales [out, 1] f32."""
    s = np.maximum(np.abs(w).max(1), 1e-12).astype(np.float32) / 448.0
    codes = np.empty(w.shape, np.uint8)
    for r0 in range(0, w.shape[0], ROWS_AT_ONCE):
        r1 = r0 + ROWS_AT_ONCE
        codes[r0:r1] = e4m3_encode(w[r0:r1] / s[r0:r1, None])
    return codes, s[:, None]


def quantize_blocks(w, b):
    """w [out, in] f32 -> codes [out, in] uint8, scales [ceil(out / b), ceil(in / b)] f32
    (partial edge blocks scaled by their own amax)."""
    rows, cols = w.shape
    br, bc = -(-rows // b), -(-cols // b)
    padded = np.zeros((br * b, bc * b), np.float32)  # zeros leave each block's amax unchanged
    padded[:rows, :cols] = np.abs(w)
    amax = padded.reshape(br, b, bc, b).max(axis=(1, 3)).astype(np.float64)
    s = (np.maximum(amax, 1e-12) / 448.0).astype(np.float32)
    codes = np.empty(w.shape, np.uint8)
    step = max(1, ROWS_AT_ONCE // b)  # block rows at a time
    for i0 in range(0, br, step):
        i1 = min(br, i0 + step)
        r0, r1 = i0 * b, min(rows, i1 * b)
        blk = np.zeros(((i1 - i0) * b, bc * b), np.float32)
        blk[:r1 - r0, :cols] = w[r0:r1]
        q = blk.reshape(i1 - i0, b, bc, b) / s[i0:i1, None, :, None]
        codes[r0:r1] = e4m3_encode(q).reshape(blk.shape)[:r1 - r0, :cols]
    return codes, s


def block_scales_full(s, b, shape):
    """scales [ceil(out / b), ceil(in / b)] -> one per weight [out, in]."""
    return np.repeat(np.repeat(s, b, 0), b, 1)[:shape[0], :shape[1]]
