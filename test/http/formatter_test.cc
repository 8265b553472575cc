#include "source/http/formatter.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The downstream connection's facts, as a ServerConnection gives them.
class FakeDownstream : public DownstreamInfo {
 public:
  std::string remote_ip() const override { return "10.0.0.7"; }
  bool is_tls() const override { return tls; }
  std::string remote_address() const override { return "10.0.0.7:51234"; }
  std::string local_address() const override { return "[::1]:10000"; }
  std::string requested_server_name() const override { return tls ? "api.example.com" : ""; }
  std::string tls_version() const override { return tls ? "TLSv1.3" : ""; }
  bool tls = false;
  StreamInfo info;
};

std::string Text(const std::string& format, const FormatContext& ctx,
                 Formatter::Options options = {}) {
  auto f = Formatter::Text(format, options);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return "";
  return (*f)->Format(ctx);
}

std::string TextError(const std::string& format) {
  auto f = Formatter::Text(format, {});
  EXPECT_FALSE(f.ok()) << format;
  return f.ok() ? "" : std::string(f.status().message());
}

struct Fixture {
  Fixture() {
    req.method = "POST";
    req.path = "/api/v1?x=1";
    req.host = "example.com";
    req.headers.Add("user-agent", "curl/8.0");
    req.headers.Add("x-request-id", "abc-123");
    resp.Add("content-type", "text/html");
    resp.Add("x-envoy-upstream-service-time", "7");
    info.start_ns = 1000000000;                // 1 s
    info.start_unix_ns = 1796587591123456789;  // 2026-12-06T20:06:31.123456789Z
    info.request_end_ns = info.start_ns + 2000000;
    info.upstream_first_byte_ns = info.start_ns + 5000000;
    info.end_ns = info.start_ns + 12000000;
    info.bytes_received = 11;
    info.bytes_sent = 1234;
    info.response_code = 200;
    info.response_code_details = "via_upstream";
    upstream = *SocketAddress::FromIpPort("127.0.0.1", 8080);
    info.upstream_address = &upstream;
    info.cluster_name = &cluster;
    info.route_name = &route;
    ctx.info = &info;
    ctx.request = &req;
    ctx.response_headers = &resp;
    ctx.downstream = &down;
  }
  RequestHead req;
  HeaderMap resp;
  StreamInfo info;
  SocketAddress upstream;
  std::string cluster = "backend", route = "r1";
  FakeDownstream down;
  FormatContext ctx;
};

TEST(FormatterTest, EveryOperatorOnARequest) {
  Fixture f;
  EXPECT_EQ(Text("%REQ(:METHOD)% %REQ(:PATH)% %REQ(:AUTHORITY)% %PROTOCOL%", f.ctx),
            "POST /api/v1?x=1 example.com HTTP/1.1");
  EXPECT_EQ(Text("%REQ(USER-AGENT)%|%REQ(X-MISSING)%|%REQ(X-MISSING?USER-AGENT)%", f.ctx),
            "curl/8.0|-|curl/8.0");
  EXPECT_EQ(Text("%REQ(USER-AGENT):4%", f.ctx), "curl");
  EXPECT_EQ(Text("%RESP(CONTENT-TYPE)% %RESP(:STATUS)% %TRAILER(GRPC-STATUS)%", f.ctx),
            "text/html 200 -");
  EXPECT_EQ(Text("%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%", f.ctx),
            "200 - via_upstream");
  EXPECT_EQ(Text("%BYTES_RECEIVED% %BYTES_SENT%", f.ctx), "11 1234");
  EXPECT_EQ(Text("%DURATION% %REQUEST_DURATION% %RESPONSE_DURATION% %RESPONSE_TX_DURATION%", f.ctx),
            "12 2 5 7");
  EXPECT_EQ(Text("%UPSTREAM_HOST% %UPSTREAM_CLUSTER% %ROUTE_NAME%", f.ctx),
            "127.0.0.1:8080 backend r1");
  EXPECT_EQ(Text("%UPSTREAM_LOCAL_ADDRESS% %UPSTREAM_TRANSPORT_FAILURE_REASON%", f.ctx), "- -");
  EXPECT_EQ(Text("%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% "
                 "%DOWNSTREAM_REMOTE_PORT% %DOWNSTREAM_LOCAL_ADDRESS% "
                 "%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT% %DOWNSTREAM_LOCAL_PORT%",
                 f.ctx),
            "10.0.0.7:51234 10.0.0.7 51234 [::1]:10000 ::1 10000");
  EXPECT_EQ(Text("%REQUESTED_SERVER_NAME% %DOWNSTREAM_TLS_VERSION%", f.ctx), "- -");
  f.down.tls = true;
  EXPECT_EQ(Text("%REQUESTED_SERVER_NAME% %DOWNSTREAM_TLS_VERSION% %REQ(:SCHEME)%", f.ctx),
            "api.example.com TLSv1.3 https");
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(Text("%HOSTNAME%", f.ctx), host);
}

TEST(FormatterTest, StartTimeFormats) {
  Fixture f;
  EXPECT_EQ(Text("%START_TIME%", f.ctx), "2026-12-06T20:06:31.123Z");
  EXPECT_EQ(Text("%START_TIME(%Y/%m/%d %H:%M:%S)%", f.ctx), "2026/12/06 20:06:31");
  EXPECT_EQ(Text("%START_TIME(%s.%3f)%", f.ctx), "1796587591.123");
  EXPECT_EQ(Text("%START_TIME(%f)%", f.ctx), "123456789");
  EXPECT_EQ(Text("%START_TIME(%E6S)%", f.ctx), "31.123456");
  // The per-second cache must not leak between formats or seconds.
  f.info.start_unix_ns += 1000000000;
  EXPECT_EQ(Text("%START_TIME%", f.ctx), "2026-12-06T20:06:32.123Z");
}

TEST(FormatterTest, ResponseFlagsInEnvoysOrder) {
  Fixture f;
  f.info.response_flags =
      kUpstreamConnectionFailure | kNoHealthyUpstream | kDownstreamConnectionTermination;
  EXPECT_EQ(Text("%RESPONSE_FLAGS%", f.ctx), "UH,UF,DC");
  EXPECT_EQ(ResponseFlagFromShortName("URX"), static_cast<uint32_t>(kUpstreamRetryLimitExceeded));
  EXPECT_EQ(ResponseFlagFromShortName("XX"), 0u);
}

TEST(FormatterTest, NothingKnownPrintsDashes) {
  FormatContext empty;
  EXPECT_EQ(Text("%REQ(:METHOD)% %UPSTREAM_HOST% %RESPONSE_CODE% %DURATION%", empty), "- - 0 -");
  EXPECT_EQ(Text("[%UPSTREAM_HOST%]", empty, Formatter::Options{.omit_empty_values = true}), "[]");
}

TEST(FormatterTest, LiteralsAndPercent) {
  FormatContext empty;
  EXPECT_EQ(Text("100%% sure, 50% off, %lower% and %", empty), "100% sure, 50% off, %lower% and %");
  auto f = Formatter::Text("plain text", {});
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->has_operators());
}

TEST(FormatterTest, ErrorsNameTheOperator) {
  EXPECT_THAT(TextError("a %NO_SUCH_OP% b"), HasSubstr("unknown command operator %NO_SUCH_OP%"));
  EXPECT_THAT(TextError("%REQ%"), HasSubstr("%REQ% needs a header name"));
  EXPECT_THAT(TextError("%REQ(a%"), HasSubstr("no closing ')'"));
  EXPECT_THAT(TextError("%REQ(x):abc%"), HasSubstr("needs a length"));
  EXPECT_THAT(TextError("%DURATION(x)%"), HasSubstr("%DURATION% takes no argument"));
}

TEST(FormatterTest, DefaultFormatIsEnvoys) {
  Fixture f;
  std::string line = Text(Formatter::kDefaultFormat, f.ctx);
  EXPECT_EQ(line,
            "[2026-12-06T20:06:31.123Z] \"POST /api/v1?x=1 HTTP/1.1\" 200 - 11 1234 12 7 \"-\" "
            "\"curl/8.0\" \"abc-123\" \"example.com\" \"127.0.0.1:8080\"\n");
}

TEST(FormatterTest, JsonFormatTypesValues) {
  Fixture f;
  google::protobuf::Struct s;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"status": "%RESPONSE_CODE%", "method": "%REQ(:METHOD)%",
                      "missing": "%REQ(X-NONE)%", "mixed": "took %DURATION% ms",
                      "nested": {"host": "%UPSTREAM_HOST%"}, "n": 5, "b": true})",
                  &s)
                  .ok());
  auto fmt = Formatter::Json(s, {});
  ASSERT_TRUE(fmt.ok()) << fmt.status();
  EXPECT_EQ((*fmt)->Format(f.ctx),
            "{\"b\":true,\"method\":\"POST\",\"missing\":null,\"mixed\":\"took 12 ms\",\"n\":5,"
            "\"nested\":{\"host\":\"127.0.0.1:8080\"},\"status\":200}\n");
  auto omit = Formatter::Json(s, Formatter::Options{.omit_empty_values = true});
  ASSERT_TRUE(omit.ok());
  EXPECT_THAT((*omit)->Format(f.ctx), Not(HasSubstr("missing")));
  // Values are escaped.
  f.req.headers.Set("user-agent", "a\"b\\c\nd");
  google::protobuf::Struct ua;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(R"({"ua": "%REQ(USER-AGENT)%"})", &ua).ok());
  EXPECT_EQ((*Formatter::Json(ua, {}))->Format(f.ctx), "{\"ua\":\"a\\\"b\\\\c\\nd\"}\n");
  google::protobuf::Struct bad;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(R"({"x": "%BOGUS%"})", &bad).ok());
  auto e = Formatter::Json(bad, {});
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("x: unknown command operator %BOGUS%"));
}

}  // namespace
}  // namespace rpx
