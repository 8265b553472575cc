// XdsSources: every place the configuration takes xDS resources from, behind one face for the
// ConfigManager: the ADS stream (one XdsClient for every ADS type), a type's own gRPC stream
// (one XdsClient per type with an api_config_source, as Envoy opens one stream per type), and
// files (XdsFileSource, path_config_source). Each type has one source; a type the bootstrap does
// not name takes its source from the first resource that needs it (a listener's RDS, a cluster's
// EDS), and a later resource naming another source for that type is refused.
// Main thread only (the clients' stream threads post to it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "envoy/config/core/v3/base.pb.h"
#include "source/config/server_config.h"
#include "source/config/xds_client.h"
#include "source/config/xds_source.h"
#include "source/event/dispatcher.h"

namespace rpx {

// One type's resources from a file holding a DiscoveryResponse in YAML or JSON
// (`version_info`, `resources` with "@type"), as Envoy's path_config_source reads it. Loaded at
// start and again whenever the file is replaced (moved into place, as Envoy expects: `mv`), or
// written and closed, or, with `watched_dir`, whenever a file is moved into that directory
// (a Kubernetes ConfigMap's symlink swap). A file that does not parse, or that the applier
// refuses, changes nothing: the last good state keeps serving, and the error is logged and counted.
class XdsFileSource {
 public:
  XdsFileSource(Dispatcher& main, std::string type_url, XdsSource source, XdsApplier& applier);
  ~XdsFileSource();
  // Starts watching the file and loads it from the loop right after (never inside this call).
  // False with `*error` if its directory cannot be watched (a missing or bad file is not an error
  // here: it is logged, and a later good one applies).
  bool Start(std::string* error);
  const XdsClient::TypeStatus& status() const { return status_; }

 private:
  void Load();
  void OnWatch();

  Dispatcher& main_;
  const std::string type_url_;
  const XdsSource source_;
  XdsApplier& applier_;
  std::string dir_, base_;
  int inotify_fd_ = -1;
  std::unique_ptr<FileEvent> event_;
  XdsClient::TypeStatus status_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the posted first load
};

class XdsSources {
 public:
  XdsSources(Dispatcher& main, const XdsConfig& config, const envoy::config::core::v3::Node& node,
             XdsApplier& applier);
  ~XdsSources();

  // Starts what the bootstrap names: ADS, and LDS / CDS from their sources. False with `*error`
  // when a file source cannot be watched.
  bool Start(std::string* error);
  void Stop();

  // Makes `source` the source of `type_url` (RDS, EDS) if it has none yet, starting its stream or
  // watch; an unset source means ADS. False with `*error` when the type already has another
  // source or `source` cannot be used (ADS without ads_config, a cluster that carries no xDS).
  bool Ensure(const std::string& type_url, const XdsSource& source, std::string* error);
  // The names wanted for a named type (RDS, EDS, SDS), for its gRPC source; files hold what
  // they hold.
  void SetNames(const std::string& type_url, const std::set<std::string>& names);

  // For /config_dump, /config_summary and stats.
  std::map<std::string, XdsClient::TypeStatus> status() const;
  bool connected() const;  // every gRPC stream is up (true with none)
  bool has_streams() const { return !clients_.empty(); }
  // Monotonic time (ns) at which the response being applied was read (the latest of all streams).
  int64_t current_response_received_ns() const;
  // A one-line description of what runs, for the startup log.
  std::string Describe() const;

 private:
  XdsClient* ClientFor(const std::string& type_url, const XdsSource& source, std::string* error);

  Dispatcher& main_;
  const XdsConfig config_;
  envoy::config::core::v3::Node node_;
  XdsApplier& applier_;
  std::map<std::string, XdsSource> sources_;                     // type -> its source
  std::map<std::string, std::unique_ptr<XdsClient>> clients_;    // "ads" or a type URL
  std::map<std::string, XdsClient*> client_of_;                  // type -> the client serving it
  std::map<std::string, std::unique_ptr<XdsFileSource>> files_;  // type -> its file
  std::map<std::string, std::set<std::string>> names_;           // type -> names asked for
  bool started_ = false;
};

}  // namespace rpx
