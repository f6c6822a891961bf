//! Encryption at rest for card keys: AES-256-GCM with a random nonce per key and the SKU as
//! associated data, and a keyed fingerprint (HMAC-SHA256) to find duplicates without plaintext.
//! Both sub-keys are derived from the one configured secret (`--keys-secret`, 32 bytes as hex).

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hmac;
use aws_lc_rs::rand::{SecureRandom as _, SystemRandom};

pub use crate::domain::catalog::KEY_LEN_MAX;

pub struct Vault {
    aead: LessSafeKey,
    fingerprint: hmac::Key,
    /// A value made with the secret and kept in the database, so a different secret is told
    /// apart before it seals or is asked to open anything. It reveals nothing of the secret.
    check: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VaultError {
    #[error("the keys secret must be 64 hexadecimal characters (32 bytes)")]
    BadSecret,
    #[error("encryption failed")]
    Seal,
    #[error("a stored key could not be decrypted (wrong keys secret?)")]
    Open,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(..)")
    }
}

fn derive(secret: &[u8], label: &str) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let tag = hmac::sign(&key, label.as_bytes());
    let mut out = [0_u8; 32];
    out.copy_from_slice(&tag.as_ref()[..32]);
    out
}

impl Vault {
    pub fn from_hex(secret_hex: &str) -> Result<Vault, VaultError> {
        let secret = hex::decode(secret_hex.trim()).map_err(|_| VaultError::BadSecret)?;
        if secret.len() != 32 {
            return Err(VaultError::BadSecret);
        }
        let enc = derive(&secret, "kassa card keys: encryption");
        let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &enc).map_err(|_| VaultError::BadSecret)?);
        let fingerprint = hmac::Key::new(hmac::HMAC_SHA256, &derive(&secret, "kassa card keys: fingerprint"));
        let check = hex::encode(derive(&secret, "kassa card keys: check value"));
        Ok(Vault { aead, fingerprint, check })
    }

    /// The secret's check value (hex), as stored beside the keys it sealed.
    pub fn check_value(&self) -> &str {
        &self.check
    }

    /// Whether `stored` is this secret's check value (compared in constant time).
    pub fn matches_check(&self, stored: &str) -> bool {
        aws_lc_rs::constant_time::verify_slices_are_equal(stored.as_bytes(), self.check.as_bytes()).is_ok()
    }

    /// A fresh random secret, as hex (demo mode).
    pub fn generate_secret() -> String {
        let mut bytes = [0_u8; 32];
        let _ = SystemRandom::new().fill(&mut bytes);
        hex::encode(bytes)
    }

    pub fn fingerprint(&self, sku: &str, key: &str) -> String {
        let mut msg = sku.as_bytes().to_vec();
        msg.push(0);
        msg.extend_from_slice(key.as_bytes());
        hex::encode(hmac::sign(&self.fingerprint, &msg).as_ref())
    }

    /// Returns (nonce, ciphertext with tag).
    pub fn seal(&self, sku: &str, key: &str) -> Result<(Vec<u8>, Vec<u8>), VaultError> {
        let mut nonce = [0_u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).map_err(|_| VaultError::Seal)?;
        let mut data = key.as_bytes().to_vec();
        self.aead
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(sku.as_bytes()), &mut data)
            .map_err(|_| VaultError::Seal)?;
        Ok((nonce.to_vec(), data))
    }

    pub fn open(&self, sku: &str, nonce: &[u8], ciphertext: &[u8]) -> Result<String, VaultError> {
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| VaultError::Open)?;
        let mut data = ciphertext.to_vec();
        let plain = self
            .aead
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(sku.as_bytes()), &mut data)
            .map_err(|_| VaultError::Open)?;
        String::from_utf8(plain.to_vec()).map_err(|_| VaultError::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_opens_and_fingerprints() {
        let v = Vault::from_hex(&Vault::generate_secret()).unwrap();
        let (nonce, ct) = v.seal("GAME", "AAAA-BBBB-CCCC").unwrap();
        assert!(!ct.windows(4).any(|w| w == b"AAAA"), "ciphertext must not contain the key");
        assert_eq!(v.open("GAME", &nonce, &ct).unwrap(), "AAAA-BBBB-CCCC");
        assert_eq!(v.open("OTHER", &nonce, &ct), Err(VaultError::Open), "bound to its SKU");
        assert_eq!(v.fingerprint("GAME", "k"), v.fingerprint("GAME", "k"));
        assert_ne!(v.fingerprint("GAME", "k"), v.fingerprint("GAME2", "k"));
        let other = Vault::from_hex(&Vault::generate_secret()).unwrap();
        assert_eq!(other.open("GAME", &nonce, &ct), Err(VaultError::Open));
        assert_eq!(Vault::from_hex("abcd").unwrap_err(), VaultError::BadSecret);
        assert!(v.matches_check(v.check_value()));
        assert!(!other.matches_check(v.check_value()), "another secret has another check value");
        assert_eq!(v.check_value().len(), 64);
        assert_ne!(v.check_value(), v.fingerprint("", ""), "the check value is not a key fingerprint");
    }
}
