//! Time comes from an injected clock so expiry can be tested without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch, UTC. The one time unit stored in the database.
pub type Millis = i64;

pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> Millis;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        let now = time::OffsetDateTime::now_utc();
        i64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
    }
}

/// A clock tests move by hand. Starts at the system time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock(Arc::new(AtomicI64::new(SystemClock.now_ms())))
    }
}

impl ManualClock {
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

pub type SharedClock = Arc<dyn Clock>;

/// RFC 3339 UTC rendering of a stored timestamp, as the contract requires.
pub fn rfc3339(ms: Millis) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::default();
        let t = c.now_ms();
        c.advance_ms(1500);
        assert_eq!(c.now_ms(), t + 1500);
    }
}

/// A time zone people read times in: an IANA name (`Asia/Shanghai`, `Europe/Berlin` with its
/// daylight-saving rules) or a fixed offset (`UTC`, `+08:00`).
#[derive(Debug, Clone)]
pub struct Zone(jiff::tz::TimeZone);

impl Zone {
    pub fn utc() -> Zone {
        Zone(jiff::tz::TimeZone::UTC)
    }

    /// `UTC`, `Z`, an offset such as `+08:00` (`+8`, `+0800` and `UTC+8` are read too), or an
    /// IANA name.
    pub fn parse(text: &str) -> Option<Zone> {
        let t = text.trim();
        if let Some(offset) = parse_offset(t) {
            return Some(Zone::from(offset));
        }
        // A name: letters, digits, `/`, `_`, `-`, `+` (`Etc/GMT+8`), as the tz database writes them.
        let name_like = !t.is_empty()
            && t.len() <= 64
            && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+'));
        name_like.then(|| jiff::tz::TimeZone::get(t).ok()).flatten().map(Zone)
    }

    /// The zone's offset from UTC at instant `at`.
    pub fn offset_at(&self, at: Millis) -> time::UtcOffset {
        let seconds = jiff::Timestamp::from_millisecond(at).map_or(0, |ts| self.0.to_offset(ts).seconds());
        time::UtcOffset::from_whole_seconds(seconds).unwrap_or(time::UtcOffset::UTC)
    }

    /// The IANA name, for a zone given by one.
    pub fn iana_name(&self) -> Option<&str> {
        self.0.iana_name().filter(|n| *n != "UTC")
    }
}

impl Default for Zone {
    fn default() -> Self {
        Zone::utc()
    }
}

impl From<time::UtcOffset> for Zone {
    fn from(offset: time::UtcOffset) -> Zone {
        match jiff::tz::Offset::from_seconds(offset.whole_seconds()) {
            Ok(o) => Zone(jiff::tz::TimeZone::fixed(o)),
            Err(_) => Zone::utc(),
        }
    }
}

/// Two zones are the same when they have one name, or are the same fixed offset.
impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        match (self.0.iana_name(), other.0.iana_name()) {
            (Some(a), Some(b)) => a == b,
            (None, None) => self.offset_at(0) == other.offset_at(0),
            _ => false,
        }
    }
}

impl Eq for Zone {}

/// `UTC`, `Z` or an offset such as `+08:00` (`+8`, `+0800`, `UTC+8` are read too), at most 14 hours.
fn parse_offset(t: &str) -> Option<time::UtcOffset> {
    if t.eq_ignore_ascii_case("utc") || t.eq_ignore_ascii_case("z") {
        return Some(time::UtcOffset::UTC);
    }
    let t = t.strip_prefix("UTC").or_else(|| t.strip_prefix("utc")).unwrap_or(t);
    let (sign, rest) = match t.as_bytes().first()? {
        b'+' => (1i8, t.get(1..)?),
        b'-' => (-1i8, t.get(1..)?),
        _ => return None,
    };
    let (hours, minutes) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None if rest.len() == 4 => rest.split_at(2),
        None => (rest, "0"),
    };
    let (hours, minutes): (i8, i8) = (hours.parse().ok()?, minutes.parse().ok()?);
    if !(0..=14).contains(&hours) || !(0..60).contains(&minutes) {
        return None;
    }
    time::UtcOffset::from_hms(sign * hours, sign * minutes, 0).ok()
}

#[cfg(test)]
mod zone_tests {
    use super::*;

    const WINTER: Millis = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    const SUMMER: Millis = 1_782_864_000_000; // 2026-07-01T00:00:00Z

    #[test]
    fn offsets_and_names_are_read() {
        let h = |h: i8, m: i8| time::UtcOffset::from_hms(h, m, 0).unwrap();
        assert_eq!(Zone::parse("UTC").unwrap().offset_at(WINTER), time::UtcOffset::UTC);
        assert_eq!(Zone::parse("+08:00").unwrap().offset_at(WINTER), h(8, 0));
        assert_eq!(Zone::parse("UTC+8").unwrap().offset_at(WINTER), h(8, 0));
        assert_eq!(Zone::parse("-0530").unwrap().offset_at(WINTER), h(-5, -30));
        assert_eq!(Zone::parse("Asia/Shanghai").unwrap().offset_at(SUMMER), h(8, 0));
        assert_eq!(Zone::parse("Asia/Shanghai").unwrap().iana_name(), Some("Asia/Shanghai"));
        for bad in ["", "+15:00", "+08:60", "Mars/Olympus", "../etc/passwd", "Asia/Shanghai;"] {
            assert!(Zone::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_named_zone_follows_its_daylight_saving_rules() {
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        assert_eq!(berlin.offset_at(WINTER).whole_hours(), 1);
        assert_eq!(berlin.offset_at(SUMMER).whole_hours(), 2);
        assert_eq!(berlin, Zone::parse("Europe/Berlin").unwrap());
        assert_ne!(berlin, Zone::from(time::UtcOffset::from_hms(1, 0, 0).unwrap()));
    }
}
