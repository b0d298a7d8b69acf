//! Reading a bearer token from a file (`--token-file` of `budgetctl` and
//! `budget-agent`): a token on the command line is visible to every user in
//! `ps`, a file with mode 0600 is not.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest token file accepted (a token is tens of characters; a larger file
/// is the wrong file, not a token).
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("token file {path}: {why}")]
pub struct TokenFileError {
    /// The file named.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

/// The token in `path`: the file's text without surrounding white space;
/// refused when readable or writable by other users (mode `o+r`, `o+w`),
/// unreadable, empty, larger than [`MAX_TOKEN_FILE_BYTES`], or
/// holding white space or control characters inside (it goes into an HTTP
/// header, where a line break would forge another header).
pub fn read_token_file(path: &Path) -> Result<String, TokenFileError> {
    let bad = |why: String| TokenFileError {
        path: path.to_path_buf(),
        why,
    };
    let f = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    {
        // As ssh does with key files: a token others can read is a token
        // others may already hold, one they can write may not be ours.
        use std::os::unix::fs::PermissionsExt;
        let mode = f
            .metadata()
            .map_err(|e| bad(e.to_string()))?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o006 != 0 {
            return Err(bad(format!(
                "mode {mode:04o}: readable or writable by other users, so the token may be \
                 known to them; chmod 0600 (or 0640 for a group) and use a new token"
            )));
        }
    }
    let mut text = String::new();
    f.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(e.to_string()))?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(bad(format!(
            "larger than {MAX_TOKEN_FILE_BYTES} bytes; not a token file"
        )));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(bad("empty".into()));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(
            "the token holds white space or control characters".into()
        ));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_trimmed_token_and_refuses_bad_files() {
        let dir = std::env::temp_dir().join(format!("budget-client-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join("t");
        std::fs::write(&f, "  abc-123\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        for mode in [0o644, 0o666, 0o602] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let e = read_token_file(&f).expect_err("world-readable").to_string();
            assert!(
                e.contains("readable or writable by other users"),
                "{mode:o}: {e}"
            );
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        assert_eq!(read_token_file(&f).expect("token"), "abc-123");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(read_token_file(&f).expect("token"), "abc-123");
        for (text, why) in [
            ("\n \n", "empty"),
            ("two words\n", "white space"),
            ("a\rb", "white space"),
        ] {
            std::fs::write(&f, text).expect("write");
            let e = read_token_file(&f).expect_err(text).to_string();
            assert!(e.contains(why) && e.contains("token file"), "{e}");
        }
        std::fs::write(&f, "x".repeat(5000)).expect("write");
        assert!(read_token_file(&f).is_err());
        let e = read_token_file(&dir.join("missing")).expect_err("missing");
        assert!(e.to_string().contains("missing"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
