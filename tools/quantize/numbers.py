"""Number formats: bf16 rounding and FP8 E4M3 codes."""
import numpy as np


def to_f32(dtype, arr):
    """Stored values (bits for BF16) -> f32."""
    if dtype == "BF16":
        u = arr.astype(np.uint32)
        u <<= 16  # in place: one f32-sized allocation, not two
        return u.view(np.float32)
    return arr.astype(np.float32)


def bf16_bits(x):
    """f32 -> bf16 bits, rounded to nearest even."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _e4m3_table():
    c = np.arange(127)  # 0x00..0x7E: the non-negative finite codes, increasing in value
    e, m = c >> 3, c & 7
    return np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


E4M3 = _e4m3_table()


def e4m3_encode(x):
    """Nearest E4M3 code of f32 values (ties to the even code), saturating at +-448; -0.0 gives
    0x00, a negative value rounding to zero 0x80. Works on the f32 bits: normal values (from
    2^-6) round their mantissa to 3 bits, nearest even, and rebias the exponent (127 -> 7);
    subnormals are multiples of 2^-9."""
    x = np.asarray(x, np.float32)
    a = np.minimum(np.abs(x), np.float32(448.0))
    u = a.view(np.uint32)
    normal = ((u + np.uint32(0x7FFFF) + ((u >> 20) & 1)) >> 20).astype(np.int32) - (120 << 3)
    sub = np.rint(a * np.float32(2.0 ** 9)).astype(np.int32)
    code = np.where(a < np.float32(2.0 ** -6), sub, normal)
    return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def e4m3_decode(c):
    v = E4M3[c & 0x7F]
    return np.where(c & 0x80, -v, v).astype(np.float32)
