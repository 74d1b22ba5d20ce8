//! The control channel of a sharded swarm (`node/src/swarm/shard.rs`): shard 0, the
//! *conductor*, listens; every other shard connects, says who it is, waits for the common
//! start, then sends its nodes' status snapshots every [`PUSH_EVERY`] and obeys the
//! conductor's commands (crash a node, stop).
//!
//! Frames: a 4-byte big-endian length, then one postcard-encoded message; at most
//! [`MAX_FRAME`] bytes (a longer frame is an error that ends the channel). `Hello` and
//! `Start` carry [`CONTROL_VERSION`]; a shard of another version is refused.
//!
//! The channel is out of band: in the netns testbed it is a Unix socket on the shared
//! filesystem, so cutting the links between hosts never cuts it; on a cluster it is TCP to
//! shard 0 (`host:port`).

use crate::net::latency_transport::LatenessCounts;
use crate::runtime::status::Snapshot;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The control protocol's version.
pub const CONTROL_VERSION: u16 = 1;
/// Largest control frame (a batch of 2,500 nodes' snapshots is a few MB).
pub const MAX_FRAME: usize = 64 * 1024 * 1024;
/// How often a shard sends its nodes' snapshots.
pub const PUSH_EVERY: Duration = Duration::from_millis(500);

/// Where the conductor listens: `unix:/path` or `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlAddr {
    Unix(PathBuf),
    Tcp(String),
}

impl std::str::FromStr for ControlAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err("unix: needs a path".into());
            }
            return Ok(ControlAddr::Unix(PathBuf::from(p)));
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(ControlAddr::Tcp(s.into())),
            _ => Err(format!("control address {s:?} is neither unix:/path nor host:port")),
        }
    }
}

impl std::fmt::Display for ControlAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ControlAddr::Tcp(a) => f.write_str(a),
        }
    }
}

/// What identifies one run: every shard must agree on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunKey {
    pub nodes: usize,
    pub shards: usize,
    pub seed: u64,
    pub latency_seed: Option<u64>,
}

/// One node's snapshot as a shard sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSnap {
    pub node: usize,
    pub snap: Snapshot,
    /// How long ago the node's member directory last changed (`Snapshot::members_changed_at`).
    pub members_changed_ms_ago: Option<u64>,
}

/// A shard's report of its nodes and its process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Batch {
    pub nodes: Vec<NodeSnap>,
    /// Nodes of this shard that are gone (crashed or stopped).
    pub gone: Vec<usize>,
    pub lateness: Option<LatenessCounts>,
    /// CPU seconds of the shard's process so far, and its RSS.
    pub cpu_s: Option<f64>,
    pub rss_bytes: Option<u64>,
}

/// Shard -> conductor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToConductor {
    Hello { version: u16, shard: usize, run: RunKey },
    Batch(Batch),
}

/// Conductor -> shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToShard {
    /// Start the nodes `delay_ms` after this arrives; `t0_unix_ms` is the swarm's start.
    Start {
        version: u16,
        delay_ms: u64,
        t0_unix_ms: u64,
    },
    Crash {
        node: usize,
    },
    Stop,
    /// The conductor refuses this shard (why).
    Refused {
        reason: String,
    },
}

/// Why the channel failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control channel: {0}")]
    Io(#[from] std::io::Error),
    #[error("control frame of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("control frame cannot be decoded: {0}")]
    Decode(#[from] postcard::Error),
}

/// Write one message.
pub async fn send<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> Result<(), ControlError> {
    let bytes = postcard::to_stdvec(msg)?;
    if bytes.len() > MAX_FRAME {
        return Err(ControlError::TooLarge(bytes.len()));
    }
    w.write_all(&(bytes.len() as u32).to_be_bytes()).await?;
    w.write_all(&bytes).await?;
    w.flush().await?;
    Ok(())
}

/// Read one message; `Ok(None)` at a clean end of the stream.
pub async fn recv<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(r: &mut R) -> Result<Option<T>, ControlError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(ControlError::TooLarge(n));
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).await?;
    Ok(Some(postcard::from_bytes(&buf)?))
}

/// A connected control stream, TCP or Unix.
pub type Stream = Box<dyn Duplex>;
pub trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// The conductor's listener.
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, PathBuf),
}

impl Listener {
    pub async fn bind(addr: &ControlAddr) -> std::io::Result<Listener> {
        match addr {
            ControlAddr::Tcp(a) => {
                // A name (a pod's DNS name on a cluster) is the others' way here; this end
                // listens on every interface at its port.
                let bind = match a.rsplit_once(':') {
                    Some((host, port)) if host.parse::<std::net::IpAddr>().is_err() => format!("0.0.0.0:{port}"),
                    _ => a.clone(),
                };
                Ok(Listener::Tcp(tokio::net::TcpListener::bind(bind).await?))
            }
            ControlAddr::Unix(p) => {
                // A socket file left by an earlier run would refuse the bind.
                if std::fs::symlink_metadata(p).is_ok_and(|m| {
                    use std::os::unix::fs::FileTypeExt;
                    m.file_type().is_socket()
                }) {
                    std::fs::remove_file(p)?;
                }
                Ok(Listener::Unix(tokio::net::UnixListener::bind(p)?, p.clone()))
            }
        }
    }

    pub async fn accept(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
            Listener::Unix(l, _) => Box::new(l.accept().await?.0),
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Connect to the conductor, retrying until `within` has passed (it may start later).
pub async fn connect(addr: &ControlAddr, within: Duration) -> std::io::Result<Stream> {
    let until = tokio::time::Instant::now() + within;
    loop {
        let r: std::io::Result<Stream> = match addr {
            ControlAddr::Tcp(a) => tokio::net::TcpStream::connect(a.as_str()).await.map(|s| {
                let _ = s.set_nodelay(true);
                Box::new(s) as Stream
            }),
            ControlAddr::Unix(p) => tokio::net::UnixStream::connect(p).await.map(|s| Box::new(s) as Stream),
        };
        match r {
            Ok(s) => return Ok(s),
            Err(e) if tokio::time::Instant::now() >= until => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_addresses_parse() {
        assert_eq!("unix:/tmp/c.sock".parse::<ControlAddr>(), Ok(ControlAddr::Unix("/tmp/c.sock".into())));
        assert_eq!(
            "peerage-0.peerage:7000".parse::<ControlAddr>(),
            Ok(ControlAddr::Tcp("peerage-0.peerage:7000".into()))
        );
        assert!("unix:".parse::<ControlAddr>().is_err());
        assert!("nohost".parse::<ControlAddr>().is_err());
        assert!("h:99999".parse::<ControlAddr>().is_err());
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversized_frames_are_refused() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let hello = ToConductor::Hello {
            version: CONTROL_VERSION,
            shard: 2,
            run: RunKey { nodes: 10, shards: 4, seed: 7, latency_seed: Some(7) },
        };
        send(&mut a, &hello).await.unwrap();
        let got: ToConductor = recv(&mut b).await.unwrap().unwrap();
        assert!(matches!(got, ToConductor::Hello { shard: 2, .. }));
        // A length over the limit ends the channel with an error, without allocating it.
        a.write_all(&((MAX_FRAME as u32) + 1).to_be_bytes()).await.unwrap();
        assert!(matches!(recv::<_, ToShard>(&mut b).await, Err(ControlError::TooLarge(_))));
        // Garbage is a decode error, not a panic.
        let (mut c, mut d) = tokio::io::duplex(64);
        c.write_all(&3u32.to_be_bytes()).await.unwrap();
        c.write_all(&[0xff, 0xff, 0xff]).await.unwrap();
        assert!(recv::<_, ToShard>(&mut d).await.is_err());
        drop(c);
        assert!(recv::<_, ToShard>(&mut d).await.unwrap().is_none(), "a clean end is None");
    }
}
