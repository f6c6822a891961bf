//! Key material and primitives the real gateways use, all through aws-lc-rs: PEM files, RSA
//! PKCS#1 v1.5 SHA-256 signatures (Alipay RSA2, WeChat Pay v3), AES-256-GCM (WeChat resources),
//! HMAC-SHA256 (Stripe). Nothing here logs or formats key material.

use std::path::Path;

use aws_lc_rs::signature::{self, KeyPair as _, UnparsedPublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rand::Rng;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

/// The DER blocks of a PEM text with their labels. Text without any `-----BEGIN` line is read as
/// one bare base64 block (Alipay's console hands out public keys that way).
pub fn pem_blocks(text: &str) -> Result<Vec<(String, Vec<u8>)>, KeyError> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines().map(str::trim) {
        if let Some(label) = line.strip_prefix("-----BEGIN ").and_then(|l| l.strip_suffix("-----")) {
            current = Some((label.to_string(), String::new()));
        } else if line.starts_with("-----END ") {
            let (label, body) = current.take().ok_or_else(|| KeyError::Invalid("PEM END without BEGIN".into()))?;
            let der = B64.decode(body).map_err(|_| KeyError::Invalid(format!("PEM block {label} is not base64")))?;
            blocks.push((label, der));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
        }
    }
    if blocks.is_empty() && !text.contains("-----BEGIN") {
        let bare: String = text.split_whitespace().collect();
        let der = B64.decode(bare).map_err(|_| KeyError::Invalid("neither PEM nor base64".into()))?;
        blocks.push(("PUBLIC KEY".to_string(), der));
    }
    Ok(blocks)
}

fn read(path: &Path) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Read { path: path.display().to_string(), source })
}

/// Random ASCII letters and digits, for nonces.
pub fn nonce(len: usize) -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len).map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())])).collect()
}

/// An RSA private key that signs with SHA256withRSA (PKCS#1 v1.5).
pub struct RsaSigner {
    key: signature::RsaKeyPair,
}

impl std::fmt::Debug for RsaSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RsaSigner(..)")
    }
}

impl RsaSigner {
    /// From PEM text: `PRIVATE KEY` (PKCS#8) or `RSA PRIVATE KEY` (PKCS#1).
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        for (label, der) in pem_blocks(text)? {
            let key = match label.as_str() {
                "PRIVATE KEY" => signature::RsaKeyPair::from_pkcs8(&der),
                "RSA PRIVATE KEY" => signature::RsaKeyPair::from_der(&der),
                _ => continue,
            };
            return key.map(|key| RsaSigner { key }).map_err(|e| KeyError::Invalid(format!("RSA private key: {e}")));
        }
        Err(KeyError::Invalid("no PRIVATE KEY or RSA PRIVATE KEY block".into()))
    }

    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        Self::from_pem(&read(path)?).map_err(|e| KeyError::Invalid(format!("{}: {e}", path.display())))
    }

    /// base64(SHA256withRSA(message)).
    pub fn sign_base64(&self, message: &[u8]) -> String {
        let mut sig = vec![0_u8; self.key.public_modulus_len()];
        let rng = aws_lc_rs::rand::SystemRandom::new();
        // Signing with a key that parsed cannot fail short of memory exhaustion; an empty
        // signature then simply fails verification at the gateway.
        if self.key.sign(&signature::RSA_PKCS1_SHA256, &rng, message, &mut sig).is_err() {
            sig.clear();
        }
        B64.encode(sig)
    }

    /// The public half as DER (RSAPublicKey), for tests and fakes.
    pub fn public_key_der(&self) -> Vec<u8> {
        self.key.public_key().as_ref().to_vec()
    }
}

/// An RSA public key that verifies SHA256withRSA signatures.
#[derive(Clone)]
pub struct RsaVerifier {
    der: Vec<u8>,
}

impl std::fmt::Debug for RsaVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RsaVerifier(..)")
    }
}

impl RsaVerifier {
    /// From PEM text (`PUBLIC KEY`, `RSA PUBLIC KEY` or a `CERTIFICATE`) or bare base64.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        for (label, der) in pem_blocks(text)? {
            let der = match label.as_str() {
                "PUBLIC KEY" | "RSA PUBLIC KEY" => der,
                "CERTIFICATE" => certificate_spki(&der)
                    .ok_or_else(|| KeyError::Invalid("certificate without a readable public key".into()))?
                    .to_vec(),
                _ => continue,
            };
            aws_lc_rs::rsa::PublicKey::from_der(&der).map_err(|_| KeyError::Invalid("not an RSA public key".into()))?;
            return Ok(RsaVerifier { der });
        }
        Err(KeyError::Invalid("no PUBLIC KEY or CERTIFICATE block".into()))
    }

    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        Self::from_pem(&read(path)?).map_err(|e| KeyError::Invalid(format!("{}: {e}", path.display())))
    }

    pub fn from_der(der: Vec<u8>) -> Self {
        RsaVerifier { der }
    }

    /// Checks base64 `signature` over `message`. Any decoding problem is a failed check.
    pub fn verify_base64(&self, message: &[u8], signature_b64: &str) -> bool {
        let Ok(sig) = B64.decode(signature_b64.trim()) else {
            return false;
        };
        UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &self.der).verify(message, &sig).is_ok()
    }
}

/// One DER element: (tag, content, rest).
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0_usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// One DER field: tag, content, and the whole encoding.
type DerField<'a> = (u8, &'a [u8], &'a [u8]);

/// The fields of an X.509 certificate's `tbsCertificate`, in order.
fn tbs_fields(cert: &[u8]) -> Option<Vec<DerField<'_>>> {
    let (_, certificate, _) = der_element(cert)?;
    let (tag, tbs, _) = der_element(certificate)?;
    if tag != 0x30 {
        return None;
    }
    let mut fields = Vec::new();
    let mut rest = tbs;
    while !rest.is_empty() {
        let whole = rest;
        let (tag, content, next) = der_element(rest)?;
        let full = &whole[..whole.len() - next.len()];
        fields.push((tag, content, full));
        rest = next;
    }
    // Skip the optional explicit version [0].
    if fields.first().is_some_and(|f| f.0 == 0xa0) {
        fields.remove(0);
    }
    Some(fields)
}

/// The SubjectPublicKeyInfo (DER) of an X.509 certificate: serial, signature, issuer, validity,
/// subject, then the key.
pub fn certificate_spki(cert: &[u8]) -> Option<&[u8]> {
    tbs_fields(cert)?.get(5).map(|f| f.2)
}

/// A certificate's serial number as upper-case hex, the form `Wechatpay-Serial` carries.
pub fn certificate_serial_hex(cert: &[u8]) -> Option<String> {
    let serial = tbs_fields(cert)?.first()?.1;
    let trimmed = match serial {
        [0, rest @ ..] if !rest.is_empty() => rest,
        s => s,
    };
    Some(hex::encode_upper(trimmed))
}

/// AES-256-GCM decryption of `ciphertext ‖ tag`.
pub fn aes_gcm_open(key: &[u8], nonce: &[u8], aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).ok()?);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut buf = sealed.to_vec();
    let plain = key.open_in_place(nonce, Aad::from(aad), &mut buf).ok()?;
    Some(plain.to_vec())
}

/// AES-256-GCM encryption to `ciphertext ‖ tag` (fakes and tests build notifications with it).
pub fn aes_gcm_seal(key: &[u8], nonce: &[u8], aad: &[u8], plain: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).ok()?);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut buf = plain.to_vec();
    key.seal_in_place_append_tag(nonce, Aad::from(aad), &mut buf).ok()?;
    Some(buf)
}

/// hex(HMAC-SHA256(key, message)).
pub fn hmac_sha256_hex(key: &[u8], message: &[u8]) -> String {
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key);
    hex::encode(aws_lc_rs::hmac::sign(&key, message).as_ref())
}

/// Constant-time check of hex(HMAC-SHA256(key, message)) against `expected_hex`.
pub fn hmac_sha256_verify_hex(key: &[u8], message: &[u8], expected_hex: &str) -> bool {
    let Ok(expected) = hex::decode(expected_hex) else {
        return false;
    };
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key);
    aws_lc_rs::hmac::verify(&key, message, &expected).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_base64_and_garbage() {
        assert!(pem_blocks("not base64 !!").is_err());
        assert_eq!(pem_blocks("AAEC").unwrap(), vec![("PUBLIC KEY".to_string(), vec![0, 1, 2])]);
        assert!(RsaSigner::from_pem("-----BEGIN PRIVATE KEY-----\nAAEC\n-----END PRIVATE KEY-----\n").is_err());
        assert!(RsaVerifier::from_pem("").is_err());
    }

    #[test]
    fn aes_gcm_round_trip_and_tamper() {
        let key = [7_u8; 32];
        let nonce = b"0123456789ab";
        let sealed = aes_gcm_seal(&key, nonce, b"aad", b"hello").unwrap();
        assert_eq!(aes_gcm_open(&key, nonce, b"aad", &sealed).unwrap(), b"hello");
        assert!(aes_gcm_open(&key, nonce, b"other", &sealed).is_none());
        assert!(aes_gcm_open(&key[..16], nonce, b"aad", &sealed).is_none());
    }

    #[test]
    fn der_walker_refuses_truncation() {
        assert!(certificate_spki(&[0x30, 0x82, 0x01]).is_none());
        assert!(certificate_serial_hex(&[]).is_none());
    }
}
