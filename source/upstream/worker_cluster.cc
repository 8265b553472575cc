#include "source/upstream/worker_cluster.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "source/common/assert.h"
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
  if (settings_changed) {
    // Original-destination pools were made with the old settings.
    for (auto& [key, d] : dst_pools_) {
      d.pool->Drain();
      draining_.push_back(std::move(d.pool));
    }
    dst_pools_.clear();
  }
  info_ = entry.info;
  hosts_ = entry.hosts;
  stats_ = &info_->stats[worker_index_ % info_->stats_slots];
  std::vector<HostPool> next;
  const bool first = !updated_;
  updated_ = true;
  for (const auto& host : *hosts_) {
    HostPool hp{host, nullptr, {}};
    // The host's earlier form, if it was a member: with the same transport-selecting metadata
    // and unchanged settings its pool (and idle connections) stays.
    const HostPool* member = nullptr;
    for (auto& old : pools_) {
      if (!(old.host->address == host->address)) continue;
      if (!member) member = &old;
      if (!settings_changed && old.pool &&
          old.host->transport_socket_match == host->transport_socket_match) {
        member = &old;
        hp.pool = std::move(old.pool);
        hp.by_sni = std::move(old.by_sni);
        hp.pool->UpdateHost(host);
        for (auto& [sni, p] : hp.by_sni) p->UpdateHost(host);
        break;
      }
    }
    // Slow start: a member keeps its ramp, even when the settings changed; a host that joins
    // later starts one (the first host set does not: hosts that all start together would ramp
    // in step, which changes no share).
    if (member) {
      hp.slow_start_ms = member->slow_start_ms;
      hp.was_available = member->was_available;
    } else if (info_->slow_start && !first) {
      dispatcher_.UpdateTime();
      hp.slow_start_ms = std::max<uint64_t>(1, dispatcher_.NowMs());
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
  if (info_->slow_start && !slow_start_timer_) {
    slow_start_timer_ = dispatcher_.CreateTimer([this] { OnSlowStartTick(); });
  }
  dispatcher_.UpdateTime();
  bool ramping = UpdateWeights(dispatcher_.NowMs());
  // Free pools that finished draining.
  for (size_t i = 0; i < draining_.size();) {
    if (draining_[i]->idle()) {
      draining_[i] = std::move(draining_.back());
      draining_.pop_back();
    } else {
      ++i;
    }
  }
  BuildLevels();
  if (ramping) OnSlowStartTick();
}

double WorkerCluster::SlowStartFactor(const ClusterInfo::SlowStart& s, uint64_t elapsed_ms) {
  double window_s = s.window_ms / 1000.0;
  double time_factor = std::max(elapsed_ms / 1000.0, 1.0) / window_s;
  return std::min(1.0, std::max(s.min_weight, std::pow(time_factor, 1.0 / s.aggression)));
}

bool WorkerCluster::UpdateWeights(uint64_t now_ms) {
  bool ramping = false;
  for (auto& hp : pools_) {
    if (!info_->slow_start) {
      hp.lb_weight = hp.host->weight;
      continue;
    }
    const auto& ss = *info_->slow_start;
    double factor = 1.0;
    if (hp.slow_start_ms) {
      uint64_t elapsed = now_ms > hp.slow_start_ms ? now_ms - hp.slow_start_ms : 0;
      if (elapsed >= ss.window_ms) {
        hp.slow_start_ms = 0;  // out of its window: full weight from now on
      } else {
        factor = SlowStartFactor(ss, elapsed);
        ramping = true;
      }
    }
    hp.lb_weight = std::max<uint32_t>(1, std::llround(hp.host->weight * 1000.0 * factor));
  }
  return ramping;
}

void WorkerCluster::OnSlowStartTick() {
  dispatcher_.UpdateTime();
  bool ramping = UpdateWeights(dispatcher_.NowMs());
  for (auto& level : levels_) {
    BuildGroup(&level);
    for (auto& loc : level.localities) BuildGroup(&loc);
  }
  // Twenty steps over the window (at most one every 50 ms, at least one a second).
  if (ramping) {
    slow_start_timer_->Enable(std::clamp<uint64_t>(info_->slow_start->window_ms / 20, 50, 1000));
  }
}

uint32_t WorkerCluster::lb_weight(const Host& host) const {
  for (const auto& hp : pools_) {
    if (hp.host->address == host.address) return hp.lb_weight;
  }
  return 0;
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

ConnPool* WorkerCluster::PoolForOriginalDst(const SocketAddress& dst) {
  if (!info_->original_dst || dst.len == 0) return nullptr;
  SocketAddress to = info_->original_dst->port_override
                         ? dst.WithPort(static_cast<uint16_t>(info_->original_dst->port_override))
                         : dst;
  std::string key = to.ToString();
  auto it = dst_pools_.find(key);
  if (it != dst_pools_.end()) {
    it->second.used = true;
    return it->second.pool.get();
  }
  auto host = std::make_shared<Host>();
  host->address = to;
  auto pool = std::make_unique<ConnPool>(dispatcher_, info_, std::move(host), *stats_);
  SetReclaim(pool.get());
  ConnPool* raw = pool.get();
  dst_pools_.emplace(std::move(key), DstPool{std::move(pool), true});
  if (!dst_cleanup_timer_) {
    dst_cleanup_timer_ = dispatcher_.CreateTimer([this] { CleanupOriginalDst(); });
  }
  if (!dst_cleanup_timer_->enabled()) {
    dst_cleanup_timer_->Enable(info_->original_dst->cleanup_interval_ms);
  }
  return raw;
}

void WorkerCluster::CleanupOriginalDst() {
  for (auto it = dst_pools_.begin(); it != dst_pools_.end();) {
    DstPool& d = it->second;
    if (!d.used && d.pool->idle()) {
      dst_pools_.erase(it++);  // closes its idle connections
      continue;
    }
    d.used = false;
    ++it;
  }
  if (!dst_pools_.empty() && info_->original_dst) {
    dst_cleanup_timer_->Enable(info_->original_dst->cleanup_interval_ms);
  }
}

void WorkerCluster::BuildLevels() {
  levels_.clear();
  for (uint32_t i = 0; i < pools_.size(); ++i) {
    uint32_t priority = pools_[i].host->priority;
    auto it = std::find_if(levels_.begin(), levels_.end(),
                           [priority](const Level& l) { return l.priority == priority; });
    if (it == levels_.end()) {
      levels_.emplace_back();
      levels_.back().priority = priority;
      it = levels_.end() - 1;
    }
    it->members.push_back(i);
    if (info_->locality_weighted) {
      const std::string& name = pools_[i].host->locality;
      auto loc = std::find_if(it->localities.begin(), it->localities.end(), [&](const Locality& l) {
        return pools_[l.members[0]].host->locality == name;
      });
      if (loc == it->localities.end()) {
        it->localities.emplace_back();
        loc = it->localities.end() - 1;
        loc->weight = pools_[i].host->locality_weight;
      }
      loc->members.push_back(i);
    }
  }
  std::sort(levels_.begin(), levels_.end(),
            [](const Level& a, const Level& b) { return a.priority < b.priority; });
  for (auto& level : levels_) {
    BuildGroup(&level);
    for (auto& loc : level.localities) BuildGroup(&loc);
    BuildHashTables(&level);
  }
  RecomputeLoads();
}

void WorkerCluster::BuildGroup(Group* g) {
  // Smooth weighted round robin (as nginx does), computed once per host set.
  g->schedule.clear();
  g->rr_next = worker_index_;  // workers start at different hosts
  uint64_t total = 0;
  uint32_t gcd = 0;
  for (uint32_t i : g->members) {
    total += pools_[i].lb_weight;
    gcd = std::gcd(gcd, pools_[i].lb_weight);
  }
  if (gcd == 0) gcd = 1;
  uint64_t len = std::min<uint64_t>(total / gcd, 4096);  // long schedules approximate the weights
  std::vector<int64_t> current(g->members.size(), 0);
  for (uint64_t n = 0; n < len; ++n) {
    size_t best = 0;
    for (size_t k = 0; k < g->members.size(); ++k) {
      current[k] += pools_[g->members[k]].lb_weight / gcd;
      if (current[k] > current[best]) best = k;
    }
    current[best] -= static_cast<int64_t>(total / gcd);
    g->schedule.push_back(g->members[best]);
  }
}

void WorkerCluster::BuildHashTables(Level* level) {
  level->ring.clear();
  level->maglev.clear();
  const auto& members = level->members;
  if (members.empty()) return;
  double total = 0, min_w = 0, max_w = 0;
  for (uint32_t i : members) total += pools_[i].host->weight;
  std::vector<double> w;
  for (uint32_t i : members) {
    w.push_back(pools_[i].host->weight / total);
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
    for (size_t m = 0; m < members.size(); ++m) {
      std::string key = pools_[members[m]].host->address.ToString() + "_";
      uint64_t points = std::max<uint64_t>(1, std::llround(per_weight * w[m]));
      for (uint64_t j = 0; j < points; ++j) {
        level->ring.emplace_back(XxHash64(key + std::to_string(j)), members[m]);
      }
    }
    std::sort(level->ring.begin(), level->ring.end());
  } else if (info_->lb_policy == LbPolicy::kMaglev) {
    // Maglev's table (Envoy's weighted form): each host walks its own permutation of the slots,
    // (offset + skip x n) mod M, taking turns in proportion to its weight.
    const uint64_t m = info_->maglev_table_size;
    struct Entry {
      uint64_t offset, skip, next = 0;
      double target = 0;
    };
    std::vector<Entry> entries;
    for (uint32_t i : members) {
      std::string key = pools_[i].host->address.ToString();
      entries.push_back({XxHash64(key, 0) % m, XxHash64(key, 1) % (m - 1) + 1});
    }
    constexpr uint32_t kEmpty = UINT32_MAX;
    auto& table = level->maglev;
    table.assign(m, kEmpty);
    uint64_t filled = 0;
    for (uint64_t iteration = 1; filled < m; ++iteration) {
      for (size_t i = 0; i < entries.size() && filled < m; ++i) {
        Entry& e = entries[i];
        if (iteration * w[i] < e.target) continue;
        e.target += max_w;
        uint64_t c = (e.offset + e.skip * e.next) % m;
        while (table[c] != kEmpty) c = (e.offset + e.skip * ++e.next) % m;
        table[c] = members[i];
        ++e.next;
        ++filled;
      }
    }
  }
}

void WorkerCluster::RecomputeLoads() {
  const uint64_t factor = hosts_ ? hosts_->overprovisioning_factor : 140;
  const bool by_weight = hosts_ && hosts_->weighted_priority_health;
  bool all_available = true;
  auto count = [&](Group& g) {
    g.total = g.healthy = 0;
    for (uint32_t i : g.members) {
      const Host& h = *pools_[i].host;
      uint64_t n = by_weight ? h.weight : 1;
      g.total += n;
      if (h.available()) g.healthy += n;
    }
  };
  for (auto& level : levels_) {
    count(level);
    all_available &= level.healthy == level.total;
    for (auto& loc : level.localities) count(loc);
  }
  simple_ = all_available && levels_.size() == 1 && !info_->locality_weighted;
  // Envoy's priority load: a level's health is its healthy share times the overprovisioning
  // factor (at most 100%); levels take load in order, each up to its health, scaled when the
  // health of all levels together (normalized: at most 100) is short of 100.
  std::vector<uint64_t> health;
  uint64_t sum = 0;
  for (auto& level : levels_) {
    health.push_back(level.total ? std::min<uint64_t>(100, factor * level.healthy / level.total)
                                 : 0);
    sum += health.back();
    level.load = 0;
    level.panic = false;
  }
  const uint64_t normalized = std::min<uint64_t>(100, sum);
  const double threshold = info_->panic_threshold;
  if (levels_.empty()) return;
  if (normalized > 0) {
    uint64_t remaining = 100;
    int first = -1;
    for (size_t p = 0; p < levels_.size(); ++p) {
      if (first < 0 && health[p] > 0) first = static_cast<int>(p);
      levels_[p].load =
          static_cast<uint32_t>(std::min<uint64_t>(remaining, health[p] * 100 / normalized));
      remaining -= levels_[p].load;
    }
    levels_[first].load += static_cast<uint32_t>(remaining);  // rounding
  } else {
    levels_[0].load = 100;  // nothing healthy: panic decides below, or no host is picked
  }
  if (!(threshold == 0 && normalized == 0)) {
    // Per-level panic, never when the levels together are whole; when every level panics, the
    // load follows the number of hosts, health aside.
    bool total_panic = true;
    for (auto& level : levels_) {
      level.panic = normalized < 100 && level.healthy * 100.0 < threshold * level.total;
      total_panic &= level.panic;
    }
    if (total_panic) {
      uint64_t hosts = 0;
      for (auto& level : levels_) hosts += level.members.size();
      uint64_t remaining = 100;
      for (auto& level : levels_) {
        level.load = static_cast<uint32_t>(100 * level.members.size() / hosts);
        remaining -= level.load;
      }
      levels_[0].load += static_cast<uint32_t>(remaining);
    }
  }
  // Envoy's effective locality weight: the weight times the locality's health (its healthy
  // share times the overprovisioning factor, at most 1).
  for (auto& level : levels_) {
    level.locality_total = 0;
    for (auto& loc : level.localities) {
      double health_share =
          loc.total ? std::min(1.0, factor / 100.0 * loc.healthy / loc.total) : 0.0;
      loc.effective = loc.weight * health_share;
      level.locality_total += loc.effective;
    }
  }
  uint32_t total_load = 0;
  for (const auto& level : levels_) total_load += level.load;
  RPX_ASSERT(total_load == 100);
}

ConnPool* WorkerCluster::ChoosePool(uint64_t random, const uint64_t* hash) {
  if (pools_.empty()) return nullptr;
  if (info_->health) {
    uint64_t generation = info_->health->generation.load(std::memory_order_acquire);
    if (generation != health_generation_) {
      health_generation_ = generation;
      OnHealthChanged();
    }
  }
  if (simple_) {
    Level& level = levels_[0];
    if (hash && (!level.ring.empty() || !level.maglev.empty())) {
      return ChooseByHash(level, *hash, false);
    }
    return ChooseIn(level, random);
  }
  return ChooseSlow(random, hash);
}

ConnPool* WorkerCluster::ChooseSlow(uint64_t random, const uint64_t* hash) {
  Level* level = &levels_[0];
  if (levels_.size() > 1) {
    // The hash, when there is one, also picks the level: a key stays on its host while the
    // loads stay.
    uint64_t x = (hash ? *hash : random >> 24) % 100;
    for (auto& l : levels_) {
      if (x < l.load) {
        level = &l;
        break;
      }
      x -= l.load;
    }
  }
  if (level->panic) stats_->lb_healthy_panic.Inc();
  const bool health = !level->panic;
  if (hash && (!level->ring.empty() || !level->maglev.empty())) {
    return ChooseByHash(*level, *hash, health);
  }
  if (!health) return ChooseIn(*level, random);
  if (info_->locality_weighted && level->locality_total > 0) {
    // A locality by effective weight (localities without a weight take no traffic), then a host
    // within it; if none of its hosts is available, the level's.
    double x = static_cast<double>(random >> 11) * 0x1.0p-53 * level->locality_total;
    for (auto& loc : level->localities) {
      if (loc.effective <= 0) continue;
      if (x < loc.effective || &loc == &level->localities.back()) {
        if (ConnPool* p = ChooseAvailable(loc, random)) return p;
        break;
      }
      x -= loc.effective;
    }
  }
  return ChooseAvailable(*level, random);
}

ConnPool* WorkerCluster::ChooseAvailable(Group& g, uint64_t random) {
  // Draw as the policy draws, passing over hosts that are out; a bounded number of draws, then
  // the first available host in order.
  for (size_t i = 0; i < 2 * g.members.size(); ++i) {
    ConnPool* p = ChooseIn(g, random);
    if (p->host().available()) return p;
    random = random * 6364136223846793005ULL + 1442695040888963407ULL;
  }
  for (uint32_t i : g.members) {
    if (pools_[i].host->available()) return pools_[i].pool.get();
  }
  return nullptr;
}

ConnPool* WorkerCluster::ChooseByHash(Level& level, uint64_t hash, bool health) {
  if (!level.ring.empty()) {
    // The first point at or after the hash, wrapping; on past hosts that are out.
    const auto& ring = level.ring;
    auto it = std::lower_bound(ring.begin(), ring.end(), std::make_pair(hash, uint32_t{0}));
    size_t at = it == ring.end() ? 0 : it - ring.begin();
    for (size_t k = 0; k < ring.size(); ++k) {
      HostPool& hp = pools_[ring[(at + k) % ring.size()].second];
      if (!health || hp.host->available()) return hp.pool.get();
    }
  } else {
    uint64_t h = hash;
    for (int k = 0; k < 64; ++k) {
      HostPool& hp = pools_[level.maglev[h % level.maglev.size()]];
      if (!health || hp.host->available()) return hp.pool.get();
      h = h * 6364136223846793005ULL + 1442695040888963407ULL;  // another slot, the same everywhere
    }
  }
  return health ? ChooseAvailable(level, hash) : ChooseIn(level, hash);
}

void WorkerCluster::OnHealthChanged() {
  bool back = false;
  for (auto& hp : pools_) {
    bool available = hp.host->available();
    if (available && !hp.was_available && info_->slow_start) {
      dispatcher_.UpdateTime();
      hp.slow_start_ms = std::max<uint64_t>(1, dispatcher_.NowMs());  // back: ramps up again
      back = true;
    }
    hp.was_available = available;
    if (available) continue;
    // Idle connections to a failed host would only serve a panic; busy ones finish their
    // request.
    while (hp.pool->CloseOneIdle()) {
    }
    for (auto& [sni, p] : hp.by_sni) {
      while (p->CloseOneIdle()) {
      }
    }
  }
  RecomputeLoads();
  if (back) OnSlowStartTick();
}

ConnPool* WorkerCluster::ChooseIn(Group& g, uint64_t random) {
  const auto& schedule = g.schedule;
  if (g.members.size() == 1) return pools_[g.members[0]].pool.get();
  switch (info_->lb_policy) {
    case LbPolicy::kRingHash:
    case LbPolicy::kMaglev:  // no hash to place the request by: any host
      return pools_[g.members[random % g.members.size()]].pool.get();
    case LbPolicy::kRoundRobin:
      return pools_[schedule[g.rr_next++ % schedule.size()]].pool.get();
    case LbPolicy::kRandom:
      // A random place in the weighted schedule: a host in proportion to its weight.
      return pools_[schedule[random % schedule.size()]].pool.get();
    case LbPolicy::kLeastRequest: {
      // Power of two choices (Envoy's default for LEAST_REQUEST; choice_count more), drawn by
      // weight and compared by active requests per unit of weight.
      size_t a = random % schedule.size();
      size_t b = (random >> 32) % schedule.size();
      if (schedule[a] == schedule[b]) b = (b + 1) % schedule.size();
      const HostPool* best = &pools_[schedule[a]];
      auto fewer = [](const HostPool& x, const HostPool& y) {  // x less loaded than y
        return x.pool->active_requests() * uint64_t{y.lb_weight} <
               y.pool->active_requests() * uint64_t{x.lb_weight};
      };
      if (fewer(pools_[schedule[b]], *best)) best = &pools_[schedule[b]];
      for (uint32_t k = 2; k < info_->choice_count; ++k) {
        random = random * 6364136223846793005ULL + 1442695040888963407ULL;
        const HostPool& c = pools_[schedule[(random >> 33) % schedule.size()]];
        if (fewer(c, *best)) best = &c;
      }
      return best->pool.get();
    }
  }
  return pools_[g.members[0]].pool.get();
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
  for (auto& [key, d] : dst_pools_) {
    if (d.pool.get() != requester && d.pool->CloseOneIdle()) return true;
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
  for (const auto& [key, d] : dst_pools_) {
    if (!d.pool->idle()) return false;
  }
  return true;
}

void WorkerCluster::Drain() {
  for (auto& p : pools_) {
    p.pool->Drain();
    for (auto& [sni, sp] : p.by_sni) sp->Drain();
  }
  for (auto& p : draining_) p->Drain();
  for (auto& [key, d] : dst_pools_) d.pool->Drain();
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
