#include "source/server/dns_refresher.h"

#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "source/common/assert.h"
#include "source/common/logger.h"

namespace rpx {
namespace {

DnsResolver::Family QueryFamily(DnsCluster::Family f) {
  switch (f) {
    case DnsCluster::Family::kV4Only:
      return DnsResolver::Family::kV4;
    case DnsCluster::Family::kV6Only:
      return DnsResolver::Family::kV6;
    default:
      // AUTO and V4_PREFERRED take both and put the preferred family first; ALL keeps both.
      return DnsResolver::Family::kAny;
  }
}

// What makes two host sets the same for publishing: every host's address and its place in the
// load balancing (weight, priority, locality).
using HostKey = std::tuple<std::string, uint32_t, uint32_t, std::string, uint32_t>;

std::vector<HostKey> Keys(const HostSet& hosts, bool ordered) {
  std::vector<HostKey> keys;
  keys.reserve(hosts.size());
  for (const auto& h : hosts) {
    keys.emplace_back(h->address.ToString(), h->weight, h->priority, h->locality,
                      h->locality_weight);
  }
  // STRICT_DNS: the same addresses in another order (DNS servers rotate their answers) are the
  // same hosts. LOGICAL_DNS has one host; order is kept anyway.
  if (!ordered) std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace

DnsRefresher::DnsRefresher(Dispatcher& dispatcher, std::shared_ptr<DnsResolver> resolver,
                           DnsCluster config,
                           std::function<void(std::shared_ptr<const HostSet>)> publish,
                           std::function<void()> first_round_done)
    : dispatcher_(dispatcher),
      resolver_(std::move(resolver)),
      config_(std::move(config)),
      publish_(std::move(publish)),
      first_round_done_(std::move(first_round_done)),
      targets_(config_.targets.size()),
      published_(std::make_shared<const HostSet>()),
      random_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
              reinterpret_cast<uintptr_t>(this)) {
  RPX_ASSERT(resolver_);
  timer_ = dispatcher_.CreateTimer([this] { StartRound(); });
}

DnsRefresher::~DnsRefresher() {
  for (auto& t : targets_) {
    if (t.query) t.query->Cancel();
  }
}

void DnsRefresher::Start() { StartRound(); }

void DnsRefresher::StartRound() {
  RPX_ASSERT(outstanding_ == 0);
  ++stats_.update_attempt;
  round_failed_ = false;
  next_delay_ms_ = 0;
  outstanding_ = targets_.size();
  if (outstanding_ == 0) {  // BuildCluster refuses such a cluster; nothing to wait for anyway
    FinishRound();
    return;
  }
  for (size_t i = 0; i < targets_.size(); ++i) {
    targets_[i].ok = false;
    targets_[i].query = resolver_->Resolve(
        config_.targets[i].hostname, QueryFamily(config_.family),
        [this, i](const absl::Status& status, std::vector<DnsResolver::Answer> answers) {
          OnResolved(i, status, std::move(answers));
        });
  }
}

void DnsRefresher::OnResolved(size_t i, const absl::Status& status,
                              std::vector<DnsResolver::Answer> answers) {
  Target& t = targets_[i];
  const DnsCluster::Target& target = config_.targets[i];
  t.query = nullptr;  // dead once its callback runs
  std::vector<SocketAddress> addrs;
  uint64_t ttl_ms = 0;
  for (const auto& a : answers) {
    using Family = DnsCluster::Family;
    if (config_.family == Family::kV4Only && a.address.family() != AF_INET) continue;
    if (config_.family == Family::kV6Only && a.address.family() != AF_INET6) continue;
    auto with_port = SocketAddress::FromIpPort(a.address.Ip(), target.port);
    if (!with_port.ok()) continue;
    addrs.push_back(*with_port);
    uint64_t ms = static_cast<uint64_t>(a.ttl_s) * 1000;
    if (ms && (ttl_ms == 0 || ms < ttl_ms)) ttl_ms = ms;
  }
  if (config_.family == DnsCluster::Family::kAuto ||
      config_.family == DnsCluster::Family::kV4Preferred) {
    int first = config_.family == DnsCluster::Family::kAuto ? AF_INET6 : AF_INET;
    std::stable_partition(addrs.begin(), addrs.end(),
                          [first](const SocketAddress& a) { return a.family() == first; });
  }
  if (status.ok() && !addrs.empty()) {
    t.ok = true;
    t.addresses = std::move(addrs);
    t.ttl_ms = ttl_ms;
  } else {
    round_failed_ = true;
    RPX_LOG(kWarn, "cluster '%s': %s; keeping its %zu last known address%s", config_.cluster,
            status.ok() ? "'" + target.hostname + "' has no address of the family asked for"
                        : std::string(status.message()),
            t.addresses.size(), t.addresses.size() == 1 ? "" : "es");
  }
  RPX_ASSERT(outstanding_ > 0);
  if (--outstanding_ == 0) FinishRound();
}

std::shared_ptr<HostSet> DnsRefresher::BuildHosts() const {
  auto hosts = std::make_shared<HostSet>();
  hosts->overprovisioning_factor = config_.overprovisioning_factor;
  hosts->weighted_priority_health = config_.weighted_priority_health;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const DnsCluster::Target& target = config_.targets[i];
    for (const auto& a : targets_[i].addresses) {
      auto h = std::make_shared<Host>();
      h->address = a;
      h->hostname = target.hostname;
      h->weight = target.weight;
      h->priority = target.priority;
      h->locality = target.locality;
      h->locality_weight = target.locality_weight;
      h->AllocateStats(config_.stats_slots);
      hosts->push_back(std::move(h));
      if (config_.logical) return hosts;  // one logical host: the newest answer's first address
    }
  }
  return hosts;
}

void DnsRefresher::FinishRound() {
  bool failed = round_failed_;
  if (failed) {
    ++stats_.update_failure;
  } else {
    ++stats_.update_success;
  }
  auto next = BuildHosts();
  bool changed = Keys(*next, config_.logical) != Keys(*published_, config_.logical);
  if (changed) {
    CarryHostStats(published_.get(), *next);
    published_ = next;
    RPX_LOG(kInfo, "cluster '%s': %zu host%s after DNS resolution", config_.cluster, next->size(),
            next->size() == 1 ? "" : "s");
    publish_(std::move(next));
  } else if (!failed) {
    ++stats_.update_no_rebuild;
  }
  next_delay_ms_ = NextDelayMs(failed);
  timer_->Enable(next_delay_ms_);
  if (rounds_done_++ == 0 && first_round_done_) first_round_done_();
}

uint64_t DnsRefresher::NextDelayMs(bool failed) {
  if (failed && config_.failure_base_ms) {
    // Envoy's JitteredExponentialBackOffStrategy: a random delay below an interval that starts
    // at base_interval and doubles with each failure in a row, up to max_interval.
    uint64_t interval = config_.failure_base_ms;
    for (uint32_t n = 0; n < failures_in_a_row_ && interval < config_.failure_max_ms; ++n) {
      interval *= 2;
    }
    interval = std::min(interval, std::max(config_.failure_max_ms, config_.failure_base_ms));
    ++failures_in_a_row_;
    return std::max<uint64_t>(1, random_.Next() % interval);
  }
  failures_in_a_row_ = 0;
  if (failed || !config_.respect_dns_ttl) return config_.refresh_ms;
  // The soonest any target's answer expires; a target without a TTL (0, or /etc/hosts) counts
  // as dns_refresh_rate, as in Envoy.
  uint64_t delay = 0;
  for (const auto& t : targets_) {
    uint64_t d = t.ttl_ms ? t.ttl_ms : config_.refresh_ms;
    if (delay == 0 || d < delay) delay = d;
  }
  return delay ? delay : config_.refresh_ms;
}

}  // namespace rpx
