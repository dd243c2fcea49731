//! A process's connection to its host's agent.
use std::io::{self, ErrorKind, Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ipc::{self, Msg};
use super::sys::NoSigPipe;

pub struct Client {
    /// Requests come from any thread that first uses an endpoint; one at a time on the stream.
    stream: Mutex<UnixStream>,
}

impl Client {
    /// Connects to the agent at `path`, waiting up to `wait` for it to accept, and checks the
    /// protocol version.
    pub fn connect(path: &Path, wait: Duration) -> io::Result<Client> {
        let until = Instant::now() + wait;
        let mut stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e)
                    if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused)
                        && Instant::now() < until =>
                {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "connecting to the connectivity agent at {}: {e}",
                            path.display()
                        ),
                    ))
                }
            }
        };
        // A live agent answers at once; a wedged one must not hang MPI_Init forever.
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        NoSigPipe(&stream).write_all(&ipc::hello())?;
        let mut back = [0u8; ipc::HELLO_LEN];
        stream.read_exact(&mut back).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("the connectivity agent did not accept this protocol version ({e})"),
            )
        })?;
        if back != ipc::hello() {
            return Err(io::Error::new(
                ErrorKind::InvalidData,
                "the connectivity agent speaks another protocol version",
            ));
        }
        Ok(Client {
            stream: Mutex::new(stream),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UnixStream> {
        // A panic while holding the stream leaves it as usable as before: bytes go out whole.
        self.stream.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for a UDP listener on `ipv4` (created once per host and address); returns its port.
    pub fn listen(&self, ipv4: Ipv4Addr, large_size: u32) -> io::Result<u16> {
        let mut s = self.lock();
        ipc::write_frame(
            &mut NoSigPipe(&s),
            &Msg::Listen(ipc::Listen { ipv4, large_size }),
        )?;
        let answer = match ipc::read_frame(&mut *s) {
            Ok(Msg::ListenReply(r)) if r.ipv4 == ipv4 => {
                return r.result.map_err(io::Error::from_raw_os_error)
            }
            Ok(other) => io::Error::new(
                ErrorKind::InvalidData,
                format!("unexpected answer from the connectivity agent: {other:?}"),
            ),
            Err(e) => e,
        };
        // Out of step (a reply that came after the read timed out would answer the next
        // request): later requests fail at once rather than read each other's answers.
        let _ = s.shutdown(std::net::Shutdown::Both);
        Err(answer)
    }

    /// Asks the agent to check a path; returns without waiting for the result (the agent reports
    /// and aborts on failure).
    pub fn ping(&self, p: ipc::Ping) -> io::Result<()> {
        ipc::write_frame(&mut NoSigPipe(&self.lock()), &Msg::Ping(p))
    }
}
