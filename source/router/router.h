// Router: forwards requests to upstream clusters. One Router per (worker, HTTP listener) acts as
// the StreamHandlerFactory; each request gets a RouterStream, which picks the route, rewrites the
// request, takes an upstream connection from the cluster's pool and relays both directions with
// backpressure. Local replies: 404 no route, 503 unknown cluster / overflow / connect failure,
// 502 upstream reset or bad response, 504 route timeout.
// Worker thread only.
#pragma once

#include <memory>

#include "source/common/buffer.h"
#include "source/common/random.h"
#include "source/http/http_config.h"
#include "source/http/stream.h"
#include "source/router/route_table.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

class Router : public StreamHandlerFactory {
 public:
  Router(Dispatcher& dispatcher, std::shared_ptr<const HttpConfig> config,
         std::shared_ptr<const RouteTable> routes, WorkerClusterManager& clusters, Random& random,
         HttpStats& stats)
      : dispatcher_(dispatcher),
        config_(std::move(config)),
        routes_(std::move(routes)),
        clusters_(clusters),
        random_(random),
        stats_(&stats) {}

  std::unique_ptr<StreamHandler> CreateStream(ResponseEncoder& encoder) override;
  // New requests use `config`, `routes` and `stats`; requests in flight keep the route table
  // they started with.
  void Update(std::shared_ptr<const HttpConfig> config, std::shared_ptr<const RouteTable> routes,
              HttpStats& stats) {
    config_ = std::move(config);
    routes_ = std::move(routes);
    stats_ = &stats;
  }

  Dispatcher& dispatcher() { return dispatcher_; }
  const HttpConfig& config() const { return *config_; }
  const std::shared_ptr<const RouteTable>& routes() const { return routes_; }
  WorkerClusterManager& clusters() { return clusters_; }
  Random& random() { return random_; }
  HttpStats& stats() { return *stats_; }

 private:
  Dispatcher& dispatcher_;
  std::shared_ptr<const HttpConfig> config_;
  std::shared_ptr<const RouteTable> routes_;
  WorkerClusterManager& clusters_;
  Random& random_;
  HttpStats* stats_;
};

// Hop-by-hop headers (RFC 9110 7.6.1), those named in Connection, and the framing headers
// (Content-Length; Expect, which rpx answers itself) are removed both ways: rpx frames each
// message itself.
void RemoveHopByHopHeaders(HeaderMap& headers);

}  // namespace rpx
