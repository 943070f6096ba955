// InferCrane's row-wise norm kernels, their shared device code (CUDA C++): 16-bit storage types and their one
// float32 -> 16-bit rounding, vector accesses, a row's compile-time shape, and the steps every row-wise norm takes
// (load the weight, sum of squares, the reduction over a row's threads, normalize).
//
// How an op's .cu uses it: it includes cuda_bf16.h and cuda_fp16.h, then this header *inside its own namespace*
// (`namespace icrms {` / `#include "rowwise.cuh"`), so these names are the op's own (icrms::Bf16, ...): the
// mangled names of a kernel's shared arrays, which name the storage type, are the same as if the op declared them.
// cuda_rowwise.read_source (Python) puts this file's text in place of that #include line before NVRTC or CuPy sees
// the source, so what is compiled is one text whose hash covers this header too, with no extra -I option.
//
// Compile-time configuration, -D defines chosen per row width by the op's cuda_kernel.py (cuda_config):
//   IC_HIDDEN          elements per row
//   IC_VEC             elements per global access: 8 (16 bytes), or 4/2/1 when the width or the tensors'
//                      alignment do not allow 16-byte accesses (row starts must be VEC-aligned)
//   IC_THREADS_PER_ROW threads that share one row (power of two; < 32 packs several rows per warp, which is how
//                      narrow rows such as the q/k norms at head_dim 128 keep 16-byte accesses)
//   IC_ROWS_PER_BLOCK  rows a block handles at a time; threads per block = THREADS_PER_ROW * ROWS_PER_BLOCK
//
// Layout: thread t of a row owns vectors t, t + TPR, t + 2*TPR, ... (coalesced accesses across the row's
// threads). When HIDDEN/VEC is not a multiple of TPR the last vector is guarded.
// Reduction: VEC independent partial sums per thread, warp shuffles within the row's threads, and when a
// row spans several warps one float per warp through shared memory behind a single barrier.

#if !defined(IC_HIDDEN) || !defined(IC_VEC) || !defined(IC_THREADS_PER_ROW) || !defined(IC_ROWS_PER_BLOCK)
#error "define IC_HIDDEN, IC_VEC, IC_THREADS_PER_ROW and IC_ROWS_PER_BLOCK, e.g. -DIC_HIDDEN=1024 (cuda_config)"
#endif

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

// The storage types. from_float and pack2 are the kernels' only float32 -> 16-bit conversions: round to nearest
// even (cvt.rn), the rounding vLLM's kernels and torch's .to() use.
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

// A plain (coherent) global load of one VEC-element vector. Not __ldg: ptxas sinks a read-only (LDG.CONSTANT)
// load towards its first use, which for the weight is after the row reduction, so its latency is paid after the
// activations' instead of overlapping it; a plain LDG stays where it is issued (SASS of sm_90 with nvcc 13.0;
// Triton's loads are plain too). Written as PTX so the compiler neither turns it back into ld.global.nc nor moves
// it behind the other rows' arithmetic.
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

// A row's compile-time shape, and the per-thread steps over it. Thread ``lane`` of a row owns its vectors
// ``j * TPR + lane`` for j < VPT; ``!GUARD || v < NVEC`` says whether one lies in the row (only the last can lie
// past it).
// The shape's numbers are enumerators, not static data members, which NVVM would emit as .global symbols.
template <int HIDDEN, int VEC, int TPR, int RPB>
struct Row {
  typedef typename RawOf<VEC>::type Raw;
  enum : int {
    NVEC = HIDDEN / VEC,                    // vectors per row
    VPT = (NVEC + TPR - 1) / TPR,           // vectors per thread
    WARPS_PER_ROW = TPR > 32 ? TPR / 32 : 1
  };
  enum : bool { GUARD = (NVEC % TPR) != 0 };  // the last vector of some threads lies past the row
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "IC_VEC must be 1, 2, 4 or 8");
  static_assert(HIDDEN % VEC == 0, "IC_VEC must divide IC_HIDDEN");
  static_assert(TPR > 0 && (TPR & (TPR - 1)) == 0 && TPR <= 1024, "IC_THREADS_PER_ROW: power of two <= 1024");
  static_assert(RPB > 0 && (TPR * RPB) % 32 == 0 && TPR * RPB <= 1024,
                "threads per block (IC_THREADS_PER_ROW * IC_ROWS_PER_BLOCK): a multiple of 32, <= 1024");
  static_assert(VPT <= 8, "more than 8 vectors per thread would spill registers: raise IC_THREADS_PER_ROW");

  // The weight, every vector of this thread (zeros past the row): plain loads (load_plain), or with NC the
  // read-only path (__ldg), kept to measure the difference.
  template <bool NC = false>
  static __device__ __forceinline__ void load_weight(Pack<VEC> (&w)[VPT], const unsigned short* weight, int lane) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = j * TPR + lane;
      w[j].raw = Raw();
      if (!GUARD || v < NVEC) {
        if constexpr (NC) {
          w[j].raw = __ldg(reinterpret_cast<const Raw*>(weight) + v);
        } else {
          w[j].raw = load_plain<VEC>(reinterpret_cast<const Raw*>(weight) + v);
        }
      }
    }
  }

  // Sum of VEC independent partial sums (short dependency chains), pairwise.
  static __device__ __forceinline__ float tree_sum(float (&part)[VEC]) {
#pragma unroll
    for (int width = VEC / 2; width > 0; width /= 2) {
#pragma unroll
      for (int k = 0; k < width; ++k) part[k] += part[k + width];
    }
    return part[0];
  }

  // 1 / rms of row ``group`` from each of its threads' sum of squares: shuffles inside aligned groups of
  // min(TPR, 32) lanes (a row's lanes are consecutive and TPR-aligned within the warp), then, for a row spanning
  // several warps, one float per warp through shared memory (``partial[group]``: WARPS_PER_ROW floats per row of
  // the block) behind a single barrier. Every lane of every warp takes part (full mask).
  template <class Partial>
  static __device__ __forceinline__ float inv_rms_of(float sum_sq, Partial& partial, int group, int lane,
                                                     float eps) {
#pragma unroll
    for (int offset = (TPR < 32 ? TPR : 32) / 2; offset > 0; offset /= 2)
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    if constexpr (WARPS_PER_ROW > 1) {
      if ((threadIdx.x & 31u) == 0) partial[group][lane / 32] = sum_sq;
      __syncthreads();
      sum_sq = 0.f;
#pragma unroll
      for (int i = 0; i < WARPS_PER_ROW; ++i) sum_sq += partial[group][i];
    }
    const float inv_rms = rsqrtf(sum_sq * (1.0f / static_cast<float>(HIDDEN)) + eps);
    return inv_rms;
  }

  // out = s * inv_rms * weight in float32, rounded once to T.
  template <class T>
  static __device__ __forceinline__ void normalize(const float (&s)[VPT][VEC], float inv_rms,
                                                   const Pack<VEC> (&w)[VPT], Pack<VEC> (&out)[VPT]) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float wf[VEC], o[VEC];
      unpack<T, VEC>(w[j], wf);
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = s[j][k] * inv_rms * wf[k];
      pack<T, VEC>(o, out[j]);
    }
  }
};
