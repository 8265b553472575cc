// Envoy's TLS transport socket configuration (DownstreamTlsContext, UpstreamTlsContext and the
// Secrets they name) turned into TlsContextOptions. Main thread (reads files named by
// DataSources).
//
// Every problem is appended to `errors` as "<field path>: <what>" (the caller adds the file);
// a field rpx cannot honour is an error here, never dropped.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "envoy/config/core/v3/base.pb.h"
#include "envoy/extensions/transport_sockets/tls/v3/secret.pb.h"
#include "envoy/extensions/transport_sockets/tls/v3/tls.pb.h"
#include "source/tls/tls_context.h"

namespace rpx {

// Secrets a context may name without an sds_config (static_resources.secrets), or that arrived
// over SDS, by name.
using SecretMap = std::map<std::string, envoy::extensions::transport_sockets::tls::v3::Secret>;

// The bytes of a DataSource (filename, inline_string, inline_bytes, environment_variable).
bool ReadDataSource(const envoy::config::core::v3::DataSource& ds, const std::string& path,
                    std::string* out, std::vector<std::string>* errors);

// `path` names the context itself (e.g. "...transport_socket.typed_config").
bool DownstreamTlsOptions(
    const envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext& ctx,
    const std::string& path, const SecretMap& secrets, TlsContextOptions* out,
    std::vector<std::string>* errors);
bool UpstreamTlsOptions(
    const envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext& ctx,
    const std::string& path, const SecretMap& secrets, TlsContextOptions* out, std::string* sni,
    std::vector<std::string>* errors);

// The SDS secret names a context needs (certificates, validation context, ticket keys).
std::vector<std::string> SdsSecretNames(
    const envoy::extensions::transport_sockets::tls::v3::CommonTlsContext& common);

}  // namespace rpx
