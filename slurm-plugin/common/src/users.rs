//! User names from uids, for the plugins' uid -> name caches.
//!
//! `getpwuid_r` may block on NSS (LDAP, sssd): call [`lookup_uid`] only from a
//! plugin's background thread, never from a `slurmctld` callback.

/// `getpwuid_r`: the user name of `uid`, or `None`. May block on NSS.
pub fn lookup_uid(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero passwd is a valid out-parameter for getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers are valid for the given lengths; result is checked below.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated by getpwuid_r.
    unsafe { crate::cstr::opt_string(pwd.pw_name) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_uid_zero() {
        assert_eq!(lookup_uid(0).as_deref(), Some("root"));
    }
}
