// End-to-end tests of tools/xds_server: the real XdsServer (gRPC server, ADS service, directory
// poller) on 127.0.0.1:0, driven by a real gRPC client stub. Every wait is bounded: calls carry a
// deadline, responses are read by a thread and waited for with a timeout.
#include "tools/xds_server/ads_service.h"

#include <stdlib.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <fstream>
#include <optional>
#include <thread>

#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "envoy/extensions/transport_sockets/tls/v3/secret.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "test/tools/xds_server/test_util.h"

namespace rpx {
namespace xds_server {
namespace {

using envoy::service::discovery::v3::AggregatedDiscoveryService;
using envoy::service::discovery::v3::DeltaDiscoveryRequest;
using envoy::service::discovery::v3::DeltaDiscoveryResponse;
using envoy::service::discovery::v3::DiscoveryRequest;
using envoy::service::discovery::v3::DiscoveryResponse;
using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const std::string kLds = "type.googleapis.com/envoy.config.listener.v3.Listener";
const std::string kRds = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const std::string kCds = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const std::string kSds = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
const std::string kEds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

// Long enough for a loaded 2-core machine; only reached when something is wrong.
constexpr milliseconds kWait(5000);
// How long "nothing arrives" is watched. Pushes take well under a millisecond locally, so a
// wrong push would show; a right silence costs only this.
constexpr milliseconds kQuiet(300);

// A client stream whose responses are read by a thread, so a test can wait for the next one with
// a timeout, or check that none comes.
template <typename Request, typename Response>
class ClientStream {
 public:
  using Start = std::function<std::unique_ptr<grpc::ClientReaderWriter<Request, Response>>(
      grpc::ClientContext*)>;

  explicit ClientStream(const Start& start) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream_ = start(&context_);
    reader_ = std::thread([this] {
      while (true) {
        Response resp;
        if (!stream_->Read(&resp)) break;
        std::lock_guard<std::mutex> lock(mu_);
        responses_.push_back(std::move(resp));
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      cv_.notify_all();
    });
  }
  ~ClientStream() {
    context_.TryCancel();
    reader_.join();
    stream_->Finish();
  }

  void Send(const Request& req) { ASSERT_TRUE(stream_->Write(req)); }

  std::optional<Response> Next(milliseconds timeout = kWait) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !responses_.empty() || closed_; });
    if (responses_.empty()) return std::nullopt;
    Response resp = std::move(responses_.front());
    responses_.pop_front();
    return resp;
  }

  bool WaitClosed(milliseconds timeout = kWait) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return closed_; });
  }

  void Close() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<Request, Response>> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Response> responses_;
  bool closed_ = false;
};

using SotwStream = ClientStream<DiscoveryRequest, DiscoveryResponse>;
using DeltaStream = ClientStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>;

DiscoveryRequest Sotw(const std::string& type_url, std::vector<std::string> names = {},
                      const std::string& version = "", const std::string& nonce = "",
                      const std::string& node = "") {
  DiscoveryRequest req;
  if (!node.empty()) req.mutable_node()->set_id(node);
  req.set_type_url(type_url);
  for (const auto& n : names) req.add_resource_names(n);
  req.set_version_info(version);
  req.set_response_nonce(nonce);
  return req;
}

DeltaDiscoveryRequest Delta(const std::string& type_url, std::vector<std::string> subscribe = {},
                            const std::string& nonce = "", const std::string& node = "") {
  DeltaDiscoveryRequest req;
  if (!node.empty()) req.mutable_node()->set_id(node);
  req.set_type_url(type_url);
  for (const auto& n : subscribe) req.add_resource_names_subscribe(n);
  req.set_response_nonce(nonce);
  return req;
}

// Names of the resources of a SotW response, in order, checking each Any's type.
std::vector<std::string> Names(const DiscoveryResponse& resp) {
  std::vector<std::string> names;
  for (const auto& any : resp.resources()) {
    EXPECT_EQ(any.type_url(), resp.type_url());
    if (resp.type_url() == kLds) {
      envoy::config::listener::v3::Listener m;
      EXPECT_TRUE(any.UnpackTo(&m));
      names.push_back(m.name());
    } else if (resp.type_url() == kRds) {
      envoy::config::route::v3::RouteConfiguration m;
      EXPECT_TRUE(any.UnpackTo(&m));
      names.push_back(m.name());
    } else if (resp.type_url() == kCds) {
      envoy::config::cluster::v3::Cluster m;
      EXPECT_TRUE(any.UnpackTo(&m));
      names.push_back(m.name());
    } else {
      envoy::config::endpoint::v3::ClusterLoadAssignment m;
      EXPECT_TRUE(any.UnpackTo(&m));
      names.push_back(m.cluster_name());
    }
  }
  return names;
}

std::vector<std::string> Names(const DeltaDiscoveryResponse& resp) {
  std::vector<std::string> names;
  for (const auto& r : resp.resources()) {
    EXPECT_EQ(r.resource().type_url(), resp.type_url());
    EXPECT_EQ(r.version().size(), 16u);
    names.push_back(r.name());
  }
  return names;
}

std::vector<std::string> Removed(const DeltaDiscoveryResponse& resp) {
  return {resp.removed_resources().begin(), resp.removed_resources().end()};
}

constexpr char kListeners[] = R"(listeners:
- name: l1
  address: { socket_address: { address: 127.0.0.1, port_value: 10001 } }
- name: l2
  address: { socket_address: { address: 127.0.0.1, port_value: 10002 } }
)";
constexpr char kRoutes[] = R"(routes:
- name: r1
  virtual_hosts:
  - { name: v, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: c1 } }] }
- name: r2
)";
constexpr char kClusters[] = R"(clusters:
- { name: c1, type: EDS, connect_timeout: 1s }
- { name: c2, type: EDS, connect_timeout: 1s }
)";
constexpr char kEndpoints[] = R"(endpoints:
- cluster_name: c1
  endpoints:
  - lb_endpoints:
    - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
)";

class AdsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    WriteFile(dir_, "listeners.yaml", kListeners);
    WriteFile(dir_, "routes.yaml", kRoutes);
    WriteFile(dir_, "clusters.yaml", kClusters);
    WriteFile(dir_, "endpoints.yaml", kEndpoints);
  }

  void StartServer() {
    XdsServerOptions options;
    options.dir = dir_;
    options.poll_interval = milliseconds(20);
    // These fixtures are minimal resources, not whole configurations: the protocol is under test.
    options.check = false;
    server_ = std::make_unique<XdsServer>(options, log_.fn());
    std::string error;
    ASSERT_TRUE(server_->Start(&error)) << error;
    ASSERT_GT(server_->port(), 0);
    ASSERT_TRUE(log_.WaitFor(
        "xds_server listening on 127.0.0.1:" + std::to_string(server_->port()) + " dir=" + dir_));
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
    stub_ = AggregatedDiscoveryService::NewStub(channel);
  }

  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::unique_ptr<SotwStream> OpenSotw() {
    return std::make_unique<SotwStream>(
        [this](grpc::ClientContext* c) { return stub_->StreamAggregatedResources(c); });
  }
  std::unique_ptr<DeltaStream> OpenDelta() {
    return std::make_unique<DeltaStream>(
        [this](grpc::ClientContext* c) { return stub_->DeltaAggregatedResources(c); });
  }

  // Writes a file and waits until the server has loaded snapshot `version`.
  void Change(const std::string& name, const std::string& content, const std::string& version) {
    WriteFile(dir_, name, content);
    ASSERT_TRUE(log_.WaitFor("snapshot version=" + version + " ")) << log_.All();
  }

  std::string dir_;
  LogCapture log_;
  std::unique_ptr<XdsServer> server_;
  std::unique_ptr<AggregatedDiscoveryService::Stub> stub_;
};

TEST_F(AdsServiceTest, SotwListenerWildcardAckAndPushOnChange) {
  StartServer();
  ASSERT_TRUE(
      log_.WaitFor("snapshot version=1 listeners=l1,l2 routes=r1,r2 clusters=c1,c2 "
                   "endpoints=c1"));
  auto stream = OpenSotw();
  stream->Send(Sotw(kLds, {}, "", "", "node-1"));
  auto resp = stream->Next();
  ASSERT_TRUE(resp) << log_.All();
  EXPECT_EQ(resp->version_info(), "1");
  EXPECT_EQ(resp->type_url(), kLds);
  EXPECT_EQ(resp->nonce(), "1");
  EXPECT_THAT(Names(*resp), ElementsAre("l1", "l2"));
  EXPECT_TRUE(log_.WaitFor("stream open node=node-1 mode=sotw"));
  EXPECT_TRUE(log_.WaitFor("push node=node-1 type=LDS version=1 nonce=1 resources=l1,l2"));

  stream->Send(Sotw(kLds, {}, "1", "1"));
  EXPECT_TRUE(log_.WaitFor("ACK node=node-1 type=LDS version=1 nonce=1")) << log_.All();

  Change("listeners.yaml",
         "listeners:\n- name: l1\n  address: { socket_address: { address: 127.0.0.1, "
         "port_value: 10001 } }\n- name: l2\n  address: { socket_address: { address: 127.0.0.1, "
         "port_value: 20002 } }\n",
         "2");
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->version_info(), "2");
  EXPECT_EQ(resp->nonce(), "2");
  ASSERT_THAT(Names(*resp), ElementsAre("l1", "l2"));
  envoy::config::listener::v3::Listener l2;
  ASSERT_TRUE(resp->resources(1).UnpackTo(&l2));
  EXPECT_EQ(l2.address().socket_address().port_value(), 20002u);
  stream->Send(Sotw(kLds, {}, "2", "2"));
  EXPECT_TRUE(log_.WaitFor("ACK node=node-1 type=LDS version=2 nonce=2"));

  // A new version that does not touch listeners pushes nothing on LDS.
  Change("clusters.yaml", "clusters: [{ name: c1, type: EDS }]\n", "3");
  EXPECT_FALSE(stream->Next(kQuiet));

  stream->Close();
  EXPECT_TRUE(log_.WaitFor("stream closed node=node-1"));
}

TEST_F(AdsServiceTest, SotwRoutesAnswerWithTheRequestedNamesThatExist) {
  StartServer();
  auto stream = OpenSotw();
  stream->Send(Sotw(kRds, {"r1", "missing"}, "", "", "node-r"));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kRds);
  EXPECT_EQ(resp->version_info(), "1");
  EXPECT_THAT(Names(*resp), ElementsAre("r1"));

  // More names in the ACK: a response with the new set, same snapshot version.
  stream->Send(Sotw(kRds, {"r1", "r2", "missing"}, "1", resp->nonce()));
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->version_info(), "1");
  EXPECT_THAT(Names(*resp), ElementsAre("r1", "r2"));
  EXPECT_TRUE(log_.WaitFor("ACK node=node-r type=RDS version=1 nonce=1"));

  // A name that does not exist yet changes nothing that could be sent.
  stream->Send(Sotw(kRds, {"r1", "r2", "missing", "r3"}, "1", resp->nonce()));
  EXPECT_FALSE(stream->Next(kQuiet));

  Change("routes.yaml", "routes: [{name: r1}, {name: r2}, {name: r3}, {name: other}]\n", "2");
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->version_info(), "2");
  EXPECT_THAT(Names(*resp), ElementsAre("r1", "r2", "r3"));

  // Fewer names: the smaller set.
  stream->Send(Sotw(kRds, {"r3"}, "2", resp->nonce()));
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_THAT(Names(*resp), ElementsAre("r3"));
}

TEST_F(AdsServiceTest, SotwRoutesWaitUntilARequestedNameExists) {
  StartServer();
  auto stream = OpenSotw();
  stream->Send(Sotw(kRds, {"later"}, "", "", "node-w"));
  // Requests are handled in order, so once LDS is answered the RDS request has been handled.
  stream->Send(Sotw(kLds));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kLds);
  EXPECT_FALSE(stream->Next(kQuiet));

  Change("routes.yaml", "routes: [{name: r1}, {name: later}]\n", "2");
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kRds);
  EXPECT_EQ(resp->version_info(), "2");
  EXPECT_THAT(Names(*resp), ElementsAre("later"));
  // Listeners did not change.
  EXPECT_FALSE(stream->Next(kQuiet));
}

TEST_F(AdsServiceTest, SotwNackIsLoggedAndNotAnsweredStaleNoncesAreIgnored) {
  StartServer();
  auto stream = OpenSotw();
  stream->Send(Sotw(kLds, {"*"}, "", "", "node-n"));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_THAT(Names(*resp), ElementsAre("l1", "l2"));

  DiscoveryRequest nack = Sotw(kLds, {"*"}, "", "1");
  nack.mutable_error_detail()->set_code(3);
  nack.mutable_error_detail()->set_message("listener l1: unsupported\nfilter");
  stream->Send(nack);
  EXPECT_TRUE(log_.WaitFor(
      "NACK node=node-n type=LDS version= nonce=1 error=listener l1: unsupported filter"))
      << log_.All();
  // The same resources are not sent again.
  EXPECT_FALSE(stream->Next(kQuiet));

  // An answer to a nonce that is not the latest: ignored, even with other names.
  stream->Send(Sotw(kLds, {"l1"}, "", "0"));
  EXPECT_TRUE(log_.WaitFor("stale node=node-n type=LDS nonce=0 expected=1"));
  EXPECT_FALSE(stream->Next(kQuiet));
  EXPECT_EQ(log_.All().find("\nACK node=node-n"), std::string::npos);

  Change("listeners.yaml", "listeners: [{name: l1}]\n", "2");
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->version_info(), "2");
  EXPECT_THAT(Names(*resp), ElementsAre("l1"));
  stream->Send(Sotw(kLds, {"*"}, "2", resp->nonce()));
  EXPECT_TRUE(log_.WaitFor("ACK node=node-n type=LDS version=2 nonce=2"));

  // LDS is a full set: with no listener left, an empty response says so.
  Change("listeners.yaml", "routes: [{name: rr}]\n", "3");
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->version_info(), "3");
  EXPECT_EQ(resp->resources_size(), 0);
}

TEST_F(AdsServiceTest, SotwOnlyTheChangedTypeIsPushed) {
  StartServer();
  auto stream = OpenSotw();
  stream->Send(Sotw(kCds, {}, "", "", "node-t"));
  stream->Send(Sotw(kLds));
  stream->Send(Sotw(kEds, {"c1", "c2"}));
  std::map<std::string, DiscoveryResponse> first;
  for (int i = 0; i < 3; ++i) {
    auto resp = stream->Next();
    ASSERT_TRUE(resp);
    first[resp->type_url()] = *resp;
  }
  EXPECT_THAT(Names(first[kCds]), ElementsAre("c1", "c2"));
  EXPECT_THAT(Names(first[kEds]), ElementsAre("c1"));
  // Nonces count per stream.
  EXPECT_EQ(first[kCds].nonce(), "1");
  EXPECT_EQ(first[kLds].nonce(), "2");
  EXPECT_EQ(first[kEds].nonce(), "3");

  // Same content rewritten (and a real change elsewhere in the same directory).
  WriteFile(dir_, "listeners.yaml", kListeners);
  Change("endpoints.yaml", "endpoints:\n- cluster_name: c1\n- cluster_name: c2\n", "2");
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kEds);
  EXPECT_EQ(resp->version_info(), "2");
  EXPECT_THAT(Names(*resp), ElementsAre("c1", "c2"));
  EXPECT_FALSE(stream->Next(kQuiet));
}

TEST_F(AdsServiceTest, UnsupportedTypeIsIgnored) {
  StartServer();
  auto stream = OpenSotw();
  stream->Send(Sotw("type.googleapis.com/envoy.service.runtime.v3.Runtime", {}, "", "", "node-u"));
  stream->Send(Sotw(kCds));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kCds);
  EXPECT_TRUE(log_.WaitFor(
      "ignored node=node-u type_url=type.googleapis.com/envoy.service.runtime.v3.Runtime"));
}

TEST_F(AdsServiceTest, SecretsAreServedByName) {
  WriteFile(dir_, "secrets.yaml", R"(secrets:
- name: server_cert
  tls_certificate:
    certificate_chain: {inline_string: "chain"}
    private_key: {inline_string: "key"}
- name: other
  validation_context: {trusted_ca: {inline_string: "ca"}}
)");
  StartServer();
  ASSERT_TRUE(log_.WaitFor("endpoints=c1 secrets=other,server_cert")) << log_.All();
  auto stream = OpenSotw();
  stream->Send(Sotw(kSds, {"server_cert"}, "", "", "node-s"));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kSds);
  ASSERT_EQ(resp->resources_size(), 1);
  envoy::extensions::transport_sockets::tls::v3::Secret secret;
  ASSERT_TRUE(resp->resources(0).UnpackTo(&secret));
  EXPECT_EQ(secret.name(), "server_cert");
  EXPECT_EQ(secret.tls_certificate().certificate_chain().inline_string(), "chain");
  EXPECT_TRUE(log_.WaitFor("push node=node-s type=SDS version=1 nonce=1 resources=server_cert"));
}

TEST_F(AdsServiceTest, StreamsWaitForTheFirstGoodSnapshot) {
  WriteFile(dir_, "broken.yaml", "clusters: [{name: x, bogus: 1}]\n");
  StartServer();
  EXPECT_TRUE(log_.WaitFor("reload error: keeping snapshot version=none"));
  auto stream = OpenSotw();
  stream->Send(Sotw(kLds, {}, "", "", "node-b"));
  EXPECT_FALSE(stream->Next(kQuiet));
  ASSERT_EQ(unlink((dir_ + "/broken.yaml").c_str()), 0);
  auto resp = stream->Next();
  ASSERT_TRUE(resp) << log_.All();
  EXPECT_EQ(resp->version_info(), "1");
  EXPECT_THAT(Names(*resp), ElementsAre("l1", "l2"));
}

TEST_F(AdsServiceTest, ABrokenFileKeepsServingThePreviousVersion) {
  StartServer();
  auto stream = OpenSotw();
  stream->Send(Sotw(kCds, {}, "", "", "node-k"));
  ASSERT_TRUE(stream->Next());
  WriteFile(dir_, "clusters.yaml", "clusters: [{name: c1, lb_policy: FASTEST}]\n");
  EXPECT_TRUE(log_.WaitFor("reload error: " + dir_ + "/clusters.yaml:1:34: clusters[0].lb_policy"))
      << log_.All();
  EXPECT_FALSE(stream->Next(kQuiet));
  Change("clusters.yaml", "clusters: [{name: c1}]\n", "2");
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_THAT(Names(*resp), ElementsAre("c1"));
}

TEST_F(AdsServiceTest, SotwSubscriptionChangesAndEveryRequestAreLogged) {
  StartServer();
  auto stream = OpenSotw();
  stream->Send(Sotw(kRds, {"r1", "r2"}, "", "", "node-s"));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_TRUE(log_.WaitFor("request node=node-s type=RDS nonce= names=r1,r2"));
  EXPECT_TRUE(log_.WaitFor("subscribe node=node-s type=RDS names=r1,r2"));

  stream->Send(Sotw(kRds, {"r2"}, "1", resp->nonce()));
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_THAT(Names(*resp), ElementsAre("r2"));
  EXPECT_TRUE(log_.WaitFor("unsubscribe node=node-s type=RDS names=r1")) << log_.All();

  // After names were sent, an empty list unsubscribes from all of them: nothing is pushed, and
  // a later change of a route the stream once had is not pushed either.
  stream->Send(Sotw(kRds, {}, "1", resp->nonce()));
  EXPECT_TRUE(log_.WaitFor("request node=node-s type=RDS nonce=2 names=")) << log_.All();
  EXPECT_TRUE(log_.WaitFor("unsubscribe node=node-s type=RDS names=r2")) << log_.All();
  EXPECT_FALSE(stream->Next(kQuiet));
  Change("routes.yaml", "routes: [{name: r1}, {name: r2, virtual_hosts: [{name: v}]}]\n", "2");
  EXPECT_FALSE(stream->Next(kQuiet));
}

TEST_F(AdsServiceTest, SotwLegacyWildcardOnlyForAnEmptyFirstListenerOrClusterRequest) {
  StartServer();
  auto stream = OpenSotw();
  // An empty first RDS request subscribes to nothing (RDS has no wildcard).
  stream->Send(Sotw(kRds, {}, "", "", "node-l"));
  // An empty first CDS request is the legacy wildcard.
  stream->Send(Sotw(kCds));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kCds);
  EXPECT_THAT(Names(*resp), ElementsAre("c1", "c2"));
  EXPECT_TRUE(log_.WaitFor("subscribe node=node-l type=CDS names=*"));
  EXPECT_FALSE(stream->Next(kQuiet));
  EXPECT_EQ(log_.All().find("subscribe node=node-l type=RDS"), std::string::npos) << log_.All();

  // Naming clusters leaves the wildcard; an empty list after that unsubscribes from all.
  stream->Send(Sotw(kCds, {"c1"}, "1", resp->nonce()));
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_THAT(Names(*resp), ElementsAre("c1"));
  EXPECT_TRUE(log_.WaitFor("unsubscribe node=node-l type=CDS names=*")) << log_.All();
  stream->Send(Sotw(kCds, {}, "1", resp->nonce()));
  EXPECT_TRUE(log_.WaitFor("unsubscribe node=node-l type=CDS names=c1")) << log_.All();
  resp = stream->Next();  // the (empty) full set: absence deletes for CDS
  ASSERT_TRUE(resp);
  EXPECT_THAT(Names(*resp), ElementsAre());
}

TEST_F(AdsServiceTest, DeltaSubscriptionChangesAreLogged) {
  StartServer();
  auto stream = OpenDelta();
  stream->Send(Delta(kEds, {"c1", "c2"}, "", "node-d"));
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_TRUE(log_.WaitFor("request node=node-d type=EDS nonce= subscribe=c1,c2 unsubscribe="));
  EXPECT_TRUE(log_.WaitFor("subscribe node=node-d type=EDS names=c1,c2"));
  DeltaDiscoveryRequest unsub = Delta(kEds, {}, resp->nonce());
  unsub.add_resource_names_unsubscribe("c1");
  unsub.add_resource_names_unsubscribe("c2");
  stream->Send(unsub);
  EXPECT_TRUE(log_.WaitFor("request node=node-d type=EDS nonce=1 subscribe= unsubscribe=c1,c2"))
      << log_.All();
  EXPECT_TRUE(log_.WaitFor("unsubscribe node=node-d type=EDS names=c1,c2")) << log_.All();
  EXPECT_FALSE(stream->Next(kQuiet));
}

TEST_F(AdsServiceTest, DeltaSubscribeChangeAndRemove) {
  StartServer();
  auto stream = OpenDelta();
  stream->Send(Delta(kCds, {}, "", "delta-node"));
  auto cds = stream->Next();
  ASSERT_TRUE(cds);
  EXPECT_EQ(cds->type_url(), kCds);
  EXPECT_EQ(cds->system_version_info(), "1");
  EXPECT_EQ(cds->nonce(), "1");
  EXPECT_THAT(Names(*cds), ElementsAre("c1", "c2"));
  EXPECT_THAT(Removed(*cds), IsEmpty());
  EXPECT_TRUE(log_.WaitFor("stream open node=delta-node mode=delta"));
  EXPECT_TRUE(
      log_.WaitFor("push node=delta-node type=CDS version=1 nonce=1 resources=c1,c2 "
                   "removed="));

  stream->Send(Delta(kCds, {}, "1"));
  EXPECT_TRUE(log_.WaitFor("ACK node=delta-node type=CDS version=1 nonce=1"));

  stream->Send(Delta(kEds, {"c1", "c2"}));
  auto eds = stream->Next();
  ASSERT_TRUE(eds);
  EXPECT_EQ(eds->type_url(), kEds);
  EXPECT_THAT(Names(*eds), ElementsAre("c1"));

  // Only the changed cluster is sent.
  Change("clusters.yaml",
         "clusters:\n- { name: c1, type: EDS, connect_timeout: 1s }\n"
         "- { name: c2, type: EDS, connect_timeout: 9s }\n",
         "2");
  cds = stream->Next();
  ASSERT_TRUE(cds);
  EXPECT_EQ(cds->type_url(), kCds);
  EXPECT_EQ(cds->system_version_info(), "2");
  EXPECT_THAT(Names(*cds), ElementsAre("c2"));
  EXPECT_THAT(Removed(*cds), IsEmpty());
  envoy::config::cluster::v3::Cluster c2;
  ASSERT_TRUE(cds->resources(0).resource().UnpackTo(&c2));
  EXPECT_EQ(c2.connect_timeout().seconds(), 9);

  // An explicitly subscribed name that appears is sent, alone.
  Change("endpoints.yaml", std::string(kEndpoints) + "- cluster_name: c2\n", "3");
  eds = stream->Next();
  ASSERT_TRUE(eds);
  EXPECT_EQ(eds->type_url(), kEds);
  EXPECT_THAT(Names(*eds), ElementsAre("c2"));

  DeltaDiscoveryRequest nack = Delta(kEds, {}, eds->nonce());
  nack.mutable_error_detail()->set_message("c2: no endpoints");
  stream->Send(nack);
  EXPECT_TRUE(log_.WaitFor("NACK node=delta-node type=EDS version=3 nonce=" + eds->nonce() +
                           " error=c2: no endpoints"));

  // Wildcard type: resources gone from the snapshot are removed.
  ASSERT_EQ(unlink((dir_ + "/clusters.yaml").c_str()), 0);
  cds = stream->Next();
  ASSERT_TRUE(cds) << log_.All();
  EXPECT_EQ(cds->system_version_info(), "4");
  EXPECT_THAT(Names(*cds), IsEmpty());
  EXPECT_THAT(Removed(*cds), ElementsAre("c1", "c2"));

  // Explicit subscription: subscribed names that no longer exist are removed.
  Change("endpoints.yaml", "endpoints: [{cluster_name: c2}]\n", "5");
  eds = stream->Next();
  ASSERT_TRUE(eds);
  EXPECT_EQ(eds->type_url(), kEds);
  EXPECT_THAT(Names(*eds), IsEmpty());  // c2 is unchanged.
  EXPECT_THAT(Removed(*eds), ElementsAre("c1"));

  // Unsubscribing: no removal is sent for c2 when it goes.
  DeltaDiscoveryRequest unsub = Delta(kEds);
  unsub.add_resource_names_unsubscribe("c2");
  stream->Send(unsub);
  Change("endpoints.yaml", "endpoints: [{cluster_name: c9}]\n", "6");
  EXPECT_FALSE(stream->Next(kQuiet));
}

TEST_F(AdsServiceTest, DeltaInitialResourceVersionsSuppressUnchanged) {
  StartServer();
  // What a client that saw version 1 holds.
  std::map<std::string, std::string> versions;
  {
    auto first = OpenDelta();
    first->Send(Delta(kCds, {}, "", "first"));
    first->Send(Delta(kEds, {"c1"}));
    first->Send(Delta(kLds, {"*"}));
    for (int i = 0; i < 3; ++i) {
      auto resp = first->Next();
      ASSERT_TRUE(resp);
      for (const auto& r : resp->resources())
        versions[resp->type_url() + "/" + r.name()] = r.version();
    }
  }
  ASSERT_EQ(versions.size(), 5u);

  // Reconnect: the client declares what it has; only differences come back.
  auto stream = OpenDelta();
  DeltaDiscoveryRequest cds = Delta(kCds, {}, "", "second");
  (*cds.mutable_initial_resource_versions())["c1"] = versions[kCds + "/c1"];
  (*cds.mutable_initial_resource_versions())["c2"] = "stale";
  (*cds.mutable_initial_resource_versions())["gone"] = "x";
  stream->Send(cds);
  auto resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kCds);
  EXPECT_THAT(Names(*resp), ElementsAre("c2"));
  EXPECT_THAT(Removed(*resp), ElementsAre("gone"));

  // Everything current, explicit names: no response at all.
  DeltaDiscoveryRequest eds = Delta(kEds, {"c1"});
  (*eds.mutable_initial_resource_versions())["c1"] = versions[kEds + "/c1"];
  stream->Send(eds);
  EXPECT_FALSE(stream->Next(kQuiet));

  // Everything current, wildcard: one empty response, so the client's initialization completes.
  DeltaDiscoveryRequest lds = Delta(kLds);
  (*lds.mutable_initial_resource_versions())["l1"] = versions[kLds + "/l1"];
  (*lds.mutable_initial_resource_versions())["l2"] = versions[kLds + "/l2"];
  stream->Send(lds);
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kLds);
  EXPECT_EQ(resp->system_version_info(), "1");
  EXPECT_THAT(Names(*resp), IsEmpty());
  EXPECT_THAT(Removed(*resp), IsEmpty());

  // Then only l1's change comes.
  Change("listeners.yaml",
         "listeners:\n- name: l1\n- name: l2\n  address: { socket_address: { address: "
         "127.0.0.1, port_value: 10002 } }\n",
         "2");
  resp = stream->Next();
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->type_url(), kLds);
  EXPECT_THAT(Names(*resp), ElementsAre("l1"));
  EXPECT_FALSE(stream->Next(kQuiet));
}

TEST_F(AdsServiceTest, StopWithOpenStreamsDoesNotHang) {
  StartServer();
  auto sotw = OpenSotw();
  auto delta = OpenDelta();
  sotw->Send(Sotw(kLds, {}, "", "", "s"));
  delta->Send(Delta(kLds, {}, "", "d"));
  ASSERT_TRUE(sotw->Next());
  ASSERT_TRUE(delta->Next());
  auto start = std::chrono::steady_clock::now();
  server_->Stop(milliseconds(2000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  EXPECT_TRUE(sotw->WaitClosed());
  EXPECT_TRUE(delta->WaitClosed());
  EXPECT_TRUE(log_.WaitFor("stream closed node=s"));
  EXPECT_TRUE(log_.WaitFor("stream closed node=d"));
}

}  // namespace
}  // namespace xds_server
}  // namespace rpx
