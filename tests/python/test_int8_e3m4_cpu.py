"""The int8/e3m4 combine format (CombineDtype.int8_e3m4, "int8_e3m4_blockwise") in the numpy
reference and through the CPU backend, bit for bit.

First the reference's scalar conversions and one row of hand-worked blocks, against the values
that tests/test_formats.cc checks on the C++ codec (src/formats/codecs.h, Int8E3m4Wire). Then
the same row through a CPU op (one rank, normal mode: out = bf16(decode(encode(y)))), against
those known values and against np_reference.combine; random and extreme rows at one and two
ranks. test_cpu_ops.py's pair tests, the soak and the decode tests cover the int8_e3m4 pairs
through np_reference.COMBINE_DTYPES. Inputs are seeded (conftest.py); the seed is printed.
"""

import numpy as np
import pytest

import moe_ep
import np_reference as ref
from test_cpu_ops import assert_bits_equal, check_pipeline, config, run_pipeline

H = 256  # 8 blocks of 32
TIMEOUT_S = 30
NAN = np.float32(np.nan)
INF = np.float32(np.inf)


def bf(values):
    return ref.f32_to_bf16(np.asarray(values, dtype=np.float32))


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


# ---------------------------------------------------------------------------------------------
# The reference's scalar conversions (the vectors of tests/test_formats.cc)

def test_int8_rounds_to_nearest_even_and_clamps():
    y = np.array([0.0, -0.0, 0.5, 0.5000001, 1.5, 2.5, -2.5, 126.5, 127.0, 127.49, 1000.0,
                  -1000.0, -127.5, INF, NAN], dtype=np.float32)
    codes = [0x00, 0x00, 0x00, 0x01, 0x02, 0x02, 0xFE, 0x7E, 0x7F, 0x7F, 0x7F, 0x81, 0x81, 0x7F,
             0x00]
    assert ref.int8_encode(y).tolist() == codes
    assert ref.int8_decode(np.array([0x81, 0x80, 0x7F, 0x00], dtype=np.uint8)).tolist() == [
        -127.0, -128.0, 127.0, 0.0]


def test_e3m4_encode_hand_vectors():
    cases = [(0.0, 0x00), (-0.0, 0x80), (1 / 16, 0x01), (1 / 32, 0x00), (3 / 32, 0x02),
             (15 / 16, 0x0F), (31 / 32, 0x10), (1.0, 0x10), (33 / 32, 0x10), (63 / 32, 0x20),
             (2.0, 0x20), (64.0, 0x70), (66.0, 0x70), (70.0, 0x72), (122.0, 0x7E), (124.0, 0x7F),
             (126.0, 0x7F), (1e30, 0x7F), (-1e30, 0xFF), (np.inf, 0x7F), (-1.0, 0x90),
             (2.0 ** -130, 0x00)]
    x = np.array([c[0] for c in cases], dtype=np.float32)
    got = ref.e3m4_encode(x).tolist()
    assert got == [c[1] for c in cases], [(c[0], hex(g), hex(c[1]))
                                          for c, g in zip(cases, got) if g != c[1]]


def test_e3m4_decode_hand_vectors_and_every_code_round_trips():
    codes = np.array([0x00, 0x80, 0x01, 0x0F, 0x10, 0x1F, 0x20, 0x70, 0x7F, 0xFF, 0x98],
                     dtype=np.uint8)
    want = np.array([0.0, -0.0, 1 / 16, 15 / 16, 1.0, 31 / 16, 2.0, 64.0, 124.0, -124.0, -1.5],
                    dtype=np.float32)
    assert (f32_bits(ref.e3m4_decode(codes)) == f32_bits(want)).all()
    every = np.arange(256, dtype=np.uint8)
    assert (ref.e3m4_encode(ref.e3m4_decode(every)) == every).all()  # every code is exact


def test_scale_helpers():
    assert ref.bf16_round_up(np.float32(1.0)) == 0x3F80
    assert ref.bf16_round_up(np.float32(1.0 + 2.0 ** -23)) == 0x3F81
    assert ref.bf16_round_up(np.float32(1.0 + 2.0 ** -8)) == 0x3F81
    assert ref.bf16_round_up(np.float32(0.0)) == 0x0000
    assert ref.bf16_round_up(np.array([1], dtype=np.uint32).view(np.float32)) == 0x0001
    assert ref.clamped_reciprocal(np.float32(0.5)) == np.float32(2.0)
    assert ref.clamped_reciprocal(ref.bf16_to_f32(np.uint16(1))) == ref.FLT_MAX
    assert ref.scale_dim("int8_e3m4", H) == moe_ep.scale_dim("int8_e3m4", H) == H // 32
    assert moe_ep.scale_dim(moe_ep.CombineDtype.int8_e3m4, H) == H // 32
    assert moe_ep.CombineDtype.int8_e3m4.value == "int8_e3m4_blockwise"


# ---------------------------------------------------------------------------------------------
# One row of hand-worked blocks (tests/test_formats.cc, Int8E3m4.HandWorkedBlocks)

def hand_worked_row():
    row = np.zeros(H, dtype=np.uint16)
    # Block 0: amax 127 -> int8 with scale 1; the odd integers 65..113 rule e3m4 out.
    row[0:7] = bf([127.0, 0.5, 1.5, 2.5, -2.5, 126.5, -0.0])
    row[7:32] = bf(65 + 2 * np.arange(25))
    # Block 1: 64 and small values -> e3m4 with scale 1.
    row[32:42] = bf([64.0, 1 / 32, 3 / 32, 31 / 32, 33 / 32, 63 / 32, -1.0, -0.0, 0.25,
                     3 / 1024])
    row[64 + 3] = 0x8000                # block 2: zeros and -0
    row[96] = 0x7F7F                    # block 3: the bf16 maximum alone -> e3m4
    row[128:131] = bf([1.0, NAN, 2.0])  # block 4: NaN
    row[160:162] = bf([-INF, 1.0])      # block 5: -Inf
    row[192 + 5] = 0x0001               # block 6: amax 2^-133, multiplier clamped to FLT_MAX:
                                        # int8 code 0, energy 0 -> e3m4
    row[224:228] = bf([-127.0, 127.0, 3.0, -5.0])  # block 7: energy just above 2 * 127^2: int8
    return row


HAND_WORDS = [0x3F80, 0xBF80, 0x0000, 0xFC7F, 0x7FC0, 0x7FC0, 0x8001, 0x3F80]


def hand_worked_expected_out():
    """bf16(decode(encode(row))) as the C++ test states the decoded values (every one is a bf16
    value; -0 comes back from the combine's sum 0.0 + -0.0 as +0)."""
    out = np.zeros(H, dtype=np.float32)
    out[0:7] = [127.0, 0.0, 2.0, 2.0, -2.0, 126.0, 0.0]
    out[7:32] = 65 + 2 * np.arange(25)
    out[32:42] = [64.0, 0.0, 0.125, 1.0, 1.0, 2.0, -1.0, 0.0, 0.25, 0.0]
    out[96] = ref.bf16_to_f32(np.uint16(0x7F7F))
    out[128:192] = np.nan
    out[224:228] = [-127.0, 127.0, 3.0, -5.0]
    return ref.f32_to_bf16(out)


def test_reference_encodes_the_hand_worked_blocks_like_the_cpp_codec():
    payload, words = ref.encode("int8_e3m4", hand_worked_row()[None, :])
    assert words.dtype == np.uint16 and words.shape == (1, 8)
    assert [hex(w) for w in words[0]] == [hex(w) for w in HAND_WORDS]
    assert payload.dtype == np.uint8 and payload.shape == (1, H)
    p = payload[0]
    assert p[0:7].tolist() == [0x7F, 0x00, 0x02, 0x02, 0xFE, 0x7E, 0x00]
    assert p[7:32].tolist() == (65 + 2 * np.arange(25)).tolist()
    assert p[32:42].tolist() == [0x70, 0x00, 0x02, 0x10, 0x10, 0x20, 0x90, 0x80, 0x04, 0x00]
    assert not p[64:96].any() and p[96] == 0x70 and not p[128:192].any()
    assert p[197] == 0x00 and p[224:226].tolist() == [0x81, 0x7F]
    dec = ref.decode("int8_e3m4", payload, words)[0]
    assert f32_bits(dec[39]) == f32_bits(np.float32(-0.0))  # e3m4 carries -0 (code 0x80)
    assert f32_bits(dec[64 + 3]) == 0  # an int8 zero block decodes -0 to +0
    assert np.isnan(dec[128:192]).all() and np.isfinite(np.delete(dec, range(128, 192))).all()


def one_rank_op(d="bf16", c="int8_e3m4", k=1, max_t=8, **kwargs):
    comm = moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0)
    return moe_ep.get_op(comm, 8, k, H, max_t, dispatch_dtype=d, combine_dtype=c, **kwargs)


def round_trip_rows(rows, d="bf16"):
    """out of a one-rank normal-mode round whose combine gets y = rows (one token per row, one
    slot each): bf16(0.0 + decode(encode(row))) per row."""
    n = len(rows)
    op = one_rank_op(d=d, max_t=n)
    x = ref.f32_to_bf16(np.ones((n, H), dtype=np.float32))
    idx = (np.arange(n, dtype=np.int32) % 8)[:, None]
    recv, handle = op.dispatch(x, idx, np.ones((n, 1), dtype=np.float32))
    assert recv.num_recv == n and (np.asarray(recv.recv_src_token) == np.arange(n)).all()
    return np.array(op.combine(rows, handle), copy=True)


def test_hand_worked_row_through_a_cpu_op_gives_the_known_values():
    row = hand_worked_row()
    out = round_trip_rows(np.stack([row, row]))
    want = hand_worked_expected_out()
    for r in range(2):
        assert_bits_equal(f"row {r} against the known values", out[r], want)
    exp = ref.combine([np.stack([row, row])], [{"recv_src_rank": np.zeros(2, np.int32),
                                               "recv_src_token": np.arange(2, dtype=np.int32)}],
                      [2], "int8_e3m4")[0]
    assert_bits_equal("row against np_reference.combine", out, exp)


def random_extreme_rows(rng, n):
    """bf16 rows whose blocks are drawn from shapes at the edges of the format: activation-like
    values, a block with one outlier (e3m4's case), near-uniform magnitudes (int8's case),
    integers and halves (ties after the scale), tiny blocks (subnormal scales, clamped
    multipliers), huge ones (near the bf16 maximum), single values and
    zeros with -0."""
    out = np.zeros((n, H), dtype=np.uint16)
    for r in range(n):
        for b in range(H // 32):
            kind = int(rng.integers(0, 8))
            sign = rng.choice([-1.0, 1.0], size=32)
            if kind == 0:
                v = rng.normal(size=32) * np.exp(rng.uniform(-6, 6))
            elif kind == 1:
                v = rng.normal(size=32) * 0.01
                v[rng.integers(0, 32)] = rng.uniform(1, 1e3) * sign[0]
            elif kind == 2:
                v = rng.uniform(0.9, 1.1, size=32) * sign * np.exp(rng.uniform(-3, 3))
            elif kind == 3:
                v = rng.integers(-254, 255, size=32) / 2.0
            elif kind == 4:
                v = rng.normal(size=32) * 2.0 ** rng.integers(-133, -110)
            elif kind == 5:
                v = rng.uniform(0.5, 1.0, size=32) * sign * 3.3e38
            elif kind == 6:
                v = np.zeros(32)
                v[rng.integers(0, 32)] = rng.normal() * np.exp(rng.uniform(-20, 20))
            else:
                v = sign * 0.0
            out[r, 32 * b:32 * b + 32] = bf(v)
    assert np.isfinite(ref.bf16_to_f32(out)).all()
    return out


def test_random_and_extreme_rows_round_trip_like_the_reference(rng):
    rows = random_extreme_rows(rng, 256)
    out = round_trip_rows(rows)
    payload, words = ref.encode("int8_e3m4", rows)
    chose = (words & 0x8000) != 0
    assert chose.any() and (~chose).any()  # both codes were exercised
    exp = ref.f32_to_bf16(np.float32(0) + ref.decode("int8_e3m4", payload, words))
    assert_bits_equal("out of 256 rows", out, exp)


def test_two_ranks_sum_int8_e3m4_partials_like_the_reference(rng, run_ranks, make_inputs):
    cfg = config("fp8", "int8_e3m4", e=8, k=3, max_t=32)
    rounds = [make_inputs(rng, 2, 8, 3, H, [32, 19], mask_frac=0.1)]
    ypools = [[random_extreme_rows(rng, 64) for _ in range(2)]]
    got = run_pipeline(run_ranks, cfg, rounds, ypools)
    check_pipeline(got, cfg, rounds, ypools)


def test_every_combine_dtype_is_in_the_reference():
    names = [c.name for c in moe_ep.CombineDtype]
    assert sorted(names) == sorted(ref.ALL_COMBINE_DTYPES)
    assert set(ref.ALL_COMBINE_DTYPES) <= set(ref.FORMATS)
