// DnsRefresher: keeps one STRICT_DNS or LOGICAL_DNS cluster's hosts following DNS, as Envoy's
// StrictDnsClusterImpl and LogicalDnsCluster do.
//
// A round resolves every target of the cluster at once (asynchronously, through a
// DnsResolver); when the last answer is in, it builds the host set:
// - STRICT_DNS: every address of every target, each with the target's weight, priority and
//   locality;
// - LOGICAL_DNS: one host, the first address of the newest answer, so new connections follow
//   the newest answer (connections already open stay where they are).
// A target whose resolution fails (NXDOMAIN, SERVFAIL, timeout, no address of the family
// asked for) keeps its last good addresses. A host set equal to the last one is not published
// again; hosts that stay keep their stats blocks (CarryHostStats).
// The next round comes after dns_refresh_rate; with respect_dns_ttl after the answer's TTL
// (the smallest over the targets; a TTL of 0 counts as dns_refresh_rate); after a failed round
// with dns_failure_refresh_rate after a jittered exponential backoff (Envoy's
// JitteredExponentialBackOffStrategy), else after dns_refresh_rate.
//
// Stats (Envoy's names, under cluster.<name>.): update_attempt (rounds started),
// update_success (rounds where every target answered), update_failure (rounds where one
// failed), update_no_rebuild (successful rounds that changed nothing).
//
// Thread: the dispatcher's (main) thread only. Ownership: the owner owns the refresher; the
// refresher shares the resolver. Destroying it cancels its queries and timer: no callback comes
// after. Neither callback may destroy the refresher.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "source/common/random.h"
#include "source/config/server_config.h"
#include "source/event/dispatcher.h"
#include "source/network/dns_resolver.h"
#include "source/upstream/cluster.h"

namespace rpx {

class DnsRefresher {
 public:
  struct Stats {
    uint64_t update_attempt = 0;
    uint64_t update_success = 0;
    uint64_t update_failure = 0;
    uint64_t update_no_rebuild = 0;
  };
  // `publish`: a new host set (never one equal to the last). `first_round_done`: once, at the
  // end of the first round, whatever its outcome (after `publish` if it published).
  DnsRefresher(Dispatcher& dispatcher, std::shared_ptr<DnsResolver> resolver, DnsCluster config,
               std::function<void(std::shared_ptr<const HostSet>)> publish,
               std::function<void()> first_round_done);
  ~DnsRefresher();
  DnsRefresher(const DnsRefresher&) = delete;
  DnsRefresher& operator=(const DnsRefresher&) = delete;

  // Starts the first round now.
  void Start();
  const Stats& stats() const { return stats_; }
  bool first_round_done() const { return rounds_done_ > 0; }
  const DnsCluster& config() const { return config_; }
  // When the next round starts, from now (ms); for tests and logs. 0 while a round runs.
  uint64_t next_delay_ms() const { return next_delay_ms_; }

 private:
  struct Target {
    DnsResolver::Query* query = nullptr;   // the round's, while it runs
    std::vector<SocketAddress> addresses;  // the last good answer, in the order used
    uint64_t ttl_ms = 0;                   // its smallest TTL (0: none given)
    bool ok = false;                       // this round's resolution succeeded
  };

  void StartRound();
  void OnResolved(size_t i, const absl::Status& status, std::vector<DnsResolver::Answer> answers);
  void FinishRound();
  std::shared_ptr<HostSet> BuildHosts() const;
  uint64_t NextDelayMs(bool failed);

  Dispatcher& dispatcher_;
  std::shared_ptr<DnsResolver> resolver_;
  DnsCluster config_;
  std::function<void(std::shared_ptr<const HostSet>)> publish_;
  std::function<void()> first_round_done_;
  std::vector<Target> targets_;
  size_t outstanding_ = 0;
  bool round_failed_ = false;
  uint64_t rounds_done_ = 0;
  uint32_t failures_in_a_row_ = 0;
  uint64_t next_delay_ms_ = 0;
  std::shared_ptr<const HostSet> published_;
  Stats stats_;
  Random random_;
  std::unique_ptr<Timer> timer_;
};

}  // namespace rpx
