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

// Secrets by name.
using SecretMap = std::map<std::string, envoy::extensions::transport_sockets::tls::v3::Secret>;

// Where the secrets a TLS context names come from: static_resources.secrets for an
// SdsSecretConfig without sds_config, the secrets that arrived over SDS (ADS) for one with it.
struct SecretSources {
  const SecretMap* static_secrets = nullptr;
  const SecretMap* sds = nullptr;
  // Out: the SDS secret names the context uses, and whether any has not arrived yet (then the
  // options are incomplete: the caller waits for them instead of building the context).
  std::vector<std::string>* sds_names = nullptr;
  bool sds_missing = false;
  // Out: the shortest initial_fetch_timeout their sds_configs give (0: none gives one).
  uint64_t fetch_timeout_ms = 0;
};

// The bytes of a DataSource (filename, inline_string, inline_bytes, environment_variable).
bool ReadDataSource(const envoy::config::core::v3::DataSource& ds, const std::string& path,
                    std::string* out, std::vector<std::string>* errors);

// `path` names the context itself (e.g. "...transport_socket.typed_config").
bool DownstreamTlsOptions(
    const envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext& ctx,
    const std::string& path, SecretSources* secrets, TlsContextOptions* out,
    std::vector<std::string>* errors);
bool UpstreamTlsOptions(
    const envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext& ctx,
    const std::string& path, SecretSources* secrets, TlsContextOptions* out, std::string* sni,
    std::vector<std::string>* errors);

// Checks a Secret that arrived over SDS (its certificate and key parse and match, its CA
// parses, its ticket keys have the right size). "" if it is usable, else why not.
std::string CheckSecret(const envoy::extensions::transport_sockets::tls::v3::Secret& secret,
                        const std::string& path);

}  // namespace rpx
