// Envoy's /config_dump: the typed dumps (envoy.admin.v3.BootstrapConfigDump,
// ClustersConfigDump, ListenersConfigDump, RoutesConfigDump, SecretsConfigDump and, with
// ?include_eds, EndpointsConfigDump) packed in a ConfigDump and printed as protobuf JSON, so
// tools that read Envoy's dump (istioctl proxy-config style, protobuf's JSON parser) read rpx's.
// ?resource=<repeated field> lists that field's elements of every dump instead; ?mask=<paths>
// (a FieldMask) trims each dump, or each element with ?resource. Sensitive fields (private keys,
// passwords, session ticket keys, generic secrets) are redacted everywhere, Any-packed
// extensions included. Main thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/message.h"

namespace rpx {

struct ConfigDumpQuery {
  std::string resource;  // e.g. "dynamic_active_clusters"; empty: whole dumps
  std::string mask;      // comma-separated field paths; empty: everything
};

// Renders `dumps` (each one of the typed dump messages above) as Envoy does. Returns the HTTP
// status: 200, or 404 / 400 with `*body` naming the unknown resource or the bad mask path.
int RenderConfigDump(std::vector<std::unique_ptr<google::protobuf::Message>> dumps,
                     const ConfigDumpQuery& query, std::string* body);

// Replaces sensitive values in `m` (recursively, through Any) with "[redacted]".
void RedactSensitive(google::protobuf::Message* m);

}  // namespace rpx
