//! Times for `jobs.list_jobs start_time=... end_time=...`: the common forms
//! `dateutil.parser.parse` reads, and the start time of a job from its jid.
//!
//! [`parse`] follows dateutil 2.x/4.x's parser (default `dayfirst=False`,
//! `yearfirst=False`) for the forms people type: ISO 8601 (`2015-03-16`,
//! `2015-03-16T19:00:00.5Z`, `+01:00` offsets), Salt's own `StartTime`
//! (`2015, Mar 16 19:00:00.123456`), month names (`Mar 16 2015 7:00 pm`,
//! `16 March 2015`), slashed or dotted dates (`03/16/2015`, `16.03.2015`), compact
//! `YYYYMMDD[HHMM[SS]]`, and a bare time (`19:00`, today). Missing fields come from today
//! at midnight (dateutil's default; today is taken in UTC here), two-digit years are put
//! within 50 years of now, and the three-number ambiguities are resolved with dateutil's
//! own rules. A string outside these forms is refused with dateutil's
//! `Unknown string format` error rather than guessed at; a weekday name is accepted only
//! next to a date (dateutil would move to the next such weekday). A time with a zone
//! (`Z`, `UTC`, `GMT`, `±HH[:MM]`) is converted to UTC, because job times are UTC; Salt
//! compares such a time with its naive job times and fails with a `TypeError`.

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta};

use crate::error::RunnerError;

/// dateutil's error class, as a traceback names it.
const PARSER_ERROR: &str = "dateutil.parser._parser.ParserError";

/// The start time of the job `jid` (`YYYYmmddHHMMSSffffff[_pid]`, UTC), if it has one.
pub(crate) fn jid_time(jid: &str) -> Option<NaiveDateTime> {
    let digits = match jid.len() {
        20 => jid,
        n if n > 21 && jid.as_bytes().get(20) == Some(&b'_') => jid.get(..20)?,
        _ => return None,
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let num = |from: usize, to: usize| digits.get(from..to)?.parse::<u32>().ok();
    let year = i32::try_from(num(0, 4)?).ok()?;
    NaiveDate::from_ymd_opt(year, num(4, 6)?, num(6, 8)?)?.and_hms_micro_opt(
        num(8, 10)?,
        num(10, 12)?,
        num(12, 14)?,
        num(14, 20)?,
    )
}

/// One token of the string (dateutil's `_timelex`, for the forms supported).
#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// A run of digits, with a decimal part when written `12.5` / `12,5`.
    Number {
        digits: String,
        fraction: Option<String>,
    },
    /// A run of letters.
    Word(String),
    /// One other character (whitespace collapsed to `' '`).
    Punct(char),
}

fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        if c.is_ascii_digit() {
            let start = i;
            while chars.get(i).is_some_and(char::is_ascii_digit) {
                i += 1;
            }
            let digits: String = chars[start..i].iter().collect();
            // `41.5` is one number; `16.03.2015` is three.
            let mut fraction = None;
            // (dateutil reads a comma as a decimal point after two digits or more.)
            let point = match chars.get(i) {
                Some('.') => true,
                Some(',') => i - start >= 2,
                _ => false,
            };
            if point && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
                let mut j = i + 1;
                while chars.get(j).is_some_and(char::is_ascii_digit) {
                    j += 1;
                }
                if chars.get(j) != Some(&'.')
                    && !(chars.get(i) == Some(&'.') && dotted_before(&tokens))
                {
                    fraction = Some(chars[i + 1..j].iter().collect());
                    i = j;
                }
            }
            tokens.push(Token::Number { digits, fraction });
        } else if c.is_alphabetic() {
            let start = i;
            while chars.get(i).is_some_and(|c| c.is_alphabetic()) {
                i += 1;
            }
            tokens.push(Token::Word(chars[start..i].iter().collect()));
        } else if c.is_whitespace() {
            while chars.get(i).is_some_and(|c| c.is_whitespace()) {
                i += 1;
            }
            tokens.push(Token::Punct(' '));
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

/// Whether the tokens end with `<number> .`: the dot of `16.03.2015` after `16`.
fn dotted_before(tokens: &[Token]) -> bool {
    matches!(
        tokens,
        [.., Token::Number { fraction: None, .. }, Token::Punct('.')]
    )
}

const MONTHS: [&[&str]; 12] = [
    &["jan", "january"],
    &["feb", "february"],
    &["mar", "march"],
    &["apr", "april"],
    &["may"],
    &["jun", "june"],
    &["jul", "july"],
    &["aug", "august"],
    &["sep", "sept", "september"],
    &["oct", "october"],
    &["nov", "november"],
    &["dec", "december"],
];

const WEEKDAYS: [&[&str]; 7] = [
    &["mon", "monday"],
    &["tue", "tuesday"],
    &["wed", "wednesday"],
    &["thu", "thursday"],
    &["fri", "friday"],
    &["sat", "saturday"],
    &["sun", "sunday"],
];

const JUMP: &[&str] = &[
    "at", "on", "and", "ad", "m", "t", "of", "st", "nd", "rd", "th",
];

fn month(word: &str) -> Option<i64> {
    let w = word.to_lowercase();
    MONTHS
        .iter()
        .position(|names| names.contains(&w.as_str()))
        .and_then(|i| i64::try_from(i + 1).ok())
}

fn is_weekday(word: &str) -> bool {
    let w = word.to_lowercase();
    WEEKDAYS.iter().any(|names| names.contains(&w.as_str()))
}

/// `Some(true)` for pm, `Some(false)` for am.
fn ampm(word: &str) -> Option<bool> {
    match word.to_lowercase().as_str() {
        "am" | "a" => Some(false),
        "pm" | "p" => Some(true),
        _ => None,
    }
}

fn is_jump(token: &Token) -> bool {
    match token {
        Token::Punct(c) => matches!(c, ' ' | '.' | ',' | ';' | '-' | '/' | '\''),
        Token::Word(w) => JUMP.contains(&w.to_lowercase().as_str()),
        Token::Number { .. } => false,
    }
}

/// (year, month, day), each if known.
type Resolved = (Option<i64>, Option<i64>, Option<i64>);

/// dateutil's `_ymd`: up to three date numbers, with what is known of each.
#[derive(Debug, Default)]
struct Ymd {
    values: Vec<i64>,
    year_idx: Option<usize>,
    month_idx: Option<usize>,
    century_specified: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Label {
    Year,
    Month,
}

impl Ymd {
    /// `append(digits)`: more than two digits make it the year.
    fn push_digits(&mut self, digits: &str) -> Result<(), ()> {
        let value: i64 = digits.parse().map_err(|_| ())?;
        let label = (digits.len() > 2).then_some(Label::Year);
        self.push(value, label)
    }

    fn push(&mut self, value: i64, label: Option<Label>) -> Result<(), ()> {
        let label = if value > 100 {
            Some(Label::Year)
        } else {
            label
        };
        if label == Some(Label::Year) {
            self.century_specified = true;
        }
        self.values.push(value);
        let at = self.values.len() - 1;
        match label {
            Some(Label::Year) if self.year_idx.is_some() => return Err(()),
            Some(Label::Year) => self.year_idx = Some(at),
            Some(Label::Month) if self.month_idx.is_some() => return Err(()),
            Some(Label::Month) => self.month_idx = Some(at),
            None => {}
        }
        Ok(())
    }

    fn could_be_day(&self, value: i64) -> bool {
        match self.month_idx.and_then(|m| self.values.get(m)) {
            None => (1..=31).contains(&value),
            Some(&m) => {
                let year = self
                    .year_idx
                    .and_then(|y| self.values.get(y))
                    .copied()
                    .unwrap_or(2000);
                (1..=days_in_month(year, m).unwrap_or(31)).contains(&value)
            }
        }
    }

    /// `resolve_ymd(yearfirst=False, dayfirst=False)`: (year, month, day).
    fn resolve(&self) -> Result<Resolved, ()> {
        let v = &self.values;
        let known = usize::from(self.year_idx.is_some()) + usize::from(self.month_idx.is_some());
        if (v.len() == known && known > 0) || (v.len() == 3 && known == 2) {
            let mut y = self.year_idx;
            let mut m = self.month_idx;
            let mut d = None;
            if v.len() == 3 && known == 2 {
                let missing = (0..3).find(|i| Some(*i) != y && Some(*i) != m);
                match (y, m) {
                    (None, _) => y = missing,
                    (_, None) => m = missing,
                    _ => d = missing,
                }
            }
            let at = |i: Option<usize>| i.and_then(|i| v.get(i)).copied();
            return Ok((at(y), at(m), at(d)));
        }
        let m = self.month_idx;
        Ok(match (v.as_slice(), m) {
            (v, _) if v.len() > 3 => return Err(()),
            ([], _) => (None, None, None),
            ([only], None) => {
                if *only > 31 {
                    (Some(*only), None, None)
                } else {
                    (None, None, Some(*only))
                }
            }
            ([only], Some(_)) => (None, Some(*only), None),
            ([a, b], Some(mi)) => {
                let (month, other) = if mi == 0 { (*a, *b) } else { (*b, *a) };
                if other > 31 {
                    (Some(other), Some(month), None)
                } else {
                    (None, Some(month), Some(other))
                }
            }
            ([a, b], None) => {
                if *a > 31 {
                    (Some(*a), Some(*b), None)
                } else if *b > 31 {
                    (Some(*b), Some(*a), None)
                } else {
                    (None, Some(*a), Some(*b))
                }
            }
            ([a, b, c], Some(0)) => {
                if *b > 31 {
                    (Some(*b), Some(*a), Some(*c))
                } else {
                    (Some(*c), Some(*a), Some(*b))
                }
            }
            ([a, b, c], Some(1)) => {
                if *a > 31 {
                    (Some(*a), Some(*b), Some(*c))
                } else {
                    (Some(*c), Some(*b), Some(*a))
                }
            }
            ([a, b, c], Some(_)) => {
                if *b > 31 {
                    (Some(*b), Some(*c), Some(*a))
                } else {
                    (Some(*a), Some(*c), Some(*b))
                }
            }
            ([a, b, c], None) => {
                if *a > 31 || self.year_idx == Some(0) {
                    (Some(*a), Some(*b), Some(*c))
                } else if *a > 12 {
                    (Some(*c), Some(*b), Some(*a))
                } else {
                    (Some(*c), Some(*a), Some(*b))
                }
            }
            _ => return Err(()),
        })
    }
}

fn days_in_month(year: i64, month: i64) -> Option<i64> {
    let year = i32::try_from(year).ok()?;
    let month = u32::try_from(month).ok()?;
    let first = NaiveDate::from_ymd_opt(year, month, 1)?;
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year.checked_add(1)?, 1, 1)?
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)?
    };
    Some((next - first).num_days())
}

/// What the tokens said.
#[derive(Debug, Default)]
struct Fields {
    ymd: Ymd,
    hour: Option<i64>,
    minute: Option<i64>,
    second: Option<i64>,
    micro: Option<i64>,
    weekday: bool,
    /// Seconds east of UTC.
    offset: Option<i64>,
    /// A zone name dateutil does not know (ignored, as dateutil ignores it).
    zone_name: bool,
}

impl Fields {
    fn is_empty(&self) -> bool {
        self.ymd.values.is_empty()
            && self.hour.is_none()
            && self.minute.is_none()
            && self.second.is_none()
            && self.micro.is_none()
            && !self.weekday
            && self.offset.is_none()
            && !self.zone_name
    }
}

fn number(tok: Option<&Token>) -> Option<(&str, Option<&str>)> {
    match tok {
        Some(Token::Number { digits, fraction }) => Some((digits.as_str(), fraction.as_deref())),
        _ => None,
    }
}

/// Microseconds of a fraction written after a decimal point (six digits, truncated).
fn micros(fraction: &str) -> i64 {
    let mut digits: String = fraction.chars().take(6).collect();
    while digits.len() < 6 {
        digits.push('0');
    }
    digits.parse().unwrap_or(0)
}

fn int(digits: &str) -> Result<i64, ()> {
    digits.parse().map_err(|_| ())
}

/// dateutil's `_adjust_ampm`.
fn adjust_ampm(hour: i64, pm: bool) -> i64 {
    if hour < 12 && pm {
        hour + 12
    } else if hour == 12 && !pm {
        0
    } else {
        hour
    }
}

/// The token loop of dateutil's `_parse` (not fuzzy).
fn scan(tokens: &[Token]) -> Result<Fields, ()> {
    let mut f = Fields::default();
    let mut i = 0;
    while let Some(tok) = tokens.get(i) {
        match tok {
            Token::Number { digits, fraction } => {
                i = numeric(tokens, i, digits, fraction.as_deref(), &mut f)?;
            }
            Token::Word(w) if is_weekday(w) => f.weekday = true,
            Token::Word(w) if month(w).is_some() => {
                f.ymd.push(month(w).ok_or(())?, Some(Label::Month))?;
                if let Some(Token::Punct(sep @ ('-' | '/'))) = tokens.get(i + 1) {
                    // Jan-01[-99]
                    let (d, _) = number(tokens.get(i + 2)).ok_or(())?;
                    f.ymd.push_digits(d)?;
                    if tokens.get(i + 3) == Some(&Token::Punct(*sep)) {
                        let (y, _) = number(tokens.get(i + 4)).ok_or(())?;
                        f.ymd.push_digits(y)?;
                        i += 2;
                    }
                    i += 2;
                }
            }
            Token::Word(w) if ampm(w).is_some() => {
                let hour = f.hour.ok_or(())?;
                if !(0..=12).contains(&hour) {
                    return Err(());
                }
                f.hour = Some(adjust_ampm(hour, ampm(w) == Some(true)));
            }
            Token::Word(w)
                if f.hour.is_some()
                    && f.offset.is_none()
                    && !f.zone_name
                    && w.chars().count() <= 5
                    && (w.chars().all(|c| c.is_ascii_uppercase()) || w == "z") =>
            {
                if matches!(w.as_str(), "UTC" | "GMT" | "Z" | "z") {
                    f.offset = Some(0);
                } else {
                    f.zone_name = true;
                }
            }
            Token::Punct(sign @ ('+' | '-')) if f.hour.is_some() && f.offset.is_none() => {
                let (d, _) = number(tokens.get(i + 1)).ok_or(())?;
                let (h, m) = if d.len() == 4 {
                    (int(&d[..2])?, int(&d[2..])?)
                } else if tokens.get(i + 2) == Some(&Token::Punct(':')) {
                    let (m, _) = number(tokens.get(i + 3)).ok_or(())?;
                    i += 2;
                    (int(d)?, int(m)?)
                } else if d.len() <= 2 {
                    (int(d)?, 0)
                } else {
                    return Err(());
                };
                let sign = if *sign == '+' { 1 } else { -1 };
                f.offset = Some(sign * (h * 3600 + m * 60));
                i += 1;
            }
            other if is_jump(other) => {}
            _ => return Err(()),
        }
        i += 1;
    }
    Ok(f)
}

/// dateutil's `_parse_numeric_token` for the supported forms; answers the index of the
/// last token used.
fn numeric(
    tokens: &[Token],
    i: usize,
    digits: &str,
    fraction: Option<&str>,
    f: &mut Fields,
) -> Result<usize, ()> {
    let len = digits.len();
    let next = tokens.get(i + 1);
    let mut i = i;
    if f.ymd.values.len() == 3
        && (len == 2 || len == 4)
        && fraction.is_none()
        && f.hour.is_none()
        && next != Some(&Token::Punct(':'))
    {
        // 19990101T23[59]
        f.hour = Some(int(&digits[..2])?);
        if len == 4 {
            f.minute = Some(int(&digits[2..])?);
        }
    } else if len == 6 && fraction.is_none() && f.ymd.values.is_empty() {
        // YYMMDD
        f.ymd.push_digits(&digits[..2])?;
        f.ymd.push_digits(&digits[2..4])?;
        f.ymd.push_digits(&digits[4..])?;
    } else if len == 6 {
        // 19990101T235959[.59]
        f.hour = Some(int(&digits[..2])?);
        f.minute = Some(int(&digits[2..4])?);
        f.second = Some(int(&digits[4..])?);
        f.micro = fraction.map(micros);
    } else if matches!(len, 8 | 12 | 14) && fraction.is_none() {
        // YYYYMMDD[HHMM[SS]]
        f.ymd.push_digits(&digits[..4])?;
        f.ymd.push_digits(&digits[4..6])?;
        f.ymd.push_digits(&digits[6..8])?;
        if len > 8 {
            f.hour = Some(int(&digits[8..10])?);
            f.minute = Some(int(&digits[10..12])?);
        }
        if len > 12 {
            f.second = Some(int(&digits[12..])?);
        }
    } else if next == Some(&Token::Punct(':')) && fraction.is_none() {
        // HH:MM[:SS[.ss]]
        let (minute, min_fraction) = number(tokens.get(i + 2)).ok_or(())?;
        if min_fraction.is_some() || f.hour.is_some() {
            return Err(());
        }
        f.hour = Some(int(digits)?);
        f.minute = Some(int(minute)?);
        i += 2;
        if tokens.get(i + 1) == Some(&Token::Punct(':')) {
            let (second, sec_fraction) = number(tokens.get(i + 2)).ok_or(())?;
            f.second = Some(int(second)?);
            f.micro = sec_fraction.map(micros);
            i += 2;
        }
    } else if fraction.is_some() {
        return Err(());
    } else if let Some(Token::Punct(sep @ ('-' | '/' | '.'))) = next {
        f.ymd.push_digits(digits)?;
        let sep = *sep;
        match tokens.get(i + 2) {
            Some(tok) if !is_jump(tok) => {
                match tok {
                    Token::Number {
                        digits,
                        fraction: None,
                    } => f.ymd.push_digits(digits)?,
                    Token::Word(w) => f.ymd.push(month(w).ok_or(())?, Some(Label::Month))?,
                    _ => return Err(()),
                }
                if tokens.get(i + 3) == Some(&Token::Punct(sep)) {
                    match tokens.get(i + 4) {
                        Some(Token::Word(w)) if month(w).is_some() => {
                            f.ymd.push(month(w).ok_or(())?, Some(Label::Month))?
                        }
                        Some(Token::Number {
                            digits,
                            fraction: None,
                        }) => f.ymd.push_digits(digits)?,
                        _ => return Err(()),
                    }
                    i += 2;
                }
                i += 1;
            }
            _ => {}
        }
        i += 1;
    } else if next.is_none_or(is_jump) {
        let pm = match tokens.get(i + 2) {
            Some(Token::Word(w)) => ampm(w),
            _ => None,
        };
        match pm {
            Some(pm) => {
                // 12 am
                f.hour = Some(adjust_ampm(int(digits)?, pm));
                i += 1;
            }
            None => f.ymd.push_digits(digits)?,
        }
        i += 1;
    } else if let Some(pm) = match next {
        Some(Token::Word(w)) => ampm(w),
        _ => None,
    } {
        // 12am
        let hour = int(digits)?;
        if !(0..24).contains(&hour) {
            return Err(());
        }
        f.hour = Some(adjust_ampm(hour, pm));
        i += 1;
    } else if f.ymd.could_be_day(int(digits)?) {
        f.ymd.push_digits(digits)?;
    } else {
        return Err(());
    }
    Ok(i)
}

fn parser_error(message: String) -> RunnerError {
    RunnerError::exception(PARSER_ERROR, message)
}

/// `dateutil.parser.parse(text)` for the forms listed in the module docs, with missing
/// fields taken from `today` at midnight; a time with a zone is answered in UTC.
pub(crate) fn parse(text: &str, today: NaiveDate) -> Result<NaiveDateTime, RunnerError> {
    let unknown = || parser_error(format!("Unknown string format: {text}"));
    let fields = scan(&tokenize(text)).map_err(|()| unknown())?;
    if fields.is_empty() {
        return Err(parser_error(format!(
            "String does not contain a date: {text}"
        )));
    }
    let (year, month, day) = fields.ymd.resolve().map_err(|()| unknown())?;
    if fields.weekday && day.is_none() {
        return Err(unknown());
    }
    let invalid = |what: &str| parser_error(format!("{what}: {text}"));
    let this_year = i64::from(today.year());
    let year = match year {
        Some(y) if y < 100 && !fields.ymd.century_specified => {
            let y = y + this_year / 100 * 100;
            if y >= this_year + 50 {
                y - 100
            } else if y < this_year - 50 {
                y + 100
            } else {
                y
            }
        }
        Some(y) => y,
        None => this_year,
    };
    let month = month.unwrap_or(i64::from(today.month()));
    if !(1..=12).contains(&month) {
        return Err(invalid("month must be in 1..12"));
    }
    let last_day = days_in_month(year, month).ok_or_else(|| invalid("year is out of range"))?;
    let day = match day {
        Some(d) => d,
        // dateutil keeps today's day, within the month.
        None => i64::from(today.day()).min(last_day),
    };
    if !(1..=last_day).contains(&day) {
        return Err(invalid("day is out of range for month"));
    }
    let date = i32::try_from(year)
        .ok()
        .and_then(|y| {
            NaiveDate::from_ymd_opt(y, u32::try_from(month).ok()?, u32::try_from(day).ok()?)
        })
        .ok_or_else(|| invalid("year is out of range"))?;
    let part = |v: Option<i64>, max: i64, what: &str| -> Result<u32, RunnerError> {
        let v = v.unwrap_or(0);
        if (0..max).contains(&v) {
            u32::try_from(v).map_err(|_| invalid(what))
        } else {
            Err(invalid(what))
        }
    };
    let time = NaiveTime::from_hms_micro_opt(
        part(fields.hour, 24, "hour must be in 0..23")?,
        part(fields.minute, 60, "minute must be in 0..59")?,
        part(fields.second, 60, "second must be in 0..59")?,
        part(fields.micro, 1_000_000, "microsecond must be in 0..999999")?,
    )
    .ok_or_else(unknown)?;
    let local = date.and_time(time);
    Ok(match fields.offset {
        Some(offset) => local
            .checked_sub_signed(TimeDelta::seconds(offset))
            .ok_or_else(|| invalid("year is out of range"))?,
        None => local,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").expect("test time")
    }

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 5, 31).expect("date")
    }

    #[test]
    fn common_forms_parse_as_dateutil_does() {
        let cases = [
            ("2015-03-16", "2015-03-16 00:00:00"),
            ("2015-03-16 19:00", "2015-03-16 19:00:00"),
            ("2015-03-16T19:00:05.25", "2015-03-16 19:00:05.25"),
            ("2015-03-16T19:00:05Z", "2015-03-16 19:00:05"),
            ("2015-03-16T19:00:05+01:00", "2015-03-16 18:00:05"),
            ("2015-03-16 19:00 -0130", "2015-03-16 20:30:00"),
            ("2015, Mar 16 19:00", "2015-03-16 19:00:00"),
            ("2015, Mar 16 19:00:00.123456", "2015-03-16 19:00:00.123456"),
            ("Mar 16 2015 7:00 pm", "2015-03-16 19:00:00"),
            ("March 16, 2015", "2015-03-16 00:00:00"),
            ("16 March 2015 12am", "2015-03-16 00:00:00"),
            ("Monday, March 16, 2015 10:30", "2015-03-16 10:30:00"),
            ("03/16/2015", "2015-03-16 00:00:00"),
            ("2015/03/16 01:02:03", "2015-03-16 01:02:03"),
            ("16.03.2015", "2015-03-16 00:00:00"),
            ("16-Mar-2015", "2015-03-16 00:00:00"),
            ("Mar-16-2015", "2015-03-16 00:00:00"),
            ("20150316", "2015-03-16 00:00:00"),
            ("20150316T1900", "2015-03-16 19:00:00"),
            ("201503161900", "2015-03-16 19:00:00"),
            ("150316", "2016-03-15 00:00:00"),
            ("12/13/2015", "2015-12-13 00:00:00"),
            ("13/12/2015", "2015-12-13 00:00:00"),
            ("2015.03.16", "2015-03-16 00:00:00"),
            ("16 Mar 15", "2015-03-16 00:00:00"),
            ("7pm", "2026-05-31 19:00:00"),
            ("2015-03-16 19:00 EST", "2015-03-16 19:00:00"),
            ("03/16/15", "2015-03-16 00:00:00"),
            ("03/16/80", "1980-03-16 00:00:00"),
            ("19:00", "2026-05-31 19:00:00"),
            ("Feb 2015", "2015-02-28 00:00:00"),
            ("Mar 5", "2026-03-05 00:00:00"),
            ("2015", "2015-05-31 00:00:00"),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text, today()).ok(), Some(dt(want)), "{text}");
        }
    }

    #[test]
    fn unknown_forms_and_impossible_dates_are_parser_errors() {
        let err = |t: &str| parse(t, today()).err().map(|e| e.to_string());
        assert_eq!(
            err("next tuesday"),
            Some(format!(
                "{PARSER_ERROR}: Unknown string format: next tuesday"
            ))
        );
        assert_eq!(
            err(""),
            Some(format!("{PARSER_ERROR}: String does not contain a date: "))
        );
        assert_eq!(
            err("25:00"),
            Some(format!("{PARSER_ERROR}: hour must be in 0..23: 25:00"))
        );
        assert_eq!(
            err("2015-02-30"),
            Some(format!(
                "{PARSER_ERROR}: day is out of range for month: 2015-02-30"
            ))
        );
        for bad in [
            "10.5",
            "pm",
            "1/2/3/4",
            "Monday",
            "2015-03-16 19:00 +12345",
            "2015-3-6 1:2:3,5",
        ] {
            assert!(parse(bad, today()).is_err(), "{bad}");
        }
    }

    #[test]
    fn job_times_come_from_the_jid() {
        assert_eq!(
            jid_time("20240101120000123456"),
            Some(dt("2024-01-01 12:00:00.123456"))
        );
        assert_eq!(
            jid_time("20240101120000123456_77"),
            Some(dt("2024-01-01 12:00:00.123456"))
        );
        for bad in [
            "req",
            "2024010112000012345x",
            "20241301120000123456",
            "20240101120000123456_",
        ] {
            assert_eq!(jid_time(bad), None, "{bad}");
        }
    }
}
