//! The operator's images that go with a complaint's reply or a refusal: told by their bytes and
//! bounded by kassa's rules (WeChat Pay's), then by what the provider they go to takes, where it
//! takes less.

/// WeChat Pay: images sent with a reply, or with a refusal of the buyer's refund request, at most.
pub const CASE_IMAGES_MAX: usize = 4;
/// The largest image WeChat Pay takes (2 MB).
pub const CASE_IMAGE_BYTES_MAX: usize = 2 * 1024 * 1024;

/// The kinds of image WeChat Pay takes, told by their first bytes (never by a name the operator's
/// file happened to have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    Jpeg,
    Png,
    Bmp,
}

impl ImageKind {
    /// The kind of `bytes`, by their signature; `None` for anything else.
    pub fn sniff(bytes: &[u8]) -> Option<ImageKind> {
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageKind::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageKind::Png)
        } else if bytes.starts_with(b"BM") {
            Some(ImageKind::Bmp)
        } else {
            None
        }
    }

    /// The file name's ending WeChat asks for.
    pub fn extension(self) -> &'static str {
        match self {
            ImageKind::Jpeg => "jpg",
            ImageKind::Png => "png",
            ImageKind::Bmp => "bmp",
        }
    }

    /// The kind's name, as a refusal says it.
    pub fn name(self) -> &'static str {
        match self {
            ImageKind::Jpeg => "JPEG",
            ImageKind::Png => "PNG",
            ImageKind::Bmp => "BMP",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            ImageKind::Jpeg => "image/jpeg",
            ImageKind::Png => "image/png",
            ImageKind::Bmp => "image/bmp",
        }
    }
}

/// An image the operator sends with a complaint's reply or refusal, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseImage {
    pub kind: ImageKind,
    pub bytes: Vec<u8>,
}

/// Why images may not be sent: a refusal's code and message.
pub type ImageRefusal = (&'static str, String);

/// The operator's images, checked: at most [`CASE_IMAGES_MAX`], each a JPEG, PNG or BMP of 1 byte
/// to [`CASE_IMAGE_BYTES_MAX`].
pub fn check_images(images: Vec<Vec<u8>>) -> Result<Vec<CaseImage>, ImageRefusal> {
    if images.len() > CASE_IMAGES_MAX {
        return Err(("too_many_images", format!("at most {CASE_IMAGES_MAX} images")));
    }
    images
        .into_iter()
        .enumerate()
        .map(|(n, bytes)| {
            if bytes.len() > CASE_IMAGE_BYTES_MAX {
                return Err(("image_too_large", format!("image {}: at most {CASE_IMAGE_BYTES_MAX} bytes", n + 1)));
            }
            let kind = ImageKind::sniff(&bytes)
                .ok_or_else(|| ("image_type_refused", format!("image {}: JPEG, PNG or BMP only", n + 1)))?;
            Ok(CaseImage { kind, bytes })
        })
        .collect()
}

/// What a provider takes of the operator's images where it takes less than kassa's rules: the
/// kinds, the largest image and how many go with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// The provider, as a refusal names it.
    pub provider: &'static str,
    pub kinds: &'static [ImageKind],
    pub bytes_max: usize,
    pub count_max: usize,
}

/// The largest image Alipay's `alipay.merchant.image.upload` takes (5 MB; kassa's own 2 MB is
/// less, and holds).
pub const ALIPAY_IMAGE_BYTES_MAX: usize = 5 * 1024 * 1024;
/// Images with one Alipay reply: Alipay names no most for `reply_images`, so kassa's own.
pub const ALIPAY_IMAGES_MAX: usize = CASE_IMAGES_MAX;
/// Alipay takes a JPEG or a PNG (`image_type` jpg, jpeg or png), no BMP.
pub const ALIPAY_IMAGES: ImageLimits = ImageLimits {
    provider: "Alipay",
    kinds: &[ImageKind::Jpeg, ImageKind::Png],
    bytes_max: ALIPAY_IMAGE_BYTES_MAX,
    count_max: ALIPAY_IMAGES_MAX,
};

// kassa's own bounds hold where Alipay's are wider: the size kassa checks first is within Alipay's.
const _: () = assert!(CASE_IMAGE_BYTES_MAX <= ALIPAY_IMAGE_BYTES_MAX && ALIPAY_IMAGES_MAX <= CASE_IMAGES_MAX);

impl ImageLimits {
    /// Whether images [`check_images`] passed are within the provider's limits too; the first
    /// refusal, in [`check_images`]'s codes, before anything is uploaded.
    pub fn admit(&self, images: &[CaseImage]) -> Result<(), ImageRefusal> {
        if images.len() > self.count_max {
            return Err(("too_many_images", format!("{} takes at most {} images", self.provider, self.count_max)));
        }
        for (n, image) in images.iter().enumerate() {
            if image.bytes.len() > self.bytes_max {
                let why = format!("image {}: {} takes at most {} bytes", n + 1, self.provider, self.bytes_max);
                return Err(("image_too_large", why));
            }
            if !self.kinds.contains(&image.kind) {
                let kinds: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
                let why = format!("image {}: {} takes {} only", n + 1, self.provider, kinds.join(" or "));
                return Err(("image_type_refused", why));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_told_by_their_bytes_and_bounded() {
        let png = b"\x89PNG\r\n\x1a\nrest".to_vec();
        let jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 1];
        let checked = check_images(vec![png.clone(), jpeg, b"BM..".to_vec()]).unwrap();
        let kinds: Vec<ImageKind> = checked.iter().map(|i| i.kind).collect();
        assert_eq!(kinds, vec![ImageKind::Png, ImageKind::Jpeg, ImageKind::Bmp]);
        assert_eq!((ImageKind::Png.extension(), ImageKind::Jpeg.content_type()), ("png", "image/jpeg"));
        assert_eq!(check_images(vec![png.clone(); CASE_IMAGES_MAX]).map(|v| v.len()), Ok(CASE_IMAGES_MAX));
        assert_eq!(check_images(vec![png.clone(); CASE_IMAGES_MAX + 1]).unwrap_err().0, "too_many_images");
        assert_eq!(check_images(vec![b"GIF89a".to_vec()]).unwrap_err().0, "image_type_refused");
        assert_eq!(check_images(vec![Vec::new()]).unwrap_err().0, "image_type_refused");
        let mut large = png.clone();
        large.resize(CASE_IMAGE_BYTES_MAX, 0);
        assert!(check_images(vec![large.clone()]).is_ok());
        large.push(0);
        assert_eq!(check_images(vec![large]).unwrap_err().0, "image_too_large");
    }

    #[test]
    fn a_provider_that_takes_less_refuses_the_rest_before_any_upload() {
        let png = check_images(vec![b"\x89PNG\r\n\x1a\nrest".to_vec()]).unwrap();
        let bmp = check_images(vec![b"BM..".to_vec()]).unwrap();
        assert_eq!(ALIPAY_IMAGES.admit(&png), Ok(()));
        let refused = ALIPAY_IMAGES.admit(&[png[0].clone(), bmp[0].clone()]).unwrap_err();
        assert_eq!(refused, ("image_type_refused", "image 2: Alipay takes JPEG or PNG only".to_string()));
        let tight = ImageLimits { provider: "X", kinds: &[ImageKind::Png], bytes_max: 4, count_max: 1 };
        assert_eq!(tight.admit(&[png[0].clone(), png[0].clone()]).unwrap_err().0, "too_many_images");
        assert_eq!(tight.admit(&png).unwrap_err().0, "image_too_large");
    }
}
