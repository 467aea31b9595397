// Host-side check macro for NCCL calls: a failure throws NcclError naming the call, NCCL's error
// string and where it happened (file name only). Never exits.
#pragma once

#include <nccl.h>

#include "core/check.h"

#define MOE_EP_NCCL_CHECK(expr)                                                                  \
  do {                                                                                           \
    const ncclResult_t moe_ep_status_ = (expr);                                                  \
    if (moe_ep_status_ != ncclSuccess) {                                                         \
      throw ::moe_ep::NcclError(                                                                 \
          ::moe_ep::detail::concat(#expr, " failed: ", ncclGetErrorString(moe_ep_status_), " (", \
                                   ::moe_ep::detail::base_name(__FILE__), ":", __LINE__, ")"));  \
    }                                                                                            \
  } while (0)
