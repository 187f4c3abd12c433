#pragma once
// The wire between a launcher's standby process (launcher/process/standby.h)
// and the worker runtime's hook that waits in it before main
// (worker/src/standby.cpp). One AF_UNIX SOCK_SEQPACKET pair (a packet is a
// message: no framing to get wrong); the standby's end is the fd whose
// number is in DDP_STANDBY_FD.
//  1. The standby, once LibTorch is loaded and its static initializers ran:
//     "ready 1\n" (1: kProtocol).
//  2. The launcher, to make it a rank: one packet, "adopt 1\n", then
//     "fds T0 T1 ...\n", then "argv N\n" and N "ARG\0" (argv[0] first; N is
//     the standby's own argc: only the values may differ, e.g. --local_rank=1
//     for 3), then the rank's whole environment as "K=V\0" entries; the fds
//     to install at T0, T1, ... ride along by SCM_RIGHTS, in that order.
//  3. The standby: "ok\n" once every fd is at its number and the environment
//     is replaced; main() then runs as in a freshly spawned rank. Anything
//     malformed or not installable: "error <why>\n", one line on stderr, and
//     _exit(kFailedExit), never main() with half an identity.
// EOF instead of 2 (the launcher does not need it): the standby exits 0.
// Header only: the launcher and the worker share no library but this tree's
// common/ one, and these are constants.

#include <cstddef>

namespace ddp::standby {

inline constexpr const char* kFdEnvVar = "DDP_STANDBY_FD";
inline constexpr int kProtocol = 1;
inline constexpr int kFailedExit = 125;      // the standby could not take the identity it was sent
inline constexpr int kMaxFds = 64;           // fds one adoption may carry
inline constexpr size_t kMaxMessage = 192 * 1024;  // under the default socket buffer (net.core.wmem_default)

}  // namespace ddp::standby
