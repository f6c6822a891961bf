//! WeChat Pay's platform keys (docs/gateways/wechatpay.md §3): the keys WeChat signs answers and notifications
//! with, by the serial in `Wechatpay-Serial`. A merchant has a WeChat Pay public key
//! (`PUB_KEY_ID_…`, never expires, configured from a file), platform certificates (downloaded from
//! `/v3/certificates`, decrypted with the APIv3 key, replaced every few years with an overlap), or
//! both while WeChat moves a merchant from one to the other. Every key is kept by its serial until
//! it expires; a notification signed under a certificate serial not seen yet is worth one download.

use std::collections::HashMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;

use super::keys::{RsaVerifier, SectionKind, aes_gcm_open, certificate_serial_hex, pem_blocks};
use crate::clock::Millis;

/// The prefix of a WeChat Pay public key's id: such a serial is configured, never downloaded.
pub const PUBLIC_KEY_ID_PREFIX: &str = "PUB_KEY_ID_";
/// Certificates read from one `/v3/certificates` answer at most (WeChat lists one or two).
pub const CERTIFICATES_MAX: usize = 16;
/// The shortest time between two downloads asked for by an unknown serial (single flight).
pub const ON_DEMAND_GAP_MS: Millis = 60_000;
/// How often the certificates are downloaded in the background.
pub const REFRESH_EVERY_MS: Millis = 3_600_000;
/// Alert when the last certificate expires within this, and no public key is configured.
pub const EXPIRY_WARNING_MS: Millis = 30 * 24 * 3_600_000;

/// Where a key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The WeChat Pay public key, configured.
    PublicKey,
    /// A platform certificate, configured or downloaded.
    Certificate,
}

#[derive(Debug, Clone)]
pub struct PlatformKey {
    pub verifier: RsaVerifier,
    pub source: Source,
    /// When it stops being valid (`None`: never, a public key).
    pub expires_at: Option<Millis>,
}

/// The platform keys by serial.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    keys: HashMap<String, PlatformKey>,
}

/// Serials are hex for certificates (case differs between WeChat's lists and headers) and
/// `PUB_KEY_ID_…` for public keys.
fn normal(serial: &str) -> String {
    if serial.starts_with(PUBLIC_KEY_ID_PREFIX) { serial.to_string() } else { serial.to_ascii_uppercase() }
}

impl KeyRing {
    /// The configured keys: the WeChat Pay public key under its `PUB_KEY_ID_…` (`platform_serial`,
    /// required with it) and a platform certificate under the serial read from it (or
    /// `platform_serial`, when no public key is configured and it is set).
    pub fn configured(
        public_key_file: Option<&Path>,
        cert_file: Option<&Path>,
        platform_serial: Option<&str>,
    ) -> anyhow::Result<KeyRing> {
        let mut keys = KeyRing::default();
        if let Some(path) = public_key_file {
            let id = platform_serial.ok_or_else(|| {
                anyhow::anyhow!(
                    "platform_serial (the public key's PUB_KEY_ID_…) is required with platform_public_key_file"
                )
            })?;
            let verifier = RsaVerifier::from_file(path)?;
            keys.insert(id, PlatformKey { verifier, source: Source::PublicKey, expires_at: None });
        }
        if let Some(path) = cert_file {
            let text =
                std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            let cert = pem_blocks(&text)?.into_iter().find(|(kind, _)| *kind == SectionKind::Certificate);
            let cert_serial = cert.map(|(_, der)| certificate_serial_hex(&der)).transpose()?;
            // With a public key too, platform_serial names the public key; the certificate names itself.
            let serial = if public_key_file.is_some() {
                cert_serial
            } else {
                platform_serial.map(str::to_string).or(cert_serial)
            };
            let serial = serial.ok_or_else(|| {
                anyhow::anyhow!("the platform certificate's serial cannot be read; set platform_serial")
            })?;
            let verifier = RsaVerifier::from_pem(&text)?;
            keys.insert(&serial, PlatformKey { verifier, source: Source::Certificate, expires_at: None });
        }
        Ok(keys)
    }

    pub fn insert(&mut self, serial: &str, key: PlatformKey) {
        self.keys.insert(normal(serial), key);
    }

    /// The key for `serial`, if it is known and not expired at `now`.
    pub fn get(&self, serial: &str, now: Millis) -> Option<&RsaVerifier> {
        self.keys.get(&normal(serial)).filter(|k| k.expires_at.is_none_or(|at| at > now)).map(|k| &k.verifier)
    }

    /// Adds downloaded certificates; those known stay (during a change both sign), expired ones go.
    pub fn merge_certificates(&mut self, certificates: Vec<(String, PlatformKey)>, now: Millis) -> usize {
        let mut added = 0;
        for (serial, key) in certificates {
            if self.keys.insert(normal(&serial), key).is_none() {
                added += 1;
            }
        }
        self.keys.retain(|_, k| k.expires_at.is_none_or(|at| at > now));
        added
    }

    pub fn has_public_key(&self) -> bool {
        self.keys.values().any(|k| k.source == Source::PublicKey)
    }

    /// When the last certificate expires (`None` without certificates).
    pub fn certificates_end(&self) -> Option<Millis> {
        self.keys.values().filter(|k| k.source == Source::Certificate).filter_map(|k| k.expires_at).max()
    }

    pub fn serials(&self) -> Vec<String> {
        let mut serials: Vec<String> = self.keys.keys().cloned().collect();
        serials.sort_unstable();
        serials
    }
}

/// Whether a serial nobody knows may be found by downloading the certificates (a public key's id
/// cannot: it is configuration).
pub fn worth_downloading(serial: &str) -> bool {
    !serial.is_empty() && !serial.starts_with(PUBLIC_KEY_ID_PREFIX) && serial.bytes().all(|b| b.is_ascii_hexdigit())
}

#[derive(Deserialize)]
struct Listing {
    #[serde(default)]
    data: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    serial_no: String,
    effective_time: String,
    expire_time: String,
    encrypt_certificate: Sealed,
}

#[derive(Deserialize)]
struct Sealed {
    algorithm: String,
    nonce: String,
    #[serde(default)]
    associated_data: String,
    ciphertext: String,
}

fn millis(rfc3339: &str) -> Option<Millis> {
    let at = time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// The certificates of a `/v3/certificates` answer that are valid at `now`, each decrypted with
/// the APIv3 key (AES-256-GCM, its nonce and associated data): the decryption is what makes one
/// trustworthy. An entry that does not decrypt or hold an RSA key makes the whole answer refused.
pub fn read_certificates(body: &[u8], api_v3_key: &[u8], now: Millis) -> Result<Vec<(String, PlatformKey)>, String> {
    let listing: Listing = serde_json::from_slice(body).map_err(|e| format!("unreadable certificate list: {e}"))?;
    if listing.data.len() > CERTIFICATES_MAX {
        return Err(format!("{} certificates listed; at most {CERTIFICATES_MAX} are read", listing.data.len()));
    }
    let mut out = Vec::new();
    for entry in listing.data {
        let serial = entry.serial_no.trim();
        if !worth_downloading(serial) {
            return Err(format!("certificate serial {serial:?} is not hex"));
        }
        let (Some(from), Some(until)) = (millis(&entry.effective_time), millis(&entry.expire_time)) else {
            return Err(format!("certificate {serial}: unreadable validity"));
        };
        let sealed = &entry.encrypt_certificate;
        if sealed.algorithm != "AEAD_AES_256_GCM" {
            return Err(format!("certificate {serial}: unknown algorithm {}", sealed.algorithm));
        }
        let ciphertext = B64.decode(&sealed.ciphertext).map_err(|_| format!("certificate {serial}: bad base64"))?;
        let pem = aes_gcm_open(api_v3_key, sealed.nonce.as_bytes(), sealed.associated_data.as_bytes(), &ciphertext)
            .ok_or_else(|| format!("certificate {serial} does not decrypt with the APIv3 key"))?;
        let pem = String::from_utf8(pem).map_err(|_| format!("certificate {serial} is not PEM text"))?;
        let verifier = RsaVerifier::from_pem(&pem).map_err(|e| format!("certificate {serial}: {e}"))?;
        if from <= now && now < until {
            out.push((
                serial.to_string(),
                PlatformKey { verifier, source: Source::Certificate, expires_at: Some(until) },
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RsaVerifier {
        RsaVerifier::from_der(vec![1, 2, 3])
    }

    #[test]
    fn keys_are_found_by_serial_until_they_expire() {
        let mut ring = KeyRing::default();
        ring.insert("PUB_KEY_ID_0114232", PlatformKey { verifier: key(), source: Source::PublicKey, expires_at: None });
        ring.insert("5157f0e1", PlatformKey { verifier: key(), source: Source::Certificate, expires_at: Some(1_000) });
        assert!(ring.get("PUB_KEY_ID_0114232", i64::MAX).is_some(), "a public key never expires");
        assert!(ring.get("5157F0E1", 999).is_some(), "serials match whatever their case");
        assert!(ring.get("5157F0E1", 1_000).is_none(), "an expired certificate verifies nothing");
        assert!(ring.get("ABCDEF", 0).is_none());
        assert_eq!(ring.certificates_end(), Some(1_000));
        assert!(ring.has_public_key());
        let new = PlatformKey { verifier: key(), source: Source::Certificate, expires_at: Some(5_000) };
        assert_eq!(ring.merge_certificates(vec![("ABCDEF".into(), new)], 1_000), 1);
        assert_eq!(
            ring.serials(),
            vec!["ABCDEF".to_string(), "PUB_KEY_ID_0114232".to_string()],
            "the expired one went"
        );
    }

    #[test]
    fn only_certificate_serials_are_worth_a_download() {
        assert!(worth_downloading("5157F0E1A4B3"));
        assert!(!worth_downloading("PUB_KEY_ID_0114232"));
        assert!(!worth_downloading(""));
        assert!(!worth_downloading("../etc"));
    }

    #[test]
    fn a_certificate_list_that_does_not_decrypt_is_refused() {
        let body = serde_json::json!({"data": [{
            "serial_no": "5157F0E1", "effective_time": "2026-01-01T00:00:00+08:00", "expire_time": "2031-01-01T00:00:00+08:00",
            "encrypt_certificate": {"algorithm": "AEAD_AES_256_GCM", "nonce": "61f9c719728a", "associated_data": "certificate",
                                    "ciphertext": B64.encode([0u8; 64])}
        }]});
        let err = read_certificates(body.to_string().as_bytes(), &[7u8; 32], 0).unwrap_err();
        assert!(err.contains("does not decrypt"), "{err}");
        assert!(read_certificates(b"not json", &[7u8; 32], 0).is_err());
        assert_eq!(read_certificates(br#"{"data": []}"#, &[7u8; 32], 0).unwrap().len(), 0);
    }
}
