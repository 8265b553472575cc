// Text forms of resources for people: YAML in the format the control plane's files use (and
// Envoy's: snake_case names, "@type" for Any) and unified diffs between two texts. Pure
// functions; any thread.
#pragma once

#include <string>

#include "google/protobuf/message.h"

namespace rpx {
namespace xds_server {

// Block-style YAML of `message`, which rpx's YAML loader reads back into an equal message.
std::string ToYaml(const google::protobuf::Message& message);

// JSON of `message` (snake_case field names), for -o json.
std::string ToJson(const google::protobuf::Message& message);

// A unified diff ("--- a", "+++ b", "@@ ... @@", " ", "-", "+" lines) of two texts, with
// `context` unchanged lines around changes; "" when they are equal.
std::string UnifiedDiff(const std::string& a, const std::string& b, const std::string& a_label,
                        const std::string& b_label, int context = 3);

}  // namespace xds_server
}  // namespace rpx
