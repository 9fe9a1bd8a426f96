// A fixed pool of worker threads owned by a CPU handle.
//
// parallel_for(n, fn) runs fn(item, worker) for item in [0, n) across the
// pool (the calling thread works too, as worker 0) and returns when all are
// done. `worker` is in [0, min(size(), n)) and unique among concurrently
// running calls, so it indexes per-thread scratch sized for
// min(size(), n) workers. fn must not throw.
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

  // num_threads >= 1, counting the calling thread.
  explicit ThreadPool(int num_threads, StartPolicy policy = kAllOrNothing);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;  // threads actually running, counting the caller
  void parallel_for(int64_t n, const std::function<void(int64_t item, int worker)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fmha
