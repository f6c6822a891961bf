//! The shop's webhook messages (the outbox): which may be sent again by hand.

use super::refusal::Refusal;
use super::status::MessageStatus;

/// A message an operator may send again: one delivered (the shop lost it) or given up (`dead`,
/// the shop's endpoint is back); one still queued will be sent anyway.
pub fn may_resend(status: MessageStatus) -> Result<(), Refusal> {
    match status {
        MessageStatus::Delivered | MessageStatus::Dead => Ok(()),
        MessageStatus::Pending => {
            Err(Refusal::conflict("webhook_pending", "the message is queued already; it will be sent"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_message_no_longer_queued_is_sent_again() {
        assert!(may_resend(MessageStatus::Delivered).is_ok());
        assert!(may_resend(MessageStatus::Dead).is_ok());
        assert_eq!(may_resend(MessageStatus::Pending).unwrap_err().code, "webhook_pending");
    }
}
