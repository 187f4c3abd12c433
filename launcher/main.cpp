// ddp-launch: parse, resolve, supervise (app/resolve.h, supervise/supervisor.h).
#include "ddp/launcher/app/resolve.h"
#include "ddp/launcher/config/invocation.h"
#include "ddp/launcher/supervise/supervisor.h"

#include <csignal>
#include <iostream>

using namespace ddp::launcher;

int main(int argc, char** argv) {
  // A console that went away (`ddp-launch ... | head`) is EPIPE on a write,
  // never the launcher's death: the job's exit code, the report's files and
  // --summary_json must not depend on who reads the output. Workers get the
  // default back before exec (spawn.h), as torchrun's do.
  ::signal(SIGPIPE, SIG_IGN);
  // A live dump's request before there is anything to dump (the signal
  // channel takes it over once it exists) is no death with exit 140.
  ::signal(SIGUSR2, SIG_IGN);
  const EnvMap env = current_environment();
  std::optional<LaunchPlan> plan;
  try {
    plan = resolve_launch(std::vector<std::string>(argv + 1, argv + argc), env, argc > 0 && invoked_as_torchrun(argv[0]),
                          std::cout, std::cerr);
  } catch (const UsageError& e) {
    std::cerr << "ddp-launch: error: " << e.what() << " (see ddp-launch --help)" << std::endl;
    return 2;
  }
  if (!plan) return 0;  // --help, --version
  try {
    Supervisor sup(std::move(*plan), std::cerr);
    return sup.run();
  } catch (const std::exception& e) {
    std::cerr << "ddp-launch: error: " << e.what() << std::endl;
    return 1;
  }
}
