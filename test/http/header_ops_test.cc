#include "source/http/header_ops.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

size_t Count(const HeaderMap& h, std::string_view name) {
  size_t n = 0;
  for (const auto& f : h) n += f.name == name;
  return n;
}

HeaderToAdd Add(const std::string& key, const std::string& value, HeaderToAdd::Action action,
                bool keep_empty = false) {
  HeaderToAdd h;
  h.key = key;
  h.value = value;
  h.action = action;
  h.keep_empty = keep_empty;
  return h;
}

TEST(HeaderOpsTest, EnvoysFourAppendActions) {
  using A = HeaderToAdd::Action;
  HeaderOps ops;
  ops.remove = {"x-gone"};
  ops.add = {Add("x-a", "2", A::kAppendOrAdd),         Add("x-b", "new", A::kAddIfAbsent),
             Add("x-c", "new", A::kAddIfAbsent),       Add("x-d", "new", A::kOverwriteOrAdd),
             Add("x-e", "new", A::kOverwriteIfExists), Add("x-f", "new", A::kOverwriteIfExists),
             Add("x-empty", "", A::kAppendOrAdd),      Add("x-kept", "", A::kAppendOrAdd, true)};
  HeaderMap h;
  h.Add("x-gone", "1");
  h.Add("x-a", "1");
  h.Add("x-b", "old");
  h.Add("x-d", "old");
  h.Add("x-e", "old");
  ops.Apply(h, FormatContext());
  EXPECT_FALSE(h.Get("x-gone"));
  EXPECT_EQ(Count(h, "x-a"), 2u);
  EXPECT_EQ(*h.Get("x-b"), "old");
  EXPECT_EQ(*h.Get("x-c"), "new");
  EXPECT_EQ(*h.Get("x-d"), "new");
  EXPECT_EQ(Count(h, "x-d"), 1u);
  EXPECT_EQ(*h.Get("x-e"), "new");
  EXPECT_FALSE(h.Get("x-f"));
  EXPECT_FALSE(h.Get("x-empty"));  // an empty value is not added...
  ASSERT_TRUE(h.Get("x-kept"));    // ...unless keep_empty_value
  EXPECT_EQ(*h.Get("x-kept"), "");
}

TEST(HeaderOpsTest, FormattedValues) {
  HeaderOps ops;
  HeaderToAdd h;
  h.key = "x-code";
  h.formatter = *Formatter::Text("%RESPONSE_CODE%", Formatter::Options{.omit_empty_values = true});
  ops.add.push_back(h);
  StreamInfo info;
  info.response_code = 418;
  FormatContext ctx;
  ctx.info = &info;
  HeaderMap headers;
  ops.Apply(headers, ctx);
  EXPECT_EQ(*headers.Get("x-code"), "418");
}

}  // namespace
}  // namespace rpx
