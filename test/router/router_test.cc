// RemoveHopByHopHeaders: what a proxy must not forward as it is (RFC 9110 7.6.1). The request
// path through the router is covered end to end by test/integration/routing_test.py.
#include "source/router/router.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

HeaderMap Make(std::initializer_list<std::pair<const char*, const char*>> fields) {
  HeaderMap h;
  for (const auto& [name, value] : fields) h.Add(name, value);
  return h;
}

std::vector<std::string> Names(const HeaderMap& h) {
  std::vector<std::string> out;
  for (const HeaderMap::Field f : h) out.emplace_back(f.name);
  return out;
}

TEST(RemoveHopByHopHeadersTest, DropsTheFixedNamesAndKeepsTheRestInOrder) {
  HeaderMap h = Make({{"host", "a"},
                      {"connection", "keep-alive"},
                      {"keep-alive", "timeout=5"},
                      {"x-one", "1"},
                      {"proxy-connection", "keep-alive"},
                      {"transfer-encoding", "chunked"},
                      {"content-length", "3"},
                      {"upgrade", "websocket"},
                      {"trailer", "x-t"},
                      {"expect", "100-continue"},
                      {"x-two", "2"}});
  RemoveHopByHopHeaders(h);
  EXPECT_EQ(Names(h), (std::vector<std::string>{"host", "x-one", "x-two"}));
}

TEST(RemoveHopByHopHeadersTest, DropsWhatConnectionListsInEveryConnectionHeader) {
  HeaderMap h = Make({{"connection", "Keep-Alive, X-Foo"},
                      {"x-foo", "1"},
                      {"x-bar", "2"},
                      {"x-kept", "3"},
                      {"connection", " x-bar ,close"},
                      {"x-foo", "4"}});
  RemoveHopByHopHeaders(h);
  EXPECT_EQ(Names(h), (std::vector<std::string>{"x-kept"}));
}

TEST(RemoveHopByHopHeadersTest, ConnectionCloseOrKeepAliveAloneListsNothing) {
  for (const char* value : {"close", "Keep-Alive", "CLOSE"}) {
    HeaderMap h =
        Make({{"connection", value}, {"close", "x"}, {"keep-alive", "timeout=5"}, {"x-kept", "1"}});
    RemoveHopByHopHeaders(h);
    EXPECT_EQ(Names(h), (std::vector<std::string>{"close", "x-kept"})) << value;
  }
}

TEST(RemoveHopByHopHeadersTest, TeTrailersIsKeptEvenWhenConnectionListsTe) {
  HeaderMap h = Make({{"connection", "te"}, {"te", "trailers"}});
  RemoveHopByHopHeaders(h);
  EXPECT_EQ(Names(h), (std::vector<std::string>{"te"}));

  HeaderMap other = Make({{"te", "gzip"}});
  RemoveHopByHopHeaders(other);
  EXPECT_TRUE(other.empty());
}

}  // namespace
}  // namespace rpx
