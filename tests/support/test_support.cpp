#include "test_support.h"

#include "ddp/common/free_port.h"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <set>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace ddp::test {
namespace fs = std::filesystem;

std::string bin_path(const std::string& name) { return std::string(DDP_BIN_DIR) + "/" + name; }
std::string source_path(const std::string& rel) { return std::string(DDP_SOURCE_DIR) + "/" + rel; }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ddp-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

static int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

static int shell_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

Proc::Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           const std::string& cwd) {
  if (argv.empty()) throw std::invalid_argument("Proc: empty argv");
  char tmpl[] = "/tmp/ddp-test-out-XXXXXX";
  int out_fd = ::mkstemp(tmpl);
  if (out_fd < 0) throw std::runtime_error("mkstemp failed");
  out_path_ = tmpl;

  // Build everything the child needs before fork (no allocation after it).
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) {
    if (v == "\x01unset") merged.erase(k);
    else merged[k] = v;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::execvpe(args[0], args.data(), envp.data());
    ::_exit(errno == ENOENT ? 127 : 126);
  }
  ::close(out_fd);
  pidfd_ = open_pidfd(pid_);
}

Proc::~Proc() {
  if (!code_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  ::unlink(out_path_.c_str());
}

std::optional<int> Proc::wait(double timeout_s) {
  if (code_) return code_;
  struct pollfd p{pidfd_, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left < 0) left = 0;
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return std::nullopt;
    break;
  }
  int st = 0;
  if (::waitpid(pid_, &st, 0) == pid_) code_ = shell_code(st);
  return code_;
}

bool Proc::running() {
  if (code_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    code_ = shell_code(st);
    return false;
  }
  return true;
}

void Proc::signal(int sig) {
  if (!code_) ::kill(pid_, sig);
}

std::string Proc::output() const { return read_file(out_path_); }

ProcResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               double timeout_s, const std::string& cwd) {
  Proc p(argv, env, cwd);
  ProcResult r;
  auto code = p.wait(timeout_s);
  if (!code) {
    r.timed_out = true;
    p.signal(SIGKILL);
    p.wait(10);
  } else {
    r.exit_code = *code;
  }
  r.output = p.output();
  return r;
}

bool wait_until(const std::function<bool()>& cond, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int free_port() {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  static std::set<int> handed_out;  // this process's earlier picks: a test asks for two ports and gets two
  const int port = ddp::pick_free_port([](int p) { return handed_out.count(p) == 0; });
  handed_out.insert(port);
  return port;
}

bool can_listen_on_any(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return ok;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text, bool executable) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  if (executable) ::chmod(path.c_str(), 0755);
}

bool pid_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  auto rp = line.rfind(')');
  if (rp == std::string::npos || rp + 2 >= line.size()) return false;
  char state = line[rp + 2];
  return state != 'Z' && state != 'X';
}

namespace {

void set_or_unset(const std::string& name, const std::optional<std::string>& value) {
  if (value) ::setenv(name.c_str(), value->c_str(), 1);
  else ::unsetenv(name.c_str());
}

}  // namespace

ScopedEnv::ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
  for (const auto& [name, value] : vars) {
    const char* old = std::getenv(name.c_str());
    saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    set_or_unset(name, value);
  }
}

ScopedEnv::~ScopedEnv() {
  for (const auto& [name, value] : saved_) set_or_unset(name, value);
}

}  // namespace ddp::test
