//! Civil UTC time from Unix milliseconds, for run ids and reports (no time-zone
//! database needed, so no dependency).

/// A UTC calendar date and time of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl UtcTime {
    pub fn from_unix_ms(unix_ms: u64) -> Self {
        let secs = unix_ms / 1000;
        let (days, day_secs) = ((secs / 86_400) as i64, secs % 86_400);
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm), valid for
        // the proleptic Gregorian calendar.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        UtcTime {
            year: yoe + era * 400 + i64::from(month <= 2),
            month: month as u32,
            day: day as u32,
            hour: (day_secs / 3600) as u32,
            minute: (day_secs % 3600 / 60) as u32,
            second: (day_secs % 60) as u32,
        }
    }
}

impl std::fmt::Display for UtcTime {
    /// `YYYY-MM-DD HH:MM:SS UTC`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::UtcTime;

    #[test]
    fn civil_dates() {
        assert_eq!(
            UtcTime::from_unix_ms(0).to_string(),
            "1970-01-01 00:00:00 UTC"
        );
        assert_eq!(
            UtcTime::from_unix_ms(951_782_400_000 + 3_723_000).to_string(),
            "2000-02-29 01:02:03 UTC"
        );
        assert_eq!(
            UtcTime::from_unix_ms(1_767_268_800_000).to_string(),
            "2026-01-01 12:00:00 UTC"
        );
    }
}
