//! Mahimahi's link log format (docs/mahimahi.md §5): writing it, and reading
//! it back for metrics and tests.
//!
//! ```text
//! # init timestamp: 1795304122116     epoch ms, t = 0 of all lines
//! # base timestamp: 34
//! 35 # 1504                           delivery opportunity
//! 72 + 56                             arrival into the queue, bytes
//! 72 - 93 1                           departure: bytes, ms spent in the link
//! 1733 d 1 1504                       drop: packets, bytes
//! ```

use std::io::{self, Write};

use super::link::LinkEvent;
use super::trace::{MICROS_PER_MILLI, OPPORTUNITY_BYTES};

/// Writes link events as Mahimahi log lines.
#[derive(Debug)]
pub struct LogWriter<W: Write> {
    out: W,
}

impl<W: Write> LogWriter<W> {
    /// Writes the header. `init_epoch_ms` is the wall-clock time of the emulator's t = 0,
    /// `base_ms` the link's start in ms after it.
    pub fn new(
        mut out: W,
        header: &[String],
        init_epoch_ms: u64,
        base_ms: u64,
    ) -> io::Result<Self> {
        for line in header {
            writeln!(out, "# {line}")?;
        }
        writeln!(out, "# init timestamp: {init_epoch_ms}")?;
        writeln!(out, "# base timestamp: {base_ms}")?;
        Ok(Self { out })
    }

    /// Appends one event.
    pub fn write(&mut self, event: LinkEvent) -> io::Result<()> {
        let ms = |t_us: u64| t_us / MICROS_PER_MILLI;
        match event {
            LinkEvent::Opportunity { t_us } => {
                writeln!(self.out, "{} # {OPPORTUNITY_BYTES}", ms(t_us))
            }
            LinkEvent::Arrival { t_us, size } => writeln!(self.out, "{} + {size}", ms(t_us)),
            LinkEvent::Departure {
                t_us,
                size,
                delay_us,
            } => writeln!(self.out, "{} - {size} {}", ms(t_us), ms(delay_us)),
            LinkEvent::Drop {
                t_us,
                packets,
                bytes,
            } => writeln!(self.out, "{} d {packets} {bytes}", ms(t_us)),
        }
    }

    /// Flushes buffered lines.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A malformed log line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("log line {line}: {text:?}")]
pub struct LogParseError {
    /// 1-based line number.
    pub line: usize,
    /// The line.
    pub text: String,
}

/// What a log says, summed (times in ms since the log's init timestamp).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LogSummary {
    /// Wall-clock ms of t = 0.
    pub init_epoch_ms: Option<u64>,
    /// Delivery opportunities.
    pub opportunities: u64,
    /// Packets that arrived, and their bytes.
    pub arrivals: u64,
    pub arrival_bytes: u64,
    /// Packets that left, and their bytes.
    pub departures: u64,
    pub departure_bytes: u64,
    /// Packets dropped, and their bytes.
    pub drops: u64,
    pub drop_bytes: u64,
    /// Every departure: (time, ms spent in the link), ms.
    pub departures_ms: Vec<(u64, u64)>,
    /// Largest occupancy reconstructed from the lines before an arrival, bytes. It counts a
    /// packet in transit (dequeued but not yet departed), so it may exceed the queue limit by
    /// at most one packet.
    pub max_backlog_bytes: u64,
}

fn field(it: &mut std::str::SplitWhitespace<'_>) -> Option<u64> {
    it.next()?.parse().ok()
}

impl LogSummary {
    /// Parses a whole log.
    pub fn parse(text: &str) -> Result<Self, LogParseError> {
        let mut s = Self::default();
        let mut backlog: i64 = 0;
        for (i, line) in text.lines().enumerate() {
            let bad = || LogParseError {
                line: i + 1,
                text: line.to_string(),
            };
            if let Some(rest) = line.strip_prefix('#') {
                if let Some(v) = rest.trim().strip_prefix("init timestamp:") {
                    s.init_epoch_ms = v.trim().parse().ok();
                }
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let mut it = line.split_whitespace();
            let t = field(&mut it).ok_or_else(bad)?;
            let kind = it.next().ok_or_else(bad)?;
            match kind {
                "#" => {
                    field(&mut it).ok_or_else(bad)?;
                    s.opportunities += 1;
                }
                "+" => {
                    let size = field(&mut it).ok_or_else(bad)?;
                    s.max_backlog_bytes = s.max_backlog_bytes.max(backlog.max(0) as u64);
                    backlog += size as i64;
                    s.arrivals += 1;
                    s.arrival_bytes += size;
                }
                "-" => {
                    let size = field(&mut it).ok_or_else(bad)?;
                    let delay = field(&mut it).ok_or_else(bad)?;
                    backlog -= size as i64;
                    s.departures += 1;
                    s.departure_bytes += size;
                    s.departures_ms.push((t, delay));
                }
                "d" => {
                    let packets = field(&mut it).ok_or_else(bad)?;
                    let bytes = field(&mut it).ok_or_else(bad)?;
                    backlog -= bytes as i64;
                    s.drops += packets;
                    s.drop_bytes += bytes;
                }
                _ => return Err(bad()),
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_mahimahi_lines_and_reads_them_back() {
        let mut w =
            LogWriter::new(Vec::new(), &["test".into()], 1_795_304_122_116, 34).expect("in memory");
        for e in [
            LinkEvent::Opportunity { t_us: 35_900 },
            LinkEvent::Arrival {
                t_us: 72_100,
                size: 56,
            },
            LinkEvent::Arrival {
                t_us: 72_100,
                size: 1504,
            },
            LinkEvent::Drop {
                t_us: 72_100,
                packets: 1,
                bytes: 1504,
            },
            LinkEvent::Departure {
                t_us: 93_000,
                size: 56,
                delay_us: 20_900,
            },
        ] {
            w.write(e).expect("in memory");
        }
        let text = String::from_utf8(w.out).expect("ascii");
        assert_eq!(
            text,
            "# test\n# init timestamp: 1795304122116\n# base timestamp: 34\n\
             35 # 1504\n72 + 56\n72 + 1504\n72 d 1 1504\n93 - 56 20\n"
        );
        let s = LogSummary::parse(&text).expect("valid");
        assert_eq!(s.init_epoch_ms, Some(1_795_304_122_116));
        assert_eq!(
            (s.opportunities, s.arrivals, s.departures, s.drops),
            (1, 2, 1, 1)
        );
        assert_eq!(s.departures_ms, [(93, 20)]);
        assert_eq!(s.max_backlog_bytes, 56);
        assert_eq!(s.arrivals, s.departures + s.drops);
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!(
            LogSummary::parse("12 x 3\n"),
            Err(LogParseError {
                line: 1,
                text: "12 x 3".into()
            })
        );
    }
}
