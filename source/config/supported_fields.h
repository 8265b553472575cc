// The part of Envoy's v3 API that rpx implements. A static configuration that sets any other field
// is rejected with the field's path (Envoy's own rule for the static bootstrap), so nothing a user
// writes is silently ignored. Typed configs (Any) are unpacked and checked too.
// Pure function; any thread.
#pragma once

#include <string>
#include <vector>

#include "google/protobuf/message.h"

namespace rpx {

// Appends one error per unsupported field set anywhere in `msg`. `prefix` starts each message
// (e.g. the file name); `path` is the field path of `msg` itself ("" at the top).
void CheckSupportedFields(const google::protobuf::Message& msg, const std::string& prefix,
                          const std::string& path, std::vector<std::string>* errors);

// For resources from a control plane: fields that do not change what a request is routed to
// (stats names, retry policies, access logs, fields unknown to rpx's proto subset, ...) are
// ignored and counted in `*ignored`; any other unsupported field is an error (a NACK).
void CheckDynamicFields(const google::protobuf::Message& msg, const std::string& prefix,
                        const std::string& path, std::vector<std::string>* errors,
                        uint64_t* ignored);

}  // namespace rpx
