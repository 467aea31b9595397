// What the standalone CUDA tools (link_floor/, latency_floor/) share: their two failures, each
// one stderr line from main (a CUDA call or a check that failed: exit 1; a bad argument: exit 2),
// and their integer arguments, parsed before any GPU is touched.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe_ep_tool {

struct CudaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct BadArgument : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw CudaFailure(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                      cudaGetErrorString(e) + ")");
  }
}
#define CK(call) ::moe_ep_tool::check((call), #call)

// `flag`'s comma-separated integers, each in [lo, hi].
inline std::vector<int> parse_list(const std::string& flag, const std::string& text, int lo,
                                   int hi) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0') {
      throw BadArgument(flag + "=" + text + ": '" + item + "' is not an integer");
    }
    if (v < lo || v > hi) {
      throw BadArgument(flag + "=" + text + ": " + item + " is outside [" + std::to_string(lo) +
                        ", " + std::to_string(hi) + "]");
    }
    out.push_back(static_cast<int>(v));
    pos = comma + 1;
  }
  return out;
}

// One integer in [lo, hi].
inline int parse_one(const std::string& flag, const std::string& text, int lo, int hi) {
  const std::vector<int> v = parse_list(flag, text, lo, hi);
  if (v.size() != 1) throw BadArgument(flag + "=" + text + ": takes one value");
  return v[0];
}

// main's body: runs `run` and turns its failures into the tool's one stderr line and exit code.
template <typename Run>
int tool_main(const char* name, Run run) {
  try {
    return run();
  } catch (const BadArgument& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  } catch (const std::exception& e) {  // CudaFailure, or the host out of memory
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace moe_ep_tool
