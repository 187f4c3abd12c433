#pragma once
// cgroup v1 controllers for the launcher's scenarios that need the kernel's
// help: a freezer cgroup makes a real unkillable process (a frozen task is
// in D state and SIGKILL waits until it is thawed), a memory cgroup with a
// small limit makes the OOM killer act. Each is a fresh child cgroup made
// here and removed (thawed first, its processes moved out) in every path,
// failures included. ok() is false where the machine does not allow it
// (no v1 hierarchy, not writable): the case then skips.

#include "test_support.h"

#include <cerrno>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::test {

class ChildCgroup {
 public:
  // parent: an existing cgroup directory (e.g. /sys/fs/cgroup/freezer).
  explicit ChildCgroup(const std::string& parent) : parent_(parent) {
    std::random_device rd;
    std::ostringstream name;
    name << parent << "/ddp-test-" << std::hex << rd();
    if (::mkdir(name.str().c_str(), 0755) == 0) dir_ = name.str();
  }
  virtual ~ChildCgroup() { remove(); }
  ChildCgroup(const ChildCgroup&) = delete;
  ChildCgroup& operator=(const ChildCgroup&) = delete;

  bool ok() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  // Writes value to the control file; false when the kernel refused it.
  bool set(const std::string& name, const std::string& value) const {
    std::ofstream f(file(name));
    f << value << std::flush;
    return static_cast<bool>(f);
  }
  bool add(pid_t pid) const { return set("cgroup.procs", std::to_string(pid)); }
  bool empty() const { return read_file(file("cgroup.procs")).empty(); }

  // Waits (bounded) until no process is left, moves any that stay to the
  // parent, then removes the directory.
  void remove() {
    if (dir_.empty()) return;
    before_remove();
    wait_until([&] { return empty(); }, 5);
    std::istringstream left(read_file(file("cgroup.procs")));
    for (std::string pid; std::getline(left, pid);) std::ofstream(parent_ + "/cgroup.procs") << pid << std::flush;
    wait_until([&] { return ::rmdir(dir_.c_str()) == 0 || errno == ENOENT; }, 5);
    dir_.clear();
  }

 protected:
  virtual void before_remove() {}

 private:
  std::string parent_;
  std::string dir_;
};

// Freezes its processes; thawed before removal, so what SIGKILL waited for dies.
class FreezerCgroup : public ChildCgroup {
 public:
  static constexpr const char* kRoot = "/sys/fs/cgroup/freezer";
  FreezerCgroup() : ChildCgroup(kRoot) {}
  ~FreezerCgroup() override { remove(); }
  bool freeze() const { return set("freezer.state", "FROZEN"); }
  bool thaw() const { return set("freezer.state", "THAWED"); }

 protected:
  void before_remove() override { thaw(); }
};

// The memory cgroup of this process (v1), "" when there is none.
inline std::string own_memory_cgroup_v1() {
  std::istringstream in(read_file("/proc/self/cgroup"));
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find(",memory,") != std::string::npos)
      return "/sys/fs/cgroup/memory" + (line.substr(b + 1) == "/" ? "" : line.substr(b + 1));
  }
  return "";
}

}  // namespace ddp::test
