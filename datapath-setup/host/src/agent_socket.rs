//! What a datapath's unix datagram socket receives: only the agent may steer flows.
//!
//! A datagram is the agent's when it comes from the agent's socket address **and**, as the
//! kernel attaches the sender's credentials ([`receive_credentials`]), its sender is root or
//! the user who owns the agent's socket file. The address alone is not proof on Linux: a
//! socket keeps its name after its file is unlinked, so someone who may write to the socket
//! directory (a member of its shared group) can hold a socket named like the agent's path
//! while the agent's own file, bound later, is someone else's. Anything else (another path,
//! an unbound or abstract sender, another user) is rejected unread.

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// What a receive found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A datagram of this many bytes from the agent.
    Agent(usize),
    /// A datagram from anyone else, dropped unread.
    Rejected(Rejection),
}

/// Why a datagram was not the agent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Sent from another address (or none).
    Address,
    /// Sent from the agent's address by a user who is neither root nor the owner of the
    /// agent's socket file.
    Sender { uid: u32, pid: i32 },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Address => f.write_str("not from the agent's socket"),
            Rejection::Sender { uid, pid } => write!(
                f,
                "from the agent's address but sent by uid {uid} (pid {pid}), \
                 neither root nor the owner of the agent's socket"
            ),
        }
    }
}

/// Asks the kernel to attach every sender's credentials to what `sock` receives
/// (`SO_PASSCRED`); [`recv_from_agent`] checks them.
pub fn receive_credentials(sock: &UnixDatagram) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` is a c_int of the length passed, for a valid socket.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            std::ptr::from_ref(&on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Receives one datagram from `sock` if one is there (or once one comes, on a blocking
/// socket), telling the agent's from the rest.
pub fn recv_from_agent(sock: &UnixDatagram, agent: &Path, buf: &mut [u8]) -> Option<Received> {
    let got = recv_with_sender(sock, buf).ok()?;
    if !got.sent_from(agent) {
        return Some(Received::Rejected(Rejection::Address));
    }
    // Without credentials (a socket that did not ask for them) the address decides.
    let Some(cred) = got.cred else {
        return Some(Received::Agent(got.len));
    };
    let owner = || std::fs::symlink_metadata(agent).map(|m| m.uid()).ok();
    Some(if cred.uid == 0 || owner() == Some(cred.uid) {
        Received::Agent(got.len)
    } else {
        Received::Rejected(Rejection::Sender {
            uid: cred.uid,
            pid: cred.pid,
        })
    })
}

/// One datagram's length, its sender's address (`addr_len` bytes of `addr`) and its
/// sender's credentials, if the kernel attached them.
struct Datagram {
    len: usize,
    addr: libc::sockaddr_un,
    addr_len: usize,
    cred: Option<libc::ucred>,
}

impl Datagram {
    /// Whether the sender is bound at `path` (never for an unbound or abstract sender).
    fn sent_from(&self, path: &Path) -> bool {
        let offset = std::mem::offset_of!(libc::sockaddr_un, sun_path);
        let Some(raw) = self
            .addr_len
            .checked_sub(offset)
            .and_then(|n| self.addr.sun_path.get(..n))
        else {
            return false;
        };
        let name = raw.iter().map(|&c| c as u8).take_while(|&b| b != 0);
        // An abstract address starts with NUL, so its name reads as empty.
        let want = path.as_os_str().as_bytes();
        !want.is_empty() && name.eq(want.iter().copied())
    }
}

fn recv_with_sender(sock: &UnixDatagram, buf: &mut [u8]) -> io::Result<Datagram> {
    // SAFETY: all-zero bytes are a valid sockaddr_un and msghdr.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // u64s for the alignment of a cmsghdr; room for one ucred and then some.
    let mut control = [0u64; 8];
    msg.msg_name = std::ptr::from_mut(&mut addr).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_un>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control);
    // SAFETY: every pointer in `msg` points at a live buffer of the length given.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    let len = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    let mut cred = None;
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG macros stay in it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                cred = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(c).cast::<libc::ucred>(),
                ));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Datagram {
        len,
        addr,
        addr_len: msg.msg_namelen as usize,
        cred,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A datapath socket that asks for credentials, the agent's and a stranger's, in a
    /// directory of this test's own.
    struct Sockets {
        dir: PathBuf,
        dp: (PathBuf, UnixDatagram),
        agent: (PathBuf, UnixDatagram),
        stranger: UnixDatagram,
    }

    impl Sockets {
        fn new(test: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("ccp-host-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).expect("test directory");
            let bind = |name: &str| {
                let p = dir.join(name);
                let s = UnixDatagram::bind(&p).expect("bind");
                (p, s)
            };
            let (dp, agent, stranger) = (bind("dp"), bind("agent"), bind("stranger"));
            dp.1.set_nonblocking(true).expect("non-blocking");
            receive_credentials(&dp.1).expect("SO_PASSCRED");
            Sockets {
                dir,
                dp,
                agent,
                stranger: stranger.1,
            }
        }

        fn recv(&self) -> Option<Received> {
            let mut buf = [0u8; 16];
            recv_from_agent(&self.dp.1, &self.agent.0, &mut buf)
        }
    }

    impl Drop for Sockets {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn only_the_agents_address_is_heard() {
        let s = Sockets::new("address");
        assert_eq!(s.recv(), None);
        s.stranger.send_to(b"steer", &s.dp.0).expect("send");
        s.agent.1.send_to(b"hello", &s.dp.0).expect("send");
        assert_eq!(s.recv(), Some(Received::Rejected(Rejection::Address)));
        assert_eq!(s.recv(), Some(Received::Agent(5)));
    }

    /// Sends `msg` from `from` to `to` with the credentials `uid`/`gid` in the message (only
    /// root may name a uid other than its own).
    fn send_as(from: &UnixDatagram, to: &Path, msg: &[u8], uid: u32, gid: u32) -> io::Result<()> {
        // SAFETY: all-zero bytes are a valid sockaddr_un and msghdr.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, &b) in addr.sun_path.iter_mut().zip(to.as_os_str().as_bytes()) {
            *d = b as libc::c_char;
        }
        let mut iov = libc::iovec {
            iov_base: msg.as_ptr().cast_mut().cast(),
            iov_len: msg.len(),
        };
        let cred = libc::ucred {
            pid: std::process::id() as i32,
            uid,
            gid,
        };
        let mut control = [0u64; 8];
        // SAFETY: as above.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_name = std::ptr::from_mut(&mut addr).cast();
        m.msg_namelen = size_of::<libc::sockaddr_un>() as libc::socklen_t;
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE and CMSG_LEN only compute; the header and the ucred fit in
        // `control` (64 bytes), which CMSG_FIRSTHDR points into.
        let sent = unsafe {
            m.msg_controllen = libc::CMSG_SPACE(size_of::<libc::ucred>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_CREDENTIALS;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::ucred>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::ucred>(), cred);
            libc::sendmsg(from.as_raw_fd(), &m, 0)
        };
        if sent < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    #[test]
    fn the_agents_address_in_another_users_hands_is_rejected() {
        let s = Sockets::new("sender");
        // SAFETY: getters that cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // The owner of the agent's socket file (whoever runs the test) is heard.
        send_as(&s.agent.1, &s.dp.0, b"own", uid, gid).expect("send with own credentials");
        assert_eq!(s.recv(), Some(Received::Agent(3)));
        if uid != 0 {
            eprintln!("skipped the rest: only root can send with another user's credentials");
            return;
        }
        // What a second socket named like the agent's path would carry: another user's
        // credentials from the agent's address.
        let (stranger_uid, stranger_gid) = (4_000_123, 4_000_123);
        send_as(&s.agent.1, &s.dp.0, b"steer", stranger_uid, stranger_gid).expect("send");
        assert!(matches!(
            s.recv(),
            Some(Received::Rejected(Rejection::Sender { uid: 4_000_123, .. }))
        ));
        // The agent's file given to that user: now that user is the agent.
        std::os::unix::fs::lchown(&s.agent.0, Some(stranger_uid), Some(stranger_gid))
            .expect("chown");
        send_as(&s.agent.1, &s.dp.0, b"steer", stranger_uid, stranger_gid).expect("send");
        assert_eq!(s.recv(), Some(Received::Agent(5)));
        // Root is always heard.
        send_as(&s.agent.1, &s.dp.0, b"root", 0, 0).expect("send");
        assert_eq!(s.recv(), Some(Received::Agent(4)));
    }
}
