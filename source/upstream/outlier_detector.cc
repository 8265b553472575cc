#include "source/upstream/outlier_detector.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "source/common/assert.h"
#include "source/common/logger.h"

namespace rpx {
namespace {

const char* ReasonName(OutlierReason r) {
  switch (r) {
    case OutlierReason::kConsecutive5xx:
      return "consecutive_5xx";
    case OutlierReason::kConsecutiveGatewayFailure:
      return "consecutive_gateway_failure";
    case OutlierReason::kConsecutiveLocalOriginFailure:
      return "consecutive_local_origin_failure";
    case OutlierReason::kSuccessRate:
      return "success_rate";
    case OutlierReason::kFailurePercentage:
      return "failure_percentage";
  }
  return "?";
}

// Adds one to a streak; true when it reaches `threshold` (exactly: one report per streak).
bool Bump(std::atomic<uint32_t>& streak, uint32_t threshold) {
  return threshold > 0 && streak.fetch_add(1, std::memory_order_relaxed) + 1 == threshold;
}

}  // namespace

void CountOutcome(const ClusterInfo& cluster, const Host& host, int status) {
  RPX_ASSERT(cluster.outlier);
  const OutlierConfig& c = *cluster.outlier;
  auto notify = [&](OutlierReason r) { cluster.outlier_sink->Notify(host.address, r); };
  if (status == 0) {
    if (c.split_external_local_origin_errors) {
      if (Bump(host.consecutive_local_origin_failure, c.consecutive_local_origin_failure)) {
        notify(OutlierReason::kConsecutiveLocalOriginFailure);
      }
      return;
    }
    status = 503;  // Envoy counts a local-origin failure as a 503 unless told to split them
  } else if (c.split_external_local_origin_errors) {
    host.consecutive_local_origin_failure.store(0, std::memory_order_relaxed);  // it answered
  }
  if (status < 500) {
    host.consecutive_5xx.store(0, std::memory_order_relaxed);
    host.consecutive_gateway_failure.store(0, std::memory_order_relaxed);
    return;
  }
  if (Bump(host.consecutive_5xx, c.consecutive_5xx)) notify(OutlierReason::kConsecutive5xx);
  if (status >= 502 && status <= 504) {
    if (Bump(host.consecutive_gateway_failure, c.consecutive_gateway_failure)) {
      notify(OutlierReason::kConsecutiveGatewayFailure);
    }
  } else {
    host.consecutive_gateway_failure.store(0, std::memory_order_relaxed);
  }
}

OutlierDetector::OutlierDetector(Dispatcher& main, const ClusterEntry& entry) : main_(main) {
  interval_ = main_.CreateTimer([this] { OnInterval(); });
  Update(entry);
}

OutlierDetector::~OutlierDetector() { *alive_ = false; }

void OutlierDetector::Update(const ClusterEntry& entry) {
  info_ = entry.info;
  RPX_ASSERT(info_->outlier && info_->outlier_sink && info_->health);
  hosts_ = entry.hosts ? entry.hosts : std::make_shared<const HostSet>();
  Dispatcher* main = &main_;
  std::weak_ptr<bool> alive = alive_;
  info_->outlier_sink->Set([main, alive, this](const SocketAddress& a, OutlierReason r) {
    // Any worker: hand the decision to the main thread.
    std::string address = a.ToString();
    main->Post([alive, this, address, r] {
      auto live = alive.lock();
      if (live && *live) OnStreak(address, r);
    });
  });
  std::map<std::string, State> next;
  for (const auto& h : *hosts_) {
    std::string key = h->address.ToString();
    auto old = states_.find(key);
    State s;
    if (old != states_.end()) {
      s = old->second;
      h->ejected.store(s.host->ejected.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    s.host = h;
    next[key] = s;
  }
  states_ = std::move(next);
  // Hosts that left take their ejections with them; a new ClusterHealth starts from the hosts.
  info_->health->ejections_active.store(Ejected(), std::memory_order_relaxed);
  if (!interval_->enabled()) interval_->Enable(info_->outlier->interval_ms);
  PublishHealth(*info_->health, *hosts_);
}

uint32_t OutlierDetector::Ejected() const {
  uint32_t n = 0;
  for (const auto& [key, s] : states_) n += s.host->ejected.load(std::memory_order_relaxed);
  return n;
}

void OutlierDetector::OnStreak(const std::string& address, OutlierReason reason) {
  auto it = states_.find(address);
  if (it == states_.end()) return;  // gone since
  ClusterHealth& h = *info_->health;
  switch (reason) {
    case OutlierReason::kConsecutive5xx:
      h.ejections_detected_consecutive_5xx.fetch_add(1, std::memory_order_relaxed);
      break;
    case OutlierReason::kConsecutiveGatewayFailure:
      h.ejections_detected_consecutive_gateway_failure.fetch_add(1, std::memory_order_relaxed);
      break;
    case OutlierReason::kConsecutiveLocalOriginFailure:
      h.ejections_detected_consecutive_local_origin_failure.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      break;
  }
  Eject(it->second, reason);
}

void OutlierDetector::Eject(State& s, OutlierReason reason) {
  const OutlierConfig& c = *info_->outlier;
  ClusterHealth& h = *info_->health;
  if (s.host->ejected.load(std::memory_order_relaxed)) return;
  uint32_t enforcing = 100;
  std::atomic<uint64_t>* enforced = nullptr;
  switch (reason) {
    case OutlierReason::kConsecutive5xx:
      enforcing = c.enforcing_consecutive_5xx;
      enforced = &h.ejections_enforced_consecutive_5xx;
      break;
    case OutlierReason::kConsecutiveGatewayFailure:
      enforcing = c.enforcing_consecutive_gateway_failure;
      enforced = &h.ejections_enforced_consecutive_gateway_failure;
      break;
    case OutlierReason::kConsecutiveLocalOriginFailure:
      enforcing = c.enforcing_consecutive_local_origin_failure;
      enforced = &h.ejections_enforced_consecutive_local_origin_failure;
      break;
    case OutlierReason::kSuccessRate:
      enforcing = c.enforcing_success_rate;
      enforced = &h.ejections_enforced_success_rate;
      break;
    case OutlierReason::kFailurePercentage:
      enforcing = c.enforcing_failure_percentage;
      enforced = &h.ejections_enforced_failure_percentage;
      break;
  }
  if (enforcing == 0 || (enforcing < 100 && rng_() % 100 >= enforcing)) return;
  // At most max_ejection_percent of the hosts, counting this one (Envoy's rule); with
  // always_eject_one_host, one host even where the percentage allows none.
  uint32_t ejected = Ejected();
  uint32_t total = static_cast<uint32_t>(states_.size());
  bool allowed = (ejected + 1) * 100 <= static_cast<uint64_t>(c.max_ejection_percent) * total;
  if (!allowed && !(ejected == 0 && c.always_eject_one_host)) {
    h.ejections_overflow.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ++s.ejections;
  uint64_t max = std::max(c.max_ejection_time_ms, c.base_ejection_time_ms);
  s.ejected_for_ms = std::min(c.base_ejection_time_ms * s.ejections, max);
  if (c.max_ejection_time_jitter_ms) s.ejected_for_ms += rng_() % c.max_ejection_time_jitter_ms;
  s.ejected_at_ms = main_.NowMs();
  s.host->ejected.store(true, std::memory_order_relaxed);
  s.host->consecutive_5xx.store(0, std::memory_order_relaxed);
  s.host->consecutive_gateway_failure.store(0, std::memory_order_relaxed);
  s.host->consecutive_local_origin_failure.store(0, std::memory_order_relaxed);
  enforced->fetch_add(1, std::memory_order_relaxed);
  h.ejections_enforced_total.fetch_add(1, std::memory_order_relaxed);
  h.ejections_active.fetch_add(1, std::memory_order_relaxed);
  RPX_LOG(kWarn, "cluster '%s': host %s ejected for %llu ms (%s, ejection %u in a row)",
          info_->name, s.host->address.ToString(),
          static_cast<unsigned long long>(s.ejected_for_ms), ReasonName(reason), s.ejections);
  PublishHealth(h, *hosts_);
}

void OutlierDetector::Uneject(State& s) {
  if (!s.host->ejected.load(std::memory_order_relaxed)) return;
  s.host->ejected.store(false, std::memory_order_relaxed);
  info_->health->ejections_active.fetch_sub(1, std::memory_order_relaxed);
  RPX_LOG(kInfo, "cluster '%s': host %s back in service", info_->name, s.host->address.ToString());
  PublishHealth(*info_->health, *hosts_);
}

uint64_t OutlierDetector::EjectedForMs(const std::string& address) const {
  auto it = states_.find(address);
  return it == states_.end() ? 0 : it->second.ejected_for_ms;
}

void OutlierDetector::OnHealthCheckPassed(const std::string& address) {
  if (!info_->outlier->successful_active_health_check_uneject_host) return;
  auto it = states_.find(address);
  if (it != states_.end()) Uneject(it->second);
}

void OutlierDetector::OnInterval() {
  const OutlierConfig& c = *info_->outlier;
  uint64_t now = main_.NowMs();
  // Hosts whose time is up come back; a host in service for a whole interval has one ejection
  // fewer in a row.
  for (auto& [key, s] : states_) {
    if (s.host->ejected.load(std::memory_order_relaxed)) {
      if (now >= s.ejected_at_ms + s.ejected_for_ms) Uneject(s);
    } else if (s.ejections > 0 && now >= s.ejected_at_ms + s.ejected_for_ms + c.interval_ms) {
      --s.ejections;
    }
  }
  // Success rate and failure percentage over this interval's requests.
  struct Sample {
    State* state;
    uint64_t total;
    double success_rate;  // percent
  };
  std::vector<Sample> samples;
  for (auto& [key, s] : states_) {
    uint64_t ok = 0, bad = 0;
    for (uint32_t w = 0; w < s.host->stats_slots; ++w) {
      ok += s.host->stats[w].rq_success.Value();
      bad += s.host->stats[w].rq_error.Value();
    }
    uint64_t d_ok = ok >= s.successes ? ok - s.successes : ok;
    uint64_t d_bad = bad >= s.errors ? bad - s.errors : bad;
    s.successes = ok;
    s.errors = bad;
    if (s.host->ejected.load(std::memory_order_relaxed)) continue;
    uint64_t total = d_ok + d_bad;
    if (total == 0) continue;
    samples.push_back({&s, total, 100.0 * d_ok / total});
  }
  std::vector<Sample*> sr;
  for (auto& x : samples) {
    if (x.total >= c.success_rate_request_volume) sr.push_back(&x);
  }
  if (c.enforcing_success_rate > 0 && sr.size() >= c.success_rate_minimum_hosts && !sr.empty()) {
    double mean = 0;
    for (auto* x : sr) mean += x->success_rate;
    mean /= sr.size();
    double var = 0;
    for (auto* x : sr) var += (x->success_rate - mean) * (x->success_rate - mean);
    double stdev = std::sqrt(var / sr.size());
    double threshold = mean - stdev * (c.success_rate_stdev_factor / 1000.0);
    for (auto* x : sr) {
      if (x->success_rate < threshold) {
        info_->health->ejections_detected_success_rate.fetch_add(1, std::memory_order_relaxed);
        Eject(*x->state, OutlierReason::kSuccessRate);
      }
    }
  }
  std::vector<Sample*> fp;
  for (auto& x : samples) {
    if (x.total >= c.failure_percentage_request_volume) fp.push_back(&x);
  }
  if (fp.size() >= c.failure_percentage_minimum_hosts) {
    for (auto* x : fp) {
      if (100.0 - x->success_rate >= c.failure_percentage_threshold) {
        info_->health->ejections_detected_failure_percentage.fetch_add(1,
                                                                       std::memory_order_relaxed);
        Eject(*x->state, OutlierReason::kFailurePercentage);
      }
    }
  }
  interval_->Enable(c.interval_ms);
}

}  // namespace rpx
