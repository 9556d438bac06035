//! A UDP echo and ping pair, to measure the idle RTT through the emulator (the machine has
//! no `ping`). Timestamps never leave the client: it matches replies by sequence number.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Echoes every datagram back to its sender, forever.
pub fn udp_echo(port: u16) -> std::io::Result<()> {
    let sock = UdpSocket::bind(("0.0.0.0", port))?;
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = sock.recv_from(&mut buf)?;
        sock.send_to(&buf[..n], from)?;
    }
}

/// Sends `count` probes `interval` apart and returns the RTT of each one answered, in ms.
pub fn udp_ping(to: SocketAddr, count: u32, interval: Duration) -> std::io::Result<Vec<f64>> {
    let sock = UdpSocket::bind(("0.0.0.0", 0))?;
    sock.connect(to)?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for seq in 0..count {
        let sent = Instant::now();
        sock.send(&seq.to_be_bytes())?;
        loop {
            match sock.recv(&mut buf) {
                Ok(4) if buf[..4] == seq.to_be_bytes() => {
                    rtts.push(sent.elapsed().as_secs_f64() * 1000.0);
                    break;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
                Err(e) => return Err(e),
            }
        }
        std::thread::sleep(interval);
    }
    Ok(rtts)
}
