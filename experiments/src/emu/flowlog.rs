//! Per-flow delivered bytes, binned in time: an extension over Mahimahi, whose log has no flow
//! identifiers (docs/mahimahi.md §5). Counts the TCP payload, or the UDP payload (a QUIC
//! flow's packets, headers and all), of every IPv4 packet the uplink hands to the receiver,
//! per (source port, destination port) and bin, so throughput over time per flow is measured
//! on the link's own clock.
//!
//! File format (`--flow-log`): `# init timestamp: <epoch ms>`, `# bin ms: <n>`, then CSV lines
//! `bin_start_ms,src_port,dst_port,payload_bytes` (ms since the init timestamp).

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::trace::{MICROS_PER_MILLI, TUN_HEADER_BYTES};

/// Bin width, ms.
pub const BIN_MS: u64 = 100;
/// The TUN header before the IP header, as an index.
const TUN_HEADER: usize = TUN_HEADER_BYTES as usize;
/// IP protocol number of TCP.
const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
const PROTO_UDP: u8 = 17;
/// Bytes of a UDP header.
const UDP_HEADER: usize = 8;

/// Accumulates payload bytes per (bin, src port, dst port).
#[derive(Debug, Default)]
pub struct FlowLog {
    bins: BTreeMap<(u64, u16, u16), u64>,
}

/// (source port, destination port, payload bytes) of a TUN frame holding IPv4 with TCP or
/// UDP in it.
pub fn transport_payload(frame: &[u8]) -> Option<(u16, u16, u64)> {
    let ip = frame.get(TUN_HEADER..)?;
    let first = *ip.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let proto = *ip.get(9)?;
    let ihl = usize::from(first & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let l4 = ip.get(ihl..)?;
    let sport = u16::from_be_bytes([*l4.first()?, *l4.get(1)?]);
    let dport = u16::from_be_bytes([*l4.get(2)?, *l4.get(3)?]);
    let header = match proto {
        PROTO_TCP => usize::from(*l4.get(12)? >> 4) * 4,
        PROTO_UDP => UDP_HEADER,
        _ => return None,
    };
    Some((sport, dport, total.saturating_sub(ihl + header) as u64))
}

impl FlowLog {
    /// Records a frame delivered at `t_us` (µs since the emulator started).
    pub fn record(&mut self, t_us: u64, frame: &[u8]) {
        if let Some((s, d, bytes)) = transport_payload(frame)
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

    /// An IPv4 frame of protocol `proto` (TCP with a 32-byte header, or UDP).
    fn packet(proto: u8, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
        let l4_len = if proto == PROTO_TCP { 32 } else { UDP_HEADER };
        let total = 20 + l4_len + payload;
        let mut f = vec![0, 0, 8, 0];
        let mut ip = vec![0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[9] = proto;
        let mut l4 = vec![0u8; l4_len];
        l4[0..2].copy_from_slice(&sport.to_be_bytes());
        l4[2..4].copy_from_slice(&dport.to_be_bytes());
        if proto == PROTO_TCP {
            l4[12] = 8 << 4;
        }
        f.extend(ip);
        f.extend(l4);
        f.extend(vec![0u8; payload]);
        f
    }

    fn frame(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
        packet(PROTO_TCP, sport, dport, payload)
    }

    #[test]
    fn counts_tcp_and_udp_payload_per_flow_and_bin() {
        assert_eq!(
            transport_payload(&frame(40001, 5201, 1448)),
            Some((40001, 5201, 1448))
        );
        assert_eq!(
            transport_payload(&packet(PROTO_UDP, 40003, 5203, 1252)),
            Some((40003, 5203, 1252))
        );
        let mut icmp = frame(1, 2, 10);
        icmp[TUN_HEADER + 9] = 1;
        assert_eq!(transport_payload(&icmp), None);
        let mut log = FlowLog::default();
        log.record(50_000, &frame(40001, 5201, 1448));
        log.record(99_999, &frame(40001, 5201, 1448));
        log.record(100_000, &frame(40001, 5201, 1000));
        log.record(100_000, &frame(40002, 5202, 0)); // a pure ACK carries no payload
        log.record(150_000, &packet(PROTO_UDP, 40003, 5203, 1252));
        log.record(100_000, &[0, 0, 0x86, 0xdd, 0x60]); // not IPv4
        let mut out = Vec::new();
        log.write(&mut out, 7).expect("in memory");
        let text = String::from_utf8(out).expect("ascii");
        assert_eq!(
            text,
            "# init timestamp: 7\n# bin ms: 100\n0,40001,5201,2896\n100,40001,5201,1000\n100,40003,5203,1252\n"
        );
        let (init, rows) = parse(&text);
        assert_eq!(init, Some(7));
        assert_eq!(
            rows,
            [
                (0, 40001, 5201, 2896),
                (100, 40001, 5201, 1000),
                (100, 40003, 5203, 1252)
            ]
        );
    }

    #[test]
    fn ignores_truncated_frames() {
        let f = frame(1, 2, 10);
        for n in 0..30 {
            let _ = transport_payload(&f[..n]);
        }
        assert_eq!(transport_payload(&f[..10]), None);
    }
}
