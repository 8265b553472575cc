#include "source/upstream/worker_cluster.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "source/common/hash.h"

namespace rpx {

WorkerCluster::WorkerCluster(Dispatcher& dispatcher, uint32_t worker_index,
                             const ClusterEntry& entry)
    : dispatcher_(dispatcher), worker_index_(worker_index) {
  Update(entry);
}

WorkerCluster::~WorkerCluster() {
  if (info_) info_->resources->SetReclaimer(worker_index_, nullptr);
}

void WorkerCluster::Update(const ClusterEntry& entry) {
  bool settings_changed = info_ != entry.info;
  if (settings_changed) {
    if (info_) info_->resources->SetReclaimer(worker_index_, nullptr);
    // Other workers, starved by the shared connection limit, ask us to close an idle connection.
    Dispatcher* d = &dispatcher_;
    std::weak_ptr<bool> alive = alive_;
    entry.info->resources->SetReclaimer(worker_index_, [d, alive, this] {
      d->Post([alive, this] {
        // By now the starved worker may have its slot (this request can be stale: it repeats
        // every few milliseconds while starved).
        if (alive.lock() && info_->resources->SlotWanted()) ReclaimIdle(nullptr);
      });
    });
  }
  info_ = entry.info;
  hosts_ = entry.hosts;
  stats_ = &info_->stats[worker_index_ % info_->stats_slots];
  std::vector<HostPool> next;
  for (const auto& host : *hosts_) {
    HostPool hp{host, nullptr, {}};
    if (!settings_changed) {
      for (auto& old : pools_) {
        // Same address and the same transport-selecting metadata: the pool (and its idle
        // connections) stays.
        if (old.pool && old.host->address == host->address &&
            old.host->transport_socket_match == host->transport_socket_match) {
          hp.pool = std::move(old.pool);
          hp.by_sni = std::move(old.by_sni);
          break;
        }
      }
    }
    if (!hp.pool) hp.pool = std::make_unique<ConnPool>(dispatcher_, info_, host, *stats_);
    SetReclaim(hp.pool.get());
    for (auto& [sni, p] : hp.by_sni) SetReclaim(p.get());
    next.push_back(std::move(hp));
  }
  for (auto& old : pools_) {
    if (old.pool) {
      old.pool->Drain();
      draining_.push_back(std::move(old.pool));
    }
    for (auto& [sni, p] : old.by_sni) {
      p->Drain();
      draining_.push_back(std::move(p));
    }
  }
  pools_ = std::move(next);
  // Free pools that finished draining.
  for (size_t i = 0; i < draining_.size();) {
    if (draining_[i]->idle()) {
      draining_[i] = std::move(draining_.back());
      draining_.pop_back();
    } else {
      ++i;
    }
  }
  BuildSchedule();
}

void WorkerCluster::SetReclaim(ConnPool* pool) {
  auto resources = info_->resources;
  uint32_t worker = worker_index_;
  pool->set_reclaim([this](ConnPool* p) { return ReclaimIdle(p); },
                    [resources, worker] { resources->RequestReclaim(worker); });
}

ConnPool* WorkerCluster::PoolForSni(ConnPool* host_pool, std::string_view sni) {
  for (auto& hp : pools_) {
    if (hp.pool.get() != host_pool) continue;
    auto it = hp.by_sni.find(absl::string_view(sni.data(), sni.size()));
    if (it != hp.by_sni.end()) return it->second.get();
    if (hp.by_sni.size() >= kMaxSniPools) {
      // The names come from requests: bounded, so that varying Host headers cannot grow
      // memory without end. An idle pool makes room.
      auto idle = hp.by_sni.begin();
      while (idle != hp.by_sni.end() && !idle->second->idle()) ++idle;
      if (idle == hp.by_sni.end()) return nullptr;
      idle->second->Drain();
      draining_.push_back(std::move(idle->second));
      hp.by_sni.erase(idle);
    }
    auto pool = std::make_unique<ConnPool>(dispatcher_, info_, hp.host, *stats_, std::string(sni));
    SetReclaim(pool.get());
    ConnPool* raw = pool.get();
    hp.by_sni.emplace(std::string(sni), std::move(pool));
    return raw;
  }
  return nullptr;
}

void WorkerCluster::BuildSchedule() {
  // Smooth weighted round robin (as nginx does), computed once per host set.
  schedule_.clear();
  rr_next_ = worker_index_;  // workers start at different hosts
  if (pools_.empty()) return;
  uint64_t total = 0;
  uint32_t g = 0;
  for (auto& p : pools_) {
    total += p.host->weight;
    g = std::gcd(g, p.host->weight);
  }
  if (g == 0) g = 1;
  uint64_t len = total / g;
  if (len > 4096) len = 4096;  // long schedules approximate the weights
  std::vector<int64_t> current(pools_.size(), 0);
  for (uint64_t n = 0; n < len; ++n) {
    size_t best = 0;
    for (size_t i = 0; i < pools_.size(); ++i) {
      current[i] += pools_[i].host->weight / g;
      if (current[i] > current[best]) best = i;
    }
    current[best] -= static_cast<int64_t>(total / g);
    schedule_.push_back(static_cast<uint32_t>(best));
  }
  BuildHashTables();
}

void WorkerCluster::BuildHashTables() {
  ring_.clear();
  maglev_.clear();
  if (pools_.empty()) return;
  double total = 0, min_w = 0, max_w = 0;
  for (const auto& p : pools_) total += p.host->weight;
  std::vector<double> w;
  for (const auto& p : pools_) {
    w.push_back(p.host->weight / total);
    min_w = w.size() == 1 ? w.back() : std::min(min_w, w.back());
    max_w = std::max(max_w, w.back());
  }
  if (info_->lb_policy == LbPolicy::kRingHash) {
    // Each host gets points in proportion to its weight, the lightest host K of them, where K
    // is minimum_ring_size's share for the lightest host rounded up to a power of two: unlike
    // Envoy's exact share, K then stays the same when a host joins or leaves (until the count
    // crosses a power of two), so a change moves only the keys of the host that changed, not a
    // reshuffle among the others. Points are XXH64("address_i"), as in Envoy.
    uint64_t k = 1;
    while (k < std::ceil(info_->ring_min_size * min_w)) k <<= 1;
    double per_weight = k / min_w;  // points per unit of normalized weight
    double cap = static_cast<double>(info_->ring_max_size);
    if (per_weight > cap) per_weight = cap;
    for (size_t i = 0; i < pools_.size(); ++i) {
      std::string key = pools_[i].host->address.ToString() + "_";
      uint64_t points = std::max<uint64_t>(1, std::llround(per_weight * w[i]));
      for (uint64_t j = 0; j < points; ++j) {
        ring_.emplace_back(XxHash64(key + std::to_string(j)), static_cast<uint32_t>(i));
      }
    }
    std::sort(ring_.begin(), ring_.end());
  } else if (info_->lb_policy == LbPolicy::kMaglev) {
    // Maglev's table (Envoy's weighted form): each host walks its own permutation of the slots,
    // (offset + skip x n) mod M, taking turns in proportion to its weight.
    const uint64_t m = info_->maglev_table_size;
    struct Entry {
      uint64_t offset, skip, next = 0;
      double target = 0;
    };
    std::vector<Entry> entries;
    for (const auto& p : pools_) {
      std::string key = p.host->address.ToString();
      entries.push_back({XxHash64(key, 0) % m, XxHash64(key, 1) % (m - 1) + 1});
    }
    constexpr uint32_t kEmpty = UINT32_MAX;
    maglev_.assign(m, kEmpty);
    uint64_t filled = 0;
    for (uint64_t iteration = 1; filled < m; ++iteration) {
      for (size_t i = 0; i < entries.size() && filled < m; ++i) {
        Entry& e = entries[i];
        if (iteration * w[i] < e.target) continue;
        e.target += max_w;
        uint64_t c = (e.offset + e.skip * e.next) % m;
        while (maglev_[c] != kEmpty) c = (e.offset + e.skip * ++e.next) % m;
        maglev_[c] = static_cast<uint32_t>(i);
        ++e.next;
        ++filled;
      }
    }
  }
}

ConnPool* WorkerCluster::ChoosePool(uint64_t random, const uint64_t* hash) {
  if (pools_.empty()) return nullptr;
  bool health = info_->health && HealthApplies();
  if (hash && (!ring_.empty() || !maglev_.empty())) return ChooseByHash(*hash, health);
  if (!health) return ChooseAny(random);
  // Draw as the policy draws, passing over hosts that are out; a bounded number of draws, then
  // the first available host in order.
  for (size_t i = 0; i < 2 * pools_.size(); ++i) {
    ConnPool* p = ChooseAny(random);
    if (p->host().available()) return p;
    random = random * 6364136223846793005ULL + 1442695040888963407ULL;
  }
  for (auto& hp : pools_) {
    if (hp.host->available()) return hp.pool.get();
  }
  return ChooseAny(random);
}

bool WorkerCluster::HealthApplies() {
  const ClusterHealth& h = *info_->health;
  uint64_t generation = h.generation.load(std::memory_order_acquire);
  if (generation != health_generation_) {
    health_generation_ = generation;
    OnHealthChanged();
  }
  uint32_t hosts = h.hosts.load(std::memory_order_relaxed);
  uint32_t unhealthy = h.unhealthy.load(std::memory_order_relaxed);
  // All healthy, or panic: below the threshold's share of healthy hosts, health is not looked at.
  return unhealthy > 0 && hosts > 0 &&
         (hosts - unhealthy) * 100.0 >= info_->panic_threshold * hosts;
}

ConnPool* WorkerCluster::ChooseByHash(uint64_t hash, bool health) {
  if (!ring_.empty()) {
    // The first point at or after the hash, wrapping; on past hosts that are out.
    auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(hash, uint32_t{0}));
    size_t at = it == ring_.end() ? 0 : it - ring_.begin();
    for (size_t k = 0; k < ring_.size(); ++k) {
      HostPool& hp = pools_[ring_[(at + k) % ring_.size()].second];
      if (!health || hp.host->available()) return hp.pool.get();
    }
  } else {
    uint64_t h = hash;
    for (int k = 0; k < 64; ++k) {
      HostPool& hp = pools_[maglev_[h % maglev_.size()]];
      if (!health || hp.host->available()) return hp.pool.get();
      h = h * 6364136223846793005ULL + 1442695040888963407ULL;  // another slot, the same everywhere
    }
  }
  return ChooseAny(hash);
}

void WorkerCluster::OnHealthChanged() {
  for (auto& hp : pools_) {
    if (hp.host->available()) continue;
    // Idle connections to a failed host would only serve a panic; busy ones finish their
    // request.
    while (hp.pool->CloseOneIdle()) {
    }
    for (auto& [sni, p] : hp.by_sni) {
      while (p->CloseOneIdle()) {
      }
    }
  }
}

ConnPool* WorkerCluster::ChooseAny(uint64_t random) {
  if (pools_.size() == 1) return pools_[0].pool.get();
  switch (info_->lb_policy) {
    case LbPolicy::kRingHash:
    case LbPolicy::kMaglev:  // no hash to place the request by: any host
      return pools_[random % pools_.size()].pool.get();
    case LbPolicy::kRoundRobin:
      return pools_[schedule_[rr_next_++ % schedule_.size()]].pool.get();
    case LbPolicy::kRandom:
      return pools_[random % pools_.size()].pool.get();
    case LbPolicy::kLeastRequest: {
      // Power of two choices, Envoy's default for LEAST_REQUEST.
      size_t a = random % pools_.size();
      size_t b = (random >> 32) % pools_.size();
      if (a == b) b = (b + 1) % pools_.size();
      ConnPool* pa = pools_[a].pool.get();
      ConnPool* pb = pools_[b].pool.get();
      return pa->active_requests() <= pb->active_requests() ? pa : pb;
    }
  }
  return pools_[0].pool.get();
}

bool WorkerCluster::ReclaimIdle(ConnPool* requester) {
  for (auto& p : draining_) {
    if (p->CloseOneIdle()) return true;
  }
  for (auto& p : pools_) {
    if (p.pool.get() != requester && p.pool->CloseOneIdle()) return true;
    for (auto& [sni, sp] : p.by_sni) {
      if (sp.get() != requester && sp->CloseOneIdle()) return true;
    }
  }
  return false;
}

bool WorkerCluster::idle() const {
  if (retries_waiting_ > 0) return false;
  for (const auto& p : pools_) {
    if (!p.pool->idle()) return false;
    for (const auto& [sni, sp] : p.by_sni) {
      if (!sp->idle()) return false;
    }
  }
  for (const auto& p : draining_) {
    if (!p->idle()) return false;
  }
  return true;
}

void WorkerCluster::Drain() {
  for (auto& p : pools_) {
    p.pool->Drain();
    for (auto& [sni, sp] : p.by_sni) sp->Drain();
  }
  for (auto& p : draining_) p->Drain();
}

WorkerCluster* WorkerClusterManager::Get(std::string_view name) {
  auto it = clusters_.find(absl::string_view(name.data(), name.size()));
  return it == clusters_.end() ? nullptr : it->second.get();
}

void WorkerClusterManager::Apply(const ClusterMap& clusters) {
  for (auto it = clusters_.begin(); it != clusters_.end();) {
    if (!clusters.contains(it->first)) {
      it->second->Drain();
      removed_.push_back(std::move(it->second));
      clusters_.erase(it++);
    } else {
      ++it;
    }
  }
  for (const auto& [name, entry] : clusters) {
    auto it = clusters_.find(name);
    if (it == clusters_.end()) {
      clusters_.emplace(name, std::make_unique<WorkerCluster>(dispatcher_, worker_index_, entry));
    } else if (it->second->info().name == entry.info->name) {
      it->second->Update(entry);
    }
  }
  for (size_t i = 0; i < removed_.size();) {
    if (removed_[i]->idle()) {
      removed_[i] = std::move(removed_.back());
      removed_.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace rpx
