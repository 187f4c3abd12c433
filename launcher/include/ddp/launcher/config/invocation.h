#pragma once
// The name ddp-launch was called by. Installed beside it is a link named
// `torchrun`: called by that name it behaves as torchrun 2.x, which gives
// workers no --local_rank argument (as --use_env does here), so scripts
// that call torchrun need only PATH changed. Every other name (ddp-launch,
// a copy, a wrapper) keeps torch.distributed.launch's --local_rank=N.

#include <string>

namespace ddp::launcher {

// True when argv[0]'s last path component is "torchrun".
bool invoked_as_torchrun(const std::string& argv0);

}  // namespace ddp::launcher
