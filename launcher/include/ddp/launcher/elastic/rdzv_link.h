#pragma once
// What the launcher's loops need of the c10d rendezvous helper: tell it a
// line, read the lines it said, keep it alive with pings. RdzvAgent (the
// real helper, rdzv_agent.h) is one through AgentLink; a test gives the
// attempt's rendezvous feature a fake one, with no helper process.

#include "ddp/launcher/elastic/rdzv_agent.h"

#include <string>
#include <vector>

namespace ddp::launcher {

class RdzvLink {
 public:
  virtual ~RdzvLink() = default;
  // One command line of the protocol (ddp/rdzv/agent_lines.h).
  virtual void send(rdzv::lines::Command command, const std::string& arg = "") = 0;
  // Readable when the helper said something; read() then takes its lines.
  virtual int fd() const = 0;
  virtual std::vector<RdzvEvent> read() = 0;
  virtual bool gone() const = 0;
  virtual int ms_to_ping() const = 0;
  virtual void ping_if_due() = 0;
};

// The real helper.
class AgentLink final : public RdzvLink {
 public:
  explicit AgentLink(RdzvAgent& agent) : agent_(agent) {}
  void send(rdzv::lines::Command command, const std::string& arg = "") override { agent_.send(command, arg); }
  int fd() const override { return agent_.fd(); }
  std::vector<RdzvEvent> read() override { return agent_.read(); }
  bool gone() const override { return agent_.gone(); }
  int ms_to_ping() const override { return agent_.ms_to_ping(); }
  void ping_if_due() override { agent_.ping_if_due(); }

 private:
  RdzvAgent& agent_;
};

}  // namespace ddp::launcher
