#pragma once
// The one way ddp-launch's TCP servers (the rendezvous store, the workers'
// store) listen: on every address of this machine at a port, IPv6 and IPv4
// (dual stack) where the machine has IPv6, else IPv4 alone. Header-only, so
// only the servers that use Boost.Asio see it.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>

namespace ddp {

// Opens, binds and listens `acceptor` at `port` (0: a free one the kernel
// picks). Throws boost::system::system_error; a port in use
// (address_in_use) is never retried on IPv4.
inline void listen_on_every_address(boost::asio::ip::tcp::acceptor& acceptor, unsigned short port) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  auto listen = [&](const tcp::endpoint& at, bool dual_stack) {
    acceptor.open(at.protocol());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    if (dual_stack) acceptor.set_option(asio::ip::v6_only(false));
    acceptor.bind(at);
    acceptor.listen(asio::socket_base::max_listen_connections);
  };
  try {
    listen(tcp::endpoint(asio::ip::address_v6::any(), port), true);
  } catch (const boost::system::system_error& e) {
    if (e.code() == asio::error::address_in_use) throw;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    listen(tcp::endpoint(asio::ip::address_v4::any(), port), false);
  }
}

}  // namespace ddp
