// XdsClient against an in-process fake ADS server that records every request: what the client
// subscribes to, in both protocols. The rule under test is Envoy's: Listener and Cluster are
// wildcard when asked for; RouteConfiguration and ClusterLoadAssignment are requested only by
// name, never with an empty list that a control plane would read as a wildcard; names that go
// away are unsubscribed.
//
// Absence is shown without waiting: requests travel in order on one stream, so when a later,
// known request arrives first, the one that should not exist was never sent.
#include "source/config/xds_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <optional>
#include <thread>

#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using envoy::service::discovery::v3::AggregatedDiscoveryService;
using envoy::service::discovery::v3::DeltaDiscoveryRequest;
using envoy::service::discovery::v3::DeltaDiscoveryResponse;
using envoy::service::discovery::v3::DiscoveryRequest;
using envoy::service::discovery::v3::DiscoveryResponse;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr std::chrono::milliseconds kWait(10000);  // only reached when something is wrong

// One request as the test reads it, from either protocol.
struct Request {
  int stream = 0;  // 1 for the first stream the server saw, 2 after a reconnect, ...
  std::string type_url;
  std::string nonce;
  std::string version;                   // SotW
  std::vector<std::string> names;        // SotW resource_names, or delta subscribe
  std::vector<std::string> unsubscribe;  // delta
  std::vector<std::string> initial;      // delta initial_resource_versions keys
  bool has_error = false;
  bool has_node = false;
};

class FakeAds final : public AggregatedDiscoveryService::Service {
 public:
  grpc::Status StreamAggregatedResources(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* stream) override {
    int id = Open(ctx, stream, nullptr);
    DiscoveryRequest r;
    while (stream->Read(&r)) {
      Request q;
      q.stream = id;
      q.type_url = r.type_url();
      q.nonce = r.response_nonce();
      q.version = r.version_info();
      q.names.assign(r.resource_names().begin(), r.resource_names().end());
      q.has_error = r.has_error_detail();
      q.has_node = r.has_node();
      Push(std::move(q));
    }
    return Close();
  }

  grpc::Status DeltaAggregatedResources(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<DeltaDiscoveryResponse, DeltaDiscoveryRequest>* stream) override {
    int id = Open(ctx, nullptr, stream);
    DeltaDiscoveryRequest r;
    while (stream->Read(&r)) {
      Request q;
      q.stream = id;
      q.type_url = r.type_url();
      q.nonce = r.response_nonce();
      q.names.assign(r.resource_names_subscribe().begin(), r.resource_names_subscribe().end());
      q.unsubscribe.assign(r.resource_names_unsubscribe().begin(),
                           r.resource_names_unsubscribe().end());
      for (const auto& [name, v] : r.initial_resource_versions()) q.initial.push_back(name);
      std::sort(q.initial.begin(), q.initial.end());
      q.has_error = r.has_error_detail();
      q.has_node = r.has_node();
      Push(std::move(q));
    }
    return Close();
  }

  std::optional<Request> Next() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, kWait, [&] { return !requests_.empty(); });
    if (requests_.empty()) return std::nullopt;
    Request r = std::move(requests_.front());
    requests_.pop_front();
    return r;
  }

  // Sends a response of `type_url` holding resources named `names` on the open stream.
  void Respond(const std::string& type_url, const std::vector<std::string>& names,
               const std::string& version, const std::string& nonce) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, kWait, [&] { return sotw_ || delta_; });
    if (sotw_) {
      DiscoveryResponse r;
      r.set_type_url(type_url);
      r.set_version_info(version);
      r.set_nonce(nonce);
      for (const auto& n : names) Pack(type_url, n, r.add_resources());
      sotw_->Write(r);
    } else if (delta_) {
      DeltaDiscoveryResponse r;
      r.set_type_url(type_url);
      r.set_system_version_info(version);
      r.set_nonce(nonce);
      for (const auto& n : names) {
        auto* res = r.add_resources();
        res->set_name(n);
        res->set_version(version);
        Pack(type_url, n, res->mutable_resource());
      }
      delta_->Write(r);
    }
  }

  // Ends the open stream (the client reconnects).
  void EndStream() {
    std::lock_guard<std::mutex> l(mu_);
    if (ctx_) ctx_->TryCancel();
  }

 private:
  static void Pack(const std::string& type_url, const std::string& name,
                   google::protobuf::Any* any) {
    if (type_url == kRouteType) {
      envoy::config::route::v3::RouteConfiguration m;
      m.set_name(name);
      any->PackFrom(m);
    } else if (type_url == kEndpointType) {
      envoy::config::endpoint::v3::ClusterLoadAssignment m;
      m.set_cluster_name(name);
      any->PackFrom(m);
    } else if (type_url == kClusterType) {
      envoy::config::cluster::v3::Cluster m;
      m.set_name(name);
      any->PackFrom(m);
    } else {
      envoy::config::listener::v3::Listener m;
      m.set_name(name);
      any->PackFrom(m);
    }
  }

  int Open(grpc::ServerContext* ctx,
           grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* sotw,
           grpc::ServerReaderWriter<DeltaDiscoveryResponse, DeltaDiscoveryRequest>* delta) {
    std::lock_guard<std::mutex> l(mu_);
    ctx_ = ctx;
    sotw_ = sotw;
    delta_ = delta;
    cv_.notify_all();
    return ++streams_;
  }
  grpc::Status Close() {
    std::lock_guard<std::mutex> l(mu_);
    sotw_ = nullptr;
    delta_ = nullptr;
    ctx_ = nullptr;
    return grpc::Status::OK;
  }
  void Push(Request q) {
    std::lock_guard<std::mutex> l(mu_);
    requests_.push_back(std::move(q));
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> requests_;
  grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* sotw_ = nullptr;
  grpc::ServerReaderWriter<DeltaDiscoveryResponse, DeltaDiscoveryRequest>* delta_ = nullptr;
  grpc::ServerContext* ctx_ = nullptr;
  int streams_ = 0;
};

// Accepts everything and remembers what it was given.
class RecordingApplier : public XdsApplier {
 public:
  std::string Apply(const std::string& type_url, const XdsResourceMap& resources,
                    const std::string& version) override {
    std::lock_guard<std::mutex> l(mu);
    applied.push_back(type_url);
    return "";
  }
  std::mutex mu;
  std::vector<std::string> applied;
};

class XdsClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&ads_);
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    main_thread_ = std::thread([this] {
      main_ = std::make_unique<Dispatcher>("main");
      ready_.set_value();
      main_->Run();
    });
    ready_.get_future().wait();
    XdsClientOptions o;
    o.target = "ipv4:127.0.0.1:" + std::to_string(port);
    o.delta = GetParam();
    o.node.set_id("node-1");
    client_ = std::make_unique<XdsClient>(*main_, o, applier_);
  }

  void TearDown() override {
    client_->Stop();
    OnMain([] {});
    main_->Exit();
    main_thread_.join();
    client_.reset();
    main_.reset();
    server_->Shutdown(std::chrono::system_clock::now());
  }

  // Runs `fn` on the main dispatcher and waits for it.
  void OnMain(std::function<void()> fn) {
    std::promise<void> done;
    main_->Post([&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }
  void SetNames(const std::string& type_url, std::set<std::string> names) {
    OnMain([&] { client_->SetNames(type_url, names); });
  }
  void Start(bool lds, bool cds) {
    OnMain([&] { client_->Start(lds, cds); });
  }
  Request Next() {
    auto r = ads_.Next();
    EXPECT_TRUE(r.has_value()) << "no request within the wait";
    return r.value_or(Request{});
  }
  bool delta() const { return GetParam(); }

  FakeAds ads_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Dispatcher> main_;
  std::thread main_thread_;
  std::promise<void> ready_;
  RecordingApplier applier_;
  std::unique_ptr<XdsClient> client_;
};

TEST_P(XdsClientTest, WildcardTypesOnlyWhenAskedAndNoRequestForUnnamedTypes) {
  Start(/*lds=*/true, /*cds=*/true);
  Request cds = Next();
  EXPECT_EQ(cds.type_url, kClusterType);
  EXPECT_THAT(cds.names, IsEmpty());  // wildcard
  EXPECT_TRUE(cds.has_node);
  Request lds = Next();
  EXPECT_EQ(lds.type_url, kListenerType);
  EXPECT_THAT(lds.names, IsEmpty());

  // Answers with no route or endpoint names to follow: the ACKs come, nothing for RDS or EDS.
  ads_.Respond(kClusterType, {"c1"}, "1", "n1");
  Request ack = Next();
  EXPECT_EQ(ack.type_url, kClusterType);
  EXPECT_EQ(ack.nonce, "n1");
  EXPECT_FALSE(ack.has_error);
  if (!delta()) EXPECT_EQ(ack.version, "1");

  // Setting empty name sets sends nothing; the next request on the stream is the EDS one.
  SetNames(kRouteType, {});
  SetNames(kEndpointType, {});
  SetNames(kEndpointType, {"c1"});
  Request eds = Next();
  EXPECT_EQ(eds.type_url, kEndpointType);
  EXPECT_THAT(eds.names, ElementsAre("c1"));
}

TEST_P(XdsClientTest, NamesSetBeforeStartAreTheFirstRequestsAndNothingElseIsAsked) {
  // A static listener with RDS and a static EDS cluster, no LDS or CDS.
  SetNames(kRouteType, {"r"});
  SetNames(kEndpointType, {"e1", "e2"});
  Start(/*lds=*/false, /*cds=*/false);
  Request eds = Next();
  EXPECT_EQ(eds.type_url, kEndpointType);
  EXPECT_THAT(eds.names, ElementsAre("e1", "e2"));
  EXPECT_TRUE(eds.has_node);
  Request rds = Next();
  EXPECT_EQ(rds.type_url, kRouteType);
  EXPECT_THAT(rds.names, ElementsAre("r"));

  ads_.Respond(kRouteType, {"r"}, "7", "n1");
  Request ack = Next();
  EXPECT_EQ(ack.type_url, kRouteType);
  EXPECT_EQ(ack.nonce, "n1");
  if (!delta()) {
    EXPECT_EQ(ack.version, "7");
    EXPECT_THAT(ack.names, ElementsAre("r"));
  } else {
    EXPECT_THAT(ack.names, IsEmpty());  // nothing new to subscribe to
  }
}

TEST_P(XdsClientTest, RemovedNamesAreUnsubscribedAndTheLastOneToo) {
  SetNames(kEndpointType, {"e"});
  SetNames(kRouteType, {"a", "b"});
  Start(false, false);
  EXPECT_EQ(Next().type_url, kEndpointType);
  Request first = Next();
  EXPECT_EQ(first.type_url, kRouteType);
  EXPECT_THAT(first.names, ElementsAre("a", "b"));

  SetNames(kRouteType, {"b", "c"});
  Request change = Next();
  EXPECT_EQ(change.type_url, kRouteType);
  if (delta()) {
    EXPECT_THAT(change.names, ElementsAre("c"));
    EXPECT_THAT(change.unsubscribe, ElementsAre("a"));
  } else {
    EXPECT_THAT(change.names, ElementsAre("b", "c"));
  }

  // The last names go: SotW sends an empty list (after names, it unsubscribes from all), delta
  // the unsubscribes.
  SetNames(kRouteType, {});
  Request last = Next();
  EXPECT_EQ(last.type_url, kRouteType);
  EXPECT_THAT(last.names, IsEmpty());
  if (delta()) EXPECT_THAT(last.unsubscribe, ElementsAre("b", "c"));

  // A response that crossed the unsubscribe is dropped, and its nonce answers it in the type's
  // next request. (The EDS response behind it is handled after it: its ACK says the RDS one
  // has been seen.)
  ads_.Respond(kRouteType, {"b"}, "2", "late");
  ads_.Respond(kEndpointType, {"e"}, "1", "n-e");
  Request eds_ack = Next();
  EXPECT_EQ(eds_ack.type_url, kEndpointType);
  EXPECT_EQ(eds_ack.nonce, "n-e");
  SetNames(kRouteType, {"d"});
  Request again = Next();
  EXPECT_EQ(again.type_url, kRouteType);
  EXPECT_THAT(again.names, ElementsAre("d"));
  EXPECT_EQ(again.nonce, "late");
  std::lock_guard<std::mutex> l(applier_.mu);
  EXPECT_THAT(applier_.applied, ElementsAre(kEndpointType));
}

TEST_P(XdsClientTest, AReconnectResubscribesOnlyWhatIsNamed) {
  Start(/*lds=*/true, /*cds=*/false);
  Request lds = Next();
  EXPECT_EQ(lds.type_url, kListenerType);
  SetNames(kRouteType, {"r"});
  Request rds = Next();
  EXPECT_THAT(rds.names, ElementsAre("r"));
  ads_.Respond(kRouteType, {"r"}, "1", "n1");
  Request ack = Next();
  EXPECT_EQ(ack.nonce, "n1");
  // A type that was named and then emptied: not part of the next stream at all.
  SetNames(kEndpointType, {"e"});
  EXPECT_EQ(Next().type_url, kEndpointType);
  SetNames(kEndpointType, {});
  EXPECT_EQ(Next().type_url, kEndpointType);

  ads_.EndStream();
  Request l2 = Next();
  EXPECT_EQ(l2.stream, 2);
  EXPECT_EQ(l2.type_url, kListenerType);
  EXPECT_EQ(l2.nonce, "");
  Request r2 = Next();
  EXPECT_EQ(r2.stream, 2);
  EXPECT_EQ(r2.type_url, kRouteType);
  EXPECT_THAT(r2.names, ElementsAre("r"));
  if (delta()) {
    EXPECT_THAT(r2.initial, ElementsAre("r"));  // what it already has
  } else {
    EXPECT_EQ(r2.version, "1");
  }
  // Proof that no EDS request came between or after: the next one is the one named now.
  SetNames(kRouteType, {"r", "s"});
  Request r3 = Next();
  EXPECT_EQ(r3.type_url, kRouteType);
}

INSTANTIATE_TEST_SUITE_P(Protocols, XdsClientTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Delta" : "Sotw";
                         });

}  // namespace
}  // namespace rpx
