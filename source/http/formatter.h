// Formatter: Envoy's substitution format strings ("%REQ(:METHOD)% %RESPONSE_CODE%\n"), as
// access logs, request/response headers to add and local reply bodies use them. Parsed once on
// the main thread (unknown operators are errors naming the operator); immutable afterwards, so any
// worker may format with it concurrently.
//
// A text format gives one string; a JSON format (a google.protobuf.Struct of keys to format
// strings, numbers, nested objects) gives one JSON object on a line. A value that is not available
// prints as "-" in text and null in JSON (or is left out with omit_empty_values).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"
#include "source/http/headers.h"
#include "source/http/stream.h"
#include "source/http/stream_info.h"

namespace rpx {

// What a formatter reads. Any pointer may be null; the values it would give are then missing.
struct FormatContext {
  const StreamInfo* info = nullptr;
  const RequestHead* request = nullptr;
  const HeaderMap* response_headers = nullptr;
  const HeaderMap* response_trailers = nullptr;
  const DownstreamInfo* downstream = nullptr;     // the downstream connection's facts
  const std::string* local_reply_body = nullptr;  // %LOCAL_REPLY_BODY%, in local_reply_config
  const std::string* scheme = nullptr;            // scheme_header_transformation's, for :scheme
};

class Formatter {
 public:
  struct Options {
    bool omit_empty_values = false;
  };
  // Text. `format` is used as is: a log line needs its own "\n".
  static absl::StatusOr<std::shared_ptr<const Formatter>> Text(const std::string& format,
                                                               Options options);
  static absl::StatusOr<std::shared_ptr<const Formatter>> Json(
      const google::protobuf::Struct& format, Options options);
  // Envoy's default access log format.
  static const char kDefaultFormat[];

  ~Formatter();
  // Appends the formatted value to `out`.
  void Format(const FormatContext& ctx, std::string* out) const;
  std::string Format(const FormatContext& ctx) const {
    std::string s;
    Format(ctx, &s);
    return s;
  }
  // What the operators used need recorded (each costs something on every request otherwise).
  bool uses_response_headers() const { return uses_response_headers_; }
  bool uses_upstream_local_address() const { return uses_upstream_local_address_; }
  bool uses_start_time() const { return uses_start_time_; }
  bool uses_durations() const { return uses_durations_; }
  bool is_json() const { return json_ != nullptr; }
  // False for a text format that is only literal text.
  bool has_operators() const;

  struct Segment;  // a literal or an operator
  struct JsonNode;

 private:
  Formatter() = default;
  std::vector<Segment> text_;
  std::unique_ptr<JsonNode> json_;
  Options options_;
  bool uses_response_headers_ = false;
  bool uses_upstream_local_address_ = false;
  bool uses_start_time_ = false;
  bool uses_durations_ = false;
  friend class FormatParser;
};

}  // namespace rpx
