"""Randomized soak of moe_ep's CPU backend from Python against the numpy reference.

Each episode draws a world (1..6 ranks, one Python thread each; in about a third of them split
into nodes, ranks_per_node), a configuration (experts, top-k, hidden, max tokens, a dtype pair)
and a few rounds of inputs: ranks with no
tokens, masked slots, rows sent nowhere, pre-quantized x, duplicate expert ids, NaN and Inf in x,
in the weights and in y, caller-given and allocated outputs. Every rank runs dispatch and
combine on them; every output of every rank is compared bit for bit with np_reference.py. The
library's validation mode (MOE_EP_VALIDATE, read once per process) decides what the non-finite
x and weights and the duplicate ids must do: with it, every rank's dispatch fails with
InvalidArgument and the op goes on working; without it, they are moved as the reference says.

Episodes are seeded from (seed, episode number), so a run is replayed by its seed and any one
episode by `--first-episode`. As a script (scripts/soak runs it):
    python3 tests/python/soak.py [--rounds N | --seconds S] [--seed S] [--first-episode K]
prints the number of round trips and the seed; it exits non-zero on the first mismatch.
"""

import argparse
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_ep  # noqa: E402
import np_reference as ref  # noqa: E402

DEFAULT_SEED = 20250611
RECV_FIELDS = ("recv_x", "recv_x_scales", "recv_topk_idx", "recv_topk_weights",
               "recv_src_rank", "recv_src_token", "recv_count_per_local_expert")
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
QUIET_NANS = (0x7FC0, 0xFFC0)  # bf16; signalling NaNs are never fed (see np_reference)
INFS = (0x7F80, 0xFF80)
WORLD_TIMEOUT_S = 60.0  # a rank left waiting fails the episode well within the join bound
JOIN_TIMEOUT_S = 120.0


class SoakFailure(AssertionError):
    pass


def base_seed():
    text = os.environ.get("MOE_EP_TEST_SEED")
    return int(text, 0) if text else DEFAULT_SEED


def validation_mode():
    return os.environ.get("MOE_EP_VALIDATE", "0").lower() in ("1", "true", "yes", "on")


# ---------------------------------------------------------------------------------------------
# Episodes: parameters and inputs

def hidden_for(rng, d, c):
    """A hidden size every rule accepts: blocks of the formats in use, 16-byte rows."""
    base = (128 if "fp8" in (d, c) else 32 if d == "fp4" or c == "int8_e3m4" else
            16 if c == "fp8_direct_cast" else 8)
    return base * int(rng.integers(1, max(1, 512 // base) + 1))


def random_bits(rng, shape, nonfinite):
    """bf16 bits: normal values of varied row scales, some zero blocks and, when asked, a few
    quiet NaNs and infinities."""
    rows, cols = shape
    if rows == 0:
        return np.zeros(shape, dtype=np.uint16)
    x = rng.normal(size=shape) * np.exp(rng.uniform(-4, 4, size=(rows, 1)))
    x[rng.random(shape) < 0.01] *= 3000.0
    if cols >= 32 and rng.random() < 0.3:
        b = int(rng.integers(0, cols // 32)) * 32
        x[int(rng.integers(0, rows)), b:b + 32] = 0.0
    bits = ref.f32_to_bf16(x.astype(np.float32))
    if nonfinite:
        n = int(rng.integers(1, 4))
        where = (rng.integers(0, rows, n), rng.integers(0, cols, n))
        bits[where] = rng.choice(QUIET_NANS + INFS, size=n)
    return bits


def random_routing(rng, t, e, k, duplicates):
    if t == 0:
        return np.zeros((0, k), dtype=np.int32)
    idx = np.argsort(rng.random((t, e)), axis=1)[:, :k].astype(np.int32)
    idx[rng.random((t, k)) < rng.uniform(0.0, 0.6)] = -1
    if t >= 2 and rng.random() < 0.3:
        idx[int(rng.integers(0, t))] = -1  # a token sent nowhere
    if duplicates and k >= 2:
        row = int(rng.integers(0, t))
        idx[row, 0] = int(rng.integers(0, e))
        idx[row, 1] = idx[row, 0]
    return np.ascontiguousarray(idx)


class Episode:
    """One world, one configuration and its rounds, drawn from (seed, number)."""

    def __init__(self, seed, number, validate):
        rng = np.random.default_rng([seed, number])
        self.number = number
        self.w = int(rng.integers(1, 7))
        self.e = self.w * int(rng.integers(1, 5))
        self.k = int(rng.integers(1, min(self.e, 8) + 1))
        self.d = str(rng.choice(ref.DISPATCH_DTYPES))
        self.c = str(rng.choice(ref.COMBINE_DTYPES))
        self.h = hidden_for(rng, self.d, self.c)
        self.max_t = int(rng.integers(1, 33))
        self.instance_id = int(rng.integers(0, 3))
        # Several nodes (docs/design.md#several-nodes) in about a third of the episodes: L, a
        # divisor of W below it; 0 (one node) otherwise.
        splits = [d for d in range(1, self.w) if self.w % d == 0]
        self.l = int(rng.choice(splits)) if splits and rng.random() < 0.35 else 0
        self.rounds = []     # per round: per rank inputs (np_reference's form)
        self.ypools = []     # per round: per rank [W * max_t, H] bf16 bits
        self.give_out = []   # per round: per rank, whether combine gets an out
        self.rejected = []   # per round: whether validation rejects it
        for _ in range(int(rng.integers(1, 9))):
            inputs, bad = [], False
            special = rng.random() < 0.3  # a round with values validation rejects
            for _ in range(self.w):
                t = 0 if rng.random() < 0.15 else int(rng.integers(1, self.max_t + 1))
                nan_x = special and rng.random() < 0.3
                nan_w = special and rng.random() < 0.1
                dup = special and rng.random() < 0.3
                prequant = self.d != "bf16" and rng.random() < 0.25
                x = random_bits(rng, (t, self.h), nan_x and not prequant)
                inp = {"x": x, "x_scales": None,
                       "topk_idx": random_routing(rng, t, self.e, self.k, dup),
                       "topk_weights": rng.uniform(-1, 1, (t, self.k)).astype(np.float32)}
                if nan_w and t > 0:
                    inp["topk_weights"][int(rng.integers(0, t)), 0] = np.float32(np.nan)
                if prequant:
                    inp["x"], inp["x_scales"] = ref.encode(self.d, x)
                bad |= t > 0 and ((nan_x and not prequant) or nan_w or (dup and self.k >= 2))
                inputs.append(inp)
            self.rounds.append(inputs)
            self.ypools.append([random_bits(rng, (self.w * self.max_t, self.h),
                                            rng.random() < 0.1) for _ in range(self.w)])
            self.give_out.append([bool(rng.random() < 0.5) for _ in range(self.w)])
            self.rejected.append(bool(validate and bad))

    def describe(self):
        return (f"episode {self.number}: W={self.w} E={self.e} K={self.k} H={self.h} "
                f"max_t={self.max_t} {self.d}/{self.c} instance_id={self.instance_id} "
                f"ranks_per_node={self.l}, "
                f"{len(self.rounds)} rounds")


# ---------------------------------------------------------------------------------------------
# Running and checking

def rank_body(ep, world, rank):
    """One rank's calls: per round ("ok", snapshot, out, out is the given one) or
    ("rejected", message). Rounds go on after a rejection, as every rank's did."""
    op = moe_ep.get_op(world.communicator(rank), ep.e, ep.k, ep.h, ep.max_t,
                       dispatch_dtype=ep.d, combine_dtype=ep.c, instance_id=ep.instance_id,
                       ranks_per_node=ep.l)
    got = []
    for i, inputs in enumerate(ep.rounds):
        inp = inputs[rank]
        kwargs = {} if inp["x_scales"] is None else {"x_scales": inp["x_scales"]}
        try:
            recv, handle = op.dispatch(inp["x"], inp["topk_idx"], inp["topk_weights"], **kwargs)
        except moe_ep.InvalidArgument as e:
            got.append(("rejected", str(e)))
            continue
        snap = {f: None if getattr(recv, f) is None else np.array(getattr(recv, f), copy=True)
                for f in RECV_FIELDS}
        snap["num_recv"] = int(recv.num_recv)
        given = None
        if ep.give_out[i][rank]:
            given = np.full((len(inp["topk_idx"]), ep.h), 0xA5A5, dtype=np.uint16)
        out = op.combine(ep.ypools[i][rank][:recv.num_recv], handle, out=given)
        got.append(("ok", snap, np.array(out, copy=True), given is None or out is given))
    return got


def run_ranks(ep, world):
    results = [None] * ep.w
    errors = [None] * ep.w

    def body(rank):
        try:
            results[rank] = rank_body(ep, world, rank)
        except BaseException as e:  # noqa: B036 - reported below
            errors[rank] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True, name=f"soak-rank{r}")
               for r in range(ep.w)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if stuck:
        raise SoakFailure(f"{ep.describe()}: ranks {stuck} hang")
    for rank, e in enumerate(errors):
        if e is not None:
            raise SoakFailure(f"{ep.describe()}: rank {rank} raised {type(e).__name__}: {e}")
    for rank in range(ep.w):
        moe_ep.clear_op_cache(world.communicator(rank))
    return results


def same_bits(where, got, exp):
    got, exp = np.asarray(got), np.asarray(exp)
    if got.dtype != exp.dtype or got.shape != exp.shape:
        raise SoakFailure(f"{where}: {got.dtype}{list(got.shape)}, expected "
                          f"{exp.dtype}{list(exp.shape)}")
    gv = np.ascontiguousarray(got).view(_UINT[got.dtype.itemsize])
    ev = np.ascontiguousarray(exp).view(_UINT[exp.dtype.itemsize])
    bad = np.argwhere(gv != ev)
    if len(bad):
        i = tuple(bad[0])
        raise SoakFailure(f"{where}: {len(bad)} of {got.size} elements differ; first at {i}: "
                          f"bits {int(gv[i]):#x}, expected {int(ev[i]):#x}")


def check(ep, results):
    """Compares every rank's results with the reference; returns (round trips, rejected)."""
    trips = rejected = 0
    for i, inputs in enumerate(ep.rounds):
        where = f"{ep.describe()}, round {i}"
        kinds = [results[r][i][0] for r in range(ep.w)]
        if ep.rejected[i]:
            if kinds != ["rejected"] * ep.w:
                raise SoakFailure(f"{where}: validation must reject it on every rank; ranks "
                                  f"{[r for r, k in enumerate(kinds) if k == 'ok']} accepted it")
            rejected += 1
            continue
        if kinds != ["ok"] * ep.w:
            raise SoakFailure(f"{where}: rejected: "
                              f"{[results[r][i][1] for r in range(ep.w) if kinds[r] != 'ok']}")
        exp = ref.dispatch(inputs, ep.e, ep.d)
        ys = [ep.ypools[i][r][:exp[r]["num_recv"]] for r in range(ep.w)]
        outs = ref.combine(ys, exp, [len(inp["topk_idx"]) for inp in inputs], ep.c,
                           ranks_per_node=ep.l)
        for r in range(ep.w):
            _, snap, out, out_is_given = results[r][i]
            if snap["num_recv"] != exp[r]["num_recv"]:
                raise SoakFailure(f"{where} rank {r}: num_recv {snap['num_recv']}, "
                                  f"expected {exp[r]['num_recv']}")
            for f in RECV_FIELDS:
                if exp[r][f] is None:
                    if snap[f] is not None:
                        raise SoakFailure(f"{where} rank {r} {f}: expected None")
                else:
                    same_bits(f"{where} rank {r} {f}", snap[f], exp[r][f])
            same_bits(f"{where} rank {r} combine out", out, outs[r])
            if not out_is_given:
                raise SoakFailure(f"{where} rank {r}: combine did not return the given out")
        trips += 1
    return trips, rejected


def run_soak(seed, max_round_trips=None, seconds=None, first_episode=0, log=print):
    """Runs episodes until max_round_trips round trips or `seconds` have passed (whichever
    comes first; at least one episode). Returns a summary dict; raises SoakFailure."""
    validate = validation_mode()
    start = time.monotonic()
    trips = rejected = episodes = 0
    number = first_episode
    log(f"soak: seed={seed} (MOE_EP_TEST_SEED={seed} replays), validation "
        f"{'on' if validate else 'off'}")
    while True:
        ep = Episode(seed, number, validate)
        world = moe_ep.CpuWorld(ep.w, timeout_s=WORLD_TIMEOUT_S)
        t, r = check(ep, run_ranks(ep, world))
        trips, rejected, episodes, number = trips + t, rejected + r, episodes + 1, number + 1
        if max_round_trips is not None and trips + rejected >= max_round_trips:
            break
        if seconds is not None and time.monotonic() - start >= seconds:
            break
    elapsed = time.monotonic() - start
    summary = dict(seed=seed, round_trips=trips, rejected=rejected, episodes=episodes,
                   first_episode=first_episode, seconds=elapsed, validate=validate)
    log(f"soak: {trips} round trips compared with the reference, {rejected} rounds rejected by "
        f"validation, {episodes} episodes ({first_episode}..{number - 1}) in {elapsed:.1f} s; "
        f"seed={seed}")
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None,
                   help="round trips to run (rounds rejected by validation count too)")
    p.add_argument("--seconds", type=float, default=None, help="wall-clock budget")
    p.add_argument("--seed", type=lambda s: int(s, 0), default=None,
                   help="default: MOE_EP_TEST_SEED, else 20250611")
    p.add_argument("--first-episode", type=int, default=0, help="start at this episode")
    args = p.parse_args(argv)
    if args.rounds is None and args.seconds is None:
        args.rounds = 100000
    seed = base_seed() if args.seed is None else args.seed
    try:
        run_soak(seed, args.rounds, args.seconds, args.first_episode)
    except SoakFailure as e:
        print(f"soak FAILED (seed={seed}): {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
