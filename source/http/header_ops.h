// HeaderOps: headers a response or request gets added or removed (Envoy's *_headers_to_add /
// *_headers_to_remove, and local_reply_config mappers' headers_to_add), values formatted with the
// access-log command operators when they have any. Built on the main thread, immutable; any
// worker applies them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "source/http/formatter.h"
#include "source/http/headers.h"

namespace rpx {

struct HeaderToAdd {
  enum class Action { kAppendOrAdd, kAddIfAbsent, kOverwriteOrAdd, kOverwriteIfExists };
  std::string key;  // lower case
  std::string value;
  // Set when the value has command operators (%DOWNSTREAM_REMOTE_ADDRESS%): formatted for each
  // request; a value that comes out empty is not added (unless keep_empty).
  std::shared_ptr<const Formatter> formatter;
  Action action = Action::kAppendOrAdd;
  bool keep_empty = false;
};

struct HeaderOps {
  std::vector<HeaderToAdd> add;
  std::vector<std::string> remove;  // lower case
  bool empty() const { return add.empty() && remove.empty(); }
  // `ctx` is what value formatters read.
  void Apply(HeaderMap& headers, const FormatContext& ctx) const;
};

}  // namespace rpx
