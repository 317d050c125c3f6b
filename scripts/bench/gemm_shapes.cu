// gemm_shapes.cu -- standalone FP32 GEMM benchmark for Sluice's tall-skinny shapes.
//
// Question: can cuBLAS FP32 GEMMs (CUBLAS_COMPUTE_32F, no TF32 / tensor-op math) on our
// shapes run faster than plain cublasSgemm if a different algorithm is picked?
//
// For each shape (row-major C (m x n) = op(A) (m x k) * op(B) (k x n), called exactly like
// Sluice: column-major C^T = op(B)^T op(A)^T with B passed first) it measures
//   a. cublasSgemm (baseline, default math mode),
//   b. every algorithm cublasLtMatmulAlgoGetHeuristic returns (up to 16, 64 MiB workspace),
//      with its split-K / reduction-scheme config, the number of floats that differ bitwise
//      from the baseline result, and whether two runs give bitwise identical results,
//   c. for the dW shapes (K = rows) only, a "sliced" variant: K split into 64, 132 and 264
//      slices, one cublasSgemmStridedBatched (+ a cublasSgemm for a shorter last slice) into
//      per-slice partials, then a kernel summing the partials in slice order.
//   d. for the GAT shapes (a head's blocks of wider matrices), 4 heads as 4 cublasSgemm calls
//      against one cublasSgemmStridedBatched call.
// Timing: cudaEvent per run, 2 warm-up runs, median of 7 runs. TFLOPS = 2*m*n*k / time.
//
// Build (on a machine with the CUDA toolkit):
//   nvcc -O3 -std=c++17 -arch=sm_90 scripts/bench/gemm_shapes.cu -o .device-bundle/gemm_shapes
//        -lcublas -lcublasLt   (one command line)
// Run (GPU machine):  .device-bundle/gemm_shapes [rows [name-filter]]  (default rows 2097152;
//                     the filter keeps the shapes whose name contains it)
// Memory: ~5 buffers of rows*400 floats (16 GiB at the default) plus 64 MiB + 69 MiB.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUDA_CHECK(x)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: CUDA error %d (%s) in %s\n", __FILE__, __LINE__, (int)e_, \
                   cudaGetErrorString(e_), #x);                                              \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)
#define CUBLAS_CHECK(x)                                                                         \
  do {                                                                                          \
    cublasStatus_t s_ = (x);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "%s:%d: cuBLAS status %d (%s) in %s\n", __FILE__, __LINE__, (int)s_, \
                   cublasGetStatusString(s_), #x);                                              \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

struct Shape {
  const char* name;
  int ta, tb;
  long long m, k, n;  // a value of -1 means "rows"
  // Stored row lengths of A, B and C when wider than the operand (a head's column block of a
  // wider matrix); 0: the operand's own width.
  long long lda = 0, ldb = 0, ldc = 0;
};

// ---------------------------------------------------------------- device helpers
__global__ void fill_kernel(float* p, long long count, uint32_t seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32 | seed);
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    p[i] = (float)((h >> 40) * (2.0 / 16777216.0) - 1.0);  // 24 bits -> [-1, 1)
  }
}

// Counts bitwise mismatches; also max |a-b| and max |b| (as float bits: valid for >= 0).
__global__ void compare_kernel(const float* a, const float* b, long long count,
                               unsigned long long* mism, unsigned* maxdiff, unsigned* maxref) {
  unsigned long long local = 0;
  float md = 0.f, mr = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    float x = a[i], y = b[i];
    if (__float_as_uint(x) != __float_as_uint(y)) ++local;
    md = fmaxf(md, fabsf(x - y));
    mr = fmaxf(mr, fabsf(y));
  }
  if (local) atomicAdd(mism, local);
  atomicMax(maxdiff, __float_as_uint(md));
  atomicMax(maxref, __float_as_uint(mr));
}

// C[r, c] (row stride ldc) = sum_{s=0..S-1} P[s*mn + r*n + c], summed in slice order.
__global__ void sum_partials_kernel(const float* P, int S, long long mn, int n, long long ldc,
                                    float* C) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn;
       i += (long long)gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < S; ++s) acc += P[s * mn + i];
    C[(i / n) * ldc + i % n] = acc;
  }
}

struct CompareResult {
  unsigned long long mismatches;
  float max_diff, max_ref;
};

static unsigned long long* g_mism;  // device scratch for compare_kernel
static unsigned* g_max;             // [0] = max diff, [1] = max ref

static CompareResult compare(const float* a, const float* ref, long long count) {
  CUDA_CHECK(cudaMemset(g_mism, 0, sizeof(unsigned long long)));
  CUDA_CHECK(cudaMemset(g_max, 0, 2 * sizeof(unsigned)));
  compare_kernel<<<1024, 256>>>(a, ref, count, g_mism, g_max, g_max + 1);
  CUDA_CHECK(cudaGetLastError());
  CompareResult r;
  unsigned mx[2];
  CUDA_CHECK(cudaMemcpy(&r.mismatches, g_mism, sizeof(r.mismatches), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(mx, g_max, sizeof(mx), cudaMemcpyDeviceToHost));
  std::memcpy(&r.max_diff, &mx[0], sizeof(float));
  std::memcpy(&r.max_ref, &mx[1], sizeof(float));
  return r;
}

// 2 warm-up runs, then the median of 7 individually event-timed runs (ms).
template <class F>
static float time_median(F&& run) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 2; ++i) run();
  std::vector<float> t(7);
  for (float& ms : t) {
    CUDA_CHECK(cudaEventRecord(e0));
    run();
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[3];
}

static double tflops(const Shape& s, float ms) {
  return 2.0 * (double)s.m * (double)s.n * (double)s.k / (ms * 1e-3) / 1e12;
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  const long long R = argc > 1 ? std::atoll(argv[1]) : 2097152LL;
  const char* filter = argc > 2 ? argv[2] : "";
  if (R < 1 || R * 400 > 0x7fffffffLL) {
    std::fprintf(stderr, "rows must be in [1, %lld]\n", 0x7fffffffLL / 400);
    return 1;
  }
  int dev = 0;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("GPU: %s (%d SMs, cc %d.%d)  rows=%lld\n", prop.name, prop.multiProcessorCount,
              prop.major, prop.minor, R);

  const Shape shapes[] = {
      {"XW 100->256", 0, 0, -1, 100, 256},
      {"XW 200->256", 0, 0, -1, 200, 256},
      {"XW 256->256", 0, 0, -1, 256, 256},
      {"HW 256->48", 0, 0, -1, 256, 48},
      {"HW 256->96", 0, 0, -1, 256, 96},
      {"dW 100x256 = X^T dZ", 1, 0, 100, -1, 256},
      {"dW 200x256", 1, 0, 200, -1, 256},
      {"dW 256x256", 1, 0, 256, -1, 256},
      {"dW 256x48", 1, 0, 256, -1, 48},
      {"dX = dZ W^T 48->256", 0, 1, -1, 48, 256},
      {"dX 256->256", 0, 1, -1, 256, 256},
      {"dX 96->256", 0, 1, -1, 96, 256},
      // GAT layer 0 attending over 100-wide inputs, 4 heads x 64: one head's products.
      {"GAT dW^h 100x64 = agg^hT dO^h", 1, 0, 100, -1, 64, 400, 256, 0},
      {"GAT O^h = agg^h W^h 100->64", 0, 0, -1, 100, 64, 400, 256, 256},
      {"GAT g^h = dO^h W^hT 64->100", 0, 1, -1, 64, 100, 256, 256, 400},
  };
  const int kSliceCounts[] = {64, 132, 264};
  const int kSlices = 264;  // the most slices: P holds their partials
  const size_t kWorkspace = 64ull << 20;
  const long long big = R * 400;  // largest A, B, C
  float *A, *B, *Cref, *C, *C2, *P;
  void* ws;
  CUDA_CHECK(cudaMalloc(&A, big * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&B, big * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&Cref, big * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&C, big * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&C2, big * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&P, (size_t)kSlices * 256 * 256 * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&ws, kWorkspace));
  CUDA_CHECK(cudaMalloc(&g_mism, sizeof(unsigned long long)));
  CUDA_CHECK(cudaMalloc(&g_max, 2 * sizeof(unsigned)));

  cublasHandle_t handle;
  cublasLtHandle_t lt;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasLtCreate(&lt));
  const float alpha = 1.f, beta = 0.f;

  int idx = 0;
  for (Shape s : shapes) {
    ++idx;
    if (!std::strstr(s.name, filter)) continue;
    if (s.m < 0) s.m = R;
    if (s.k < 0) s.k = R;
    // Stored row-major shapes; ld = number of stored columns.
    const long long rowsA = s.ta ? s.k : s.m, colsA = s.ta ? s.m : s.k;
    const long long rowsB = s.tb ? s.n : s.k, colsB = s.tb ? s.k : s.n;
    const int m = (int)s.m, n = (int)s.n, k = (int)s.k;
    const int lda = (int)(s.lda ? s.lda : colsA), ldb = (int)(s.ldb ? s.ldb : colsB);
    const int ldc = (int)(s.ldc ? s.ldc : n);
    const long long countC = s.m * ldc;
    const cublasOperation_t opA = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opB = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    std::printf("\n== [%d] %s  ta=%d tb=%d m=%lld k=%lld n=%lld  A %lldx%lld  B %lldx%lld\n", idx,
                s.name, s.ta, s.tb, s.m, s.k, s.n, rowsA, colsA, rowsB, colsB);

    fill_kernel<<<4096, 256>>>(A, rowsA * lda, 2u * idx + 1);
    CUDA_CHECK(cudaGetLastError());
    fill_kernel<<<4096, 256>>>(B, rowsB * ldb, 2u * idx + 2);
    CUDA_CHECK(cudaGetLastError());

    // ---- a. baseline cublasSgemm (Sluice's calling convention)
    auto sgemm = [&](float* out) {
      CUBLAS_CHECK(cublasSgemm(handle, opB, opA, n, m, k, &alpha, B, ldb, A, lda, &beta, out, ldc));
    };
    CUDA_CHECK(cudaMemset(Cref, 0, countC * sizeof(float)));  // the gaps between C's rows
    const float base_ms = time_median([&] { sgemm(Cref); });
    CUDA_CHECK(cudaMemset(C, 0, countC * sizeof(float)));
    sgemm(C);
    const CompareResult base_rep = compare(C, Cref, countC);
    std::printf("  %-58s %9.3f ms %7.2f TFLOPS  repeat-identical %s\n", "sgemm (baseline)", base_ms,
                tflops(s, base_ms), base_rep.mismatches ? "no" : "yes");

    // ---- b. cublasLtMatmul, every heuristic algorithm
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;  // la describes B (first operand), lb describes A
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
    // A row-major r x c matrix with ld = c is a column-major c x r matrix with the same ld.
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, colsB, rowsB, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, colsA, rowsA, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, ldc));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws_bytes = kWorkspace;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t heur[16];
    int nheur = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, heur, &nheur));

    int best = -1;
    float best_ms = 0.f;
    for (int i = 0; i < nheur; ++i) {
      if (heur[i].state != CUBLAS_STATUS_SUCCESS) continue;
      const cublasLtMatmulAlgo_t* algo = &heur[i].algo;
      int32_t id = 0, splitk = 0;
      uint32_t tile = 0, stages = 0, red = 0;
      size_t got = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id,
                                                        sizeof(id), &got));
      CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                        sizeof(tile), &got));
      CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                        &stages, sizeof(stages), &got));
      CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                        &splitk, sizeof(splitk), &got));
      CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                        &red, sizeof(red), &got));
      auto run = [&](float* out) {
        return cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, out, lc, out, lc, algo, ws,
                              heur[i].workspaceSize, 0);
      };
      char label[160];
      std::snprintf(label, sizeof(label),
                    "lt#%-2d id=%d tile=%u stages=%u splitK=%d red=%u ws=%zuK", i, id, tile, stages,
                    splitk, red, heur[i].workspaceSize >> 10);
      const cublasStatus_t first = run(C);  // an algo the heuristic offers may still refuse
      if (first != CUBLAS_STATUS_SUCCESS) {
        std::printf("  %-58s launch failed: %s (skipped)\n", label, cublasGetStatusString(first));
        continue;
      }
      const float ms = time_median([&] { CUBLAS_CHECK(run(C)); });
      CUDA_CHECK(cudaMemset(C, 0, countC * sizeof(float)));
      CUDA_CHECK(cudaMemset(C2, 0, countC * sizeof(float)));
      CUBLAS_CHECK(run(C));
      CUBLAS_CHECK(run(C2));
      const CompareResult vs_base = compare(C, Cref, countC);
      const CompareResult rep = compare(C2, C, countC);
      std::printf("  %-58s %9.3f ms %7.2f TFLOPS  mismatch-vs-base %llu  repeat-identical %s\n",
                  label, ms, tflops(s, ms), vs_base.mismatches, rep.mismatches ? "no" : "yes");
      if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    if (best >= 0)
      std::printf("  best lt: lt#%d %.3f ms (%.2fx vs sgemm)\n", best, best_ms, base_ms / best_ms);
    else
      std::printf("  best lt: none (%d heuristic results)\n", nheur);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(op));

    // ---- c. sliced K for the dW shapes: per-slice partials, then an ordered sum
    for (const int slices : kSliceCounts) {
      if (s.ta != 1 || s.tb != 0) break;
      const long long L = std::max(1LL, (R + slices - 1) / slices);  // rows per slice
      const long long full = R / L, rem = R - full * L;
      const int nparts = (int)(full + (rem > 0));
      const long long mn = s.m * s.n;
      auto sliced = [&] {
        if (full > 0)
          CUBLAS_CHECK(cublasSgemmStridedBatched(handle, opB, opA, n, m, (int)L, &alpha, B, ldb,
                                                 L * ldb, A, lda, L * lda, &beta, P, n, mn,
                                                 (int)full));
        if (rem > 0)
          CUBLAS_CHECK(cublasSgemm(handle, opB, opA, n, m, (int)rem, &alpha, B + full * L * ldb,
                                   ldb, A + full * L * lda, lda, &beta, P + full * mn, n));
        sum_partials_kernel<<<(int)std::min<long long>((mn + 255) / 256, 4096), 256>>>(
            P, nparts, mn, n, ldc, C);
        CUDA_CHECK(cudaGetLastError());
      };
      const float ms = time_median(sliced);
      CUDA_CHECK(cudaMemset(C, 0, countC * sizeof(float)));
      sliced();
      const CompareResult r = compare(C, Cref, countC);
      char label[96];
      std::snprintf(label, sizeof(label), "sliced S=%d (L=%lld rows, %lld batched + %d rem)",
                    nparts, L, full, rem > 0 ? 1 : 0);
      std::printf("  %-58s %9.3f ms %7.2f TFLOPS  mismatch-vs-base %llu  max|diff|/max|C| %.3g\n",
                  label, ms, tflops(s, ms), r.mismatches,
                  r.max_ref > 0 ? (double)r.max_diff / r.max_ref : (double)r.max_diff);
    }

    // ---- d. the GAT shapes (a head's column blocks of wider matrices): 4 heads side by side as
    // 4 cublasSgemm calls against one cublasSgemmStridedBatched (strides: the blocks' widths)
    if (s.lda > 0 && s.ldc > 0 && 4 * colsA <= lda && 4 * colsB <= ldb && 4 * n <= ldc) {
      auto heads_loop = [&](float* out) {
        for (int h = 0; h < 4; ++h)
          CUBLAS_CHECK(cublasSgemm(handle, opB, opA, n, m, k, &alpha, B + h * colsB, ldb,
                                   A + h * colsA, lda, &beta, out + h * n, ldc));
      };
      auto heads_batched = [&](float* out) {
        CUBLAS_CHECK(cublasSgemmStridedBatched(handle, opB, opA, n, m, k, &alpha, B, ldb, colsB, A,
                                               lda, colsA, &beta, out, ldc, n, 4));
      };
      const float loop_ms = time_median([&] { heads_loop(C); });
      const float batched_ms = time_median([&] { heads_batched(C2); });
      CUDA_CHECK(cudaMemset(C, 0, countC * sizeof(float)));
      CUDA_CHECK(cudaMemset(C2, 0, countC * sizeof(float)));
      heads_loop(C);
      heads_batched(C2);
      const CompareResult r = compare(C2, C, countC);
      std::printf(
          "  4 heads: %d sgemm calls %9.3f ms, one strided-batched call %9.3f ms (%.2fx), "
          "mismatches %llu\n",
          4, loop_ms, batched_ms, loop_ms / batched_ms, r.mismatches);
    }
  }

  CUBLAS_CHECK(cublasLtDestroy(lt));
  CUBLAS_CHECK(cublasDestroy(handle));
  for (void* p : {(void*)A, (void*)B, (void*)Cref, (void*)C, (void*)C2, (void*)P, ws, (void*)g_mism,
                  (void*)g_max})
    CUDA_CHECK(cudaFree(p));
  return 0;
}
