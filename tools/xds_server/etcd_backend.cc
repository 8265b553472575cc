#include "tools/xds_server/etcd_backend.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "etcd/rpc.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace rpx {
namespace xds_server {
namespace {

namespace pb = rpx::control::v1;
using etcdserverpb::KV;

// The key just past every key that starts with `prefix` (etcd's prefix range_end).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char c = static_cast<unsigned char>(prefix.back());
    if (c < 0xff) {
      prefix.back() = static_cast<char>(c + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

bool IsIpPort(const std::string& endpoint) {
  size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = endpoint.substr(0, colon);
  in_addr a;
  return inet_pton(AF_INET, host.c_str(), &a) == 1;
}

class EtcdBackend : public StoreBackend {
 public:
  explicit EtcdBackend(EtcdOptions options) : options_(std::move(options)) {
    // Several IPv4 endpoints: one channel that fails over in order (pick_first).
    std::string target;
    bool all_ip = true;
    for (const std::string& e : options_.endpoints) all_ip = all_ip && IsIpPort(e);
    if (all_ip) {
      target = absl::StrCat("ipv4:", absl::StrJoin(options_.endpoints, ","));
    } else {
      target = absl::StrCat("dns:///", options_.endpoints[0]);
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetMaxSendMessageSize(256 << 20);
    // A dead endpoint is noticed within seconds, not at the next write.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    kv_ = KV::NewStub(channel_);
    watch_ = etcdserverpb::Watch::NewStub(channel_);
  }

  ~EtcdBackend() override { Stop(); }

  std::string Describe() const override {
    return absl::StrCat("etcd ", absl::StrJoin(options_.endpoints, ","), " prefix ",
                        options_.prefix);
  }

  bool shared() const override { return true; }

  bool Load(StoredData* out, std::string* error) override {
    // The Store applies what Load returns under the mutex it holds while calling.
    int64_t revision = 0, state_revision = 0;
    if (!LoadAt(out, &revision, &state_revision, error)) return false;
    Seen(revision, state_revision);
    return true;
  }

  bool Commit(const pb::StoredVersion& version, const pb::StoredState& state,
              const std::vector<uint64_t>& pruned, std::string* error) override {
    etcdserverpb::TxnRequest txn;
    // Only if nobody changed the state since this replica last saw it.
    auto* cmp = txn.add_compare();
    cmp->set_key(StateKey());
    cmp->set_target(etcdserverpb::Compare::MOD);
    cmp->set_result(etcdserverpb::Compare::EQUAL);
    {
      std::lock_guard<std::mutex> lock(mu_);
      cmp->set_mod_revision(state_revision_);
    }
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(VersionKey(version.info().version()));
    put->set_value(version.SerializeAsString());
    auto* put_state = txn.add_success()->mutable_request_put();
    put_state->set_key(StateKey());
    put_state->set_value(state.SerializeAsString());
    for (uint64_t v : pruned) {
      txn.add_success()->mutable_request_delete_range()->set_key(VersionKey(v));
    }
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    etcdserverpb::TxnResponse resp;
    grpc::Status s = kv_->Txn(&ctx, txn, &resp);
    if (!s.ok()) {
      *error = absl::StrCat("etcd unreachable (", Describe(), "): ", s.error_message());
      return false;
    }
    if (!resp.succeeded()) {
      *error =
          "another control-plane replica changed the configuration first; nothing was "
          "applied, try again";
      return false;
    }
    Seen(resp.header().revision(), resp.header().revision());
    return true;
  }

  void Watch(ChangeFn on_change) override {
    on_change_ = std::move(on_change);
    thread_ = std::thread([this] { Run(); });
  }

  void Stop() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
      if (watch_ctx_) watch_ctx_->TryCancel();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string StateKey() const { return options_.prefix + "state"; }
  std::string VersionsPrefix() const { return options_.prefix + "versions/"; }
  std::string VersionKey(uint64_t v) const {
    std::string n = absl::StrCat(v);
    return absl::StrCat(VersionsPrefix(), std::string(n.size() < 20 ? 20 - n.size() : 0, '0'), n);
  }
  bool ParseVersionKey(const std::string& key, uint64_t* v) const {
    return absl::StartsWith(key, VersionsPrefix()) &&
           absl::SimpleAtoi(key.substr(VersionsPrefix().size()), v);
  }

  void SetDeadline(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() + options_.timeout);
  }

  // Every version (keys first, then one at a time: a version may be large) and the state, as of
  // one revision.
  bool LoadAt(StoredData* out, int64_t* revision, int64_t* state_revision, std::string* error) {
    etcdserverpb::RangeRequest keys;
    keys.set_key(VersionsPrefix());
    keys.set_range_end(PrefixEnd(VersionsPrefix()));
    keys.set_keys_only(true);
    etcdserverpb::RangeResponse listed;
    {
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      grpc::Status s = kv_->Range(&ctx, keys, &listed);
      if (!s.ok()) {
        *error = absl::StrCat("etcd unreachable (", Describe(), "): ", s.error_message());
        return false;
      }
    }
    *revision = listed.header().revision();
    for (const auto& kv : listed.kvs()) {
      etcdserverpb::RangeRequest one;
      one.set_key(kv.key());
      one.set_revision(*revision);
      etcdserverpb::RangeResponse got;
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      grpc::Status s = kv_->Range(&ctx, one, &got);
      if (!s.ok()) {
        *error = absl::StrCat("etcd unreachable (", Describe(), "): ", s.error_message());
        return false;
      }
      if (got.kvs().empty()) continue;
      pb::StoredVersion v;
      if (!v.ParseFromString(got.kvs(0).value())) {
        *error = absl::StrCat("etcd: ", kv.key(), " does not hold a StoredVersion");
        return false;
      }
      out->versions.push_back(std::move(v));
    }
    etcdserverpb::RangeRequest state;
    state.set_key(StateKey());
    state.set_revision(*revision);
    etcdserverpb::RangeResponse got;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = kv_->Range(&ctx, state, &got);
    if (!s.ok()) {
      *error = absl::StrCat("etcd unreachable (", Describe(), "): ", s.error_message());
      return false;
    }
    *state_revision = 0;
    if (!got.kvs().empty()) {
      out->has_state = out->state.ParseFromString(got.kvs(0).value());
      *state_revision = got.kvs(0).mod_revision();
    }
    return true;
  }

  // What the store has been seen at is only moved forward, and only once the Store has taken
  // the data in (the callback returns after the Store applied it under its mutex): a change
  // computed on older data then fails its transaction instead of overwriting newer data.
  void Seen(int64_t revision, int64_t state_revision) {
    std::lock_guard<std::mutex> lock(mu_);
    highest_revision_ = std::max(highest_revision_, revision);
    state_revision_ = std::max(state_revision_, state_revision);
  }

  void Run() {
    std::chrono::milliseconds backoff(200);
    bool first = true;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!first) cv_.wait_for(lock, backoff, [this] { return stop_; });
        if (stop_) return;
      }
      first = false;
      StoredData data;
      int64_t revision = 0, state_revision = 0;
      std::string error;
      if (!LoadAt(&data, &revision, &state_revision, &error)) {
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        continue;
      }
      bool stale;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stale = revision < highest_revision_;
      }
      // A load that began before this replica's own last commit would take that commit back;
      // the watch from its revision replays what came after it instead.
      if (!stale) {
        on_change_(data, /*full=*/true, {});
        Seen(revision, state_revision);
      }
      backoff = std::chrono::milliseconds(200);
      WatchFrom(revision + 1);
    }
  }

  // Delivers every change under the prefix from `revision` until the stream ends.
  void WatchFrom(int64_t revision) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      watch_ctx_ = ctx;
    }
    auto stream = watch_->Watch(ctx.get());
    etcdserverpb::WatchRequest req;
    auto* create = req.mutable_create_request();
    create->set_key(options_.prefix);
    create->set_range_end(PrefixEnd(options_.prefix));
    create->set_start_revision(revision);
    create->set_progress_notify(true);
    if (stream->Write(req)) {
      etcdserverpb::WatchResponse resp;
      while (stream->Read(&resp)) {
        if (resp.canceled() || resp.compact_revision() != 0) break;  // reload whole
        StoredData data;
        std::vector<uint64_t> removed;
        int64_t state_revision = 0;
        for (const auto& ev : resp.events()) {
          uint64_t v = 0;
          if (ev.kv().key() == StateKey()) {
            if (ev.type() == etcdserverpb::Event::PUT &&
                data.state.ParseFromString(ev.kv().value())) {
              data.has_state = true;
              state_revision = ev.kv().mod_revision();
            }
          } else if (ParseVersionKey(ev.kv().key(), &v)) {
            if (ev.type() == etcdserverpb::Event::DELETE) {
              removed.push_back(v);
            } else {
              pb::StoredVersion sv;
              if (sv.ParseFromString(ev.kv().value())) data.versions.push_back(std::move(sv));
            }
          }
        }
        if (!data.versions.empty() || data.has_state || !removed.empty()) {
          on_change_(data, /*full=*/false, removed);
        }
        Seen(resp.header().revision(), state_revision);
      }
    }
    ctx->TryCancel();
    stream->Finish();
    std::lock_guard<std::mutex> lock(mu_);
    watch_ctx_.reset();
  }

  EtcdOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
  ChangeFn on_change_;
  std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t state_revision_ = 0;    // mod_revision of the state key as last seen (0: absent)
  int64_t highest_revision_ = 0;  // the newest store revision taken in or written
  std::shared_ptr<grpc::ClientContext> watch_ctx_;
  std::thread thread_;
};

}  // namespace

bool ParseEtcdUrl(const std::string& url, EtcdOptions* out, std::string* error) {
  const std::string scheme = "etcd://";
  if (!absl::StartsWith(url, scheme) || url.size() == scheme.size()) {
    *error = absl::StrCat("--store: expected etcd://HOST:PORT[,HOST:PORT...], got '", url, "'");
    return false;
  }
  out->endpoints.clear();
  for (absl::string_view e : absl::StrSplit(url.substr(scheme.size()), ',')) {
    std::string endpoint(e);
    size_t colon = endpoint.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      *error = absl::StrCat("--store: '", endpoint, "' is not HOST:PORT");
      return false;
    }
    out->endpoints.push_back(endpoint);
  }
  return true;
}

std::unique_ptr<StoreBackend> MakeEtcdBackend(EtcdOptions options) {
  return std::make_unique<EtcdBackend>(std::move(options));
}

}  // namespace xds_server
}  // namespace rpx
