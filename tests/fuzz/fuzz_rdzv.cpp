// libFuzzer target: --rdzv_endpoint and --rdzv_conf (rdzv_options.cpp).
// Input: the endpoint text, then after the first NUL (if any) the conf text.
// Bad input may only end in a UsageError; a parsed endpoint has a host and a
// port from 0 to 65535 (0: a free port for a one-node job, issue 23 item 13),
// parsed timeouts are finite and not negative.

#include "ddp/launcher/config/options.h"
#include "fuzz_input.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace ddp::launcher;

namespace {
[[noreturn]] void fail(const char* what, const std::string& input) {
  std::fprintf(stderr, "%s for '%s'\n", what, input.c_str());
  std::abort();
}
bool sane_seconds(double s) { return std::isfinite(s) && s >= 0; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = ddp::fuzz::split_nul(data, size);
  const std::string endpoint = parts.empty() ? "" : parts[0];
  try {
    RdzvOptions r;
    parse_rdzv_endpoint(endpoint, "--rdzv_endpoint", r);
    if (r.host.empty()) fail("an empty host and no error", endpoint);
    if (r.port < 0 || r.port > 65535) fail("a port outside 0..65535", endpoint);
  } catch (const UsageError&) {
  }
  if (parts.size() > 1) {
    try {
      RdzvOptions r;
      parse_rdzv_conf(parts[1], "--rdzv_conf", r);
      for (double s : {r.join_timeout_s, r.last_call_timeout_s, r.close_timeout_s, r.read_timeout_s,
                       r.keep_alive_interval_s})
        if (!sane_seconds(s)) fail("a timeout that is negative or not finite", parts[1]);
      if (r.keep_alive_max_attempt < 1) fail("keep_alive_max_attempt below 1", parts[1]);
      if (r.is_host != "auto" && r.is_host != "0" && r.is_host != "1") fail("is_host not auto/0/1", parts[1]);
    } catch (const UsageError&) {
    }
  }
  return 0;
}
