//! Reading C strings out of Slurm records.
//!
//! Slurm strings may be NULL, and are not guaranteed UTF-8 (user-provided comments,
//! names). These helpers never panic and never trust the bytes.

use std::borrow::Cow;
use std::ffi::{CStr, c_char};

/// Borrow a C string as text (lossy: invalid UTF-8 is replaced, and only then
/// copied); `None` for NULL. For hot paths that read a field and drop it.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that stays valid and
/// unchanged for `'a` (a Slurm record's field while its lock is held).
pub unsafe fn opt_str<'a>(p: *const c_char) -> Option<Cow<'a, str>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated, valid for 'a, per the caller's contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy())
}

/// Owned copy of a C string; `None` for NULL. Invalid UTF-8 is replaced (lossy).
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string valid for the call.
pub unsafe fn opt_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    Some(s.to_string_lossy().into_owned())
}

/// Like [`opt_string`] but empty for NULL.
///
/// # Safety
/// As [`opt_string`].
pub unsafe fn string_or_empty(p: *const c_char) -> String {
    // SAFETY: forwarded contract.
    unsafe { opt_string(p) }.unwrap_or_default()
}

/// Allocate a copy of `s` with Slurm's allocator (`xstrdup`), so Slurm may `xfree` it.
/// Interior NULs truncate the copy. Returns NULL on allocation failure.
pub fn xstrdup(s: &str) -> *mut c_char {
    let bytes: Vec<u8> = s
        .bytes()
        .take_while(|b| *b != 0)
        .chain(std::iter::once(0))
        .collect();
    // SAFETY: `bytes` is NUL-terminated; xstrdup copies it into an xmalloc'ed buffer.
    unsafe { slurm_ffi::sys::xstrdup(bytes.as_ptr().cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_lossy() {
        // SAFETY: NULL and a literal NUL-terminated string.
        unsafe {
            assert_eq!(opt_string(std::ptr::null()), None);
            assert_eq!(opt_string(c"teama".as_ptr()).as_deref(), Some("teama"));
            assert_eq!(
                opt_string(c"a\xffb".as_ptr()).as_deref(),
                Some("a\u{fffd}b")
            );
            assert_eq!(string_or_empty(std::ptr::null()), "");
            assert_eq!(opt_str(std::ptr::null()), None);
            assert!(matches!(
                opt_str(c"teama".as_ptr()),
                Some(Cow::Borrowed("teama"))
            ));
            assert_eq!(opt_str(c"a\xffb".as_ptr()).as_deref(), Some("a\u{fffd}b"));
        }
    }
}
