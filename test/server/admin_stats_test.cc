#include "source/server/admin_stats.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(AdminStatsTest, EnvoysTagsForScopesAndResponseCodeClasses) {
  StatEntry e = MakeStat("cluster", "web", "upstream_rq_2xx", 7);
  EXPECT_EQ(e.name, "cluster.web.upstream_rq_2xx");
  EXPECT_EQ(e.prom_name, "envoy_cluster_upstream_rq_xx");
  EXPECT_THAT(e.tags, ElementsAre(Pair("envoy_response_code_class", "2"),
                                  Pair("envoy_cluster_name", "web")));
  EXPECT_FALSE(e.gauge);

  e = MakeStat("http", "ingress", "downstream_rq_active", 3);
  EXPECT_EQ(e.prom_name, "envoy_http_downstream_rq_active");
  EXPECT_THAT(e.tags, ElementsAre(Pair("envoy_http_conn_manager_prefix", "ingress")));
  EXPECT_TRUE(e.gauge);

  e = MakeStat("listener", "127.0.0.1_10000", "ssl.handshake", 1);
  EXPECT_EQ(e.prom_name, "envoy_listener_ssl_handshake");
  EXPECT_THAT(e.tags, ElementsAre(Pair("envoy_listener_address", "127.0.0.1_10000")));

  e = MakeFlatStat("filesystem.write_total_buffered", 0);
  EXPECT_EQ(e.prom_name, "envoy_filesystem_write_total_buffered");
  EXPECT_TRUE(e.tags.empty());
  EXPECT_TRUE(e.gauge);
}

TEST(AdminStatsTest, PrometheusGroupsSamplesUnderOneType) {
  std::vector<StatEntry> s = {MakeStat("cluster", "a", "upstream_rq_2xx", 1),
                              MakeStat("cluster", "b\"x", "upstream_rq_5xx", 2),
                              MakeFlatStat("server.live", 1)};
  std::string text = RenderPrometheus(s, StatsQuery());
  EXPECT_EQ(
      text,
      "# TYPE envoy_cluster_upstream_rq_xx counter\n"
      "envoy_cluster_upstream_rq_xx{envoy_response_code_class=\"2\",envoy_cluster_name=\"a\"} "
      "1\n"
      "envoy_cluster_upstream_rq_xx{envoy_response_code_class=\"5\",envoy_cluster_name="
      "\"b\\\"x\"} 2\n"
      "# TYPE envoy_server_live gauge\n"
      "envoy_server_live 1\n");
}

TEST(AdminStatsTest, FilterAndUsedOnly) {
  std::vector<StatEntry> s = {MakeStat("cluster", "a", "upstream_cx_total", 0),
                              MakeStat("cluster", "a", "upstream_rq_total", 5),
                              MakeStat("http", "h", "downstream_rq_total", 9)};
  StatsQuery q;
  EXPECT_EQ(RenderStatsText(s, q),
            "cluster.a.upstream_cx_total: 0\ncluster.a.upstream_rq_total: 5\n"
            "http.h.downstream_rq_total: 9\n");
  q.used_only = true;
  EXPECT_EQ(RenderStatsText(s, q),
            "cluster.a.upstream_rq_total: 5\nhttp.h.downstream_rq_total: 9\n");
  q.filter = std::make_unique<RE2>("^cluster\\.");
  EXPECT_EQ(RenderStatsText(s, q), "cluster.a.upstream_rq_total: 5\n");
  EXPECT_EQ(RenderStatsJson(s, q),
            "{\"stats\":[{\"name\":\"cluster.a.upstream_rq_total\",\"value\":5}]}\n");
}

TEST(AdminStatsTest, HistogramsInEveryFormat) {
  Histogram h;
  h.Record(0);
  h.Record(3);
  h.Record(700);
  StatEntry e = MakeStat("cluster", "web", "upstream_rq_time", 3);
  e.histogram = true;
  e.hist.Add(h);
  std::vector<StatEntry> s;
  s.push_back(std::move(e));
  std::string prom = RenderPrometheus(s, StatsQuery());
  EXPECT_THAT(prom, HasSubstr("# TYPE envoy_cluster_upstream_rq_time histogram\n"
                              "envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=\"web\","
                              "le=\"0.5\"} 1\n"
                              "envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=\"web\","
                              "le=\"1\"} 1\n"
                              "envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=\"web\","
                              "le=\"5\"} 2\n"));
  EXPECT_THAT(prom, HasSubstr("le=\"1000\"} 3\n"));
  EXPECT_THAT(prom,
              HasSubstr("le=\"+Inf\"} 3\n"
                        "envoy_cluster_upstream_rq_time_sum{envoy_cluster_name=\"web\"} 703\n"
                        "envoy_cluster_upstream_rq_time_count{envoy_cluster_name=\"web\"} 3\n"));
  EXPECT_THAT(RenderStatsText(s, StatsQuery()),
              HasSubstr("cluster.web.upstream_rq_time: P0(nan,0) "));
  EXPECT_THAT(
      RenderStatsJson(s, StatsQuery()),
      HasSubstr("{\"histograms\":{\"supported_quantiles\":[0,25,50,75,90,95,99,99.5,99.9,"
                "100],\"computed_quantiles\":[{\"name\":\"cluster.web.upstream_rq_time\","));
}

TEST(AdminStatsTest, ParseQueryDecodes) {
  auto q = ParseQuery("filter=%5Ecluster%5C.+x&usedonly&format=json");
  EXPECT_EQ(q["filter"], "^cluster\\. x");
  EXPECT_EQ(q.count("usedonly"), 1u);
  EXPECT_EQ(q["format"], "json");
  EXPECT_TRUE(ParseQuery("").empty());
}

}  // namespace
}  // namespace rpx
