//! The compiled-code cache on disk.
//!
//! Compiling a component with Cranelift takes hundreds of milliseconds; loading
//! the compiled artifact takes well under one. Artifacts are stored as
//! `<sha256 of the component>-<engine fingerprint>.cwasm`, next to a MAC
//! computed with a key that only this cache directory holds.
//!
//! Deserializing an artifact is `unsafe` in wasmtime for a good reason: it is
//! machine code that runs as is. So an artifact is loaded only if its MAC
//! proves that this host wrote it; anything else (a file someone dropped in,
//! a torn write, another build's output) is ignored and recompiled.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::{Error, Result};

type HmacSha256 = Hmac<Sha256>;

const KEY_FILE: &str = "cache.key";
const MAC_LEN: usize = 32;

pub(crate) struct CodeCache {
    dir: PathBuf,
    key: [u8; 32],
    fingerprint: String,
}

/// How a component got its machine code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeSource {
    /// Compiled now (and written to the cache, if there is one).
    Compiled,
    /// Loaded from the on-disk cache.
    Cached,
}

impl CodeCache {
    pub(crate) fn open(dir: &Path, engine: &Engine) -> Result<Self> {
        let io = |e: std::io::Error| Error::Cache { path: dir.to_path_buf(), message: e.to_string() };
        fs::create_dir_all(dir).map_err(io)?;
        let key = open_key(&dir.join(KEY_FILE)).map_err(io)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let fingerprint = format!("{:016x}", hasher.finish());
        Ok(CodeCache { dir: dir.to_path_buf(), key, fingerprint })
    }

    fn artifact_path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.fingerprint))
    }

    fn mac(&self, artifact: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.key) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts any key length"),
        };
        mac.update(self.fingerprint.as_bytes());
        mac.update(artifact);
        mac
    }

    /// Returns a cached artifact for the component with this hash, if one
    /// exists and this host wrote it.
    /// Whether an artifact for the component with this hash is on disk
    /// (its MAC is checked when it is loaded).
    pub(crate) fn contains(&self, sha256: &str) -> bool {
        self.artifact_path(sha256).is_file()
    }

    pub(crate) fn get(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.artifact_path(sha256);
        let mut bytes = fs::read(&path).ok()?;
        if bytes.len() < MAC_LEN {
            return None;
        }
        let artifact_len = bytes.len() - MAC_LEN;
        let stored_mac = bytes.split_off(artifact_len);
        if self.mac(&bytes).verify_slice(&stored_mac).is_err() {
            tracing::warn!(path = %path.display(), "ignoring a cached artifact that this host did not write");
            return None;
        }
        // SAFETY: the MAC above proves that this file is, byte for byte, an
        // artifact that `precompile_component` of an engine with the same
        // compatibility fingerprint produced on this host.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine, &bytes) };
        match component {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cached artifact failed to load; recompiling");
                None
            }
        }
    }

    fn info_path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.info.json", self.fingerprint))
    }

    /// What the component with this hash said of itself when this host
    /// described it (its `plugin-info`), if that is on disk with a MAC this
    /// host wrote: a node can list a plugin it has described before without
    /// loading it.
    pub(crate) fn get_info(&self, sha256: &str) -> Option<crate::PluginInfo> {
        let mut bytes = fs::read(self.info_path(sha256)).ok()?;
        if bytes.len() < MAC_LEN {
            return None;
        }
        let stored_mac = bytes.split_off(bytes.len() - MAC_LEN);
        let mut mac = self.mac(&bytes);
        mac.update(sha256.as_bytes());
        mac.verify_slice(&stored_mac).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub(crate) fn put_info(&self, sha256: &str, info: &crate::PluginInfo) {
        let Ok(mut contents) = serde_json::to_vec(info) else { return };
        let mut mac = self.mac(&contents);
        mac.update(sha256.as_bytes());
        contents.extend_from_slice(&mac.finalize().into_bytes());
        if let Err(e) = write_atomically(&self.info_path(sha256), &contents) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write a plugin's description to the cache");
        }
    }

    pub(crate) fn put(&self, sha256: &str, artifact: &[u8]) {
        let mut contents = Vec::with_capacity(artifact.len() + MAC_LEN);
        contents.extend_from_slice(artifact);
        contents.extend_from_slice(&self.mac(artifact).finalize().into_bytes());
        if let Err(e) = write_atomically(&self.artifact_path(sha256), &contents) {
            // A cache that cannot be written only costs time.
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the compiled-code cache");
        }
    }
}

/// Compiles a component, through the cache when there is one, and builds its
/// memory images.
pub(crate) fn compile(
    engine: &Engine,
    cache: Option<&CodeCache>,
    bytes: &[u8],
) -> wasmtime::Result<(Component, CodeSource)> {
    let (component, source) = compile_code(engine, cache, bytes)?;
    initialize_memory_images(&component)?;
    Ok((component, source))
}

fn compile_code(engine: &Engine, cache: Option<&CodeCache>, bytes: &[u8]) -> wasmtime::Result<(Component, CodeSource)> {
    let sha256 = sha256_hex(bytes);
    if let Some(cache) = cache {
        if let Some(component) = cache.get(engine, &sha256) {
            return Ok((component, CodeSource::Cached));
        }
        let artifact = engine.precompile_component(bytes)?;
        // SAFETY: `artifact` was produced a moment ago by this engine's
        // `precompile_component`; it never left this process.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine, &artifact)? };
        cache.put(&sha256, &artifact);
        return Ok((component, CodeSource::Compiled));
    }
    Ok((Component::new(engine, bytes)?, CodeSource::Compiled))
}

/// How often building a component's memory images is tried before loading
/// fails, and the pause before the first retry (doubled each time).
const IMAGE_TRIES: u32 = 8;
const IMAGE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Builds the copy-on-write images of the component's linear memories now,
/// at load, instead of at its first instantiation (wasmtime would do it
/// lazily, so a failure there fails a task).
///
/// On Linux each image is a sealed memfd, and sealing it fails with `EBUSY`
/// while the kernel still holds a transient reference to one of its pages
/// (a page written on one CPU sits in that CPU's LRU batch, which sealing on
/// another CPU does not drain, or a page being migrated). The kernel waits
/// ~150 ms for such references before it gives up; it is not the
/// component's fault and passes, so it is retried (for ~2.5 s at most);
/// wasmtime keeps nothing of a failed try.
fn initialize_memory_images(component: &Component) -> wasmtime::Result<()> {
    let mut pause = IMAGE_RETRY_PAUSE;
    let mut tries = 1;
    loop {
        match component.initialize_copy_on_write_image() {
            Ok(()) => return Ok(()),
            Err(e) if tries < IMAGE_TRIES => {
                tracing::debug!(error = %format!("{e:#}"), tries, "building the memory images failed; retrying");
                std::thread::sleep(pause);
                pause *= 2;
                tries += 1;
            }
            Err(e) => return Err(e.context(format!("building the memory images failed {IMAGE_TRIES} times"))),
        }
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The cache's key: the one on disk, or a new one. Processes that share a
/// cache directory (nodes, the CLI) and start together must agree on it, or
/// each would take the others' artifacts for strangers and compile them
/// again: a new key is written only if no key file exists (the first writer
/// wins, the others read its key). A key file of the wrong length (torn by
/// a crash before writes were atomic) is replaced.
fn open_key(path: &Path) -> std::io::Result<[u8; 32]> {
    // None: no key file; Some(None): one of the wrong length.
    let read = |path: &Path| -> std::io::Result<Option<Option<[u8; 32]>>> {
        match fs::read(path) {
            Ok(bytes) => Ok(Some(<[u8; 32]>::try_from(bytes.as_slice()).ok())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    };
    let found = read(path)?;
    if let Some(Some(key)) = found {
        return Ok(key);
    }
    let key: [u8; 32] = rand::random();
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    tmp.write_all(&key)?;
    tmp.as_file().sync_all()?;
    let replace = |tmp: tempfile::NamedTempFile| -> std::io::Result<[u8; 32]> {
        // Whoever else found it torn replaces it too: the last rename wins,
        // and a loser only compiles again.
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(read(path)?.flatten().unwrap_or(key))
    };
    if found.is_some() {
        return replace(tmp);
    }
    match tmp.persist_noclobber(path) {
        Ok(_) => Ok(key),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => match read(path)? {
            Some(Some(theirs)) => Ok(theirs),
            _ => replace(e.file),
        },
        Err(e) => Err(e.error),
    }
}

fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_starting_together_agree_on_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        let keys: Vec<[u8; 32]> = std::thread::scope(|scope| {
            let opens: Vec<_> = (0..8).map(|_| scope.spawn(|| open_key(&path).unwrap())).collect();
            opens.into_iter().map(|open| open.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|key| *key == keys[0]), "every opener got the key on disk");
        assert_eq!(fs::read(&path).unwrap(), keys[0]);
        assert_eq!(open_key(&path).unwrap(), keys[0], "and it stays");
        let mode = std::os::unix::fs::PermissionsExt::mode(&fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_torn_key_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        fs::write(&path, b"short").unwrap();
        let key = open_key(&path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), key);
    }
}
