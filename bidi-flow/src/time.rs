//! Times on the wire: milliseconds since the Unix epoch, and RFC 3339 text in UTC as
//! JavaScript's `Date.toISOString` writes it (and as clients send it, in any offset).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 for a time before it.
#[must_use]
pub fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// `time` as RFC 3339 in UTC, to the millisecond (`2026-11-26T14:54:41.123Z`).
#[must_use]
pub fn rfc3339(time: SystemTime) -> String {
    let millis = unix_millis(time);
    let (days, rest) = (millis / 86_400_000, millis % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// The time RFC 3339 text names (`2026-11-26T14:54:41.123Z`, `2026-11-26t15:54:41+01:00`:
/// a date, `T`, a time with optional fractions of a second, and `Z` or an offset); `None` for
/// text that is not one, or a time before the Unix epoch. Fractions beyond the millisecond
/// are dropped.
#[must_use]
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    let number = |at: usize, len: usize| -> Option<u64> {
        let digits = bytes.get(at..at + len)?;
        digits.iter().try_fold(0, |n, &digit| {
            digit
                .is_ascii_digit()
                .then(|| n * 10 + u64::from(digit - b'0'))
        })
    };
    let at = |at: usize, byte: u8| bytes.get(at).is_some_and(|b| b.eq_ignore_ascii_case(&byte));
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':')) {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 2)?, number(8, 2)?);
    let (hour, minute, second) = (number(11, 2)?, number(14, 2)?, number(17, 2)?);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = 19;
    let mut millis = 0;
    if at(rest, b'.') {
        let digits = bytes[rest + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        for place in 0..3 {
            millis = millis * 10
                + if place < digits {
                    number(rest + 1 + place, 1)?
                } else {
                    0
                };
        }
        rest += 1 + digits;
    }
    let offset_minutes: i64 = match bytes.get(rest..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), ..] if bytes.len() == rest + 6 && at(rest + 3, b':') => {
            let (hours, minutes) = (number(rest + 1, 2)?, number(rest + 4, 2)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let minutes = i64::try_from(hours * 60 + minutes).ok()?;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day)?;
    let local = days * 86_400 + hour * 3600 + minute * 60 + second;
    let seconds = i64::try_from(local).ok()? - offset_minutes * 60;
    let seconds = u64::try_from(seconds).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(millis))
}

/// The days from 1970-01-01 to a proleptic Gregorian date on or after it (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year / 400;
    let yoe = year % 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn times_are_javascripts_iso_strings() {
        let at = |ms: u64| rfc3339(UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        // Date.UTC(2026, 10, 23, 1, 3, 44, 521)
        assert_eq!(at(1_795_395_824_521), "2026-11-23T01:03:44.521Z");
        assert_eq!(at(1_795_704_881_123), "2026-11-26T14:54:41.123Z");
        // A leap day, and the last millisecond of a century year that is a leap year.
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(978_307_199_999), "2000-12-31T23:59:59.999Z");
        assert_eq!(unix_millis(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }

    #[test]
    fn rfc3339_text_is_read_back() {
        for ms in [0, 951_782_400_000, 978_307_199_999, 1_795_704_881_123] {
            let at = UNIX_EPOCH + Duration::from_millis(ms);
            assert_eq!(parse_rfc3339(&rfc3339(at)), Some(at), "{ms}");
        }
        let read = |text: &str| parse_rfc3339(text).map(unix_millis);
        assert_eq!(read("2026-11-26T14:54:41Z"), Some(1_795_704_881_000));
        assert_eq!(
            read("2026-11-26t15:54:41.1234567+01:00"),
            Some(1_795_704_881_123)
        );
        assert_eq!(read("2026-11-26T09:24:41.5-05:30"), Some(1_795_704_881_500));
        for bad in [
            "",
            "2026-11-26",
            "2026-11-26T14:54:41",
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-26T24:00:00Z",
            "2026-11-26T14:54:41.Z",
            "2026-11-26T14:54:41+0100",
            "1969-12-31T23:59:59Z",
            "２026-11-26T14:54:41Z",
            "2026-11-26T14:54:41Zjunk",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
    }
}
