#pragma once
// Access to the raw c10d objects behind a ddp::worker::ProcessGroup, for code
// that needs more than the wrappers (benchmarks comparing against raw
// ProcessGroupGloo, custom collectives). Pulls in the c10d headers via
// compat.h; ordinary training code does not need it.

#include <c10/util/intrusive_ptr.h>

#include "ddp/worker/compat.h"
#include "ddp/worker/process_group.h"

namespace ddp::worker {

c10::intrusive_ptr<compat::Backend> native_backend(ProcessGroup& pg);
// The store as the backend sees it (PrefixStore("default_pg", ...)).
c10::intrusive_ptr<c10d::Store> native_store(ProcessGroup& pg);

}  // namespace ddp::worker
