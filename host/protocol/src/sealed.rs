//! Tenants' secrets sealed at rest.
//!
//! The store holds a secret's value only sealed: ChaCha20-Poly1305 under a
//! key of 32 bytes that the store does not hold (`[secrets] key` in the
//! config; `dagr serve` makes one in its data directory). The API seals a
//! value when a tenant writes it; a worker opens it when a plugin calls
//! `secret(name)`. The tenant and the secret's name are bound to the sealed
//! value as associated data, so a sealed value copied to another tenant or
//! name in the database does not open.
//!
//! A sealed value is `sealed:v1:` and the hex of a random 12-byte nonce
//! followed by the ciphertext and its tag. A value without that prefix was
//! written before secrets were sealed; it is read as it is, and sealed the
//! next time it is written.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

const PREFIX: &str = "sealed:v1:";
const NONCE_LEN: usize = 12;

/// The key that seals tenants' secrets, with the keys it replaced (they
/// still open). Its `Debug` does not show them.
#[derive(Clone)]
pub struct SecretKey {
    key: Key,
    previous: std::sync::Arc<[Key]>,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// Why a stored value did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("the sealed value is not hex, or too short")]
    Malformed,
    #[error(
        "the sealed value does not open with this key (another key sealed it, or it was changed or moved in the \
         database)"
    )]
    WrongKeyOrTampered,
}

/// What re-sealing a stored value comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reseal {
    /// Sealed under the current key: nothing to do.
    Current,
    /// Sealed under a previous key, or stored before sealing: this is its
    /// value sealed under the current key.
    Sealed(String),
}

impl SecretKey {
    fn from_key(key: Key) -> SecretKey {
        SecretKey { key, previous: std::sync::Arc::from(Vec::new()) }
    }

    /// A new random key.
    pub fn generate() -> SecretKey {
        let bytes: [u8; 32] = rand::random();
        SecretKey::from_key(Key::from(bytes))
    }

    /// This key, also opening what `previous` sealed.
    pub fn with_previous(self, previous: Vec<SecretKey>) -> SecretKey {
        let previous: Vec<Key> = previous.into_iter().map(|k| k.key).filter(|k| *k != self.key).collect();
        SecretKey { key: self.key, previous: std::sync::Arc::from(previous) }
    }

    /// The key from 64 hex digits.
    pub fn from_hex(text: &str) -> Result<SecretKey, String> {
        let bytes = hex::decode(text.trim()).map_err(|e| format!("not hex: {e}"))?;
        let bytes: [u8; 32] =
            bytes.try_into().map_err(|b: Vec<u8>| format!("{} bytes, not 32 (64 hex digits)", b.len()))?;
        Ok(SecretKey::from_key(Key::from(bytes)))
    }

    /// 64 hex digits, to store the key in a file.
    pub fn to_hex(&self) -> String {
        hex::encode(self.key.as_slice())
    }

    /// `value` sealed for the secret `name` of `tenant`.
    pub fn seal(&self, tenant: &str, name: &str, value: &str) -> String {
        let nonce_bytes: [u8; NONCE_LEN] = rand::random();
        let nonce = Nonce::from(nonce_bytes);
        let aad = associated(tenant, name);
        let sealed = ChaCha20Poly1305::new(&self.key)
            .encrypt(&nonce, Payload { msg: value.as_bytes(), aad: &aad })
            .unwrap_or_else(|_| unreachable!("ChaCha20-Poly1305 encrypts any message shorter than 256 GiB"));
        let mut out = String::with_capacity(PREFIX.len() + 2 * (NONCE_LEN + sealed.len()));
        out.push_str(PREFIX);
        out.push_str(&hex::encode(nonce_bytes));
        out.push_str(&hex::encode(sealed));
        out
    }

    /// The value of the secret `name` of `tenant` as the store holds it:
    /// opened if sealed (by this key or a previous one), as it is if it was
    /// written before sealing.
    pub fn open(&self, tenant: &str, name: &str, stored: &str) -> Result<String, OpenError> {
        self.open_with_which(tenant, name, stored).map(|(value, _)| value)
    }

    /// Whether `stored` needs sealing again under the current key, and if
    /// so its new form. An error if no key opens it.
    pub fn reseal(&self, tenant: &str, name: &str, stored: &str) -> Result<Reseal, OpenError> {
        match self.open_with_which(tenant, name, stored)? {
            (_, Some(0)) => Ok(Reseal::Current),
            (value, _) => Ok(Reseal::Sealed(self.seal(tenant, name, &value))),
        }
    }

    /// The value, and which key opened it (0: the current one; `None`: it
    /// was not sealed).
    fn open_with_which(&self, tenant: &str, name: &str, stored: &str) -> Result<(String, Option<usize>), OpenError> {
        let Some(hex_text) = stored.strip_prefix(PREFIX) else {
            return Ok((stored.to_owned(), None));
        };
        let bytes = hex::decode(hex_text).map_err(|_| OpenError::Malformed)?;
        if bytes.len() < NONCE_LEN + 16 {
            return Err(OpenError::Malformed);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::from_slice(nonce);
        let aad = associated(tenant, name);
        for (i, key) in std::iter::once(&self.key).chain(self.previous.iter()).enumerate() {
            if let Ok(opened) = ChaCha20Poly1305::new(key).decrypt(nonce, Payload { msg: sealed, aad: &aad }) {
                return String::from_utf8(opened).map(|v| (v, Some(i))).map_err(|_| OpenError::WrongKeyOrTampered);
            }
        }
        Err(OpenError::WrongKeyOrTampered)
    }

    /// Whether `stored` is sealed (not a value written before sealing).
    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(PREFIX)
    }
}

/// Tenant and name, unambiguously (a tenant name has no NUL).
fn associated(tenant: &str, name: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(tenant.len() + name.len() + 1);
    aad.extend_from_slice(tenant.as_bytes());
    aad.push(0);
    aad.extend_from_slice(name.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_tenant_and_name() {
        let key = SecretKey::generate();
        let sealed = key.seal("acme", "db_password", "hunter2");
        assert!(SecretKey::is_sealed(&sealed));
        assert!(!sealed.contains("hunter2"));
        assert_ne!(sealed, key.seal("acme", "db_password", "hunter2"), "a fresh nonce every time");
        assert_eq!(key.open("acme", "db_password", &sealed).unwrap(), "hunter2");

        assert_eq!(key.open("globex", "db_password", &sealed), Err(OpenError::WrongKeyOrTampered));
        assert_eq!(key.open("acme", "other", &sealed), Err(OpenError::WrongKeyOrTampered));
        assert_eq!(SecretKey::generate().open("acme", "db_password", &sealed), Err(OpenError::WrongKeyOrTampered));

        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 1;
        tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert_eq!(key.open("acme", "db_password", &tampered), Err(OpenError::WrongKeyOrTampered));
        assert_eq!(key.open("acme", "db_password", "sealed:v1:zz"), Err(OpenError::Malformed));
        assert_eq!(key.open("acme", "db_password", "sealed:v1:00ff"), Err(OpenError::Malformed));
    }

    #[test]
    fn previous_keys_open_and_reseal_moves_values_to_the_current_key() {
        let old = SecretKey::generate();
        let new = SecretKey::generate();
        let by_old = old.seal("acme", "db", "hunter2");
        let ring = new.clone().with_previous(vec![old.clone()]);
        assert_eq!(ring.open("acme", "db", &by_old).unwrap(), "hunter2", "a previous key still opens");
        assert_eq!(new.open("acme", "db", &by_old), Err(OpenError::WrongKeyOrTampered));
        let Reseal::Sealed(again) = ring.reseal("acme", "db", &by_old).unwrap() else { panic!("needs re-sealing") };
        assert_eq!(new.open("acme", "db", &again).unwrap(), "hunter2", "re-sealed under the new key");
        assert_eq!(ring.reseal("acme", "db", &again).unwrap(), Reseal::Current, "re-sealing twice does nothing");
        // Values stored before sealing are sealed; what no key opens is an error.
        let Reseal::Sealed(plain) = ring.reseal("acme", "db", "plain").unwrap() else { panic!("seals plain values") };
        assert_eq!(new.open("acme", "db", &plain).unwrap(), "plain");
        let stranger = SecretKey::generate().seal("acme", "db", "x");
        assert_eq!(ring.reseal("acme", "db", &stranger), Err(OpenError::WrongKeyOrTampered));
        assert_eq!(ring.reseal("acme", "other", &by_old), Err(OpenError::WrongKeyOrTampered), "still bound");
        // Sealing always uses the current key.
        assert_eq!(new.open("acme", "db", &ring.seal("acme", "db", "v")).unwrap(), "v");
    }

    #[test]
    fn values_written_before_sealing_are_read_as_they_are() {
        let key = SecretKey::generate();
        assert_eq!(key.open("acme", "token", "plain old value").unwrap(), "plain old value");
        assert!(!SecretKey::is_sealed("plain old value"));
    }

    #[test]
    fn keys_round_trip_through_hex_and_bad_ones_are_named() {
        let key = SecretKey::generate();
        let again = SecretKey::from_hex(&key.to_hex()).unwrap();
        assert_eq!(again.open("t", "n", &key.seal("t", "n", "v")).unwrap(), "v");
        assert!(SecretKey::from_hex("abc").unwrap_err().contains("not hex"));
        assert!(SecretKey::from_hex("abcd").unwrap_err().contains("2 bytes, not 32"));
        assert_eq!(format!("{key:?}"), "SecretKey(..)");
    }
}
