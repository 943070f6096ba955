// InferCrane fused residual-add + RMSNorm, handwritten CUDA C++ (compiled at run time by NVRTC).
//
// In place, vLLM's contract: residual <- x + residual (rounded once to the storage dtype);
// x <- residual * rsqrt(mean(residual^2) + eps) * weight, computed in float32, rounded once on store.
//
// Compile-time configuration (-D defines chosen per hidden size by cuda_kernel.py):
//   IC_HIDDEN          hidden size (elements per row)
//   IC_VEC             elements per global access: 8 (16 bytes), or 4/2/1 when hidden or the tensors'
//                      alignment do not allow 16-byte accesses (row starts must be VEC-aligned)
//   IC_THREADS_PER_ROW threads that share one row (power of two; < 32 packs several rows per warp)
//   IC_ROWS_PER_BLOCK  rows a block handles at a time; threads per block = THREADS_PER_ROW * ROWS_PER_BLOCK
//   IC_PERSISTENT      0 (default): each block handles one row-block and exits (grid = cdiv(rows, RPB));
//                      1: blocks walk row-blocks in a grid-stride loop (a capped, persistent grid)
//   IC_WEIGHT_NC       1: read the weight with __ldg (ld.global.nc) instead of a plain load; kept to
//                      measure the difference (see load_plain)
//
// Layout: thread t of a row owns vectors t, t + TPR, t + 2*TPR, ... (coalesced 16-byte accesses across
// the row's threads). When HIDDEN/VEC is not a multiple of TPR the last vector is guarded.
// Reduction: warp shuffles within the row's threads; when a row spans several warps, one float per
// warp goes through shared memory (double-buffered, so one barrier per row-block).
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

#ifndef IC_HIDDEN
#error "define IC_HIDDEN (the hidden size), e.g. -DIC_HIDDEN=1024"
#endif
#ifndef IC_VEC
#define IC_VEC 8
#endif
#ifndef IC_THREADS_PER_ROW
#define IC_THREADS_PER_ROW 32
#endif
#ifndef IC_ROWS_PER_BLOCK
#define IC_ROWS_PER_BLOCK 4
#endif
#ifndef IC_PERSISTENT
#define IC_PERSISTENT 0
#endif
#ifndef IC_WEIGHT_NC
#define IC_WEIGHT_NC 0
#endif

namespace ic {

// Raw register type of one VEC-element access of 16-bit values.
template <int VEC> struct RawOf;
template <> struct RawOf<8> { typedef uint4 type; };
template <> struct RawOf<4> { typedef uint2 type; };
template <> struct RawOf<2> { typedef unsigned int type; };
template <> struct RawOf<1> { typedef unsigned short type; };

template <int VEC> union Pack {
  typename RawOf<VEC>::type raw;
  unsigned short e[VEC];                 // one 16-bit value
  unsigned int pair[VEC >= 2 ? VEC / 2 : 1];  // two 16-bit values: element 2i in the low half
};

struct Bf16 {
  static __device__ __forceinline__ float to_float(unsigned short b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
  static __device__ __forceinline__ unsigned short from_float(float f) {  // round to nearest even
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
  static __device__ __forceinline__ void unpack2(unsigned int u, float& lo, float& hi) {  // exact
    lo = __uint_as_float(u << 16);
    hi = __uint_as_float(u & 0xffff0000u);
  }
  static __device__ __forceinline__ unsigned int pack2(float lo, float hi) {  // both rounded to nearest even
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return static_cast<unsigned int>(__bfloat16_as_ushort(v.x)) |
           (static_cast<unsigned int>(__bfloat16_as_ushort(v.y)) << 16);
  }
};

struct Fp16 {
  static __device__ __forceinline__ float to_float(unsigned short b) { return __half2float(__ushort_as_half(b)); }
  static __device__ __forceinline__ unsigned short from_float(float f) {  // round to nearest even
    return __half_as_ushort(__float2half_rn(f));
  }
  static __device__ __forceinline__ void unpack2(unsigned int u, float& lo, float& hi) {
    lo = __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xffffu)));
    hi = __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
  }
  static __device__ __forceinline__ unsigned int pack2(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return static_cast<unsigned int>(__half_as_ushort(v.x)) |
           (static_cast<unsigned int>(__half_as_ushort(v.y)) << 16);
  }
};

// A plain (coherent) global load of one VEC-element vector. Not __ldg: ptxas sinks a read-only
// (LDG.CONSTANT) load towards its first use, which for the weight is after the row reduction, so its
// latency is paid after the x/residual latency instead of overlapping it; a plain LDG stays where it is
// issued (SASS of sm_90 with nvcc 13.0; Triton's loads are plain too). The asm keeps the compiler from
// turning it back into ld.global.nc.
template <int VEC> __device__ __forceinline__ typename RawOf<VEC>::type load_plain(const typename RawOf<VEC>::type* p);
template <> __device__ __forceinline__ uint4 load_plain<8>(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <> __device__ __forceinline__ uint2 load_plain<4>(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
template <> __device__ __forceinline__ unsigned int load_plain<2>(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
template <> __device__ __forceinline__ unsigned short load_plain<1>(const unsigned short* p) {
  unsigned short v;
  asm volatile("ld.global.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

// VEC 16-bit values <-> float32, two at a time where VEC allows (one packed conversion per pair).
template <class T, int VEC>
__device__ __forceinline__ void unpack(const Pack<VEC>& p, float (&f)[VEC]) {
  if constexpr (VEC >= 2) {
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) T::unpack2(p.pair[i], f[2 * i], f[2 * i + 1]);
  } else {
    f[0] = T::to_float(p.e[0]);
  }
}

template <class T, int VEC>
__device__ __forceinline__ void pack(const float (&f)[VEC], Pack<VEC>& p) {
  if constexpr (VEC >= 2) {
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) p.pair[i] = T::pack2(f[2 * i], f[2 * i + 1]);
  } else {
    p.e[0] = T::from_float(f[0]);
  }
}

template <class T, int HIDDEN, int VEC, int TPR, int RPB>
struct RowBlock {
  typedef typename RawOf<VEC>::type Raw;
  static constexpr int NVEC = HIDDEN / VEC;                  // vectors per row
  static constexpr int VPT = (NVEC + TPR - 1) / TPR;         // vectors per thread
  static constexpr bool GUARD = (NVEC % TPR) != 0;           // last vector of some threads is past the row
  static constexpr int WARPS_PER_ROW = TPR > 32 ? TPR / 32 : 1;
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "IC_VEC must be 1, 2, 4 or 8");
  static_assert(HIDDEN % VEC == 0, "IC_VEC must divide IC_HIDDEN");
  static_assert(TPR > 0 && (TPR & (TPR - 1)) == 0 && TPR <= 1024, "IC_THREADS_PER_ROW: power of two <= 1024");
  static_assert((TPR * RPB) % 32 == 0 && TPR * RPB <= 1024, "threads per block: a multiple of 32, <= 1024");
  static_assert(VPT <= 8, "more than 8 vectors per thread would spill registers: raise IC_THREADS_PER_ROW");

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
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = j * TPR + lane;
      w[j].raw = Raw();
      if (!GUARD || v < NVEC) {
#if IC_WEIGHT_NC
        w[j].raw = __ldg(reinterpret_cast<const Raw*>(weight) + v);  // A/B only: the read-only path
#else
        w[j].raw = load_plain<VEC>(reinterpret_cast<const Raw*>(weight) + v);
#endif
      }
    }
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
    // Squares go into VEC independent partial sums (short dependency chains), then a tree.
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
#pragma unroll
    for (int width = VEC / 2; width > 0; width /= 2) {
#pragma unroll
      for (int k = 0; k < width; ++k) part[k] += part[k + width];
    }
    float sum_sq = part[0];
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = j * TPR + lane;
      if (valid && (!GUARD || v < NVEC)) rr[v] = rv[j].raw;
    }

    // Reduce over the row's threads: shuffles inside aligned groups of min(TPR, 32) lanes, then (a row
    // spanning several warps) one float per warp through shared memory behind a single barrier.
#pragma unroll
    for (int offset = (TPR < 32 ? TPR : 32) / 2; offset > 0; offset /= 2)
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    if constexpr (WARPS_PER_ROW > 1) {
      if ((threadIdx.x & 31) == 0) partial[group][lane / 32] = sum_sq;
      __syncthreads();
      sum_sq = 0.f;
#pragma unroll
      for (int i = 0; i < WARPS_PER_ROW; ++i) sum_sq += partial[group][i];
    }
    const float inv_rms = rsqrtf(sum_sq * (1.0f / static_cast<float>(HIDDEN)) + eps);

#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float wf[VEC], o[VEC];
      unpack<T, VEC>(w[j], wf);
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = s[j][k] * inv_rms * wf[k];
      pack<T, VEC>(o, xv[j]);
    }
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

extern "C" __global__ void __launch_bounds__(IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK)
fused_add_rmsnorm_bf16(unsigned short* __restrict__ x, unsigned short* __restrict__ residual,
                       const unsigned short* __restrict__ weight, int rows, float eps) {
  ic::fused_add_rmsnorm_body<ic::Bf16, IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK,
                             (IC_PERSISTENT != 0)>(
      x, residual, weight, rows, eps);
}

extern "C" __global__ void __launch_bounds__(IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK)
fused_add_rmsnorm_fp16(unsigned short* __restrict__ x, unsigned short* __restrict__ residual,
                       const unsigned short* __restrict__ weight, int rows, float eps) {
  ic::fused_add_rmsnorm_body<ic::Fp16, IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK,
                             (IC_PERSISTENT != 0)>(
      x, residual, weight, rows, eps);
}
