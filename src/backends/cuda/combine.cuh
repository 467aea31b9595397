// Combine: one kernel whose warps take work items by ticket (docs/cuda-backend.md).
// Items [0, R) are sends (expert side, rank r): a warp takes a received row i, reads y[i] once,
// encodes it to the combine wire format, stores it into the source rank's combine buffer at
// [r][source token] and release-stores the row's ready flag there (the combine's step number).
// Items [R, R + T) are reduces (token side): for one of this rank's tokens, a warp waits for the
// ready flag of every destination rank's row, then decodes the rows in ascending rank order, sums
// in fp32 and rounds once to bf16. Every send ticket is handed out before any reduce ticket, and
// sends never wait, so the warps a reduce waits for (here or on a peer) are running or done:
// the kernel finishes with any number of its blocks resident, whatever else occupies the GPU.
// A token's reduce starts as soon as its rows have landed, overlapping the sends still in flight.
// Both roles keep four 256-element chunks of loads in flight per warp.
#pragma once

#include "backends/cuda/data_common.cuh"

namespace moe_ep::cuda_backend {

inline constexpr int kCombineUnroll = Policy::kUnroll;
// Warp steps of an own-only row loaded together on the whole-row path (reduce_own_row_whole):
// 7 for bf16 and fp8 direct cast (7168 = 4 x 1792; 59 and 60 registers, no spill), 4
// (kCombineUnroll) for fp8 blockwise and int8/e3m4. Measured at 4096 tokens and 32 SMs: fp8
// blockwise and int8/e3m4 took 2 until v37 (4 spilled fp8's 20 bytes); once their fast paths
// packed without NaN tests (lane_pack_bf16_no_nan), 4 made the combine 7.5-8.1 us faster for fp8
// (53.1-53.3 -> 45.2-45.6) and 4.1-4.3 for int8_e3m4 (65.5-65.6 -> 61.2-61.5), v37 run V, with
// the same 20 bytes of fp8 spill and int8's 36 (its rare steps out of line,
// own_round_trip_rare); 8 would spill 52 bytes for fp8 and 80 for int8 (ptxas). 7 instead of 4:
// direct cast 44.4-44.5 -> 43.0-43.4 us, bf16 40.4-40.7 -> 40.0 (v38 run A).
template <typename F>
inline constexpr int kCombineWholeSteps =
    std::is_same_v<F, formats::Fp8DirectWire> || std::is_same_v<F, formats::Bf16Wire>
        ? 7
        : kCombineUnroll;

// Encodes elements [begin, end) of one row of bf16 values, given lane by lane by `load(elem)`
// (the 8 values starting at element `elem`, zeros past the row), into the combine wire format at
// `dst_row` (payload, then scales), then release-stores `tag` at `dst_flag` once every lane's
// stores are visible. `begin` is a multiple of a warp step and `end - begin` a multiple of the
// unrolled step unless `end` is the row's end, so format blocks never straddle two ranges. Used by
// normal mode (the whole row of y) and decode mode (a slice of the weighted sum of a token's
// expert rows). kUnroll: warp steps whose loads are in flight together. A null `dst_flag` stores
// the range only (the copy-engine path's staging area: its copy and signal follow).
template <typename F, int kUnroll = kCombineUnroll, typename LoadRow>
__device__ __forceinline__ void send_combine_range(LoadRow load, int64_t begin, int64_t end,
                                                   int hidden, char* dst_row, uint64_t* dst_flag,
                                                   uint64_t tag, int lane) {
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  for (int64_t base = begin; base < end; base += kElemsPerWarpStep * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = load(base + u * kElemsPerWarpStep + lane * kElemsPerLane);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kElemsPerWarpStep >= end) break;  // warp-uniform
      const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
      typename F::Params params;
      LaneWord<F> word;
      formats::encode_lane<F>(v[u], word, params);
      if (elem < end) store_lane<F>(dst_row, dst_row + payload_bytes, elem, word, params);
    }
  }
  if (dst_flag == nullptr) return;
  // Every lane's stores of the range before lane 0's flag: the warp's barrier orders them before
  // it, and the flag is a release at system scope, which is cumulative, so a reader that acquires
  // it sees them (count_block_done ends a block the same way; until v46 every lane fenced at
  // system scope before the barrier).
  __syncwarp();
  if (lane == 0) st_release_sys(dst_flag, tag);
}

// What the token side of a combine needs, in either mode.
struct ReduceArgs {
  const char* self;     // this rank's buffer
  BufferLayout layout;  // its combine rows and flags
  int hidden;
  int rank;
  uint16_t* out;  // [T, H] bf16
  uint64_t tag;   // the flags of this combine
  uint64_t timeout_ns;
  ErrorSink err;
};

// Adds the decoded elements [base, base + kUnroll warp steps) of one combine-format row (payload,
// then scales at payload_bytes) to acc, clipped to `end`: one lane's 8 elements per step.
template <typename F, int kUnroll>
__device__ __forceinline__ void add_row_steps(const char* row, int64_t payload_bytes, int64_t base,
                                              int64_t end, int lane,
                                              float (&acc)[kUnroll][kElemsPerLane]) {
  LaneWord<F> words[kUnroll];
  typename F::Scale scales[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
    if (elem < end) {
      words[u] = load_word<F>(row, elem);
      if constexpr (F::kBlock != 0) {
        scales[u] = __ldcg(reinterpret_cast<const typename F::Scale*>(row + payload_bytes) +
                           elem / F::kBlock);
      } else {
        scales[u] = typename F::Scale{};
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
    if (elem < end) lane_decode_add<F>(words[u], scales[u], acc[u]);
  }
}

// Waits until the ready flag of every rank in `mask` (in ascending order) holds `a.tag`;
// `flag_offset(r)` is where rank r's flag lives in this rank's buffer. Every lane acquires every
// flag itself, so its own loads of the rows are ordered after. False on every lane when a wait
// gave up (timeout or another error, already reported).
template <typename FlagOffset>
__device__ __forceinline__ bool wait_ready_flags(const ReduceArgs& a, uint64_t mask,
                                                 FlagOffset flag_offset) {
  bool ready = true;
  for (uint64_t m = mask; m != 0 && ready;) {
    const int r = next_dest(m);
    uint64_t word = 0;
    ready = wait_tagged(reinterpret_cast<const uint64_t*>(a.self + flag_offset(r)), 0, a.tag,
                        a.timeout_ns, a.err, kPhaseCombineWait, a.rank, r, &word);
  }
  return __all_sync(0xffffffffu, ready);
}

// Every rank's row of a token comes through the buffer (reduce_combine_range's default).
// kUnroll: warp steps summed together (each keeps its sums live).
struct NoOwnRow {
  static constexpr bool kInPlace = false;
  static constexpr int kUnroll = kCombineUnroll;
  __device__ uint4 operator()(int64_t) const { return make_uint4(0, 0, 0, 0); }
};

// This rank's own row of the token, read from y (normal mode, one node): `row` is y's row of the
// token in this rank's receive buffer.
struct OwnRowOfY {
  static constexpr bool kInPlace = true;
  // Two warp steps' sums live instead of kCombineUnroll (4): the in-place instantiations spilled
  // 24-140 bytes with 4 (an A/B to measure: docs/perf-notes.md, open leads).
  static constexpr int kUnroll = 2;
  const uint16_t* row;
  int hidden;
  __device__ uint4 operator()(int64_t elem) const { return load_lane(row, elem, hidden); }
};

// Where rank r's row of token t lies among r's combine rows: at the token's index
// (reduce_combine_range's default). The copy-engine path passes the token's position among this
// rank's tokens sent to r instead (its rows from r are contiguous, copy_engine.cuh).
struct SameTokenRow {
  __device__ int64_t operator()(int, int64_t t) const { return t; }
};

// Receiver role for elements [begin, end) of token t, whose rows come from the ranks in `mask`;
// `flag_offset(r)` is where rank r's ready flag for that range lives in this rank's buffer, and
// `row_of(r, t)` the row of rank r's combine rows that holds the token's.
// With an OwnRow whose kInPlace is true, this rank's own row is not read back from the buffer (it
// was never sent): own(elem) gives its values, encoded and decoded here, the same bits the buffer
// would have held, added at this rank's place in the order; OwnRow::kUnroll warp steps at a time.
// Returns false when a wait gave up (timeout or another error).
template <typename F, typename FlagOffset, typename OwnRow = NoOwnRow,
          typename RowOf = SameTokenRow>
__device__ __forceinline__ bool reduce_combine_range(const ReduceArgs& a, int64_t t, uint64_t mask,
                                                     int64_t begin, int64_t end,
                                                     FlagOffset flag_offset, int lane,
                                                     OwnRow own = {}, RowOf row_of = {}) {
  const int hidden = a.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  constexpr int kU = OwnRow::kUnroll;
  const uint64_t own_bit = OwnRow::kInPlace ? uint64_t{1} << a.rank : 0;
  if (!wait_ready_flags(a, mask & ~own_bit, flag_offset)) return false;
  for (int64_t base = begin; base < end; base += kElemsPerWarpStep * kU) {
    float acc[kU][kElemsPerLane];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int j = 0; j < kElemsPerLane; ++j) acc[u][j] = 0.0f;
    }
    for (uint64_t m = mask; m != 0;) {  // ascending rank order
      const int r = next_dest(m);
      if constexpr (OwnRow::kInPlace) {
        if (r == a.rank) {
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            if (base + u * kElemsPerWarpStep >= end) break;  // warp-uniform, as in the send
            const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
            // Every lane, as in the send; the bits the buffer would have held.
            formats::lane_round_trip_add<F>(own(elem), elem < end, acc[u]);
          }
          continue;
        }
      }
      add_row_steps<F, kU>(a.self + a.layout.combine_row_offset(r, row_of(r, t)), payload_bytes,
                           base, end, lane, acc);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
      if (elem < end) {
        *reinterpret_cast<uint4*>(a.out + t * hidden + elem) = lane_pack_bf16(acc[u]);
      }
    }
  }
  return true;
}

// The token side of a token whose only row is this rank's own (every token at world size 1): out
// = bf16(0 + decode(encode(own row))) lane by lane for elements [begin, end), what the send to
// itself and the reduce would have computed, with the loads of kCombineUnroll steps in flight and
// one step's sum live at a time (the general in-place reduce keeps every step's sum and spills).
template <typename F, typename OwnRow>
__device__ __forceinline__ void reduce_own_row_only(const OwnRow& own, uint16_t* out_row, int begin,
                                                    int end, int lane) {
  for (int base = begin; base < end; base += kElemsPerWarpStep * kCombineUnroll) {
    uint4 v[kCombineUnroll];
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u) {
      v[u] = own(base + u * kElemsPerWarpStep + lane * kElemsPerLane);
    }
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u) {
      if (base + u * kElemsPerWarpStep >= end) break;  // warp-uniform, as in the send
      const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
      float acc[kElemsPerLane];
#pragma unroll
      for (int j = 0; j < kElemsPerLane; ++j) acc[j] = 0.0f;
      formats::lane_round_trip_add<F>(v[u], true, acc);  // every lane, as in the send
      if (elem < end) *reinterpret_cast<uint4*>(out_row + elem) = lane_pack_bf16(acc);
    }
  }
}

// One lane's 8 outputs of an own-only row: bf16(0 + decode(encode(v))), the bits of the send to
// itself and the reduce, as reduce_own_row_only computes them (which packs only the lanes
// inside its range). All 32 lanes must call it (the encode shuffles).
template <typename F>
__device__ __forceinline__ uint4 own_round_trip(const uint4& v) {
  float acc[kElemsPerLane];
#pragma unroll
  for (int j = 0; j < kElemsPerLane; ++j) acc[j] = 0.0f;
  formats::lane_round_trip_add<F>(v, true, acc);
  // fp8 direct cast: a lane with no Inf or NaN among its values is cast with satfinite
  // (encode_lane), so its codes and sums are finite and pack without the NaN tests.
  if constexpr (std::is_same_v<F, formats::Fp8DirectWire>) {
    if (!formats::lane_has_inf_or_nan(v)) return formats::lane_pack_bf16_no_nan(acc);
  }
  return lane_pack_bf16(acc);
}

// reduce_own_row_only for a whole row of fp8 blockwise whose hidden is a multiple of kWholeSteps
// warp steps (7168 is): the same bits without the per-step bounds tests, the zeroed loads past the
// row and 64-bit element indices, and with one fast-range vote (fp8_by_table) for kWholeSteps steps
// instead of one a step (the dispatch's whole slices, v26, took 17% of the fp8 dispatch kernel's
// instructions). After the vote each step is encoded, decoded and stored in turn, so that only one
// step's code words and sums are live (kCombineWholeSteps).
template <int kWholeSteps>
__device__ __forceinline__ void reduce_own_row_whole_fp8(const uint16_t* row, uint16_t* out_row,
                                                         int hidden, int lane) {
  using F = formats::Fp8BlockWire;
  constexpr int kLanesPerBlock = F::kBlock / kElemsPerLane;
  for (int base = lane * kElemsPerLane; base < hidden; base += kElemsPerWarpStep * kWholeSteps) {
    uint4 v[kWholeSteps];
    static_assert(kWholeSteps % 2 == 0, "two steps' maxima share a register");
    uint32_t amax[kWholeSteps / 2];  // two steps' 16-bit maxima a register
    bool fast = true;
#pragma unroll
    for (int u = 0; u < kWholeSteps; ++u) {
      v[u] = load_stream(reinterpret_cast<const uint4*>(row + base + u * kElemsPerWarpStep));
    }
#pragma unroll
    for (int u = 0; u < kWholeSteps; u += 2) {
      amax[u / 2] = formats::block_amax_bits_x2<kLanesPerBlock>(v[u], v[u + 1]);
      fast = fast && formats::fp8_by_table(amax[u / 2] & 0xffffu) &&
             formats::fp8_by_table(amax[u / 2] >> 16);
    }
    if (__all_sync(0xffffffffu, fast)) {
#pragma unroll
      for (int u = 0; u < kWholeSteps; ++u) {  // encode_lane's fast path, amax known
        float acc[kElemsPerLane];
        const uint32_t a = u % 2 == 0 ? amax[u / 2] & 0xffffu : amax[u / 2] >> 16;
        const F::Params params = formats::fp8_block_params_by_table(a);
        formats::lane_decode_from_zero(formats::e4m3x8(v[u], params.inv), params.stored, acc);
        // Finite codes times a scale of the fast range: no NaN to replace.
        *reinterpret_cast<uint4*>(out_row + base + u * kElemsPerWarpStep) =
            formats::lane_pack_bf16_no_nan(acc);
      }
    } else {
#pragma unroll
      for (int u = 0; u < kWholeSteps; ++u) {
        *reinterpret_cast<uint4*>(out_row + base + u * kElemsPerWarpStep) = own_round_trip<F>(v[u]);
      }
    }
  }
}

// A step of an own-only row whose blocks leave the fast range (rare): the reference round trip,
// out of line so that its registers do not weigh on the whole-row loop. All 32 lanes call it.
template <typename F>
__device__ __noinline__ void own_round_trip_rare(uint4 v, uint16_t* out) {
  *reinterpret_cast<uint4*>(out) = own_round_trip<F>(v);
}

// reduce_own_row_only for a whole row of another format (hidden a multiple of one warp step):
// the same per-step round trips, without the per-step bounds tests, the zeroed loads past the row
// and 64-bit element indices, kWholeSteps steps' loads in flight and the row's last steps (fewer
// than kWholeSteps) one at a time; int8/e3m4 with its fast-range round trip inline
// (lane_round_trip_add's, values summed into zeros) and the rest out of line.
template <typename F, int kWholeSteps>
__device__ __forceinline__ void reduce_own_row_whole(const uint16_t* row, uint16_t* out_row,
                                                     int hidden, int lane) {
  if constexpr (std::is_same_v<F, formats::Fp8BlockWire>) {
    reduce_own_row_whole_fp8<kWholeSteps>(row, out_row, hidden, lane);
  } else {
    // One warp step: the lane's values v, their round trip stored at out.
    const auto step = [](const uint4& v, uint16_t* out) {
      if constexpr (std::is_same_v<F, formats::Int8E3m4Wire>) {
        const uint32_t a = formats::block_amax_bits<F::kBlock / kElemsPerLane>(v);
        if (__all_sync(0xffffffffu, formats::int8_e3m4_in_fast_range(a))) {
          typename F::Params params;
          LaneWord<F> word;
          float values[kElemsPerLane];
          // 0 + value, as lane_round_trip_add sums into zeros: the fast path's values.
          formats::int8_e3m4_fast<true>(v, a, word, params, values);
          // Codes times a scale of the fast range: no NaN to replace.
          *reinterpret_cast<uint4*>(out) = formats::lane_pack_bf16_no_nan(values);
        } else {
          own_round_trip_rare<F>(v, out);
        }
      } else {
        *reinterpret_cast<uint4*>(out) = own_round_trip<F>(v);  // every lane, as in the send
      }
    };
    constexpr int kGroup = kElemsPerWarpStep * kWholeSteps;
    const int groups_end = hidden - hidden % kGroup;
    int base = lane * kElemsPerLane;  // (below groups_end for every lane or none)
    for (; base < groups_end; base += kGroup) {
      uint4 v[kWholeSteps];
#pragma unroll
      for (int u = 0; u < kWholeSteps; ++u) {
        v[u] = load_stream(reinterpret_cast<const uint4*>(row + base + u * kElemsPerWarpStep));
      }
#pragma unroll
      for (int u = 0; u < kWholeSteps; ++u) step(v[u], out_row + base + u * kElemsPerWarpStep);
    }
    for (; base < hidden; base += kElemsPerWarpStep) {
      step(load_stream(reinterpret_cast<const uint4*>(row + base)), out_row + base);
    }
  }
}

// Normal mode's sender role for received row i: the row of y, to (source rank, source token).
// Several nodes: a row from another node's source goes to the forwarder it came through, at slot
// (source node * L + this rank's index in its node, staged row) (layout.h, combine).
template <typename F>
__device__ __forceinline__ void send_received_row(const CombineParams& p, int64_t i, int lane) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int src = __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_src_rank_offset(i)));
  int dest = src, slot = info.rank;
  int64_t token =
      __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_src_token_offset(i)));
  const int src_node = src / p.nodes.node_size;
  if (src_node != p.nodes.node) {
    dest = p.nodes.rail_peer(src, p.nodes.node);
    slot = p.nodes.rail_peer(info.rank, src_node);
    token = __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_fwd_row_offset(i)));
  }
  const uint16_t* y = p.y + i * hidden;
  send_combine_range<F>(
      [&](int64_t elem) { return load_lane(y, elem, hidden); }, 0, hidden, hidden,
      p.peers.base[dest] + p.layout.combine_row_offset(slot, token),
      reinterpret_cast<uint64_t*>(p.peers.base[dest] + p.layout.combine_flag_offset(slot, token)),
      p.step, lane);
}

// kOwnInPlace (one node): this rank's rows of its own tokens are not sent to itself; each of those
// tokens' reduce reads its row of y and encodes and decodes it in registers (reduce_combine_range
// with OwnRowOfY), the same bits without the buffer's write and read, the system fence and the flag
// (docs/perf-history.md, v18). Those rows, [send_offset[rank], + recv_from_self) of y (received
// rows are grouped by source), take no send ticket: the send items are the other rows (at world
// size 1 none; v22 took a ticket and read the source of each row to skip it). Several nodes: every
// row is sent (the node path sums elsewhere). kWholeRows (combine_whole_rows: one node, hidden a
// multiple of one warp step, of kCombineWholeSteps for fp8 blockwise): own-only rows take
// reduce_own_row_whole, in an instantiation of its own (for fp8 blockwise in the general one, both
// paths side by side spilled 28 bytes).
template <typename F, bool kOwnInPlace, bool kWholeRows = false>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    combine_kernel(CombineParams p) {
  static_assert(!kWholeRows || kOwnInPlace, "whole rows are for own rows in place");
  // Launched following the step kernel (combine.cu). The call's last kernel: it lets nothing
  // launch early, since its reduce waits on the peers until it ends.
  wait_previous_kernel();
  // The step agreement failed or this rank rejected: nothing moves, on every rank.
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  // Own rows (kOwnInPlace): [own_first, own_first + own_rows) of the received rows.
  const int64_t own_first = kOwnInPlace ? __ldcg(p.send_offset + p.info.rank) : 0;
  const int64_t own_rows = kOwnInPlace ? __ldcg(p.recv_from_self) : 0;
  const int64_t num_send = p.num_recv - own_rows;
  // Token items: whole rows when the tokens alone fill at least half the grid's warps, else
  // slices of kSlice elements (a multiple of every block size, so the bits do not change), as
  // the dispatch does: at 128 tokens one warp a token left most of the grid idle behind each
  // warp's chain of encode-decode steps (v21-v22: int8/e3m4 1.05-1.43x fp8 there, 1.04x at 4096).
  constexpr int64_t kSlice = Policy::kDispatchSliceElems;
  const int hidden = p.info.hidden;
  const int64_t token_slices = 2 * p.num_tokens >= c.num_warps ? 1 : (hidden + kSlice - 1) / kSlice;
  const int64_t total = num_send + p.num_tokens * token_slices;
  // Received rows are grouped by source rank; rank r starts near its own group (about r/W of
  // the way in) so that every rank's tokens see rows arriving from the start, not rank 0's first.
  const int64_t rotation = num_send * p.info.rank / p.info.world_size;
  const ReduceArgs reduce{p.peers.base[p.info.rank],
                          p.layout,
                          p.info.hidden,
                          p.info.rank,
                          p.out,
                          p.step,
                          p.timeout_ns,
                          p.err};
  const int64_t last_wave = last_wave_of_tickets(total, c.num_warps);
  while (true) {
    const int64_t item = take_ticket(&p.tickets[0], c.lane);
    if (item >= total) break;
    if (item < num_send) {
      const int64_t j = item + rotation < num_send ? item + rotation : item + rotation - num_send;
      const int64_t i = j < own_first ? j : j + own_rows;  // past this rank's own rows
      send_received_row<F>(p, i, c.lane);
    } else {
      const int64_t t = (item - num_send) / token_slices;
      const int slice = static_cast<int>((item - num_send) - t * token_slices);
      // The slice's elements when token_slices > 1 (32-bit: hidden <= 65536).
      const int begin = slice * static_cast<int>(kSlice);
      const int end = min(hidden, begin + static_cast<int>(kSlice));
      // In place: the routes' rows are absolute (send_offset), so this rank's is its y row.
      const TokenRoutes routes = token_routes(p.pos, kOwnInPlace ? p.send_offset : nullptr,
                                              p.info.max_tokens, p.info.world_size, t, c.lane);
      const auto flag_offset = [&](int r) { return p.layout.combine_flag_offset(r, t); };
      bool done = false;
      if constexpr (kOwnInPlace) {
        const int64_t own_row = routes.row(p.info.rank);  // every lane: it shuffles
        const OwnRowOfY own{p.y + (own_row >= 0 ? own_row : 0) * hidden, hidden};
        if (routes.mask == uint64_t{1} << p.info.rank) {  // no other rank's row to wait for
          if (token_slices == 1) {  // the bounds as constants: a runtime range spilled (int8)
            // The row's steps after the first unrolled one hit L2 (prefetch_l2), where the grid's
            // rows in flight fit L2 (combine_prefetch_bytes, policy.h: 0 where not).
            if (c.lane == 0) {
              prefetch_l2(own.row + kElemsPerWarpStep * kCombineUnroll, p.prefetch_bytes);
            }
            if constexpr (kWholeRows) {
              reduce_own_row_whole<F, kCombineWholeSteps<F>>(own.row, p.out + t * hidden, hidden,
                                                             c.lane);
            } else {
              reduce_own_row_only<F>(own, p.out + t * hidden, 0, hidden, c.lane);
            }
          } else {
            reduce_own_row_only<F>(own, p.out + t * hidden, begin, end, c.lane);
          }
          done = true;
        } else {
          // Rows of other ranks: the whole row in the token's first slice item (a generic range
          // here made the kernel spill 16-76 bytes); its other slice items have nothing to do.
          done = slice != 0 || reduce_combine_range<F>(reduce, t, routes.mask, 0, hidden,
                                                       flag_offset, c.lane, own);
        }
      } else {
        done = slice != 0 ||
               reduce_combine_range<F>(reduce, t, routes.mask, 0, hidden, flag_offset, c.lane);
      }
      if (!done) break;  // reported; the other warps see the flag and stop too
    }
    if (item >= last_wave) break;  // no ticket after the last wave's items
  }
  // The last warp out resets the tickets for the op's next combine.
  if (c.lane == 0 && atomicAdd(&p.tickets[1], 1u) == static_cast<unsigned int>(c.num_warps) - 1) {
    p.tickets[0] = 0;
    p.tickets[1] = 0;
  }
}

// Whether a combine takes combine_kernel's kWholeRows instantiation.
template <typename F>
inline bool combine_whole_rows(const CombineParams& p) {
  // fp8 blockwise votes once for a group of kCombineWholeSteps steps: whole groups only.
  constexpr int kMultiple = std::is_same_v<F, formats::Fp8BlockWire> ? kCombineWholeSteps<F> : 1;
  return p.send_offset != nullptr && !p.nodes.several() &&
         p.info.hidden % (kElemsPerWarpStep * kMultiple) == 0;
}

}  // namespace moe_ep::cuda_backend
