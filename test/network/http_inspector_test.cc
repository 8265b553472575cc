// InspectHttp over byte strings: each protocol once whole, every prefix of them still undecided,
// and the ways a stream can show it is not HTTP as early as possible.
#include "source/network/http_inspector.h"

#include <string>

#include "gtest/gtest.h"

namespace rpx {
namespace {

HttpInspectResult Inspect(const std::string& s) {
  return InspectHttp(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(HttpInspectorTest, RequestLinesAndThePreface) {
  EXPECT_EQ(Inspect("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), HttpInspectResult::kHttp11);
  EXPECT_EQ(Inspect("POST /x?y=1 HTTP/1.0\r\n"), HttpInspectResult::kHttp10);
  EXPECT_EQ(Inspect("OPTIONS * HTTP/1.1\n"), HttpInspectResult::kHttp11);  // bare LF
  EXPECT_EQ(Inspect("CONNECT a.example:443 HTTP/1.1\r\n"), HttpInspectResult::kHttp11);
  EXPECT_EQ(Inspect(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + "\x00\x00\x12\x04"),
            HttpInspectResult::kH2c);
  using List = std::vector<std::string>;
  EXPECT_EQ(*HttpInspectProtocols(HttpInspectResult::kHttp11), List{"http/1.1"});
  EXPECT_EQ(*HttpInspectProtocols(HttpInspectResult::kHttp10), List{"http/1.0"});
  EXPECT_EQ(*HttpInspectProtocols(HttpInspectResult::kH2c), List{"h2c"});
  EXPECT_EQ(HttpInspectProtocols(HttpInspectResult::kNotHttp), nullptr);
  EXPECT_EQ(HttpInspectProtocols(HttpInspectResult::kNeedMoreData), nullptr);
}

TEST(HttpInspectorTest, EveryPrefixWaitsForMore) {
  for (std::string whole : {std::string("GET /index.html HTTP/1.1\r\n"),
                            std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")}) {
    for (size_t n = 0; n < whole.size(); ++n) {
      EXPECT_EQ(Inspect(whole.substr(0, n)), HttpInspectResult::kNeedMoreData)
          << "prefix of " << n << " bytes of " << whole;
    }
  }
}

TEST(HttpInspectorTest, NotHttpAsSoonAsItShows) {
  EXPECT_EQ(Inspect("\x16\x03\x01\x02\x00"), HttpInspectResult::kNotHttp);  // a TLS record
  EXPECT_EQ(Inspect(std::string("\x00\x01", 2)), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect("SSH-2.0-OpenSSH_9.2\r\n"), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect(" GET / HTTP/1.1\r\n"), HttpInspectResult::kNotHttp);  // no method
  EXPECT_EQ(Inspect("GET  / HTTP/1.1\r\n"), HttpInspectResult::kNotHttp);  // empty target
  EXPECT_EQ(Inspect("GET /\x01 HTTP/1.1\r\n"), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect("GET / HTTP/2.0\r\n"), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect("GET / HTTP/1.2\r\n"), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect("GET / HTTP/1.1\rX"), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect("GET / HTTPS/1.1\r\n"), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect("PRI * HTTP/2.0\r\n\r\nXX"), HttpInspectResult::kNotHttp);  // broken preface
}

TEST(HttpInspectorTest, ALineThatNeverEndsIsNotHttp) {
  EXPECT_EQ(Inspect(std::string(kMaxHttpInspectBytes - 1, 'G')), HttpInspectResult::kNeedMoreData);
  EXPECT_EQ(Inspect(std::string(kMaxHttpInspectBytes, 'G')), HttpInspectResult::kNotHttp);
  EXPECT_EQ(Inspect("GET /" + std::string(kMaxHttpInspectBytes, 'a')), HttpInspectResult::kNotHttp);
}

}  // namespace
}  // namespace rpx
