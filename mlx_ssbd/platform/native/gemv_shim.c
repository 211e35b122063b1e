/* cblas_sgemm for MLX's CPU backend that sends products of few rows to faster kernels.
 *
 * MLX calls cblas_sgemm for every fp32 matmul, also with one row (a decode step: x (1 x K) times a
 * weight) or a few (a batched decode step: one row per stream). OpenBLAS's sgemm packs the whole
 * weight for those and runs about 2.5x slower than its sgemv on one row, and no faster on 2-8 rows
 * than on 1 (benchmarks/engine/matmul_rows.py): the product is bound by reading the weight, and
 * sgemm reads it slowly. So one-row (and one-column) products go to sgemv; products of
 * 2..few_rows_max rows (8 by default) by a transposed weight (x @ W.T, a linear layer) go to
 * few_rows below, which reads each weight row once for all the input rows (one sgemv per row was
 * tried before and was no faster than sgemm: it reads the weight once per row). Every other call
 * goes to the BLAS's sgemm unchanged.
 *
 * Built by `pip install` beside the CPU kernel (CMakeLists.txt: -O3, OpenMP where the compiler
 * has it); on x86-64 the few-rows loop is compiled for AVX-512, AVX2/FMA and the baseline and the
 * CPU picks one when the library loads (where GCC 11 or later builds it; 4-8 rows ran 25-40%
 * slower at the baseline here).
 * mlx_ssbd/platform/gemv.py loads it with RTLD_GLOBAL before the BLAS (so MLX's cblas_sgemm
 * resolves here) and hands it the BLAS's own sgemm and sgemv. */

#include <stddef.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);

static sgemm_fn real_sgemm;
static sgemv_fn real_sgemv;
static long long gemv_calls; /* products sent to sgemv or few_rows, for the tests */

static int few_rows_max = 8; /* products of 2..few_rows_max rows go to few_rows (set by init) */

#if MLX_SSBD_TARGET_CLONES /* CMakeLists.txt: GCC that knows x86-64-v3 and v4 (GCC 11 on) */
#define TUNED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TUNED
#endif

/* Columns [j, j + rows) of c (weight rows j.., rows <= 4) for every one of the m input rows: four
 * independent sums per input row, each weight row read once for all of them. */
TUNED static void four_rows(int j, int rows, int m, int k, float alpha, const float *a, int lda, const float *b,
                            int ldb, float beta, float *c, int ldc) {
    const float *w0 = b + (size_t)j * ldb;
    const float *w1 = rows > 1 ? w0 + ldb : w0, *w2 = rows > 2 ? w0 + 2 * (size_t)ldb : w0;
    const float *w3 = rows > 3 ? w0 + 3 * (size_t)ldb : w0;
    for (int i = 0; i < m; i++) {
        const float *x = a + (size_t)i * lda;
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int t = 0; t < k; t++) {
            s0 += x[t] * w0[t];
            s1 += x[t] * w1[t];
            s2 += x[t] * w2[t];
            s3 += x[t] * w3[t];
        }
        float sums[4] = {s0, s1, s2, s3};
        float *out = c + (size_t)i * ldc + j;
        for (int r = 0; r < rows; r++)
            out[r] = alpha * sums[r] + (beta == 0.f ? 0.f : beta * out[r]);
    }
}

/* c (m x n) = alpha a (m x k) b^T + beta c, b being n x k (row-major, leading dimensions given):
 * four weight rows at a time, split across threads. */
static void few_rows(int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                     float beta, float *c, int ldc) {
    int blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++)
        four_rows(4 * blk, n - 4 * blk < 4 ? n - 4 * blk : 4, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Whether few_rows runs on all cores (built with OpenMP); gemv.py leaves it off otherwise. */
int mlx_ssbd_gemv_threaded(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

void mlx_ssbd_gemv_init(void *sgemm, void *sgemv, int few_max) {
    real_sgemm = (sgemm_fn)sgemm;
    real_sgemv = (sgemv_fn)sgemv;
    few_rows_max = few_max;
}

long long mlx_ssbd_gemv_calls(void) { return gemv_calls; }

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (order == ROW_MAJOR && real_sgemv && k > 0) {
        if (m == 1) { /* c (1 x n) = a (1 x k) op(b) (k x n) */
            int inc_a = trans_a == NO_TRANS ? 1 : lda;
            if (trans_b == NO_TRANS) /* b is k x n: c = b^T a */
                real_sgemv(ROW_MAJOR, TRANS, k, n, alpha, b, ldb, a, inc_a, beta, c, 1);
            else /* b is n x k: c = b a */
                real_sgemv(ROW_MAJOR, NO_TRANS, n, k, alpha, b, ldb, a, inc_a, beta, c, 1);
            gemv_calls++;
            return;
        }
        if (n == 1) { /* c (m x 1) = op(a) (m x k) b (k x 1): one column of c, stride ldc */
            int inc_b = trans_b == NO_TRANS ? ldb : 1;
            if (trans_a == NO_TRANS) /* a is m x k */
                real_sgemv(ROW_MAJOR, NO_TRANS, m, k, alpha, a, lda, b, inc_b, beta, c, ldc);
            else /* a is k x m */
                real_sgemv(ROW_MAJOR, TRANS, k, m, alpha, a, lda, b, inc_b, beta, c, ldc);
            gemv_calls++;
            return;
        }
        if (m <= few_rows_max && trans_a == NO_TRANS && trans_b == TRANS) {
            few_rows(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            gemv_calls++;
            return;
        }
    }
    real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
