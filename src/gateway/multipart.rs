//! multipart/form-data bodies as the providers' image uploads take them (WeChat Pay's
//! `images/upload`, Alipay's `alipay.merchant.image.upload`): parts in order, each a text or a
//! file, under a boundary that occurs in none of them. Pure.

/// One part of a body: its field name, its file name (a file part only) and content type (when
/// named), and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub name: &'a str,
    pub filename: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub bytes: &'a [u8],
}

impl<'a> Part<'a> {
    /// A text field.
    pub fn text(name: &'a str, value: &'a str) -> Part<'a> {
        Part { name, filename: None, content_type: None, bytes: value.as_bytes() }
    }

    /// A file.
    pub fn file(name: &'a str, filename: &'a str, content_type: &'a str, bytes: &'a [u8]) -> Part<'a> {
        Part { name, filename: Some(filename), content_type: Some(content_type), bytes }
    }
}

/// A boundary that occurs in no part (nor in a part's name): `kassa-` and `seed` (random hex),
/// `seed` repeated until it does not.
pub fn boundary(seed: &str, parts: &[Part<'_>]) -> String {
    let occurs = |b: &str| {
        parts.iter().any(|p| {
            p.bytes.windows(b.len()).any(|w| w == b.as_bytes())
                || p.name.contains(b)
                || p.filename.is_some_and(|f| f.contains(b))
        })
    };
    let mut boundary = format!("kassa-{seed}");
    while occurs(&boundary) {
        boundary.push_str(seed);
    }
    boundary
}

/// The body of `parts` under `boundary` (from [`boundary`]); its content type is
/// `multipart/form-data; boundary=…`.
pub fn body(boundary: &str, parts: &[Part<'_>]) -> Vec<u8> {
    let size: usize = parts.iter().map(|p| p.bytes.len() + 160).sum();
    let mut body = Vec::with_capacity(size + boundary.len() + 8);
    for part in parts {
        let mut head = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"", part.name);
        if let Some(filename) = part.filename {
            head.push_str(&format!("; filename=\"{filename}\""));
        }
        head.push_str("\r\n");
        if let Some(content_type) = part.content_type {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str("\r\n");
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(part.bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

/// The content type of a body under `boundary`.
pub fn content_type(boundary: &str) -> String {
    format!("multipart/form-data; boundary={boundary}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_go_in_order_under_a_boundary_none_of_them_holds() {
        let image = b"\x89PNG\r\n\x1a\nkassa-ab";
        let parts = [Part::text("image_type", "png"), Part::file("image_content", "a.png", "image/png", image)];
        let b = boundary("ab", &parts);
        assert_eq!(b, "kassa-abab");
        let body = body(&b, &parts);
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.starts_with("--kassa-abab\r\nContent-Disposition: form-data; name=\"image_type\"\r\n\r\npng\r\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "--kassa-abab\r\nContent-Disposition: form-data; name=\"image_content\"; filename=\"a.png\"\r\n\
                 Content-Type: image/png\r\n\r\n"
            ),
            "{text}"
        );
        assert!(body.ends_with(b"\x89PNG\r\n\x1a\nkassa-ab\r\n--kassa-abab--\r\n"));
        assert_eq!(content_type(&b), "multipart/form-data; boundary=kassa-abab");
        assert_eq!(boundary("cd", &parts), "kassa-cd");
    }
}
