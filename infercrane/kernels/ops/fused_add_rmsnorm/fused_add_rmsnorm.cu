// InferCrane fused residual-add + RMSNorm, handwritten CUDA C++ (compiled at run time by NVRTC).
//
// In place, vLLM's contract: residual <- x + residual (rounded once to the storage dtype);
// x <- residual * rsqrt(mean(residual^2) + eps) * weight, computed in float32, rounded once on store.
//
// Configuration (-D IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK), layout and reduction: see
// ../rowwise.cuh, which holds the device code the row-wise norms share. This op's own defines:
//   IC_PERSISTENT      0 (default): each block handles one row-block and exits (grid = cdiv(rows, RPB));
//                      1: blocks walk row-blocks in a grid-stride loop (a capped, persistent grid)
//   IC_WEIGHT_NC       1: read the weight with __ldg (ld.global.nc) instead of a plain load; kept to
//                      measure the difference (see load_plain)
//
// Shared memory for the reduction is double-buffered, so one barrier per row-block.
// Latency: every global load of a row-block (weight, x, residual) is issued before any of them is used, so a
// block waits for one memory round trip, not two. The weight is loaded with the row, not once before a
// loop: hoisted out of a loop, its unpacking (a use) was scheduled ahead of the x/residual loads and the
// two latencies added up (SASS of the first version: LDG weight ... unpack ... LDG x, LDG residual). The
// weight stays raw (16-bit) until the reduction is done. With IC_PERSISTENT=1 blocks walk row-blocks in a
// grid-stride loop and re-read the weight each iteration (L1 hits).
// Entry points (extern "C", no name mangling): fused_add_rmsnorm_bf16, fused_add_rmsnorm_fp16, with
// arguments (x, residual, weight, rows, eps); pointers are to 16-bit elements.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef IC_PERSISTENT
#define IC_PERSISTENT 0
#endif
#ifndef IC_WEIGHT_NC
#define IC_WEIGHT_NC 0
#endif

namespace ic {

#include "rowwise.cuh"

template <class T, int HIDDEN, int VEC, int TPR, int RPB>
struct RowBlock {
  typedef Row<HIDDEN, VEC, TPR, RPB> R;
  typedef typename R::Raw Raw;
  static constexpr int NVEC = R::NVEC;
  static constexpr int VPT = R::VPT;
  static constexpr bool GUARD = R::GUARD;
  static constexpr int WARPS_PER_ROW = R::WARPS_PER_ROW;

  // One row-block: row ``base + group`` for this thread. ``partial`` is this iteration's exchange buffer.
  static __device__ __forceinline__ void run(unsigned short* __restrict__ x, unsigned short* __restrict__ residual,
                                             const unsigned short* __restrict__ weight, int rows, float eps,
                                             int base, int lane, int group, float (*partial)[WARPS_PER_ROW]) {
    const int row = base + group;
    // With one row per block the caller's bound check already proves the row exists.
    const bool valid = RPB == 1 || row < rows;
    Raw* xr = reinterpret_cast<Raw*>(x) + static_cast<size_t>(row) * NVEC;
    Raw* rr = reinterpret_cast<Raw*>(residual) + static_cast<size_t>(row) * NVEC;

    // Issue every global load first, all in flight together: the weight (in source order first, so that
    // no scheduling puts it behind a use of x or residual), then x and residual.
    Pack<VEC> xv[VPT], rv[VPT], w[VPT];
    R::template load_weight<IC_WEIGHT_NC != 0>(w, weight, lane);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = j * TPR + lane;
      xv[j].raw = Raw();
      rv[j].raw = Raw();
      if (valid && (!GUARD || v < NVEC)) {
        xv[j].raw = xr[v];
        rv[j].raw = rr[v];
      }
    }

    // Sum in float32, round once to the storage dtype: that value is stored and normalized.
    float s[VPT][VEC];
    float part[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) part[k] = 0.f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float xf[VEC], rf[VEC];
      unpack<T, VEC>(xv[j], xf);
      unpack<T, VEC>(rv[j], rf);
#pragma unroll
      for (int k = 0; k < VEC; ++k) xf[k] += rf[k];
      pack<T, VEC>(xf, rv[j]);     // the new residual, rounded once
      unpack<T, VEC>(rv[j], s[j]);  // ... and exactly that value is normalized
#pragma unroll
      for (int k = 0; k < VEC; ++k) part[k] += s[j][k] * s[j][k];
    }
    float sum_sq = R::tree_sum(part);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = j * TPR + lane;
      if (valid && (!GUARD || v < NVEC)) rr[v] = rv[j].raw;
    }

    const float inv_rms = R::inv_rms_of(sum_sq, partial, group, lane, eps);
    R::template normalize<T>(s, inv_rms, w, xv);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = j * TPR + lane;
      if (valid && (!GUARD || v < NVEC)) xr[v] = xv[j].raw;
    }
  }
};

template <class T, int HIDDEN, int VEC, int TPR, int RPB, bool PERSISTENT>
__device__ __forceinline__ void fused_add_rmsnorm_body(unsigned short* __restrict__ x,
                                                       unsigned short* __restrict__ residual,
                                                       const unsigned short* __restrict__ weight,
                                                       int rows, float eps) {
  typedef RowBlock<T, HIDDEN, VEC, TPR, RPB> RB;
  // Double-buffered in the persistent loop, so one barrier per row-block suffices.
  __shared__ float partial[PERSISTENT ? 2 : 1][RPB][RB::WARPS_PER_ROW];
  const unsigned tid = threadIdx.x;
  const int lane = static_cast<int>(tid % TPR);   // position within the row
  const int group = static_cast<int>(tid / TPR);  // row within the row-block
  if constexpr (!PERSISTENT) {
    const int base = blockIdx.x * RPB;
    if (base >= rows) return;
    RB::run(x, residual, weight, rows, eps, base, lane, group, partial[0]);
  } else {
    int parity = 0;
    for (int base = blockIdx.x * RPB; base < rows; base += gridDim.x * RPB) {
      RB::run(x, residual, weight, rows, eps, base, lane, group, partial[parity]);
      parity ^= 1;
    }
  }
}

}  // namespace ic

// The entry points: one per storage type, the same body.
#define IC_FUSED_ADD_RMSNORM_ENTRY(NAME, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK)                        \
  NAME(unsigned short* __restrict__ x, unsigned short* __restrict__ residual,                                 \
       const unsigned short* __restrict__ weight, int rows, float eps) {                                      \
    ic::fused_add_rmsnorm_body<ic::T, IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK,               \
                               (IC_PERSISTENT != 0)>(x, residual, weight, rows, eps);                         \
  }

IC_FUSED_ADD_RMSNORM_ENTRY(fused_add_rmsnorm_bf16, Bf16)
IC_FUSED_ADD_RMSNORM_ENTRY(fused_add_rmsnorm_fp16, Fp16)
