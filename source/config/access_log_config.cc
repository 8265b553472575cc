#include "source/config/access_log_config.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "envoy/config/core/v3/substitution_format_string.pb.h"
#include "envoy/extensions/access_loggers/file/v3/file.pb.h"
#include "envoy/extensions/access_loggers/stream/v3/stream.pb.h"
#include "source/config/tls_config.h"
#include "source/router/route_table.h"

namespace rpx {
namespace {

using ProtoFilter = envoy::config::accesslog::v3::AccessLogFilter;
using envoy::config::accesslog::v3::ComparisonFilter;
using envoy::config::core::v3::SubstitutionFormatString;

constexpr char kFileType[] = "envoy.extensions.access_loggers.file.v3.FileAccessLog";
constexpr char kStdoutType[] = "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";
constexpr char kStderrType[] = "envoy.extensions.access_loggers.stream.v3.StderrAccessLog";

void Err(std::vector<std::string>* errors, const std::string& path, const std::string& what) {
  errors->push_back(absl::StrCat(path, ": ", what));
}

std::unique_ptr<const AccessLogFilter> Filter(const ProtoFilter& f, const std::string& path,
                                              std::vector<std::string>* errors);

// A duration_filter anywhere in the tree: requests must then record their times.
bool UsesDuration(const ProtoFilter& f) {
  if (f.has_duration_filter()) return true;
  for (const auto& sub : f.has_and_filter() ? f.and_filter().filters() : f.or_filter().filters()) {
    if (UsesDuration(sub)) return true;
  }
  return false;
}

std::unique_ptr<const AccessLogFilter> Comparison(ComparisonLogFilter::Field field,
                                                  bool has_comparison, const ComparisonFilter& c,
                                                  const std::string& path,
                                                  std::vector<std::string>* errors) {
  if (!has_comparison) {
    Err(errors, path + ".comparison", "is required");
    return nullptr;
  }
  ComparisonLogFilter::Op op = ComparisonLogFilter::Op::kEq;
  switch (c.op()) {
    case ComparisonFilter::EQ:
      break;
    case ComparisonFilter::GE:
      op = ComparisonLogFilter::Op::kGe;
      break;
    case ComparisonFilter::LE:
      op = ComparisonLogFilter::Op::kLe;
      break;
    default:
      Err(errors, path + ".comparison.op", "must be EQ, GE or LE");
      return nullptr;
  }
  if (!c.has_value()) {
    Err(errors, path + ".comparison.value", "is required");
    return nullptr;
  }
  // rpx has no runtime overrides yet: the default value is the value.
  return std::make_unique<ComparisonLogFilter>(field, op, c.value().default_value());
}

std::unique_ptr<const AccessLogFilter> Filter(const ProtoFilter& f, const std::string& path,
                                              std::vector<std::string>* errors) {
  switch (f.filter_specifier_case()) {
    case ProtoFilter::kStatusCodeFilter:
      return Comparison(ComparisonLogFilter::Field::kStatusCode,
                        f.status_code_filter().has_comparison(),
                        f.status_code_filter().comparison(), path + ".status_code_filter", errors);
    case ProtoFilter::kDurationFilter:
      return Comparison(ComparisonLogFilter::Field::kDuration, f.duration_filter().has_comparison(),
                        f.duration_filter().comparison(), path + ".duration_filter", errors);
    case ProtoFilter::kNotHealthCheckFilter:
      return std::make_unique<NotHealthCheckLogFilter>();
    case ProtoFilter::kRuntimeFilter: {
      const auto& r = f.runtime_filter();
      // Envoy's default when the runtime key is unset: percent_sampled, itself 0% by default.
      uint64_t denominator = 100;
      switch (r.percent_sampled().denominator()) {
        case envoy::type::v3::FractionalPercent::HUNDRED:
          break;
        case envoy::type::v3::FractionalPercent::TEN_THOUSAND:
          denominator = 10000;
          break;
        case envoy::type::v3::FractionalPercent::MILLION:
          denominator = 1000000;
          break;
        default:
          Err(errors, path + ".runtime_filter.percent_sampled.denominator", "is not a known value");
          return nullptr;
      }
      return std::make_unique<SampleLogFilter>(r.percent_sampled().numerator(), denominator,
                                               r.use_independent_randomness());
    }
    case ProtoFilter::kAndFilter:
    case ProtoFilter::kOrFilter: {
      bool is_and = f.has_and_filter();
      const auto& list = is_and ? f.and_filter().filters() : f.or_filter().filters();
      std::string p = path + (is_and ? ".and_filter" : ".or_filter");
      if (list.size() < 2) {
        Err(errors, p + ".filters", "needs at least two filters");
        return nullptr;
      }
      std::vector<std::unique_ptr<const AccessLogFilter>> subs;
      for (int i = 0; i < list.size(); ++i) {
        auto sub = Filter(list[i], absl::StrCat(p, ".filters[", i, "]"), errors);
        if (!sub) return nullptr;
        subs.push_back(std::move(sub));
      }
      return std::make_unique<AndOrLogFilter>(is_and, std::move(subs));
    }
    case ProtoFilter::kHeaderFilter: {
      std::string p = path + ".header_filter.header";
      if (!f.header_filter().has_header()) {
        Err(errors, p, "is required");
        return nullptr;
      }
      auto m = BuildHeaderMatcher(f.header_filter().header(), p);
      if (!m.ok()) {
        errors->push_back(std::string(m.status().message()));
        return nullptr;
      }
      return std::make_unique<HeaderLogFilter>(
          [m = *m](const RequestHead& req) { return m.Matches(req); });
    }
    case ProtoFilter::kResponseFlagFilter: {
      uint32_t mask = 0;
      const auto& flags = f.response_flag_filter().flags();
      for (int i = 0; i < flags.size(); ++i) {
        uint32_t bit = ResponseFlagFromShortName(flags[i]);
        if (!bit) {
          Err(errors, absl::StrCat(path, ".response_flag_filter.flags[", i, "]"),
              absl::StrCat("unknown response flag '", flags[i], "'"));
          return nullptr;
        }
        mask |= bit;
      }
      return std::make_unique<ResponseFlagLogFilter>(mask);
    }
    default:
      // The others are refused by the supported-fields check before this runs.
      Err(errors, path, "this filter is not supported by rpx");
      return nullptr;
  }
}

// A SubstitutionFormatString's formatter.
std::shared_ptr<const Formatter> Format(const SubstitutionFormatString& s, const std::string& path,
                                        std::vector<std::string>* errors,
                                        std::string* content_type = nullptr) {
  if (content_type) {
    // Envoy's defaults: text/plain for text, application/json for JSON.
    *content_type = !s.content_type().empty()                                  ? s.content_type()
                    : s.format_case() == SubstitutionFormatString::kJsonFormat ? "application/json"
                                                                               : "text/plain";
  }
  Formatter::Options options;
  options.omit_empty_values = s.omit_empty_values();
  absl::StatusOr<std::shared_ptr<const Formatter>> f;
  std::string field;
  switch (s.format_case()) {
    case SubstitutionFormatString::kTextFormat:
      field = ".text_format";
      f = Formatter::Text(s.text_format(), options);
      break;
    case SubstitutionFormatString::kTextFormatSource: {
      field = ".text_format_source";
      std::string text;
      if (!ReadDataSource(s.text_format_source(), path + field, &text, errors)) return nullptr;
      f = Formatter::Text(text, options);
      break;
    }
    case SubstitutionFormatString::kJsonFormat:
      field = ".json_format";
      f = Formatter::Json(s.json_format(), options);
      break;
    default:
      Err(errors, path, "one of text_format, text_format_source or json_format is required");
      return nullptr;
  }
  if (!f.ok()) {
    Err(errors, path + field, std::string(f.status().message()));
    return nullptr;
  }
  return *f;
}

std::shared_ptr<const Formatter> Default(std::vector<std::string>* errors) {
  auto f = Formatter::Text(Formatter::kDefaultFormat, Formatter::Options());
  if (!f.ok()) {
    errors->push_back(std::string(f.status().message()));
    return nullptr;
  }
  return *f;
}

}  // namespace

std::shared_ptr<const LocalReply> BuildLocalReply(
    const envoy::extensions::filters::network::http_connection_manager::v3::LocalReplyConfig& c,
    const std::string& path, std::vector<std::string>* errors) {
  size_t before = errors->size();
  auto reply = std::make_shared<LocalReply>();
  if (c.has_body_format()) {
    reply->body_format =
        Format(c.body_format(), path + ".body_format", errors, &reply->content_type);
  }
  for (int i = 0; i < c.mappers_size(); ++i) {
    const auto& m = c.mappers(i);
    std::string p = absl::StrCat(path, ".mappers[", i, "]");
    LocalReplyMapper mapper;
    if (!m.has_filter()) {
      Err(errors, p + ".filter", "is required");
      continue;
    }
    mapper.filter = Filter(m.filter(), p + ".filter", errors);
    if (m.has_status_code()) {
      uint32_t code = m.status_code().value();
      if (code < 200 || code > 599) {
        Err(errors, p + ".status_code", "must be within [200, 599]");
      }
      mapper.status = code;
    }
    if (m.has_body()) {
      mapper.has_body = ReadDataSource(m.body(), p + ".body", &mapper.body, errors);
    }
    if (m.has_body_format_override()) {
      mapper.body_format = Format(m.body_format_override(), p + ".body_format_override", errors,
                                  &mapper.content_type);
    }
    for (int j = 0; j < m.headers_to_add_size(); ++j) {
      const auto& h = m.headers_to_add(j);
      std::string hp = absl::StrCat(p, ".headers_to_add[", j, "]");
      HeaderToAdd header;
      header.key = absl::AsciiStrToLower(h.header().key());
      if (header.key.empty() || header.key[0] == ':') {
        Err(errors, hp + ".header.key", "must name a regular header");
        continue;
      }
      absl::Status read = ReadHeaderValueOption(h, &header);
      if (!read.ok()) {
        Err(errors, hp + ".header.value", std::string(read.message()));
        continue;
      }
      mapper.headers.add.push_back(std::move(header));
    }
    reply->mappers.push_back(std::move(mapper));
  }
  if (errors->size() != before) return nullptr;
  return reply;
}

bool BuildAccessLogs(
    const google::protobuf::RepeatedPtrField<envoy::config::accesslog::v3::AccessLog>& logs,
    const std::string& path, LogFileManager* files, HttpConfig* http,
    std::vector<std::string>* errors) {
  size_t before = errors->size();
  for (int i = 0; i < logs.size(); ++i) {
    const auto& l = logs[i];
    std::string p = absl::StrCat(path, ".access_log[", i, "]");
    auto log = std::make_shared<AccessLog>();
    if (l.has_filter()) {
      log->filter = Filter(l.filter(), p + ".filter", errors);
      if (!log->filter) continue;
    }
    if (!l.has_typed_config()) {
      Err(errors, p + ".typed_config",
          absl::StrCat("is required (e.g. ", kFileType, ", ", kStdoutType, ")"));
      continue;
    }
    const std::string& url = l.typed_config().type_url();
    std::string tp = p + ".typed_config";
    std::string file_path;
    if (absl::EndsWith(url, kFileType)) {
      envoy::extensions::access_loggers::file::v3::FileAccessLog c;
      if (!l.typed_config().UnpackTo(&c)) {
        Err(errors, tp, "cannot decode the FileAccessLog");
        continue;
      }
      if (c.path().empty()) {
        Err(errors, tp + ".path", "is required");
        continue;
      }
      file_path = c.path();
      using F = envoy::extensions::access_loggers::file::v3::FileAccessLog;
      switch (c.access_log_format_case()) {
        case F::kLogFormat:
          log->formatter = Format(c.log_format(), tp + ".log_format", errors);
          break;
        case F::kFormat: {
          auto f = Formatter::Text(c.format(), Formatter::Options());
          if (!f.ok()) {
            Err(errors, tp + ".format", std::string(f.status().message()));
          } else {
            log->formatter = *f;
          }
          break;
        }
        case F::kJsonFormat:
        case F::kTypedJsonFormat: {
          bool typed = c.has_typed_json_format();
          auto f = Formatter::Json(typed ? c.typed_json_format() : c.json_format(),
                                   Formatter::Options());
          if (!f.ok()) {
            Err(errors, tp + (typed ? ".typed_json_format" : ".json_format"),
                std::string(f.status().message()));
          } else {
            log->formatter = *f;
          }
          break;
        }
        default:
          log->formatter = Default(errors);
      }
    } else if (absl::EndsWith(url, kStdoutType) || absl::EndsWith(url, kStderrType)) {
      bool out = absl::EndsWith(url, kStdoutType);
      file_path = out ? "/dev/stdout" : "/dev/stderr";
      envoy::extensions::access_loggers::stream::v3::StdoutAccessLog c;
      // Both messages are one log_format field with the same number: one decodes the other.
      if (!l.typed_config().UnpackTo(&c) && !c.ParseFromString(l.typed_config().value())) {
        Err(errors, tp, "cannot decode the stream access log");
        continue;
      }
      log->formatter =
          c.has_log_format() ? Format(c.log_format(), tp + ".log_format", errors) : Default(errors);
    } else {
      Err(errors, tp,
          absl::StrCat("access logger '", url, "' is not supported (rpx has ", kFileType, ", ",
                       kStdoutType, " and ", kStderrType, ")"));
      continue;
    }
    if (!log->formatter) continue;
    if (files) {
      std::string error;
      log->file = files->Get(file_path, &error);
      if (!log->file) {
        Err(errors, tp + ".path", absl::StrCat("cannot open '", file_path, "': ", error));
        continue;
      }
    }
    if (log->formatter->uses_start_time()) http->record_start_time = true;
    if (log->formatter->uses_durations() || (l.has_filter() && UsesDuration(l.filter()))) {
      http->record_durations = true;
    }
    if (log->formatter->uses_response_headers()) http->record_response_headers = true;
    if (log->formatter->uses_upstream_local_address()) {
      http->record_upstream_local_address = true;
    }
    http->access_logs.push_back(std::move(log));
  }
  return errors->size() == before;
}

}  // namespace rpx
