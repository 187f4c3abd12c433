#pragma once
// The rendezvous store (store.h) kept in an etcd v3 cluster, for
// --rdzv_backend etcd-v3: no node hosts the store, so no node's death takes
// the rendezvous with it, and a cluster of 3 or 5 members outlives one or
// two of its own. Each request is one etcd request through EtcdGateway
// (etcd_gateway.h: its JSON gateway, failover, deadlines):
//   set        put
//   try_get    range (linearizable: a member that lost its leader answers
//              only after the election)
//   add        txn: compare the value's mod_revision read just before, put
//              the sum; retried when another node's add came first
//   compare_set txn: compare value (or create_revision 0 for absent), put;
//              else range
//   wait, get  range, then a watch from the next revision: the answer comes
//              when the key is written (push), never by polling
// Keep-alives are the rendezvous' own (rendezvous.h: heartbeat counters),
// the same on both backends, so no lease is needed; see docs/architecture.md.
// A request whose member dies after etcd applied it but before it answered
// is sent again to the next member: set and compare_set are idempotent, an
// add may then count twice (etcd's own clients share this window; a
// heartbeat counted twice is harmless, a join slot counted twice has no
// descriptor, and the round's nodes stop at read_timeout with an error).
#include "etcd_gateway.h"
#include "store.h"

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp::rdzv {

class EtcdStore final : public Store {
 public:
  // endpoints: "host[:port],..." (port default 2379). io_timeout bounds
  // each request, over every member it tries; a try at one member takes at
  // most min(io_timeout, 3 s). Contacts the cluster within first_contact:
  // throws StoreError naming each endpoint and why (down, slow), or NotEtcd.
  EtcdStore(const std::string& endpoints, std::chrono::milliseconds first_contact, std::chrono::milliseconds io_timeout);

  void set(const std::string& key, const std::string& value) override;
  // Waits for the key up to io_timeout.
  std::string get(const std::string& key) override;
  std::optional<std::string> try_get(const std::string& key) override;
  long long add(const std::string& key, long long delta) override;
  bool check(const std::string& key) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool wait(const std::string& key, std::chrono::milliseconds timeout) override;

  // Many keys in one Txn (of at most 128 operations, etcd's default
  // --max-txn-ops; more keys take more Txns). Not waiting; nullopt: absent.
  // (store.h's multi_get and multi_set, which the linear-cost rendezvous
  // adds, with defaults that ask key by key: these override them.)
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  // A key given twice is written once, with its last value (a Txn may not
  // put one key twice).
  void multi_set(const std::vector<std::pair<std::string, std::string>>& entries) override;

  std::string endpoints() const { return gw_.all(); }

 private:
  struct Read {
    std::optional<std::string> value;
    long long mod_revision = 0;
    long long revision = 0;  // the store's, at the read
  };
  Read read(const std::string& key, EtcdGateway::Clock::time_point deadline);
  EtcdGateway::Clock::time_point deadline() const;

  std::chrono::milliseconds io_timeout_;
  EtcdGateway gw_;
};

}  // namespace ddp::rdzv
