#include "source/config/access_log_config.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "source/config/server_config.h"
#include "source/config/supported_fields.h"
#include "source/config/yaml_loader.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;

// A bootstrap whose connection manager has `access_log` (YAML at 10 spaces of indent).
std::string Bootstrap(const std::string& access_log) {
  return R"(
static_resources:
  listeners:
  - name: main
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
)" + access_log +
         R"(
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{match: {prefix: "/"}, direct_response: {status: 200}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
)";
}

class AccessLogConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char d[] = "/tmp/rpx-access-log-config-XXXXXX";
    ASSERT_NE(mkdtemp(d), nullptr);
    dir_ = d;
  }
  void TearDown() override {
    files_.Stop();
    unlink((dir_ + "/a.log").c_str());
    unlink((dir_ + "/format.txt").c_str());
    rmdir(dir_.c_str());
  }
  bool Build(const std::string& access_log, std::vector<std::string>* errors) {
    envoy::config::bootstrap::v3::Bootstrap b;
    if (!LoadYamlIntoMessage(Bootstrap(access_log), "t.yaml", &b, errors)) return false;
    CheckSupportedFields(b, "t.yaml: ", "", errors);
    if (!errors->empty()) return false;
    BuildOptions o;
    o.source = "t.yaml";
    o.log_files = &files_;
    config_ = ServerConfig();
    return BuildServerConfig(b, o, &config_, errors);
  }
  const HttpConfig& Http() { return *config_.listeners[0]->chains[0]->http; }
  std::string Error(const std::string& access_log) {
    std::vector<std::string> errors;
    EXPECT_FALSE(Build(access_log, &errors));
    EXPECT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
    return errors.empty() ? "" : errors[0];
  }
  std::string File(const std::string& extra) {
    return R"(          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: )" +
           dir_ + "/a.log\n" + extra;
  }

  std::string dir_;
  LogFileManager files_{1};
  ServerConfig config_;
};

TEST_F(AccessLogConfigTest, FileWithEnvoysDefaultFormat) {
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(File(""), &errors)) << ::testing::PrintToString(errors);
  ASSERT_EQ(Http().access_logs.size(), 1u);
  const AccessLog& log = *Http().access_logs[0];
  ASSERT_TRUE(log.file);
  EXPECT_EQ(log.file->path(), dir_ + "/a.log");
  EXPECT_FALSE(log.filter);
  EXPECT_TRUE(Http().record_start_time);
  EXPECT_TRUE(Http().record_durations);
  EXPECT_TRUE(Http().record_response_headers);  // the default format prints a response header
  EXPECT_EQ(access(log.file->path().c_str(), F_OK), 0) << "opened at configuration time";
}

TEST_F(AccessLogConfigTest, FormatsFromEveryPlace) {
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(File(R"(              log_format:
                text_format_source: {inline_string: "%RESPONSE_CODE% %UPSTREAM_LOCAL_ADDRESS%\n"}
)"),
                    &errors))
      << ::testing::PrintToString(errors);
  EXPECT_FALSE(Http().record_response_headers);
  EXPECT_TRUE(Http().record_upstream_local_address);
  EXPECT_FALSE(Http().access_logs[0]->formatter->is_json());

  FILE* f = fopen((dir_ + "/format.txt").c_str(), "w");
  fputs("%REQ(:METHOD)%\n", f);
  fclose(f);
  ASSERT_TRUE(Build(
      File("              log_format: {text_format_source: {filename: " + dir_ + "/format.txt}}\n"),
      &errors))
      << ::testing::PrintToString(errors);
  RequestHead req;
  req.method = "PUT";
  FormatContext ctx;
  ctx.request = &req;
  EXPECT_EQ(Http().access_logs[0]->formatter->Format(ctx), "PUT\n");

  ASSERT_TRUE(Build(File(R"(              log_format:
                json_format: {code: "%RESPONSE_CODE%", method: "%REQ(:METHOD)%"}
                omit_empty_values: true
)"),
                    &errors))
      << ::testing::PrintToString(errors);
  EXPECT_EQ(Http().access_logs[0]->formatter->Format(ctx), "{\"code\":0,\"method\":\"PUT\"}\n");

  // The deprecated fields Envoy still reads.
  ASSERT_TRUE(Build(File("              format: \"%REQ(:METHOD)% legacy\\n\"\n"), &errors))
      << ::testing::PrintToString(errors);
  EXPECT_EQ(Http().access_logs[0]->formatter->Format(ctx), "PUT legacy\n");
}

TEST_F(AccessLogConfigTest, StdoutAndStderr) {
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(R"(          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
          - name: envoy.access_loggers.stderr
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog
              log_format: {text_format: "%RESPONSE_CODE%\n"}
)",
                    &errors))
      << ::testing::PrintToString(errors);
  ASSERT_EQ(Http().access_logs.size(), 2u);
  EXPECT_EQ(Http().access_logs[0]->file->path(), "/dev/stdout");
  EXPECT_EQ(Http().access_logs[1]->file->path(), "/dev/stderr");
  FormatContext ctx;
  EXPECT_EQ(Http().access_logs[1]->formatter->Format(ctx), "0\n");
}

TEST_F(AccessLogConfigTest, Filters) {
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(File(R"(            filter:
              or_filter:
                filters:
                - status_code_filter: {comparison: {op: GE, value: {default_value: 500, runtime_key: k}}}
                - and_filter:
                    filters:
                    - duration_filter: {comparison: {op: GE, value: {default_value: 1000}}}
                    - not_health_check_filter: {}
                - response_flag_filter: {flags: [UH, UO]}
                - header_filter: {header: {name: x-debug, present_match: true}}
)"),
                    &errors))
      << ::testing::PrintToString(errors);
  const AccessLogFilter& f = *Http().access_logs[0]->filter;
  StreamInfo info;
  RequestHead req;
  FormatContext ctx;
  ctx.info = &info;
  ctx.request = &req;
  info.response_code = 200;
  info.start_ns = 1;
  info.end_ns = 2;
  EXPECT_FALSE(f.Matches(ctx));
  info.response_code = 502;
  EXPECT_TRUE(f.Matches(ctx));
  info.response_code = 200;
  info.end_ns = 1 + 1500000000ull;
  EXPECT_TRUE(f.Matches(ctx));
  info.end_ns = 2;
  info.response_flags = kUpstreamOverflow;
  EXPECT_TRUE(f.Matches(ctx));
  info.response_flags = 0;
  req.headers.Add("x-debug", "1");
  EXPECT_TRUE(f.Matches(ctx));
}

TEST_F(AccessLogConfigTest, RuntimeFilterSamplesItsDefault) {
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(File(R"(            filter:
              runtime_filter:
                runtime_key: access_log.sampled
                percent_sampled: {numerator: 0, denominator: HUNDRED}
)"),
                    &errors))
      << ::testing::PrintToString(errors);
  FormatContext ctx;
  EXPECT_FALSE(Http().access_logs[0]->filter->Matches(ctx));
}

TEST_F(AccessLogConfigTest, LocalReplyConfig) {
  envoy::extensions::filters::network::http_connection_manager::v3::LocalReplyConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(R"(
mappers:
- filter: {status_code_filter: {comparison: {op: EQ, value: {default_value: 404, runtime_key: k}}}}
  status_code: 410
  body: {inline_string: gone}
body_format:
  json_format: {code: "%RESPONSE_CODE%", body: "%LOCAL_REPLY_BODY%"}
)",
                                  "t.yaml", &c, &errors))
      << ::testing::PrintToString(errors);
  auto reply = BuildLocalReply(c, "local_reply_config", &errors);
  ASSERT_TRUE(reply) << ::testing::PrintToString(errors);
  EXPECT_EQ(reply->content_type, "application/json");
  ASSERT_EQ(reply->mappers.size(), 1u);
  EXPECT_EQ(reply->mappers[0].status, 410u);
  EXPECT_EQ(reply->mappers[0].body, "gone");

  c.Clear();
  ASSERT_TRUE(LoadYamlIntoMessage(R"(
mappers:
- status_code: 700
- filter: {not_health_check_filter: {}}
  body_format_override: {text_format: "%NOPE%"}
  headers_to_add: [{header: {key: ":status", value: x}}]
)",
                                  "t.yaml", &c, &errors));
  EXPECT_FALSE(BuildLocalReply(c, "local_reply_config", &errors));
  EXPECT_THAT(errors, ::testing::ElementsAre(
                          "local_reply_config.mappers[0].filter: is required",
                          HasSubstr("local_reply_config.mappers[1].body_format_override."
                                    "text_format: unknown command operator %NOPE%"),
                          "local_reply_config.mappers[1].headers_to_add[0].header.key: must name "
                          "a regular header"));
}

TEST_F(AccessLogConfigTest, ErrorsNameTheField) {
  EXPECT_THAT(Error(File("              log_format: {text_format: \"%NOPE%\"}\n")),
              HasSubstr("t.yaml: static_resources.listeners[0].filter_chains[0].filters[0]."
                        "typed_config.access_log[0].typed_config.log_format.text_format: unknown "
                        "command operator %NOPE%"));
  EXPECT_THAT(Error(File("            filter: {response_flag_filter: {flags: [XX]}}\n")),
              HasSubstr("access_log[0].filter.response_flag_filter.flags[0]: unknown response "
                        "flag 'XX'"));
  EXPECT_THAT(Error(File("            filter: {or_filter: {filters: [{not_health_check_filter: "
                         "{}}]}}\n")),
              HasSubstr("access_log[0].filter.or_filter.filters: needs at least two filters"));
  EXPECT_THAT(Error(File("            filter: {grpc_status_filter: {statuses: [OK]}}\n")),
              HasSubstr("field 'grpc_status_filter' of envoy.config.accesslog.v3.AccessLogFilter "
                        "is not supported by rpx"));
  EXPECT_THAT(Error(File("            filter: {status_code_filter: {}}\n")),
              HasSubstr("status_code_filter.comparison: is required"));
  EXPECT_THAT(Error(R"(          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: /nonexistent-dir/x/a.log
)"),
              HasSubstr("access_log[0].typed_config.path: cannot open '/nonexistent-dir/x/a.log': "
                        "No such file or directory"));
  EXPECT_THAT(Error("          access_log: [{name: envoy.access_loggers.file}]\n"),
              HasSubstr("access_log[0].typed_config: is required"));
}

}  // namespace
}  // namespace rpx
