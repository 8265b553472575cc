#include "source/server/config_dump.h"

#include <memory>
#include <string>
#include <vector>

#include "envoy/admin/v3/config_dump.pb.h"
#include "envoy/extensions/transport_sockets/tls/v3/tls.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace admin = envoy::admin::v3;
namespace tls = envoy::extensions::transport_sockets::tls::v3;

std::vector<std::unique_ptr<google::protobuf::Message>> Dumps() {
  std::vector<std::unique_ptr<google::protobuf::Message>> out;
  auto clusters = std::make_unique<admin::ClustersConfigDump>();
  clusters->set_version_info("7");
  for (const char* name : {"a", "b"}) {
    envoy::config::cluster::v3::Cluster c;
    c.set_name(name);
    auto* s = clusters->add_static_clusters();
    s->mutable_cluster()->PackFrom(c);
    s->mutable_last_updated()->set_seconds(100);
  }
  out.push_back(std::move(clusters));
  auto secrets = std::make_unique<admin::SecretsConfigDump>();
  tls::Secret secret;
  secret.set_name("s");
  secret.mutable_tls_certificate()->mutable_private_key()->set_inline_string("KEY MATERIAL");
  secret.mutable_tls_certificate()->mutable_certificate_chain()->set_inline_string("CERT");
  auto* s = secrets->add_static_secrets();
  s->set_name("s");
  s->mutable_secret()->PackFrom(secret);
  out.push_back(std::move(secrets));
  return out;
}

TEST(ConfigDumpTest, WholeDumpsPackedInOrder) {
  std::string body;
  ASSERT_EQ(RenderConfigDump(Dumps(), {}, &body), 200);
  EXPECT_THAT(body,
              HasSubstr("\"@type\": \"type.googleapis.com/envoy.admin.v3.ClustersConfigDump\""));
  EXPECT_LT(body.find("ClustersConfigDump"), body.find("SecretsConfigDump"));
  EXPECT_THAT(body, HasSubstr("\"version_info\": \"7\""));
  EXPECT_THAT(body, HasSubstr("\"static_clusters\""));  // proto field names, as Envoy
  EXPECT_THAT(body, Not(HasSubstr("KEY MATERIAL")));
  EXPECT_THAT(body, HasSubstr("[redacted]"));
  EXPECT_THAT(body, HasSubstr("CERT"));  // a certificate is not secret
}

TEST(ConfigDumpTest, ResourceListsElementsAndMaskTrimsThem) {
  std::string body;
  ASSERT_EQ(RenderConfigDump(Dumps(), {"static_clusters", "last_updated"}, &body), 200);
  EXPECT_THAT(body, HasSubstr("envoy.admin.v3.ClustersConfigDump.StaticCluster"));
  EXPECT_THAT(body, Not(HasSubstr("\"cluster\"")));
  EXPECT_THAT(body, HasSubstr("last_updated"));
  EXPECT_EQ(RenderConfigDump(Dumps(), {"no_such", ""}, &body), 404);
  EXPECT_THAT(body, HasSubstr("no_such"));
  EXPECT_EQ(RenderConfigDump(Dumps(), {"static_clusters", "bogus"}, &body), 400);
  EXPECT_THAT(body, HasSubstr("bogus"));
}

TEST(ConfigDumpTest, RedactsInsideAnyAndKeepsFileNames) {
  envoy::config::listener::v3::Listener l;
  tls::DownstreamTlsContext ctx;
  auto* cert = ctx.mutable_common_tls_context()->add_tls_certificates();
  cert->mutable_private_key()->set_inline_string("SECRET");
  cert->mutable_password()->set_inline_string("PASSWORD");
  auto* file_cert = ctx.mutable_common_tls_context()->add_tls_certificates();
  file_cert->mutable_private_key()->set_filename("/etc/key.pem");
  auto* ts = l.add_filter_chains()->mutable_transport_socket();
  ts->mutable_typed_config()->PackFrom(ctx);
  RedactSensitive(&l);
  tls::DownstreamTlsContext out;
  ASSERT_TRUE(l.filter_chains(0).transport_socket().typed_config().UnpackTo(&out));
  EXPECT_EQ(out.common_tls_context().tls_certificates(0).private_key().inline_string(),
            "[redacted]");
  EXPECT_EQ(out.common_tls_context().tls_certificates(0).password().inline_string(), "[redacted]");
  EXPECT_EQ(out.common_tls_context().tls_certificates(1).private_key().filename(), "/etc/key.pem");
}

}  // namespace
}  // namespace rpx
