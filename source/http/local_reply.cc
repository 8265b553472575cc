#include "source/http/local_reply.h"

namespace rpx {

void LocalReply::Rewrite(FormatContext& ctx, StreamInfo& info, int* status, std::string* body,
                         HeaderMap* headers, std::string* content_type) const {
  info.response_code = *status;
  ctx.info = &info;
  ctx.response_headers = headers;
  const Formatter* format = body_format.get();
  const std::string* format_type = &this->content_type;
  for (const auto& m : mappers) {
    if (m.filter && !m.filter->Matches(ctx)) continue;
    if (m.status) {
      *status = static_cast<int>(m.status);
      info.response_code = *status;
    }
    if (m.has_body) *body = m.body;
    m.headers.Apply(*headers, ctx);
    if (m.body_format) {
      format = m.body_format.get();
      format_type = &m.content_type;
    }
    break;  // the first mapper that matches is the only one applied (Envoy's rule)
  }
  if (!format) return;
  std::string original = *body;
  ctx.local_reply_body = &original;
  std::string formatted;
  format->Format(ctx, &formatted);
  ctx.local_reply_body = nullptr;
  *body = std::move(formatted);
  *content_type = *format_type;
}

}  // namespace rpx
