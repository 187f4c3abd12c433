#include "ddp/launcher/elastic/job_recovery.h"

#include "ddp/launcher/elastic/rdzv_link.h"

#include <string>

namespace ddp::launcher {

void JobRecovery::ask(int budget, int rank) {
  agent_.send(rdzv::lines::Command::Recover, std::to_string(budget) + " " + std::to_string(rank));
}

void JobRecovery::back(uint64_t generation) {
  agent_.send(rdzv::lines::Command::Recovered, std::to_string(generation));
}

void JobRecovery::cancel() { agent_.send(rdzv::lines::Command::Recovered, "void"); }

bool JobRecovery::heard(const RdzvEvent& e) {
  if (e.kind != RdzvEvent::Recovery && e.kind != RdzvEvent::RecoveryRefused && e.kind != RdzvEvent::PeerRecovery)
    return false;
  if (listener_) listener_(e);
  return true;
}

}  // namespace ddp::launcher
