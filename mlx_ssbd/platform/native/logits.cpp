// Logit row statistics (logits.h): the primitive, and the two passes over a row.
#include "logits.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "lanes.h"
#include "op_clock.h"
#include "pool.h"
#include "qmm.h"

namespace mlx_ssbd {

namespace {

struct StatsArgs {
  const float* logits;
  const int32_t* rows;
  float* largest;
  float* sums;
  uint32_t* best;
  int64_t N, V, K;
  bool with_sums;
};

// One row: its largest value and the first index holding it. Each lane keeps its own largest
// and the block it came from (strictly greater: a lane keeps its first); the row's first index is
// then the least block * kWidth + lane among the lanes holding the largest. Blocks are counted
// in fp32 lanes: exact below 2**24 blocks.
template <class L>
MLX_SSBD_LANES_INLINE void largest_of_row(const float* v, int64_t V, float& top, uint32_t& index) {
  L best = splat<L>(-INFINITY), block_of = splat<L>(0.0f);
  const int64_t whole = V / kWidth * kWidth;
  for (int64_t j = 0; j < whole; j += kWidth) {
    const L x = load_lanes<L>(v + j);
    block_of = where_greater(x, best, splat<L>((float)(j / kWidth)), block_of);
    best = where_greater(x, best, x, best);
  }
  float lanes[kWidth], blocks[kWidth];
  store_lanes(lanes, best);
  store_lanes(blocks, block_of);
  top = -INFINITY;
  for (int i = 0; i < kWidth; ++i) top = lanes[i] > top ? lanes[i] : top;
  int64_t first = 0;
  bool found = false;
  for (int i = 0; i < kWidth; ++i) {
    const int64_t at = (int64_t)blocks[i] * kWidth + i;
    if (lanes[i] == top && (!found || at < first)) first = at, found = true;
  }
  for (int64_t j = whole; j < V; ++j)  // past the whole lanes: only a strictly larger value
    if (v[j] > top || (!found && v[j] == top)) top = v[j], first = j, found = true;
  index = (uint32_t)first;
}

// One row's sum of exp(v - top) (0 where v is more than 87 below top), lanes in a fixed order.
template <class L>
MLX_SSBD_LANES_INLINE float exp_sum_of_row(const float* v, int64_t V, float top) {
  L total = splat<L>(0.0f);
  const int64_t whole = V / kWidth * kWidth;
  for (int64_t j = 0; j < whole; j += kWidth) total += exp_or_zero(load_lanes<L>(v + j) - top);
  if (whole < V) {  // the tail through lanes padded with -inf, which give 0
    float tail[kWidth];
    for (int i = 0; i < kWidth; ++i) tail[i] = whole + i < V ? v[whole + i] : -INFINITY;
    total += exp_or_zero(load_lanes<L>(tail) - top);
  }
  return sum_lanes(total);
}

// The k-th chosen row's statistics.
template <class L>
MLX_SSBD_LANES_INLINE void logit_stats_row_lanes(const StatsArgs& a, int64_t k) {
  const int64_t row = a.rows[k];
  if (row < 0 || row >= a.N) {
    a.largest[k] = a.sums[k] = NAN;
    a.best[k] = 0;
    return;
  }
  const float* v = a.logits + row * a.V;
  largest_of_row<L>(v, a.V, a.largest[k], a.best[k]);
  a.sums[k] = a.with_sums ? exp_sum_of_row<L>(v, a.V, a.largest[k]) : 0.0f;
}
MLX_SSBD_LANE_TARGETS(logit_stats_row, (const StatsArgs& a, int64_t k), (a, k))

}  // namespace

std::vector<mx::array> logit_stats(const mx::array& logits, const mx::array& rows, bool sums, mx::StreamOrDevice s) {
  if (logits.ndim() != 2 || logits.dtype() != mx::float32) {
    throw std::invalid_argument("[mlx_ssbd.logit_stats] logits must be fp32 of shape [N, V]");
  }
  if (logits.shape(1) == 0) {
    throw std::invalid_argument("[mlx_ssbd.logit_stats] logits must have at least one column");
  }
  if (rows.ndim() != 1 || !mx::issubdtype(rows.dtype(), mx::integer)) {
    throw std::invalid_argument("[mlx_ssbd.logit_stats] rows must be a 1-D integer array");
  }
  auto stream = cpu_stream(s, "logit_stats");
  return mx::array::make_arrays(
      {rows.shape(), rows.shape(), rows.shape()}, {mx::float32, mx::float32, mx::uint32},
      std::make_shared<LogitStatsCpu>(stream, sums),
      {logits, row_contiguous(mx::astype(rows, mx::int32, stream), stream)});
}

void LogitStatsCpu::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array logits = row_major(inputs[0], encoder);
  for (auto& out : outputs) out.set_data(mx::allocator::malloc(out.nbytes()));
  encoder.set_input_array(logits);
  encoder.set_input_array(inputs[1]);
  for (auto& out : outputs) encoder.set_output_array(out);
  const StatsArgs a{logits.data<float>(),     inputs[1].data<int32_t>(), outputs[0].data<float>(),
                    outputs[1].data<float>(), outputs[2].data<uint32_t>(), logits.shape(0),
                    logits.shape(1),          inputs[1].shape(0),        sums_};
  // Rows split between threads (pool.h) where there is work enough: each row's result is its own,
  // whichever thread computes it.
  encoder.dispatch([a]() {
    OpTimer timer(OpKind::logit_stats);
    parallel_for(a.K, a.K > 1 && a.K * a.V > (1 << 18) ? 1 : a.K, [&](int64_t k) { logit_stats_row(a, k); });
  });
}

void LogitStatsCpu::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("[mlx_ssbd.logit_stats] has no GPU implementation: use MLX's max, argmax and exp");
}

}  // namespace mlx_ssbd
