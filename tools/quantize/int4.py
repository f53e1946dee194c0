"""Round-to-nearest int4 per (row, group of input columns), and the packings of 4-bit values
into int32 words."""
import numpy as np

from .numbers import bf16_bits, to_f32

# Weights quantized at a time (whole rows): the temporaries stay a few MB, reused from the heap
# rather than mapped and faulted in afresh for each chunk. Rows are independent, so the chunk
# does not change any value.
CHUNK = 1 << 19


def group_index(w, group_size, col_norm):
    """g_idx [in] and the group count of weight w [out, in]: columns in order (col_norm None),
    or by falling col_norm [in] (act-order), group_size columns to a group (-1: one group)."""
    in_features = w.shape[1]
    gs = in_features if group_size == -1 else group_size
    perm = np.arange(in_features)
    if col_norm is not None:  # falling column norm, stable
        perm = np.argsort(-col_norm, kind="stable")
    g_idx = np.empty(in_features, np.int32)
    g_idx[perm] = np.arange(in_features) // gs
    return g_idx, in_features // gs


def _stored_scale(s, scale_dtype):
    """The scale as the file stores it (bf16 or f16), so codes are computed with that value."""
    s = to_f32("BF16", bf16_bits(s)) if scale_dtype == "BF16" else s.astype(np.float16)
    return s.astype(np.float64)


def quantize_int4(w, g_idx, groups, sym, scale_dtype, min_zero=0):
    """w [out, in] f32; g_idx [in] giving each group in // groups columns. Returns codes
    [out, in] uint8 (0..15, input order), scales [out, groups] f32 (values exactly representable
    in scale_dtype), zeros [out, groups] uint8.
    sym: scale = amax / 7.5, zero 8; else scale = (max - min) / 15 over a range holding 0,
    zero = round(-min / scale) (at least min_zero: GPTQ's classic files cannot store 0)."""
    out, cols = w.shape
    gs = cols // groups
    order = np.argsort(g_idx, kind="stable")  # the columns, group by group
    in_order = bool(np.all(order == np.arange(cols)))  # no act-order: no gather, no scatter
    codes = np.empty(w.shape, np.uint8)
    scales = np.empty((out, groups), np.float32)
    zeros = np.empty((out, groups), np.uint8)
    step = max(1, CHUNK // cols)
    for r0 in range(0, out, step):
        r1 = min(out, r0 + step)
        rows = w[r0:r1] if in_order else w[r0:r1][:, order]
        wg = rows.astype(np.float64).reshape(r1 - r0, groups, gs)
        lo, hi = np.minimum(wg.min(2), 0), np.maximum(wg.max(2), 0)
        s = np.maximum(np.abs(lo), hi) / 7.5 if sym else (hi - lo) / 15.0
        s = _stored_scale(np.where(s > 0, s, 1.0), scale_dtype)
        z = np.full(s.shape, 8.0) if sym else np.clip(np.round(-lo / s), min_zero, 15)
        # q = clip(round(w / s) + z, 0, 15), in place
        q = np.divide(wg, s[:, :, None], out=wg)
        np.round(q, out=q)
        q += z[:, :, None]
        np.clip(q, 0, 15, out=q)
        q = q.reshape(r1 - r0, cols).astype(np.uint8)
        if in_order:
            codes[r0:r1] = q
        else:
            codes[r0:r1, order] = q
        scales[r0:r1] = s
        zeros[r0:r1] = z.astype(np.uint8)
    return codes, scales, zeros


def pack_nibbles(codes, axis, positions=tuple(range(8))):
    """Packs eight 4-bit values along `axis` into int32: value j of each eight in nibble
    positions[j] (bits 4 * positions[j])."""
    c = np.moveaxis(codes, axis, -1)
    c = c.reshape(c.shape[:-1] + (c.shape[-1] // 8, 8))
    packed = np.zeros(c.shape[:-1], np.uint32)
    for j, p in enumerate(positions):  # eight strided passes: faster than a reduce over 8
        packed |= c[..., j].astype(np.uint32) << np.uint32(4 * p)
    return np.moveaxis(packed.view(np.int32), -1, axis)
