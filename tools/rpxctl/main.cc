// rpxctl: changes what a fleet of rpx nodes runs through the control API of tools/xds_server
// (rpx.control.v1.ControlService). Exit status: 0 done, 1 the change was refused (by the API, or
// because its file does not fit the schema; or, with --wait, not taken up by every node in
// time), 2 usage, unreadable files or connection errors.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "rpx/control/v1/control.grpc.pb.h"
#include "source/config/yaml_loader.h"
#include "tools/xds_server/render.h"

namespace {

namespace pb = rpx::control::v1;

constexpr int kOk = 0;
constexpr int kRefused = 1;
constexpr int kUsage = 2;

const char kUsageText[] =
    "usage: rpxctl [--server HOST:PORT] [-o text|json] COMMAND [ARGS]\n"
    "commands:\n"
    "  apply -f FILE.yaml [-f FILE2.yaml] [--dry-run] [--wait[=SECONDS]]\n"
    "                      add or replace the resources of the files (the control plane's file\n"
    "                      format: listeners, routes, clusters, endpoints, secrets)\n"
    "  delete TYPE NAME [TYPE NAME ...] [--dry-run] [--wait[=SECONDS]]\n"
    "  set-vhost ROUTE_CONFIG -f VHOST.yaml [--dry-run]   add or replace one virtual host\n"
    "  set-vhost ROUTE_CONFIG --remove NAME [--dry-run]   remove one\n"
    "  diff -f FILE.yaml   what applying the files would change (nothing is changed)\n"
    "  diff VERSION VERSION\n"
    "  get listeners|routes|clusters|endpoints|secrets|all [NAME] [--version N]\n"
    "  history             versions kept, newest first, and which version each group runs\n"
    "  rollback VERSION [--dry-run] [--wait[=SECONDS]]\n"
    "  status              every node: what it runs, what it ACKed, its last NACK\n"
    "options:\n"
    "  --server HOST:PORT  the control API (default $RPXCTL_SERVER or 127.0.0.1:18001)\n"
    "  -o text|json        output format (default text)\n"
    "  --to CLUSTER        only nodes whose node.cluster is CLUSTER (a canary group)\n"
    "  --to-metadata K=V   only nodes whose node.metadata K is the string V\n"
    "  -m, --message TEXT  why (kept in the history)\n"
    "  --author NAME       who (default $RPXCTL_AUTHOR, else $USER@host)\n"
    "  --timeout SECONDS   per request (default 10)\n"
    "  --ca FILE           TLS to the control API, trusting this CA (PEM)\n"
    "  --cert FILE --key FILE  client certificate for mTLS\n"
    "  --tls-server-name NAME  the name to check in the server's certificate\n"
    "  -f -                read YAML from stdin\n";

struct Args {
  std::string server;
  std::string output = "text";
  std::string command;
  std::vector<std::string> positional;
  std::vector<std::string> files;
  pb::Target target;
  std::string message;
  std::string author;
  std::string remove;
  bool dry_run = false;
  double wait_s = -1;  // <0: do not wait
  double timeout_s = 10;
  uint64_t version = 0;
  std::string ca_file, cert_file, key_file, tls_server_name;
};

int Usage(const std::string& error) {
  fprintf(stderr, "rpxctl: %s\n%s", error.c_str(), kUsageText);
  return kUsage;
}

std::string DefaultAuthor() {
  if (const char* a = getenv("RPXCTL_AUTHOR"); a && *a) return a;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const char* user = getenv("USER");
  return absl::StrCat(user && *user ? user : "unknown", "@", host);
}

// Reads a YAML file (or stdin for "-") into `out`. kOk; kUsage when it cannot be read; kRefused
// when its content does not fit the schema (printed like a refused change: nothing was sent).
int LoadFile(const std::string& path, google::protobuf::Message* out) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      fprintf(stderr, "rpxctl: cannot read '%s'\n", path.c_str());
      return kUsage;
    }
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::vector<std::string> errors;
  if (rpx::LoadYamlIntoMessage(text, path == "-" ? "<stdin>" : path, out, &errors)) return kOk;
  printf("refused: %zu problem%s in %s (nothing was sent)\n", errors.size(),
         errors.size() == 1 ? "" : "s", path == "-" ? "<stdin>" : path.c_str());
  for (const std::string& e : errors) printf("  %s\n", e.c_str());
  return kRefused;
}

std::string Age(int64_t now_ms, int64_t then_ms) {
  if (then_ms <= 0) return "-";
  int64_t s = (now_ms - then_ms) / 1000;
  if (s < 0) s = 0;
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 7200) return absl::StrCat(s / 60, "m");
  if (s < 172800) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string TimeUtc(int64_t ms) {
  time_t t = static_cast<time_t>(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string TargetText(const pb::Target& t) {
  if (!t.node_cluster().empty()) return absl::StrCat("cluster=", t.node_cluster());
  if (!t.metadata_key().empty()) {
    return absl::StrCat("metadata.", t.metadata_key(), "=", t.metadata_value());
  }
  return "all";
}

const char* KindText(pb::ResourceChange::Kind k) {
  switch (k) {
    case pb::ResourceChange::ADDED:
      return "added";
    case pb::ResourceChange::CHANGED:
      return "changed";
    case pb::ResourceChange::REMOVED:
      return "removed";
    default:
      return "?";
  }
}

// Prints rows with each column as wide as its widest cell.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    printf("%s\n", line.c_str());
  }
}

bool ReadPem(const std::string& path, std::string* out) {
  std::ifstream in(path);
  *out = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in && !out->empty()) return true;
  fprintf(stderr, "rpxctl: cannot read '%s'\n", path.c_str());
  return false;
}

std::shared_ptr<grpc::Channel> MakeChannel(const Args& args) {
  grpc::ChannelArguments channel_args;
  if (args.ca_file.empty() && args.cert_file.empty()) {
    return grpc::CreateCustomChannel(args.server, grpc::InsecureChannelCredentials(), channel_args);
  }
  grpc::SslCredentialsOptions ssl;
  if (!args.ca_file.empty() && !ReadPem(args.ca_file, &ssl.pem_root_certs)) return nullptr;
  if (!args.cert_file.empty() && (!ReadPem(args.cert_file, &ssl.pem_cert_chain) ||
                                  !ReadPem(args.key_file, &ssl.pem_private_key))) {
    return nullptr;
  }
  if (!args.tls_server_name.empty()) channel_args.SetSslTargetNameOverride(args.tls_server_name);
  return grpc::CreateCustomChannel(args.server, grpc::SslCredentials(ssl), channel_args);
}

class Client {
 public:
  Client(const Args& args, std::shared_ptr<grpc::Channel> channel)
      : args_(args), stub_(pb::ControlService::NewStub(channel)) {}

  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(args_.timeout_s * 1000)));
  }

  int Failed(const grpc::Status& s) const {
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        s.error_code() == grpc::StatusCode::NOT_FOUND) {
      fprintf(stderr, "rpxctl: %s\n", s.error_message().c_str());
      return kRefused;
    }
    fprintf(stderr, "rpxctl: %s: %s (%d)\n", args_.server.c_str(), s.error_message().c_str(),
            static_cast<int>(s.error_code()));
    return kUsage;
  }

  pb::ControlService::Stub* stub() { return stub_.get(); }

 private:
  const Args& args_;
  std::unique_ptr<pb::ControlService::Stub> stub_;
};

pb::ChangeOptions Options(const Args& args) {
  pb::ChangeOptions o;
  o.set_author(args.author);
  o.set_description(args.message);
  *o.mutable_target() = args.target;
  o.set_dry_run(args.dry_run);
  o.set_with_diff(args.dry_run);
  return o;
}

void PrintChanges(const google::protobuf::RepeatedPtrField<pb::ResourceChange>& changes,
                  bool with_diff) {
  for (const auto& c : changes) {
    printf("  %s %s/%s\n", KindText(c.kind()), c.type().c_str(), c.name().c_str());
    if (with_diff && !c.diff().empty()) printf("%s", c.diff().c_str());
  }
}

void PrintProblems(const google::protobuf::RepeatedPtrField<pb::Problem>& problems) {
  for (const auto& p : problems) {
    std::string where = p.resource();
    if (!p.field().empty()) absl::StrAppend(&where, ": ", p.field());
    printf("  %s: %s\n", where.c_str(), p.reason().c_str());
  }
}

// Waits until every connected node assigned `version` runs it. False when a node NACKs it or
// the time runs out (each such node is printed).
bool WaitForFleet(Client& client, const Args& args, uint64_t version) {
  auto accepted = std::chrono::steady_clock::now();
  auto deadline = accepted + std::chrono::milliseconds(static_cast<int64_t>(args.wait_s * 1000));
  std::string v = absl::StrCat(version);
  while (true) {
    grpc::ClientContext ctx;
    client.Prepare(&ctx);
    pb::FleetStatusResponse status;
    grpc::Status s = client.stub()->GetFleetStatus(&ctx, pb::FleetStatusRequest(), &status);
    if (!s.ok()) {
      client.Failed(s);
      return false;
    }
    std::vector<std::string> behind, nacked;
    size_t nodes = 0;
    for (const auto& n : status.nodes()) {
      if (n.state() != pb::NodeStatus::CONNECTED || n.assigned_version() != version) continue;
      ++nodes;
      for (const auto& t : n.types()) {
        if (t.nack_version() != "" && t.sent_version() == v && t.acked_version() != v) {
          nacked.push_back(absl::StrCat(n.id(), " (", t.type(), "): ", t.nack_error()));
        }
      }
      if (n.current_version() != v) behind.push_back(n.id());
    }
    if (!nacked.empty()) {
      printf("NACKed by %zu node(s):\n", nacked.size());
      for (const auto& line : nacked) printf("  %s\n", line.c_str());
      return false;
    }
    if (behind.empty()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - accepted)
                    .count();
      if (args.output == "text") {
        printf("running on %zu node(s), %lld ms after the change was accepted\n", nodes,
               static_cast<long long>(ms));
      }
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      printf("not running version %s after %.1fs on: %s\n", v.c_str(), args.wait_s,
             absl::StrJoin(behind, ", ").c_str());
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int ReportChange(Client& client, const Args& args, const grpc::Status& s,
                 const pb::ChangeResponse& resp) {
  if (!s.ok()) return client.Failed(s);
  if (args.output == "json") {
    printf("%s", rpx::xds_server::ToJson(resp).c_str());
  } else if (!resp.accepted()) {
    printf("refused: %d problem%s (nothing changed)\n", resp.problems_size(),
           resp.problems_size() == 1 ? "" : "s");
    PrintProblems(resp.problems());
  } else if (resp.dry_run()) {
    printf("dry run: would be accepted (based on version %llu, target %s)%s\n",
           static_cast<unsigned long long>(resp.base_version()), TargetText(args.target).c_str(),
           resp.changes().empty() ? "; nothing would change" : "");
    PrintChanges(resp.changes(), true);
  } else if (resp.version() == 0) {
    printf("unchanged: version %llu already has these resources\n",
           static_cast<unsigned long long>(resp.base_version()));
  } else {
    printf("accepted: version %llu (from %llu), target %s\n",
           static_cast<unsigned long long>(resp.version()),
           static_cast<unsigned long long>(resp.base_version()), TargetText(args.target).c_str());
    PrintChanges(resp.changes(), false);
  }
  if (!resp.accepted()) return kRefused;
  if (args.wait_s >= 0 && !resp.dry_run()) {
    uint64_t version = resp.version() ? resp.version() : resp.base_version();
    if (!WaitForFleet(client, args, version)) return kRefused;
  }
  return kOk;
}

int Apply(Client& client, const Args& args) {
  if (args.files.empty()) return Usage("apply needs -f FILE");
  if (!args.positional.empty()) return Usage("apply takes no arguments besides -f");
  pb::ApplyRequest req;
  for (const std::string& f : args.files) {
    rpx::tools::v1::ResourceFile file;
    if (int rc = LoadFile(f, &file); rc != kOk) return rc;
    req.mutable_resources()->MergeFrom(file);
  }
  *req.mutable_options() = Options(args);
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::ChangeResponse resp;
  grpc::Status s = client.stub()->Apply(&ctx, req, &resp);
  return ReportChange(client, args, s, resp);
}

int Delete(Client& client, const Args& args) {
  if (args.positional.empty() || args.positional.size() % 2 != 0) {
    return Usage("delete needs TYPE NAME pairs");
  }
  pb::DeleteRequest req;
  for (size_t i = 0; i < args.positional.size(); i += 2) {
    auto* r = req.add_resources();
    r->set_type(args.positional[i]);
    r->set_name(args.positional[i + 1]);
  }
  *req.mutable_options() = Options(args);
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::ChangeResponse resp;
  grpc::Status s = client.stub()->Delete(&ctx, req, &resp);
  return ReportChange(client, args, s, resp);
}

int SetVhost(Client& client, const Args& args) {
  if (args.positional.size() != 1) return Usage("set-vhost needs ROUTE_CONFIG");
  if (args.files.size() + (args.remove.empty() ? 0 : 1) != 1) {
    return Usage("set-vhost needs one -f VHOST.yaml or --remove NAME");
  }
  pb::UpdateVirtualHostRequest req;
  req.set_route_configuration(args.positional[0]);
  if (!args.remove.empty()) {
    req.set_remove(true);
    req.mutable_virtual_host()->set_name(args.remove);
  } else if (int rc = LoadFile(args.files[0], req.mutable_virtual_host()); rc != kOk) {
    return rc;
  }
  *req.mutable_options() = Options(args);
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::ChangeResponse resp;
  grpc::Status s = client.stub()->UpdateVirtualHost(&ctx, req, &resp);
  return ReportChange(client, args, s, resp);
}

int Rollback(Client& client, const Args& args) {
  uint64_t version = 0;
  if (args.positional.size() != 1 || !absl::SimpleAtoi(args.positional[0], &version) ||
      version == 0) {
    return Usage("rollback needs one VERSION (a number from 'rpxctl history')");
  }
  pb::RollbackRequest req;
  req.set_version(version);
  *req.mutable_options() = Options(args);
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::ChangeResponse resp;
  grpc::Status s = client.stub()->Rollback(&ctx, req, &resp);
  return ReportChange(client, args, s, resp);
}

int Diff(Client& client, const Args& args) {
  pb::DiffRequest req;
  if (!args.files.empty()) {
    if (!args.positional.empty()) return Usage("diff takes -f FILE or two versions, not both");
    for (const std::string& f : args.files) {
      rpx::tools::v1::ResourceFile file;
      if (int rc = LoadFile(f, &file); rc != kOk) return rc;
      req.mutable_proposed()->MergeFrom(file);
    }
    *req.mutable_target() = args.target;
  } else {
    uint64_t a = 0, b = 0;
    if (args.positional.size() != 2 || !absl::SimpleAtoi(args.positional[0], &a) ||
        !absl::SimpleAtoi(args.positional[1], &b)) {
      return Usage("diff needs -f FILE or two versions");
    }
    req.set_from_version(a);
    req.set_to_version(b);
  }
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::DiffResponse resp;
  grpc::Status s = client.stub()->Diff(&ctx, req, &resp);
  if (!s.ok()) return client.Failed(s);
  if (args.output == "json") {
    printf("%s", rpx::xds_server::ToJson(resp).c_str());
    return resp.problems().empty() ? kOk : kRefused;
  }
  if (!resp.problems().empty()) {
    printf("would be refused: %d problem%s\n", resp.problems_size(),
           resp.problems_size() == 1 ? "" : "s");
    PrintProblems(resp.problems());
  }
  if (resp.changes().empty()) printf("no changes\n");
  for (const auto& c : resp.changes()) printf("%s", c.diff().c_str());
  return resp.problems().empty() ? kOk : kRefused;
}

int Get(Client& client, const Args& args) {
  if (args.positional.empty() || args.positional.size() > 2) {
    return Usage("get needs TYPE [NAME]");
  }
  pb::GetSnapshotRequest req;
  if (args.positional[0] != "all") req.set_type(args.positional[0]);
  if (args.positional.size() == 2) req.set_name(args.positional[1]);
  req.set_version(args.version);
  *req.mutable_target() = args.target;
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::GetSnapshotResponse resp;
  grpc::Status s = client.stub()->GetSnapshot(&ctx, req, &resp);
  if (!s.ok()) return client.Failed(s);
  if (args.output == "json") {
    printf("%s", rpx::xds_server::ToJson(resp).c_str());
  } else {
    printf("# version %llu\n%s", static_cast<unsigned long long>(resp.version()),
           rpx::xds_server::ToYaml(resp.resources()).c_str());
  }
  return kOk;
}

int History(Client& client, const Args& args) {
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::ListVersionsResponse resp;
  grpc::Status s = client.stub()->ListVersions(&ctx, pb::ListVersionsRequest(), &resp);
  if (!s.ok()) return client.Failed(s);
  if (args.output == "json") {
    printf("%s", rpx::xds_server::ToJson(resp).c_str());
    return kOk;
  }
  std::vector<std::string> serving;
  std::map<uint64_t, std::vector<std::string>> served_to;
  for (const auto& a : resp.assignments()) {
    serving.push_back(absl::StrCat(TargetText(a.target()), ": ", a.version()));
    served_to[a.version()].push_back(TargetText(a.target()));
  }
  printf("serving: %s\n", absl::StrJoin(serving, ", ").c_str());
  std::vector<std::vector<std::string>> rows = {
      {"VERSION", "CREATED", "AUTHOR", "TARGET", "ORIGIN", "CHANGES", "SERVED TO", "DESCRIPTION"}};
  for (const auto& v : resp.versions()) {
    rows.push_back({absl::StrCat(v.version()), TimeUtc(v.created_ms()), v.author(),
                    TargetText(v.target()), v.origin(),
                    absl::StrCat("+", v.added(), " ~", v.changed(), " -", v.removed()),
                    served_to.count(v.version()) ? absl::StrJoin(served_to[v.version()], ",") : "-",
                    v.description()});
  }
  PrintTable(rows);
  return kOk;
}

int Status(Client& client, const Args& args) {
  grpc::ClientContext ctx;
  client.Prepare(&ctx);
  pb::FleetStatusResponse resp;
  grpc::Status s = client.stub()->GetFleetStatus(&ctx, pb::FleetStatusRequest(), &resp);
  if (!s.ok()) return client.Failed(s);
  if (args.output == "json") {
    printf("%s", rpx::xds_server::ToJson(resp).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows = {{"NODE", "CLUSTER", "STATE", "RUNNING", "ASSIGNED",
                                                 "ACKED", "ADDRESS", "UP", "HEARD", "LAST NACK"}};
  for (const auto& n : resp.nodes()) {
    std::vector<std::string> acked;
    std::string nack = "-";
    int64_t nack_ms = 0;
    for (const auto& t : n.types()) {
      acked.push_back(
          absl::StrCat(t.type(), "=", t.acked_version().empty() ? "-" : t.acked_version()));
      if (!t.nack_error().empty() && t.nack_ms() > nack_ms) {
        nack_ms = t.nack_ms();
        nack =
            absl::StrCat(t.type(), " ", Age(resp.now_ms(), t.nack_ms()), " ago: ", t.nack_error());
      }
    }
    bool gone = n.state() == pb::NodeStatus::GONE;
    rows.push_back(
        {n.id(), n.cluster().empty() ? "-" : n.cluster(),
         gone ? absl::StrCat("gone ", Age(resp.now_ms(), n.gone_since_ms())) : "connected",
         n.current_version().empty() ? "syncing" : n.current_version(),
         absl::StrCat(n.assigned_version()), acked.empty() ? "-" : absl::StrJoin(acked, ","),
         n.address(), Age(resp.now_ms(), n.connected_since_ms()),
         Age(resp.now_ms(), n.last_heard_ms()), nack});
  }
  PrintTable(rows);
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const char* s = getenv("RPXCTL_SERVER"); s && *s) args.server = s;
  if (args.server.empty()) args.server = "127.0.0.1:18001";
  args.author = DefaultAuthor();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    bool missing = false;
    auto next = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) {
        missing = true;
        return "";
      }
      return argv[++i];
    };
    if (arg == "--server") {
      args.server = next();
    } else if (arg == "-o" || arg == "--output") {
      args.output = next();
      if (!missing && args.output != "text" && args.output != "json") {
        return Usage(absl::StrCat("-o must be text or json, got '", args.output, "'"));
      }
    } else if (arg == "-f" || arg == "--file") {
      args.files.push_back(next());
    } else if (arg == "--to") {
      args.target.set_node_cluster(next());
    } else if (arg == "--to-metadata") {
      std::string kv = next();
      size_t at = kv.find('=');
      if (!missing && (at == std::string::npos || at == 0)) {
        return Usage(absl::StrCat("--to-metadata needs KEY=VALUE, got '", kv, "'"));
      }
      if (!missing) {
        args.target.set_metadata_key(kv.substr(0, at));
        args.target.set_metadata_value(kv.substr(at + 1));
      }
    } else if (arg == "-m" || arg == "--message") {
      args.message = next();
    } else if (arg == "--author") {
      args.author = next();
    } else if (arg == "--remove") {
      args.remove = next();
    } else if (arg == "--dry-run") {
      args.dry_run = true;
    } else if (arg == "--wait") {
      args.wait_s = 30;
      if (has_inline && (!absl::SimpleAtod(value, &args.wait_s) || args.wait_s < 0)) {
        return Usage(absl::StrCat("--wait=SECONDS needs a number, got '", value, "'"));
      }
    } else if (arg == "--timeout") {
      std::string v = next();
      if (!missing && (!absl::SimpleAtod(v, &args.timeout_s) || args.timeout_s <= 0)) {
        return Usage(absl::StrCat("--timeout needs a positive number, got '", v, "'"));
      }
    } else if (arg == "--ca") {
      args.ca_file = next();
    } else if (arg == "--cert") {
      args.cert_file = next();
    } else if (arg == "--key") {
      args.key_file = next();
    } else if (arg == "--tls-server-name") {
      args.tls_server_name = next();
    } else if (arg == "--version") {
      std::string v = next();
      if (!missing && !absl::SimpleAtoi(v, &args.version)) {
        return Usage(absl::StrCat("--version needs a number, got '", v, "'"));
      }
    } else if (arg == "-h" || arg == "--help" || arg == "help") {
      printf("%s", kUsageText);
      return kOk;
    } else if (arg.size() > 1 && arg[0] == '-' && arg != "-") {
      return Usage(absl::StrCat("unknown option '", argv[i], "'"));
    } else if (args.command.empty()) {
      args.command = arg;
    } else {
      args.positional.push_back(arg);
    }
    if (missing) return Usage(absl::StrCat(arg, " needs a value"));
  }
  if (!args.target.node_cluster().empty() && !args.target.metadata_key().empty()) {
    return Usage("give --to or --to-metadata, not both");
  }
  if (args.command.empty()) return Usage("no command");
  if (args.cert_file.empty() != args.key_file.empty()) {
    return Usage("--cert and --key go together");
  }
  auto channel = MakeChannel(args);
  if (!channel) return kUsage;
  Client client(args, channel);
  if (args.command == "apply") return Apply(client, args);
  if (args.command == "delete") return Delete(client, args);
  if (args.command == "set-vhost") return SetVhost(client, args);
  if (args.command == "rollback") return Rollback(client, args);
  if (args.command == "diff") return Diff(client, args);
  if (args.command == "get") return Get(client, args);
  if (args.command == "history") return History(client, args);
  if (args.command == "status") return Status(client, args);
  return Usage(absl::StrCat("unknown command '", args.command, "'"));
}
