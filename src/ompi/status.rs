//! Open MPI return codes and the descriptor contract of `btl_send`.
use super::sys;

pub const OPAL_SUCCESS: i32 = sys::OPAL_SUCCESS;
pub const OPAL_ERROR: i32 = sys::OPAL_ERROR;
pub const OPAL_ERR_RESOURCE_BUSY: i32 = sys::OPAL_ERR_RESOURCE_BUSY;
pub const OPAL_ERR_BAD_PARAM: i32 = sys::OPAL_ERR_BAD_PARAM;
pub const OPAL_ERR_UNREACH: i32 = sys::OPAL_ERR_UNREACH;

pub const DES_FLAGS_BTL_OWNERSHIP: u32 = sys::MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
pub const DES_SEND_ALWAYS_CALLBACK: u32 = sys::MCA_BTL_DES_SEND_ALWAYS_CALLBACK;

/// What `btl_send` does with a descriptor once its bytes are handed to the core.
///
/// The core copies the bytes at submission, so the user buffer is free at once; what remains
/// is who frees the descriptor and when the PML hears about it:
/// - BTL-owned, no ALWAYS_CALLBACK: complete now, `btl_send` returns 1 and frees the descriptor
///   (no callback: returning 1 *is* the completion);
/// - BTL-owned with ALWAYS_CALLBACK: the callback runs inside `btl_send` (as the C original's
///   fast path does), then the BTL frees the descriptor; `btl_send` returns 0;
/// - not BTL-owned: the callback runs once every byte is acknowledged (`Event::SendComplete`);
///   the PML frees the descriptor itself afterwards, and until then it and its segment stay
///   the PML's (the core sends a copy, so the PML may refill and resend it); `btl_send`
///   returns 0.
///
/// When too many bytes were already completed ahead of their ACKs (`backlogged`), owned
/// descriptors also wait for their ACK: back-pressure on a PML that would otherwise queue
/// without bound.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Return 1, free the descriptor now, never call back.
    CompletedInline,
    /// Call `des_cbfunc` before returning 0, then free the descriptor.
    CallbackNow,
    /// Return 0, call `des_cbfunc` on acknowledgement, then free only if BTL-owned.
    CallbackOnAck { btl_frees: bool },
}

pub fn send_outcome(des_flags: u32, backlogged: bool) -> SendOutcome {
    let owned = des_flags & DES_FLAGS_BTL_OWNERSHIP != 0;
    let always = des_flags & DES_SEND_ALWAYS_CALLBACK != 0;
    match (owned, always, backlogged) {
        (true, _, true) => SendOutcome::CallbackOnAck { btl_frees: true },
        (true, false, false) => SendOutcome::CompletedInline,
        (true, true, false) => SendOutcome::CallbackNow,
        (false, _, _) => SendOutcome::CallbackOnAck { btl_frees: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_header() {
        // Values fixed by opal/include/opal/constants.h (survey §11.7); the constants above come
        // from bindgen, so this checks bindgen saw the real header.
        assert_eq!(OPAL_SUCCESS, 0);
        assert_eq!(OPAL_ERROR, -1);
        assert_eq!(OPAL_ERR_RESOURCE_BUSY, -4);
        assert_eq!(OPAL_ERR_BAD_PARAM, -5);
        assert_eq!(OPAL_ERR_UNREACH, -12);
        assert_eq!(sys::OPAL_ERR_NOT_AVAILABLE, -16);
        assert_eq!(DES_FLAGS_BTL_OWNERSHIP, 0x2);
        assert_eq!(DES_SEND_ALWAYS_CALLBACK, 0x4);
    }

    #[test]
    fn send_outcome_truth_table() {
        let own = DES_FLAGS_BTL_OWNERSHIP;
        let always = DES_SEND_ALWAYS_CALLBACK;
        let prio = sys::MCA_BTL_DES_FLAGS_PRIORITY;
        let signal = sys::MCA_BTL_DES_FLAGS_SIGNAL;
        let later = |btl_frees| SendOutcome::CallbackOnAck { btl_frees };
        let table = [
            (0, false, later(false)),
            (0, true, later(false)),
            (always, false, later(false)),
            (always, true, later(false)),
            (own, false, SendOutcome::CompletedInline),
            (own, true, later(true)),
            (own | always, false, SendOutcome::CallbackNow),
            (own | always, true, later(true)),
            (prio | own, false, SendOutcome::CompletedInline),
            (
                prio | signal | own | always,
                false,
                SendOutcome::CallbackNow,
            ),
        ];
        for (flags, backlogged, want) in table {
            assert_eq!(
                send_outcome(flags, backlogged),
                want,
                "flags {flags:#x} backlogged {backlogged}"
            );
        }
    }
}
