//! The cookies of sends completed inline: they carry the send's size, which joins the
//! back-pressure backlog until the core completes the send.
use crate::proto::Cookie;

use super::ModuleState;

/// Cookies with this bit are inline sends (no descriptor): counted, never called back; the
/// bits below it are the send's size.
const INLINE_COOKIE: u64 = 1 << 63;

impl ModuleState {
    /// A cookie for a send completed inline; its size joins the backlog until the core
    /// completes it.
    pub fn inline_cookie(&mut self, len: usize) -> Cookie {
        self.inline_backlog += len;
        inline_cookie_of(len)
    }

    /// The core refused the send of `cookie`: an inline send's size leaves the backlog again
    /// (else every refusal would hold back later sends for good).
    pub fn refused(&mut self, cookie: Cookie) {
        if let Some(len) = inline_len(cookie) {
            self.inline_backlog = self.inline_backlog.saturating_sub(len);
        }
    }
}

/// The cookie of an inline send carries its size, so completing it needs no table entry per
/// tiny message; descriptor cookies are addresses, which never have the top bit set.
fn inline_cookie_of(len: usize) -> Cookie {
    Cookie(INLINE_COOKIE | (len as u64 & !INLINE_COOKIE))
}

/// The size of an inline send's cookie; `None` for a descriptor's cookie.
pub(super) fn inline_len(cookie: Cookie) -> Option<usize> {
    (cookie.0 & INLINE_COOKIE != 0).then_some((cookie.0 & !INLINE_COOKIE) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_cookies_carry_their_size_and_descriptor_cookies_none() {
        for len in [0, 1, 768, 525_312, 32 << 20] {
            assert_eq!(inline_len(inline_cookie_of(len)), Some(len));
        }
        let frag = Box::new(0u64);
        assert_eq!(inline_len(Cookie(&*frag as *const u64 as u64)), None);
        assert_eq!(inline_len(Cookie(0)), None);
    }
}
