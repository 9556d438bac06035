//! What a datapath's unix datagram socket receives: only the agent's own address may steer
//! flows; anything else (another path, an unbound or abstract sender) is rejected unread.

use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// What a receive found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A datagram of this many bytes from the agent's address.
    Agent(usize),
    /// A datagram from anyone else, dropped unread.
    Rejected,
}

/// Receives one datagram from `sock` if one is there (or once one comes, on a blocking
/// socket), telling the agent's from the rest.
pub fn recv_from_agent(sock: &UnixDatagram, agent: &Path, buf: &mut [u8]) -> Option<Received> {
    let (n, from) = sock.recv_from(buf).ok()?;
    Some(if from.as_pathname() == Some(agent) {
        Received::Agent(n)
    } else {
        Received::Rejected
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_agents_address_is_heard() {
        let dir = std::env::temp_dir();
        let pid = std::process::id();
        let (dp, agent, stranger) = (
            dir.join(format!("ccp-host-dp-{pid}")),
            dir.join(format!("ccp-host-agent-{pid}")),
            dir.join(format!("ccp-host-stranger-{pid}")),
        );
        let bind = |p: &Path| {
            let _ = std::fs::remove_file(p);
            UnixDatagram::bind(p).expect("bind")
        };
        let (dp_sock, agent_sock, stranger_sock) = (bind(&dp), bind(&agent), bind(&stranger));
        dp_sock.set_nonblocking(true).expect("non-blocking");
        let mut buf = [0u8; 16];
        assert_eq!(recv_from_agent(&dp_sock, &agent, &mut buf), None);
        stranger_sock.send_to(b"steer", &dp).expect("send");
        agent_sock.send_to(b"hello", &dp).expect("send");
        assert_eq!(
            recv_from_agent(&dp_sock, &agent, &mut buf),
            Some(Received::Rejected)
        );
        assert_eq!(
            recv_from_agent(&dp_sock, &agent, &mut buf),
            Some(Received::Agent(5))
        );
        for p in [dp, agent, stranger] {
            let _ = std::fs::remove_file(p);
        }
    }
}
