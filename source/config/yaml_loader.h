// Loads Envoy-format YAML (or JSON, which is YAML) into protobuf messages by reflection, the way
// Envoy's own loader does: snake_case or camelCase field names, "@type" for Any, "5s" for
// Duration, plain scalars for wrapper types. Every problem is reported with the file, line and
// field path (e.g. "bootstrap.yaml:12:9: static_resources.clusters[0].lb_policy: unknown value
// 'FASTEST'"), and loading continues so that all problems are reported at once.
// Pure function of its inputs; any thread.
#pragma once

#include <string>
#include <vector>

#include "google/protobuf/message.h"

namespace rpx {

// Parses `yaml_text` into `out`. Returns false and appends to `errors` when anything is wrong.
// `source_name` prefixes messages (usually the file path).
bool LoadYamlIntoMessage(const std::string& yaml_text, const std::string& source_name,
                         google::protobuf::Message* out, std::vector<std::string>* errors);

// Reads the file at `path` and parses it as above.
bool LoadYamlFile(const std::string& path, google::protobuf::Message* out,
                  std::vector<std::string>* errors);

}  // namespace rpx
