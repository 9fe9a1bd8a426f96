// The workers of a CPU handle: a fixed pool of threads it owns, or the
// caller's own parallel-for (fmha_set_parallel_for).
//
// parallel_for(n, fn) runs fn(item, worker) for item in [0, n) and returns
// when all are done. `worker` is in [0, min(size(), n)) and unique among
// concurrently running calls, so it indexes per-thread scratch sized for
// min(size(), n) workers. fn must not throw.
//
// Own threads: the calling thread works too, as worker 0. The caller's
// parallel-for: one task per item, on whatever threads it uses; a task takes
// a free worker slot for the item and gives it back, waiting for one when
// more than size() tasks run at once. Which worker computes an item never
// changes its result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace fmha {

class ThreadPool {
 public:
  // What the constructor does when the system refuses to start a thread
  // (std::thread throws): stop and join the threads it started and throw
  // std::bad_alloc (the C API's FMHA_ERROR_OUT_OF_MEMORY), or keep those
  // and run with fewer. Either way nothing is left half-built.
  enum StartPolicy { kAllOrNothing, kAllowFewer };

  // The C API's fmha_parallel_for_fn.
  using ExternalFor = void (*)(void* user, int64_t count, void (*task)(void* ctx, int64_t index), void* ctx);

  // num_threads >= 1, counting the calling thread.
  explicit ThreadPool(int num_threads, StartPolicy policy = kAllOrNothing);
  // No threads of its own: items go to external(user, ...), with `slots`
  // (>= 1) workers' scratch.
  ThreadPool(int slots, ExternalFor external, void* user);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads actually running, counting the caller; or the worker slots.
  int size() const;
  // Throws CallerError (FMHA_ERROR_INVALID_ARGUMENT) when the caller's
  // parallel-for ran an index outside [0, n), or fewer than n tasks.
  void parallel_for(int64_t n, const std::function<void(int64_t item, int worker)>& fn);

 private:
  struct Impl;
  struct Slots;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Slots> slots_;  // the caller's parallel-for only
};

}  // namespace fmha
