#pragma once
// A TCP port for a server that another process binds a moment later (the
// workers' store: rank 0 binds MASTER_PORT after it has loaded LibTorch or
// imported torch, a second or more after the launcher chose the port).

#include <functional>

namespace ddp {

// The kernel's ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range;
// Linux's default 32768-60999 where it cannot be read): where bind(0) and
// every outgoing connect() on the machine get their ports.
struct PortRange {
  int lo = 32768, hi = 60999;
  bool contains(int port) const { return port >= lo && port <= hi; }
};
PortRange ephemeral_port_range();

// A port no server listens on now, on any address (IPv6's [::] and IPv4's
// 0.0.0.0), picked at random among the ports the kernel never hands out by
// itself: outside ephemeral_port_range(), so
// another program's connection cannot take it before the server binds it;
// and at 30000 or above, clear of ddp-launch's Slurm ports (10000 + job id %
// 20000) and torchrun's 29400 and 29500. The candidates are tried in order
// from a random one on; `usable`, when given, may refuse a candidate (a
// caller's earlier picks) before it is tried. Where that leaves under 1000
// ports, or none of 200 tried is free, the kernel's own pick (bind to port 0).
// Throws std::runtime_error when not even that works.
int pick_free_port(const std::function<bool(int)>& usable = {});

}  // namespace ddp
