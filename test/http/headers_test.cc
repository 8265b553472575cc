#include "source/http/headers.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

TEST(HeaderMapTest, AddSetRemove) {
  HeaderMap h;
  h.Add("a", "1");
  h.Add("a", "2");
  h.Add("b", "3");
  EXPECT_EQ(*h.Get("a"), "1");
  h.Set("a", "9");
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(*h.Get("a"), "9");
  EXPECT_EQ(h.Remove("b"), 1);
  EXPECT_FALSE(h.Get("b"));
}

TEST(HeaderMapTest, IteratesInOrder) {
  HeaderMap h;
  h.Add("a", "1");
  h.Add("b", "2");
  h.Add("a", "3");
  std::string seen;
  for (const auto [name, value] : h) seen.append(name).append("=").append(value).append(";");
  EXPECT_EQ(seen, "a=1;b=2;a=3;");
  EXPECT_EQ(h[1].name, "b");
  h.Clear();
  EXPECT_TRUE(h.empty());
  EXPECT_FALSE(h.Get("a"));
}

// Views handed out point into the map's arena; adding a value copied from the map itself must
// survive the arena growing (reallocating) while it is copied.
TEST(HeaderMapTest, AddAndSetTakeViewsOfTheSameMap) {
  HeaderMap h;
  std::string big(1000, 'x');
  h.Add("a", big);
  for (int i = 0; i < 50; ++i) h.Add("a", *h.Get("a"));  // each grows the arena by 1 KB
  EXPECT_EQ(h.size(), 51u);
  for (const auto f : h) EXPECT_EQ(f.value, big);
  h.Set("b", *h.Get("a"));
  EXPECT_EQ(*h.Get("b"), big);
  // Set to a value of the very field it replaces.
  h.Set("a", h.Get("a")->substr(0, 3));
  EXPECT_EQ(*h.Get("a"), "xxx");
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].name, "b");  // Set puts the new field last
  EXPECT_EQ(h[1].name, "a");
}

TEST(HeaderMapTest, RemoveIfKeepsOrder) {
  HeaderMap h;
  for (const char* n : {"a", "drop", "b", "drop", "c"}) h.Add(n, n);
  EXPECT_EQ(h.RemoveIf([](const HeaderMap::Field& f) { return f.name == "drop"; }), 2);
  std::string names;
  for (const auto f : h) names += f.name;
  EXPECT_EQ(names, "abc");
}

// The parser's way in: a name and value in pieces, the name lower-cased, trailing whitespace
// of the value trimmed at commit; a dropped field leaves nothing behind.
TEST(HeaderMapTest, PendingFieldInPieces) {
  HeaderMap h;
  h.Add("host", "x");
  EXPECT_TRUE(h.pending_name().empty());
  h.AppendName("Con", 3);
  h.AppendName("TENT-Type", 9);
  EXPECT_EQ(h.pending_name(), "content-type");
  EXPECT_TRUE(h.pending_value().empty());
  h.AppendValue("text/", 5);
  h.AppendValue("plain \t ", 8);
  EXPECT_EQ(h.pending_value(), "text/plain \t ");
  h.CommitPending();
  EXPECT_TRUE(h.pending_name().empty());
  EXPECT_EQ(*h.Get("content-type"), "text/plain");
  h.AppendName("X-Empty", 7);
  h.CommitPending();  // "X-Empty:" with no value at all
  EXPECT_EQ(*h.Get("x-empty"), "");
  h.AppendName("Trailer-Ish", 11);
  h.AppendValue("v", 1);
  h.DropPending();
  EXPECT_FALSE(h.Get("trailer-ish"));
  EXPECT_EQ(h.size(), 3u);
  h.Add("after", "drop");  // the dropped field's bytes are reused, not in the way
  EXPECT_EQ(*h.Get("after"), "drop");
  EXPECT_EQ(*h.Get("host"), "x");
}

// AppendName lowers 8 bytes at a time: every byte value, at every offset of a word, must come
// out as a byte-wise lower-casing would give it (only 'A'..'Z' change).
TEST(HeaderMapTest, AppendNameLowersEveryByteValue) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t shift = 0; shift < 8; ++shift) {
    std::string in = std::string(shift, 'Q') + all + all;
    std::string want = in;
    for (char& c : want) {
      if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
    }
    HeaderMap h;
    // In pieces of varying length, as a parser may deliver them.
    for (size_t at = 0, piece = 1; at < in.size(); at += piece, piece = piece % 13 + 1) {
      size_t n = std::min(piece, in.size() - at);
      h.AppendName(in.data() + at, n);
    }
    EXPECT_EQ(h.pending_name(), want) << "shift " << shift;
  }
}

TEST(HeaderMapTest, CopiesAreIndependent) {
  HeaderMap a;
  a.Add("x", "1");
  HeaderMap b = a;
  b.Add("y", "2");
  b.Set("x", "3");
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(*a.Get("x"), "1");
  EXPECT_EQ(*b.Get("x"), "3");
  a = b;
  EXPECT_EQ(*a.Get("y"), "2");
}

TEST(HeaderMapTest, AMovedFromMapIsEmptyAndUsable) {
  HeaderMap a;
  a.Add("x", "1");
  HeaderMap b = std::move(a);
  EXPECT_EQ(*b.Get("x"), "1");
  a.Clear();
  a.Add("y", std::string(1000, 'y'));  // grows from nothing, not from a stale capacity
  EXPECT_EQ(a.Get("y")->size(), 1000u);
  EXPECT_FALSE(a.Get("x"));
}

TEST(HeadersTest, AppendHeadersWritesWireForm) {
  HeaderMap h;
  h.Add("a", "1");
  h.Add("bb", "");
  Buffer out;
  AppendHeaders(out, h);
  EXPECT_EQ(std::string(out.data(), out.size()), "a: 1\r\nbb: \r\n");
}

TEST(HeadersTest, Helpers) {
  std::string s = "MiXeD";
  ToLowerAscii(&s);
  EXPECT_EQ(s, "mixed");
  EXPECT_TRUE(EqualsIgnoreCase("Chunked", "chunked"));
  EXPECT_FALSE(EqualsIgnoreCase("chunked", "chunke"));
  EXPECT_STREQ(ReasonPhrase(504), "Gateway Timeout");
}

TEST(HeadersTest, ForEachListTokenTrimsSkipsEmptyAndStops) {
  std::vector<std::string> seen;
  ForEachListToken(" a ,\tb\t,, ,c", [&](std::string_view t) {
    seen.emplace_back(t);
    return true;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "c"}));
  seen.clear();
  ForEachListToken("x, stop, y", [&](std::string_view t) {
    seen.emplace_back(t);
    return t != "stop";
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"x", "stop"}));
  ForEachListToken("", [&](std::string_view) { return ADD_FAILURE(), true; });
}

TEST(HeadersTest, EqualsIgnoreCaseFoldsOnlyAsciiLettersAtEveryLength) {
  // Word-wise: lengths around 8 and 16 reach the word loop and the tail.
  std::string lower = "x-forwarded-proto-and-more";
  for (size_t n = 0; n <= lower.size(); ++n) {
    std::string a = lower.substr(0, n), b = a;
    for (char& c : b) c = (c >= 'a' && c <= 'z') ? c - 32 : c;
    EXPECT_TRUE(EqualsIgnoreCase(a, b)) << n;
    if (n == 0) continue;
    for (size_t i = 0; i < n; ++i) {
      std::string d = b;
      d[i] = d[i] == '-' ? '_' : static_cast<char>(d[i] + 1);  // another character
      EXPECT_FALSE(EqualsIgnoreCase(a, d)) << n << " at " << i;
    }
  }
  // Only A-Z fold: '@' and '`', '[' and '{' differ by 0x20 too, and so do bytes >= 0x80.
  EXPECT_FALSE(EqualsIgnoreCase("@", "`"));
  EXPECT_FALSE(EqualsIgnoreCase("[", "{"));
  EXPECT_FALSE(EqualsIgnoreCase("abcdefg\xc1", "abcdefg\xe1"));
  EXPECT_TRUE(EqualsIgnoreCase("ABCDEFGH\xc1", "abcdefgh\xc1"));
}

}  // namespace
}  // namespace rpx
