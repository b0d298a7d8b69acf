//! budgetd's API as typed calls: requests go out as `budget-protocol` bodies
//! through `budget-client`, answers come back as `budget-protocol` types, and
//! a non-2xx answer becomes an error carrying the server's message.

use std::time::Duration;

use anyhow::anyhow;
use budget_client::{Client, Endpoint};
use budget_protocol::service::ErrorBody;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::{Cli, UsageError};

/// A connection to budgetd.
#[derive(Debug)]
pub struct Api {
    client: Client,
}

impl Api {
    /// The endpoint and credentials the command line names.
    pub fn from_cli(cli: &Cli) -> anyhow::Result<Api> {
        let endpoint = match &cli.url {
            Some(u) => Endpoint::parse(u),
            None => Endpoint::parse(&cli.socket),
        }
        .map_err(|e| UsageError(e.to_string()))?;
        let mut client = Client::new(endpoint)
            .with_timeout(Duration::from_secs(cli.timeout.max(1)))
            .with_max_body(512 << 20);
        if let Some(t) = &cli.token {
            client = client.with_token(t.clone());
        } else if let Some(path) = &cli.token_file {
            client = client.with_token(
                budget_client::read_token_file(path)
                    .map_err(|e| UsageError(format!("--token-file: {e}")))?,
            );
        }
        Ok(Api { client })
    }

    /// Sends a request and returns the body of a 2xx answer; otherwise an
    /// error with the server's message and any per-item details (the bad
    /// lines of an import, one per line).
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<Vec<u8>> {
        let headers: Vec<(&str, &str)> = body
            .as_ref()
            .map(|(ct, _)| vec![("Content-Type", *ct)])
            .unwrap_or_default();
        let r = self.client.request(
            method,
            path,
            &headers,
            body.as_ref().map(|(_, b)| b.as_slice()),
        )?;
        if r.is_success() {
            return Ok(r.body);
        }
        let Ok(e) = serde_json::from_slice::<ErrorBody>(&r.body) else {
            return Err(anyhow!("budgetd returned {}", r.status));
        };
        let mut msg = e.error;
        if let Some(d) = e.details.filter(|d| !d.invalid.is_empty()) {
            // The message quotes the first lines; list them all, one per line.
            if let Some((head, _)) = msg.split_once(": line ") {
                msg = format!("{head}:");
            }
            for l in &d.invalid {
                msg.push_str(&format!("\n  line {}: {}", l.line, l.error));
            }
        }
        Err(anyhow!(msg))
    }

    fn parse<T: DeserializeOwned>(path: &str, body: &[u8]) -> anyhow::Result<T> {
        serde_json::from_slice(body)
            .map_err(|e| anyhow!("unexpected answer from budgetd to {path}: {e}"))
    }

    /// `GET path`.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Api::parse(path, &self.send("GET", path, None)?)
    }

    /// `METHOD path` with a JSON body.
    pub fn send_json<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let bytes = serde_json::to_vec(body)?;
        Api::parse(
            path,
            &self.send(method, path, Some(("application/json", bytes)))?,
        )
    }

    /// `METHOD path` with a text body.
    pub fn send_text<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        text: Vec<u8>,
    ) -> anyhow::Result<T> {
        Api::parse(path, &self.send(method, path, Some(("text/plain", text)))?)
    }

    /// `DELETE path`, answered without a body (204).
    pub fn delete(&self, path: &str) -> anyhow::Result<()> {
        self.send("DELETE", path, None).map(|_| ())
    }

    /// `DELETE path` with an answer.
    pub fn delete_for<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Api::parse(path, &self.send("DELETE", path, None)?)
    }
}

/// Percent-encodes one path segment or query value.
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
