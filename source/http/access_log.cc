#include "source/http/access_log.h"

#include "absl/hash/hash.h"
#include "source/common/random.h"

namespace rpx {

bool ComparisonLogFilter::Matches(const FormatContext& ctx) const {
  uint64_t v = 0;
  const StreamInfo* info = ctx.info;
  if (field_ == Field::kStatusCode) {
    v = info ? static_cast<uint64_t>(info->response_code) : 0;
  } else {
    if (!info || !info->start_ns) return false;
    uint64_t end = info->end_ns ? info->end_ns : MonotonicNowNs();
    v = (end - info->start_ns) / 1000000;
  }
  switch (op_) {
    case Op::kEq:
      return v == value_;
    case Op::kGe:
      return v >= value_;
    case Op::kLe:
      return v <= value_;
  }
  return false;
}

bool SampleLogFilter::Matches(const FormatContext& ctx) const {
  if (numerator_ >= denominator_) return true;
  if (numerator_ == 0) return false;
  uint64_t r;
  std::optional<std::string_view> id;
  if (!independent_ && ctx.request) id = ctx.request->headers.Get("x-request-id");
  if (id && !id->empty()) {
    r = absl::HashOf(*id);
  } else {
    thread_local Random random(reinterpret_cast<uintptr_t>(&random) ^ 0x9e3779b97f4a7c15ull);
    r = random.Next();
  }
  return r % denominator_ < numerator_;
}

bool AndOrLogFilter::Matches(const FormatContext& ctx) const {
  for (const auto& f : filters_) {
    if (f->Matches(ctx) != and_) return !and_;
  }
  return and_;
}

bool ResponseFlagLogFilter::Matches(const FormatContext& ctx) const {
  uint32_t set = ctx.info ? ctx.info->response_flags : 0;
  return flags_ ? (set & flags_) != 0 : set != 0;
}

void AccessLog::Log(const FormatContext& ctx, uint32_t slot) const {
  if (filter && !filter->Matches(ctx)) return;
  thread_local std::string line;
  line.clear();
  formatter->Format(ctx, &line);
  if (file) file->Append(slot, line);
}

}  // namespace rpx
