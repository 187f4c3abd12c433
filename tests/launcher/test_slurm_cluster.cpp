// ddp-launch under a real Slurm: the test starts munged (private socket),
// slurmctld and slurmd (private ports, everything under a temp directory) as
// its own children, sbatch's the scripts in tests/launcher/scripts/slurm
// (the shapes docs/slurm.md shows) and checks what each rank was told. Every
// daemon is stopped by its pid (SIGTERM, then SIGKILL) when the case ends,
// however it ends. One case, so the cluster starts once (about a second). Skipped, with the reason, where Slurm or munge is not
// installed, we are not root, or the daemons cannot start.
#include "test_skip.h"
#include "reference_python.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <regex>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::test;

namespace {

// A daemon in the foreground (-D / -F) that we own: SIGTERM on destruction,
// SIGKILL if it has not gone after a grace period.
struct Daemon {
  std::string name;
  std::unique_ptr<Proc> proc;
  Daemon(std::string n, const std::vector<std::string>& argv, const std::map<std::string, std::string>& env)
      : name(std::move(n)), proc(std::make_unique<Proc>(argv, env)) {}
  ~Daemon() {
    if (!proc->running()) return;
    proc->signal(SIGTERM);
    if (!proc->wait(20)) proc->signal(SIGKILL), proc->wait(10);
  }
};

std::string short_hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

std::string missing_programs() {
  std::string missing;
  for (const char* p : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch",
                        "/usr/bin/sinfo", "/usr/bin/scontrol", "/usr/bin/setpriv"})
    if (::access(p, X_OK) != 0) missing += std::string(missing.empty() ? "" : ", ") + p;
  return missing;
}

std::string tail(const std::string& text, size_t n = 600) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

// One-node cluster under `dir`. start() returns "" when the node is idle,
// else why it could not start (for DDP_SKIP).
class Cluster {
 public:
  explicit Cluster(const std::string& dir) : dir_(dir) {}

  std::string start() {
    const std::string host = short_hostname();
    for (const char* d : {"/spool", "/spool/ctld", "/spool/d", "/log", "/munge"})
      ::mkdir((dir_ + d).c_str(), 0755);
    // munged runs as the munge user and insists that every directory up to
    // its socket is searchable by all and its own is its own.
    ::chmod(dir_.c_str(), 0755);
    if (::chown((dir_ + "/munge").c_str(), munge_uid(), munge_gid()) != 0) return "cannot chown the munge directory";
    const std::string sock = dir_ + "/munge/munge.socket";
    std::string conf = "ClusterName=ddptest\nSlurmctldHost=" + host +
                       "\nSlurmUser=root\nSlurmdUser=root\n"
                       "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" + sock +
                       "\nMpiDefault=none\nMailProg=/bin/true\n"
                       "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
                       "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
                       "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nSwitchType=switch/none\nReturnToService=2\n"
                       "SlurmctldPort=" + std::to_string(free_port()) + "\nSlurmdPort=" + std::to_string(free_port()) +
                       "\nStateSaveLocation=" + dir_ + "/spool/ctld\nSlurmdSpoolDir=" + dir_ + "/spool/d\n" +
                       "SlurmctldPidFile=" + dir_ + "/slurmctld.pid\nSlurmdPidFile=" + dir_ + "/slurmd.pid\n" +
                       "SlurmctldLogFile=" + dir_ + "/log/slurmctld.log\nSlurmdLogFile=" + dir_ + "/log/slurmd.log\n" +
                       "NodeName=" + host + " CPUs=" + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) +
                       " RealMemory=100 State=UNKNOWN\n"
                       "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    conf_ = dir_ + "/slurm.conf";
    write_file(conf_, conf);

    munged_ = std::make_unique<Daemon>(
        "munged",
        std::vector<std::string>{"/usr/bin/setpriv", "--reuid=munge", "--regid=munge", "--init-groups",
                                 "/usr/sbin/munged", "-F", "--socket=" + sock, "--pid-file=" + dir_ + "/munge/pid",
                                 "--log-file=" + dir_ + "/munge/log", "--seed-file=" + dir_ + "/munge/seed"},
        env());
    if (!wait_until([&] { return ::access(sock.c_str(), F_OK) == 0 || !munged_->proc->running(); }, 20) ||
        !munged_->proc->running())
      return "munged did not start: " + tail(munged_->proc->output());
    ctld_ = std::make_unique<Daemon>("slurmctld", std::vector<std::string>{"/usr/sbin/slurmctld", "-D", "-f", conf_}, env());
    slurmd_ = std::make_unique<Daemon>("slurmd", std::vector<std::string>{"/usr/sbin/slurmd", "-D", "-f", conf_}, env());
    std::string state;
    const bool idle = wait_until(
        [&] {
          if (!ctld_->proc->running() || !slurmd_->proc->running()) return true;
          state = run({"/usr/bin/sinfo", "-h", "-o", "%t"}, env(), 10).output;
          return state.rfind("idle", 0) == 0;
        },
        30);
    if (!idle || !ctld_->proc->running() || !slurmd_->proc->running())
      return "the node did not become idle (sinfo: '" + state + "'); slurmctld: " + tail(ctld_->proc->output()) +
             " slurmd: " + tail(slurmd_->proc->output());
    return "";
  }

  // The environment every client command needs.
  std::map<std::string, std::string> env() const { return {{"SLURM_CONF", conf_}}; }

  // Stops the daemons now (slurmd, slurmctld, then munged), by pid.
  void stop() {
    slurmd_.reset();
    ctld_.reset();
    munged_.reset();
  }
  ~Cluster() { stop(); }

 private:
  static uid_t munge_uid() { return static_cast<uid_t>(std::stoi(run({"/usr/bin/id", "-u", "munge"}).output)); }
  static gid_t munge_gid() { return static_cast<gid_t>(std::stoi(run({"/usr/bin/id", "-g", "munge"}).output)); }

  std::string dir_, conf_;
  std::unique_ptr<Daemon> munged_, ctld_, slurmd_;
};

struct Job {
  long long id = -1;
  int exit_code = -1;
  std::string output;  // the job's stdout+stderr (sbatch -o)
};

// sbatch, then waits for the job to end. Not `sbatch --wait`: it polls the
// controller every ~10 s, which would make this test take half a minute.
Job submit(const Cluster& c, const std::string& dir, const std::string& script,
           std::map<std::string, std::string> env) {
  for (const auto& [k, v] : c.env()) env[k] = v;
  const std::string out = dir + "/" + script + ".out";
  // -O: two tasks even where the node has one CPU.
  ProcResult r = run({"/usr/bin/sbatch", "--parsable", "-O", "-o", out,
                      source_path("tests/launcher/scripts/slurm/" + script)},
                     env, 60, dir);
  INFO("sbatch: " << r.output);
  REQUIRE(r.exit_code == 0);
  Job j;
  j.id = std::stoll(r.output);
  const std::string id = std::to_string(j.id);
  std::string state;
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const bool ended = wait_until(
      [&] {
        // At most ten controller queries a second, however fast the poll.
        if (std::chrono::steady_clock::now() - last < std::chrono::milliseconds(100)) return false;
        last = std::chrono::steady_clock::now();
        state = run({"/usr/bin/scontrol", "-o", "show", "job", id}, c.env(), 10).output;
        return state.find("JobState=PENDING") == std::string::npos &&
               state.find("JobState=RUNNING") == std::string::npos &&
               state.find("JobState=COMPLETING") == std::string::npos &&
               state.find("JobState=CONFIGURING") == std::string::npos;
      },
      120);
  INFO("scontrol: " << state);
  REQUIRE(ended);
  std::smatch m;
  if (std::regex_search(state, m, std::regex(" ExitCode=([0-9]+):([0-9]+)")))
    j.exit_code = std::stoi(m[1]) != 0 ? std::stoi(m[1]) : (std::stoi(m[2]) ? 128 + std::stoi(m[2]) : 0);
  j.output = read_file(out);
  return j;
}

}  // namespace

TEST_CASE("sbatch: one ddp-launch per rank and per node under a real Slurm", "[torch]") {
  if (::geteuid() != 0) DDP_SKIP("needs root: slurmd and munged are started here as root / munge");
  if (auto m = missing_programs(); !m.empty())
    DDP_SKIP("Slurm or munge not installed (" + m + "); scripts/install-deps --test installs them");
  if (::access("/etc/munge/munge.key", R_OK) != 0) DDP_SKIP("no /etc/munge/munge.key (the munge package makes it)");
  if (run({"/usr/bin/id", "munge"}).exit_code != 0) DDP_SKIP("no munge user");

  TempDir dir;
  Cluster cluster(dir.path());
  if (auto why = cluster.start(); !why.empty()) DDP_SKIP("Slurm cannot start here: " + why);
  const std::string host = short_hostname();
  const std::map<std::string, std::string> env = {{"DDP_LAUNCH", bin_path("ddp-launch")},
                                                  {"WORKER", source_path("tests/launcher/scripts/slurm/print_rank.sh")},
                                                  {"MASTER_PORT", "\x01unset"},
                                                  {"MASTER_ADDR", "\x01unset"}};

  // Both ranks of the job print their variables and arguments; the master
  // port is derived from the job id.
  auto check_ranks = [&](const std::string& script, const std::string& tag) {
    Job j = submit(cluster, dir.path(), script, env);
    INFO("job output:\n" << j.output);
    CHECK(j.exit_code == 0);
    const std::string master = "master=" + host + ":" + std::to_string(10000 + j.id % 20000);
    for (int r = 0; r < 2; ++r)
      CHECK_THAT(j.output, Catch::Contains("worker rank=" + std::to_string(r) + " local_rank=" + std::to_string(r) +
                                           " world_size=2 local_world_size=2 group_rank=0 " + master +
                                           " args=--local_rank=" + std::to_string(r) + " --tag " + tag));
  };
  check_ranks("per_rank.sbatch", "per-rank");  // srun per rank: 2 tasks, each one rank
  check_ranks("per_node.sbatch", "per-node");  // one ddp-launch per node with 2 workers

  // srun per rank: the two ranks meet at MASTER_ADDR:MASTER_PORT (gloo allreduce).
  if (auto py = reference_python(); !py) {
    WARN("no python3 with torch: the allreduce run is left out");
  } else {
    auto with_py = env;
    with_py["WORKER"] = source_path("tests/launcher/scripts/slurm/allreduce.py");
    with_py["PYTHON_EXEC"] = *py;
    Job j = submit(cluster, dir.path(), "per_rank.sbatch", with_py);
    INFO("job output:\n" << j.output);
    CHECK(j.exit_code == 0);
    CHECK_THAT(j.output, Catch::Contains("allreduce rank=0 world_size=2 sum=3"));
    CHECK_THAT(j.output, Catch::Contains("allreduce rank=1 world_size=2 sum=3"));
  }
}
