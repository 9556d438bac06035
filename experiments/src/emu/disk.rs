//! The emulator's file writes, done on threads of their own. The packet loop must never wait
//! for the filesystem: a write or a rename can block while it commits its journal or writes
//! back, and every packet due meanwhile would leave that late (with the writes in the loop,
//! the runs' worst lateness under `--jobs 8` was about twice as high). Create the writers
//! before the loop takes real-time priority, so that their threads run at normal priority.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

/// Mode of every file the emulator writes: results, readable by all, never the umask's.
const FILE_MODE: u32 = 0o644;
/// Bytes gathered before they are handed to the writer thread (one message each).
const CHUNK_BYTES: usize = 256 << 10;

/// Creates (or truncates) a file with mode [`FILE_MODE`].
pub fn create(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Replaces a file whole: a reader sees the old text or the new one, never half of one.
pub fn replace(path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    create(&tmp)?.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, path)
}

enum Message {
    Data(Vec<u8>),
    Flush(SyncSender<io::Result<()>>),
}

/// A writer whose bytes a thread of its own passes on to the inner writer. `write` never waits
/// for the disk; `flush` waits until every byte so far has reached the inner writer and returns
/// the first error the thread met since the last flush.
#[derive(Debug)]
pub struct Appender {
    chunk: Vec<u8>,
    tx: Sender<Message>,
    /// Chunks the thread has written, emptied, so the loop need not allocate new ones.
    spare: Receiver<Vec<u8>>,
}

impl Appender {
    /// Starts the thread that writes into `out`.
    pub fn spawn<W: Write + Send + 'static>(name: &str, out: W) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (spare_tx, spare) = mpsc::channel();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || pass_on(rx, out, spare_tx))?;
        Ok(Self {
            chunk: Vec::with_capacity(CHUNK_BYTES),
            tx,
            spare,
        })
    }

    fn hand_over(&mut self) -> io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK_BYTES));
        let data = std::mem::replace(&mut self.chunk, next);
        self.tx.send(Message::Data(data)).map_err(|_| stopped())
    }
}

fn stopped() -> io::Error {
    io::Error::other("the file writer thread stopped")
}

/// The writer thread: writes what arrives until every sender is gone.
fn pass_on<W: Write>(rx: Receiver<Message>, mut out: W, spare: Sender<Vec<u8>>) {
    let mut error = None;
    for message in rx {
        match message {
            Message::Data(mut data) => {
                if error.is_none() {
                    error = out.write_all(&data).err();
                }
                data.clear();
                // The appender is gone once nobody takes it back; nothing is lost.
                spare.send(data).ok();
            }
            Message::Flush(reply) => {
                let result = match error.take() {
                    Some(e) => Err(e),
                    None => out.flush(),
                };
                // The flushing side waits for this; if it is gone, nobody needs the answer.
                reply.send(result).ok();
            }
        }
    }
}

impl Write for Appender {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.chunk.extend_from_slice(buf);
        if self.chunk.len() >= CHUNK_BYTES {
            self.hand_over()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()?;
        let (reply, answer) = mpsc::sync_channel(1);
        self.tx.send(Message::Flush(reply)).map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

impl Drop for Appender {
    /// Like `BufWriter`: what was written reaches the file; errors are the flusher's to see.
    fn drop(&mut self) {
        self.flush().ok();
    }
}

/// A file that a thread of its own keeps replacing (see [`replace`]) with the latest of a
/// series of texts. A text offered while the thread is still writing an earlier one waits in
/// its place, and a later offer is dropped until that one is taken; the final text always
/// lands.
#[derive(Debug)]
pub struct Snapshot {
    tx: SyncSender<String>,
    thread: JoinHandle<io::Result<()>>,
}

impl Snapshot {
    /// Starts the thread that writes `path`.
    pub fn spawn(name: &str, path: PathBuf) -> io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<String>(1);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut first_error = Ok(());
                for text in rx {
                    if let Err(e) = replace(&path, &text) {
                        first_error = first_error.and(Err(e));
                    }
                }
                first_error
            })?;
        Ok(Self { tx, thread })
    }

    /// Offers a text without waiting.
    pub fn offer(&self, text: String) {
        // Busy: a later offer or the final text follows. Stopped: `finish` reports why.
        self.tx.try_send(text).ok();
    }

    /// Writes the final text, waits for the thread and returns its first error.
    pub fn finish(self, text: String) -> io::Result<()> {
        let sent = self.tx.send(text);
        drop(self.tx);
        let result = self.thread.join().unwrap_or_else(|_| Err(stopped()));
        result.and(sent.map_err(|_| stopped()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// A writer that blocks until released, then records what it is given.
    #[derive(Clone)]
    struct Gate {
        open: Arc<Mutex<()>>,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _open = self.open.lock().expect("gate");
            self.got.lock().expect("sink").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_do_not_wait_for_a_blocked_disk_and_flush_delivers_them_all() {
        let gate = Gate {
            open: Arc::new(Mutex::new(())),
            got: Arc::new(Mutex::new(Vec::new())),
        };
        let closed = gate.open.lock().expect("gate");
        let mut w = Appender::spawn("test-appender", gate.clone()).expect("thread");
        let line = [b'x'; 1000];
        let lines = 4 * CHUNK_BYTES / line.len();
        let (done, returned) = mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..lines {
                w.write_all(&line).expect("write");
            }
            done.send(w).expect("test alive");
        });
        let mut w = returned
            .recv_timeout(Duration::from_secs(10))
            .expect("writes returned while the disk was blocked");
        assert!(gate.got.lock().expect("sink").is_empty());
        drop(closed);
        w.flush().expect("flush");
        let got = gate.got.lock().expect("sink").len();
        assert_eq!(got, lines * line.len());
    }

    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_threads_write_error_surfaces_at_flush() {
        let mut w = Appender::spawn("test-broken", Broken).expect("thread");
        w.write_all(b"a line\n").expect("write only gathers");
        let err = w.flush().expect_err("the error reaches the flusher");
        assert_eq!(err.to_string(), "disk full");
        w.flush().expect("reported once");
    }

    #[test]
    fn a_snapshot_ends_with_the_final_text_and_an_explicit_mode() {
        let dir = std::env::temp_dir().join(format!("ccp-emu-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("stats.json");
        let s = Snapshot::spawn("test-snapshot", path.clone()).expect("thread");
        for i in 0..100 {
            s.offer(format!("{i}"));
        }
        s.finish("final".into()).expect("finish");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "final");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, FILE_MODE);
        assert!(!path.with_extension("tmp").exists());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_snapshot_reports_a_path_it_cannot_write() {
        let path = PathBuf::from("/nonexistent-dir/stats.json");
        let s = Snapshot::spawn("test-snapshot-bad", path).expect("thread");
        s.offer("x".into());
        assert!(s.finish("y".into()).is_err());
    }
}
