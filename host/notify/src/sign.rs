//! Signatures per the Standard Webhooks specification.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A new signing secret: `whsec_` and 24 random bytes in base64.
pub fn new_secret() -> String {
    let bytes: [u8; 24] = rand::random();
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// The `webhook-signature` header's value for a message: `v1,` and the
/// base64 HMAC-SHA256, keyed by the secret's bytes, of `id.timestamp.body`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String, String> {
    Ok(SigningKey::decode(secret)?.sign(id, timestamp, body))
}

/// A signing secret, decoded and keyed once for every message it signs.
#[derive(Clone)]
pub struct SigningKey(Hmac<Sha256>);

impl SigningKey {
    /// Decodes a `whsec_…` secret (the prefix is optional).
    pub fn decode(secret: &str) -> Result<SigningKey, String> {
        let key = STANDARD
            .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
            .map_err(|e| format!("the signing secret is not base64: {e}"))?;
        Hmac::<Sha256>::new_from_slice(&key).map(SigningKey).map_err(|e| e.to_string())
    }

    /// The `webhook-signature` header's value for a message (see [`sign`]).
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = self.0.clone();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_specification_s_example_signs_alike() {
        let signature = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        )
        .unwrap();
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let secret = new_secret();
        assert!(secret.starts_with("whsec_") && sign(&secret, "a", 1, b"b").is_ok());
        assert_ne!(new_secret(), secret);
    }
}
