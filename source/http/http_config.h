// Settings of one HTTP connection manager (a listener's http_connection_manager filter),
// immutable once built on the main thread, plus its per-worker stats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "source/common/histogram.h"
#include "source/common/stats.h"
#include "source/http/access_log.h"
#include "source/http/local_reply.h"

namespace rpx {

struct alignas(64) HttpStats {
  Counter downstream_cx_total;
  Gauge downstream_cx_active;
  Counter downstream_cx_protocol_error;
  Counter downstream_cx_idle_timeout;
  Counter downstream_cx_headers_timeout;
  Counter downstream_rq_total;
  Gauge downstream_rq_active;
  Counter downstream_rq_1xx, downstream_rq_2xx, downstream_rq_3xx, downstream_rq_4xx,
      downstream_rq_5xx;
  Counter downstream_rq_idle_timeout;
  Counter downstream_rq_timeout;
  Counter downstream_rq_rx_reset;  // the client went away mid-stream
  Counter no_route;
  Counter no_cluster;
  Counter rq_direct_response;
  Counter rq_redirect;
  Counter downstream_cx_upgrades_total;  // requests switched to a tunnel (101 forwarded)
  Gauge downstream_cx_upgrades_active;
  Counter downstream_rq_ws_on_non_ws_route;  // upgrade refused (403): not enabled for the route
  Histogram downstream_rq_time;              // ms from the request head to the end of the response
  Counter downstream_cx_max_duration_reached;  // max_connection_duration: drained
  Counter downstream_rq_max_duration_reached;  // max_stream_duration: 408 or reset
  Counter requests_rejected_with_underscores_in_headers;
  Counter dropped_headers_with_underscores;
  // HTTP/2 (Envoy's http2.* under the connection manager's prefix).
  Counter downstream_cx_http2_total;
  Gauge downstream_cx_http2_active;
  Counter http2_rx_reset;            // RST_STREAM from the client
  Counter http2_tx_reset;            // RST_STREAM sent
  Counter http2_goaway_sent;         // GOAWAY sent (drain, shutdown, or a connection error)
  Counter http2_header_overflow;     // a header list over max_request_headers_kb / count
  Counter http2_rx_messaging_error;  // a malformed request: the stream was reset
  Counter http2_inbound_empty_frames_flood;
  Counter http2_inbound_priority_frames_flood;
  Counter http2_inbound_window_update_frames_flood;
  Counter http2_outbound_flood;          // max_outbound_frames: the client does not read
  Counter http2_outbound_control_flood;  // max_outbound_control_frames
  void CountStatus(int status) {
    if (status < 200) {
      downstream_rq_1xx.Inc();
    } else if (status < 300) {
      downstream_rq_2xx.Inc();
    } else if (status < 400) {
      downstream_rq_3xx.Inc();
    } else if (status < 500) {
      downstream_rq_4xx.Inc();
    } else {
      downstream_rq_5xx.Inc();
    }
  }
};

// http2_protocol_options of a connection manager, with Envoy's defaults.
struct Http2Options {
  uint32_t hpack_table_size = 4096;
  uint32_t max_concurrent_streams = 2147483647;
  uint32_t initial_stream_window_size = 268435456;      // 256 MiB
  uint32_t initial_connection_window_size = 268435456;  // 256 MiB
  uint32_t max_outbound_frames = 10000;
  uint32_t max_outbound_control_frames = 1000;
  uint32_t max_consecutive_inbound_frames_with_empty_payload = 1;
  uint32_t max_inbound_priority_frames_per_stream = 100;
  uint32_t max_inbound_window_update_frames_per_data_frame_sent = 10;
  // A malformed request resets only its stream (true) or ends the connection (false, Envoy's
  // default).
  bool stream_error_on_invalid_http_message = false;
  // allow_connect: SETTINGS_ENABLE_CONNECT_PROTOCOL is sent, and a client's extended CONNECT
  // (RFC 8441: :method CONNECT with :protocol, e.g. WebSocket) becomes the HTTP/1.1 upgrade the
  // router knows (GET with Upgrade: <protocol>).
  bool allow_connect = false;
};

struct HttpConfig {
  enum class ServerHeader { kOverwrite, kAppendIfAbsent, kPassThrough };
  // codec_type: AUTO speaks HTTP/2 to a client that opens with its connection preface (or picks
  // h2 by ALPN), HTTP/1.1 to the others; HTTP1 and HTTP2 speak only that.
  enum class Codec { kAuto, kHttp1, kHttp2 };
  std::string stat_prefix;
  Codec codec = Codec::kAuto;
  Http2Options http2;
  uint64_t stream_idle_timeout_ms = 300 * 1000;  // Envoy's default: 5 minutes
  uint64_t request_timeout_ms = 0;               // 0: disabled
  uint64_t request_headers_timeout_ms = 0;       // 0: disabled
  uint64_t idle_timeout_ms = 3600 * 1000;        // connection idle (no stream); 0: disabled
  // common_http_protocol_options: a connection is drained (Connection: close, GOAWAY) this long
  // after it opened; a stream is ended (408, or a reset once the response started) this long
  // after its request head. 0: no limit.
  uint64_t max_connection_duration_ms = 0;
  uint64_t max_stream_duration_ms = 0;
  // headers_with_underscores_action for request header names containing '_'.
  enum class Underscores { kAllow, kReject, kDrop };
  Underscores headers_with_underscores = Underscores::kAllow;
  uint32_t max_request_headers_kb = 60;
  uint32_t max_headers_count = 100;
  uint32_t max_requests_per_connection = 0;  // 0: unlimited
  uint32_t buffer_limit = 1024 * 1024;
  bool use_remote_address = false;
  bool skip_xff_append = false;
  bool generate_request_id = true;
  std::string server_name = "rpx";
  ServerHeader server_header = ServerHeader::kOverwrite;
  // x-forwarded-client-cert (Envoy's forward_client_cert_details and
  // set_current_client_cert_details): by default a client's header is removed, so no client can
  // claim an identity; with mTLS it may be kept, appended to or replaced.
  enum class ForwardClientCert {
    kSanitize,
    kForwardOnly,
    kAppendForward,
    kSanitizeSet,
    kAlwaysForwardOnly
  };
  ForwardClientCert forward_client_cert = ForwardClientCert::kSanitize;
  struct {
    bool subject = false, cert = false, chain = false, dns = false, uri = false;
  } client_cert_details;
  // upgrade_configs: protocols (lower case) this listener may tunnel after a 101, and whether
  // they are on by default (a route may turn one on or off, or enable one not listed here).
  struct Upgrade {
    std::string type;
    bool enabled = true;
  };
  std::vector<Upgrade> upgrades;
  // access_log, in order. What they print decides what each request records: the wall clock at
  // the start (%START_TIME%), monotonic times for durations (%DURATION%, duration_filter), a copy
  // of the response headers, the upstream connection's local address.
  std::vector<std::shared_ptr<const AccessLog>> access_logs;
  std::shared_ptr<const LocalReply> local_reply;  // local_reply_config; null: none
  // scheme_header_transformation.scheme_to_overwrite: the request's :scheme ("" keeps it).
  std::string scheme_to_overwrite;
  bool record_start_time = false;
  bool record_durations = false;
  bool record_response_headers = false;
  bool record_upstream_local_address = false;
  // Per-worker stats, indexed by worker index modulo stats_slots.
  std::unique_ptr<HttpStats[]> stats;
  uint32_t stats_slots = 0;
};

}  // namespace rpx
