"""Plain-torch reference of the moe-ep contract, for the GPU tests (tests/python/test_gpu_torch.py).

Written from DESIGN sections 2-4 and docs/formats.md, independent of moe_ep: nothing here
calls the library. Everything runs on CPU tensors. Narrow codes (e4m3, e2m1 pairs, e8m0) are
built bit by bit with integer ops and returned as uint8 bytes, so the reference depends neither
on torch's own float8 conversions (which do not saturate, and write NaN with its sign) nor on
torch having float8 dtypes at all. The test compares bytes.

Inputs are finite in the tests (validation mode rejects non-finite x), so the NaN/Inf rules are
modelled only where they are simple (fp8 codes, direct cast Inf -> NaN, mxfp4 NaN scale byte).
"""
import torch

FP8_BLOCK = 128
MXFP4_BLOCK = 32
E4M3_MAX = 448.0
FLT_MAX = 3.4028234663852886e38

# ------------------------------------------------------------------------------------------
# Scalar conversions, elementwise on tensors.


def pow2(e):
    """2^e as float32, exactly, for an integer tensor e in [-127, 127] (2^-127 is subnormal)."""
    e = e.to(torch.int32)
    normal = torch.bitwise_left_shift(e.clamp(min=-126) + 127, 23)
    bits = torch.where(e >= -126, normal, torch.full_like(e, 0x00400000))
    return bits.view(torch.float32)


def floor_log2(a):
    """floor(log2(a)) for float32 a > 0 (subnormals included), exactly, from frexp."""
    return torch.frexp(a)[1].to(torch.int32) - 1


def e4m3_satfinite(v):
    """float32 -> OCP e4m3 code (uint8): round to nearest even, saturate to +-448 (Inf too),
    NaN (either sign) -> 0x7f; the sign bit is kept for zeros and values that round to zero."""
    nan = torch.isnan(v)
    a = torch.where(nan, torch.zeros_like(v), v.abs()).clamp(max=512.0)  # >= 464 saturates anyway
    # Exponent of the e4m3 quantum: values below 2^-6 are subnormal with quantum 2^-9.
    e = torch.where(a < 2.0 ** -6, torch.full(a.shape, -6, dtype=torch.int32), floor_log2(a))
    q = torch.round(a * pow2(3 - e))  # exact scaling to [8, 16) (or [0, 8)); round half to even
    code = (e + 7) * 8 + q.to(torch.int32) - 8  # a carry (q == 16) moves to the next exponent
    code = code.clamp(max=0x7E)
    code = code | torch.signbit(v).to(torch.int32) * 0x80
    code = torch.where(nan, torch.full_like(code, 0x7F), code)
    return code.to(torch.uint8)


def e4m3_to_float(q):
    """e4m3 code (uint8) -> float32, exact; 0x7f / 0xff are NaN."""
    q = q.to(torch.int32)
    exp = (q >> 3) & 0xF
    man = q & 0x7
    normal = torch.bitwise_left_shift(exp + 120, 23) | torch.bitwise_left_shift(man, 20)
    mag = torch.where(exp == 0, man.to(torch.float32) * 2.0 ** -9, normal.view(torch.float32))
    mag = torch.where((exp == 0xF) & (man == 0x7), torch.full_like(mag, float("nan")), mag)
    return torch.where((q & 0x80) != 0, -mag, mag)


def e2m1_rne(v):
    """float32 -> e2m1 code (0..15): round to nearest even by the midpoints of the grid
    0, 0.5, 1, 1.5, 2, 3, 4, 6, saturating at 6; sign bit 0x8 from the float's sign bit (so -0.0
    and small negatives that round to zero give 0x8, as src/formats/scalar.h)."""
    a = v.abs()
    code = torch.zeros(v.shape, dtype=torch.int32)
    for mid, tie_up in ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
                        (2.5, False), (3.5, True), (5.0, False)):
        code = code + ((a >= mid) if tie_up else (a > mid)).to(torch.int32)
    return code | torch.signbit(v).to(torch.int32) * 0x8


def bf16_rne(v):
    """float32 -> bfloat16, round to nearest even, every NaN -> 0x7fc0 (as float_to_bf16)."""
    u = v.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    u = torch.where(torch.isnan(v), torch.full_like(u, 0x7FC0), u & 0xFFFF)
    u = torch.where(u >= 0x8000, u - 0x10000, u)  # as a signed int16 bit pattern
    return u.to(torch.int16).view(torch.bfloat16)


# ------------------------------------------------------------------------------------------
# Row codecs. x: [R, H] bfloat16.


def fp8_block_encode(x):
    """-> (codes uint8 [R, H], scales float32 [R, H/128])."""
    R, H = x.shape
    v = x.float().reshape(R, H // FP8_BLOCK, FP8_BLOCK)
    amax = torch.where(torch.isnan(v), torch.zeros_like(v), v.abs()).amax(dim=-1)  # NaN skipped
    zero = amax == 0
    one = torch.ones_like(amax)
    scale = torch.where(zero, one, torch.div(amax, torch.full_like(amax, E4M3_MAX)))
    inv = torch.div(torch.full_like(amax, E4M3_MAX), amax)  # not 448 / amax: that is 448 * (1/amax)
    inv = torch.where(torch.isfinite(inv), inv, torch.full_like(inv, FLT_MAX))
    inv = torch.where(zero, one, inv)
    codes = e4m3_satfinite(v * inv.unsqueeze(-1))
    return codes.reshape(R, H), scale


def fp8_block_decode(codes, scales):
    R, H = codes.shape
    v = e4m3_to_float(codes).reshape(R, H // FP8_BLOCK, FP8_BLOCK) * scales.unsqueeze(-1)
    return v.reshape(R, H)


def fp8_direct_encode(x):
    """-> codes uint8 [R, H]; finite values saturate, Inf and NaN become 0x7f."""
    v = x.float()
    codes = e4m3_satfinite(v)
    return torch.where(torch.isinf(v), torch.full_like(codes, 0x7F), codes)


def mxfp4_encode(x):
    """-> (packed uint8 [R, H/2], element 2i in the low nibble; scale bytes uint8 [R, H/32])."""
    R, H = x.shape
    v = x.float().reshape(R, H // MXFP4_BLOCK, MXFP4_BLOCK)
    amax = torch.where(torch.isnan(v), torch.zeros_like(v), v.abs()).amax(dim=-1)
    nonfinite = ~torch.isfinite(v).all(dim=-1)
    zero = (amax == 0) | nonfinite
    safe = torch.where(zero, torch.ones_like(amax), amax)  # keeps frexp away from 0 / Inf
    e = (floor_log2(safe) - 2).clamp(-127, 127)
    e = torch.where(zero, torch.zeros_like(e), e)
    byte = torch.where(nonfinite, torch.full_like(e, 255), e + 127)
    inv = torch.where(nonfinite, torch.zeros_like(amax), pow2(-e))
    codes = e2m1_rne(v * inv.unsqueeze(-1)).reshape(R, H)
    packed = codes[:, 0::2] | torch.bitwise_left_shift(codes[:, 1::2], 4)
    return packed.to(torch.uint8), byte.to(torch.uint8)


def encode_dispatch(dtype, x):
    """The dispatch wire format of bf16 rows: (payload, scales or None).
    bf16 -> (x, None); fp8 -> (uint8 codes, float32 scales); fp4 -> (uint8 pairs, uint8 e8m0)."""
    if dtype == "bf16":
        return x, None
    if dtype == "fp8":
        return fp8_block_encode(x)
    if dtype == "fp4":
        return mxfp4_encode(x)
    raise ValueError("dispatch dtype " + repr(dtype))


def combine_wire_roundtrip(dtype, y):
    """float32 [R, H]: decode(encode(y)) for the combine wire format of bf16 rows y."""
    if dtype == "bf16":
        return y.float()
    if dtype == "fp8":
        return fp8_block_decode(*fp8_block_encode(y))
    if dtype == "fp8_direct_cast":
        return e4m3_to_float(fp8_direct_encode(y))
    raise ValueError("combine dtype " + repr(dtype))


# ------------------------------------------------------------------------------------------
# Dispatch and combine over all ranks.


class Recv:
    """What rank r should receive (DESIGN 2), with the received rows still in bf16 (`x`)."""

    def __init__(self, x, topk_idx, topk_weights, src_rank, src_token, count_per_local_expert):
        self.x = x
        self.topk_idx = topk_idx
        self.topk_weights = topk_weights
        self.src_rank = src_rank
        self.src_token = src_token
        self.count_per_local_expert = count_per_local_expert

    @property
    def num_recv(self):
        return self.x.shape[0]


def dispatch(inputs, r, num_experts, world_size):
    """inputs[s] = (x [T_s, H] bf16, topk_idx [T_s, K] int32, topk_weights [T_s, K] f32) of every
    source rank s. Rows in canonical order: source rank ascending, then source token ascending;
    a token is received once if any unmasked slot names an expert of rank r."""
    per_rank = num_experts // world_size
    lo = r * per_rank
    xs, idxs, wts, ranks, tokens = [], [], [], [], []
    for s, (x, idx, w) in enumerate(inputs):
        owned = (idx >= lo) & (idx < lo + per_rank)  # -1 (masked) is never owned
        sel = owned.any(dim=1).nonzero().flatten()
        xs.append(x[sel])
        idxs.append(torch.where(owned[sel], idx[sel] - lo, torch.full_like(idx[sel], -1)))
        wts.append(w[sel])
        ranks.append(torch.full(sel.shape, s, dtype=torch.int32))
        tokens.append(sel.to(torch.int32))
    recv_idx = torch.cat(idxs).to(torch.int32)
    counts = [int((recv_idx == e).any(dim=1).sum()) for e in range(per_rank)]
    return Recv(torch.cat(xs), recv_idx, torch.cat(wts), torch.cat(ranks), torch.cat(tokens),
                torch.tensor(counts, dtype=torch.int32))


def combine(combine_dtype, recvs, ys, s, num_tokens, hidden):
    """out on source rank s: for each token, sum in fp32 from 0.0 over the destination ranks r
    it was sent to, ascending, of decode(encode(y_r[row of the token on r])); then bf16 (RNE).
    recvs[r] / ys[r]: the Recv and the bf16 y [R_r, H] of every rank r."""
    acc = torch.zeros(num_tokens, hidden, dtype=torch.float32)
    for recv, y in zip(recvs, ys):
        rows = (recv.src_rank == s).nonzero().flatten()
        tokens = recv.src_token[rows].long()
        acc[tokens] = acc[tokens] + combine_wire_roundtrip(combine_dtype, y[rows])
    return bf16_rne(acc)
