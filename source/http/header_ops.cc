#include "source/http/header_ops.h"

namespace rpx {

void HeaderOps::Apply(HeaderMap& headers, const FormatContext& ctx) const {
  for (const auto& name : remove) headers.Remove(name);
  std::string formatted;
  for (const auto& h : add) {
    const std::string* value = &h.value;
    if (h.formatter) {
      formatted.clear();
      h.formatter->Format(ctx, &formatted);
      value = &formatted;
    }
    if (value->empty() && !h.keep_empty) continue;
    switch (h.action) {
      case HeaderToAdd::Action::kAppendOrAdd:
        headers.Add(h.key, *value);
        break;
      case HeaderToAdd::Action::kAddIfAbsent:
        if (!headers.Get(h.key)) headers.Add(h.key, *value);
        break;
      case HeaderToAdd::Action::kOverwriteOrAdd:
        headers.Set(h.key, *value);
        break;
      case HeaderToAdd::Action::kOverwriteIfExists:
        if (headers.Get(h.key)) headers.Set(h.key, *value);
        break;
    }
  }
}

}  // namespace rpx
