#include "ddp/common/parse.h"
#include "ddp/launcher/config/options.h"

#include <sstream>

namespace ddp::launcher {

void parse_rdzv_endpoint(const std::string& text, const std::string& given_as, RdzvOptions& r) {
  std::string host = text, port;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos)
      throw UsageError(given_as + " " + text + ": no ']' after the IPv6 address; write it as [ADDRESS]:PORT");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':')
        throw UsageError(given_as + " " + text + ": expected ':PORT' after ']'; write it as [ADDRESS]:PORT");
      port = text.substr(close + 2);
    }
  } else if (const auto colon = text.find(':'); colon != std::string::npos && text.find(':', colon + 1) == std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }  // more than one ':' without brackets: a bare IPv6 address, default port
  if (host.empty())
    throw UsageError(given_as + " " + text + ": no host; give HOST[:PORT] of the node that hosts the rendezvous");
  r.host = host;
  r.port_given = !port.empty();
  // 0: a free port (check_free_port says where that works).
  if (!port.empty()) r.port = static_cast<int>(usage_checked([&] { return parse_int(port, given_as + " port", 0, 65535); }));
}

void parse_etcd_endpoints(const std::string& text, const std::string& given_as, RdzvOptions& r) {
  std::istringstream in(text);
  std::string item, all;
  RdzvOptions first;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    RdzvOptions m;
    m.port = 2379;  // etcd's client port
    parse_rdzv_endpoint(item, given_as + " member", m);
    if (m.port_given && m.port == 0)
      throw UsageError(given_as + " " + item + ": port 0 names no etcd member; give each member's client port "
                       "(HOST:2379,...)");
    if (all.empty()) first = m;
    all += (all.empty() ? "" : ",") + (m.host.find(':') != std::string::npos ? "[" + m.host + "]" : m.host) + ":" +
           std::to_string(m.port);
  }
  if (all.empty())
    throw UsageError(given_as + " '" + text + "': no etcd member; give HOST[:PORT],HOST[:PORT],... (port default 2379)");
  r.endpoints = all;
  r.host = first.host;
  r.port = first.port;
  r.port_given = true;
}

void parse_rdzv_conf(const std::string& text, const std::string& given_as, RdzvOptions& r) {
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw UsageError(given_as + ": '" + item + "' is not KEY=VALUE; write e.g. join_timeout=900,last_call_timeout=10");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    const std::string what = given_as + " " + k;
    auto positive = [&] {
      const double s = usage_checked([&] { return parse_seconds(v, what); });
      if (s <= 0) throw UsageError(what + "=" + v + ": must be more than 0 seconds");
      return s;
    };
    if (k == "join_timeout") r.join_timeout_s = positive();
    else if (k == "last_call_timeout") r.last_call_timeout_s = usage_checked([&] { return parse_seconds(v, what); });
    else if (k == "close_timeout") r.close_timeout_s = positive();
    else if (k == "read_timeout" || k == "timeout") r.read_timeout_s = positive();
    else if (k == "keep_alive_interval") r.keep_alive_interval_s = positive();
    else if (k == "keep_alive_max_attempt")
      r.keep_alive_max_attempt = static_cast<int>(usage_checked([&] { return parse_int(v, what, 1, 1000000); }));
    else if (k == "is_host") r.is_host = usage_checked([&] { return parse_bool(v, what); }) ? "1" : "0";
    else
      throw UsageError(given_as + ": unknown key '" + k +
                       "'; known keys: join_timeout, last_call_timeout, close_timeout, read_timeout (or timeout), "
                       "keep_alive_interval, keep_alive_max_attempt, is_host");
  }
}

}  // namespace ddp::launcher
