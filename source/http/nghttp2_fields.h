// Header-field helpers shared by rpx's two nghttp2 users: Http2ServerConnection (downstream) and
// Http2Client (upstream). Header-only and stateless; any thread.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "source/http/headers.h"

namespace rpx {

// A name/value pair for nghttp2 that points into the caller's strings (they must outlive the
// submit call; nghttp2 copies them).
inline nghttp2_nv Nv(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

// Connection-specific fields (RFC 9113 8.2.2) never go out on HTTP/2.
inline bool IsConnectionSpecific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade";
}

// From a data source's read callback at the body's end (nghttp2's rule for trailers): submits
// `trailers` so that their HEADERS frame ends the stream, and marks the last DATA frame not to.
inline void EndWithTrailers(nghttp2_session* session, int32_t stream_id, const HeaderMap& trailers,
                            uint32_t* flags) {
  std::vector<nghttp2_nv> nva;
  nva.reserve(trailers.size());
  for (const auto& f : trailers) nva.push_back(Nv(f.name, f.value));
  if (nghttp2_submit_trailer(session, stream_id, nva.data(), nva.size()) == 0) {
    *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
  }
}

}  // namespace rpx
