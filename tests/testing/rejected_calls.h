// A scenario the one-GPU world's error tests share (test_gpu_nodes.cc, test_gpu_copy_engine.cc):
// rejected calls fail every rank together and leave the op usable.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "testing/gpu_world.h"
#include "testing/ranks.h"

namespace moe_ep::testing {

// W ranks of a one-GPU world, each with an op of config `c` (made by the caller's world `comms`).
// Round 1: rank 2's topk_idx names an expert out of range, which its data scan rejects after its
// host accepted: every rank's dispatch fails (the others name rank 2). Then a good dispatch, whose
// combine rank 2 calls with an `out` of the wrong shape: every rank's combine fails. Then the same
// dispatch combined properly, and a fresh round: both exact. The failed dispatch takes no call
// number, so the good ones are calls 1 and 2.
inline void expect_rejected_calls_leave_the_op_usable(
    const OpConfig& c, int world, const std::vector<std::shared_ptr<Communicator>>& comms) {
  std::vector<RankInput> bad = world_test_inputs(c, world, 3);
  ASSERT_GT(bad[2].num_tokens, 0);
  bad[2].topk_idx[1] = c.num_experts;  // token 0, slot 1 of rank 2
  std::vector<RoundResult> rounds =
      make_round_results(world, {world_test_inputs(c, world, 4), world_test_inputs(c, world, 5)});
  std::vector<RankOutcome> dispatch_error(world), combine_error(world);
  run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = kept_op(comm, c);
    TestStream stream;
    DeviceInput in_bad(bad[rank], 0);
    DispatchArgs args = in_bad.view;
    args.stream = stream.s;
    dispatch_error[rank] = outcome_of([&] { op->dispatch(args); });
    RoundResult& res = rounds[0];
    DeviceInput in(res.inputs[rank], 0);
    DispatchArgs good = in.view;
    good.stream = stream.s;
    const DispatchResult d = op->dispatch(good);
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    const int64_t tokens = res.inputs[rank].num_tokens;
    DeviceBuffer y = DeviceBuffer::copy_of(
        std::vector<uint16_t>(static_cast<size_t>(d.num_recv + 1) * c.hidden, 0));
    DeviceBuffer out =
        DeviceBuffer::copy_of(std::vector<uint16_t>(static_cast<size_t>(tokens + 1) * c.hidden, 0));
    // Combine of the good dispatch from y into out (out_rows rows), then synchronize.
    const auto combine = [&](const DeviceBuffer& y_rows, const DeviceBuffer& out_rows_buffer,
                             int64_t out_rows) {
      op->combine(d.handle,
                  TensorView::matrix(y_rows.ptr.get(), ScalarType::kBFloat16, d.num_recv, c.hidden,
                                     DeviceType::kCuda, 0),
                  TensorView::matrix(out_rows_buffer.ptr.get(), ScalarType::kBFloat16, out_rows,
                                     c.hidden, DeviceType::kCuda, 0),
                  stream.s);
      op->synchronize(stream.s);
    };
    combine_error[rank] = outcome_of([&] { combine(y, out, rank == 2 ? tokens + 1 : tokens); });
    // The op is usable: the same dispatch's combine, through the harness, then a fresh round.
    res.received[rank] = download_outputs(d);
    res.handles[rank] = d.handle;
    res.op_uids[rank] = op->uid();
    const std::vector<uint16_t> expert = identity_expert(res.received[rank], c, world);
    DeviceBuffer y_good = DeviceBuffer::copy_of(expert);
    DeviceBuffer out_good = DeviceBuffer::copy_of(
        std::vector<uint16_t>(static_cast<size_t>(tokens) * c.hidden, 0xffff));
    combine(y_good, out_good, tokens);
    res.out[rank].assign(static_cast<size_t>(tokens) * c.hidden, 0);
    if (tokens > 0) {
      device_to_host(res.out[rank].data(), out_good.ptr.get(), res.out[rank].size() * 2);
    }
    gpu_round(*op, rank, world, rounds[1], {stream.s, stream.s});
  });
  for (int r = 0; r < world; ++r) {
    expect_error(dispatch_error[r], ErrorCode::kInvalidArgument,
                 {r == 2 ? "topk_idx[0][1]=" + std::to_string(c.num_experts)
                         : std::string("rank 2 rejected")},
                 r);
    expect_error(combine_error[r], ErrorCode::kInvalidArgument,
                 {r == 2 ? std::string("out") : std::string("rank 2 rejected")}, r);
  }
  check_round(c, world, rounds[0], 1);
  check_round(c, world, rounds[1], 2);
}

}  // namespace moe_ep::testing
