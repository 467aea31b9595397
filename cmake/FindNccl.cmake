# Locate NCCL for the CUDA backend. Order: MOE_EP_NCCL_LIBRARY / MOE_EP_NCCL_INCLUDE_DIR if set,
# then NCCL_ROOT, the CUDA toolkit, the system paths, and the nvidia-nccl wheel of a Python
# environment (where PyTorch images keep it, often without an unversioned libnccl.so).
set(_nccl_hints $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
find_path(MOE_EP_NCCL_INCLUDE_DIR nccl.h
  HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(MOE_EP_NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
if(NOT MOE_EP_NCCL_LIBRARY)
  file(GLOB _nccl_wheels /opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2
                         /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2)
  if(_nccl_wheels)
    list(GET _nccl_wheels 0 _first)
    set(MOE_EP_NCCL_LIBRARY ${_first} CACHE FILEPATH "NCCL library" FORCE)
  endif()
endif()
message(STATUS "moe-ep: NCCL include ${MOE_EP_NCCL_INCLUDE_DIR}, library ${MOE_EP_NCCL_LIBRARY}")
