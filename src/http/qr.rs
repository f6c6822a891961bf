//! QR codes for the hand-off pages, drawn by kassa as inline SVG (the `qrcode` crate): a gateway
//! that answers with a link to scan (WeChat Pay Native's `code_url`) gets no image from its API.

use crate::error::{Error, Result};

/// Side of the drawn code, in pixels at least (the page scales it).
const SIDE_MIN_PX: u32 = 240;

/// The SVG element of a QR code of `text` (error correction M, with its quiet zone): shapes only,
/// ready to be placed in a page as it is.
pub fn svg(text: &str) -> Result<String> {
    let code = qrcode::QrCode::with_error_correction_level(text.as_bytes(), qrcode::EcLevel::M)
        .map_err(|e| Error::internal(format!("QR code of {} bytes: {e}", text.len())))?;
    let drawn = code
        .render::<qrcode::render::svg::Color<'_>>()
        .min_dimensions(SIDE_MIN_PX, SIDE_MIN_PX)
        .quiet_zone(true)
        .build();
    // The renderer writes a standalone document; a page takes the element alone.
    let start = drawn.find("<svg").ok_or_else(|| Error::internal("the QR renderer wrote no <svg> element"))?;
    Ok(drawn[start..].to_string())
}

/// The catalog key of the app a buyer scans a gateway's code with.
pub fn app_of(gateway: &str) -> &'static str {
    match gateway {
        "wechatpay" => "app.wechatpay",
        "alipay" => "app.alipay",
        _ => "app.other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the modules back out of [`svg`]'s drawing (its `M x y h w v h H x V y` squares) and
    /// decodes them with an independent decoder (`rqrr`).
    fn decode(svg: &str) -> String {
        let number = |t: &str, key: &str| -> u32 {
            let at = t.find(&format!("{key}=\"")).unwrap() + key.len() + 2;
            t[at..].split('"').next().unwrap().parse().unwrap()
        };
        let (width, height) = (number(svg, "width"), number(svg, "height"));
        let d = svg.split(" d=\"").nth(1).unwrap().split('"').next().unwrap();
        let mut dark = vec![false; (width * height) as usize];
        for square in d.split('M').filter(|s| !s.is_empty()) {
            let (x, rest) = square.split_once(' ').unwrap();
            let (y, rest) = rest.split_once('h').unwrap();
            let side: u32 = rest.split('v').next().unwrap().parse().unwrap();
            let (x, y): (u32, u32) = (x.parse().unwrap(), y.parse().unwrap());
            for dy in 0..side {
                for dx in 0..side {
                    dark[((y + dy) * width + x + dx) as usize] = true;
                }
            }
        }
        let mut image = rqrr::PreparedImage::prepare_from_bitmap(width as usize, height as usize, |x, y| {
            dark[y * width as usize + x]
        });
        let grids = image.detect_grids();
        assert_eq!(grids.len(), 1, "one code in the drawing");
        grids[0].decode().unwrap().1
    }

    #[test]
    fn a_drawn_code_reads_back_as_its_text() {
        let url = "weixin://wxpay/bizpayurl?pr=Ab12Cd3";
        let drawn = svg(url).unwrap();
        assert!(drawn.starts_with("<svg") && !drawn.contains("<?xml"), "{}", &drawn[..40]);
        assert!(!drawn.contains("bizpayurl") && !drawn.contains("<script"), "shapes only");
        assert_eq!(decode(&drawn), url);
    }
}
