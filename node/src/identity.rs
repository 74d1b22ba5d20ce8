//! The node's identity key file.
//!
//! A node keeps its libp2p identity (ed25519) in a file so that its `PeerId`, and therefore
//! its `NodeId` (`NodeId::hash_of(peer_id.to_bytes())`), survives restarts. The file holds
//! the key in libp2p's protobuf encoding, hex-encoded on one line (readable, copyable). A
//! missing file is created with a fresh key (mode 0600 on Unix); an unreadable or corrupt
//! file is an error that names the file and says what is wrong — the node never silently
//! replaces a key it could not read.
//!
//! Creation is exclusive: the key is written whole to a file of this process's own, then
//! hard-linked to the key file's name, which fails if the name exists. Of two processes that
//! create the same missing file at once, one links its key and the other reads that key, so
//! both name the file's id. A running node holds an exclusive lock on its key file
//! ([`Identity`]): a second process on the same key is refused with [`IdentityError::InUse`]
//! (two processes under one id would both claim leadership).
//!
//! Keys solve the id puzzle of the scope (`overlay::NodeId::puzzle_bits`, S/Kademlia's static
//! puzzle): [`generate`] draws ed25519 keys until the hash of the node id has `difficulty`
//! leading zero bits (about `2^difficulty` draws), and a stored key that does not is refused
//! with an error, since every other member would refuse its records.

use libp2p::identity::Keypair;
use std::path::{Path, PathBuf};

/// Why the key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read identity key file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write identity key file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "identity key file {path} holds a key whose id solves the id puzzle to {bits} bits, below the scope's id_difficulty {difficulty} (delete it to create a new identity)"
    )]
    Weak { path: PathBuf, bits: u32, difficulty: u32 },
    #[error(
        "identity key file {path} is corrupt: {reason} (delete it to create a new identity, which changes the node id)"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error("identity key file {path} is in use by another running node (one key, one node)")]
    InUse { path: PathBuf },
    #[error("cannot lock identity key file {path}: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
}

/// A key loaded from its file, the file locked while this value lives.
#[derive(Debug)]
pub struct Identity {
    pub key: Keypair,
    /// Whether the file was created by this call.
    pub created: bool,
    /// The locked file (the lock ends when it is closed).
    _lock: std::fs::File,
}

/// [`load_or_create`] the key at `path` and lock the file for as long as the returned
/// [`Identity`] lives; [`IdentityError::InUse`] if another process holds it.
pub fn open_locked(path: &Path, difficulty: u32) -> Result<Identity, IdentityError> {
    let (key, created) = load_or_create(path, difficulty)?;
    let file = std::fs::File::open(path).map_err(|source| IdentityError::Read { path: path.to_path_buf(), source })?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a descriptor this function owns; no memory is involved. The lock
    // belongs to the open file and ends when `file` is closed (also if the process dies).
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Identity { key, created, _lock: file });
    }
    let source = std::io::Error::last_os_error();
    if source.kind() == std::io::ErrorKind::WouldBlock {
        return Err(IdentityError::InUse { path: path.to_path_buf() });
    }
    Err(IdentityError::Lock { path: path.to_path_buf(), source })
}

/// Bits of the id puzzle `key`'s node id solves.
pub fn puzzle_bits(key: &Keypair) -> u32 {
    overlay::directory::node_id_of(&key.public().to_peer_id()).puzzle_bits()
}

/// A fresh ed25519 key whose node id solves the id puzzle at `difficulty`.
pub fn generate(difficulty: u32) -> Keypair {
    loop {
        let key = Keypair::generate_ed25519();
        if puzzle_bits(&key) >= difficulty {
            return key;
        }
    }
}

/// The first ed25519 key drawn from `rng` that solves the id puzzle at `difficulty`: a seeded
/// swarm gets the same keys, so the same node ids, on every run.
pub fn generate_from(difficulty: u32, rng: &mut impl rand::RngCore) -> Keypair {
    loop {
        let mut secret = [0u8; 32];
        rng.fill_bytes(&mut secret);
        // 32 bytes are always a valid ed25519 secret; the error arm cannot be taken.
        let Ok(key) = Keypair::ed25519_from_bytes(secret) else { continue };
        if puzzle_bits(&key) >= difficulty {
            return key;
        }
    }
}

/// Load the key at `path`, or create and store a new ed25519 key solving the id puzzle at
/// `difficulty` if the file does not exist (exclusively: if another process creates it
/// first, its key is loaded). Returns the key and whether it was created.
pub fn load_or_create(path: &Path, difficulty: u32) -> Result<(Keypair, bool), IdentityError> {
    loop {
        match std::fs::read(path) {
            Ok(bytes) => {
                let key = decode(path, &bytes)?;
                let bits = puzzle_bits(&key);
                if bits < difficulty {
                    return Err(IdentityError::Weak { path: path.to_path_buf(), bits, difficulty });
                }
                return Ok((key, false));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = generate(difficulty);
                if store_new(path, &key)? {
                    return Ok((key, true));
                }
                // Another process created the file meanwhile: read its key.
            }
            Err(source) => return Err(IdentityError::Read { path: path.to_path_buf(), source }),
        }
    }
}

fn decode(path: &Path, bytes: &[u8]) -> Result<Keypair, IdentityError> {
    let corrupt = |reason: String| IdentityError::Corrupt { path: path.to_path_buf(), reason };
    let text = std::str::from_utf8(bytes).map_err(|_| corrupt("not text".into()))?;
    let raw = hex_decode(text.trim()).map_err(corrupt)?;
    Keypair::from_protobuf_encoding(&raw).map_err(|e| corrupt(format!("not a libp2p key: {e}")))
}

/// Store `key` at `path` unless the file exists: written whole to a file of this process's
/// own, then hard-linked to `path` (which fails if `path` exists). False if it existed.
fn store_new(path: &Path, key: &Keypair) -> Result<bool, IdentityError> {
    let write_err = |source| IdentityError::Write { path: path.to_path_buf(), source };
    let raw = key.to_protobuf_encoding().map_err(|e| write_err(std::io::Error::other(e.to_string())))?;
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(write_err)?;
        }
    }
    let text = format!("{}\n", hex_encode(&raw));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nonce: u64 = rand::random();
    let tmp = path.with_file_name(format!(".{name}.{}.{nonce:016x}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options.open(&tmp).and_then(|mut f| {
        use std::io::Write as _;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(write_err(e)),
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Result<Vec<u8>, String> {
    if s.is_empty() {
        return Err("empty".into());
    }
    if s.len() % 2 != 0 {
        return Err("odd number of hex digits".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("not hex at character {i}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_then_reload_keeps_the_id() {
        // Removed when dropped, also when an assertion fails.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let (a, created) = load_or_create(&path, 6).unwrap();
        assert!(created);
        assert!(puzzle_bits(&a) >= 6);
        let (b, created) = load_or_create(&path, 6).unwrap();
        assert!(!created);
        assert_eq!(a.public().to_peer_id(), b.public().to_peer_id());
        // A key that does not solve a harder puzzle is refused, not replaced.
        let bits = puzzle_bits(&a);
        assert!(matches!(load_or_create(&path, bits + 1), Err(IdentityError::Weak { .. })));
        std::fs::write(&path, "zz\n").unwrap();
        let err = load_or_create(&path, 0).unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
        std::fs::write(&path, "0011\n").unwrap();
        assert!(matches!(load_or_create(&path, 0), Err(IdentityError::Corrupt { .. })));
    }

    /// Processes creating one missing key file at once all get the key the file ends with.
    #[test]
    fn concurrent_creators_agree_on_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let ids: Vec<_> = (0..8)
            .map(|_| {
                let p = path.clone();
                std::thread::spawn(move || load_or_create(&p, 0).map(|(k, c)| (k.public().to_peer_id(), c)))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        let (stored, _) = load_or_create(&path, 0).unwrap();
        assert!(ids.iter().all(|(id, _)| *id == stored.public().to_peer_id()), "{ids:?}");
        assert_eq!(ids.iter().filter(|(_, created)| *created).count(), 1, "one creator");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left");
    }

    /// A locked key file is refused to a second holder until the first lets go.
    #[test]
    fn a_locked_key_is_refused_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let first = open_locked(&path, 0).unwrap();
        assert!(first.created);
        let err = open_locked(&path, 0).unwrap_err();
        assert!(matches!(err, IdentityError::InUse { .. }), "{err}");
        assert!(err.to_string().contains("in use by another running node"), "{err}");
        drop(first);
        let again = open_locked(&path, 0).unwrap();
        assert!(!again.created);
    }
}
