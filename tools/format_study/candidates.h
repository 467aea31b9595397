// The candidate combine wire formats of moe-ep-format-study (format_study.cc): the shipped
// formats through their traits, and the others written out in a few lines each.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "formats/codecs.h"

namespace moe_ep::formats {

inline float fl(uint16_t b) { return bf16_to_float(b); }

// A candidate: its wire cost and one round trip of a row of n bf16 values (n a multiple of 128).
struct Candidate {
  std::string name;
  double bytes_per_elem;
  std::function<void(const uint16_t* x, int n, float* out)> round_trip;
};

// Every candidate, in the order of the study's tables.
std::vector<Candidate> candidates();

}  // namespace moe_ep::formats
