#include "source/config/supported_fields.h"

#include <memory>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/descriptor.h"
#include "source/common/field_path.h"

namespace rpx {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// "<message full name>.<field>" for every field rpx honours. Messages under google.protobuf are
// always allowed (values, not features).
const std::set<std::string>& Supported() {
  static const auto* s = new std::set<std::string>{
      // bootstrap
      "envoy.config.bootstrap.v3.Bootstrap.node",
      "envoy.config.bootstrap.v3.Bootstrap.static_resources",
      "envoy.config.bootstrap.v3.Bootstrap.admin",
      "envoy.config.bootstrap.v3.Bootstrap.layered_runtime",
      "envoy.config.bootstrap.v3.LayeredRuntime.layers",
      "envoy.config.bootstrap.v3.RuntimeLayer.name",
      "envoy.config.bootstrap.v3.RuntimeLayer.static_layer",
      "envoy.config.bootstrap.v3.RuntimeLayer.admin_layer",
      "envoy.config.bootstrap.v3.Bootstrap.dynamic_resources",
      "envoy.config.bootstrap.v3.Bootstrap.DynamicResources.lds_config",
      "envoy.config.bootstrap.v3.Bootstrap.DynamicResources.cds_config",
      "envoy.config.bootstrap.v3.Bootstrap.DynamicResources.ads_config",
      "envoy.config.core.v3.ConfigSource.ads",
      "envoy.config.core.v3.ConfigSource.api_config_source",
      "envoy.config.core.v3.ConfigSource.path_config_source",
      "envoy.config.core.v3.ConfigSource.path",
      "envoy.config.core.v3.PathConfigSource.path",
      "envoy.config.core.v3.PathConfigSource.watched_directory",
      "envoy.config.core.v3.WatchedDirectory.path",
      "envoy.config.core.v3.ConfigSource.initial_fetch_timeout",
      "envoy.config.core.v3.ConfigSource.resource_api_version",
      "envoy.config.core.v3.ApiConfigSource.api_type",
      "envoy.config.core.v3.ApiConfigSource.transport_api_version",
      "envoy.config.core.v3.ApiConfigSource.grpc_services",
      "envoy.config.core.v3.ApiConfigSource.set_node_on_first_message_only",
      "envoy.config.core.v3.GrpcService.envoy_grpc",
      "envoy.config.core.v3.GrpcService.timeout",
      "envoy.config.core.v3.GrpcService.EnvoyGrpc.cluster_name",
      "envoy.config.core.v3.Http2ProtocolOptions.max_concurrent_streams",
      "envoy.config.core.v3.Http2ProtocolOptions.hpack_table_size",
      "envoy.config.core.v3.Http2ProtocolOptions.max_outbound_frames",
      "envoy.config.core.v3.Http2ProtocolOptions.max_outbound_control_frames",
      "envoy.config.core.v3.Http2ProtocolOptions.max_consecutive_inbound_frames_with_empty_payload",
      "envoy.config.core.v3.Http2ProtocolOptions.max_inbound_priority_frames_per_stream",
      "envoy.config.core.v3.Http2ProtocolOptions."
      "max_inbound_window_update_frames_per_data_frame_sent",
      "envoy.config.core.v3.Http2ProtocolOptions.stream_error_on_invalid_http_messaging",
      "envoy.config.core.v3.Http2ProtocolOptions.override_stream_error_on_invalid_http_message",
      "envoy.config.core.v3.Http2ProtocolOptions.allow_connect",
      "envoy.config.core.v3.Http2ProtocolOptions.allow_metadata",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "http2_protocol_options",
      "envoy.config.core.v3.Http2ProtocolOptions.initial_stream_window_size",
      "envoy.config.core.v3.Http2ProtocolOptions.initial_connection_window_size",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.rds",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "upgrade_configs",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "UpgradeConfig.upgrade_type",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "UpgradeConfig.enabled",
      "envoy.config.route.v3.RouteAction.idle_timeout",
      "envoy.config.route.v3.RouteAction.max_stream_duration",
      "envoy.config.route.v3.RouteAction.MaxStreamDuration.max_stream_duration",
      "envoy.config.route.v3.RouteAction.MaxStreamDuration.grpc_timeout_header_max",
      "envoy.config.route.v3.RouteAction.MaxStreamDuration.grpc_timeout_header_offset",
      "envoy.config.route.v3.RouteAction.upgrade_configs",
      "envoy.config.route.v3.RouteAction.UpgradeConfig.upgrade_type",
      "envoy.config.route.v3.RouteAction.UpgradeConfig.enabled",
      "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit.stat_prefix",
      "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit.max_connections",
      "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit.delay",
      "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit.runtime_enabled",
      "envoy.config.core.v3.RuntimeFeatureFlag.default_value",
      "envoy.config.core.v3.RuntimeFeatureFlag.runtime_key",
      // access logs
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "access_log",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "local_reply_config",
      "envoy.extensions.filters.network.http_connection_manager.v3.LocalReplyConfig.mappers",
      "envoy.extensions.filters.network.http_connection_manager.v3.LocalReplyConfig.body_format",
      "envoy.extensions.filters.network.http_connection_manager.v3.ResponseMapper.filter",
      "envoy.extensions.filters.network.http_connection_manager.v3.ResponseMapper.status_code",
      "envoy.extensions.filters.network.http_connection_manager.v3.ResponseMapper.body",
      "envoy.extensions.filters.network.http_connection_manager.v3.ResponseMapper."
      "body_format_override",
      "envoy.extensions.filters.network.http_connection_manager.v3.ResponseMapper.headers_to_add",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "scheme_header_transformation",
      "envoy.config.core.v3.SchemeHeaderTransformation.scheme_to_overwrite",
      "envoy.config.core.v3.SchemeHeaderTransformation.match_upstream",
      "envoy.config.accesslog.v3.AccessLog.name",
      "envoy.config.accesslog.v3.AccessLog.filter",
      "envoy.config.accesslog.v3.AccessLog.typed_config",
      "envoy.config.accesslog.v3.AccessLogFilter.status_code_filter",
      "envoy.config.accesslog.v3.AccessLogFilter.duration_filter",
      "envoy.config.accesslog.v3.AccessLogFilter.not_health_check_filter",
      "envoy.config.accesslog.v3.AccessLogFilter.runtime_filter",
      "envoy.config.accesslog.v3.AccessLogFilter.and_filter",
      "envoy.config.accesslog.v3.AccessLogFilter.or_filter",
      "envoy.config.accesslog.v3.AccessLogFilter.header_filter",
      "envoy.config.accesslog.v3.AccessLogFilter.response_flag_filter",
      "envoy.config.accesslog.v3.ComparisonFilter.op",
      "envoy.config.accesslog.v3.ComparisonFilter.value",
      "envoy.config.core.v3.RuntimeUInt32.default_value",
      "envoy.config.core.v3.RuntimeUInt32.runtime_key",
      "envoy.config.accesslog.v3.StatusCodeFilter.comparison",
      "envoy.config.accesslog.v3.DurationFilter.comparison",
      "envoy.config.accesslog.v3.RuntimeFilter.runtime_key",
      "envoy.config.accesslog.v3.RuntimeFilter.percent_sampled",
      "envoy.config.accesslog.v3.RuntimeFilter.use_independent_randomness",
      "envoy.type.v3.Percent.value",
      "envoy.type.v3.FractionalPercent.numerator",
      "envoy.type.v3.FractionalPercent.denominator",
      "envoy.config.accesslog.v3.AndFilter.filters",
      "envoy.config.accesslog.v3.OrFilter.filters",
      "envoy.config.accesslog.v3.HeaderFilter.header",
      "envoy.config.accesslog.v3.ResponseFlagFilter.flags",
      "envoy.extensions.access_loggers.file.v3.FileAccessLog.path",
      "envoy.extensions.access_loggers.file.v3.FileAccessLog.format",
      "envoy.extensions.access_loggers.file.v3.FileAccessLog.json_format",
      "envoy.extensions.access_loggers.file.v3.FileAccessLog.typed_json_format",
      "envoy.extensions.access_loggers.file.v3.FileAccessLog.log_format",
      "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog.log_format",
      "envoy.extensions.access_loggers.stream.v3.StderrAccessLog.log_format",
      "envoy.config.core.v3.SubstitutionFormatString.text_format",
      "envoy.config.core.v3.SubstitutionFormatString.json_format",
      "envoy.config.core.v3.SubstitutionFormatString.text_format_source",
      "envoy.config.core.v3.SubstitutionFormatString.omit_empty_values",
      "envoy.config.core.v3.SubstitutionFormatString.content_type",
      "envoy.config.core.v3.SubstitutionFormatString.json_format_options",
      "envoy.config.core.v3.JsonFormatOptions.sort_properties",
      "envoy.extensions.filters.network.http_connection_manager.v3.Rds.config_source",
      "envoy.extensions.filters.network.http_connection_manager.v3.Rds.route_config_name",
      "envoy.config.cluster.v3.Cluster.eds_cluster_config",
      "envoy.config.cluster.v3.Cluster.EdsClusterConfig.eds_config",
      "envoy.config.cluster.v3.Cluster.EdsClusterConfig.service_name",
      "envoy.config.bootstrap.v3.Bootstrap.StaticResources.listeners",
      "envoy.config.bootstrap.v3.Bootstrap.StaticResources.clusters",
      "envoy.config.bootstrap.v3.Admin.address",
      "envoy.config.bootstrap.v3.Admin.access_log_path",
      "envoy.config.bootstrap.v3.Admin.access_log",
      // core
      "envoy.config.core.v3.Node.id",
      "envoy.config.core.v3.Node.cluster",
      "envoy.config.core.v3.Node.metadata",
      "envoy.config.core.v3.Node.locality",
      "envoy.config.core.v3.Node.user_agent_name",
      "envoy.config.core.v3.Node.user_agent_version",
      "envoy.config.core.v3.Locality.region",
      "envoy.config.core.v3.Locality.zone",
      "envoy.config.core.v3.Locality.sub_zone",
      "envoy.config.core.v3.Metadata.filter_metadata",
      "envoy.config.core.v3.Address.socket_address",
      "envoy.config.core.v3.SocketAddress.protocol",
      "envoy.config.core.v3.SocketAddress.address",
      "envoy.config.core.v3.SocketAddress.port_value",
      "envoy.config.core.v3.SocketAddress.ipv4_compat",
      "envoy.config.core.v3.SocketOption.description",
      "envoy.config.core.v3.SocketOption.level",
      "envoy.config.core.v3.SocketOption.name",
      "envoy.config.core.v3.SocketOption.int_value",
      "envoy.config.core.v3.SocketOption.buf_value",
      "envoy.config.core.v3.SocketOption.state",
      "envoy.config.core.v3.BindConfig.source_address",
      "envoy.config.core.v3.BindConfig.freebind",
      "envoy.config.core.v3.BindConfig.socket_options",
      "envoy.config.core.v3.HeaderValue.key",
      "envoy.config.core.v3.HeaderValue.value",
      "envoy.config.core.v3.HeaderValueOption.header",
      "envoy.config.core.v3.HeaderValueOption.append",
      "envoy.config.core.v3.HeaderValueOption.append_action",
      "envoy.config.core.v3.HeaderValueOption.keep_empty_value",
      "envoy.config.core.v3.DataSource.filename",
      "envoy.config.core.v3.DataSource.inline_bytes",
      "envoy.config.core.v3.DataSource.inline_string",
      "envoy.config.core.v3.DataSource.environment_variable",
      "envoy.config.core.v3.HttpProtocolOptions.idle_timeout",
      "envoy.config.core.v3.HttpProtocolOptions.max_headers_count",
      "envoy.config.core.v3.HttpProtocolOptions.max_requests_per_connection",
      "envoy.config.core.v3.HttpProtocolOptions.max_connection_duration",
      "envoy.config.core.v3.HttpProtocolOptions.max_stream_duration",
      "envoy.config.core.v3.HttpProtocolOptions.headers_with_underscores_action",
      "envoy.config.core.v3.Http1ProtocolOptions.accept_http_10",
      // listener
      "envoy.config.listener.v3.Listener.name",
      "envoy.config.listener.v3.Listener.address",
      "envoy.config.listener.v3.Listener.filter_chains",
      "envoy.config.listener.v3.Listener.per_connection_buffer_limit_bytes",
      "envoy.config.listener.v3.Listener.metadata",
      "envoy.config.listener.v3.Listener.stat_prefix",
      "envoy.config.listener.v3.Listener.enable_reuse_port",
      "envoy.config.listener.v3.Listener.traffic_direction",
      "envoy.config.listener.v3.Listener.socket_options",
      "envoy.config.listener.v3.Listener.drain_type",
      "envoy.config.listener.v3.Listener.listener_filters",
      "envoy.config.listener.v3.Listener.listener_filters_timeout",
      "envoy.config.listener.v3.Listener.continue_on_listener_filters_timeout",
      "envoy.config.listener.v3.Listener.default_filter_chain",
      "envoy.config.listener.v3.Listener.use_original_dst",
      "envoy.config.listener.v3.Listener.bind_to_port",
      "envoy.config.cluster.v3.Cluster.cleanup_interval",
      "envoy.config.cluster.v3.Cluster.original_dst_lb_config",
      "envoy.config.cluster.v3.Cluster.OriginalDstLbConfig.use_http_header",
      "envoy.config.cluster.v3.Cluster.OriginalDstLbConfig.http_header_name",
      "envoy.config.cluster.v3.Cluster.OriginalDstLbConfig.upstream_port_override",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.stat_prefix",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.cluster",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.weighted_clusters",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.WeightedCluster.clusters",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.WeightedCluster.ClusterWeight.name",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.WeightedCluster.ClusterWeight."
      "weight",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.idle_timeout",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.access_log",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.max_connect_attempts",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.max_downstream_connection_duration",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.flush_access_log_on_connected",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.access_log_options",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.TcpAccessLogOptions."
      "flush_access_log_on_connected",
      "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.TcpAccessLogOptions."
      "access_log_flush_interval",
      "envoy.config.listener.v3.ListenerFilter.name",
      "envoy.config.listener.v3.ListenerFilter.typed_config",
      "envoy.config.listener.v3.FilterChain.filters",
      "envoy.config.listener.v3.FilterChain.name",
      "envoy.config.listener.v3.FilterChain.filter_chain_match",
      "envoy.config.listener.v3.FilterChain.transport_socket",
      "envoy.config.listener.v3.FilterChain.transport_socket_connect_timeout",
      "envoy.config.listener.v3.FilterChain.metadata",
      "envoy.config.listener.v3.FilterChainMatch.destination_port",
      "envoy.config.listener.v3.FilterChainMatch.prefix_ranges",
      "envoy.config.listener.v3.FilterChainMatch.server_names",
      "envoy.config.listener.v3.FilterChainMatch.transport_protocol",
      "envoy.config.listener.v3.FilterChainMatch.application_protocols",
      "envoy.config.listener.v3.FilterChainMatch.direct_source_prefix_ranges",
      "envoy.config.listener.v3.FilterChainMatch.source_type",
      "envoy.config.listener.v3.FilterChainMatch.source_prefix_ranges",
      "envoy.config.listener.v3.FilterChainMatch.source_ports",
      "envoy.config.core.v3.CidrRange.address_prefix",
      "envoy.config.core.v3.CidrRange.prefix_len",
      "envoy.config.core.v3.TransportSocket.name",
      "envoy.config.core.v3.TransportSocket.typed_config",
      // TLS (envoy.transport_sockets.tls)
      "envoy.config.bootstrap.v3.Bootstrap.StaticResources.secrets",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext.common_tls_context",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext.require_client_certificate",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext.require_sni",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext.session_ticket_keys",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext."
      "session_ticket_keys_sds_secret_config",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext."
      "disable_stateless_session_resumption",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext."
      "disable_stateful_session_resumption",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext.session_timeout",
      "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext.ocsp_staple_policy",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.tls_params",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.tls_certificates",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.tls_certificate_sds_secret_"
      "configs",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.validation_context",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext."
      "validation_context_sds_secret_config",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.combined_validation_context",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext."
      "CombinedCertificateValidationContext.default_validation_context",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext."
      "CombinedCertificateValidationContext.validation_context_sds_secret_config",
      "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.alpn_protocols",
      "envoy.extensions.transport_sockets.tls.v3.TlsParameters.tls_minimum_protocol_version",
      "envoy.extensions.transport_sockets.tls.v3.TlsParameters.tls_maximum_protocol_version",
      "envoy.extensions.transport_sockets.tls.v3.TlsParameters.cipher_suites",
      "envoy.extensions.transport_sockets.tls.v3.TlsParameters.ecdh_curves",
      "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.certificate_chain",
      "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.private_key",
      "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.password",
      "envoy.extensions.transport_sockets.tls.v3.TlsSessionTicketKeys.keys",
      "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext.trusted_ca",
      "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext.crl",
      "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext."
      "allow_expired_certificate",
      "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext."
      "trust_chain_verification",
      "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext."
      "match_typed_subject_alt_names",
      "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext."
      "match_subject_alt_names",
      "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext.max_verify_depth",
      "envoy.extensions.transport_sockets.tls.v3.SubjectAltNameMatcher.san_type",
      "envoy.extensions.transport_sockets.tls.v3.SubjectAltNameMatcher.matcher",
      "envoy.extensions.transport_sockets.tls.v3.SdsSecretConfig.name",
      "envoy.extensions.transport_sockets.tls.v3.SdsSecretConfig.sds_config",
      "envoy.extensions.transport_sockets.tls.v3.GenericSecret.secret",
      "envoy.extensions.transport_sockets.tls.v3.Secret.name",
      "envoy.extensions.transport_sockets.tls.v3.Secret.tls_certificate",
      "envoy.extensions.transport_sockets.tls.v3.Secret.session_ticket_keys",
      "envoy.extensions.transport_sockets.tls.v3.Secret.validation_context",
      "envoy.extensions.transport_sockets.tls.v3.Secret.generic_secret",
      "envoy.config.listener.v3.Filter.name",
      "envoy.config.listener.v3.Filter.typed_config",
      // http connection manager
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.codec_"
      "type",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.stat_"
      "prefix",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.route_"
      "config",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.http_"
      "filters",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "common_http_protocol_options",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "http_protocol_options",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.server_"
      "name",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "server_header_transformation",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "max_request_headers_kb",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "stream_idle_timeout",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "request_timeout",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "request_headers_timeout",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "use_remote_address",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "skip_xff_append",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "generate_request_id",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "preserve_external_request_id",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "forward_client_cert_details",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "set_current_client_cert_details",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "SetCurrentClientCertDetails.subject",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "SetCurrentClientCertDetails.cert",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "SetCurrentClientCertDetails.chain",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "SetCurrentClientCertDetails.dns",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "SetCurrentClientCertDetails.uri",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter.name",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter.typed_config",
      "envoy.extensions.filters.http.router.v3.Router.dynamic_stats",
      "envoy.extensions.filters.http.router.v3.Router.suppress_envoy_headers",
      "envoy.extensions.filters.http.router.v3.Router.start_child_span",
      // routes
      "envoy.config.route.v3.RouteConfiguration.name",
      "envoy.config.route.v3.RouteConfiguration.virtual_hosts",
      "envoy.config.route.v3.RouteConfiguration.request_headers_to_add",
      "envoy.config.route.v3.RouteConfiguration.request_headers_to_remove",
      "envoy.config.route.v3.RouteConfiguration.response_headers_to_add",
      "envoy.config.route.v3.RouteConfiguration.response_headers_to_remove",
      "envoy.config.route.v3.RouteConfiguration.validate_clusters",
      "envoy.config.route.v3.VirtualHost.name",
      "envoy.config.route.v3.VirtualHost.domains",
      "envoy.config.route.v3.VirtualHost.routes",
      "envoy.config.route.v3.VirtualHost.request_headers_to_add",
      "envoy.config.route.v3.VirtualHost.request_headers_to_remove",
      "envoy.config.route.v3.VirtualHost.response_headers_to_add",
      "envoy.config.route.v3.VirtualHost.response_headers_to_remove",
      "envoy.config.route.v3.VirtualHost.retry_policy",
      "envoy.config.route.v3.VirtualHost.include_request_attempt_count",
      "envoy.config.route.v3.VirtualHost.include_attempt_count_in_response",
      "envoy.config.route.v3.VirtualHost.per_request_buffer_limit_bytes",
      "envoy.config.route.v3.Route.per_request_buffer_limit_bytes",
      "envoy.config.route.v3.RetryPolicy.retry_on",
      "envoy.config.route.v3.RetryPolicy.num_retries",
      "envoy.config.route.v3.RetryPolicy.per_try_timeout",
      "envoy.config.route.v3.RetryPolicy.per_try_idle_timeout",
      "envoy.config.route.v3.RetryPolicy.retry_host_predicate",
      "envoy.config.route.v3.RetryPolicy.RetryHostPredicate.name",
      "envoy.config.route.v3.RetryPolicy.RetryHostPredicate.typed_config",
      "envoy.config.route.v3.RetryPolicy.host_selection_retry_max_attempts",
      "envoy.config.route.v3.RetryPolicy.retriable_status_codes",
      "envoy.config.route.v3.RetryPolicy.retry_back_off",
      "envoy.config.route.v3.RetryPolicy.RetryBackOff.base_interval",
      "envoy.config.route.v3.RetryPolicy.RetryBackOff.max_interval",
      "envoy.config.route.v3.RetryPolicy.retriable_headers",
      "envoy.config.route.v3.RetryPolicy.retriable_request_headers",
      "envoy.config.route.v3.Route.name",
      "envoy.config.route.v3.Route.match",
      "envoy.config.route.v3.Route.route",
      "envoy.config.route.v3.Route.redirect",
      "envoy.config.route.v3.Route.direct_response",
      "envoy.config.route.v3.Route.metadata",
      "envoy.config.route.v3.Route.request_headers_to_add",
      "envoy.config.route.v3.Route.request_headers_to_remove",
      "envoy.config.route.v3.Route.response_headers_to_add",
      "envoy.config.route.v3.Route.response_headers_to_remove",
      "envoy.config.route.v3.RouteMatch.prefix",
      "envoy.config.route.v3.RouteMatch.path",
      "envoy.config.route.v3.RouteMatch.safe_regex",
      "envoy.config.route.v3.RouteMatch.path_separated_prefix",
      "envoy.config.route.v3.RouteMatch.case_sensitive",
      "envoy.config.route.v3.RouteMatch.headers",
      "envoy.config.route.v3.RouteMatch.query_parameters",
      "envoy.config.route.v3.RouteMatch.grpc",
      "envoy.config.route.v3.RouteMatch.tls_context",
      "envoy.config.route.v3.RouteMatch.TlsContextMatchOptions.presented",
      "envoy.config.route.v3.RouteMatch.TlsContextMatchOptions.validated",
      "envoy.config.route.v3.HeaderMatcher.name",
      "envoy.config.route.v3.HeaderMatcher.exact_match",
      "envoy.config.route.v3.HeaderMatcher.safe_regex_match",
      "envoy.config.route.v3.HeaderMatcher.range_match",
      "envoy.config.route.v3.HeaderMatcher.present_match",
      "envoy.config.route.v3.HeaderMatcher.prefix_match",
      "envoy.config.route.v3.HeaderMatcher.suffix_match",
      "envoy.config.route.v3.HeaderMatcher.contains_match",
      "envoy.config.route.v3.HeaderMatcher.string_match",
      "envoy.config.route.v3.HeaderMatcher.invert_match",
      "envoy.config.route.v3.HeaderMatcher.treat_missing_header_as_empty",
      "envoy.config.route.v3.QueryParameterMatcher.name",
      "envoy.config.route.v3.QueryParameterMatcher.string_match",
      "envoy.config.route.v3.QueryParameterMatcher.present_match",
      "envoy.config.route.v3.RouteAction.cluster",
      "envoy.config.route.v3.RouteAction.weighted_clusters",
      "envoy.config.route.v3.RouteAction.prefix_rewrite",
      "envoy.config.route.v3.RouteAction.host_rewrite_literal",
      "envoy.config.route.v3.RouteAction.auto_host_rewrite",
      "envoy.config.route.v3.RouteAction.timeout",
      "envoy.config.route.v3.RouteAction.retry_policy",
      "envoy.config.route.v3.RouteAction.hash_policy",
      "envoy.config.route.v3.RouteAction.HashPolicy.header",
      "envoy.config.route.v3.RouteAction.HashPolicy.cookie",
      "envoy.config.route.v3.RouteAction.HashPolicy.connection_properties",
      "envoy.config.route.v3.RouteAction.HashPolicy.query_parameter",
      "envoy.config.route.v3.RouteAction.HashPolicy.terminal",
      "envoy.config.route.v3.RouteAction.HashPolicy.Header.header_name",
      "envoy.config.route.v3.RouteAction.HashPolicy.Cookie.name",
      "envoy.config.route.v3.RouteAction.HashPolicy.Cookie.ttl",
      "envoy.config.route.v3.RouteAction.HashPolicy.Cookie.path",
      "envoy.config.route.v3.RouteAction.HashPolicy.ConnectionProperties.source_ip",
      "envoy.config.route.v3.RouteAction.HashPolicy.QueryParameter.name",
      "envoy.config.cluster.v3.Cluster.ring_hash_lb_config",
      "envoy.config.cluster.v3.Cluster.RingHashLbConfig.minimum_ring_size",
      "envoy.config.cluster.v3.Cluster.RingHashLbConfig.maximum_ring_size",
      "envoy.config.cluster.v3.Cluster.RingHashLbConfig.hash_function",
      "envoy.config.cluster.v3.Cluster.maglev_lb_config",
      "envoy.config.cluster.v3.Cluster.MaglevLbConfig.table_size",
      "envoy.config.route.v3.WeightedCluster.clusters",
      "envoy.config.route.v3.WeightedCluster.total_weight",
      "envoy.config.route.v3.WeightedCluster.ClusterWeight.name",
      "envoy.config.route.v3.WeightedCluster.ClusterWeight.weight",
      "envoy.config.route.v3.WeightedCluster.ClusterWeight.request_headers_to_add",
      "envoy.config.route.v3.WeightedCluster.ClusterWeight.request_headers_to_remove",
      "envoy.config.route.v3.WeightedCluster.ClusterWeight.response_headers_to_add",
      "envoy.config.route.v3.WeightedCluster.ClusterWeight.response_headers_to_remove",
      "envoy.config.route.v3.RedirectAction.https_redirect",
      "envoy.config.route.v3.RedirectAction.scheme_redirect",
      "envoy.config.route.v3.RedirectAction.host_redirect",
      "envoy.config.route.v3.RedirectAction.port_redirect",
      "envoy.config.route.v3.RedirectAction.path_redirect",
      "envoy.config.route.v3.RedirectAction.prefix_rewrite",
      "envoy.config.route.v3.RedirectAction.response_code",
      "envoy.config.route.v3.RedirectAction.strip_query",
      "envoy.config.route.v3.DirectResponseAction.status",
      "envoy.config.route.v3.DirectResponseAction.body",
      "envoy.type.matcher.v3.StringMatcher.exact",
      "envoy.type.matcher.v3.StringMatcher.prefix",
      "envoy.type.matcher.v3.StringMatcher.suffix",
      "envoy.type.matcher.v3.StringMatcher.safe_regex",
      "envoy.type.matcher.v3.StringMatcher.contains",
      "envoy.type.matcher.v3.StringMatcher.ignore_case",
      "envoy.type.matcher.v3.RegexMatcher.google_re2",
      "envoy.type.matcher.v3.RegexMatcher.regex",
      "envoy.type.matcher.v3.RegexMatcher.GoogleRE2.max_program_size",
      "envoy.type.v3.Int64Range.start",
      "envoy.type.v3.Int64Range.end",
      // clusters
      "envoy.config.cluster.v3.Cluster.name",
      "envoy.config.cluster.v3.Cluster.alt_stat_name",
      "envoy.config.cluster.v3.Cluster.type",
      "envoy.config.cluster.v3.Cluster.connect_timeout",
      "envoy.config.cluster.v3.Cluster.per_connection_buffer_limit_bytes",
      "envoy.config.cluster.v3.Cluster.upstream_bind_config",
      "envoy.config.cluster.v3.Cluster.lb_policy",
      "envoy.config.cluster.v3.Cluster.load_assignment",
      "envoy.config.cluster.v3.Cluster.circuit_breakers",
      "envoy.config.cluster.v3.Cluster.typed_extension_protocol_options",
      "envoy.config.cluster.v3.Cluster.max_requests_per_connection",
      "envoy.config.cluster.v3.Cluster.common_http_protocol_options",
      "envoy.config.cluster.v3.Cluster.http_protocol_options",
      "envoy.config.cluster.v3.Cluster.dns_lookup_family",
      "envoy.config.cluster.v3.Cluster.dns_refresh_rate",
      "envoy.config.cluster.v3.Cluster.dns_failure_refresh_rate",
      "envoy.config.cluster.v3.Cluster.RefreshRate.base_interval",
      "envoy.config.cluster.v3.Cluster.RefreshRate.max_interval",
      "envoy.config.cluster.v3.Cluster.respect_dns_ttl",
      "envoy.config.cluster.v3.Cluster.dns_resolvers",
      "envoy.config.cluster.v3.Cluster.use_tcp_for_dns_lookups",
      "envoy.config.cluster.v3.Cluster.dns_resolution_config",
      "envoy.config.cluster.v3.Cluster.typed_dns_resolver_config",
      "envoy.config.bootstrap.v3.Bootstrap.typed_dns_resolver_config",
      "envoy.config.core.v3.TypedExtensionConfig.name",
      "envoy.config.core.v3.TypedExtensionConfig.typed_config",
      "envoy.config.core.v3.DnsResolutionConfig.resolvers",
      "envoy.config.core.v3.DnsResolutionConfig.dns_resolver_options",
      "envoy.config.core.v3.DnsResolverOptions.use_tcp_for_dns_lookups",
      "envoy.config.core.v3.DnsResolverOptions.no_default_search_domain",
      "envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig.resolvers",
      "envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig."
      "dns_resolver_options",
      "envoy.config.cluster.v3.Cluster.metadata",
      "envoy.config.cluster.v3.Cluster.transport_socket",
      "envoy.config.cluster.v3.Cluster.transport_socket_matches",
      "envoy.config.cluster.v3.Cluster.TransportSocketMatch.name",
      "envoy.config.cluster.v3.Cluster.TransportSocketMatch.match",
      "envoy.config.cluster.v3.Cluster.TransportSocketMatch.transport_socket",
      "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext.common_tls_context",
      "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext.sni",
      "envoy.config.cluster.v3.CircuitBreakers.thresholds",
      "envoy.config.cluster.v3.Cluster.health_checks",
      "envoy.config.cluster.v3.Cluster.outlier_detection",
      "envoy.config.cluster.v3.OutlierDetection.consecutive_5xx",
      "envoy.config.cluster.v3.OutlierDetection.interval",
      "envoy.config.cluster.v3.OutlierDetection.base_ejection_time",
      "envoy.config.cluster.v3.OutlierDetection.max_ejection_percent",
      "envoy.config.cluster.v3.OutlierDetection.enforcing_consecutive_5xx",
      "envoy.config.cluster.v3.OutlierDetection.enforcing_success_rate",
      "envoy.config.cluster.v3.OutlierDetection.success_rate_minimum_hosts",
      "envoy.config.cluster.v3.OutlierDetection.success_rate_request_volume",
      "envoy.config.cluster.v3.OutlierDetection.success_rate_stdev_factor",
      "envoy.config.cluster.v3.OutlierDetection.consecutive_gateway_failure",
      "envoy.config.cluster.v3.OutlierDetection.enforcing_consecutive_gateway_failure",
      "envoy.config.cluster.v3.OutlierDetection.split_external_local_origin_errors",
      "envoy.config.cluster.v3.OutlierDetection.consecutive_local_origin_failure",
      "envoy.config.cluster.v3.OutlierDetection.enforcing_consecutive_local_origin_failure",
      "envoy.config.cluster.v3.OutlierDetection.enforcing_local_origin_success_rate",
      "envoy.config.cluster.v3.OutlierDetection.failure_percentage_threshold",
      "envoy.config.cluster.v3.OutlierDetection.enforcing_failure_percentage",
      "envoy.config.cluster.v3.OutlierDetection.enforcing_failure_percentage_local_origin",
      "envoy.config.cluster.v3.OutlierDetection.failure_percentage_minimum_hosts",
      "envoy.config.cluster.v3.OutlierDetection.failure_percentage_request_volume",
      "envoy.config.cluster.v3.OutlierDetection.max_ejection_time",
      "envoy.config.cluster.v3.OutlierDetection.max_ejection_time_jitter",
      "envoy.config.cluster.v3.OutlierDetection.successful_active_health_check_uneject_host",
      "envoy.config.cluster.v3.OutlierDetection.always_eject_one_host",
      "envoy.config.cluster.v3.Cluster.common_lb_config",
      "envoy.config.cluster.v3.Cluster.CommonLbConfig.healthy_panic_threshold",
      "envoy.config.cluster.v3.Cluster.CommonLbConfig.locality_weighted_lb_config",
      "envoy.config.cluster.v3.Cluster.round_robin_lb_config",
      "envoy.config.cluster.v3.Cluster.least_request_lb_config",
      "envoy.config.cluster.v3.Cluster.RoundRobinLbConfig.slow_start_config",
      "envoy.config.cluster.v3.Cluster.LeastRequestLbConfig.slow_start_config",
      "envoy.config.cluster.v3.Cluster.LeastRequestLbConfig.choice_count",
      "envoy.config.cluster.v3.Cluster.LeastRequestLbConfig.active_request_bias",
      "envoy.config.cluster.v3.Cluster.SlowStartConfig.slow_start_window",
      "envoy.config.cluster.v3.Cluster.SlowStartConfig.aggression",
      "envoy.config.cluster.v3.Cluster.SlowStartConfig.min_weight_percent",
      "envoy.config.core.v3.RuntimeDouble.default_value",
      "envoy.config.core.v3.RuntimeDouble.runtime_key",
      "envoy.config.core.v3.HealthCheck.timeout",
      "envoy.config.core.v3.HealthCheck.interval",
      "envoy.config.core.v3.HealthCheck.initial_jitter",
      "envoy.config.core.v3.HealthCheck.interval_jitter",
      "envoy.config.core.v3.HealthCheck.interval_jitter_percent",
      "envoy.config.core.v3.HealthCheck.unhealthy_threshold",
      "envoy.config.core.v3.HealthCheck.healthy_threshold",
      "envoy.config.core.v3.HealthCheck.alt_port",
      "envoy.config.core.v3.HealthCheck.reuse_connection",
      "envoy.config.core.v3.HealthCheck.http_health_check",
      "envoy.config.core.v3.HealthCheck.tcp_health_check",
      "envoy.config.core.v3.HealthCheck.grpc_health_check",
      "envoy.config.core.v3.HealthCheck.custom_health_check",
      "envoy.config.core.v3.HealthCheck.no_traffic_interval",
      "envoy.config.core.v3.HealthCheck.no_traffic_healthy_interval",
      "envoy.config.core.v3.HealthCheck.unhealthy_interval",
      "envoy.config.core.v3.HealthCheck.unhealthy_edge_interval",
      "envoy.config.core.v3.HealthCheck.healthy_edge_interval",
      "envoy.config.core.v3.HealthCheck.always_log_health_check_failures",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.host",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.path",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.send",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.receive",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.request_headers_to_add",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.request_headers_to_remove",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.expected_statuses",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.retriable_statuses",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.codec_client_type",
      "envoy.config.core.v3.HealthCheck.HttpHealthCheck.method",
      "envoy.config.core.v3.HealthCheck.TcpHealthCheck.send",
      "envoy.config.core.v3.HealthCheck.TcpHealthCheck.receive",
      "envoy.config.core.v3.HealthCheck.Payload.text",
      "envoy.config.core.v3.HealthCheck.Payload.binary",
      "envoy.config.core.v3.HealthCheck.GrpcHealthCheck.service_name",
      "envoy.config.core.v3.HealthCheck.GrpcHealthCheck.authority",
      "envoy.config.core.v3.HealthCheck.CustomHealthCheck.name",
      "envoy.config.core.v3.HealthCheck.CustomHealthCheck.typed_config",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.priority",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.max_connections",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.max_pending_requests",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.max_requests",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.max_retries",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.retry_budget",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.RetryBudget.budget_percent",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.RetryBudget.min_retry_concurrency",
      "envoy.config.endpoint.v3.ClusterLoadAssignment.cluster_name",
      "envoy.config.endpoint.v3.ClusterLoadAssignment.endpoints",
      "envoy.config.endpoint.v3.LocalityLbEndpoints.locality",
      "envoy.config.endpoint.v3.LocalityLbEndpoints.lb_endpoints",
      "envoy.config.endpoint.v3.LocalityLbEndpoints.priority",
      "envoy.config.endpoint.v3.LocalityLbEndpoints.load_balancing_weight",
      "envoy.config.endpoint.v3.ClusterLoadAssignment.policy",
      "envoy.config.endpoint.v3.ClusterLoadAssignment.Policy.overprovisioning_factor",
      "envoy.config.endpoint.v3.ClusterLoadAssignment.Policy.weighted_priority_health",
      "envoy.config.endpoint.v3.LbEndpoint.endpoint",
      "envoy.config.endpoint.v3.LbEndpoint.health_status",
      "envoy.config.endpoint.v3.LbEndpoint.metadata",
      "envoy.config.endpoint.v3.LbEndpoint.load_balancing_weight",
      "envoy.config.endpoint.v3.Endpoint.address",
      "envoy.config.endpoint.v3.Endpoint.hostname",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.common_http_protocol_options",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.explicit_http_config",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.upstream_http_protocol_options",
      "envoy.config.core.v3.UpstreamHttpProtocolOptions.auto_sni",
      "envoy.config.core.v3.UpstreamHttpProtocolOptions.auto_san_validation",
      "envoy.config.core.v3.UpstreamHttpProtocolOptions.override_auto_sni_header",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig."
      "http_protocol_options",
      "envoy.config.cluster.v3.Cluster.http2_protocol_options",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig."
      "http2_protocol_options",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.auto_config",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.AutoHttpConfig."
      "http_protocol_options",
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.AutoHttpConfig."
      "http2_protocol_options",
  };
  return *s;
}

// Fields a control plane may send that rpx can ignore without changing where requests go.
const std::set<std::string>& Ignorable() {
  static const auto* s = new std::set<std::string>{
      "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector.initial_read_buffer_size",
      "envoy.config.cluster.v3.Cluster.ignore_health_on_host_removal",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.track_remaining",
      "envoy.config.cluster.v3.CircuitBreakers.Thresholds.max_connection_pools",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "add_user_agent",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "drain_timeout",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "delayed_close_timeout",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager."
      "xff_num_trusted_hops",
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.via",
      "envoy.config.core.v3.Node.client_features",
  };
  return *s;
}

// The name sets resolved to descriptors once, so checking a field is a pointer lookup.
using FieldSet = absl::flat_hash_set<const FieldDescriptor*>;
FieldSet Resolve(const std::set<std::string>& names) {
  FieldSet out;
  for (const auto& n : names) {
    const auto* f = google::protobuf::DescriptorPool::generated_pool()->FindFieldByName(n);
    if (f) out.insert(f);
  }
  return out;
}
const FieldSet& SupportedSet() {
  static const auto* s = new FieldSet(Resolve(Supported()));
  return *s;
}
const FieldSet& IgnorableSet() {
  static const auto* s = new FieldSet(Resolve(Ignorable()));
  return *s;
}

void Check(const Message& msg, const std::string& prefix, const FieldPath& path,
           std::vector<std::string>* errors, uint64_t* ignored) {
  const auto* d = msg.GetDescriptor();
  if (d->file()->package() == "google.protobuf") return;
  if (d->full_name() == "google.protobuf.Any") return;
  const auto* r = msg.GetReflection();
  // Fields outside rpx's proto subset arrive as unknown fields.
  if (ignored) *ignored += r->GetUnknownFields(msg).field_count();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const auto* f : fields) {
    FieldPath fpath(path, f->name());
    if (ignored && IgnorableSet().contains(f)) {
      ++*ignored;
      continue;
    }
    if (!SupportedSet().contains(f)) {
      errors->push_back(absl::StrCat(prefix, fpath.str(), ": field '", f->name(), "' of ",
                                     d->full_name(), " is not supported by rpx"));
      continue;
    }
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    auto check_one = [&](const Message& sub, const FieldPath& sub_path) {
      if (sub.GetDescriptor()->full_name() == "google.protobuf.Any") {
        const auto& any = static_cast<const google::protobuf::Any&>(sub);
        std::string type = any.type_url().substr(any.type_url().rfind('/') + 1);
        const auto* td =
            google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type);
        if (!td) {
          errors->push_back(
              absl::StrCat(prefix, sub_path.str(), ": unsupported type '", any.type_url(), "'"));
          return;
        }
        std::unique_ptr<Message> inner(
            google::protobuf::MessageFactory::generated_factory()->GetPrototype(td)->New());
        if (!any.UnpackTo(inner.get())) {
          errors->push_back(
              absl::StrCat(prefix, sub_path.str(), ": cannot decode '", any.type_url(), "'"));
          return;
        }
        Check(*inner, prefix, sub_path, errors, ignored);
        return;
      }
      Check(sub, prefix, sub_path, errors, ignored);
    };
    if (f->is_map()) {
      // Map entries: check the values (keys are strings).
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        const Message& entry = r->GetRepeatedMessage(msg, f, i);
        const auto* ed = entry.GetDescriptor();
        const auto* er = entry.GetReflection();
        std::string key = er->GetString(entry, ed->FindFieldByName("key"));
        const auto* vf = ed->FindFieldByName("value");
        if (vf->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          std::string keyed = absl::StrCat(f->name(), "[\"", key, "\"]");
          check_one(er->GetMessage(entry, vf), FieldPath(path, keyed));
        }
      }
    } else if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        check_one(r->GetRepeatedMessage(msg, f, i), FieldPath(path, f->name(), i));
      }
    } else {
      check_one(r->GetMessage(msg, f), fpath);
    }
  }
}

}  // namespace

void CheckSupportedFields(const google::protobuf::Message& msg, const std::string& prefix,
                          const std::string& path, std::vector<std::string>* errors) {
  Check(msg, prefix, FieldPath(path), errors, nullptr);
}

void CheckDynamicFields(const google::protobuf::Message& msg, const std::string& prefix,
                        const std::string& path, std::vector<std::string>* errors,
                        uint64_t* ignored) {
  Check(msg, prefix, FieldPath(path), errors, ignored);
}

}  // namespace rpx
