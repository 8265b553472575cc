// Builds what an HTTP connection manager formats and filters: its `access_log` list (Envoy's
// AccessLog messages with the file, stdout and stderr loggers and their filters) into
// HttpConfig::access_logs, and its `local_reply_config` (mappers with the same filters, bodies in
// substitution formats) into HttpConfig::local_reply. Main thread.
#pragma once

#include <string>
#include <vector>

#include "envoy/config/accesslog/v3/accesslog.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "source/common/log_file.h"
#include "source/http/http_config.h"

namespace rpx {

// `files` opens the log files (null: formats and filters are checked, nothing is opened, as in
// --mode validate). Appends "path: problem" to `errors` and returns false on any problem.
bool BuildAccessLogs(
    const google::protobuf::RepeatedPtrField<envoy::config::accesslog::v3::AccessLog>& logs,
    const std::string& path, LogFileManager* files, HttpConfig* http,
    std::vector<std::string>* errors);

// `path` names the local_reply_config field; null with errors appended on any problem.
std::shared_ptr<const LocalReply> BuildLocalReply(
    const envoy::extensions::filters::network::http_connection_manager::v3::LocalReplyConfig& c,
    const std::string& path, std::vector<std::string>* errors);

}  // namespace rpx
