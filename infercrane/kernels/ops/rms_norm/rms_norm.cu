// InferCrane RMSNorm (no residual), handwritten CUDA C++ (compiled at run time by NVRTC).
//
// vLLM's in-place contract rms_norm(out, input, weight, epsilon):
// out <- x * rsqrt(mean(x^2) + eps) * weight, computed in float32, rounded once on store; x is only read.
//
// Configuration (-D IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK), layout and reduction: see
// ../rowwise.cuh, which holds the device code the row-wise norms share. At head_dim 128 (the q/k norms) 16 threads
// of one 16-byte vector each share a row, two rows per warp. Each block handles one row-block and exits
// (grid = cdiv(rows, RPB)): no grid-stride loop.
// Latency: both global loads of a row (weight first, then x) are issued before either is used, so a block
// waits for one memory round trip; they are plain ld.global (see load_plain), which ptxas keeps where they are
// issued. The weight stays raw (16-bit) until the row's reduction is done.
// x and out may be the same buffer: every thread reads its elements before anything is written, and no thread
// reads an element another thread writes.
// Entry points (extern "C", no name mangling): rms_norm_bf16, rms_norm_fp16, with arguments
// (out, x, weight, rows, eps); pointers are to 16-bit elements.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace icrms {

#include "rowwise.cuh"

template <class T, int HIDDEN, int VEC, int TPR, int RPB>
__device__ __forceinline__ void rms_norm_body(unsigned short* out, const unsigned short* x,
                                              const unsigned short* weight, int rows, float eps) {
  typedef Row<HIDDEN, VEC, TPR, RPB> R;
  typedef typename R::Raw Raw;
  __shared__ float partial[RPB][R::WARPS_PER_ROW];
  const unsigned tid = threadIdx.x;
  const int lane = static_cast<int>(tid % TPR);   // position within the row
  const int group = static_cast<int>(tid / TPR);  // row within the row-block
  const int base = blockIdx.x * RPB;
  if (base >= rows) return;  // uniform over the block: nobody is left waiting at the barrier
  const int row = base + group;
  // With one row per block the bound check above already proves the row exists.
  const bool valid = RPB == 1 || row < rows;
  const Raw* xr = reinterpret_cast<const Raw*>(x) + static_cast<size_t>(row) * R::NVEC;
  Raw* outr = reinterpret_cast<Raw*>(out) + static_cast<size_t>(row) * R::NVEC;

  // Every global load first, all in flight together: the weight (first in source order, so no scheduling puts
  // it behind a use of x), then x. A thread past the row or past the last row loads nothing and holds zeros.
  Pack<VEC> xv[R::VPT], w[R::VPT];
  R::load_weight(w, weight, lane);
#pragma unroll
  for (int j = 0; j < R::VPT; ++j) {
    const int v = j * TPR + lane;
    xv[j].raw = Raw();
    if (valid && (!R::GUARD || v < R::NVEC)) xv[j].raw = load_plain<VEC>(xr + v);
  }

  // Sum of squares in float32.
  float xf[R::VPT][VEC];
  float part[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) part[k] = 0.f;
#pragma unroll
  for (int j = 0; j < R::VPT; ++j) {
    unpack<T, VEC>(xv[j], xf[j]);
#pragma unroll
    for (int k = 0; k < VEC; ++k) part[k] += xf[j][k] * xf[j][k];
  }
  const float inv_rms = R::inv_rms_of(R::tree_sum(part), partial, group, lane, eps);
  R::template normalize<T>(xf, inv_rms, w, xv);
#pragma unroll
  for (int j = 0; j < R::VPT; ++j) {
    const int v = j * TPR + lane;
    if (valid && (!R::GUARD || v < R::NVEC)) outr[v] = xv[j].raw;
  }
}

}  // namespace icrms

// The entry points: one per storage type, the same body.
#define IC_RMS_NORM_ENTRY(NAME, T)                                                                            \
  extern "C" __global__ void __launch_bounds__(IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK)                        \
  NAME(unsigned short* out, const unsigned short* x, const unsigned short* weight, int rows, float eps) {     \
    icrms::rms_norm_body<icrms::T, IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK>(out, x, weight,  \
                                                                                            rows, eps);       \
  }

IC_RMS_NORM_ENTRY(rms_norm_bf16, Bf16)
IC_RMS_NORM_ENTRY(rms_norm_fp16, Fp16)
