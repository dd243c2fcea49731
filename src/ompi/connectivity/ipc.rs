//! The protocol between the processes of one host and their agent, over a UNIX stream socket.
//!
//! A client opens with [`HELLO`] + version (u32 LE); the agent answers the same bytes, or closes
//! the connection if the versions differ (so a mixed installation fails loudly at connect, not
//! with garbage later). Then frames: `u8 command, 3 bytes zero, u32 LE body length, body`.
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;

pub const HELLO: [u8; 16] = *b"usnic-rs cagent\0";
pub const IPC_VERSION: u32 = 1;
pub const HELLO_LEN: usize = 20;
/// A frame body is never larger than this (wire input bound).
pub const MAX_BODY: usize = 512;
const FRAME_HEAD: usize = 8;

const CMD_LISTEN: u8 = 1;
const CMD_LISTEN_REPLY: u8 = 2;
const CMD_PING: u8 = 3;

pub fn hello() -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[..16].copy_from_slice(&HELLO);
    b[16..].copy_from_slice(&IPC_VERSION.to_le_bytes());
    b
}

/// Ask the agent for a UDP listener on a local address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    pub ipv4: Ipv4Addr,
    /// The largest UDP payload this BTL sends from that address (the large probe's size).
    pub large_size: u32,
}

/// The agent's answer: the listener's port, or the errno it failed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenReply {
    pub ipv4: Ipv4Addr,
    pub result: Result<u16, i32>,
}

/// Check the path from a local listener to a peer's listener (fire and forget).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ping {
    pub src_ipv4: Ipv4Addr,
    pub src_port: u16,
    pub dst_ipv4: Ipv4Addr,
    pub dst_port: u16,
    /// The large probe's size on this path (the smaller of both ends' largest datagram).
    pub large_size: u32,
    pub dst_host: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Listen(Listen),
    ListenReply(ListenReply),
    Ping(Ping),
}

impl Msg {
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(32);
        let cmd = match self {
            Msg::Listen(l) => {
                body.extend_from_slice(&l.ipv4.octets());
                body.extend_from_slice(&l.large_size.to_le_bytes());
                CMD_LISTEN
            }
            Msg::ListenReply(r) => {
                body.extend_from_slice(&r.ipv4.octets());
                let (port, errno) = match r.result {
                    Ok(p) => (p, 0i32),
                    Err(e) => (0, e.max(1)),
                };
                body.extend_from_slice(&port.to_le_bytes());
                body.extend_from_slice(&errno.to_le_bytes());
                CMD_LISTEN_REPLY
            }
            Msg::Ping(p) => {
                body.extend_from_slice(&p.src_ipv4.octets());
                body.extend_from_slice(&p.src_port.to_le_bytes());
                body.extend_from_slice(&p.dst_ipv4.octets());
                body.extend_from_slice(&p.dst_port.to_le_bytes());
                body.extend_from_slice(&p.large_size.to_le_bytes());
                // Host names longer than 255 bytes are cut (they only appear in messages).
                let mut host = p.dst_host.as_bytes();
                if host.len() > 255 {
                    host = &host[..255];
                }
                body.push(host.len() as u8);
                body.extend_from_slice(host);
                CMD_PING
            }
        };
        let mut out = Vec::with_capacity(FRAME_HEAD + body.len());
        out.extend_from_slice(&[cmd, 0, 0, 0]);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Takes one complete frame off the front of `buf`: `Ok(None)` when more bytes are needed,
    /// `Err` when the bytes cannot be a frame of this protocol (the connection is then dropped).
    pub fn take(buf: &mut Vec<u8>) -> Result<Option<Msg>, String> {
        if buf.len() < FRAME_HEAD {
            return Ok(None);
        }
        let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
        if len > MAX_BODY {
            return Err(format!("frame body of {len} bytes (max {MAX_BODY})"));
        }
        if buf.len() < FRAME_HEAD + len {
            return Ok(None);
        }
        let msg = Self::parse(buf[0], &buf[FRAME_HEAD..FRAME_HEAD + len]);
        buf.drain(..FRAME_HEAD + len);
        msg.map(Some)
    }

    fn parse(cmd: u8, b: &[u8]) -> Result<Msg, String> {
        let ip = |i: usize| Ipv4Addr::new(b[i], b[i + 1], b[i + 2], b[i + 3]);
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let need = |n: usize| {
            if b.len() < n {
                Err(format!(
                    "command {cmd}: body of {} bytes (need {n})",
                    b.len()
                ))
            } else {
                Ok(())
            }
        };
        match cmd {
            CMD_LISTEN => {
                need(8)?;
                Ok(Msg::Listen(Listen {
                    ipv4: ip(0),
                    large_size: u32_at(4),
                }))
            }
            CMD_LISTEN_REPLY => {
                need(10)?;
                let errno = u32_at(6) as i32;
                Ok(Msg::ListenReply(ListenReply {
                    ipv4: ip(0),
                    result: if errno == 0 {
                        Ok(u16_at(4))
                    } else {
                        Err(errno)
                    },
                }))
            }
            CMD_PING => {
                need(17)?;
                let hl = b[16] as usize;
                need(17 + hl)?;
                Ok(Msg::Ping(Ping {
                    src_ipv4: ip(0),
                    src_port: u16_at(4),
                    dst_ipv4: ip(6),
                    dst_port: u16_at(10),
                    large_size: u32_at(12),
                    dst_host: String::from_utf8_lossy(&b[17..17 + hl]).into_owned(),
                }))
            }
            other => Err(format!("unknown command {other}")),
        }
    }
}

/// Blocking read of exactly one frame (the client side).
pub fn read_frame(r: &mut impl Read) -> io::Result<Msg> {
    let mut head = [0u8; FRAME_HEAD];
    r.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    if len > MAX_BODY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame body of {len} bytes"),
        ));
    }
    let mut buf = head.to_vec();
    buf.resize(FRAME_HEAD + len, 0);
    r.read_exact(&mut buf[FRAME_HEAD..])?;
    match Msg::take(&mut buf) {
        Ok(Some(m)) => Ok(m),
        Ok(None) => unreachable!("a whole frame was read"),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

pub fn write_frame(w: &mut impl Write, m: &Msg) -> io::Result<()> {
    w.write_all(&m.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_split_anywhere() {
        let msgs = vec![
            Msg::Listen(Listen {
                ipv4: Ipv4Addr::new(10, 0, 0, 1),
                large_size: 1472,
            }),
            Msg::ListenReply(ListenReply {
                ipv4: Ipv4Addr::new(10, 0, 0, 1),
                result: Ok(40000),
            }),
            Msg::ListenReply(ListenReply {
                ipv4: Ipv4Addr::new(10, 0, 0, 1),
                result: Err(98),
            }),
            Msg::Ping(Ping {
                src_ipv4: Ipv4Addr::new(10, 0, 0, 1),
                src_port: 1,
                dst_ipv4: Ipv4Addr::new(10, 0, 0, 2),
                dst_port: 2,
                large_size: 9000,
                dst_host: "h2".into(),
            }),
        ];
        let all: Vec<u8> = msgs.iter().flat_map(|m| m.encode()).collect();
        for cut in 0..all.len() {
            let mut buf = all[..cut].to_vec();
            let mut got = Vec::new();
            while let Some(m) = Msg::take(&mut buf).unwrap() {
                got.push(m);
            }
            buf.extend_from_slice(&all[cut..]);
            while let Some(m) = Msg::take(&mut buf).unwrap() {
                got.push(m);
            }
            assert_eq!(got, msgs);
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut b = vec![9, 0, 0, 0, 0, 0, 0, 0];
        assert!(Msg::take(&mut b).is_err());
        let mut b = vec![CMD_PING, 0, 0, 0, 2, 0, 0, 0, 1, 2];
        assert!(Msg::take(&mut b).is_err());
        let mut b = vec![CMD_PING, 0, 0, 0, 0xff, 0xff, 0, 0];
        assert!(Msg::take(&mut b).is_err());
    }
}
