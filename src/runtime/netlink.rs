//! The agent's netlink socket to ccp-kernel.
//!
//! It speaks as portus' netlink socket does (protocol `NETLINK_USERSOCK`, multicast group 22,
//! a 16-byte netlink header before every CCP message, sends go to the kernel), but keeps the
//! errno of a failed receive: portus folds it into text ("EAGAIN: Try again"), so every idle
//! second of its 1 s receive timeout looked like a failure to the agent's loop.

use super::transport::{RECV_TIMEOUT, Receive, Transport, Unreachable, is_idle};
use std::cell::Cell;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// ccp-kernel's multicast group (`CCP_MULTICAST_GROUP`).
const CCP_MULTICAST_GROUP: libc::c_int = 22;
/// `struct nlmsghdr`: length, type, flags, sequence, port id.
const NLMSG_HDRLEN: usize = 16;

/// A netlink socket joined to ccp-kernel's group.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
    /// A send failed since the runtime last asked (the module is not loaded).
    unreachable: Cell<bool>,
}

impl NetlinkSocket {
    /// Opens the socket and joins the group; the kernel picks the port id, so two agents
    /// (or tests) never collide on the process id portus binds.
    pub fn open() -> io::Result<Self> {
        Self::with_timeout(RECV_TIMEOUT)
    }

    fn with_timeout(timeout: std::time::Duration) -> io::Result<Self> {
        // SAFETY: plain socket(2); the result is checked before it is owned.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_USERSOCK,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; all zero is "kernel, pick my port id".
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` is a valid sockaddr_nl of the length passed.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&addr).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        set_option(
            &fd,
            libc::SOL_NETLINK,
            libc::NETLINK_ADD_MEMBERSHIP,
            &CCP_MULTICAST_GROUP,
        )?;
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
        };
        set_option(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
        Ok(NetlinkSocket {
            fd,
            unreachable: Cell::new(false),
        })
    }
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn set_option<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the length passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
}

impl Receive for NetlinkSocket {
    fn recv_datagram(&self, buf: &mut [u8]) -> Result<Option<(usize, ())>, String> {
        let mut frame = vec![0u8; NLMSG_HDRLEN + buf.len()];
        // SAFETY: `frame` is writable for the length passed.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                frame.as_mut_ptr().cast(),
                frame.len(),
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if is_idle(&e) {
                Ok(None)
            } else {
                Err(e.to_string())
            };
        }
        let n = n as usize;
        // portus slices without this check and panics on a short frame.
        let Some(len) = n.checked_sub(NLMSG_HDRLEN) else {
            return Err(format!(
                "netlink frame of {n} bytes, shorter than its header"
            ));
        };
        buf[..len].copy_from_slice(&frame[NLMSG_HDRLEN..n]);
        Ok(Some((len, ())))
    }
}

impl Transport for NetlinkSocket {
    type Addr = ();

    fn send(&self, msg: &[u8], _to: &()) -> Result<(), String> {
        let len = NLMSG_HDRLEN + msg.len();
        let mut frame = Vec::with_capacity(len);
        frame.extend_from_slice(&(len as u32).to_le_bytes());
        // Type, flags, sequence and port id stay zero: the kernel's input handler reads
        // only the payload, and an unconnected netlink send goes to the kernel (port id 0).
        frame.resize(NLMSG_HDRLEN, 0);
        frame.extend_from_slice(msg);
        // SAFETY: `frame` is readable for the length passed.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), len, 0) };
        if sent < 0 {
            self.unreachable.set(true);
            return Err(format!(
                "netlink send: {} (ccp-kernel loaded?)",
                io::Error::last_os_error()
            ));
        }
        Ok(())
    }
}

impl Unreachable for NetlinkSocket {
    fn take_unreachable(&self) -> Vec<()> {
        if self.unreachable.replace(false) {
            vec![()]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Regression: an idle receive used to come back as the text "EAGAIN: Try again", which
    /// the loop logged as a failed receive each second (and after ten, slept after each).
    #[test]
    fn an_idle_receive_is_a_timeout_not_an_error() {
        let sock = NetlinkSocket::with_timeout(Duration::from_millis(30)).expect("netlink socket");
        let mut buf = [0u8; 64];
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(sock.recv_datagram(&mut buf), Ok(None));
        }
        assert!(start.elapsed() >= Duration::from_millis(90));
    }
}
