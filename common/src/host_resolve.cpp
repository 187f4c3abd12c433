#include "ddp/common/host_resolve.h"

#include <netdb.h>
#include <sys/socket.h>

namespace ddp {

std::string host_resolve_error(const std::string& host, std::string* temporary) {
  if (temporary) temporary->clear();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc == 0) {
    ::freeaddrinfo(res);
    return "";
  }
  if (rc == EAI_AGAIN || rc == EAI_SYSTEM || rc == EAI_MEMORY) {  // not an answer about the name
    if (temporary) *temporary = ::gai_strerror(rc);
    return "";
  }
  return ::gai_strerror(rc);
}

}  // namespace ddp
