#include "backend/cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"

namespace fmha {

// Workers sleep on a generation counter; parallel_for publishes a job,
// bumps the generation, works as worker 0, and waits until every worker
// has left the job. Items are handed out one at a time from an atomic
// counter, which balances causal rows of very different lengths.
struct ThreadPool::Impl {
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  uint64_t generation = 0;
  bool stopping = false;
  int busy = 0;  // workers still inside the current job

  const std::function<void(int64_t, int)>* job = nullptr;
  int64_t job_size = 0;
  std::atomic<int64_t> next{0};

  void run_items(int worker) {
    if (worker >= job_size) return;  // at most job_size workers take part
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < job_size;
         i = next.fetch_add(1, std::memory_order_relaxed))
      (*job)(i, worker);
  }

  void worker_loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
      }
      run_items(worker);
      std::lock_guard<std::mutex> lock(mutex);
      if (--busy == 0) done.notify_one();
    }
  }

  // Stops and joins every started worker.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
};

// The caller's parallel-for: worker slots as a bitmap, one bit per slot
// (set = taken). A task claims the lowest free bit below its job's limit
// with a compare-and-swap and clears it when its item is done; nothing is
// allocated per forward.
struct ThreadPool::Slots {
  static constexpr int kBits = 64;
  ExternalFor external = nullptr;
  void* user = nullptr;
  int count = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> words;

  int acquire(int limit) {
    for (;;) {
      for (int w = 0; w * kBits < limit; ++w) {
        const int bits_here = limit - w * kBits < kBits ? limit - w * kBits : kBits;
        const uint64_t mask = bits_here == kBits ? ~uint64_t{0} : (uint64_t{1} << bits_here) - 1;
        uint64_t taken = words[w].load(std::memory_order_relaxed);
        while ((~taken & mask) != 0) {
          const uint64_t bit = ~taken & mask & (~(~taken & mask) + 1);  // lowest free bit
          if (words[w].compare_exchange_weak(taken, taken | bit, std::memory_order_acquire,
                                             std::memory_order_relaxed)) {
            int index = 0;
            while ((uint64_t{1} << index) != bit) ++index;
            return w * kBits + index;
          }
        }
      }
      // More tasks run at once than there are slots: the ones holding a
      // slot compute without waiting on anything, so one frees soon.
      std::this_thread::yield();
    }
  }

  void release(int slot) {
    words[slot / kBits].fetch_and(~(uint64_t{1} << (slot % kBits)), std::memory_order_release);
  }

  // One forward's items, as the caller's tasks see them.
  struct Job {
    Slots* slots;
    const std::function<void(int64_t, int)>* fn;
    int64_t n;
    int limit;  // slots in use: min(count, n)
    std::atomic<int64_t> done{0};
    std::atomic<int64_t> bad_index{-1};
  };

  static void task(void* ctx, int64_t index) noexcept {
    Job& job = *static_cast<Job*>(ctx);
    if (index < 0 || index >= job.n) {
      int64_t none = -1;
      job.bad_index.compare_exchange_strong(none, index, std::memory_order_relaxed);
      return;
    }
    const int slot = job.slots->acquire(job.limit);
    (*job.fn)(index, slot);
    job.slots->release(slot);
    job.done.fetch_add(1, std::memory_order_acq_rel);
  }

  void run(int64_t n, const std::function<void(int64_t, int)>& fn) {
    Job job;
    job.slots = this;
    job.fn = &fn;
    job.n = n;
    job.limit = static_cast<int>(n < count ? n : count);
    external(user, n, &Slots::task, &job);
    CallerError e{FMHA_ERROR_INVALID_ARGUMENT, {}};
    const long long bad = job.bad_index.load(std::memory_order_relaxed);
    const long long done = job.done.load(std::memory_order_acquire);
    if (bad != -1) {
      std::snprintf(e.what, sizeof e.what, "the parallel_for function (fmha_set_parallel_for) ran index %lld, "
                    "outside [0, count=%lld)", bad, static_cast<long long>(n));
      throw e;
    }
    if (done != n) {
      std::snprintf(e.what, sizeof e.what, "the parallel_for function (fmha_set_parallel_for) returned after "
                    "%lld of count=%lld tasks", done, static_cast<long long>(n));
      throw e;
    }
  }
};

ThreadPool::ThreadPool(int num_threads, StartPolicy policy) : impl_(new Impl) {
  // A worker that cannot start (std::system_error, e.g. EAGAIN under an
  // address-space or process limit, or std::bad_alloc) must not leave the
  // started ones running: unwinding past them would destroy a joinable
  // std::thread and the mutex and condition variables they wait on.
  try {
    impl_->threads.reserve(static_cast<size_t>(num_threads > 1 ? num_threads - 1 : 0));
    for (int w = 1; w < num_threads; ++w) {
      Impl* impl = impl_.get();
      impl->threads.emplace_back([impl, w] { impl->worker_loop(w); });
    }
  } catch (const std::exception&) {
    if (policy == kAllowFewer) return;  // run with the threads that started
    impl_->stop();
    throw std::bad_alloc();
  }
}

ThreadPool::ThreadPool(int slots, ExternalFor external, void* user) : impl_(new Impl), slots_(new Slots) {
  slots_->external = external;
  slots_->user = user;
  slots_->count = slots > 1 ? slots : 1;
  const int words = (slots_->count + Slots::kBits - 1) / Slots::kBits;
  slots_->words.reset(new std::atomic<uint64_t>[static_cast<size_t>(words)]);
  for (int w = 0; w < words; ++w) slots_->words[w].store(0, std::memory_order_relaxed);
}

ThreadPool::~ThreadPool() { impl_->stop(); }

int ThreadPool::size() const {
  return slots_ ? slots_->count : static_cast<int>(impl_->threads.size()) + 1;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  if (slots_) {
    slots_->run(n, fn);
    return;
  }
  if (impl_->threads.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->job = &fn;
    impl_->job_size = n;
    impl_->next.store(0, std::memory_order_relaxed);
    impl_->busy = static_cast<int>(impl_->threads.size());
    ++impl_->generation;
  }
  impl_->wake.notify_all();
  impl_->run_items(0);
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->done.wait(lock, [&] { return impl_->busy == 0; });
  impl_->job = nullptr;
}

}  // namespace fmha
