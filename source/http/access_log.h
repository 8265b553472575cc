// Access logs of an HTTP connection manager (Envoy's `access_log`): a filter deciding which
// requests are logged, a Formatter giving the line, and the LogFile it goes to. Built on the main
// thread, immutable afterwards; Log() runs on the worker that served the request, at the end of
// the stream, and never blocks (see LogFile).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "source/common/log_file.h"
#include "source/http/formatter.h"

namespace rpx {

class AccessLogFilter {
 public:
  virtual ~AccessLogFilter() = default;
  virtual bool Matches(const FormatContext& ctx) const = 0;
};

// Envoy's ComparisonFilter over the response code or the duration (milliseconds).
class ComparisonLogFilter : public AccessLogFilter {
 public:
  enum class Field { kStatusCode, kDuration };
  enum class Op { kEq, kGe, kLe };
  ComparisonLogFilter(Field field, Op op, uint64_t value) : field_(field), op_(op), value_(value) {}
  bool Matches(const FormatContext& ctx) const override;

 private:
  Field field_;
  Op op_;
  uint64_t value_;
};

// Envoy's not_health_check_filter: a request answered by a health-check filter is not logged.
// rpx has no health-check HTTP filter, so no request is one and every request passes.
class NotHealthCheckLogFilter : public AccessLogFilter {
 public:
  bool Matches(const FormatContext&) const override { return true; }
};

// Logs `numerator` in `denominator` requests: chosen by the x-request-id (so every proxy on the
// path agrees) unless independent randomness is asked for or there is no request id.
class SampleLogFilter : public AccessLogFilter {
 public:
  SampleLogFilter(uint64_t numerator, uint64_t denominator, bool independent)
      : numerator_(numerator), denominator_(denominator), independent_(independent) {}
  bool Matches(const FormatContext& ctx) const override;

 private:
  uint64_t numerator_, denominator_;
  bool independent_;
};

class AndOrLogFilter : public AccessLogFilter {
 public:
  AndOrLogFilter(bool is_and, std::vector<std::unique_ptr<const AccessLogFilter>> filters)
      : and_(is_and), filters_(std::move(filters)) {}
  bool Matches(const FormatContext& ctx) const override;

 private:
  bool and_;
  std::vector<std::unique_ptr<const AccessLogFilter>> filters_;
};

// A request header matcher (the router's HeaderMatch, given as a predicate; it sees the
// pseudo-headers too: ":method", ":path", ":authority").
class HeaderLogFilter : public AccessLogFilter {
 public:
  explicit HeaderLogFilter(std::function<bool(const RequestHead&)> match)
      : match_(std::move(match)) {}
  bool Matches(const FormatContext& ctx) const override {
    return ctx.request && match_(*ctx.request);
  }

 private:
  std::function<bool(const RequestHead&)> match_;
};

// Any of `flags` set (any flag at all when `flags` is 0).
class ResponseFlagLogFilter : public AccessLogFilter {
 public:
  explicit ResponseFlagLogFilter(uint32_t flags) : flags_(flags) {}
  bool Matches(const FormatContext& ctx) const override;

 private:
  uint32_t flags_;
};

struct AccessLog {
  std::unique_ptr<const AccessLogFilter> filter;  // null: log every request
  std::shared_ptr<const Formatter> formatter;
  std::shared_ptr<LogFile> file;  // null when only checking a configuration
  // Worker `slot`'s thread.
  void Log(const FormatContext& ctx, uint32_t slot) const;
};

}  // namespace rpx
