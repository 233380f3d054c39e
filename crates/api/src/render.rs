//! What goes out: content negotiation (`cherrypy.lib.cptools.accept` over salt-api's
//! `ct_out_map`), the JSON and YAML serializers (`salt.utils.json.dumps`,
//! `salt.utils.yaml.safe_dump(default_flow_style=False)`, byte for byte through
//! `halite-output`), and error responses (§7 of the spec): CherryPy's XHTML error page for
//! an HTTP error, a serialized `{"status": 500, "return": ...}` for an unexpected one.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use halite_output::{render, OutputOptions, Outputter};
use halite_proto::value::{map, s};
use halite_proto::Value;

/// A response body format salt-api offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json`, the default.
    Json,
    /// `application/x-yaml`.
    Yaml,
}

impl Format {
    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Yaml => "application/x-yaml",
        }
    }

    /// `value` serialized as salt-api serializes it.
    pub fn serialize(self, value: &Value) -> Vec<u8> {
        match self {
            Format::Json => {
                let opts = OutputOptions {
                    indent: halite_output::OutputIndent::Null,
                    ..OutputOptions::default()
                };
                let mut text = render(Outputter::Json, value, &opts);
                // `render` ends what it prints with a newline; `json.dumps` does not.
                if text.ends_with('\n') {
                    text.pop();
                }
                text.into_bytes()
            }
            Format::Yaml => render(Outputter::Yaml, value, &OutputOptions::default()).into_bytes(),
        }
    }
}

/// The media types salt-api can answer with, in its order of preference.
const OFFERED: [(&str, Format); 2] = [
    ("application/json", Format::Json),
    ("application/x-yaml", Format::Yaml),
];

/// `cptools.accept(media)`: the best of `media` for the request's `Accept` header, or
/// `None` when none is acceptable. No header (or an empty one) takes the first. Ranges
/// are tried by descending `q` (ties in header order): `*/*` takes the first offered type,
/// `type/*` the first offered of that type, anything else itself if offered.
pub fn accept<'a>(header: Option<&str>, media: &[&'a str]) -> Option<&'a str> {
    let header = header.map(str::trim).filter(|h| !h.is_empty());
    let Some(header) = header else {
        return media.first().copied();
    };
    let mut ranges: Vec<(f64, usize, String)> = header
        .split(',')
        .enumerate()
        .filter_map(|(i, part)| {
            let mut pieces = part.split(';');
            let range = pieces.next()?.trim().to_ascii_lowercase();
            if range.is_empty() {
                return None;
            }
            let mut q = 1.0;
            for p in pieces {
                if let Some((k, v)) = p.split_once('=') {
                    if k.trim().eq_ignore_ascii_case("q") {
                        q = v.trim().parse::<f64>().ok().filter(|q| q.is_finite())?;
                    }
                }
            }
            Some((q, i, range))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (q, _, range) in &ranges {
        if *q <= 0.0 {
            continue;
        }
        if range == "*/*" {
            return media.first().copied();
        }
        if let Some(major) = range.strip_suffix("/*") {
            if let Some(m) = media.iter().find(|m| m.split('/').next() == Some(major)) {
                return Some(m);
            }
            continue;
        }
        if let Some(m) = media.iter().find(|m| **m == range) {
            return Some(m);
        }
    }
    None
}

/// The response format for these request headers, or the 406 salt-api gives.
pub fn negotiate(headers: &HeaderMap) -> Result<Format, Failure> {
    let header = headers
        .get(header::ACCEPT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let names: Vec<&str> = OFFERED.iter().map(|(n, _)| *n).collect();
    match accept(header.as_deref(), &names) {
        Some(best) => Ok(OFFERED
            .iter()
            .find(|(n, _)| *n == best)
            .map_or(Format::Json, |(_, f)| *f)),
        None => Err(Failure::http(
            StatusCode::NOT_ACCEPTABLE,
            format!(
                "Your client sent this Accept header: {}. But this resource only emits \
                 these media types: {}.",
                header.unwrap_or_default(),
                names.join(", ")
            ),
        )),
    }
}

/// `value` as a response of `status` in `format`.
pub fn respond(status: StatusCode, format: Format, value: &Value) -> Response {
    let mut resp = Response::new(Body::from(format.serialize(value)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    resp
}

/// Why a request failed, as salt-api reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A `cherrypy.HTTPError`: the status, and the message shown in the error page.
    Http {
        /// The status.
        status: StatusCode,
        /// The message (the page's `<p>`).
        message: String,
    },
    /// An unexpected error: 500 with `{"status": 500, "return": ...}` in the negotiated
    /// format; `detail` replaces "An unexpected error occurred" with `debug: True`.
    Unexpected {
        /// What went wrong (logged; shown only with `debug`).
        detail: String,
    },
}

impl Failure {
    /// An HTTP error with a message.
    pub fn http(status: StatusCode, message: impl Into<String>) -> Failure {
        Failure::Http {
            status,
            message: message.into(),
        }
    }

    /// 400 with `message` (Salt's `SaltInvocationError`).
    pub fn bad_request(message: impl Into<String>) -> Failure {
        Failure::http(StatusCode::BAD_REQUEST, message)
    }

    /// 401 with `message` (an authentication or authorization error).
    pub fn unauthorized(message: impl Into<String>) -> Failure {
        Failure::http(StatusCode::UNAUTHORIZED, message)
    }

    /// 401 with CherryPy's default text, what `salt_auth` gives without a session.
    pub fn no_session() -> Failure {
        Failure::unauthorized("No permission -- see authorization schemes")
    }

    /// 503 "Salt Master is not available.".
    pub fn master_down() -> Failure {
        Failure::http(
            StatusCode::SERVICE_UNAVAILABLE,
            "Salt Master is not available.",
        )
    }

    /// The status this failure answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Failure::Http { status, .. } => *status,
            Failure::Unexpected { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response: the error page, or the serialized 500 in `format` (`debug` shows the
    /// detail).
    pub fn into_response_as(self, format: Format, debug: bool) -> Response {
        match self {
            Failure::Http { status, message } => error_page(status, &message, None),
            Failure::Unexpected { detail } => {
                tracing::error!("Error while processing request: {detail}");
                let text = if debug {
                    detail
                } else {
                    "An unexpected error occurred".to_owned()
                };
                respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format,
                    &map([("status", Value::from(500)), ("return", s(text))]),
                )
            }
        }
    }
}

impl From<halite_client::Error> for Failure {
    /// How salt-api's `hypermedia_handler` maps the exceptions Salt's clients raise:
    /// authentication and authorization errors are 401, `SaltInvocationError` 400, a
    /// master that cannot be reached or does not answer 503, anything else 500.
    fn from(e: halite_client::Error) -> Failure {
        use halite_client::Error as E;
        if e.is_authentication() || e.is_authorization() {
            return Failure::unauthorized(e.to_string());
        }
        match &e {
            E::Master { name, message } if name == "SaltInvocationError" => {
                Failure::bad_request(message.clone())
            }
            E::Timeout => Failure::http(
                StatusCode::SERVICE_UNAVAILABLE,
                "Salt request timed out. The master is not responding.",
            ),
            E::NoMaster | E::Transport(_) | E::Bus(_) => Failure::master_down(),
            _ => Failure::Unexpected {
                detail: e.to_string(),
            },
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        self.into_response_as(Format::Json, false)
    }
}

/// The reason phrase of `status` (`"Not Found"`).
fn reason(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Unknown")
}

/// CherryPy's error page for `status` with `message`, as salt-api sends every HTTP error
/// (`Content-Type: text/html;charset=utf-8`), naming Halite in the footer.
pub fn error_page(status: StatusCode, message: &str, traceback: Option<&str>) -> Response {
    let title = format!("{} {}", status.as_u16(), reason(status));
    let page = format!(
        "<!DOCTYPE html PUBLIC\n\"-//W3C//DTD XHTML 1.0 Transitional//EN\"\n\
         \"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd\">\n<html>\n<head>\n    \
         <meta http-equiv=\"Content-Type\" content=\"text/html; charset=utf-8\"></meta>\n    \
         <title>{title}</title>\n    <style type=\"text/css\">\n    #powered_by {{\n        \
         margin-top: 20px;\n        border-top: 2px solid black;\n        font-style: italic;\n    \
         }}\n\n    #traceback {{\n        color: red;\n    }}\n    </style>\n</head>\n    \
         <body>\n        <h2>{title}</h2>\n        <p>{}</p>\n        \
         <pre id=\"traceback\">{}</pre>\n    <div id=\"powered_by\">\n      <span>\n        \
         Powered by Halite {}\n      </span>\n    </div>\n    </body>\n</html>\n",
        escape_html(message),
        escape_html(traceback.unwrap_or("")),
        env!("CARGO_PKG_VERSION"),
    );
    let mut resp = Response::new(Body::from(page));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html;charset=utf-8"),
    );
    resp
}

/// `message` with `&`, `<`, `>` and `"` escaped (CherryPy's `html.escape` of the message).
pub fn escape_html(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for c in message.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEDIA: [&str; 2] = ["application/json", "application/x-yaml"];

    #[test]
    fn accept_follows_cptools_accept_on_the_probed_headers() {
        for (header, want) in [
            (None, Some("application/json")),
            (Some(""), Some("application/json")),
            (Some("*/*"), Some("application/json")),
            (Some("application/*"), Some("application/json")),
            (Some("application/x-yaml"), Some("application/x-yaml")),
            (
                Some("application/json;q=0.5, application/x-yaml"),
                Some("application/x-yaml"),
            ),
            (Some("text/html, */*;q=0.1"), Some("application/json")),
            (
                Some("application/json, text/javascript, */*; q=0.01"),
                Some("application/json"),
            ),
            (Some("text/yaml"), None),
            (Some("text/html"), None),
            (Some("text/csv"), None),
            (Some("application/json;q=0"), None),
        ] {
            assert_eq!(accept(header, &MEDIA), want, "{header:?}");
        }
    }

    #[test]
    fn json_is_pythons_json_dumps_and_yaml_is_block_style_with_sorted_keys() {
        let v = map([
            ("return", s("Welcome")),
            ("clients", Value::Array(vec![s("local"), s("runner")])),
            ("f", Value::F64(1.5)),
            ("u", s("é")),
        ]);
        assert_eq!(
            String::from_utf8(Format::Json.serialize(&v)).unwrap(),
            r#"{"return": "Welcome", "clients": ["local", "runner"], "f": 1.5, "u": "é"}"#
        );
        assert_eq!(
            String::from_utf8(Format::Yaml.serialize(&v)).unwrap(),
            "clients:\n- local\n- runner\nf: 1.5\nreturn: Welcome\nu: é\n"
        );
    }

    #[test]
    fn an_unacceptable_accept_header_is_406_naming_it() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static("text/csv"));
        let Err(Failure::Http { status, message }) = negotiate(&h) else {
            panic!("text/csv accepted");
        };
        assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
        assert!(message.contains("text/csv"), "{message}");
    }

    #[tokio::test]
    async fn error_pages_are_html_with_the_message_escaped() {
        use http_body_util::BodyExt;
        let resp = error_page(
            StatusCode::BAD_REQUEST,
            "Invalid client specified: '<x>' & \"y\"",
            None,
        );
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/html;charset=utf-8"
        );
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let page = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(page.contains("<title>400 Bad Request</title>"), "{page}");
        assert!(
            page.contains(
                "<p>Invalid client specified: &#x27;&lt;x&gt;&#x27; &amp; &quot;y&quot;</p>"
            ),
            "{page}"
        );
    }

    #[tokio::test]
    async fn an_unexpected_error_is_a_serialized_500_with_detail_only_in_debug() {
        use http_body_util::BodyExt;
        let body = |r: Response| async {
            let bytes = r.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        let f = || Failure::Unexpected {
            detail: "boom".into(),
        };
        let resp = f().into_response_as(Format::Json, false);
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(
            body(resp).await,
            r#"{"status": 500, "return": "An unexpected error occurred"}"#
        );
        let resp = f().into_response_as(Format::Yaml, true);
        assert_eq!(body(resp).await, "return: boom\nstatus: 500\n");
    }

    #[test]
    fn client_errors_map_to_salt_apis_status_codes() {
        use halite_client::Error as E;
        let master = |name: &str| E::Master {
            name: name.into(),
            message: "m".into(),
        };
        for (e, want) in [
            (E::Authentication, StatusCode::UNAUTHORIZED),
            (E::Authorization, StatusCode::UNAUTHORIZED),
            (master("EauthAuthenticationError"), StatusCode::UNAUTHORIZED),
            (master("SaltInvocationError"), StatusCode::BAD_REQUEST),
            (master("PublishError"), StatusCode::INTERNAL_SERVER_ERROR),
            (E::Timeout, StatusCode::SERVICE_UNAVAILABLE),
            (E::NoMaster, StatusCode::SERVICE_UNAVAILABLE),
            (E::BadReply("x".into()), StatusCode::INTERNAL_SERVER_ERROR),
        ] {
            assert_eq!(Failure::from(e).status(), want);
        }
    }
}
