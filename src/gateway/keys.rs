//! Key material and primitives the real gateways use: PEM files (rustls-pki-types), X.509
//! certificates (x509-cert), and through aws-lc-rs RSA PKCS#1 v1.5 SHA-256 signatures (Alipay RSA2,
//! WeChat Pay v3), AES-256-GCM (WeChat resources), HMAC-SHA256 (Stripe). Nothing here logs or
//! formats key material.

use std::path::Path;

use aws_lc_rs::signature::{self, KeyPair as _, UnparsedPublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rand::Rng;
use rustls_pki_types::pem::PemObject as _;
pub use rustls_pki_types::pem::SectionKind;
use serde::Deserialize;
use x509_cert::Certificate;
use x509_cert::der::{Decode as _, Encode as _};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

/// A secret string from the config: redacted in `Debug`.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The DER sections of a PEM text by kind, read by rustls-pki-types (private keys' base64 is
/// decoded in constant time; sections of a kind it does not know are skipped, text around them
/// is ignored).
///
/// Text without any `-----BEGIN` line is read as one bare base64 public key, the way Alipay's
/// console hands them out. That case stays by hand: it is no PEM at all, only base64 of the DER,
/// which the `base64` crate decodes.
pub fn pem_blocks(text: &str) -> Result<Vec<(SectionKind, Vec<u8>)>, KeyError> {
    if !text.contains("-----BEGIN") {
        let bare: String = text.split_whitespace().collect();
        let der = B64.decode(bare).map_err(|_| KeyError::Invalid("neither PEM nor base64".into()))?;
        return Ok(vec![(SectionKind::PublicKey, der)]);
    }
    <(SectionKind, Vec<u8>)>::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| KeyError::Invalid(format!("PEM: {e}")))
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
        for (kind, der) in pem_blocks(text)? {
            let key = match kind {
                SectionKind::PrivateKey => signature::RsaKeyPair::from_pkcs8(&der),
                SectionKind::RsaPrivateKey => signature::RsaKeyPair::from_der(&der),
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
        // rustls-pki-types knows no PKCS#1 `RSA PUBLIC KEY` label and would skip the section;
        // aws-lc-rs reads its DER (RSAPublicKey) as well as a SubjectPublicKeyInfo, so such a
        // section is read as a `PUBLIC KEY`.
        let text = text
            .replace("-----BEGIN RSA PUBLIC KEY-----", "-----BEGIN PUBLIC KEY-----")
            .replace("-----END RSA PUBLIC KEY-----", "-----END PUBLIC KEY-----");
        for (kind, der) in pem_blocks(&text)? {
            let der = match kind {
                SectionKind::PublicKey => der,
                SectionKind::Certificate => certificate_spki(&der)?,
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

/// An X.509 certificate read by x509-cert: strict DER, RFC 5280's profile (serials of up to 20
/// octets, 21 with the sign byte).
fn certificate(der: &[u8]) -> Result<Certificate, KeyError> {
    Certificate::from_der(der).map_err(|e| KeyError::Invalid(format!("unreadable certificate: {e}")))
}

/// The SubjectPublicKeyInfo (DER) of an X.509 certificate.
pub fn certificate_spki(cert: &[u8]) -> Result<Vec<u8>, KeyError> {
    certificate(cert)?
        .tbs_certificate()
        .subject_public_key_info()
        .to_der()
        .map_err(|e| KeyError::Invalid(format!("certificate public key: {e}")))
}

/// A certificate's serial number as upper-case hex, the form `Wechatpay-Serial` carries: the
/// INTEGER's bytes without the zero byte DER puts before a first byte of 0x80 or more.
pub fn certificate_serial_hex(cert: &[u8]) -> Result<String, KeyError> {
    let cert = certificate(cert)?;
    let serial = match cert.tbs_certificate().serial_number().as_bytes() {
        [0, rest @ ..] if !rest.is_empty() => rest,
        s => s,
    };
    Ok(hex::encode_upper(serial))
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

    /// An EC certificate whose serial's first byte is 0x80: DER gives it a leading zero byte.
    const HIGH_SERIAL_CERT: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBbjCCARSgAwIBAgIVAIAAAAAAAAAAAAAAAAAAAAAAAAABMAoGCCqGSM49BAMC\n\
MAwxCjAIBgNVBAMMAXMwHhcNMjYxMjA2MDcxNjA0WhcNMzYxMjAzMDcxNjA0WjAM\n\
MQowCAYDVQQDDAFzMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAELljbLWOKwSBG\n\
4m5fK/GPBidXXIRZ8KpGqmnofir6S4AcO5z+wwdJXKwIL05n2Rvw3Vl5Fzb6k7ww\n\
X4jnt/VbMqNTMFEwHQYDVR0OBBYEFD2dM38j+N0DfsvgQ/1I8aM5DjJnMB8GA1Ud\n\
IwQYMBaAFD2dM38j+N0DfsvgQ/1I8aM5DjJnMA8GA1UdEwEB/wQFMAMBAf8wCgYI\n\
KoZIzj0EAwIDSAAwRQIgS9XpP85bFZctKmo3sf0rdQc7JOY3UZgjf2D6AhTau+MC\n\
IQCOfjy2yVzsTLlbO9QOLJER1EHwhZ1tsD8aVhNxr3qa5g==\n\
-----END CERTIFICATE-----\n\
";

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gateways").join(name);
        std::fs::read_to_string(path).unwrap()
    }

    fn first_der(text: &str, kind: SectionKind) -> Vec<u8> {
        pem_blocks(text).unwrap().into_iter().find(|(k, _)| *k == kind).unwrap().1
    }

    #[test]
    fn bare_base64_and_garbage() {
        assert!(pem_blocks("not base64 !!").is_err());
        assert_eq!(pem_blocks("AAEC").unwrap(), vec![(SectionKind::PublicKey, vec![0, 1, 2])]);
        assert!(pem_blocks("-----BEGIN PUBLIC KEY-----\nAAEC\n").is_err(), "no END line");
        assert!(RsaSigner::from_pem("-----BEGIN PRIVATE KEY-----\nAAEC\n-----END PRIVATE KEY-----\n").is_err());
        assert!(RsaVerifier::from_pem("").is_err());
        assert!(RsaVerifier::from_pem("-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n").is_err());
    }

    #[test]
    fn every_key_form_verifies() {
        let signer = RsaSigner::from_pem(&fixture("provider_private.pem")).unwrap();
        let signature = signer.sign_base64(b"message");
        let pkcs1 = B64.encode(signer.public_key_der());
        let forms = [
            fixture("provider_public.pem"),
            fixture("provider_cert.pem"),
            format!("Bag Attributes: text around a section\n{}", fixture("provider_cert.pem")),
            format!("-----BEGIN RSA PUBLIC KEY-----\n{pkcs1}\n-----END RSA PUBLIC KEY-----\n"),
        ];
        for form in forms {
            let verifier = RsaVerifier::from_pem(&form).unwrap();
            assert!(verifier.verify_base64(b"message", &signature), "{form}");
            assert!(!verifier.verify_base64(b"other", &signature));
        }
        let pkcs1_signer = RsaSigner::from_pem(&fixture("merchant_private_pkcs1.pem")).unwrap();
        let merchant = RsaVerifier::from_pem(&fixture("merchant_public.pem")).unwrap();
        assert!(merchant.verify_base64(b"m", &pkcs1_signer.sign_base64(b"m")));
    }

    #[test]
    fn certificates_give_their_key_and_serial() {
        let cert = first_der(&fixture("provider_cert.pem"), SectionKind::Certificate);
        let spki = first_der(&fixture("provider_public.pem"), SectionKind::PublicKey);
        assert_eq!(certificate_spki(&cert).unwrap(), spki);
        assert_eq!(certificate_serial_hex(&cert).unwrap(), "5157F09EFDC096DE15EBE9A3F4A0A1B2C3D4E5F6");
        let rotated = first_der(&fixture("platform2_cert.pem"), SectionKind::Certificate);
        assert_eq!(certificate_serial_hex(&rotated).unwrap(), "6A3E2F0B77C1D4E5F60718293A4B5C6D7E8F9012");
        let high = first_der(HIGH_SERIAL_CERT, SectionKind::Certificate);
        assert_eq!(certificate_serial_hex(&high).unwrap(), "8000000000000000000000000000000000000001");
        assert!(RsaVerifier::from_pem(HIGH_SERIAL_CERT).is_err(), "an EC key is no RSA key");
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
    fn certificate_reader_refuses_truncation_and_trailing_bytes() {
        assert!(certificate_spki(&[0x30, 0x82, 0x01]).is_err());
        assert!(certificate_serial_hex(&[]).is_err());
        let mut cert = first_der(&fixture("provider_cert.pem"), SectionKind::Certificate);
        assert!(certificate_serial_hex(&cert[..cert.len() - 1]).is_err());
        cert.push(0);
        assert!(certificate_serial_hex(&cert).is_err());
    }
}
