# moe_ep_exact_math: the compiler flags that bit-exactness needs, in one INTERFACE target that
# every target compared bit for bit with the CPU reference links PRIVATE (the library, the
# reference, the moe-ep tool and the tests). The CPU reference never fuses a*b+c into an FMA
# (one rounding instead of two), so neither may anything compared with it bit for bit: the host
# code is built with -ffp-contract=off and the CUDA kernels with -fmad=false
# (docs/design.md: Determinism and bit-exactness).
add_library(moe_ep_exact_math INTERFACE)
target_compile_options(moe_ep_exact_math INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>
  $<$<COMPILE_LANGUAGE:CUDA>:-fmad=false>)
