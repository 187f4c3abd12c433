#pragma once
// Whether a host name (or address) resolves, asked once of the system
// resolver (getaddrinfo, as c10d's TCPStore asks it). Shared by the worker
// runtime, which checks MASTER_ADDR before it creates the TCPStore, and the
// launcher, which checks the static rendezvous address before it starts any
// worker. Owns nothing; never retries.

#include <string>

namespace ddp {

// "" when host resolves, or when the resolver's failure is temporary
// (EAI_AGAIN: a DNS server that does not answer now may answer later, and
// c10d's connect keeps trying until its timeout). Otherwise the resolver's
// own words (gai_strerror, e.g. "Name or service not known"). A temporary
// failure's words go to `*temporary` when given ("" when there was none), so
// a caller that keeps trying can name the last one when it gives up.
std::string host_resolve_error(const std::string& host, std::string* temporary = nullptr);

}  // namespace ddp
