// Products of 2, 3, 5 and 6-bit codes in quads (included by qmm_kernel.h inside its per-target
// namespace, after the activations and the tile shapes).
//
// Quads: k runs in steps of 128 (four blocks, a "quad"); a quad's codes and x are two sets of 64
// bytes, A and B, laid out so that bytes 16t..16t+15 of each belong to block t. For each (m, n),
// 16 int32 lanes hold a quad's sums (lane i: bytes 4i..4i+3 of A and of B, so lanes 4t..4t+3 sum
// block t's 32 products), converted to fp32 and accumulated with fma(lanes, scale * dx, acc) quad
// after quad (scale and dx those of the lane's block); the bias term in 16 lanes too, lane i
// accumulating fma(bias, sum of the rounded x, acc) over groups i, i + 16, ... (zero-padded to a
// multiple of 16). At the end each set of lanes is summed (lane i and i + 8 added, then halves
// pairwise) and the bias term's sum added to the products'. Every build does exactly these
// operations (no contraction, -ffp-contract=off), so every path agrees bit for bit.
//
// Quad layout: A holds the first 16 k of each block and B the last 16, for the codes and for x
// when it is quantized. A last quad with fewer than four blocks is padded with zero codes and
// zero x.
#pragma once

// NC weight rows from `w` (packed, `row_bytes` each) as quads of A and B bytes, `xa.quads` a row
// (the last quad zero-padded as in the products).
template <int B>
static void unpack_rows(const uint8_t* w, size_t row_bytes, int NC, int K, int quads, uint8_t* out) {
  const int full = K / kQuad, blocks = K / kBlock;
  for (int j = 0; j < NC; ++j)
    for (int u = 0; u < quads; ++u) {
      const uint8_t* p = w + (size_t)j * row_bytes + (size_t)u * 16 * B;
      Bytes codes_a, codes_b;
      if (u < full)
        quad_codes<B>(p, codes_a, codes_b);
      else
        last_quad_codes<B>(p, blocks - 4 * u, codes_a, codes_b);
      uint8_t* q = out + ((size_t)j * quads + u) * kQuad;
      store_bytes(q, codes_a);
      store_bytes(q + 64, codes_b);
    }
}

// MR rows of x (from row m0) by NC weight rows (from n0), over all of k. `scales` and `biases`:
// the NC rows' scales and biases as fp32, row after row, each `xa.padded` long (zero-padded).
// Unpacked: the NC rows are read from `unpacked`, as unpack_rows gives them, not from the weights.
template <int B, int MR, int NC, bool Unpacked>
static void tile(const QmmArgs& a, const Activations& xa, const float* scales, const float* biases, int m0, int n0,
                 const uint8_t* unpacked) {
  const int K = a.K, padded = xa.padded, full = K / kQuad, blocks = K / kBlock;
  const size_t row_bytes = (size_t)K * B / 8, unpacked_bytes = (size_t)xa.quads * kQuad;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + (size_t)n0 * row_bytes;
  // Lane i of a quad takes the scale of its block 4u + i / 4: group (4u + i / 4) / blocks per group,
  // spread from the 4 groups from (4u) / blocks per group.
  const int group_shift = a.group == 32 ? 0 : a.group == 64 ? 1 : 2;  // log2 of blocks per group
  int32_t spread[kLanes];
  for (int i = 0; i < kLanes; ++i) spread[i] = (i / 4) >> group_shift;
  const LaneIndex index = lane_index(spread);
  Floats acc[MR][NC];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) acc[r][j] = zeros();

  auto quad = [&](int u, auto last) {
    Bytes codes_a[NC], codes_b[NC];
    Floats scale[NC];
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) {
      if constexpr (Unpacked) {
        const uint8_t* p = unpacked + (size_t)j * unpacked_bytes + (size_t)u * kQuad;
        codes_a[j] = load_bytes(p);
        codes_b[j] = load_bytes(p + 64);
      } else {
        const uint8_t* p = w + (size_t)j * row_bytes + (size_t)u * 16 * B;
#pragma GCC unroll 4
        for (int line = 0; line < 16 * B; line += 64) __builtin_prefetch(p + kPrefetch + line, 0, 1);
        if constexpr (decltype(last)::value)
          last_quad_codes<B>(p, blocks - 4 * u, codes_a[j], codes_b[j]);
        else
          quad_codes<B>(p, codes_a[j], codes_b[j]);
      }
      scale[j] = spread4(scales + (size_t)j * padded + ((4 * u) >> group_shift), index);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const size_t row = (size_t)(m0 + r) * xa.quads + u;
      const Bytes xq_a = load_bytes(xa.q.data() + row * kQuad);
      const Bytes xq_b = load_bytes(xa.q.data() + row * kQuad + 64);
      const Floats dx = load_floats(xa.dx.data() + row * kLanes);
#pragma GCC unroll 8
      for (int j = 0; j < NC; ++j) {  // the lanes' sums are exact in fp32: |sum| < 2**24
        const Ints lanes = dot2<B>(codes_a[j], xq_a, codes_b[j], xq_b);
        acc[r][j] = fmadd(to_floats(lanes), mul(scale[j], dx), acc[r][j]);
      }
    }
  };
  for (int u = 0; u < full; ++u) quad(u, std::false_type{});
  if (full < xa.quads) quad(full, std::true_type{});

  // The bias term, 16 groups at a time.
  Floats bias_acc[MR][NC];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) bias_acc[r][j] = zeros();
  for (int g = 0; g < padded; g += kLanes) {
    for (int r = 0; r < MR; ++r) {
      const Floats x_sums = load_floats(xa.sums.data() + (size_t)(m0 + r) * padded + g);
      for (int j = 0; j < NC; ++j)
        bias_acc[r][j] = fmadd(load_floats(biases + (size_t)j * padded + g), x_sums, bias_acc[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) {
      float product = hsum(acc[r][j]) + hsum(bias_acc[r][j]);
      if (a.bias) product += a.bias[n0 + j];
      a.out[(size_t)(m0 + r) * a.N + n0 + j] = product;
    }
}

// Every row of x against weight rows [n0, n0 + NC), in tiles of kRows rows by (up to) kCols.
template <int B, ScaleType T, int NC>
static void column_block(const QmmArgs& a, const Activations& xa, int n0) {
  const size_t groups = xa.groups, padded = xa.padded, bytes = T == ScaleType::f32 ? 4 : 2;
  thread_local Lines<float> converted;  // the NC rows' scales, then their biases, as fp32
  converted.resize(2 * NC * padded);
  // A decode step's blocks (and only theirs: with more rows of x the conversion is a small part,
  // and these lines in L1 made a 16-row pass slower): the scales and biases of the row whose codes
  // are prefetched now (kPrefetch bytes ahead), two streams of their own beside the codes that the
  // hardware prefetcher left to miss.
  if constexpr (NC == kDecodeCols) {
    const size_t ahead = std::max<size_t>(NC, (size_t)kPrefetch / ((size_t)a.K * B / 8));
    if (a.M == 1 && (size_t)n0 + ahead + NC <= (size_t)a.N) {
      for (const void* stored : {a.scales, a.biases}) {
        const char* first = static_cast<const char*>(stored) + ((size_t)n0 + ahead) * groups * bytes;
        for (size_t line = 0; line < NC * groups * bytes; line += 64) __builtin_prefetch(first + line, 0, 3);
        __builtin_prefetch(first + NC * groups * bytes - 1, 0, 3);
      }
    }
  }
  for (int i = 0; i < 2 * NC; ++i) {  // rows of scales, then rows of biases
    const int j = i % NC;
    const char* stored = static_cast<const char*>(i < NC ? a.scales : a.biases);
    float* row = converted.data() + i * padded;
    scales_to_float<T>(stored + ((size_t)n0 + j) * groups * bytes, groups, row);
    std::fill(row + groups, row + padded, 0.0f);
  }
  const float* scales = converted.data();
  const float* biases = scales + NC * padded;
  // Unpacked once where more than one tile of x will read them (on the AVX2 build unpacking was
  // 60% of a 64-row product of 5-bit codes).
  const uint8_t* unpacked = nullptr;
  const size_t unpacked_bytes = (size_t)xa.quads * kQuad;
  constexpr int R = kRows;
  if (a.M > R) {
    thread_local Lines<uint8_t> codes;  // here, so that a decode step never touches it
    codes.resize(NC * unpacked_bytes);
    const size_t row_bytes = (size_t)a.K * B / 8;
    unpack_rows<B>(reinterpret_cast<const uint8_t*>(a.w) + (size_t)n0 * row_bytes, row_bytes, NC, a.K, xa.quads,
                   codes.data());
    unpacked = codes.data();
  }
  // Tiles of TC weight rows, all NC of them against the same rows of x while those are in cache.
  constexpr int TC = NC < kCols ? NC : kCols;
  static_assert(NC % TC == 0, "a block of weight rows is whole tiles");
  auto rows = [&](auto mr, int m) {
    for (int j = 0; j < NC; j += TC) {
      const float *s = scales + (size_t)j * padded, *b = biases + (size_t)j * padded;
      if (unpacked) {
        tile<B, decltype(mr)::value, TC, true>(a, xa, s, b, m, n0 + j, unpacked + (size_t)j * unpacked_bytes);
        continue;
      }
      tile<B, decltype(mr)::value, TC, false>(a, xa, s, b, m, n0 + j, nullptr);
    }
  };
  int m = 0;
  for (; m + R <= a.M; m += R) rows(std::integral_constant<int, R>{}, m);
  if constexpr (kRows > 3) {
    if (a.M - m == 3) return rows(std::integral_constant<int, 3>{}, m);
  }
  if constexpr (kRows > 2) {
    if (a.M - m == 2) return rows(std::integral_constant<int, 2>{}, m);
  }
  if (a.M - m == 1) rows(std::integral_constant<int, 1>{}, m);
}

template <int B, ScaleType T, int NC>
static void columns(const QmmArgs& a, const Activations& xa, int n0) {
  const int nc = a.N - n0 < NC ? a.N - n0 : NC;
  if (nc == NC) return column_block<B, T, NC>(a, xa, n0);
  for (int j = 0; j < nc; ++j) column_block<B, T, 1>(a, xa, n0 + j);
}

// Weight rows [n0, n0 + cols) against every row of x, NC at a time.
template <int B, ScaleType T, int NC>
static void all_columns(const QmmArgs& a, const Activations& xa, bool parallel) {
  const int blocks = (a.N + NC - 1) / NC;
  parallel_for(blocks, split_grain(blocks, parallel), [&](int64_t i) { columns<B, T, NC>(a, xa, (int)i * NC); });
}
