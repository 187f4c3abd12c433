#include "reference_python.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "test_support.h"

#ifndef DDP_REFERENCE_PYTHON_DEFAULT
#define DDP_REFERENCE_PYTHON_DEFAULT "/usr/bin/python3"
#endif
#ifndef DDP_LIBTORCH_VERSION
#define DDP_LIBTORCH_VERSION ""
#endif

namespace ddp::test {
namespace {

struct Found {
  std::optional<std::string> python;
  std::string problem;
};

// "2.11.0" -> "2.11."; "" when the build has no LibTorch.
std::string major_minor_prefix(const std::string& version) {
  auto dot = version.find('.');
  if (dot == std::string::npos) return "";
  auto dot2 = version.find('.', dot + 1);
  return dot2 == std::string::npos ? version + "." : version.substr(0, dot2 + 1);
}

Found search() {
  std::string candidate = DDP_REFERENCE_PYTHON_DEFAULT;
  std::string source = "chosen by CMake (-DDDP_REFERENCE_PYTHON)";
  if (const char* p = std::getenv("DDP_REFERENCE_PYTHON"); p && *p) {
    candidate = p;
    source = "from $DDP_REFERENCE_PYTHON";
  }
  const std::string libtorch = DDP_LIBTORCH_VERSION;
  // A marker, because the output also holds whatever torch warns on stderr.
  auto r = run({candidate, "-c", "import torch, torch.distributed; print('REFTORCH', torch.__version__)"}, {}, 120);
  std::string version;
  if (auto at = r.output.find("REFTORCH "); at != std::string::npos) {
    std::istringstream in(r.output.substr(at + 9));
    in >> version;
  }
  const std::string what = "reference python " + candidate + " (" + source + ")";
  if (r.exit_code != 0 || version.empty()) {
    return {std::nullopt, what + " cannot import torch (exit " + std::to_string(r.exit_code) +
                              "); install python3-torch for Debian's LibTorch, run scripts/install-torch2 for 2.x, "
                              "or set DDP_REFERENCE_PYTHON"};
  }
  const std::string want = major_minor_prefix(libtorch);
  if (!want.empty() && version.rfind(want, 0) != 0) {
    return {std::nullopt, what + " has torch " + version + " but the tests link LibTorch " + libtorch +
                              "; set DDP_REFERENCE_PYTHON to a python3 with torch " + libtorch};
  }
  return {candidate, ""};
}

const Found& found() {
  static const Found f = search();
  return f;
}

}  // namespace

std::optional<std::string> reference_python() { return found().python; }
std::string reference_python_problem() { return found().problem; }

bool reference_python_required() {
  const char* v = std::getenv("DDP_REQUIRE_REFERENCE_PYTHON");
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace ddp::test
