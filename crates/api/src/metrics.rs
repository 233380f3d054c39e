//! `GET /metrics`: Prometheus metrics in the OpenMetrics text format, encoded by the
//! `prometheus-client` crate (a Halite extension; salt-api has none).
//!
//! One exposition holds:
//! * the master's metrics: each scrape reads one snapshot from the master's metrics socket
//!   (`<sock_dir>/master_metrics.ipc`, see `halite-metrics`) and encodes it through a
//!   [`Collector`]; `halite_master_up` is 1 when that worked and 0 when the socket is
//!   absent or unreadable (a stock salt-master, a master that is down, an API that does
//!   not run as the master's user: the socket is `0600`), and the API's own metrics are
//!   served either way;
//! * the API's own: `halite_api_http_requests_total{method, handler, code}`,
//!   `halite_api_http_request_duration_seconds{handler}` (until the response head: an
//!   event stream's duration is not its lifetime), and `halite_api_event_streams` (open
//!   `/events` and `/ws` clients).
//!
//! `handler` is the route's name (`login`, `minions`, `hook`, `static`, ..., `other` for
//! anything else), never the raw path, and `method` is one of five values, so clients
//! cannot grow the number of series.
//!
//! Access: a session token, as `/stats` (401 without one), unless the Halite option
//! `rest_cherrypy: metrics_disable_auth: true` (for scrapers).

use crate::app::Api;
use crate::config::ApiConfig;
use crate::render::{negotiate, Format};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use halite_metrics::{Kind, SampleValue, Snapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The content type of the answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bounds of the HTTP request-duration buckets, seconds (up to `rest_timeout`'s default).
const DURATION_BUCKETS: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// Labels of a counted request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    handler: &'static str,
    code: u16,
}

/// Labels of a timed request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandlerLabels {
    handler: &'static str,
}

/// A histogram with [`DURATION_BUCKETS`].
fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The API's own metrics, and where the master's are read.
#[derive(Debug)]
pub struct ApiMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<HandlerLabels, Histogram, fn() -> Histogram>,
    socket: PathBuf,
}

impl ApiMetrics {
    /// Metrics of an API whose master has `sock_dir`.
    pub fn new(sock_dir: &Path) -> ApiMetrics {
        let requests = Family::<RequestLabels, Counter>::default();
        let durations = Family::<HandlerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        let mut registry = Registry::default();
        registry.register(
            "halite_api_http_requests",
            // The registry ends help texts with a full stop.
            "HTTP requests answered, by method, handler and status code",
            requests.clone(),
        );
        registry.register_with_unit(
            "halite_api_http_request_duration",
            "Time until the response head, by handler",
            Unit::Seconds,
            durations.clone(),
        );
        ApiMetrics {
            registry,
            requests,
            durations,
            socket: halite_metrics::socket_path(sock_dir),
        }
    }

    /// Counts one answered request.
    pub fn record(&self, method: &Method, handler: &'static str, code: StatusCode, took: Duration) {
        let labels = RequestLabels {
            method: method_label(method),
            handler,
            code: code.as_u16(),
        };
        self.requests.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&HandlerLabels { handler })
            .observe(took.as_secs_f64());
    }

    /// The whole exposition: the API's metrics, `halite_master_up`, the open event
    /// streams, the master's snapshot (when its socket answers), and `# EOF`.
    pub async fn render(&self, event_streams: usize) -> Result<String, std::fmt::Error> {
        let snapshot =
            match halite_metrics::fetch(&self.socket, halite_metrics::FETCH_TIMEOUT).await {
                Ok(s) => Some(s),
                Err(e @ halite_metrics::Error::Io { .. }) => {
                    tracing::debug!("No master metrics: {e}");
                    None
                }
                Err(e) => {
                    tracing::warn!("No master metrics: {e}");
                    None
                }
            };
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)?;
        let mut scrape = Registry::default();
        scrape.register_collector(Box::new(Scrape {
            snapshot,
            event_streams: i64::try_from(event_streams).unwrap_or(i64::MAX),
        }));
        encode_registry(&mut out, &scrape)?;
        encode_eof(&mut out)?;
        Ok(out)
    }
}

/// What one scrape adds: read per scrape, encoded as OpenMetrics families.
#[derive(Debug)]
struct Scrape {
    snapshot: Option<Snapshot>,
    event_streams: i64,
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let up = ConstGauge::new(i64::from(self.snapshot.is_some()));
        up.encode(encoder.encode_descriptor(
            halite_metrics::UP,
            "1 when the master's metrics socket answered this scrape, else 0.",
            None,
            up.metric_type(),
        )?)?;
        let streams = ConstGauge::new(self.event_streams);
        streams.encode(encoder.encode_descriptor(
            "halite_api_event_streams",
            "Event streams open now (/events and /ws clients).",
            None,
            streams.metric_type(),
        )?)?;
        let Some(snapshot) = &self.snapshot else {
            return Ok(());
        };
        for family in &snapshot.families {
            let unit = family.unit.map(|u| match u {
                halite_metrics::Unit::Seconds => Unit::Seconds,
                halite_metrics::Unit::Bytes => Unit::Bytes,
            });
            let kind = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let help = escape_help(&family.help);
            let mut metric = encoder.encode_descriptor(&family.name, &help, unit.as_ref(), kind)?;
            for sample in &family.samples {
                let labels: Vec<(&str, &str)> = sample
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let mut m = metric.encode_family(&labels)?;
                match &sample.value {
                    SampleValue::Counter(n) => m.encode_counter::<NoLabelSet, u64, u64>(n, None)?,
                    SampleValue::Gauge(v) => m.encode_gauge(v)?,
                    SampleValue::Histogram(h) => {
                        m.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?
                    }
                }
            }
        }
        Ok(())
    }
}

/// A help text as OpenMetrics writes it: `\`, `"` and line breaks escaped (a snapshot's
/// help has no control characters, `halite-metrics` checks; this keeps the exposition
/// valid whatever it holds).
fn escape_help(help: &str) -> String {
    let mut out = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// The `method` label: one of five values.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// The `handler` label of `path` (below `root_prefix`).
fn handler_label(cfg: &ApiConfig, path: &str) -> &'static str {
    let under = |base: &str| {
        base == "/"
            || path
                .strip_prefix(base)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match first {
        "" => "root",
        "login" => "login",
        "logout" => "logout",
        "minions" => "minions",
        "jobs" => "jobs",
        "keys" => "keys",
        "run" => "run",
        "token" => "token",
        "events" => "events",
        "ws" => "ws",
        "stats" => "stats",
        "metrics" => "metrics",
        _ if under(&format!("/{}", cfg.webhook_url)) => "hook",
        _ if under(&cfg.static_path) => "static",
        _ if under(&cfg.app_path) => "app",
        _ => "other",
    }
}

/// Middleware: counts and times every request (outermost, so it sees the final status).
pub(crate) async fn track(State(api): State<Arc<Api>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let handler = handler_label(api.config(), req.uri().path());
    let resp = next.run(req).await;
    api.metrics()
        .record(&method, handler, resp.status(), started.elapsed());
    resp
}

/// `GET /metrics`.
pub(crate) async fn scrape(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    if !api.config().metrics_disable_auth {
        if let Err(f) = api.session(&headers).await {
            let format = negotiate(&headers).unwrap_or(Format::Json);
            return f.into_response_as(format, api.config().debug);
        }
    }
    match api.metrics().render(api.event_streams()).await {
        Ok(text) => {
            let mut resp = text.into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            resp
        }
        Err(e) => {
            tracing::error!("Cannot encode the metrics: {e}");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_metrics::{MasterMetrics, MetricsServer, Sampled};
    use tokio_util::sync::CancellationToken;

    fn cfg() -> ApiConfig {
        let master = halite_config::MasterConfig::from_yaml_str(
            "rest_cherrypy:\n  port: 8000\n  disable_ssl: true\n  webhook_url: hooks\n",
            Path::new("/etc/salt/master"),
        )
        .unwrap();
        ApiConfig::from_master(&master).unwrap()
    }

    #[test]
    fn handlers_are_named_by_route_never_by_raw_path() {
        let c = cfg();
        for (path, want) in [
            ("/", "root"),
            ("/login", "login"),
            ("/minions/m1", "minions"),
            ("/jobs/20240101", "jobs"),
            ("/hooks/deploy/x", "hook"),
            ("/hooks", "hook"),
            ("/hooksx", "other"),
            ("/static/app.js", "static"),
            ("/app", "app"),
            ("/app/deep/link", "app"),
            ("/apps", "other"),
            ("/\u{1F600}/random", "other"),
            ("/metrics/", "metrics"),
        ] {
            assert_eq!(handler_label(&c, path), want, "{path}");
        }
        assert_eq!(method_label(&Method::PATCH), "other");
    }

    #[test]
    fn help_texts_are_escaped() {
        assert_eq!(escape_help(r#"a "b" \ c"#), r#"a \"b\" \\ c"#);
        assert_eq!(escape_help("x\ny"), "x\\ny");
    }

    #[tokio::test]
    async fn without_a_master_only_the_apis_metrics_and_up_zero_are_served() {
        let dir = tempfile::tempdir().unwrap();
        let m = ApiMetrics::new(dir.path());
        m.record(
            &Method::GET,
            "stats",
            StatusCode::UNAUTHORIZED,
            Duration::from_millis(3),
        );
        let text = m.render(2).await.unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("\nhalite_master_up 0\n"), "{text}");
        assert!(text.contains("\nhalite_api_event_streams 2\n"), "{text}");
        assert!(
            text.contains(
                "halite_api_http_requests_total{method=\"GET\",handler=\"stats\",code=\"401\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE halite_api_http_request_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("by method, handler and status code.\n"),
            "one full stop: {text}"
        );
        assert!(!text.contains("halite_master_publishes"), "{text}");
    }

    #[tokio::test]
    async fn the_masters_snapshot_is_encoded_with_openmetrics_names() {
        let dir = tempfile::tempdir().unwrap();
        let server = MetricsServer::bind(&halite_metrics::socket_path(dir.path())).unwrap();
        let master = MasterMetrics::new(["publish"]);
        master.count_publish();
        master.observe_request("publish", Duration::from_millis(2));
        let cancel = CancellationToken::new();
        let task =
            tokio::spawn(server.run(move || master.snapshot(&Sampled::default()), cancel.clone()));
        let text = ApiMetrics::new(dir.path()).render(0).await.unwrap();
        cancel.cancel();
        task.await.unwrap();
        for line in [
            "halite_master_up 1",
            "# TYPE halite_master_publishes counter",
            "halite_master_publishes_total 1",
            "halite_master_keys{state=\"accepted\"} 0",
            "# UNIT halite_master_request_duration_seconds seconds",
            "halite_master_request_duration_seconds_bucket{le=\"0.0025\",cmd=\"publish\"} 1",
            "halite_master_request_duration_seconds_count{cmd=\"publish\"} 1",
            "# TYPE halite_master_job_cache_queue_bytes gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
