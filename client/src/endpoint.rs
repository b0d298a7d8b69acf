//! Where `budgetd` listens: a Unix domain socket (the default, local callers
//! identified by peer credentials) or a plain-HTTP TCP address (remote callers,
//! bearer token). Owns parsing of the user-facing spellings and the canonical
//! display form used in error messages.

use std::fmt;
use std::path::PathBuf;

use crate::error::ClientError;

/// Address of a `budgetd` instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Unix domain socket at this path.
    Unix(PathBuf),
    /// Plain HTTP over TCP. `host` is a name or an IP literal (IPv6 without
    /// brackets).
    Tcp {
        /// Host name or IP address.
        host: String,
        /// TCP port.
        port: u16,
    },
}

impl Endpoint {
    /// Parses `unix:/path`, `unix:///path`, `/path` (or any other string
    /// without a scheme, taken as a socket path), `http://host:port`,
    /// `http://[::1]:port`. A missing port means 80; a trailing `/` is allowed,
    /// any other path is rejected (requests carry their own paths). `https://`
    /// is rejected: this client speaks no TLS (put a TLS proxy in front).
    pub fn parse(s: &str) -> Result<Self, ClientError> {
        let s = s.trim();
        let bad = |why: &str| ClientError::InvalidEndpoint(format!("{s:?}: {why}"));
        if s.is_empty() {
            return Err(bad("empty"));
        }
        if let Some(rest) = s.strip_prefix("unix:") {
            // Accept both `unix:/p` and the URL-ish `unix:///p`.
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(bad("missing socket path"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let lower = s.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(bad(
                "https is not supported; use http:// behind a TLS proxy, or the Unix socket",
            ));
        }
        let Some(rest) = lower.strip_prefix("http://").map(|_| &s["http://".len()..]) else {
            if s.contains("://") {
                return Err(bad(
                    "unsupported scheme (expected unix:, http:// or a socket path)",
                ));
            }
            return Ok(Endpoint::Unix(PathBuf::from(s)));
        };
        let authority = match rest.find('/') {
            Some(i) if &rest[i..] == "/" => &rest[..i],
            Some(_) => return Err(bad("a path is not allowed in the endpoint URL")),
            None => rest,
        };
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported; use a token"));
        }
        let (host, port) = if let Some(after) = authority.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Err(bad("unterminated IPv6 literal"));
            };
            let host = &after[..end];
            let tail = &after[end + 1..];
            let port = match tail.strip_prefix(':') {
                Some(p) => Some(p),
                None if tail.is_empty() => None,
                None => return Err(bad("garbage after IPv6 literal")),
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("missing host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p.parse::<u16>().map_err(|_| bad("invalid port"))?,
        };
        Ok(Endpoint::Tcp {
            host: host.to_string(),
            port,
        })
    }

    /// Value of the `Host` header. Over a Unix socket there is no host;
    /// `localhost` keeps HTTP/1.1 servers (hyper requires a Host) happy.
    pub(crate) fn host_header(&self) -> String {
        match self {
            Endpoint::Unix(_) => "localhost".to_string(),
            Endpoint::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Endpoint::Tcp { host, port } => format!("{host}:{port}"),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp { .. } => write!(f, "http://{}", self.host_header()),
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = ClientError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn parses_unix_forms() {
        for s in [
            "unix:/run/b.sock",
            "unix:///run/b.sock",
            "/run/b.sock",
            " /run/b.sock ",
        ] {
            assert_eq!(
                Endpoint::parse(s).unwrap(),
                Endpoint::Unix("/run/b.sock".into()),
                "{s}"
            );
        }
        assert_eq!(
            Endpoint::parse("rel.sock").unwrap(),
            Endpoint::Unix("rel.sock".into())
        );
        assert!(Endpoint::parse("unix:").is_err());
        assert!(Endpoint::parse("").is_err());
    }

    #[test]
    fn parses_tcp_forms() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8080").unwrap(),
            tcp("127.0.0.1", 8080)
        );
        assert_eq!(
            Endpoint::parse("HTTP://Budget:9/").unwrap(),
            tcp("Budget", 9)
        );
        assert_eq!(Endpoint::parse("http://host").unwrap(), tcp("host", 80));
        assert_eq!(Endpoint::parse("http://[::1]:7").unwrap(), tcp("::1", 7));
        for bad in [
            "https://h:1",
            "ftp://h",
            "http://h:99999",
            "http://h:x",
            "http://:80",
            "http://h:1/v1",
            "http://u:p@h:1",
            "http://[::1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "unix:/run/b.sock",
            "http://127.0.0.1:8080",
            "http://[::1]:7",
        ] {
            let e = Endpoint::parse(s).unwrap();
            assert_eq!(e.to_string(), s);
            assert_eq!(Endpoint::parse(&e.to_string()).unwrap(), e);
        }
    }
}
