// Deterministic random numbers for test data.
//
// Our own generator (splitmix64) and normal transform, not <random>'s
// distributions (whose output differs between standard libraries), so a
// given seed gives the same tensors wherever the tests are built: the CPU and
// GPU tests see identical data for a case, and a failure reproduces from its
// printed seed.
#pragma once

#include <cstdint>
#include <string>

namespace fmha_test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  // Uniform in (0, 1]: never 0, so log() is safe.
  double uniform();
  // Standard normal (Box-Muller).
  double normal();
  // Uniform integer in [0, n), n >= 1.
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// The suite's base seed: $FMHA_TEST_SEED when set (decimal or 0x hex), else
// a fixed constant. Printed by every failure report.
uint64_t base_seed();

// The seed of one case: a hash of its name mixed with `base`. Different
// cases get different data; the same case always gets the same data.
uint64_t case_seed(const std::string& case_name, uint64_t base);

}  // namespace fmha_test
