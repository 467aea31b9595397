// Umbrella header of the moe-ep public API.
#pragma once

#include "moe_ep/config.h"
#include "moe_ep/cpu.h"
#include "moe_ep/cuda.h"
#include "moe_ep/dtypes.h"
#include "moe_ep/errors.h"
#include "moe_ep/op.h"
#include "moe_ep/tensor.h"
