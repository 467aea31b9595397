// What a CUDA op says about itself when a wait on a peer ends in a timeout (and, at debug level,
// when it is published): its buffer and peer table, the step tags in its own and its peers'
// buffers, and when its latest step kernel and validation scan were launched and began. Read on
// the communicator's internal stream, never the legacy default stream: other ranks of the
// one-GPU world may still be spinning.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_op.h"
#include "core/log.h"

namespace moe_ep::cuda_backend {

std::string CudaOp::describe_peers() const {
  const PeerTable peers = buffer_->peers();
  std::string bases;
  for (int r = 0; r < world_size_; ++r) {
    bases += detail::concat(r == 0 ? "" : " ", static_cast<const void*>(peers.base[r]));
  }
  return detail::concat("cuda op uid ", uid_, " rank ", rank_, "/", world_size_, ": buffer ",
                        static_cast<const void*>(buffer_->local()), ", peer bases [", bases, "]",
                        describe_step_words());
}

std::string CudaOp::describe_step_words() const {
  // Read back on the internal stream (never the legacy default stream: other ranks of the
  // one-GPU world may still be spinning). For normal mode's step words, and for decode mode's
  // when the op has them: the tags of both parities in this rank's own buffer, then this rank's
  // own tags as every peer's buffer holds them (a peer that stored its word that a waiter never
  // saw shows whether the word is there now).
  cudaStream_t stream = comm_->internal_stream();
  const auto read = [stream](void* to, const char* from, size_t bytes) {
    return cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream) == cudaSuccess &&
           cudaStreamSynchronize(stream) == cudaSuccess;
  };
  std::string text;
  // Both kinds keep a word {info, tag} of 16 bytes per (parity, source), parity-major.
  const auto describe = [&](const char* kind, int64_t (BufferLayout::*offset)(int, int) const) {
    std::vector<uint64_t> own(static_cast<size_t>(4 * world_size_), 0);
    text += detail::concat(", ", kind, " tags here [");
    if (!read(own.data(), buffer_->local() + (layout_.*offset)(0, 0),
              own.size() * sizeof(uint64_t))) {
      text += "unreadable]";
      return;
    }
    for (int parity = 0; parity < 2; ++parity) {
      for (int q = 0; q < world_size_; ++q) {
        text += detail::concat(parity + q == 0 ? "" : " ", "p", parity, "/", q, "=",
                               own[2 * (parity * world_size_ + q) + 1]);
      }
    }
    text += detail::concat("], this rank's ", kind, " tags in peers [");
    for (int q = 0; q < world_size_; ++q) {
      const char* base = peers_.base[q];
      uint64_t words[2][2] = {};
      bool ok = base != nullptr;
      for (int parity = 0; parity < 2 && ok; ++parity) {
        ok = read(words[parity], base + (layout_.*offset)(parity, rank_), sizeof(words[parity]));
      }
      text += detail::concat(q == 0 ? "" : " ", q, ":",
                             ok ? detail::concat(words[0][1], "/", words[1][1]) : std::string("-"));
    }
    text += "]";
  };
  describe("step", &BufferLayout::step_offset);
  if (ll_state_.get() != nullptr) describe("decode step", &BufferLayout::ll_step_offset);
  // When this rank's latest step kernel was launched (host clock) and began (global timer, the
  // same clock for every rank of a device), and when the latest validation scan before a step
  // began: a rank whose kernels began late was held up by the device, one launched late by its
  // host; a scan on time before a late step says the step itself was held, not the stream.
  uint64_t started[2] = {};
  const bool ok = cudaMemcpyAsync(started, step_started_.get(), sizeof(started),
                                  cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
                  cudaStreamSynchronize(stream) == cudaSuccess;
  const auto when = [ok](uint64_t ns) { return ok ? std::to_string(ns) : std::string("?"); };
  text += detail::concat(", latest step launched at ", step_launched_ns_, " ns (host), began at ",
                         when(started[0]), " ns (device); latest scan began at ", when(started[1]),
                         " ns (device)");
  cudaGetLastError();  // a failed read is reported in the text, not left for the next check
  return text;
}

}  // namespace moe_ep::cuda_backend
