// The kernel's worker threads: a loop's iterations shared out between the caller and a pool that
// stays awake between the products of a forward pass and sleeps once they stop coming.
//
//   parallel_for(n, grain, f)   f(i) for every i in [0, n), in pieces of `grain` iterations that
//                               the caller and the pool's threads take in turn from one counter
//
// Every iteration runs exactly once, on whichever thread takes its piece, so a loop whose
// iterations write apart gives the same bits however the pieces fall. The caller takes pieces too
// and waits only for pieces already taken: a worker the OS has not scheduled yet delays nothing
// (on a machine doing other work the caller does the loop itself). A worker that finds no loop
// spins for a short while (kSpin in pool.cpp: the gaps between the products of one forward pass
// are shorter), then sleeps until the next one. The pool has one thread fewer than OpenMP's
// thread count (OMP_NUM_THREADS; one thread: no pool) and starts at the first loop that has more
// than one piece. A loop called while another runs (from another thread, or from inside an
// iteration) runs on its caller alone. Builds without OpenMP run every loop on the caller.
#pragma once

#include <cstdint>
#include <type_traits>

namespace mlx_ssbd {

using RangeFn = void (*)(void* context, int64_t begin, int64_t end);

// fn(context, begin, end) over [0, n) in pieces of `grain` (see above).
void parallel_ranges(int64_t n, int64_t grain, RangeFn fn, void* context);

// The threads a loop runs on, the caller's included (1: no pool).
int pool_size();

// The grain that splits a loop of n iterations into about 16 pieces (a few a thread, so that the
// thread that ends last waits for one short piece), or with `split` false keeps it whole on the
// caller.
inline int64_t split_grain(int64_t n, bool split) { return split ? n / 16 : n; }

template <class F>
inline void parallel_for(int64_t n, int64_t grain, F&& f) {
  auto range = [](void* context, int64_t begin, int64_t end) {
    auto& body = *static_cast<std::remove_reference_t<F>*>(context);
    for (int64_t i = begin; i < end; ++i) body(i);
  };
  parallel_ranges(n, grain < 1 ? 1 : grain, range, &f);
}

}  // namespace mlx_ssbd
