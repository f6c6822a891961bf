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
    /// The secret the order links' key is derived from.
    link_secret: [u8; 32],
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
        let link_secret = derive(&secret, "kassa card keys: order links");
        Ok(Vault { aead, fingerprint, check, link_secret })
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

/// Signs and checks the links to an order handed to whoever proved to be its buyer: a token
/// `<order_no>.<link id>.<expiry ms>.<tag>`, the tag HMAC-SHA256 over the order, the purpose, the
/// link's id and its expiry (base64url). The key is derived from the keys secret where one is
/// configured (a copy of the database alone then cannot make a link that reveals keys), else
/// from a random secret every instance reads from the database.
pub struct LinkSigner(hmac::Key);

/// What a link's token names, its signature checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkClaims {
    pub order_no: String,
    pub link_id: String,
    pub expires_at: i64,
}

impl std::fmt::Debug for LinkSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkSigner(..)")
    }
}

/// Longest link token read, in bytes.
pub const LINK_TOKEN_LEN_MAX: usize = 256;

impl LinkSigner {
    pub fn from_secret(secret: &[u8]) -> LinkSigner {
        LinkSigner(hmac::Key::new(hmac::HMAC_SHA256, &derive(secret, "kassa order links")))
    }

    fn message(order_no: &str, purpose: &str, link_id: &str, expires_at: i64) -> Vec<u8> {
        format!("{order_no}\0{purpose}\0{link_id}\0{expires_at}").into_bytes()
    }

    /// The token of link `link_id` to `order_no` for `purpose`, good until `expires_at`.
    pub fn sign(&self, order_no: &str, purpose: &str, link_id: &str, expires_at: i64) -> String {
        use base64::Engine as _;
        let tag = hmac::sign(&self.0, &Self::message(order_no, purpose, link_id, expires_at));
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref());
        format!("{order_no}.{link_id}.{expires_at}.{tag}")
    }

    /// The claims of a token for `purpose`, if its signature holds (checked in constant time);
    /// expiry and use are the caller's to check.
    pub fn verify(&self, token: &str, purpose: &str) -> Option<LinkClaims> {
        use base64::Engine as _;
        if token.len() > LINK_TOKEN_LEN_MAX {
            return None;
        }
        // From the right: an order number may hold a dot; the other three never do.
        let mut parts = token.rsplitn(4, '.');
        let (tag, expires, link_id, order_no) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let expires_at: i64 = expires.parse().ok()?;
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tag).ok()?;
        hmac::verify(&self.0, &Self::message(order_no, purpose, link_id, expires_at), &tag).ok()?;
        Some(LinkClaims { order_no: order_no.to_string(), link_id: link_id.to_string(), expires_at })
    }

    /// A fresh random link id (128 bits, hex).
    pub fn new_link_id() -> String {
        let mut bytes = [0_u8; 16];
        let _ = SystemRandom::new().fill(&mut bytes);
        hex::encode(bytes)
    }
}

impl Vault {
    /// The link signer of this keys secret.
    pub fn link_signer(&self) -> LinkSigner {
        LinkSigner::from_secret(self.link_secret.as_slice())
    }
}

/// The slow hash of a lookup password: Argon2id with its default cost (19 MiB, two passes), a
/// random salt, as a PHC string. Run it off the async threads.
pub fn hash_password(password: &str) -> Result<String, VaultError> {
    use argon2::password_hash::{PasswordHasher as _, SaltString};
    let mut salt = [0_u8; 16];
    SystemRandom::new().fill(&mut salt).map_err(|_| VaultError::Seal)?;
    let salt = SaltString::encode_b64(&salt).map_err(|_| VaultError::Seal)?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|_| VaultError::Seal)
}

/// Whether `password` is the one `stored` (a PHC string of [`hash_password`]) was made from.
pub fn verify_password(password: &str, stored: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier as _};
    PasswordHash::new(stored).is_ok_and(|h| argon2::Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_signed_for_their_order_purpose_and_expiry() {
        let s = LinkSigner::from_secret(b"secret");
        let token = s.sign("ORD1", "order", "abc", 1000);
        let claims = s.verify(&token, "order").unwrap();
        assert_eq!(claims, LinkClaims { order_no: "ORD1".into(), link_id: "abc".into(), expires_at: 1000 });
        assert!(s.verify(&token, "other").is_none(), "bound to its purpose");
        assert!(s.verify(&token.replace(".1000.", ".1001."), "order").is_none(), "expiry signed");
        assert!(s.verify(&token.replace("ORD1", "ORD2"), "order").is_none(), "order signed");
        assert!(LinkSigner::from_secret(b"other").verify(&token, "order").is_none());
        assert!(s.verify("a.b.c", "order").is_none());
        assert!(s.verify(&format!("{token}.x"), "order").is_none());
        let dotted = s.sign("ORD.1", "order", "abc", 1000);
        assert_eq!(s.verify(&dotted, "order").unwrap().order_no, "ORD.1");
        assert_eq!(LinkSigner::new_link_id().len(), 32);
    }

    #[test]
    fn passwords_are_hashed_slowly_and_checked() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("correct hors", &h));
        assert!(!verify_password("correct horse", "not a hash"));
        assert_ne!(hash_password("correct horse").unwrap(), h, "salted");
    }

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
