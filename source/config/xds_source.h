// XdsSource: where one xDS type comes from, as a ConfigSource names it: the ADS stream
// (`ads: {}`), a type's own gRPC stream to a control-plane cluster (`api_config_source` with
// api_type GRPC or DELTA_GRPC), or a file watched for changes (`path_config_source`, or the
// deprecated `path`). rpx takes each type from one source: every ConfigSource of a type must name
// the same one (compared by Key()).
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace rpx {

struct XdsSource {
  enum class Kind { kNone, kAds, kGrpc, kPath };
  Kind kind = Kind::kNone;
  std::string cluster;      // kGrpc: the static cluster of the control plane
  bool delta = false;       // kGrpc: DELTA_GRPC
  std::string path;         // kPath: the file
  std::string watched_dir;  // kPath: path_config_source.watched_directory ("" : none)

  bool set() const { return kind != Kind::kNone; }
  std::string Key() const {
    switch (kind) {
      case Kind::kAds:
        return "ads";
      case Kind::kGrpc:
        return absl::StrCat(delta ? "DELTA_GRPC" : "GRPC", " to cluster '", cluster, "'");
      case Kind::kPath:
        return absl::StrCat("file '", path, "'");
      case Kind::kNone:
        break;
    }
    return "none";
  }
};

// TLS for the gRPC stream, from the xDS cluster's UpstreamTlsContext (PEM text).
struct XdsTls {
  bool enabled = false;
  std::string root_pem;  // validation_context.trusted_ca; empty: gRPC's default roots
  std::string cert_pem;  // tls_certificates[0], for mTLS; empty: no client certificate
  std::string key_pem;
  std::string sni;  // UpstreamTlsContext.sni: the name checked in the server's certificate
};

}  // namespace rpx
