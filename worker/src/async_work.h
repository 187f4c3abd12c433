#pragma once
// The runtime's two makers of an AsyncWork (process_group.h): over a c10d
// backend's Work, and one complete at once. Called by the collectives
// (process_group.cpp); defined with AsyncWork itself in async_work.cpp.
// Internal to the runtime: it names c10d's types, the public header does not.

#include <string>

#include "ddp/worker/compat.h"
#include "ddp/worker/process_group.h"

namespace ddp::worker {

// The collective `w` a backend issued; `what` and `rank` name it in errors.
AsyncWork make_work(c10::intrusive_ptr<compat::Work> w, std::string what, int rank);

// A group of one rank: every collective is the identity on its tensor (a
// sum, max, min or mean of one value, a broadcast from itself), so none is
// issued: no backend call and no heartbeat record, as nothing can wait for a
// peer (the page still counts the steps). The work is complete at once.
AsyncWork done_at_once(std::string what, int rank);

}  // namespace ddp::worker
