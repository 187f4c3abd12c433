#include "etcd_cluster.h"

#include <csignal>
#include <regex>
#include <stdexcept>

namespace ddp::test {

std::optional<std::string> EtcdCluster::unavailable_reason() {
  if (run({"etcd", "--version"}, {}, 30).exit_code != 0)
    return std::string("etcd is not installed (Debian: apt-get install etcd-server etcd-client; scripts/install-deps --test)");
  if (run({"etcdctl", "version"}, {}, 30).exit_code != 0)
    return std::string("etcdctl is not installed (Debian: apt-get install etcd-client)");
  return std::nullopt;
}

EtcdCluster::EtcdCluster(int n) {
  for (int i = 0; i < n; ++i) {
    Member m;
    m.name = "m" + std::to_string(i);
    m.host = "127.0.0.1";
    m.client_port = free_port();
    m.peer_port = free_port();
    members_.push_back(std::move(m));
  }
  for (int i = 0; i < n; ++i) start(i);
  wait_ready();
}

EtcdCluster::EtcdCluster(const NetNodes& nodes, int n) {
  if (nodes.size() < n) throw std::invalid_argument("EtcdCluster: fewer namespaces than members");
  for (int i = 0; i < n; ++i) {
    Member m;
    m.name = "m" + std::to_string(i);
    m.host = nodes.address(i);
    m.client_port = 2379;
    m.peer_port = 2380;
    m.exec = nodes.exec(i, {});
    members_.push_back(std::move(m));
  }
  for (int i = 0; i < n; ++i) start(i);
  wait_ready();
}

EtcdCluster::~EtcdCluster() {
  for (auto& m : members_)
    if (m.proc) m.proc->signal(SIGKILL);
}

std::vector<std::string> EtcdCluster::in(int i, std::vector<std::string> argv) const {
  std::vector<std::string> out = members_.at(i).exec;
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::string EtcdCluster::endpoint(int i) const {
  return members_.at(i).host + ":" + std::to_string(members_.at(i).client_port);
}

std::string EtcdCluster::endpoints() const {
  std::string s;
  for (int i = 0; i < size(); ++i) s += (s.empty() ? "" : ",") + endpoint(i);
  return s;
}

void EtcdCluster::start(int i) {
  if (initial_cluster_.empty())
    for (const auto& m : members_)
      initial_cluster_ += (initial_cluster_.empty() ? "" : ",") + m.name + "=http://" + m.host + ":" +
                          std::to_string(m.peer_port);
  Member& m = members_.at(i);
  const std::string peer = "http://" + m.host + ":" + std::to_string(m.peer_port);
  const std::string client = "http://" + m.host + ":" + std::to_string(m.client_port);
  m.proc = std::make_unique<Proc>(in(i, {"etcd", "--name", m.name, "--data-dir", dir_.file(m.name),
                                         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                         "--listen-client-urls", client, "--advertise-client-urls", client,
                                         "--initial-cluster", initial_cluster_, "--initial-cluster-token",
                                         "ddp-test", "--heartbeat-interval", "50", "--election-timeout", "500"}));
}

void EtcdCluster::wait_ready() {
  if (leader(30) < 0) {
    std::string logs;
    for (int i = 0; i < size(); ++i) logs += "--- member " + std::to_string(i) + ":\n" + log(i);
    throw std::runtime_error("the etcd cluster elected no leader within 30 s:\n" + logs);
  }
}

void EtcdCluster::kill(int i) {
  Member& m = members_.at(i);
  m.proc->signal(SIGKILL);
  m.proc->wait(10);
}

void EtcdCluster::restart(int i) {
  kill(i);
  start(i);
}

std::string EtcdCluster::log(int i) const { return members_.at(i).proc ? members_.at(i).proc->output() : ""; }

int EtcdCluster::leader(double timeout_s) {
  int found = -1;
  wait_until(
      [&] {
        for (int i = 0; i < size(); ++i) {
          if (!members_[i].proc || !members_[i].proc->running()) continue;
          const auto r = run(in(i, {"etcdctl", "--endpoints=" + endpoint(i), "--command-timeout=1s", "endpoint",
                                    "status", "-w", "json"}),
                             {}, 5);
          std::smatch id, lead;
          static const std::regex id_re("\"member_id\":([0-9]+)"), lead_re("\"leader\":([0-9]+)");
          if (r.exit_code != 0 || !std::regex_search(r.output, id, id_re) ||
              !std::regex_search(r.output, lead, lead_re) || lead[1] == "0")
            continue;
          if (id[1] == lead[1]) {
            found = i;
            return true;
          }
        }
        return false;
      },
      timeout_s);
  return found;
}

}  // namespace ddp::test
