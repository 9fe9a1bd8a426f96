#include "common/random.h"

#include <cmath>
#include <cstdlib>

namespace fmha_test {
namespace {

constexpr uint64_t kDefaultSeed = 0x5eedf1a5ba11ad5eull;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t Rng::next_u64() {
  state_ += 0x9e3779b97f4a7c15ull;  // splitmix64
  return mix64(state_);
}

double Rng::uniform() {
  // 53 random bits -> (0, 1].
  return (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;
}

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double kTwoPi = 6.283185307179586476925286766559;
  const double r = std::sqrt(-2.0 * std::log(uniform()));
  const double t = kTwoPi * uniform();
  spare_ = r * std::sin(t);
  has_spare_ = true;
  return r * std::cos(t);
}

uint64_t Rng::below(uint64_t n) { return n <= 1 ? 0 : next_u64() % n; }

uint64_t base_seed() {
  const char* env = std::getenv("FMHA_TEST_SEED");
  if (env != nullptr && *env != '\0') return std::strtoull(env, nullptr, 0);
  return kDefaultSeed;
}

uint64_t case_seed(const std::string& case_name, uint64_t base) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name
  for (unsigned char c : case_name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return mix64(h ^ mix64(base));
}

}  // namespace fmha_test
