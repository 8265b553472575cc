// RemoveHopByHopHeaders: what a proxy must not forward as it is (RFC 9110 7.6.1). The request
// path through the router is covered end to end by test/integration/routing_test.py.
#include "source/router/router.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

std::vector<std::string> Names(const HeaderMap& h) {
  std::vector<std::string> out;
  for (const HeaderMap::Field f : h) out.emplace_back(f.name);
  return out;
}

TEST(RemoveHopByHopHeadersTest, DropsTheFixedNamesAndKeepsTheRestInOrder) {
  HeaderMap h;
  h.Add("host", "a");
  h.Add("connection", "keep-alive");
  h.Add("keep-alive", "timeout=5");
  h.Add("x-one", "1");
  h.Add("proxy-connection", "keep-alive");
  h.Add("transfer-encoding", "chunked");
  h.Add("content-length", "3");
  h.Add("upgrade", "websocket");
  h.Add("trailer", "x-t");
  h.Add("expect", "100-continue");
  h.Add("x-two", "2");
  RemoveHopByHopHeaders(h);
  EXPECT_EQ(Names(h), (std::vector<std::string>{"host", "x-one", "x-two"}));
}

TEST(RemoveHopByHopHeadersTest, DropsWhatConnectionListsInEveryConnectionHeader) {
  HeaderMap h;
  h.Add("connection", "Keep-Alive, X-Foo");
  h.Add("x-foo", "1");
  h.Add("x-bar", "2");
  h.Add("x-kept", "3");
  h.Add("connection", " x-bar ,close");
  h.Add("x-foo", "4");
  RemoveHopByHopHeaders(h);
  EXPECT_EQ(Names(h), (std::vector<std::string>{"x-kept"}));
}

TEST(RemoveHopByHopHeadersTest, ConnectionCloseOrKeepAliveAloneListsNothing) {
  for (const char* value : {"close", "Keep-Alive", "CLOSE"}) {
    HeaderMap h;
    h.Add("connection", value);
    h.Add("close", "x");
    h.Add("keep-alive", "timeout=5");
    h.Add("x-kept", "1");
    RemoveHopByHopHeaders(h);
    EXPECT_EQ(Names(h), (std::vector<std::string>{"close", "x-kept"})) << value;
  }
}

TEST(RemoveHopByHopHeadersTest, TeTrailersIsKeptEvenWhenConnectionListsTe) {
  HeaderMap h;
  h.Add("connection", "te");
  h.Add("te", "trailers");
  RemoveHopByHopHeaders(h);
  EXPECT_EQ(Names(h), (std::vector<std::string>{"te"}));

  HeaderMap other;
  other.Add("te", "gzip");
  RemoveHopByHopHeaders(other);
  EXPECT_TRUE(other.empty());
}

}  // namespace
}  // namespace rpx
