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
/// is who frees the descriptor and whether the PML asked to hear about it:
/// - BTL-owned and no ALWAYS_CALLBACK: the send is complete now, `btl_send` returns 1 and frees
///   the descriptor itself (no callback: returning 1 *is* the completion);
/// - otherwise the callback runs once every byte is acknowledged (`Event::SendComplete`),
///   `btl_send` returns 0; afterwards the BTL frees the descriptor only if it owns it (else the
///   PML calls `btl_free`). This also gives the PML back-pressure on pipelined fragments.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Return 1, free the descriptor now, never call back.
    CompletedInline,
    /// Return 0, call `des_cbfunc` on acknowledgement, then free only if BTL-owned.
    CallbackOnAck { btl_frees: bool },
}

pub fn send_outcome(des_flags: u32) -> SendOutcome {
    let owned = des_flags & DES_FLAGS_BTL_OWNERSHIP != 0;
    let always = des_flags & DES_SEND_ALWAYS_CALLBACK != 0;
    if owned && !always {
        SendOutcome::CompletedInline
    } else {
        SendOutcome::CallbackOnAck { btl_frees: owned }
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
        let prio = sys::MCA_BTL_DES_FLAGS_PRIORITY;
        let signal = sys::MCA_BTL_DES_FLAGS_SIGNAL;
        let table = [
            (0, SendOutcome::CallbackOnAck { btl_frees: false }),
            (DES_FLAGS_BTL_OWNERSHIP, SendOutcome::CompletedInline),
            (
                DES_SEND_ALWAYS_CALLBACK,
                SendOutcome::CallbackOnAck { btl_frees: false },
            ),
            (
                DES_FLAGS_BTL_OWNERSHIP | DES_SEND_ALWAYS_CALLBACK,
                SendOutcome::CallbackOnAck { btl_frees: true },
            ),
            (prio | DES_FLAGS_BTL_OWNERSHIP, SendOutcome::CompletedInline),
            (
                prio | signal | DES_FLAGS_BTL_OWNERSHIP | DES_SEND_ALWAYS_CALLBACK,
                SendOutcome::CallbackOnAck { btl_frees: true },
            ),
        ];
        for (flags, want) in table {
            assert_eq!(send_outcome(flags), want, "flags {flags:#x}");
        }
    }
}
