"""Plain-numpy reference of the moe-ep contract, independent of the library under test.

This module re-implements, from the definitions in docs/design.md and docs/formats.md, the
scalar conversions (bf16 <-> float32 with round-to-nearest-even and NaN -> 0x7fc0, OCP e4m3 with
saturation to 448 and ties to the even code, OCP e2m1 saturating at 6, e8m0), the per-row wire
formats (fp8 blockwise with the FLT_MAX clamp of the encode multiplier, fp8 direct cast with
Inf -> NaN, mxfp4 with the OCP MX scale rule and the NaN scale byte for non-finite blocks,
int8/e3m4 blockwise with its per-block choice by the code energy, the sum of the squared int8
codes, below 2 * 127^2), the
dispatch and combine semantics of the CPU backend (canonical row order, local expert ids,
rows counted once per distinct local expert, fp32 sums in ascending destination rank order
rounded once to bf16), and decode mode (docs/design.md#decode-mode: one slab per local expert in
canonical order, the expert side's weighted sum of the raw expert outputs, products then
additions each rounded in fp32, rounded to bf16, then the source side's sum as in normal mode).
It never calls into moe_ep, so the tests compare two independent implementations; the codecs
of the first four formats were checked bit for bit against src/formats/codecs.h on millions of
random and edge values (ties, subnormals, 448/464, NaN, Inf, zero and tiny blocks), int8/e3m4
against the CPU backend through test_int8_e3m4_cpu.py. numpy has no bf16 or fp8 types: bf16 is
carried as uint16 bit patterns and e4m3/e2m1/e8m0/int8/e3m4 codes as uint8 (int8/e3m4's bf16
scale words as uint16), exactly as the Python package carries them. A NaN is skipped by amax
as the contract says; the tests never feed signalling NaNs, which glibc's fmaxf does not skip.
"""

import numpy as np

FP8_BLOCK = 128
MXFP4_BLOCK = 32
INT8_E3M4_BLOCK = 32
E4M3_MAX = np.float32(448.0)
E4M3_NAN = 0x7F
E8M0_NAN = 0xFF
E8M0_ONE = 127
BF16_NAN = 0x7FC0
FLT_MAX = np.float32(np.finfo(np.float32).max)
INT8_MAX = np.float32(127.0)   # symmetric int8: codes -127 .. 127
E3M4_MAX = np.float32(124.0)   # the largest e3m4 (bias 1) value
E3M4_WORD_BIT = 0x8000         # int8/e3m4 scale word: bit 15 set for an e3m4 block

# Wire format names: "fp8" is fp8 blockwise on either leg.
FORMATS = ("bf16", "fp8", "fp8_direct_cast", "fp4", "int8_e3m4")
DISPATCH_DTYPES = ("bf16", "fp8", "fp4")
# Every combine dtype (the tests, the soak and the GPU tests draw from these).
COMBINE_DTYPES = ("bf16", "fp8", "fp8_direct_cast", "int8_e3m4")
ALL_COMBINE_DTYPES = COMBINE_DTYPES


# ---------------------------------------------------------------------------------------------
# bf16

def bf16_to_f32(b):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    b = np.asarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x):
    """float32 -> uint16 bf16, round to nearest even; every NaN becomes 0x7fc0."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    lsb = (u >> np.uint64(16)) & np.uint64(1)
    r = ((u + np.uint64(0x7FFF) + lsb) >> np.uint64(16)).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(BF16_NAN), r).astype(np.uint16)


# ---------------------------------------------------------------------------------------------
# Narrow element types

def _e4m3_magnitudes():
    """float64 value of every e4m3 code 0x00..0x7f (0x7f, NaN, as nan)."""
    vals = np.empty(128, dtype=np.float64)
    for code in range(128):
        e, m = code >> 3, code & 7
        vals[code] = m * 2.0 ** -9 if e == 0 else 2.0 ** (e - 7) * (1 + m / 8)
    vals[0x7F] = np.nan
    return vals


_E4M3_MAG = _e4m3_magnitudes()
_E4M3_FINITE = _E4M3_MAG[:0x7F]                        # codes 0..0x7e, increasing, max 448
_E4M3_MIDS = (_E4M3_FINITE[:-1] + _E4M3_FINITE[1:]) / 2  # exact in float64
E4M3_TABLE = np.concatenate([_E4M3_MAG, -_E4M3_MAG]).astype(np.float32)  # code -> value

_E2M1_FINITE = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
_E2M1_MIDS = (_E2M1_FINITE[:-1] + _E2M1_FINITE[1:]) / 2
E2M1_TABLE = np.concatenate([_E2M1_FINITE, -_E2M1_FINITE]).astype(np.float32)


def _round_to_grid(a, grid, mids):
    """Code (index into `grid`) of |a| rounded to nearest, ties to the even code, saturating.

    a: float64 magnitudes, not NaN. grid is increasing, starts at 0 and its codes are the
    indices, so "even" is the index parity. Beyond the last midpoint everything saturates to
    the last code (Inf included).
    """
    k = np.searchsorted(mids, a, side="left")  # number of midpoints strictly below a
    kc = np.minimum(k, len(mids) - 1)
    tie = (k < len(mids)) & (a == mids[kc])
    # At a tie between codes k and k+1 the even one wins.
    return np.where(tie & (k % 2 == 1), k + 1, k)


def _sign_bit(x):
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> np.uint32(31)) != 0


def _encode_on_grid(x, finite, mids, sign_bit, nan_code):
    """Sign-magnitude code of float32 x on a grid of finite magnitudes (RNE at the midpoints,
    saturating at the largest); NaN -> nan_code."""
    x = np.asarray(x, dtype=np.float32)
    nan = np.isnan(x)
    a = np.abs(np.where(nan, 0, x)).astype(np.float64)
    code = _round_to_grid(a, finite, mids).astype(np.uint8)
    code = code | np.where(_sign_bit(x), sign_bit, 0).astype(np.uint8)
    return np.where(nan, np.uint8(nan_code), code).astype(np.uint8)


def e4m3_encode(x):
    """float32 -> e4m3 code, RNE, saturating to +-448 (Inf too); NaN -> 0x7f."""
    return _encode_on_grid(x, _E4M3_FINITE, _E4M3_MIDS, 0x80, E4M3_NAN)


def e4m3_decode(q):
    """e4m3 code -> float32 (0x7f and 0xff are NaN)."""
    return E4M3_TABLE[np.asarray(q, dtype=np.uint8)]


def e2m1_encode(x, nan_code=0x7):
    """float32 -> e2m1 code (0..15), RNE, saturating to +-6.

    e2m1 has no NaN; the CUDA header's conversion writes 0x7 for a NaN of either sign (checked
    against the C++ codecs), the default `nan_code`.
    """
    return _encode_on_grid(x, _E2M1_FINITE, _E2M1_MIDS, 0x8, nan_code)


def e2m1_decode(q):
    """e2m1 code (low 4 bits) -> float32."""
    return E2M1_TABLE[np.asarray(q, dtype=np.uint8) & 0xF]


def e8m0_decode(b):
    """e8m0 byte -> float32 2^(b-127); 0 is 2^-127, 0xff is NaN."""
    b = np.asarray(b, dtype=np.uint8)
    with np.errstate(over="ignore"):
        v = np.ldexp(np.float64(1.0), b.astype(np.int64) - 127).astype(np.float32)
    return np.where(b == E8M0_NAN, np.float32(np.nan), v).astype(np.float32)


def floor_log2(a):
    """floor(log2(a)) for finite a > 0 (subnormals included), as int64."""
    _, e = np.frexp(np.asarray(a, dtype=np.float64))  # a = m * 2^e, m in [0.5, 1)
    return e.astype(np.int64) - 1


def bf16_round_up(x):
    """The smallest bf16 at or above float32 x >= 0 (finite, below the largest bf16), as
    uint16: any bit below bf16's mantissa rounds up."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + np.uint64(0xFFFF)) >> np.uint64(16)).astype(np.uint16)


def clamped_reciprocal(s):
    """float32 1 / s for s > 0, FLT_MAX where it overflows (s below 2^-128)."""
    s = np.asarray(s, dtype=np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        r = (np.float32(1.0) / s).astype(np.float32)
    return np.where(np.isfinite(r), r, FLT_MAX).astype(np.float32)


def int8_encode(y):
    """float32 -> symmetric int8 code as a byte: clamp to [-127, 127], round to nearest even
    (0.5 -> 0, 2.5 -> 2); NaN -> 0. The byte 0x80 (-128) is never produced."""
    y = np.asarray(y, dtype=np.float32)
    y = np.where(np.isnan(y), np.float32(0), y)
    y = np.minimum(np.maximum(y, -INT8_MAX), INT8_MAX)
    return np.rint(y).astype(np.int8).view(np.uint8)


def int8_decode(q):
    """int8 code byte -> float32 (two's complement)."""
    return np.asarray(q, dtype=np.uint8).view(np.int8).astype(np.float32)


def e3m4_encode(x):
    """float32 -> e3m4 code (bias 1, no Inf or NaN): bit 7 the sign (of -0 too), then the
    magnitude code 16k + rne(|x| * 2^(4-k)) with k = max(floor(log2 |x|), 0), |x| clamped to
    124 (NaN too, as the C++ comparison does)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    sign = ((bits >> np.uint32(24)) & np.uint32(0x80)).astype(np.uint8)
    a = (bits & np.uint32(0x7FFFFFFF)).view(np.float32)
    with np.errstate(invalid="ignore"):
        a = np.where(a <= E3M4_MAX, a, E3M4_MAX).astype(np.float32)
    biased = (a.view(np.uint32) >> np.uint32(23)).astype(np.int64)
    k = np.where(biased > 127, biased - 127, 0)
    scaled = np.ldexp(a, (4 - k).astype(np.int32)).astype(np.float32)  # exact power of two
    code = 16 * k + np.rint(scaled).astype(np.int64)
    return (sign | code.astype(np.uint8)).astype(np.uint8)


def e3m4_decode(q):
    """e3m4 code -> float32 (exact): e = 0: m/16; else (16 + m) * 2^(e-5); 0x80 is -0."""
    q = np.asarray(q, dtype=np.uint8)
    e = ((q >> 4) & 7).astype(np.int32)
    m = (q & 15).astype(np.int32)
    mant = np.where(e != 0, 16 + m, m).astype(np.float32)
    v = np.ldexp(mant, np.where(e != 0, e, 1) - 5).astype(np.float32)
    return np.where((q & 0x80) != 0, -v, v).astype(np.float32)


def _int8_e3m4_value(codes, words):
    """Decoded float32 of int8/e3m4 codes [..., 32] under their block's scale word [...]."""
    words = np.asarray(words, dtype=np.uint16)
    scale = bf16_to_f32(words & np.uint16(0x7FFF))[..., None]
    e3m4 = ((words & np.uint16(E3M4_WORD_BIT)) != 0)[..., None]
    with np.errstate(invalid="ignore", over="ignore"):
        return (np.where(e3m4, e3m4_decode(codes), int8_decode(codes)) * scale).astype(np.float32)


def _encode_int8_e3m4(x_u16):
    """int8/e3m4 blockwise (docs/formats.md): (codes [N, H] uint8, scale words [N, H/32])."""
    xb, amax = _blocks(x_u16, INT8_E3M4_BLOCK)
    n, nb, _ = xb.shape
    nonfinite = ~np.isfinite(xb).all(axis=2)
    zero = (amax == 0) & ~nonfinite
    plain = ~(nonfinite | zero)
    safe = np.where(plain, amax, np.float32(1)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        s8 = bf16_round_up((safe / INT8_MAX).astype(np.float32))
        s3 = bf16_round_up((safe * np.float32(0.015625)).astype(np.float32))  # amax * 2^-6
        inv8 = clamped_reciprocal(bf16_to_f32(s8))[:, :, None]
        inv3 = clamped_reciprocal(bf16_to_f32(s3))[:, :, None]
        c8 = int8_encode((xb * inv8).astype(np.float32))
        c3 = e3m4_encode((xb * inv3).astype(np.float32))
    # The code energy: the sum of the squared int8 codes (an integer); e3m4 below 2 * 127^2.
    q8 = c8.view(np.int8).astype(np.int64)
    energy = (q8 * q8).sum(axis=2)
    pick3 = plain & (energy < 2 * 127 * 127)
    words = np.where(pick3, s3 | np.uint16(E3M4_WORD_BIT), s8)
    words = np.where(nonfinite, np.uint16(BF16_NAN), np.where(zero, np.uint16(0), words))
    codes = np.where(pick3[:, :, None], c3, c8)
    codes = np.where(plain[:, :, None], codes, np.uint8(0))  # x * 0 codes as 0 in either block
    return codes.astype(np.uint8).reshape(n, nb * INT8_E3M4_BLOCK), words.astype(np.uint16)


# ---------------------------------------------------------------------------------------------
# Row formats. x: [N, H] uint16 bf16 bits. encode -> (payload, scales or None).

def _blocks(x_u16, block):
    x = bf16_to_f32(np.ascontiguousarray(x_u16, dtype=np.uint16))
    n, h = x.shape
    xb = x.reshape(n, h // block, block)
    # fmaxf from 0.0f over |x_i|: NaN skipped, Inf kept.
    amax = np.fmax.reduce(np.abs(xb), axis=2, initial=np.float32(0)).astype(np.float32)
    return xb, amax


def encode(fmt, x_u16):
    """Encode rows of bf16 bits in wire format `fmt` (one of FORMATS)."""
    x_u16 = np.ascontiguousarray(x_u16, dtype=np.uint16)
    n, h = x_u16.shape
    if fmt == "bf16":
        return x_u16.copy(), None
    if fmt == "fp8_direct_cast":
        x = bf16_to_f32(x_u16)
        q = np.where(np.isfinite(x), e4m3_encode(x), np.uint8(E4M3_NAN))
        return q.astype(np.uint8), None
    if fmt == "fp8":
        xb, amax = _blocks(x_u16, FP8_BLOCK)
        zero = amax == 0
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            scale = np.where(zero, np.float32(1), amax / E4M3_MAX).astype(np.float32)
            inv = (E4M3_MAX / np.where(zero, np.float32(1), amax)).astype(np.float32)
            inv = np.where(zero, np.float32(1), inv)
            inv = np.where(np.isfinite(inv), inv, FLT_MAX).astype(np.float32)
            prod = (xb * inv[:, :, None]).astype(np.float32)
        return e4m3_encode(prod).reshape(n, h), scale
    if fmt == "fp4":
        xb, amax = _blocks(x_u16, MXFP4_BLOCK)
        nonfinite = ~np.isfinite(xb).all(axis=2)
        zero = amax == 0
        safe = np.where(zero | nonfinite, np.float32(1), amax)
        e = np.clip(floor_log2(safe) - 2, -127, 127)
        stored = np.where(nonfinite, E8M0_NAN, np.where(zero, E8M0_ONE, e + 127)).astype(np.uint8)
        inv = np.where(nonfinite, np.float32(0),
                       np.where(zero, np.float32(1),
                                np.ldexp(np.float64(1.0), -e).astype(np.float32)))
        with np.errstate(invalid="ignore"):
            prod = (xb * inv.astype(np.float32)[:, :, None]).astype(np.float32)
        codes = e2m1_encode(prod).reshape(n, h)
        payload = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        return payload, stored
    if fmt == "int8_e3m4":
        return _encode_int8_e3m4(x_u16)
    raise ValueError(f"unknown format {fmt!r}")


def decode(fmt, payload, scales):
    """Decode rows of wire format `fmt` to float32 [N, H]."""
    if fmt == "bf16":
        return bf16_to_f32(payload)
    if fmt == "fp8_direct_cast":
        return e4m3_decode(payload)
    if fmt == "fp8":
        q = e4m3_decode(payload)
        n, h = q.shape
        s = np.asarray(scales, dtype=np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            out = q.reshape(n, h // FP8_BLOCK, FP8_BLOCK) * s[:, :, None]
        return out.astype(np.float32).reshape(n, h)
    if fmt == "fp4":
        p = np.asarray(payload, dtype=np.uint8)
        n, half = p.shape
        codes = np.empty((n, 2 * half), dtype=np.uint8)
        codes[:, 0::2] = p & 0xF
        codes[:, 1::2] = p >> 4
        v = e2m1_decode(codes).reshape(n, -1, MXFP4_BLOCK)
        with np.errstate(invalid="ignore", over="ignore"):
            out = v * e8m0_decode(scales)[:, :, None]
        return out.astype(np.float32).reshape(n, 2 * half)
    if fmt == "int8_e3m4":
        q = np.asarray(payload, dtype=np.uint8)
        n, h = q.shape
        blocks = q.reshape(n, h // INT8_E3M4_BLOCK, INT8_E3M4_BLOCK)
        return _int8_e3m4_value(blocks, scales).reshape(n, h)
    raise ValueError(f"unknown format {fmt!r}")


def scale_dim(fmt, hidden):
    return {"bf16": 0, "fp8_direct_cast": 0, "fp8": hidden // FP8_BLOCK,
            "fp4": hidden // MXFP4_BLOCK, "int8_e3m4": hidden // INT8_E3M4_BLOCK}[fmt]


# ---------------------------------------------------------------------------------------------
# Dispatch and combine

def routes(topk_idx, num_experts, world_size):
    """goes[t, r]: token t has an unmasked slot naming an expert of rank r."""
    idx = np.asarray(topk_idx, dtype=np.int64)
    epr = num_experts // world_size
    owner = np.where(idx >= 0, idx // epr, -1)
    return (owner[:, :, None] == np.arange(world_size)[None, None, :]).any(axis=1)


def dispatch(inputs, num_experts, dispatch_dtype):
    """Reference dispatch for every rank.

    inputs: list over source ranks of dicts with x ([T, H] bf16 uint16, or the pre-quantized
    payload), x_scales (None unless pre-quantized), topk_idx [T, K] int32, topk_weights
    [T, K] float32. Returns, per destination rank, a dict with recv_x, recv_x_scales,
    recv_topk_idx, recv_topk_weights, recv_src_rank, recv_src_token,
    recv_count_per_local_expert and num_recv.
    """
    w = len(inputs)
    epr = num_experts // w
    wire = []  # per source rank: (payload, scales) of every token
    for inp in inputs:
        if inp.get("x_scales") is not None:
            wire.append((np.asarray(inp["x"]), np.asarray(inp["x_scales"])))
        else:
            wire.append(encode(dispatch_dtype, inp["x"]))
    goes = [routes(inp["topk_idx"], num_experts, w) for inp in inputs]
    k = np.asarray(inputs[0]["topk_idx"]).shape[1]
    outputs = []
    for r in range(w):
        pay, sca, idx, wts, src_r, src_t = [], [], [], [], [], []
        for s, inp in enumerate(inputs):
            toks = np.nonzero(goes[s][:, r])[0]
            pay.append(wire[s][0][toks])
            if wire[s][1] is not None:
                sca.append(wire[s][1][toks])
            slots = np.asarray(inp["topk_idx"], dtype=np.int32)[toks]
            mine = (slots >= 0) & (slots // epr == r)
            idx.append(np.where(mine, slots - r * epr, -1).astype(np.int32))
            wts.append(np.asarray(inp["topk_weights"], dtype=np.float32)[toks])
            src_r.append(np.full(len(toks), s, dtype=np.int32))
            src_t.append(toks.astype(np.int32))
        recv_idx = np.concatenate(idx).reshape(-1, k)
        counts = np.zeros(epr, dtype=np.int32)
        for e in range(epr):
            counts[e] = int((recv_idx == e).any(axis=1).sum())  # once per row
        outputs.append({
            "recv_x": np.concatenate(pay),
            "recv_x_scales": np.concatenate(sca) if sca else None,
            "recv_topk_idx": recv_idx,
            "recv_topk_weights": np.concatenate(wts).reshape(-1, k),
            "recv_src_rank": np.concatenate(src_r),
            "recv_src_token": np.concatenate(src_t),
            "recv_count_per_local_expert": counts,
            "num_recv": len(recv_idx),
        })
    return outputs


def combine(ys, recv, num_tokens, combine_dtype, ranks_per_node=0):
    """Reference combine for every source rank.

    ys: per destination rank r, [R_r, H] bf16 uint16 (row i = partial result of received row i).
    recv: the dispatch reference outputs (for recv_src_rank / recv_src_token).
    num_tokens: T_s per source rank. Returns per source rank [T_s, H] bf16 uint16.
    ranks_per_node: L (0: one node of every rank). With L < W (docs/design.md#several-nodes)
    each node n first sums, in fp32 and ascending rank, the decoded rows of its ranks into p_n;
    a node other than the source's sends decode(encode(bf16(p_n))), the source's own node adds
    p_n as it is, and the source sums the nodes in ascending order, in fp32, then bf16.
    """
    w = len(ys)
    h = np.asarray(ys[0]).shape[1]
    per_node = ranks_per_node or w
    decoded = []  # per rank r: its rows encoded and decoded, [R_r, H] float32
    for r in range(w):
        y = np.ascontiguousarray(ys[r], dtype=np.uint16).reshape(-1, h)
        payload, scales = encode(combine_dtype, y)
        with np.errstate(invalid="ignore", over="ignore"):
            decoded.append(decode(combine_dtype, payload, scales))
    out = []
    for s, t_s in enumerate(num_tokens):
        acc = np.zeros((t_s, h), dtype=np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            for node in range(w // per_node):  # ascending node: the order of the outer sum
                part = np.zeros((t_s, h), dtype=np.float32)
                held = np.zeros(t_s, dtype=bool)
                for r in range(node * per_node, (node + 1) * per_node):  # ascending rank
                    rows = np.nonzero(recv[r]["recv_src_rank"] == s)[0]
                    toks = recv[r]["recv_src_token"][rows]
                    part[toks] = part[toks] + decoded[r][rows]  # tokens are distinct per r
                    held[toks] = True
                if per_node == w:  # one node: the rank-ascending sum itself
                    acc = part
                    continue
                if node != s // per_node and held.any():  # network: bf16, then the wire
                    payload, scales = encode(combine_dtype, f32_to_bf16(part[held]))
                    part[held] = decode(combine_dtype, payload, scales)
                acc[held] = acc[held] + part[held]
        out.append(f32_to_bf16(acc))
    return out


# ---------------------------------------------------------------------------------------------
# Decode mode (docs/design.md#decode-mode, docs/decode-mode.md)

def low_latency_dispatch(inputs, num_experts, max_tokens, dispatch_dtype):
    """Reference low_latency_dispatch for every rank.

    inputs: as for dispatch. max_tokens: Tmax (max_tokens_per_rank). Returns, per destination
    rank r, a dict of arrays of the fixed shapes (E/W local experts, S = W * Tmax rows per slab):
    recv_x [E/W, S, payload cols], recv_x_scales [E/W, S, scale cols] or None, recv_count [E/W]
    int32, recv_src_rank / recv_src_token / recv_src_slot [E/W, S] int32. Slab e holds a row per
    (source rank s, token t) with an unmasked slot naming global expert r * E/W + e, in
    canonical order (s, then t) from row 0, attributed to the first such slot. recv_x and
    recv_x_scales are zero at and after the count (the op leaves those rows unspecified: compare
    only rows below the count); recv_src_* are -1 there, as the op writes them.
    """
    w = len(inputs)
    epr = num_experts // w
    slab = w * max_tokens
    wire = []
    for inp in inputs:
        if inp.get("x_scales") is not None:
            wire.append((np.asarray(inp["x"]), np.asarray(inp["x_scales"])))
        else:
            wire.append(encode(dispatch_dtype, inp["x"]))
    outputs = []
    for r in range(w):
        payload_shape = (epr, slab) + wire[0][0].shape[1:]
        recv_x = np.zeros(payload_shape, dtype=wire[0][0].dtype)
        recv_scales = None
        if wire[0][1] is not None:
            recv_scales = np.zeros((epr, slab) + wire[0][1].shape[1:], dtype=wire[0][1].dtype)
        count = np.zeros(epr, dtype=np.int32)
        src = {name: np.full((epr, slab), -1, dtype=np.int32)
               for name in ("recv_src_rank", "recv_src_token", "recv_src_slot")}
        for e in range(epr):
            expert = r * epr + e
            for s, inp in enumerate(inputs):
                idx = np.asarray(inp["topk_idx"], dtype=np.int64)
                for t in range(idx.shape[0]):
                    slots = np.nonzero(idx[t] == expert)[0]
                    if len(slots) == 0:
                        continue
                    row = count[e]
                    recv_x[e, row] = wire[s][0][t]
                    if recv_scales is not None:
                        recv_scales[e, row] = wire[s][1][t]
                    src["recv_src_rank"][e, row] = s
                    src["recv_src_token"][e, row] = t
                    src["recv_src_slot"][e, row] = slots[0]
                    count[e] += 1
        outputs.append(dict(recv_x=recv_x, recv_x_scales=recv_scales, recv_count=count, **src))
    return outputs


def low_latency_partials(ys, inputs, recv, num_experts):
    """The expert side of low_latency_combine, per expert rank r: (src_rank [n], src_token [n],
    p [n, H] bf16 uint16) for every (s, t) that r received, in canonical order, where
    p = bf16(sum over t's slots k ascending, unmasked and local to r, of
    w[t][k] * float(ys[r][e_k][row of (s, t) in slab e_k])), in fp32 from 0.0, each term a
    rounded product followed by a rounded addition. A slot repeating an expert adds its own
    weight times the same row.

    ys: per rank [E/W, W * Tmax, H] bf16 uint16 (the experts' raw outputs). recv: the
    low_latency_dispatch reference outputs (for the rows of (s, t) in each slab).
    """
    w = len(inputs)
    epr = num_experts // w
    h = np.asarray(ys[0]).shape[2]
    parts = []
    for r in range(w):
        y = np.asarray(ys[r], dtype=np.uint16)
        row_of = {}  # (s, t, local expert) -> slab row
        for e in range(epr):
            for i in range(int(recv[r]["recv_count"][e])):
                key = (int(recv[r]["recv_src_rank"][e, i]), int(recv[r]["recv_src_token"][e, i]))
                row_of[key + (e,)] = i
        src_rank, src_token, sums = [], [], []
        for s, inp in enumerate(inputs):
            idx = np.asarray(inp["topk_idx"], dtype=np.int64)
            wts = np.asarray(inp["topk_weights"], dtype=np.float32)
            for t in range(idx.shape[0]):
                local = [(k, int(idx[t, k]) - r * epr) for k in range(idx.shape[1])
                         if idx[t, k] >= 0 and idx[t, k] // epr == r]
                if not local:
                    continue
                acc = np.zeros(h, dtype=np.float32)
                with np.errstate(invalid="ignore", over="ignore"):
                    for k, e in local:  # ascending k: product rounded, then the addition
                        term = (wts[t, k] * bf16_to_f32(y[e, row_of[(s, t, e)]])).astype(
                            np.float32)
                        acc = (acc + term).astype(np.float32)
                src_rank.append(s)
                src_token.append(t)
                sums.append(acc)
        p = f32_to_bf16(np.array(sums, dtype=np.float32).reshape(-1, h))
        parts.append((np.array(src_rank, dtype=np.int32), np.array(src_token, dtype=np.int32), p))
    return parts


def low_latency_combine(ys, inputs, recv, num_experts, combine_dtype, ranks_per_node=0):
    """Reference low_latency_combine for every source rank: the expert side
    (low_latency_partials), then the source side exactly as normal mode's combine with the
    partials as its rows (one node: each p encoded in the combine dtype, decoded, summed in fp32
    from 0.0 by ascending expert rank, rounded to bf16; several nodes, ranks_per_node L < W: the
    node-by-node sum of combine); a token with every slot masked comes out as zeros. Returns per
    source rank [T_s, H] bf16 uint16."""
    parts = low_latency_partials(ys, inputs, recv, num_experts)
    routing = [{"recv_src_rank": src_rank, "recv_src_token": src_token}
               for src_rank, src_token, _ in parts]
    return combine([p for _, _, p in parts], routing,
                   [len(inp["topk_idx"]) for inp in inputs], combine_dtype, ranks_per_node)
