#include "source/config/tls_config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "source/router/route_table.h"

namespace rpx {
namespace {

using envoy::extensions::transport_sockets::tls::v3::CertificateValidationContext;
using envoy::extensions::transport_sockets::tls::v3::CommonTlsContext;
using envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext;
using envoy::extensions::transport_sockets::tls::v3::SdsSecretConfig;
using envoy::extensions::transport_sockets::tls::v3::Secret;
using envoy::extensions::transport_sockets::tls::v3::SubjectAltNameMatcher;
using envoy::extensions::transport_sockets::tls::v3::TlsCertificate;
using envoy::extensions::transport_sockets::tls::v3::TlsParameters;
using envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext;

void Err(std::vector<std::string>* errors, const std::string& path, const std::string& what) {
  errors->push_back(absl::StrCat(path, ": ", what));
}

// The secret an SdsSecretConfig names, with the type the caller needs. Null (with an error) if
// there is none; null without an error for an SDS secret that has not arrived yet (noted in
// `secrets`).
const Secret* FindSecret(const SdsSecretConfig& sds, Secret::TypeCase type, const std::string& path,
                         SecretSources* secrets, std::vector<std::string>* errors) {
  if (sds.name().empty()) {
    Err(errors, path + ".name", "is required");
    return nullptr;
  }
  bool dynamic = sds.has_sds_config();
  if (dynamic) {
    using CS = envoy::config::core::v3::ConfigSource;
    if (sds.sds_config().config_source_specifier_case() != CS::kAds) {
      Err(errors, path + ".sds_config", "only ads: {} is supported");
      return nullptr;
    }
    if (secrets->sds_names) secrets->sds_names->push_back(sds.name());
    if (sds.sds_config().has_initial_fetch_timeout()) {
      const auto& d = sds.sds_config().initial_fetch_timeout();
      uint64_t ms = static_cast<uint64_t>(d.seconds()) * 1000 + d.nanos() / 1000000;
      if (ms && (!secrets->fetch_timeout_ms || ms < secrets->fetch_timeout_ms)) {
        secrets->fetch_timeout_ms = ms;
      }
    }
  }
  const SecretMap* map = dynamic ? secrets->sds : secrets->static_secrets;
  auto it = map ? map->find(sds.name()) : SecretMap::const_iterator();
  if (!map || it == map->end()) {
    if (dynamic) {
      secrets->sds_missing = true;  // not arrived yet: the caller waits for it
    } else {
      Err(errors, path,
          absl::StrCat("secret '", sds.name(),
                       "' is not defined in static_resources.secrets (or "
                       "give the reference an sds_config to take it from SDS)"));
    }
    return nullptr;
  }
  if (it->second.type_case() != type) {
    Err(errors, path, absl::StrCat("secret '", sds.name(), "' is not of the needed kind"));
    return nullptr;
  }
  return &it->second;
}

bool Certificate(const TlsCertificate& c, const std::string& path, TlsContextOptions* out,
                 std::vector<std::string>* errors) {
  size_t before = errors->size();
  if (c.has_pkcs12()) Err(errors, path + ".pkcs12", "PKCS#12 is not supported; use PEM");
  if (c.has_ocsp_staple()) Err(errors, path + ".ocsp_staple", "OCSP stapling is not supported");
  if (!c.has_certificate_chain()) Err(errors, path + ".certificate_chain", "is required");
  if (!c.has_private_key()) Err(errors, path + ".private_key", "is required");
  if (errors->size() != before) return false;
  TlsCertificatePem pem;
  pem.where = path;
  if (!ReadDataSource(c.certificate_chain(), path + ".certificate_chain", &pem.chain, errors) ||
      !ReadDataSource(c.private_key(), path + ".private_key", &pem.key, errors)) {
    return false;
  }
  if (c.has_password() &&
      !ReadDataSource(c.password(), path + ".password", &pem.password, errors)) {
    return false;
  }
  out->certificates.push_back(std::move(pem));
  return true;
}

bool Validation(const CertificateValidationContext& v, const std::string& path,
                TlsContextOptions* out, std::vector<std::string>* errors) {
  size_t before = errors->size();
  TlsValidationOptions& o = out->validation;
  if (v.has_trusted_ca())
    ReadDataSource(v.trusted_ca(), path + ".trusted_ca", &o.trusted_ca, errors);
  if (v.has_crl()) ReadDataSource(v.crl(), path + ".crl", &o.crl, errors);
  if (v.verify_certificate_hash_size() > 0) {
    Err(errors, path + ".verify_certificate_hash", "certificate pinning is not supported");
  }
  if (v.verify_certificate_spki_size() > 0) {
    Err(errors, path + ".verify_certificate_spki", "certificate pinning is not supported");
  }
  o.allow_expired = v.allow_expired_certificate();
  o.accept_untrusted =
      v.trust_chain_verification() == CertificateValidationContext::ACCEPT_UNTRUSTED;
  if (v.has_max_verify_depth()) o.max_verify_depth = v.max_verify_depth().value();
  for (int i = 0; i < v.match_typed_subject_alt_names_size(); ++i) {
    const auto& m = v.match_typed_subject_alt_names(i);
    std::string mp = absl::StrCat(path, ".match_typed_subject_alt_names[", i, "]");
    SanMatcher s;
    switch (m.san_type()) {
      case SubjectAltNameMatcher::DNS:
        s.type = SanMatcher::Type::kDns;
        break;
      case SubjectAltNameMatcher::URI:
        s.type = SanMatcher::Type::kUri;
        break;
      case SubjectAltNameMatcher::EMAIL:
        s.type = SanMatcher::Type::kEmail;
        break;
      case SubjectAltNameMatcher::IP_ADDRESS:
        s.type = SanMatcher::Type::kIpAddress;
        break;
      default:
        Err(errors, mp + ".san_type", "must be DNS, URI, EMAIL or IP_ADDRESS");
        continue;
    }
    auto sm = StringMatch::Create(m.matcher(), mp + ".matcher");
    if (!sm.ok()) {
      errors->push_back(std::string(sm.status().message()));
      continue;
    }
    s.matches = [sm = *sm](std::string_view value) { return sm.Matches(value); };
    o.san_matchers.push_back(std::move(s));
  }
  // The deprecated untyped form: any SAN of any of these types.
  for (int i = 0; i < v.match_subject_alt_names_size(); ++i) {
    std::string mp = absl::StrCat(path, ".match_subject_alt_names[", i, "]");
    auto sm = StringMatch::Create(v.match_subject_alt_names(i), mp);
    if (!sm.ok()) {
      errors->push_back(std::string(sm.status().message()));
      continue;
    }
    for (auto t : {SanMatcher::Type::kDns, SanMatcher::Type::kUri, SanMatcher::Type::kEmail,
                   SanMatcher::Type::kIpAddress}) {
      o.san_matchers.push_back(
          {t, [sm = *sm](std::string_view value) { return sm.Matches(value); }});
    }
  }
  return errors->size() == before;
}

int Version(TlsParameters::TlsProtocol p, int dflt) {
  switch (p) {
    case TlsParameters::TLSv1_0:
      return TLS1_VERSION;
    case TlsParameters::TLSv1_1:
      return TLS1_1_VERSION;
    case TlsParameters::TLSv1_2:
      return TLS1_2_VERSION;
    case TlsParameters::TLSv1_3:
      return TLS1_3_VERSION;
    default:
      return dflt;
  }
}

bool Common(const CommonTlsContext& c, const std::string& path, SecretSources* secrets,
            TlsContextOptions* out, std::vector<std::string>* errors) {
  size_t before = errors->size();
  const auto& p = c.tls_params();
  std::string pp = path + ".tls_params";
  out->min_version = Version(p.tls_minimum_protocol_version(), TLS1_2_VERSION);
  out->max_version = Version(p.tls_maximum_protocol_version(), TLS1_3_VERSION);
  out->cipher_suites.assign(p.cipher_suites().begin(), p.cipher_suites().end());
  out->ecdh_curves.assign(p.ecdh_curves().begin(), p.ecdh_curves().end());
  if (p.signature_algorithms_size() > 0) {
    Err(errors, pp + ".signature_algorithms", "is not supported");
  }
  for (int i = 0; i < c.tls_certificates_size(); ++i) {
    Certificate(c.tls_certificates(i), absl::StrCat(path, ".tls_certificates[", i, "]"), out,
                errors);
  }
  for (int i = 0; i < c.tls_certificate_sds_secret_configs_size(); ++i) {
    std::string sp = absl::StrCat(path, ".tls_certificate_sds_secret_configs[", i, "]");
    const Secret* s = FindSecret(c.tls_certificate_sds_secret_configs(i), Secret::kTlsCertificate,
                                 sp, secrets, errors);
    if (s) Certificate(s->tls_certificate(), sp + " (secret '" + s->name() + "')", out, errors);
  }
  out->alpn.assign(c.alpn_protocols().begin(), c.alpn_protocols().end());
  using C = CommonTlsContext;
  switch (c.validation_context_type_case()) {
    case C::kValidationContext:
      Validation(c.validation_context(), path + ".validation_context", out, errors);
      break;
    case C::kValidationContextSdsSecretConfig: {
      std::string sp = path + ".validation_context_sds_secret_config";
      const Secret* s = FindSecret(c.validation_context_sds_secret_config(),
                                   Secret::kValidationContext, sp, secrets, errors);
      if (s) Validation(s->validation_context(), sp + " (secret '" + s->name() + "')", out, errors);
      break;
    }
    case C::kCombinedValidationContext: {
      const auto& cv = c.combined_validation_context();
      std::string cp = path + ".combined_validation_context";
      std::string sp = cp + ".validation_context_sds_secret_config";
      const Secret* s = FindSecret(cv.validation_context_sds_secret_config(),
                                   Secret::kValidationContext, sp, secrets, errors);
      // The secret's context, with the default context's settings on top (as Envoy merges).
      if (s) Validation(s->validation_context(), sp, out, errors);
      Validation(cv.default_validation_context(), cp + ".default_validation_context", out, errors);
      break;
    }
    default:
      break;
  }
  return errors->size() == before;
}

}  // namespace

bool ReadDataSource(const envoy::config::core::v3::DataSource& ds, const std::string& path,
                    std::string* out, std::vector<std::string>* errors) {
  using DS = envoy::config::core::v3::DataSource;
  switch (ds.specifier_case()) {
    case DS::kFilename: {
      std::ifstream in(ds.filename(), std::ios::binary);
      if (!in) {
        Err(errors, path + ".filename",
            absl::StrCat("cannot read '", ds.filename(), "': ", strerror(errno)));
        return false;
      }
      std::stringstream ss;
      ss << in.rdbuf();
      *out = ss.str();
      return true;
    }
    case DS::kInlineString:
      *out = ds.inline_string();
      return true;
    case DS::kInlineBytes:
      *out = ds.inline_bytes();
      return true;
    case DS::kEnvironmentVariable: {
      const char* v = getenv(ds.environment_variable().c_str());
      if (!v) {
        Err(errors, path + ".environment_variable",
            absl::StrCat("'", ds.environment_variable(), "' is not set"));
        return false;
      }
      *out = v;
      return true;
    }
    default:
      Err(errors, path,
          "filename, inline_string, inline_bytes or environment_variable is required");
      return false;
  }
}

bool DownstreamTlsOptions(const DownstreamTlsContext& ctx, const std::string& path,
                          SecretSources* secrets, TlsContextOptions* out,
                          std::vector<std::string>* errors) {
  size_t before = errors->size();
  out->server = true;
  out->where = path;
  Common(ctx.common_tls_context(), path + ".common_tls_context", secrets, out, errors);
  out->require_client_certificate =
      ctx.has_require_client_certificate() && ctx.require_client_certificate().value();
  out->require_sni = ctx.has_require_sni() && ctx.require_sni().value();
  using D = DownstreamTlsContext;
  switch (ctx.session_ticket_keys_type_case()) {
    case D::kSessionTicketKeys:
      for (int i = 0; i < ctx.session_ticket_keys().keys_size(); ++i) {
        std::string key;
        if (ReadDataSource(ctx.session_ticket_keys().keys(i),
                           absl::StrCat(path, ".session_ticket_keys.keys[", i, "]"), &key,
                           errors)) {
          out->ticket_keys.push_back(std::move(key));
        }
      }
      if (ctx.session_ticket_keys().keys_size() == 0) {
        Err(errors, path + ".session_ticket_keys.keys", "at least one key is required");
      }
      break;
    case D::kSessionTicketKeysSdsSecretConfig: {
      std::string sp = path + ".session_ticket_keys_sds_secret_config";
      const Secret* s = FindSecret(ctx.session_ticket_keys_sds_secret_config(),
                                   Secret::kSessionTicketKeys, sp, secrets, errors);
      if (s) {
        for (int i = 0; i < s->session_ticket_keys().keys_size(); ++i) {
          std::string key;
          if (ReadDataSource(s->session_ticket_keys().keys(i),
                             absl::StrCat(sp, " (secret '", s->name(), "').keys[", i, "]"), &key,
                             errors)) {
            out->ticket_keys.push_back(std::move(key));
          }
        }
      }
      break;
    }
    case D::kDisableStatelessSessionResumption:
      out->disable_tickets = ctx.disable_stateless_session_resumption();
      break;
    default:
      break;
  }
  out->disable_session_cache = ctx.disable_stateful_session_resumption();
  if (ctx.has_session_timeout()) {
    out->session_timeout_s = static_cast<uint32_t>(ctx.session_timeout().seconds());
  }
  if (ctx.ocsp_staple_policy() != D::LENIENT_STAPLING) {
    Err(errors, path + ".ocsp_staple_policy", "OCSP stapling is not supported");
  }
  return errors->size() == before;
}

bool UpstreamTlsOptions(const UpstreamTlsContext& ctx, const std::string& path,
                        SecretSources* secrets, TlsContextOptions* out, std::string* sni,
                        std::vector<std::string>* errors) {
  size_t before = errors->size();
  out->server = false;
  out->where = path;
  Common(ctx.common_tls_context(), path + ".common_tls_context", secrets, out, errors);
  if (out->certificates.size() > 1) {
    Err(errors, path + ".common_tls_context.tls_certificates",
        "a client presents at most one certificate");
  }
  if (ctx.allow_renegotiation()) {
    Err(errors, path + ".allow_renegotiation", "renegotiation is not supported");
  }
  *sni = ctx.sni();
  return errors->size() == before;
}

std::string CheckSecret(const Secret& secret, const std::string& path) {
  std::vector<std::string> errors;
  TlsContextOptions o;
  o.where = path;
  switch (secret.type_case()) {
    case Secret::kTlsCertificate:
      if (!Certificate(secret.tls_certificate(), path + ".tls_certificate", &o, &errors)) break;
      if (auto c = TlsContext::Create(o); !c.ok())
        errors.push_back(std::string(c.status().message()));
      break;
    case Secret::kValidationContext:
      o.server = false;
      if (!Validation(secret.validation_context(), path + ".validation_context", &o, &errors))
        break;
      if (auto c = TlsContext::Create(o); !c.ok())
        errors.push_back(std::string(c.status().message()));
      break;
    case Secret::kSessionTicketKeys:
      for (int i = 0; i < secret.session_ticket_keys().keys_size(); ++i) {
        std::string key;
        std::string kp = absl::StrCat(path, ".session_ticket_keys.keys[", i, "]");
        if (ReadDataSource(secret.session_ticket_keys().keys(i), kp, &key, &errors) &&
            key.size() != 80) {
          Err(&errors, kp, absl::StrCat("a session ticket key must be 80 bytes, not ", key.size()));
        }
      }
      if (secret.session_ticket_keys().keys_size() == 0) {
        Err(&errors, path + ".session_ticket_keys.keys", "at least one key is required");
      }
      break;
    case Secret::kGenericSecret:
      break;  // nothing in rpx uses one; kept
    default:
      Err(&errors, path, "tls_certificate, validation_context or session_ticket_keys is required");
  }
  std::string out;
  for (const auto& e : errors) out += (out.empty() ? "" : "; ") + e;
  return out;
}

}  // namespace rpx
