//! `--ack-trace FILE`: every ACK record the kernel hands the daemon, one CSV line each, for
//! finding what a congestion controller's measurements are made of (which ACKs carry the
//! RTT samples of an interval, what loss recovery does around a drop). Off by default: at
//! 50 Mbit/s a flow writes a few thousand lines a second.
//!
//! Times are CLOCK_MONOTONIC in µs, the clock of the agent's process too; a `create` line per
//! flow ties its ports to the agent's trace.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::shared::ccp_event;

/// The trace file's mode: readable by analysis tools run as another user, written by root.
const MODE: u32 = 0o644;

/// The columns, in order.
pub const HEADER: &str = "t_us,event,src_port,dst_port,rtt_us,acked_sacked,delivered,losses,\
snd_interval_us,rcv_interval_us,packets_out,sacked_out,lost_out,retrans_out,ca_state,\
cwnd_pkts,snd_una,fallback,ctl_cwnd_bytes,ctl_rate_bytes_per_sec";

/// What kind of record a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Create,
    Ack,
    Timeout,
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Event::Create => "create",
            Event::Ack => "ack",
            Event::Timeout => "timeout",
        }
    }
}

/// The daemon's decision in force for the flow when the record was read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    pub cwnd_bytes: u32,
    pub rate_bytes_per_sec: u32,
}

/// Writes one line, newline included, straight into `out` (no allocation per ACK). `rtt_us`
/// is empty when the ACK carried no sample.
fn write_line(
    out: &mut impl Write,
    ev: &ccp_event,
    event: Event,
    ports: (u16, u16),
    ctl: Control,
) -> std::io::Result<()> {
    write!(
        out,
        "{},{},{},{},",
        ev.now_ns / 1_000,
        event.name(),
        ports.0,
        ports.1
    )?;
    if ev.rtt_us >= 0 {
        write!(out, "{}", ev.rtt_us)?;
    }
    writeln!(
        out,
        ",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        ev.acked_sacked_pkts,
        ev.delivered_pkts,
        ev.losses_pkts,
        ev.snd_interval_us,
        ev.rcv_interval_us,
        ev.packets_out_pkts,
        ev.sacked_out_pkts,
        ev.lost_out_pkts,
        ev.retrans_out_pkts,
        ev.ca_state,
        ev.snd_cwnd_pkts,
        ev.snd_una,
        ev.in_fallback,
        ctl.cwnd_bytes,
        ctl.rate_bytes_per_sec,
    )
}

/// The open trace. A write error stops the trace (said once) and never the datapath.
pub struct AckTrace {
    out: Option<BufWriter<File>>,
    path: String,
}

impl AckTrace {
    /// Creates (or truncates) `path` with mode 0644 and writes the header.
    pub fn create(path: &Path) -> Result<Self, String> {
        let fail = |e: std::io::Error| format!("--ack-trace {}: {e}", path.display());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(MODE)
            .open(path)
            .map_err(fail)?;
        // An existing file keeps its old mode through open(); the umask narrows a new one.
        file.set_permissions(std::fs::Permissions::from_mode(MODE))
            .map_err(fail)?;
        let mut out = BufWriter::with_capacity(1 << 16, file);
        writeln!(out, "{HEADER}").map_err(fail)?;
        Ok(AckTrace {
            out: Some(out),
            path: path.display().to_string(),
        })
    }

    pub fn record(&mut self, ev: &ccp_event, event: Event, ports: (u16, u16), ctl: Control) {
        self.write(|out| write_line(out, ev, event, ports, ctl));
    }

    /// Pushes buffered lines to the file, so a reader sees them within a flush period.
    pub fn flush(&mut self) {
        self.write(|out| out.flush());
    }

    fn write(&mut self, f: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>) {
        if let Some(out) = self.out.as_mut()
            && let Err(e) = f(out)
        {
            eprintln!("ccp-ebpf: ack trace {} stopped: {e}", self.path);
            self.out = None;
        }
    }
}

impl Drop for AckTrace {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack() -> ccp_event {
        ccp_event {
            now_ns: 12_345_678_901,
            rtt_us: 30_250,
            acked_sacked_pkts: 2,
            delivered_pkts: 40,
            losses_pkts: 1,
            sacked_out_pkts: 3,
            lost_out_pkts: 1,
            retrans_out_pkts: 1,
            ca_state: 3,
            snd_cwnd_pkts: 50,
            snd_una: 7,
            ..Default::default()
        }
    }

    /// One line as text, without its newline.
    fn line(ev: &ccp_event, event: Event, ports: (u16, u16), ctl: Control) -> String {
        let mut out = Vec::new();
        write_line(&mut out, ev, event, ports, ctl).expect("writing to memory");
        String::from_utf8(out)
            .expect("ASCII")
            .trim_end()
            .to_string()
    }

    fn field<'a>(line: &'a str, name: &str) -> &'a str {
        let i = HEADER
            .split(',')
            .position(|h| h == name)
            .expect("a column of the header");
        line.split(',').nth(i).expect("a value for every column")
    }

    #[test]
    fn a_line_has_a_value_under_every_column() {
        let l = line(&ack(), Event::Ack, (40000, 5201), Control::default());
        assert_eq!(l.split(',').count(), HEADER.split(',').count());
        assert_eq!(field(&l, "t_us"), "12345678");
        assert_eq!(field(&l, "event"), "ack");
        assert_eq!(field(&l, "dst_port"), "5201");
        assert_eq!(field(&l, "rtt_us"), "30250");
        assert_eq!(field(&l, "losses"), "1");
        assert_eq!(field(&l, "ca_state"), "3");
        assert_eq!(field(&l, "cwnd_pkts"), "50");
    }

    #[test]
    fn an_ack_without_a_sample_leaves_the_rtt_empty() {
        let mut e = ack();
        e.rtt_us = -1;
        let ctl = Control {
            cwnd_bytes: 14_480,
            rate_bytes_per_sec: 625_000,
        };
        let l = line(&e, Event::Timeout, (1, 2), ctl);
        assert_eq!(field(&l, "rtt_us"), "");
        assert_eq!(field(&l, "event"), "timeout");
        assert_eq!(field(&l, "ctl_rate_bytes_per_sec"), "625000");
    }

    #[test]
    fn the_file_gets_its_mode_whatever_the_umask_and_keeps_every_line() {
        let dir = std::env::temp_dir().join(format!("ack-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let path = dir.join("acks.csv");
        std::fs::write(&path, "old").expect("an old file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("a narrow mode");
        {
            let mut t = AckTrace::create(&path).expect("the trace");
            for _ in 0..3 {
                t.record(&ack(), Event::Ack, (1, 2), Control::default());
            }
        }
        let mode = std::fs::metadata(&path)
            .expect("the file")
            .permissions()
            .mode()
            & 0o777;
        let text = std::fs::read_to_string(&path).expect("the file's text");
        std::fs::remove_dir_all(&dir).expect("removed");
        assert_eq!(mode, MODE);
        assert_eq!(text.lines().next(), Some(HEADER));
        assert_eq!(text.lines().count(), 4);
    }

    #[test]
    fn a_path_that_cannot_be_created_is_a_clear_error() {
        let Err(e) = AckTrace::create(Path::new("/nonexistent-dir/acks.csv")) else {
            panic!("created a file in a missing directory");
        };
        assert!(
            e.starts_with("--ack-trace /nonexistent-dir/acks.csv: "),
            "{e}"
        );
    }
}
