// Builds an HTTP connection manager's `access_log` list (Envoy's AccessLog messages with the file,
// stdout and stderr loggers and their filters) into HttpConfig::access_logs. Main thread.
#pragma once

#include <string>
#include <vector>

#include "envoy/config/accesslog/v3/accesslog.pb.h"
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

}  // namespace rpx
