// FeedInReads: drives an Http1Parser over a fuzz input cut into reads, as the connection code
// does, checking the parser's contract on every call. Shared by the request and response targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "source/http/http1_parser.h"
#include "test/fuzz/fuzz_common.h"

namespace rpx {
namespace fuzz {

// Feeds `data` to `parser` in the reads that `cuts` marks, the way the connection code does
// (Resume() after each message), checking the parser's contract on every Execute: never more
// consumed than given, at most one message per call, nothing consumed on an error, which
// `error_ok(status)` must accept. `rec` counts finished messages in `completions` and keeps the
// verdict in `transcript`; `on_message()` runs after each finished message.
template <typename Recorder, typename ErrorOk, typename OnMessage>
void FeedInReads(Http1Parser& parser, Recorder& rec, const uint8_t* data, size_t size,
                 const std::vector<size_t>& cuts, ErrorOk error_ok, OnMessage on_message) {
  std::string pending;
  size_t start = 0;
  for (size_t i = 0; i <= cuts.size() && !rec.transcript.error; ++i) {
    size_t end = i < cuts.size() ? cuts[i] : size;
    pending.append(reinterpret_cast<const char*>(data) + start, end - start);
    start = end;
    int idle_pauses = 0;
    while (!pending.empty()) {
      size_t consumed = ~size_t{0};
      int before = rec.completions;
      Http1Parser::Result r = parser.Execute(pending.data(), pending.size(), &consumed);
      int completed = rec.completions - before;
      FUZZ_CHECK(consumed <= pending.size());
      FUZZ_CHECK(completed <= 1);
      if (r == Http1Parser::Result::kError) {
        FUZZ_CHECK(consumed == 0 && completed == 0);
        FUZZ_CHECK(error_ok(parser.error_status()));
        FUZZ_CHECK(!parser.error_reason().empty());
        rec.transcript.error = true;
        rec.transcript.error_status = parser.error_status();
        rec.transcript.error_reason = parser.error_reason();
        break;
      }
      if (r == Http1Parser::Result::kOk) {
        FUZZ_CHECK(consumed == pending.size() && completed == 0);
        pending.clear();
        break;
      }
      // Paused: a message ended, or (an upgrade) the parser stopped where the new protocol
      // begins, which consumes nothing and may happen once before parsing goes on.
      FUZZ_CHECK(completed == 1 || consumed == 0);
      if (consumed == 0 && completed == 0) FUZZ_CHECK(++idle_pauses <= 1);
      if (completed == 1) {
        idle_pauses = 0;
        on_message();
      }
      pending.erase(0, consumed);
      parser.Resume();
    }
  }
}

}  // namespace fuzz
}  // namespace rpx
