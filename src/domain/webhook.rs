//! The shop's webhook messages (the outbox): which may be sent again by hand.

use super::refusal::Refusal;

/// A message an operator may send again: one delivered (the shop lost it) or given up (`dead`,
/// the shop's endpoint is back); one still queued will be sent anyway.
pub fn may_resend(status: &str) -> Result<(), Refusal> {
    match status {
        "delivered" | "dead" => Ok(()),
        _ => Err(Refusal::conflict("webhook_pending", "the message is queued already; it will be sent")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_message_no_longer_queued_is_sent_again() {
        assert!(may_resend("delivered").is_ok());
        assert!(may_resend("dead").is_ok());
        assert_eq!(may_resend("pending").unwrap_err().code, "webhook_pending");
    }
}
