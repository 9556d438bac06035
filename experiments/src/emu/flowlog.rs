//! Per-flow delivered bytes, binned in time: an extension over Mahimahi, whose log has no flow
//! identifiers (docs/mahimahi.md §5). Counts the TCP payload of every IPv4
//! packet the uplink hands to the receiver, per (source port, destination port) and bin, so
//! throughput over time per flow is measured on the link's own clock.
//!
//! File format (`--flow-log`): `# init timestamp: <epoch ms>`, `# bin ms: <n>`, then CSV lines
//! `bin_start_ms,src_port,dst_port,payload_bytes` (ms since the init timestamp).

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::trace::MICROS_PER_MILLI;

/// Bin width, ms.
pub const BIN_MS: u64 = 100;
/// Bytes of the TUN packet-information header before the IP header.
const TUN_HEADER: usize = 4;
/// IP protocol number of TCP.
const PROTO_TCP: u8 = 6;

/// Accumulates payload bytes per (bin, src port, dst port).
#[derive(Debug, Default)]
pub struct FlowLog {
    bins: BTreeMap<(u64, u16, u16), u64>,
}

/// (source port, destination port, TCP payload bytes) of a TUN frame holding IPv4/TCP.
pub fn tcp_payload(frame: &[u8]) -> Option<(u16, u16, u64)> {
    let ip = frame.get(TUN_HEADER..)?;
    let first = *ip.first()?;
    if first >> 4 != 4 || *ip.get(9)? != PROTO_TCP {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let tcp = ip.get(ihl..)?;
    let sport = u16::from_be_bytes([*tcp.first()?, *tcp.get(1)?]);
    let dport = u16::from_be_bytes([*tcp.get(2)?, *tcp.get(3)?]);
    let doff = usize::from(*tcp.get(12)? >> 4) * 4;
    Some((sport, dport, total.saturating_sub(ihl + doff) as u64))
}

impl FlowLog {
    /// Records a frame delivered at `t_us` (µs since the emulator started).
    pub fn record(&mut self, t_us: u64, frame: &[u8]) {
        if let Some((s, d, bytes)) = tcp_payload(frame)
            && bytes > 0
        {
            let bin = t_us / MICROS_PER_MILLI / BIN_MS * BIN_MS;
            *self.bins.entry((bin, s, d)).or_default() += bytes;
        }
    }

    /// Writes the file.
    pub fn write(&self, mut out: impl Write, init_epoch_ms: u64) -> io::Result<()> {
        writeln!(out, "# init timestamp: {init_epoch_ms}")?;
        writeln!(out, "# bin ms: {BIN_MS}")?;
        for ((bin, s, d), bytes) in &self.bins {
            writeln!(out, "{bin},{s},{d},{bytes}")?;
        }
        out.flush()
    }
}

/// One line of the file: (bin start ms, source port, destination port, payload bytes).
pub type Row = (u64, u16, u16, u64);

/// A parsed flow log: init timestamp and rows.
pub fn parse(text: &str) -> (Option<u64>, Vec<Row>) {
    let mut init = None;
    let mut rows = Vec::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("# init timestamp:") {
            init = v.trim().parse().ok();
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if let [b, s, d, n] = f[..]
            && let (Ok(b), Ok(s), Ok(d), Ok(n)) = (b.parse(), s.parse(), d.parse(), n.parse())
        {
            rows.push((b, s, d, n));
        }
    }
    (init, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
        let total = 20 + 32 + payload;
        let mut f = vec![0, 0, 8, 0];
        let mut ip = vec![0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[9] = PROTO_TCP;
        let mut tcp = vec![0u8; 32];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[12] = 8 << 4;
        f.extend(ip);
        f.extend(tcp);
        f.extend(vec![0u8; payload]);
        f
    }

    #[test]
    fn counts_tcp_payload_per_flow_and_bin() {
        assert_eq!(
            tcp_payload(&frame(40001, 5201, 1448)),
            Some((40001, 5201, 1448))
        );
        let mut log = FlowLog::default();
        log.record(50_000, &frame(40001, 5201, 1448));
        log.record(99_999, &frame(40001, 5201, 1448));
        log.record(100_000, &frame(40001, 5201, 1000));
        log.record(100_000, &frame(40002, 5202, 0)); // a pure ACK carries no payload
        log.record(100_000, &[0, 0, 0x86, 0xdd, 0x60]); // not IPv4
        let mut out = Vec::new();
        log.write(&mut out, 7).expect("in memory");
        let text = String::from_utf8(out).expect("ascii");
        assert_eq!(
            text,
            "# init timestamp: 7\n# bin ms: 100\n0,40001,5201,2896\n100,40001,5201,1000\n"
        );
        let (init, rows) = parse(&text);
        assert_eq!(init, Some(7));
        assert_eq!(rows, [(0, 40001, 5201, 2896), (100, 40001, 5201, 1000)]);
    }

    #[test]
    fn ignores_truncated_frames() {
        let f = frame(1, 2, 10);
        for n in 0..30 {
            let _ = tcp_payload(&f[..n]);
        }
        assert_eq!(tcp_payload(&f[..10]), None);
    }
}
