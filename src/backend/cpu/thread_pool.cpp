#include "backend/cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

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

ThreadPool::~ThreadPool() { impl_->stop(); }

int ThreadPool::size() const { return static_cast<int>(impl_->threads.size()) + 1; }

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
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
