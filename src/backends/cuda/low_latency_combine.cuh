// Decode mode's combine kernel (the kernel family and its protocol: low_latency.cuh).
#pragma once

#include "backends/cuda/combine.cuh"
#include "backends/cuda/low_latency.cuh"

namespace moe_ep::cuda_backend {

// A token's local slots: lane l holds slot l's and slot 32 + l's slab row (-1 when the slot names
// no expert of this rank) and weight, read once per work item and written into the warp's
// LlSlotTable (below) for its sums.
struct LocalSlots {
  int32_t row[2];
  float weight[2];
};

// acc += w * v lane by lane, a rounded product then a rounded addition in fp32 (no fused
// multiply-add), for the lane's 8 bf16 of v.
__device__ __forceinline__ void add_weighted_lane(float (&acc)[kElemsPerLane], float w,
                                                  const uint4& v) {
#pragma unroll
  for (int j = 0; j < kElemsPerLane; ++j) {
    const float term = w * formats::bf16_to_float(formats::lane_elem(v, j));
    acc[j] = acc[j] + term;
  }
}

// 8: a token's top-8 slots' loads of y all in flight at once, one warp step at a time (a group of
// 4 with two warp steps unrolled kept as many in flight with more registers). v24: ll_combine at
// 128 tokens 18.98 -> 17.97 us under ncu (bf16), predicted about 12: the loads in flight were
// not what bounds it.
inline constexpr int kLlSlotGroup = 8;

__device__ __forceinline__ LocalSlots load_local_slots(const int32_t* rows, const float* weights,
                                                       int k_slots, int lane) {
  LocalSlots s;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = h * 32 + lane;
    s.row[h] = k < k_slots ? __ldcg(rows + k) : -1;
    s.weight[h] = k < k_slots ? __ldcg(weights + k) : 0.0f;
  }
  return s;
}

// 16 bytes from global memory into shared memory by an asynchronous copy (cp.async, sm_80+): no
// register holds them while they are in flight. valid false: the 16 bytes are zeros and nothing
// is read (src must still be a global address). The line is left first to evict from L2, as
// load_stream's ld.global.cs leaves it: y read with L2's normal policy stayed there and cost the
// next decode dispatch at 256 tokens 0.5-2.0 us in the bench's loop (v47 runs Y and E).
// cp_async_wait_all: this thread's copies are done and visible to it. The policy operand is
// evict_first_policy()'s, made once (not volatile: the compiler may share one among the copies).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async_16_evict_first(uint4* dst, const void* src, bool valid,
                                                        uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(__cvta_generic_to_global(src)), "r"(valid ? 16 : 0), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// Slots are loaded and summed in halves of 4 (8 a group, as weighted_slot_sum).
inline constexpr int kLlPipeHalf = kLlSlotGroup / 2;
// The widest top-k the op accepts (op.cc's kMaxTopk; LocalSlots: two slots a lane).
inline constexpr int kLlMaxSlots = 64;

// The lane's shared-memory slots for SlotSumPipe's half in flight: slot i at [i * 32] (8 warps x
// 4 x 32 x 16 B = 16 KiB a block; lane-major, so a warp's 16-byte accesses hit every bank once).
__device__ __forceinline__ uint4* ll_pipe_slots() {
  __shared__ uint4 buf[Policy::kDataThreads / 32][kLlPipeHalf][32];
  return &buf[threadIdx.x / 32][0][threadIdx.x & 31];
}

// A warp's slots for its sums (weighted_slot_sum, SlotSumPipe), written once a work item from its
// LocalSlots: slot k's row of y (nullptr where the slot names no expert of this rank, and from
// k_slots on) and its weight (-0 there, which adds nothing to a sum). Every lane reads an entry at
// one address (a broadcast), so a warp step's load costs a shared load for its row instead of a
// shuffle, a test and a 64-bit product, and its sum a shared load for the weight instead of a
// shuffle, a test and a select (768 B a warp, 6 KiB a block; v48 in perf-history).
struct LlSlotTable {
  const uint16_t* row[kLlMaxSlots];
  float weight[kLlMaxSlots];
  // Slot k's 8 values at elem (zeros without a row or past the row).
  __device__ __forceinline__ uint4 load(int k, int64_t elem, int hidden) const {
    return row[k] != nullptr ? load_lane(row[k], elem, hidden) : make_uint4(0, 0, 0, 0);
  }
};
__device__ __forceinline__ LlSlotTable* ll_slot_table() {
  __shared__ LlSlotTable tables[Policy::kDataThreads / 32];
  return &tables[threadIdx.x / 32];
}

// Writes the warp's slot table from its lanes' local slots (after the warp's reads of it for its
// last work item) and returns it. Every lane of the warp calls it together.
__device__ __forceinline__ const LlSlotTable* fill_slot_table(const LocalSlots& slots,
                                                              const uint16_t* y, int hidden,
                                                              int k_slots, int lane) {
  LlSlotTable* table = ll_slot_table();
  __syncwarp();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = h * 32 + lane;
    const bool has_row = k < k_slots && slots.row[h] >= 0;
    table->row[k] = has_row ? y + static_cast<int64_t>(slots.row[h]) * hidden : nullptr;
    table->weight[k] = has_row ? slots.weight[h] : -0.0f;
  }
  __syncwarp();
  return table;
}

// The 8 values at `elem` of p = bf16(sum over local slots k ascending of w_k * y[row_k]), product
// then add in fp32 (zeros past the row), the slots from the warp's table. Every lane of the warp
// calls it together.
__device__ __forceinline__ uint4 weighted_slot_sum(const LlSlotTable& table, int64_t elem,
                                                   int hidden, int k_slots) {
  float acc[kElemsPerLane];
#pragma unroll
  for (int j = 0; j < kElemsPerLane; ++j) acc[j] = 0.0f;
  for (int k0 = 0; k0 < k_slots; k0 += kLlSlotGroup) {
    uint4 v[kLlSlotGroup];
#pragma unroll
    for (int i = 0; i < kLlSlotGroup; ++i) {  // the group's loads first, all in flight
      // A slot without a row adds (-0) * (+0) = -0 (its table weight), which leaves every sum as
      // it is (x + -0 = x for every x, +0 included; a NaN stays a NaN, written as the one bf16
      // NaN): the same bits as skipping it, without a branch.
      v[i] = table.load(k0 + i, elem, hidden);
    }
#pragma unroll
    for (int i = 0; i < kLlSlotGroup; ++i) {  // ascending
      add_weighted_lane(acc, table.weight[k0 + i], v[i]);
    }
  }
  return lane_pack_bf16(acc);
}

// The sums of weighted_slot_sum, the same bits, for the warp steps of a range [begin, stop), one
// call a step in order (as send_combine_range and ll_reduce_own_only call it), with the loads of y
// ahead of the sums: each group's slots 4-7 are loaded into registers and then its slots 0-3,
// which were copied ahead into shared memory, are summed; then the next group's slots 0-3 (the
// next step's, after a step's last group) start their copy, and slots 4-7 are summed. So a half's
// sum overlaps the next half's loads, and the next step's first loads are in flight while this
// step is encoded and stored. weighted_slot_sum loads all 8 slots and then sums them: no load of
// y is in flight while a warp sums (v47 run P: at 128 tokens 23% of ll_combine's warp samples wait
// for y at the first use of a step's loads). The half in flight between calls lives in shared
// memory: carried in 16 registers it spilled 100-500 bytes in every ll_combine instantiation. The
// slots' rows and weights come from the warp's LlSlotTable.
struct SlotSumPipe {
  const LlSlotTable* table;
  const uint16_t* y;  // any valid global address: the source of a copy that reads nothing
  int hidden;
  int k_slots;
  int64_t stop;   // the range's end: nothing is loaded for a step at or past it
  int lane_elem;  // the lane's first element in a warp step (lane * kElemsPerLane)
  uint4* ahead;   // ll_pipe_slots()

  // Slots [k0, k0 + 4) at elem into `ahead` (zeros without a row or past the row).
  __device__ __forceinline__ void copy_half(int k0, int64_t elem) const {
    const uint64_t policy = evict_first_policy();
#pragma unroll
    for (int i = 0; i < kLlPipeHalf; ++i) {
      const uint16_t* row = table->row[k0 + i];
      const bool valid = row != nullptr && elem < hidden;
      cp_async_16_evict_first(ahead + i * 32, valid ? row + elem : y, valid, policy);
    }
    cp_async_commit();
  }
  __device__ __forceinline__ void add_half(const uint4 (&v)[kLlPipeHalf], int k0,
                                           float (&acc)[kElemsPerLane]) const {
#pragma unroll
    for (int i = 0; i < kLlPipeHalf; ++i) add_weighted_lane(acc, table->weight[k0 + i], v[i]);
  }
  // The range's first copy (after any copy of an earlier pipe of this lane, all of which ran to
  // their range's end, where none is left in flight).
  __device__ __forceinline__ void start(int64_t elem) {
    cp_async_wait_all();
    copy_half(0, elem);
  }
  __device__ __forceinline__ uint4 operator()(int64_t elem) {
    float acc[kElemsPerLane];
#pragma unroll
    for (int j = 0; j < kElemsPerLane; ++j) acc[j] = 0.0f;
    const int64_t next = elem + kElemsPerWarpStep;
    const bool more = next - lane_elem < stop;  // warp-uniform: the range has a next step
#pragma unroll
    for (int g = 0; g < kLlMaxSlots / kLlSlotGroup; ++g) {  // unrolled: a runtime loop spilled
      const int k0 = g * kLlSlotGroup;
      if (k0 >= k_slots) break;  // warp-uniform
      uint4 second[kLlPipeHalf];
#pragma unroll
      for (int i = 0; i < kLlPipeHalf; ++i)
        second[i] = table->load(k0 + kLlPipeHalf + i, elem, hidden);
      uint4 first[kLlPipeHalf];
      cp_async_wait_all();
#pragma unroll
      for (int i = 0; i < kLlPipeHalf; ++i) first[i] = ahead[i * 32];
      add_half(first, k0, acc);
      // The copy into `ahead` after its reads above were used (same thread, program order).
      if (k0 + kLlSlotGroup < k_slots) {
        copy_half(k0 + kLlSlotGroup, elem);
      } else if (more) {
        copy_half(0, next);
      }
      add_half(second, k0 + kLlPipeHalf, acc);
    }
    return formats::lane_pack_bf16_tested(acc);
  }
};

// The pipe over [begin, stop) for a token's slots: the warp's slot table written from them (after
// the warp's reads of it for its last range), its first copy issued. Every lane of the warp
// calls it together.
__device__ __forceinline__ SlotSumPipe slot_sum_pipe(const LocalSlots& slots, const uint16_t* y,
                                                     int hidden, int k_slots, int64_t begin,
                                                     int64_t stop, int lane) {
  SlotSumPipe pipe{fill_slot_table(slots, y, hidden, k_slots, lane),
                   y,
                   hidden,
                   k_slots,
                   stop,
                   lane * kElemsPerLane,
                   ll_pipe_slots()};
  pipe.start(begin + lane * kElemsPerLane);
  return pipe;
}

// A token whose only part is this rank's own (every token at world size 1): what
// reduce_combine_range computes for a mask of this rank alone, out = bf16(0 + decode(encode(p)))
// lane by lane, one warp step at a time, with p from the pipe.
template <typename F>
__device__ __forceinline__ void ll_reduce_own_only(SlotSumPipe pipe, uint16_t* out_row,
                                                   int64_t begin, int64_t end, int lane) {
  for (int64_t base = begin; base < end; base += kElemsPerWarpStep) {
    const int64_t elem = base + lane * kElemsPerLane;
    const uint4 p = pipe(elem);
    // bf16: the wire keeps the packed sum as it is, NaNs already kBf16NaN, so the round trip is
    // the sum plus zero. Every lane, as in the send (the other encodes shuffle).
    const uint4 v = std::is_same_v<F, formats::Bf16Wire> ? formats::lane_bf16_plus_zero(p)
                                                         : own_round_trip<F>(p);
    if (elem < end) *reinterpret_cast<uint4*>(out_row + elem) = v;
  }
}

// This rank's own part of a token in decode mode's combine, for a token with other ranks' parts
// too (the general reduce): the weighted sum of its local slots' rows of y (weighted_slot_sum,
// from the warp's slot table), one warp step at a time, since its slot loads already keep a
// group of loads in flight and more steps' registers would spill. A token whose only part is
// this rank's own takes SlotSumPipe.
struct OwnSlotSum {
  static constexpr bool kInPlace = true;
  static constexpr int kUnroll = 1;
  const LlSlotTable* table;
  int hidden;
  int k_slots;
  __device__ uint4 operator()(int64_t elem) const {
    return weighted_slot_sum(*table, elem, hidden, k_slots);
  }
};

// The token side for elements [begin, end) of this rank's token t when the whole combine runs in
// one kernel (kLlCombineAll): this rank's own part is not sent to itself; reduce_combine_range
// computes it (OwnSlotSum) and encodes and decodes it in registers, the same bits a send to
// itself would have stored and the reduce read back, without the store, the system fences, the
// flag and the wait on it (docs/perf-history.md, v18). The other ranks' rows are waited for and
// added as in normal mode, all in ascending rank order. Returns false when a wait gave up.
template <typename F>
__device__ __forceinline__ bool ll_reduce_with_own_part(const LowLatencyParams& p,
                                                        const ReduceArgs& a, int64_t t,
                                                        int64_t slice, int64_t begin, int64_t end,
                                                        int lane) {
  const RankInfo& info = p.info;
  const uint64_t mask = p.token_mask[t];
  // The token's local slots are loaded beside its mask, not after it: one round trip fewer
  // before the first loads of y (0.1-0.4 us a combine, perf-history v48). The words exist whether
  // or not the token came to this rank (the slot rows and meta that only this rank's dispatch
  // writes, for its own token t); their values are used only when the mask says it came.
  const auto* meta = reinterpret_cast<const float*>(a.self + p.layout.ll_meta_offset(info.rank, t));
  const LocalSlots slots = load_local_slots(
      p.slot_rows + (static_cast<int64_t>(info.rank) * info.max_tokens + t) * info.topk,
      meta + info.topk, info.topk, lane);
  if (mask == uint64_t{1} << info.rank) {
    ll_reduce_own_only<F>(slot_sum_pipe(slots, p.y, a.hidden, info.topk, begin, end, lane),
                          a.out + t * a.hidden, begin, end, lane);
    return true;
  }
  // reduce_combine_range reads the own part only for the mask's bit of this rank (warp-uniform).
  const bool own_part = ((mask >> info.rank) & 1) != 0;
  const OwnSlotSum own{own_part ? fill_slot_table(slots, p.y, a.hidden, info.topk, lane) : nullptr,
                       a.hidden, info.topk};
  const auto flag_offset = [&](int r) { return p.layout.ll_ready_offset(r, t, slice); };
  return reduce_combine_range<F>(a, t, mask, begin, end, flag_offset, lane, own);
}

// kOwnInPlace: the whole combine in one launch (kLlCombineAll), this rank's own part summed in
// place (ll_reduce_with_own_part); otherwise one part of a hooked combine, or both, with every
// part sent. Two instantiations, so that neither carries the other's registers.
// A decode combine launch's work items (low_latency_items.h) for this launch's phase.
__host__ __device__ inline LlCombineItems ll_combine_items(const LowLatencyParams& p) {
  return ll_combine_items(p.layout.ll_slices, p.info.world_size, p.info.max_tokens, p.num_tokens,
                          p.combine_phase);
}

// kByWarp (with kOwnInPlace; LlCombineItems::by_warp): the whole combine at world size 1. Its
// launch has reduces only, and no reduce waits for another item or for any send (there is no
// other rank), so the tickets' order is not needed: warp w takes items w, w + n, ... of n warps.
// Each warp saves the add on the one counter before each item (a round trip, every warp at once
// on one word) and the count at its end; the tickets stay 0 for the next launch. A kernel of its
// own: the same choice inside the ticketed kernel spilled 4-32 bytes (ptxas, v50).
template <typename F, bool kOwnInPlace, bool kByWarp = false>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ll_combine_kernel(LowLatencyParams p) {
  static_assert(kOwnInPlace || !kByWarp, "by warp only for the whole combine in one launch");
  ll_follow_previous_kernel();
  // This combine's step (combine_step, as the expand's dispatch_step) tags its slices' flags.
  // Several nodes (low_latency_nodes.cuh): only the send part runs here, before the settle, so
  // the step in flight tags the flags, and nothing is sent unless this rank's node agreed on it
  // (every block alike; no ticket is taken). The state's words are loaded beside the error flag
  // (one round trip before the block's barrier, not two).
  const bool nodes = p.nodes.several();
  const uint64_t combine_step = nodes ? p.state->step : p.state->combine_step;
  // The step of the dispatch whose rows these are: its flags say which tokens came here.
  const uint64_t dispatch_step = p.state->dispatch_step;
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  if (nodes && p.state->send_step != combine_step) return;
  const uint64_t tag = kDecodeTag | combine_step;
  if (!ll_receive_has_its_send(p, combine_step, kPhaseCombineWait)) return;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int k_slots = info.topk;
  // Work items are slices of rows (Policy::kDispatchSliceElems elements), so a token's send and
  // its reduce spread over several warps (ll_combine_items). Every launch counts its tickets
  // from 0 and its last warp resets them, so the two parts of a hooked combine, one after the
  // other on the op's order, each start from 0.
  const LlCombineItems items = ll_combine_items(p);
  const int64_t first = items.first;
  const int64_t end = items.end;
  const ReduceArgs reduce{self, p.layout, hidden, info.rank, p.out, tag, p.timeout_ns, p.err};
  if constexpr (kByWarp) {
    for (int64_t item = first + c.warp; item < end; item += c.num_warps) {
      const LlCombineItem w = items.at(item, info.rank, info.max_tokens, hidden, true);
      if (w.begin < w.stop) {
        ll_reduce_with_own_part<F>(p, reduce, w.row_item, w.slice, w.begin, w.stop, c.lane);
      }
    }
    return;
  }
  // In place, this rank's part of its own tokens is summed by their reduces, never sent. A hooked
  // combine's receive part may run after y has changed, so its send part sends to this rank too.
  const int64_t last_wave = last_wave_of_tickets(end, c.num_warps);
  while (true) {
    const int64_t item = first + take_ticket(&p.tickets[0], c.lane);
    if (item >= end) break;
    // In place, the send items skip this rank's own rows (v22 took a ticket for each and
    // skipped it, all of them at world size 1).
    const LlCombineItem w = items.at(item, info.rank, info.max_tokens, hidden, kOwnInPlace);
    if (w.send) {
      const int s = static_cast<int>(w.row_item / info.max_tokens);
      const int64_t t = w.row_item - static_cast<int64_t>(s) * info.max_tokens;
      const uint64_t flag =
          __ldcg(reinterpret_cast<const uint64_t*>(self + p.layout.ll_flag_offset(s, t)));
      if (flag != (dispatch_step << 1 | 1)) continue;  // token t of s did not come here
      const auto* meta = reinterpret_cast<const float*>(self + p.layout.ll_meta_offset(s, t));
      const LocalSlots slots =
          load_local_slots(p.slot_rows + (static_cast<int64_t>(s) * info.max_tokens + t) * k_slots,
                           meta + k_slots, k_slots, c.lane);
      // Where the part goes: s's combine row (this rank, t); for s on another node, this node's
      // forwarder for s (its rail peer here), at combine slot (s's node * L + this rank's place
      // in its node, t), the slot normal mode's path across nodes uses (a rank of s's node never
      // stores there: its rows reach the forwarder's own tokens only from this node's ranks).
      int dest = s, slot = info.rank;
      if (nodes && !p.nodes.same_node(s)) {
        dest = p.nodes.rail_peer(s, p.nodes.node);
        slot = p.nodes.rail_peer(info.rank, s / p.nodes.node_size);
      }
      // One warp step at a time, the loads of y ahead of the sums (SlotSumPipe).
      send_combine_range<F, 1>(slot_sum_pipe(slots, p.y, hidden, k_slots, w.begin, w.stop, c.lane),
                               w.begin, w.stop, hidden,
                               p.peers.base[dest] + p.layout.combine_row_offset(slot, t),
                               reinterpret_cast<uint64_t*>(
                                   p.peers.base[dest] + p.layout.ll_ready_offset(slot, t, w.slice)),
                               tag, c.lane);
    } else if (w.begin < w.stop) {  // (a part past the end of a short last slice has nothing)
      const int64_t t = w.row_item;
      bool done = false;
      if constexpr (kOwnInPlace) {
        done = ll_reduce_with_own_part<F>(p, reduce, t, w.slice, w.begin, w.stop, c.lane);
      } else {
        const auto flag_offset = [&](int r) { return p.layout.ll_ready_offset(r, t, w.slice); };
        done = reduce_combine_range<F>(reduce, t, p.token_mask[t], w.begin, w.stop, flag_offset,
                                       c.lane);
      }
      if (!done) break;
    }
    if (item >= last_wave) break;  // no ticket after the last wave's items
  }
  // The last warp out resets the tickets for the next launch, which the op's order (stream or
  // graph) starts only after this one: the two parts of a hooked combine each count from 0. The
  // count is an acquire-release add: each warp's last take of tickets[0] happens before its
  // count, and the last warp's reset after every count it saw, so no take lands after the reset
  // (two fences around a relaxed add did this before v46).
  if (c.lane == 0 &&
      atomic_add_acq_rel_gpu(&p.tickets[1], 1u) == static_cast<unsigned int>(c.num_warps) - 1) {
    p.tickets[0] = 0;
    p.tickets[1] = 0;
  }
}

}  // namespace moe_ep::cuda_backend
