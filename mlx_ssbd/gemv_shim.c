/* cblas_sgemm for MLX's CPU backend that sends matrix-vector products to cblas_sgemv.
 *
 * MLX calls cblas_sgemm for every fp32 matmul, also with one row (a decode step: x (1 x K) times a
 * weight). OpenBLAS's sgemm packs the whole weight for that and runs about 2.5x slower than its
 * sgemv on the same product (benchmarks/matmul_rows.py). One sgemv per row of a 2- or 3-row
 * product was tried too and was no faster than sgemm, so only one-row (and one-column) products
 * go to sgemv. mlx_ssbd/gemv.py compiles this file, loads it with RTLD_GLOBAL before the BLAS (so
 * MLX's cblas_sgemm resolves here) and hands it the BLAS's own sgemm and sgemv; every other call
 * goes to the BLAS's sgemm unchanged. */

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);

static sgemm_fn real_sgemm;
static sgemv_fn real_sgemv;
static long long gemv_calls; /* products sent to sgemv, for the tests */

void mlx_ssbd_gemv_init(void *sgemm, void *sgemv) {
    real_sgemm = (sgemm_fn)sgemm;
    real_sgemv = (sgemv_fn)sgemv;
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
    }
    real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
