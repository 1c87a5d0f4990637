//! A member id kept in a file beside the application's state, so that a static member restarted
//! after a crash comes back as itself (see
//! [`GroupConfig::kept_member_id`](crate::config::GroupConfig::kept_member_id)).
//!
//! ```no_run
//! use consumer_membership::{GroupConfig, GroupProtocol, MemberIdFile};
//!
//! // Beside the application's state: one file per member instance (per instance id).
//! let kept = MemberIdFile::open("/var/lib/app/member-a.id")?;
//! let group = kept.configure(
//!     GroupConfig::new("orders")
//!         .with_protocol(GroupProtocol::Consumer)
//!         .with_instance_id("app-a"),
//! );
//! // ... GroupMember::start(client, group, transport), and keep `kept` alive as long as the
//! // member: its lock tells a second process with this file apart.
//! # Ok::<(), consumer_membership::MemberIdFileError>(())
//! ```
//!
//! The rules it keeps:
//! - the id is written (and synced to disk) before the first join, so no registration the
//!   broker holds was made under an id the next run does not know;
//! - the file is locked for as long as the [`MemberIdFile`] lives (an advisory lock on
//!   `<path>.lock`, released by the operating system when the process dies), so a second live
//!   process given the same file is refused with [`MemberIdFileError::InUse`] instead of
//!   sharing the id: the broker could not tell the two apart;
//! - a file that does not hold a valid member id is a typed error, never silently replaced.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::config::GroupConfig;
use crate::member_id::{MemberId, MemberIdError};

/// Why a member id file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemberIdFileError {
    /// Another live process (or another `MemberIdFile` in this one) holds the file.
    #[error(
        "member id file {path}: in use by another process (its lock {path}.lock is held); two live members must not share a member id"
    )]
    InUse {
        /// The member id file.
        path: PathBuf,
    },
    /// The file holds something other than a member id.
    #[error("member id file {path} holds {content:?}, not a member id: {source}")]
    Invalid {
        /// The member id file.
        path: PathBuf,
        /// What it holds (at most 64 characters of it).
        content: String,
        /// Why it is not a member id.
        #[source]
        source: MemberIdError,
    },
    /// Reading, writing or locking failed.
    #[error("member id file {path}: {source}")]
    Io {
        /// The file the operation was on.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

/// A member id kept in a file across runs of the process (see the [module docs](self)).
#[derive(Debug)]
pub struct MemberIdFile {
    path: PathBuf,
    id: MemberId,
    kept: bool,
    /// The open lock file; the lock lasts as long as this handle.
    _lock: File,
}

impl MemberIdFile {
    /// Locks `path` for this process and reads the member id it holds; without one (no file, or
    /// an empty file), draws a new id ([`MemberId::generate`]) and writes it durably (a
    /// temporary file synced, renamed over `path`, the directory synced) before returning.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MemberIdFileError> {
        let path = path.as_ref().to_path_buf();
        let io_err = |p: &Path| {
            let p = p.to_path_buf();
            move |source| MemberIdFileError::Io { path: p, source }
        };
        let lock_path = with_suffix(&path, ".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(MemberIdFileError::InUse { path });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
        }
        let stored = match fs::read_to_string(&path) {
            Ok(s) => Some(s),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&path)(e)),
        };
        let (id, kept) = match stored.as_deref().map(str::trim) {
            Some(s) if !s.is_empty() => {
                let id = MemberId::parse(s).map_err(|source| MemberIdFileError::Invalid {
                    path: path.clone(),
                    content: s.chars().take(64).collect(),
                    source,
                })?;
                (id, true)
            }
            _ => {
                let id = MemberId::generate();
                write_durably(&path, id.as_str()).map_err(io_err(&path))?;
                (id, false)
            }
        };
        Ok(Self {
            path,
            id,
            kept,
            _lock: lock,
        })
    }

    /// The member id.
    pub fn member_id(&self) -> MemberId {
        self.id
    }

    /// Whether the id was written by an earlier run (the broker may still hold it registered),
    /// rather than drawn now.
    pub fn kept(&self) -> bool {
        self.kept
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `group` with this member id: a kept one as
    /// [`with_kept_member_id`](GroupConfig::with_kept_member_id) (released with a -2 leave of
    /// its own if the broker still holds it), a new one as
    /// [`with_member_id`](GroupConfig::with_member_id).
    pub fn configure(&self, group: GroupConfig) -> GroupConfig {
        if self.kept {
            group.with_kept_member_id(self.id)
        } else {
            group.with_member_id(self.id)
        }
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Writes `content` to `path` so that a crash leaves either the old file or the new one, on
/// disk: a temporary file beside it, synced, renamed over it, and the directory synced.
fn write_durably(path: &Path, content: &str) -> io::Result<()> {
    let tmp = with_suffix(path, ".tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(content.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Directories open read-only on Unix; syncing one makes the rename durable.
    if let Ok(d) = File::open(dir) {
        d.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "member-id-file-{}-{}",
            std::process::id(),
            MemberId::generate()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_new_file_gets_an_id_that_the_next_open_keeps() {
        let path = dir().join("m.id");
        let first = MemberIdFile::open(&path).unwrap();
        assert!(!first.kept());
        let id = first.member_id();
        assert_eq!(fs::read_to_string(&path).unwrap().trim(), id.as_str());
        let group = first.configure(GroupConfig::new("g"));
        assert_eq!((group.member_id, group.kept_member_id), (Some(id), false));
        drop(first);
        let second = MemberIdFile::open(&path).unwrap();
        assert!(second.kept());
        assert_eq!(second.member_id(), id);
        let group = second.configure(GroupConfig::new("g").with_instance_id("i"));
        assert_eq!((group.member_id, group.kept_member_id), (Some(id), true));
        group.validate().unwrap();
    }

    #[test]
    fn a_second_holder_is_refused_while_the_first_lives() {
        let path = dir().join("m.id");
        let first = MemberIdFile::open(&path).unwrap();
        let err = MemberIdFile::open(&path).unwrap_err();
        assert!(
            matches!(&err, MemberIdFileError::InUse { path: p } if p == &path),
            "{err}"
        );
        drop(first);
        MemberIdFile::open(&path).unwrap();
    }

    #[test]
    fn a_file_without_a_member_id_is_a_typed_error() {
        let path = dir().join("m.id");
        fs::write(&path, "not-a-member-id").unwrap();
        let err = MemberIdFile::open(&path).unwrap_err();
        assert!(matches!(err, MemberIdFileError::Invalid { .. }), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "not-a-member-id");
    }

    #[test]
    fn a_missing_directory_is_an_io_error_naming_the_file() {
        let path = dir().join("absent").join("m.id");
        let err = MemberIdFile::open(&path).unwrap_err();
        assert!(matches!(err, MemberIdFileError::Io { .. }), "{err}");
        assert!(err.to_string().contains("absent"), "{err}");
    }
}
