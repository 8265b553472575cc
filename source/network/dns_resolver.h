// DnsResolver: asynchronous name resolution on an event loop, as Envoy's Network::DnsResolver.
// CaresDnsResolver drives c-ares through a Dispatcher: its sockets are FileEvents and its
// retransmission deadlines one Timer, so a resolution never blocks the loop and needs no thread.
//
// Contract:
// - Thread: every method, and every callback, on the dispatcher's thread (the main thread in
//   rpx). The resolver never calls back from inside Resolve(): an answer known at once (an IP
//   literal, a name in /etc/hosts) is delivered on a later loop iteration.
// - Ownership: the caller owns the resolver. Resolve() returns a Query owned by the resolver;
//   the caller may hold the pointer until the callback runs or until it calls Cancel(),
//   whichever comes first, and must not use it afterwards.
// - Cancel() guarantees the callback is not called (and releases it at once, with whatever it
//   captured). Destroying the resolver cancels every query still pending; it must not be
//   destroyed from inside one of its callbacks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "source/network/address.h"

namespace rpx {

class Dispatcher;

struct DnsResolverOptions {
  // Name servers to ask (port 0: 53). Empty: those of /etc/resolv.conf.
  std::vector<SocketAddress> servers;
  bool use_tcp = false;    // every query over TCP (dns_resolver_options.use_tcp_for_dns_lookups)
  bool no_search = false;  // names are asked as they are (no_default_search_domain)
  // Per-try timeout and tries; 0: c-ares's defaults (5 s and 4 tries, each try's timeout
  // doubling). A resolution that never gets an answer ends with DeadlineExceeded.
  uint32_t timeout_ms = 0;
  uint32_t tries = 0;
};

class DnsResolver {
 public:
  enum class Family {
    kV4,   // A records only
    kV6,   // AAAA records only
    kAny,  // both, in the order the resolver returns them
  };
  struct Answer {
    SocketAddress address;  // port 0
    uint32_t ttl_s = 0;     // the record's TTL (0 for /etc/hosts entries and literals)
  };
  // `status` is OK with at least one address, or NotFound (NXDOMAIN, or no address of the
  // family asked for), DeadlineExceeded (no answer in time) or Unavailable (SERVFAIL, REFUSED,
  // a server that cannot be reached, ...), with the reason as its message.
  using Callback = std::function<void(const absl::Status& status, std::vector<Answer> answers)>;

  class Query {
   public:
    virtual void Cancel() = 0;

   protected:
    virtual ~Query() = default;
  };

  virtual ~DnsResolver() = default;
  virtual Query* Resolve(const std::string& name, Family family, Callback callback) = 0;
};

class CaresDnsResolver : public DnsResolver {
 public:
  // Fails if c-ares cannot start (no usable resolv.conf and no servers given, ...).
  static absl::StatusOr<std::unique_ptr<CaresDnsResolver>> Create(
      Dispatcher& dispatcher, const DnsResolverOptions& options);
  ~CaresDnsResolver() override;

  Query* Resolve(const std::string& name, Family family, Callback callback) override;

  // Queries started and not yet finished or cancelled (tests).
  size_t pending() const;

 private:
  class Impl;
  explicit CaresDnsResolver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rpx
