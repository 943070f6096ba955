// InferCrane RMSNorm (no residual), handwritten CUDA C++ (compiled at run time by NVRTC).
//
// vLLM's in-place contract rms_norm(out, input, weight, epsilon):
// out <- x * rsqrt(mean(x^2) + eps) * weight, computed in float32, rounded once on store; x is only read.
//
// Compile-time configuration (-D defines chosen per hidden size by cuda_kernel.py):
//   IC_HIDDEN          elements per row
//   IC_VEC             elements per global access: 8 (16 bytes), or 4/2/1 when the width or the tensors'
//                      alignment do not allow 16-byte accesses (row starts must be VEC-aligned)
//   IC_THREADS_PER_ROW threads that share one row (power of two; < 32 packs several rows per warp, which is
//                      how narrow rows such as the q/k norms at head_dim 128 keep 16-byte accesses: 16 threads
//                      of one 16-byte vector each per row, two rows per warp)
//   IC_ROWS_PER_BLOCK  rows a block handles; threads per block = THREADS_PER_ROW * ROWS_PER_BLOCK
//
// Layout: thread t of a row owns vectors t, t + TPR, t + 2*TPR, ... (coalesced accesses across the row's
// threads). When HIDDEN/VEC is not a multiple of TPR the last vector is guarded. Each block handles one
// row-block and exits (grid = cdiv(rows, RPB)): no grid-stride loop.
// Latency: both global loads of a row (weight first, then x) are issued before either is used, so a block
// waits for one memory round trip; they are plain ld.global (see load_plain), which ptxas keeps where they are
// issued. The weight stays raw (16-bit) until the row's reduction is done.
// Reduction: VEC independent partial sums per thread, warp shuffles within the row's threads, and when a
// row spans several warps one float per warp through shared memory behind a single barrier.
// x and out may be the same buffer: every thread reads its elements before anything is written, and no thread
// reads an element another thread writes.
// Entry points (extern "C", no name mangling): rms_norm_bf16, rms_norm_fp16, with arguments
// (out, x, weight, rows, eps); pointers are to 16-bit elements.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef IC_HIDDEN
#error "define IC_HIDDEN (elements per row), e.g. -DIC_HIDDEN=1024"
#endif
#ifndef IC_VEC
#define IC_VEC 8
#endif
#ifndef IC_THREADS_PER_ROW
#define IC_THREADS_PER_ROW 128
#endif
#ifndef IC_ROWS_PER_BLOCK
#define IC_ROWS_PER_BLOCK 1
#endif

namespace icrms {

// Raw register type of one VEC-element access of 16-bit values.
template <int VEC> struct RawOf;
template <> struct RawOf<8> { typedef uint4 type; };
template <> struct RawOf<4> { typedef uint2 type; };
template <> struct RawOf<2> { typedef unsigned int type; };
template <> struct RawOf<1> { typedef unsigned short type; };

template <int VEC> union Pack {
  typename RawOf<VEC>::type raw;
  unsigned short e[VEC];                      // one 16-bit value each
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
  static __device__ __forceinline__ void unpack2(unsigned int u, float& lo, float& hi) {  // exact
    lo = __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xffffu)));
    hi = __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
  }
  static __device__ __forceinline__ unsigned int pack2(float lo, float hi) {  // both rounded to nearest even
    const __half2 v = __floats2half2_rn(lo, hi);
    return static_cast<unsigned int>(__half_as_ushort(v.x)) |
           (static_cast<unsigned int>(__half_as_ushort(v.y)) << 16);
  }
};

// A plain (coherent) global load of one VEC-element vector, written as PTX so the compiler neither turns it
// into a read-only ld.global.nc (which ptxas sinks towards its first use: for the weight, past the reduction)
// nor moves it behind the other row's arithmetic.
template <int VEC> __device__ __forceinline__ typename RawOf<VEC>::type load_plain(const void* p);
template <> __device__ __forceinline__ uint4 load_plain<8>(const void* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <> __device__ __forceinline__ uint2 load_plain<4>(const void* p) {
  uint2 v;
  asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
template <> __device__ __forceinline__ unsigned int load_plain<2>(const void* p) {
  unsigned int v;
  asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
template <> __device__ __forceinline__ unsigned short load_plain<1>(const void* p) {
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
__device__ __forceinline__ void rms_norm_body(unsigned short* out, const unsigned short* x,
                                              const unsigned short* weight, int rows, float eps) {
  typedef typename RawOf<VEC>::type Raw;
  constexpr int NVEC = HIDDEN / VEC;               // vectors per row
  constexpr int VPT = (NVEC + TPR - 1) / TPR;      // vectors per thread
  constexpr bool GUARD = (NVEC % TPR) != 0;        // the last vector of some threads lies past the row
  constexpr int WARPS_PER_ROW = TPR > 32 ? TPR / 32 : 1;
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "IC_VEC must be 1, 2, 4 or 8");
  static_assert(HIDDEN % VEC == 0, "IC_VEC must divide IC_HIDDEN");
  static_assert(TPR > 0 && (TPR & (TPR - 1)) == 0 && TPR <= 1024, "IC_THREADS_PER_ROW: power of two <= 1024");
  static_assert(RPB > 0 && (TPR * RPB) % 32 == 0 && TPR * RPB <= 1024,
                "threads per block (IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK): a multiple of 32, <= 1024");
  static_assert(VPT <= 8, "more than 8 vectors per thread would spill registers: raise IC_THREADS_PER_ROW");

  __shared__ float partial[RPB][WARPS_PER_ROW];
  const unsigned tid = threadIdx.x;
  const int lane = static_cast<int>(tid % TPR);   // position within the row
  const int group = static_cast<int>(tid / TPR);  // row within the row-block
  const int base = blockIdx.x * RPB;
  if (base >= rows) return;  // uniform over the block: nobody is left waiting at the barrier
  const int row = base + group;
  // With one row per block the bound check above already proves the row exists.
  const bool valid = RPB == 1 || row < rows;
  const Raw* xr = reinterpret_cast<const Raw*>(x) + static_cast<size_t>(row) * NVEC;
  Raw* outr = reinterpret_cast<Raw*>(out) + static_cast<size_t>(row) * NVEC;
  const Raw* wr = reinterpret_cast<const Raw*>(weight);

  // Every global load first, all in flight together: the weight (first in source order, so no scheduling puts
  // it behind a use of x), then x. A thread past the row or past the last row loads nothing and holds zeros.
  Pack<VEC> xv[VPT], w[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int v = j * TPR + lane;
    w[j].raw = Raw();
    if (!GUARD || v < NVEC) w[j].raw = load_plain<VEC>(wr + v);
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int v = j * TPR + lane;
    xv[j].raw = Raw();
    if (valid && (!GUARD || v < NVEC)) xv[j].raw = load_plain<VEC>(xr + v);
  }

  // Sum of squares in float32: VEC independent partial sums (short dependency chains), then a tree.
  float xf[VPT][VEC];
  float part[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) part[k] = 0.f;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    unpack<T, VEC>(xv[j], xf[j]);
#pragma unroll
    for (int k = 0; k < VEC; ++k) part[k] += xf[j][k] * xf[j][k];
  }
#pragma unroll
  for (int width = VEC / 2; width > 0; width /= 2) {
#pragma unroll
    for (int k = 0; k < width; ++k) part[k] += part[k + width];
  }
  float sum_sq = part[0];

  // Reduce over the row's threads: shuffles inside aligned groups of min(TPR, 32) lanes (a row's lanes are
  // consecutive and TPR-aligned within the warp), then, for a row spanning several warps, one float per warp
  // through shared memory behind a single barrier. Every lane of every warp takes part (full mask).
#pragma unroll
  for (int offset = (TPR < 32 ? TPR : 32) / 2; offset > 0; offset /= 2)
    sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if constexpr (WARPS_PER_ROW > 1) {
    if ((tid & 31u) == 0) partial[group][lane / 32] = sum_sq;
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
    for (int k = 0; k < VEC; ++k) o[k] = xf[j][k] * inv_rms * wf[k];
    pack<T, VEC>(o, xv[j]);
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int v = j * TPR + lane;
    if (valid && (!GUARD || v < NVEC)) outr[v] = xv[j].raw;
  }
}

}  // namespace icrms

extern "C" __global__ void __launch_bounds__(IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK)
rms_norm_bf16(unsigned short* out, const unsigned short* x, const unsigned short* weight, int rows, float eps) {
  icrms::rms_norm_body<icrms::Bf16, IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK>(out, x, weight, rows,
                                                                                            eps);
}

extern "C" __global__ void __launch_bounds__(IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK)
rms_norm_fp16(unsigned short* out, const unsigned short* x, const unsigned short* weight, int rows, float eps) {
  icrms::rms_norm_body<icrms::Fp16, IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW, IC_ROWS_PER_BLOCK>(out, x, weight, rows,
                                                                                            eps);
}
