// LocalReply: an HTTP connection manager's local_reply_config (Envoy's LocalReplyConfig). It
// rewrites the answers rpx makes itself (errors such as 404/503/504, direct responses, redirects,
// 400s for malformed requests): the first mapper whose filter matches may change the status, the
// body and add headers, and the body is then formatted (body_format, or the mapper's override),
// where %LOCAL_REPLY_BODY% is the body so far. Built on the main thread, immutable; workers call
// Rewrite concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "source/http/access_log.h"
#include "source/http/formatter.h"
#include "source/http/header_ops.h"
#include "source/http/headers.h"

namespace rpx {

struct LocalReplyMapper {
  std::unique_ptr<const AccessLogFilter> filter;
  uint32_t status = 0;  // 0: keep the status
  bool has_body = false;
  std::string body;
  std::shared_ptr<const Formatter> body_format;  // overrides the config's; may be null
  std::string content_type;                      // body_format's content type
  HeaderOps headers;                             // headers_to_add (no removals)
};

class LocalReply {
 public:
  std::vector<LocalReplyMapper> mappers;
  std::shared_ptr<const Formatter> body_format;  // null: the body as it is
  std::string content_type;                      // body_format's content type

  // `ctx.info->response_code` must be `*status` (the filters read it); on return it is the
  // status to send. `headers` are the reply's extra headers.
  void Rewrite(FormatContext& ctx, StreamInfo& info, int* status, std::string* body,
               HeaderMap* headers, std::string* content_type) const;
};

}  // namespace rpx
