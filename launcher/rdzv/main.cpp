// ddp-rdzv: the c10d rendezvous of one ddp-launch agent, in a process of its
// own (only a c10d run starts this): every store request may wait for
// seconds, and the node that hosts the store serves it from a thread, while
// the launcher's loop never blocks and holds no thread of its own.
// The launcher talks to it over stdin/stdout, one line each way
// (agent_lines.h has the lines).
// While the workers run, this node's heartbeat goes to the store only while
// the launcher's last line is younger than keep_alive_interval *
// keep_alive_max_attempt; a launcher silent for longer (stopped, hung) makes
// the node report itself lost (Rendezvous::tick), so the other nodes go on.
// A store that stops answering is `error <message>` and the end of this
// process; so is one that is not a ddp-launch rendezvous store (a torchrun
// node's TCPStore, another program, a ddp-launch of another store protocol
// version: StoreClient's hello), at once. EOF on stdin (the launcher is gone) ends it too; so does the
// launcher's death (PR_SET_PDEATHSIG).
// --backend=etcd-v3: the store is an etcd v3 cluster (etcd_store.h) at
// --endpoints=H:P,H:P,...; no node hosts it, none waits for another's.
//   ddp-rdzv --host=H --port=P --id=ID --min=N --max=M --nproc=K [--local_addr=A]
//            [--backend=c10d|etcd-v3] [--endpoints=H:P,...]
//            [--is_host=auto|1|0] [--join_timeout=S] [--last_call_timeout=S]
//            [--close_timeout=S] [--read_timeout=S] [--keep_alive_interval=S]
//            [--keep_alive_max_attempt=N] [--hot_spares=K]
//            [--recovery=in_place|restart] [--max_restarts=N]
#include "ddp/common/host_resolve.h"
#include "ddp/common/fd_io.h"
#include "ddp/common/free_port.h"
#include "ddp/rdzv/agent_lines.h"
#include "etcd_store.h"
#include "rendezvous.h"
#include "store_client.h"
#include "store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <iostream>
#include <map>
#include <string>
#include <vector>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

using ddp::rdzv::Clock;
namespace lines = ddp::rdzv::lines;

namespace {

void say(const std::string& line) { std::cout << ddp::rdzv::lines::one_line(line) << std::endl; }

// Reads stdin lines without blocking the rendezvous: poll with a timeout.
class Commands {
 public:
  // Waits up to ms for input; false at EOF.
  bool wait(int ms) {
    if (eof_) return false;
    pollfd p{0, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return true;
    char buf[4096];
    const ssize_t n = ddp::fd::read_some(0, buf, sizeof(buf));
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    pending_.append(buf, static_cast<std::size_t>(n));
    last_input_ = Clock::now();
    return true;
  }
  // Seconds since the launcher last wrote anything (a command or a ping).
  double silent_s() const { return std::chrono::duration<double>(Clock::now() - last_input_).count(); }
  std::optional<std::string> next() {
    const auto nl = pending_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string line = pending_.substr(0, nl);
    pending_.erase(0, nl + 1);
    return line;
  }
  bool eof() const { return eof_ && pending_.find('\n') == std::string::npos; }

 private:
  std::string pending_;
  bool eof_ = false;
  Clock::time_point last_input_ = Clock::now();
};

std::vector<sockaddr_storage> resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<sockaddr_storage> out;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return out;
  for (addrinfo* a = res; a; a = a->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, a->ai_addr, a->ai_addrlen);
    out.push_back(s);
  }
  ::freeaddrinfo(res);
  return out;
}

socklen_t len_of(const sockaddr_storage& s) {
  return s.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// Whether this node should host the store: host names one of its addresses
// and nobody listens on the port yet (another launcher on this machine may
// host it already; then this one is a client, as torchrun's agents are).
bool can_host(const std::string& host, int port) {
  for (sockaddr_storage s : resolve(host, port)) {
    const int fd = ::socket(s.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&s), len_of(s)) == 0;
    ::close(fd);
    if (ok) return true;
  }
  return false;
}

// Whether something accepts TCP connections at host:port now (each address
// tried for at most a second: a host that drops packets must not block).
bool accepts(const std::string& host, int port) {
  for (sockaddr_storage s : resolve(host, port)) {
    const int fd = ::socket(s.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&s), len_of(s)) == 0;
    if (!ok && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      ok = ::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
    if (ok) return true;
  }
  return false;
}

std::string numeric(const sockaddr_storage& s) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (s.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(s).sin6_addr, buf, sizeof(buf));
  else
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(s).sin_addr, buf, sizeof(buf));
  return buf;
}

// The address this node reaches the endpoint from: what the other nodes can
// reach this node's workers at (a UDP connect sends nothing).
std::string route_address(const std::string& host, int port) {
  for (sockaddr_storage s : resolve(host, port)) {
    const int fd = ::socket(s.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage mine{};
    socklen_t len = sizeof(mine);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&s), len_of(s)) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0;
    ::close(fd);
    if (ok) return numeric(mine);
  }
  return "";
}

// The workers' store port for a round: outside the kernel's ephemeral range
// (ddp/common/free_port.h), so no other program's connection takes it before
// rank 0 binds it.
int free_port() {
  try {
    return ddp::pick_free_port();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot find a free port for the workers' store: ") + e.what());
  }
}

// The store holds one connection per node: a soft limit of open files of
// 1024 (a common default) must not cap a job at about a thousand nodes.
void raise_open_files() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

// The torchrun nodes (TCPStore clients) that came to the store this node
// hosts: each address named at once on the terminal (stderr, which the
// launcher shares), once, and handed to the rendezvous, which ends a join
// that does not complete soon (Rendezvous::tcpstore_client).
class TcpStoreClients {
 public:
  // On the store's thread.
  void saw(const std::string& address, const char* torch, const ddp::rdzv::Config& cfg) {
    std::lock_guard<std::mutex> l(m_);
    if (!seen_.insert(address).second) return;  // torchrun retries for ~85 s
    const std::string who = std::string("a torchrun node (torch ") + torch + " TCPStore client) at " + address;
    pending_.push_back(who);
    const std::string line = "ddp-launch: warning: rendezvous at " + cfg.endpoint + " (rdzv_id " + cfg.run_id + "): " +
                             who + " tried to join; ddp-launch and torchrun nodes cannot join one rendezvous: start "
                             "every node with ddp-launch (a round that has not closed within " +
                             std::to_string(static_cast<long long>(cfg.tcpstore_client_grace_s)) + " s ends)\n";
    (void)!::write(2, line.data(), line.size());
  }
  // The next one not handed out yet.
  std::optional<std::string> next() {
    std::lock_guard<std::mutex> l(m_);
    if (pending_.empty()) return std::nullopt;
    std::string who = std::move(pending_.front());
    pending_.erase(pending_.begin());
    return who;
  }

 private:
  std::mutex m_;
  std::set<std::string> seen_;
  std::vector<std::string> pending_;
};

std::chrono::milliseconds ms(double s) { return std::chrono::milliseconds(static_cast<long long>(s * 1000)); }

// How long the store may take to answer the hello: ours answers in
// milliseconds; one that does not answer at all speaks another protocol.
constexpr std::chrono::milliseconds kFirstAnswer{10000};

// Why this node cannot use the store at the endpoint, and what to do.
std::string foreign_store(const ddp::rdzv::Config& cfg, const ddp::rdzv::ForeignStore& e) {
  const std::string at = "the rendezvous store at " + cfg.endpoint + " (rdzv_id " + cfg.run_id + "): ";
  if (dynamic_cast<const ddp::rdzv::OtherVersionStore*>(&e))
    return at + e.what() + ": start every node with the same ddp-launch version";
  return at + e.what() + "; is it torchrun's TCPStore (a torchrun node at the same --rdzv_endpoint) or another "
         "program? ddp-launch and torchrun nodes cannot join one rendezvous: start every node with ddp-launch";
}

// Why this node cannot use the etcd cluster at the endpoints, and what to do.
std::string etcd_unreachable(const ddp::rdzv::Config& cfg, const std::exception& e) {
  const std::string at = "rendezvous in etcd at " + cfg.endpoint + " (rdzv_id " + cfg.run_id + "): ";
  if (dynamic_cast<const ddp::rdzv::NotEtcd*>(&e))
    return at + e.what() + "; --rdzv_backend etcd-v3 needs the client URLs of etcd 3.4 or later members";
  if (dynamic_cast<const std::invalid_argument*>(&e))
    return at + "bad --rdzv_endpoint: " + e.what() + "; give HOST[:PORT],HOST[:PORT],... of the etcd members";
  return at + e.what() + "; check that the etcd members run and that --rdzv_endpoint lists their client URLs "
         "(HOST:2379,...)";
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return 1;
  std::map<std::string, std::string> a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const auto eq = s.find('=');
    if (s.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::cerr << "ddp-rdzv: bad argument '" << s << "' (ddp-launch starts this program; see its --help)" << std::endl;
      return 2;
    }
    a[s.substr(2, eq - 2)] = s.substr(eq + 1);
  }
  auto get = [&](const char* k, const std::string& d) { return a.count(k) ? a[k] : d; };
  ddp::rdzv::Config cfg;
  const std::string host = get("host", "localhost");
  int port = std::stoi(get("port", "29400"));
  // Port 0 (--rdzv_endpoint HOST:0; the launcher allows it for one node
  // only): this node hosts the store on a free port, as torchrun's agent does.
  const bool free_port_store = port == 0;
  auto endpoint_of = [&](int p) { return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(p); };
  cfg.endpoint = endpoint_of(port);
  cfg.run_id = get("id", "none");
  cfg.min_nodes = std::stoi(get("min", "1"));
  cfg.max_nodes = std::stoi(get("max", "1"));
  cfg.nproc = std::stoi(get("nproc", "1"));
  cfg.join_timeout_s = std::stod(get("join_timeout", "600"));
  cfg.last_call_timeout_s = std::stod(get("last_call_timeout", "30"));
  cfg.close_timeout_s = std::stod(get("close_timeout", "30"));
  cfg.keep_alive_interval_s = std::stod(get("keep_alive_interval", "5"));
  cfg.keep_alive_max_attempt = std::stoi(get("keep_alive_max_attempt", "3"));
  cfg.hot_spares = std::stoi(get("hot_spares", "0"));
  cfg.recovery_in_place = get("recovery", "restart") == "in_place";
  cfg.max_restarts = std::stoi(get("max_restarts", "0"));
  cfg.launcher_version = DDP_LAUNCH_VERSION;
  const double read_timeout_s = std::stod(get("read_timeout", "60"));
  // A c10d store silent for longer than the keep-alive timeout is gone, as
  // a node would be: its host died without closing the connection (power,
  // network). Every node then ends within that time, not read_timeout.
  const auto store_timeout =
      std::min(ms(read_timeout_s), ms(cfg.keep_alive_interval_s * cfg.keep_alive_max_attempt));
  char hn[256] = {};
  ::gethostname(hn, sizeof(hn) - 1);
  cfg.hostname = hn;
  Commands in;
  // The rendezvous waits in the store (answered when the key is set) and
  // calls idle between two waits: look at stdin without waiting (EOF: the
  // launcher is gone).
  // TCPStore clients (torchrun nodes) the store saw, from its thread.
  TcpStoreClients torchrun_nodes;
  std::unique_ptr<ddp::rdzv::StoreServer> server;
  std::unique_ptr<ddp::rdzv::Store> store;
  const bool etcd = get("backend", "c10d") == "etcd-v3";
  if (etcd) {
    cfg.endpoint = get("endpoints", cfg.endpoint);
    try {
      store = std::make_unique<ddp::rdzv::EtcdStore>(cfg.endpoint, std::min(ms(cfg.join_timeout_s), kFirstAnswer),
                                                     ms(read_timeout_s));
    } catch (const std::exception& e) {
      say(lines::format_error(etcd_unreachable(cfg, e)));
      return 1;
    }
  }
  if (!etcd) try {
    const std::string is_host = get("is_host", "auto");
    if (free_port_store && !can_host(host, port)) {
      say(lines::format_error("rendezvous at " + cfg.endpoint + " (rdzv_id " + cfg.run_id + "): port 0 means this node hosts the "
          "store on a free port, but " + host + " is not an address of this machine; give --rdzv_endpoint "
          "localhost:0, or a fixed port of the node that hosts the store"));
      return 1;
    }
    if (free_port_store || is_host == "1" || (is_host == "auto" && can_host(host, port))) {
      raise_open_files();
      try {
        server = std::make_unique<ddp::rdzv::StoreServer>(
            port, DDP_LAUNCH_VERSION, ddp::rdzv::Caps{},
            [&torchrun_nodes, &cfg](const std::string& address, const char* torch) {
              torchrun_nodes.saw(address, torch, cfg);
            });
        cfg.hosts_store = true;
      } catch (const std::exception&) {
        if (free_port_store) throw;  // nobody else hosts it
        // Another agent on this machine hosts it (several launchers on one
        // host): be its client, as torchrun's agents are.
      }
      if (free_port_store) {
        port = server->port();  // messages name the port the kernel gave
        cfg.endpoint = endpoint_of(port);
      }
    }
    if (!server) {
      // Wait for the host's store to listen (it may start later than this
      // node), then connect with a short timeout: a store that accepts the
      // connection but does not answer the hello speaks another protocol,
      // and waiting for the join timeout would not change that.
      // A name the resolver says does not exist ends the wait at once; a
      // temporary failure (EAI_AGAIN) is retried, and named if it was last.
      const auto deadline = Clock::now() + ms(cfg.join_timeout_s);
      std::string resolver_error;
      while (!accepts(host, port)) {
        if (const std::string no_name = ddp::host_resolve_error(host, &resolver_error); !no_name.empty()) {
          say(lines::format_error("rendezvous at " + cfg.endpoint + " (rdzv_id " + cfg.run_id + "): the host " + host +
              " does not resolve (" + no_name + "); give the node that hosts the rendezvous as an IP address or a "
              "name this machine resolves"));
          return 1;
        }
        if (Clock::now() >= deadline)
          throw std::runtime_error(resolver_error.empty() ? "nothing accepts connections at " + cfg.endpoint
                                                          : "the host " + host + " did not resolve (the resolver's "
                                                            "last answer: " + resolver_error + ")");
        if (!in.wait(100)) return 0;
      }
    }
    try {
      store = std::make_unique<ddp::rdzv::StoreClient>(host, port, std::min(ms(cfg.join_timeout_s), kFirstAnswer),
                                                       store_timeout, DDP_LAUNCH_VERSION);
    } catch (const ddp::rdzv::ForeignStore& e) {
      say(lines::format_error(foreign_store(cfg, e)));
      return 1;
    }
  } catch (const std::exception& e) {
    say(lines::format_error("rendezvous at " + cfg.endpoint + " (rdzv_id " + cfg.run_id + "): no store could be reached within " +
        get("join_timeout", "600") + " s (join_timeout); check that --rdzv_endpoint names a node that runs ddp-launch "
        "and that its port is open: " + e.what()));
    return 1;
  }

  cfg.local_addr = get("local_addr", "");
  // etcd: the address that reaches its first member.
  if (cfg.local_addr.empty() && etcd) {
    const auto first = ddp::rdzv::EtcdGateway::parse_members(cfg.endpoint).front();
    cfg.local_addr = route_address(first.host, first.port);
  }
  if (cfg.local_addr.empty()) cfg.local_addr = route_address(host, port);
  if (cfg.local_addr.empty()) cfg.local_addr = cfg.hostname;

  // join's port: the workers' store the launcher has bound for the round
  // (workers_store.h), published when this node is node rank 0; without
  // one (an older launcher), a free port for the workers' rank 0 to bind.
  int join_port = 0;
  ddp::rdzv::Rendezvous rz(*store, cfg, [&join_port] { return join_port > 0 ? join_port : free_port(); });
  // Between two store waits: a torchrun node the store saw, and stdin
  // without waiting (EOF: the launcher is gone).
  auto idle = [&](int) {
    while (auto who = torchrun_nodes.next()) rz.tcpstore_client(*who);
    return in.wait(0);
  };
  bool running = false;
  auto report = [&](const ddp::rdzv::Stop& s) {
    if (s.kind == ddp::rdzv::Stop::Abort) say(lines::format_abort(s.reason));
    else say(lines::format_restart(s.counted, s.reason));
    running = false;
  };
  Clock::time_point next_tick = Clock::now();
  try {
    while (true) {
      while (auto line = in.next()) {
        const lines::CommandLine c = lines::parse_command(*line);
        if (c.command == lines::Command::Join) {
          join_port = lines::join_port(c.arg);
          try {
            say(lines::format_round(rz.join(idle)));
            running = true;
            next_tick = Clock::now() + std::chrono::milliseconds(rz.tick_ms());
          } catch (const ddp::rdzv::RendezvousError& e) {
            say(lines::format_error(e.what()));
          } catch (const ddp::rdzv::SpareNotNeeded& e) {
            say(lines::format_finished(e.what()));
          }
        } else if (c.command == lines::Command::Fail) {
          report(rz.fail(c.arg));
        } else if (c.command == lines::Command::Abort) {
          rz.abort(c.arg, idle);
          running = false;
          say(lines::format_aborted());
        } else if (c.command == lines::Command::Done) {
          running = false;
          say(lines::format_finished(rz.done(idle)));
        } else if (c.command == lines::Command::Recover) {
          std::istringstream args(c.arg);
          int budget = 0, rank = -1;
          if (!(args >> budget >> rank) || rank < 0) {
            say(lines::format_recovery_refused(false, 0, "the launcher's recover line '" + c.arg + "' is not one"));
          } else if (!running) {
            say(lines::format_recovery_refused(false, 0, "the round is over"));
          } else {
            const auto t = rz.recover(budget, rank);
            say(t.granted ? lines::format_recovery(t.generation, t.used)
                          : lines::format_recovery_refused(t.used_up, t.used, t.refusal));
          }
        } else if (c.command == lines::Command::Recovered) {
          if (running && c.arg == "void") {
            rz.cancel_recovery();
          } else if (running) {
            try {
              rz.recovered(std::stoull(c.arg));
            } catch (const std::logic_error&) {  // not a number: not ours to act on
            }
          }
        } else if (c.command == lines::Command::Steps) {
          if (running) say(lines::format_job_steps(rz.share_steps(c.arg)));
        } else if (c.command == lines::Command::Quit) {
          return 0;
        }
      }
      if (in.eof()) return 0;
      while (auto who = torchrun_nodes.next()) rz.tcpstore_client(*who);
      if (running && Clock::now() >= next_tick) {
        if (auto s = rz.tick(in.silent_s())) report(*s);
        // Another node's in-place recovery, read by the tick itself.
        if (auto p = rz.peer_recovery(); p && running)
          say(lines::format_peer_recovery(p->generation, p->used, p->rank, p->node));
        next_tick = Clock::now() + std::chrono::milliseconds(rz.tick_ms());
        continue;
      }
      int wait_ms = -1;
      if (running)
        wait_ms = static_cast<int>(std::max<long long>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now()).count()));
      in.wait(wait_ms);
    }
  } catch (const ddp::rdzv::StoreRefused& e) {
    // The store is up and answered: what it holds is wrong, not its host.
    say(lines::format_error("rendezvous at " + cfg.endpoint + " (rdzv_id " + cfg.run_id + "): the store refused a "
        "request: " + e.what() +
        "; ddp-launch nodes write far less and only numbers where one is added to: another program may have written "
        "to the rendezvous store; start the job with another --rdzv_id"));
    return 1;
  } catch (const std::exception& e) {
    if (etcd) {
      say(lines::format_error("the etcd cluster at " + cfg.endpoint + " (rdzv_id " + cfg.run_id +
          ") stopped answering: " + e.what() + "; a cluster of 2F+1 members outlives F of them: check that a "
          "majority runs"));
      return 1;
    }
    // The host is the c10d rendezvous' single point of failure: say which
    // one, and what removes it.
    const auto* lost = dynamic_cast<const ddp::rdzv::StoreLost*>(&e);
    say(lines::format_error("the rendezvous store at " + cfg.endpoint + " stopped answering (" +
        (cfg.hosts_store ? std::string("this node hosts it")
                         : "its host " + host + " is down, or its launcher or rendezvous helper exited") +
        "): " + (lost ? lost->detail : std::string(e.what())) + "; the c10d rendezvous host is a single point of failure: --rdzv_backend etcd-v3 "
        "keeps the rendezvous in an etcd cluster that outlives any one node"));
    return 1;
  }
}
