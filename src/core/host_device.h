// MOE_EP_HD marks functions that run on both the host and the GPU (codecs, layout getters).
// Under nvcc it is __host__ __device__ __forceinline__; a plain C++ compiler sees inline, so the
// headers that use it compile without the CUDA toolkit's compiler.
#pragma once

#if defined(__CUDACC__)
#define MOE_EP_HD __host__ __device__ __forceinline__
#else
#define MOE_EP_HD inline
#endif
