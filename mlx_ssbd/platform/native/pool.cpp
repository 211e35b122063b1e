// The kernel's worker threads (pool.h states the contract).
#include "pool.h"

#include "op_clock.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mlx_ssbd {
namespace {

// How long a worker spins for the next loop, and the caller for the workers' last pieces, before
// sleeping: longer than the gaps between the ~200 products of one forward pass of the default
// model (attention and the small operations), so the workers stay awake through a pass and sleep
// within a few milliseconds after it. Against OpenMP's loops with the platform's short libgomp
// spin (a wake-up at every product), a decode step of the default model took 11% less time and a
// 16-token pass 10% less (medians of 3 alternating runs on a 2-core AMD EPYC:
// benchmarks/results/2026-11-29-linux-x86_64-2cpu-epyc-vnni-pool/pool-ab-1.5b), and beside two
// busy processes a decode step 2.2x its quiet time (busy-machine-1.5b in the same folder).
constexpr auto kSpin = std::chrono::microseconds(5000);

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

struct Job {
  RangeFn fn;
  void* context;
  int64_t n, grain;
  std::atomic<int64_t> next{0};
  std::atomic<int> joined{0};  // workers inside it (changed under the pool's mutex)
};

// Whether `ready()` became true within kSpin, spinning.
template <class Ready>
bool spin_until(Ready ready) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; !ready(); ++i) {
    relax();
    if (i % 256 == 0 && std::chrono::steady_clock::now() - start > kSpin) return ready();
  }
  return true;
}

// Pieces of `job` until none is left.
void take_pieces(Job& job) {
  LoopTimer timer;
  for (;;) {
    const int64_t begin = job.next.fetch_add(job.grain, std::memory_order_relaxed);
    if (begin >= job.n) return;
    job.fn(job.context, begin, begin + job.grain < job.n ? begin + job.grain : job.n);
  }
}

thread_local bool inside_loop = false;  // this thread runs a loop's piece now

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) std::thread([this] { work(); }).detach();
  }

  // False when another loop holds the pool: the caller then runs this one alone.
  bool run(Job& job) {
    std::unique_lock<std::mutex> one(running_, std::try_to_lock);
    if (!one.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      generation_.fetch_add(1, std::memory_order_release);
      if (sleeping_ > 0) wake_.notify_all();
    }
    take_pieces(job);
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = nullptr;  // no worker joins it from now on
    lock.unlock();
    // The pieces the workers took end soon: spin for them before sleeping.
    if (!spin_until([&] { return job.joined.load(std::memory_order_acquire) == 0; })) {
      lock.lock();
      done_.wait(lock, [&] { return job.joined.load(std::memory_order_relaxed) == 0; });
    }
    return true;
  }

 private:
  void work() {
    inside_loop = true;  // a loop called from a piece runs on its caller
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mutex_);
      if (generation_.load(std::memory_order_relaxed) == seen) {
        ++sleeping_;
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
        --sleeping_;
      }
      seen = generation_.load(std::memory_order_relaxed);
      Job* job = job_;
      if (job == nullptr) continue;  // its caller finished it before this thread came
      ++job->joined;
      lock.unlock();
      take_pieces(*job);
      lock.lock();
      if (job->joined.fetch_sub(1, std::memory_order_release) == 1) done_.notify_all();
    }
  }

  std::mutex running_;  // held by the loop that has the pool
  std::mutex mutex_;    // job_, sleeping_, Job::joined
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  Job* job_ = nullptr;
  int sleeping_ = 0;
};

int pool_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// The process's pool (null: one thread), made at the first loop that needs it. Never destroyed:
// its threads end with the process.
Pool* the_pool() {
  static Pool* const pool = pool_threads() > 1 ? new Pool(pool_threads() - 1) : nullptr;
  return pool;
}

}  // namespace

int pool_size() { return pool_threads(); }

void parallel_ranges(int64_t n, int64_t grain, RangeFn fn, void* context) {
  if (n <= 0) return;
  if (n <= grain || inside_loop) return fn(context, 0, n);
  Pool* pool = the_pool();
  Job job{fn, context, n, grain};
  inside_loop = true;
  if (pool == nullptr || !pool->run(job)) take_pieces(job);
  inside_loop = false;
}

}  // namespace mlx_ssbd
