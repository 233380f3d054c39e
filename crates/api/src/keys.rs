//! `POST /keys`: salt-api's key-pair tarball (`app.py:Keys.POST`). A new key pair is made
//! and its public key accepted by the master's wheel `key.gen_accept`, called with the
//! caller's own credentials; the answer is a tar of `minion.pub` and `minion.pem` that a
//! kickstart script unpacks into `/etc/salt/pki/minion`.
//!
//! The body is a form, JSON or YAML mapping (or a list whose first mapping is used, as
//! salt-api runs only the first chunk) with `mid` (or `id_`), the caller's `username`,
//! `password` and `eauth` (or a `token`), and optionally `keysize` and `force`. The chunk
//! goes through the lowstate executor as the `wheel` client, so `wheel` must be in
//! `netapi_enable_clients` and the caller needs `@wheel` (or `key.gen_accept`) rights; no
//! session is used, as in salt-api (sessions are off on this endpoint).
//!
//! The answer: `Content-Type: application/x-tar`, `Content-Disposition: attachment;
//! filename="saltkeys-<id>.tar"`, `Cache-Control: no-cache`; the tar is written as
//! Python's `tarfile` writes it (ustar members with mode 0644, owner 0, mtime 0, padded to
//! 10240-byte records). A minion that has a key already (accepted, pending or rejected)
//! and no `force` gets salt-api's tar of two empty files, and its key is left alone.
//!
//! Deviations (salt-api answers every failure here with a 500 page, because the endpoint
//! turns off the handler that maps Salt's errors to statuses): a body that is not a
//! mapping, a missing `mid` and a failed `key.gen_accept` (its message shown) are 400; no
//! credentials, wrong ones or missing rights are 401; a disabled `wheel` client is 400, as
//! on `POST /`. Text `force` and `keysize` values (every value of a form) are read as YAML
//! scalars, so `force=false` does not overwrite a key (salt-api passes the text on, and
//! any non-empty text forces). The file name carries the id as Salt's `clean.id` cleans it
//! (`[A-Za-z0-9.-]`), never the raw `mid` (salt-api puts the raw text in the header).
//!
//! Invariant: the private key goes to the caller only; it is never logged or put in an
//! error message.

use crate::app::Api;
use crate::body;
use crate::render::{Failure, Format};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::sync::Arc;

/// Python's `tarfile.RECORDSIZE`: a tar is padded to a multiple of it, as salt-api's is.
const RECORD_SIZE: usize = 20 * 512;

/// `POST /keys`.
pub async fn gen_accept(State(api): State<Arc<Api>>, req: Request) -> Response {
    let debug = api.config().debug;
    let result = async {
        let (_, parsed) = api.parsed(req).await?;
        let chunk = gen_accept_chunk(parsed.data)?;
        let id = value::get(&chunk, "id_").map(clean_id).unwrap_or_default();
        let out = api
            .execute(Some(Value::Array(vec![chunk])), None, None)
            .await?;
        let (public, private) = key_pair(out.first())?;
        let tar = tarball(&public, &private).map_err(|e| Failure::Unexpected {
            detail: format!("Cannot write the key tarball: {e}"),
        })?;
        Ok::<_, Failure>((id, tar))
    }
    .await;
    match result {
        Ok((id, tar)) => tar_response(&id, tar),
        Err(f) => f.into_response_as(Format::Json, debug),
    }
}

/// The wheel chunk of a request body: its first mapping, with `client: wheel`, `fun:
/// key.gen_accept`, `mid` renamed `id_`, and text `force`/`keysize` read as YAML scalars.
fn gen_accept_chunk(data: Option<Value>) -> Result<Value, Failure> {
    let first = match body::lowstate(data) {
        Some(Value::Array(chunks)) => chunks.into_iter().next(),
        _ => None,
    };
    let Some(mut chunk @ Value::Map(_)) = first else {
        return Err(Failure::bad_request(
            "POST /keys takes a mapping with mid, username, password and eauth",
        ));
    };
    value::set(&mut chunk, "client", s("wheel"));
    value::set(&mut chunk, "fun", s("key.gen_accept"));
    if let Some(mid) = value::remove(&mut chunk, "mid") {
        value::set(&mut chunk, "id_", mid);
    }
    if value::get(&chunk, "id_").is_none() {
        return Err(Failure::bad_request("Missing required argument: mid"));
    }
    for key in ["force", "keysize"] {
        let typed = match value::get(&chunk, key) {
            Some(Value::String(text)) => text.as_str().map(halite_config::args::yamlify_arg),
            _ => None,
        };
        if let Some(v) = typed {
            value::set(&mut chunk, key, v);
        }
    }
    Ok(chunk)
}

/// The `(pub, priv)` PEMs of the wheel's answer (`{tag, data: {return, success}}`); both
/// empty when the minion has a key already (`return` is `{}`). A failed call is 400 with
/// the wheel's message.
fn key_pair(answer: Option<&Value>) -> Result<(String, String), Failure> {
    let data = answer.and_then(|a| value::get(a, "data"));
    let ret = data.and_then(|d| value::get(d, "return"));
    let success = data
        .and_then(|d| value::get(d, "success"))
        .is_none_or(value::truthy);
    let Some(ret @ Value::Map(_)) = ret.filter(|_| success) else {
        let message = ret.map(halite_output::py_str).unwrap_or_default();
        return Err(Failure::bad_request(format!(
            "key.gen_accept failed: {message}"
        )));
    };
    let pem = |key: &str| match value::get(ret, key) {
        None => Ok(String::new()),
        Some(v) => value::str_of(v)
            .map(str::to_owned)
            .ok_or_else(|| Failure::Unexpected {
                detail: format!("key.gen_accept answered a {key} that is not text"),
            }),
    };
    Ok((pem("pub")?, pem("priv")?))
}

/// Salt's `clean.id` (`InputSanitizer.hostname`) of a text id, for the file name: only
/// `[A-Za-z0-9.-]`, dots stripped at both ends.
fn clean_id(id: &Value) -> String {
    let text = value::str_of(id)
        .map(str::to_owned)
        .unwrap_or_else(|| halite_output::py_str(id));
    let kept: String = text
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        .collect();
    kept.trim_matches('.').to_owned()
}

/// A tar of `minion.pub` (`public`) then `minion.pem` (`private`), as salt-api's
/// `tarfile` writes it.
pub fn tarball(public: &str, private: &str) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, content) in [("minion.pub", public), ("minion.pem", private)] {
        let mut h = tar::Header::new_ustar();
        h.set_path(name)?;
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        builder.append(&h, content.as_bytes())?;
    }
    let mut out = builder.into_inner()?;
    let padded = out.len().div_ceil(RECORD_SIZE) * RECORD_SIZE;
    out.resize(padded, 0);
    Ok(out)
}

/// The 200 carrying `tar`, named for `id`.
fn tar_response(id: &str, tar: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(tar));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    // `clean_id` leaves only [A-Za-z0-9.-], which is always a valid header value.
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"saltkeys-{id}.tar\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use halite_proto::value::map;

    fn members(tar: &[u8]) -> Vec<(String, u32, u64, Vec<u8>)> {
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut content = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut content).unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.mtime().unwrap(),
                    content,
                )
            })
            .collect()
    }

    #[test]
    fn the_tarball_holds_the_public_then_the_private_key_in_whole_records() {
        let tar = tarball("PUBLIC\n", "PRIVATE\n").unwrap();
        assert_eq!(tar.len(), RECORD_SIZE, "padded as Python's tarfile pads");
        assert_eq!(
            members(&tar),
            vec![
                ("minion.pub".into(), 0o644, 0, b"PUBLIC\n".to_vec()),
                ("minion.pem".into(), 0o644, 0, b"PRIVATE\n".to_vec()),
            ]
        );
        let big = "k".repeat(RECORD_SIZE);
        assert_eq!(tarball("p", &big).unwrap().len(), 2 * RECORD_SIZE);
    }

    #[test]
    fn an_existing_key_gives_two_empty_members_as_salt_api() {
        let answer = map([(
            "data",
            map([
                ("return", Value::Map(vec![])),
                ("success", Value::Boolean(true)),
            ]),
        )]);
        let (public, private) = key_pair(Some(&answer)).unwrap();
        assert_eq!((public.as_str(), private.as_str()), ("", ""));
        let tar = tarball(&public, &private).unwrap();
        let names: Vec<(String, usize)> = members(&tar)
            .into_iter()
            .map(|(n, _, _, c)| (n, c.len()))
            .collect();
        assert_eq!(
            names,
            vec![("minion.pub".into(), 0), ("minion.pem".into(), 0)]
        );
    }

    #[test]
    fn a_failed_gen_accept_is_400_with_the_wheels_message() {
        let failed = map([(
            "data",
            map([
                (
                    "return",
                    s("Exception occurred in wheel key.gen_accept: Empty value during sanitation"),
                ),
                ("success", Value::Boolean(false)),
            ]),
        )]);
        let e = key_pair(Some(&failed)).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert!(format!("{e:?}").contains("Empty value during sanitation"));
        // Stock masters report a TypeError with success true: the text is still a failure.
        let text = map([("data", map([("return", s("TypeError: ..."))]))]);
        assert_eq!(
            key_pair(Some(&text)).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            key_pair(None).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        let odd = map([("data", map([("return", map([("pub", Value::from(1))]))]))]);
        assert_eq!(
            key_pair(Some(&odd)).unwrap_err().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn a_form_becomes_a_gen_accept_chunk_with_typed_force_and_keysize() {
        let form = map([
            ("mid", s("web1")),
            ("username", s("alice")),
            ("password", s("pw")),
            ("eauth", s("pam")),
            ("force", s("false")),
            ("keysize", s("4096")),
            ("client", s("local")),
        ]);
        let chunk = gen_accept_chunk(Some(form)).unwrap();
        assert_eq!(value::get_str(&chunk, "client"), Some("wheel"));
        assert_eq!(value::get_str(&chunk, "fun"), Some("key.gen_accept"));
        assert_eq!(value::get_str(&chunk, "id_"), Some("web1"));
        assert_eq!(value::get(&chunk, "mid"), None);
        assert_eq!(value::get(&chunk, "force"), Some(&Value::Boolean(false)));
        assert_eq!(value::get(&chunk, "keysize"), Some(&Value::from(4096)));
        assert_eq!(value::get_str(&chunk, "eauth"), Some("pam"));
    }

    #[test]
    fn a_list_body_uses_its_first_chunk_and_id_works_without_mid() {
        let body = Value::Array(vec![
            map([("id_", s("a")), ("eauth", s("file"))]),
            map([("mid", s("b"))]),
        ]);
        let chunk = gen_accept_chunk(Some(body)).unwrap();
        assert_eq!(value::get_str(&chunk, "id_"), Some("a"));
    }

    #[test]
    fn bodies_without_a_mapping_or_a_mid_are_400() {
        for body in [
            None,
            Some(s("text")),
            Some(Value::Array(vec![])),
            Some(Value::Array(vec![s("x")])),
            Some(map([("username", s("alice"))])),
        ] {
            let e = gen_accept_chunk(body.clone()).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{body:?}");
        }
    }

    #[test]
    fn the_file_name_carries_the_id_as_clean_id_leaves_it() {
        assert_eq!(clean_id(&s(" web1.example.com ")), "web1.example.com");
        assert_eq!(clean_id(&s("../a\"; b=c\r\n.tar")), "abc.tar");
        assert_eq!(clean_id(&Value::from(12)), "12");
        let resp = tar_response(&clean_id(&s("x\"y")), vec![]);
        assert_eq!(
            resp.headers()[header::CONTENT_DISPOSITION],
            "attachment; filename=\"saltkeys-xy.tar\""
        );
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/x-tar");
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-cache");
    }
}
