//! The buyer's contact on an order and the way back to it: an e-mail address and a phone number
//! (checked and normalised once, at the edge, so that a lookup compares like with like), the lookup
//! password's limits, and what a lookup may answer. Nothing here lists orders for a contact: a
//! lookup always names the order.

use super::refusal::{Refusal, RefusalKind};

/// Longest e-mail address, in bytes (RFC 5321's path limit less its angle brackets).
pub const EMAIL_LEN_MAX: usize = 254;
/// Longest local part of an e-mail address, in bytes.
pub const EMAIL_LOCAL_LEN_MAX: usize = 64;
/// Fewest and most digits of a phone number (E.164 allows 15).
pub const PHONE_DIGITS_MIN: usize = 6;
pub const PHONE_DIGITS_MAX: usize = 15;
/// Longest phone number as written, separators included.
pub const PHONE_LEN_MAX: usize = 32;
/// Shortest and longest lookup password, in characters.
pub const LOOKUP_PASSWORD_LEN_MIN: usize = 6;
pub const LOOKUP_PASSWORD_LEN_MAX: usize = 128;
/// What a link to an order is signed for.
pub const LINK_PURPOSE: &str = "order";
/// How long a link to an order stays good unless configured otherwise: a day.
pub const LINK_HOURS_DEFAULT: u64 = 24;
/// Longest a link may be configured to stay good: thirty days.
pub const LINK_HOURS_MAX: u64 = 720;
/// Lookups that matched nothing, from one address within [`LOOKUP_MISS_WINDOW_MS`], after which
/// the bot check (when configured) is asked for.
pub const LOOKUP_MISSES_BEFORE_CHECK: u32 = 3;
pub const LOOKUP_MISS_WINDOW_MS: i64 = 15 * 60 * 1000;

/// An e-mail address: one `@`, a local part of 1–64 bytes without spaces or controls, a domain
/// of dot-separated labels (letters, digits, hyphens; any script) with at least one dot. Kept in
/// lower case: the lookup compares addresses as mail providers treat them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Email(String);

impl Email {
    pub fn parse(text: &str) -> Result<Email, Refusal> {
        let invalid = || Refusal::unprocessable("invalid_contact", "contact.email is not an e-mail address");
        let text = text.trim();
        let (local, domain) = text.split_once('@').ok_or_else(invalid)?;
        let local_ok = !local.is_empty()
            && local.len() <= EMAIL_LOCAL_LEN_MAX
            && !local.starts_with('.')
            && !local.ends_with('.')
            && local.chars().all(|c| !c.is_whitespace() && !c.is_control() && !"@<>()[]\\,;:\"".contains(c));
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.chars().count() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_alphanumeric() || c == '-')
        };
        let domain_ok = domain.contains('.') && domain.split('.').all(label_ok);
        if !local_ok || !domain_ok || text.len() > EMAIL_LEN_MAX {
            return Err(invalid());
        }
        Ok(Email(text.to_lowercase()))
    }

    /// One read back from kassa's own records.
    pub fn stored(text: impl Into<String>) -> Email {
        Email(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The address as a page may show it to someone who has not proved to be its owner: the
    /// local part's first character, then `***`, then the domain (`a***@example.com`).
    pub fn masked(&self) -> String {
        let (local, domain) = self.0.split_once('@').unwrap_or(("", &self.0));
        let first: String = local.chars().take(1).collect();
        format!("{first}***@{domain}")
    }
}

/// A phone number: digits, spaces, hyphens, dots and parentheses as people write them, with an
/// optional leading `+`; kept as the digits alone, after the `+` when there was one (`+86 138-0013
/// 8000` is `+8613800138000`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Phone(String);

impl Phone {
    pub fn parse(text: &str) -> Result<Phone, Refusal> {
        let invalid = || {
            Refusal::unprocessable(
                "invalid_contact",
                format!(
                    "contact.phone is {PHONE_DIGITS_MIN}-{PHONE_DIGITS_MAX} digits, with an optional leading + and spaces, hyphens, dots or parentheses"
                ),
            )
        };
        let text = text.trim();
        if text.len() > PHONE_LEN_MAX {
            return Err(invalid());
        }
        let (plus, rest) = match text.strip_prefix('+') {
            Some(rest) => ("+", rest),
            None => ("", text),
        };
        if !rest.chars().all(|c| c.is_ascii_digit() || " -.()".contains(c)) {
            return Err(invalid());
        }
        let digits: String = rest.chars().filter(char::is_ascii_digit).collect();
        if !(PHONE_DIGITS_MIN..=PHONE_DIGITS_MAX).contains(&digits.len()) {
            return Err(invalid());
        }
        Ok(Phone(format!("{plus}{digits}")))
    }

    pub fn stored(text: impl Into<String>) -> Phone {
        Phone(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The buyer's contact on an order: either, both or none.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Contact {
    pub email: Option<Email>,
    pub phone: Option<Phone>,
}

impl Contact {
    /// From what a checkout named; an empty string is a field left out.
    pub fn parse(email: Option<&str>, phone: Option<&str>) -> Result<Contact, Refusal> {
        Ok(Contact {
            email: given(email).map(Email::parse).transpose()?,
            phone: given(phone).map(Phone::parse).transpose()?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.email.is_none() && self.phone.is_none()
    }

    /// From an order's columns.
    pub fn stored(email: Option<String>, phone: Option<String>) -> Contact {
        Contact { email: email.map(Email::stored), phone: phone.map(Phone::stored) }
    }
}

/// A field given: present and not blank.
fn given(v: Option<&str>) -> Option<&str> {
    v.filter(|s| !s.trim().is_empty())
}

/// A lookup password as the buyer chose it: 6–128 characters, no control characters. Only its
/// slow hash is kept.
pub fn check_lookup_password(password: &str) -> Result<(), Refusal> {
    let n = password.chars().count();
    if !(LOOKUP_PASSWORD_LEN_MIN..=LOOKUP_PASSWORD_LEN_MAX).contains(&n) || password.chars().any(char::is_control) {
        return Err(Refusal::unprocessable(
            "invalid_lookup_password",
            format!("lookup_password is {LOOKUP_PASSWORD_LEN_MIN}-{LOOKUP_PASSWORD_LEN_MAX} characters"),
        ));
    }
    Ok(())
}

/// What a lookup proves the buyer knows besides the order number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    Email(Email),
    Phone(Phone),
    Password(String),
}

impl Proof {
    /// The one proof a lookup names: an e-mail address, a phone number or the lookup password.
    pub fn parse(email: Option<&str>, phone: Option<&str>, password: Option<&str>) -> Result<Proof, Refusal> {
        match (given(email), given(phone), password.filter(|p| !p.is_empty())) {
            (Some(e), None, None) => Ok(Proof::Email(Email::parse(e)?)),
            (None, Some(p), None) => Ok(Proof::Phone(Phone::parse(p)?)),
            (None, None, Some(p)) if p.chars().count() <= LOOKUP_PASSWORD_LEN_MAX => Ok(Proof::Password(p.to_string())),
            (None, None, Some(_)) => Err(Refusal::unprocessable(
                "invalid_lookup_password",
                format!("lookup_password is at most {LOOKUP_PASSWORD_LEN_MAX} characters"),
            )),
            _ => Err(Refusal::unprocessable(
                "invalid_lookup",
                "a lookup names the order number and one of: email, phone, password",
            )),
        }
    }

    /// Whether the order's contact is the one named (a password is checked against its hash by
    /// the caller).
    pub fn matches_contact(&self, contact: &Contact) -> bool {
        match self {
            Proof::Email(e) => contact.email.as_ref() == Some(e),
            Proof::Phone(p) => contact.phone.as_ref() == Some(p),
            Proof::Password(_) => false,
        }
    }

    /// The key the per-contact limit counts a lookup under (the password's: the order's).
    pub fn limit_key(&self) -> Option<&str> {
        match self {
            Proof::Email(e) => Some(e.as_str()),
            Proof::Phone(p) => Some(p.as_str()),
            Proof::Password(_) => None,
        }
    }
}

/// What a link to an order can do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Good: the order may be shown, and its keys revealed once.
    Open,
    /// Past its expiry.
    Expired,
    /// Its one reveal has happened.
    Used,
}

/// The state of a link that expires at `expires_at` and was used at `used_at`, at `now`.
pub fn link_state(expires_at: i64, used_at: Option<i64>, now: i64) -> LinkState {
    match used_at {
        Some(_) => LinkState::Used,
        None if now >= expires_at => LinkState::Expired,
        None => LinkState::Open,
    }
}

/// The refusal of a link that is not open.
pub fn link_refusal(state: LinkState) -> Option<Refusal> {
    match state {
        LinkState::Open => None,
        LinkState::Expired => Some(Refusal::new(
            RefusalKind::Conflict,
            "link_expired",
            "this link has expired; look the order up again for a new one",
        )),
        LinkState::Used => Some(Refusal::new(
            RefusalKind::Conflict,
            "link_used",
            "this link has been used; look the order up again for a new one",
        )),
    }
}

/// The expiry of a link made at `now` that stays good for `hours`.
pub fn link_expires_at(now: i64, hours: u64) -> i64 {
    let ms = i64::try_from(hours.min(LINK_HOURS_MAX)).unwrap_or(0) * 3_600_000;
    now.saturating_add(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_is_checked_and_kept_in_lower_case() {
        assert_eq!(Email::parse(" Buyer.One@Example.COM ").unwrap().as_str(), "buyer.one@example.com");
        assert_eq!(Email::parse("张三@例子.中国").unwrap().as_str(), "张三@例子.中国");
        for bad in ["", "no-at", "a@b", "a@@b.c", "a b@c.d", "@c.d", "a@-c.d", "a@c..d", ".a@c.d", "a\u{7}@c.d"] {
            assert_eq!(Email::parse(bad).unwrap_err().code, "invalid_contact", "{bad:?}");
        }
        let long = format!("{}@example.com", "a".repeat(65));
        assert!(Email::parse(&long).is_err());
        assert_eq!(Email::parse("alice@example.com").unwrap().masked(), "a***@example.com");
    }

    #[test]
    fn phone_keeps_its_digits_and_plus() {
        assert_eq!(Phone::parse("+86 138-0013 8000").unwrap().as_str(), "+8613800138000");
        assert_eq!(Phone::parse("(030) 1234.567").unwrap().as_str(), "0301234567");
        for bad in ["", "12345", "+", "1234567890123456", "12a4567", "++8613800138000", "138 0013 8000 ext 1"] {
            assert!(Phone::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_lookup_names_one_proof() {
        assert_eq!(
            Proof::parse(Some("A@b.cn"), None, None).unwrap(),
            Proof::Email(Email::stored("a@b.cn".to_string()))
        );
        assert!(matches!(Proof::parse(None, None, Some("secret1")).unwrap(), Proof::Password(_)));
        assert_eq!(Proof::parse(None, None, None).unwrap_err().code, "invalid_lookup");
        assert_eq!(Proof::parse(Some("a@b.cn"), Some("13800138000"), None).unwrap_err().code, "invalid_lookup");
        let contact = Contact::parse(Some("a@b.cn"), Some("+86 13800138000")).unwrap();
        assert!(Proof::parse(Some("A@B.cn"), None, None).unwrap().matches_contact(&contact));
        assert!(Proof::parse(None, Some("+86-138-0013-8000"), None).unwrap().matches_contact(&contact));
        assert!(!Proof::parse(None, Some("13800138000"), None).unwrap().matches_contact(&contact));
        assert!(!Proof::parse(None, None, Some("secret1")).unwrap().matches_contact(&contact));
    }

    #[test]
    fn a_link_is_open_until_used_or_expired() {
        assert_eq!(link_state(100, None, 99), LinkState::Open);
        assert_eq!(link_state(100, None, 100), LinkState::Expired);
        assert_eq!(link_state(100, Some(50), 60), LinkState::Used);
        assert_eq!(link_expires_at(0, 24), 86_400_000);
        assert_eq!(link_expires_at(0, 100_000), 720 * 3_600_000);
        assert_eq!(link_refusal(LinkState::Used).unwrap().code, "link_used");
        assert!(link_refusal(LinkState::Open).is_none());
    }

    #[test]
    fn lookup_password_limits() {
        assert!(check_lookup_password("secret").is_ok());
        assert_eq!(check_lookup_password("short").unwrap_err().code, "invalid_lookup_password");
        assert!(check_lookup_password(&"x".repeat(129)).is_err());
        assert!(check_lookup_password("tab\there").is_err());
    }
}
