// Precompiled header of ddp_worker (see CMakeLists.txt: torch/torch.h alone
// costs ~25 s per translation unit).
#pragma once
#include <torch/torch.h>
#include "ddp/worker/compat.h"
