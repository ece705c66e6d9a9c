//! Attachment previews (spec `app-server.md` §5.9, `thread/attachment/read {preview: true}`):
//! decode a PNG, JPEG or WebP image (format told by its signature bytes), drop any alpha,
//! shrink it with an area-averaging box filter so its longest side fits, and encode a
//! baseline JPEG. Each format uses its own small decoder (`png`, `zune-jpeg`,
//! `image-webp`) and `jpeg-encoder` writes the result, so the binary carries no general
//! image library. Animated PNG/WebP give their first frame; EXIF orientation and colour
//! profiles are not applied (as in the images' raw pixels).

use std::io::Cursor;

/// Most bytes a decoded image may take as RGB (width × height × 3, or × 4 with alpha:
/// 192 MiB holds a 48-megapixel photo); larger images are refused before their pixels
/// are allocated.
pub const MAX_DECODED_BYTES: usize = 192 << 20;

/// An 8-bit RGB image: `data` holds `width × height × 3` bytes, rows top to bottom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// Decodes `bytes` (PNG, JPEG or WebP, told by the signature) to RGB, alpha dropped and
/// grey replicated. Errors name the format and the decoder's reason, or say that the
/// format is not one of the three, or that the image exceeds `max_bytes` decoded.
pub fn decode_rgb(bytes: &[u8], max_bytes: usize) -> Result<Rgb, String> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(bytes, max_bytes).map_err(|e| format!("PNG: {e}"))
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        decode_jpeg(bytes, max_bytes).map_err(|e| format!("JPEG: {e}"))
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
        decode_webp(bytes, max_bytes).map_err(|e| format!("WebP: {e}"))
    } else {
        Err("the format is not PNG, JPEG or WebP".to_owned())
    }
}

/// Refuses an image whose decoded samples or RGB copy (`width × height × max(channels,
/// 3)`) exceed `max_bytes` (or overflow): a grey image is tripled by [`to_rgb`].
fn check_size(width: u64, height: u64, channels: u64, max_bytes: usize) -> Result<(), String> {
    match width
        .checked_mul(height)
        .and_then(|p| p.checked_mul(channels.max(3)))
    {
        Some(n) if n <= max_bytes as u64 => Ok(()),
        _ => Err(format!(
            "{width}×{height} px is larger than the {} MiB a preview may decode",
            max_bytes >> 20
        )),
    }
}

/// Packs interleaved 8-bit samples of `channels` (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA)
/// into RGB.
fn to_rgb(width: u32, height: u32, channels: usize, px: Vec<u8>) -> Result<Rgb, String> {
    let n = width as usize * height as usize;
    if px.len() < n * channels {
        return Err("the decoder returned fewer pixels than the image has".to_owned());
    }
    let data = match channels {
        3 => {
            let mut px = px;
            px.truncate(n * 3);
            px
        }
        1 | 2 => px
            .chunks_exact(channels)
            .take(n)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        4 => px
            .chunks_exact(4)
            .take(n)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        c => return Err(format!("{c} colour channels are not supported")),
    };
    Ok(Rgb {
        width,
        height,
        data,
    })
}

fn decode_png(bytes: &[u8], max_bytes: usize) -> Result<Rgb, String> {
    let limits = png::Limits { bytes: max_bytes };
    let mut dec = png::Decoder::new_with_limits(Cursor::new(bytes), limits);
    dec.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = dec.read_info().map_err(|e| e.to_string())?;
    let (w, h) = reader.info().size();
    let (color, _) = reader.output_color_type();
    let channels = color.samples();
    check_size(w.into(), h.into(), channels as u64, max_bytes)?;
    let len = reader
        .output_buffer_size()
        .ok_or("the image does not fit in memory")?;
    let mut buf = vec![0; len];
    let frame = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    buf.truncate(frame.buffer_size());
    to_rgb(frame.width, frame.height, channels, buf)
}

fn decode_jpeg(bytes: &[u8], max_bytes: usize) -> Result<Rgb, String> {
    use zune_core::colorspace::ColorSpace;
    let options = zune_core::options::DecoderOptions::default()
        .set_strict_mode(false)
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let mut dec = zune_jpeg::JpegDecoder::new_with_options(
        zune_core::bytestream::ZCursor::new(bytes),
        options,
    );
    dec.decode_headers().map_err(|e| e.to_string())?;
    let (w, h) = dec.dimensions().ok_or("no image dimensions")?;
    let out = match dec.input_colorspace() {
        Some(ColorSpace::Luma) => ColorSpace::Luma,
        _ => ColorSpace::RGB,
    };
    check_size(w as u64, h as u64, out.num_components() as u64, max_bytes)?;
    dec.set_options(dec.options().jpeg_set_out_colorspace(out));
    let px = dec.decode().map_err(|e| e.to_string())?;
    let channels = dec.output_colorspace().unwrap_or(out).num_components();
    let (w, h) = (
        u32::try_from(w).map_err(|_| "width out of range")?,
        u32::try_from(h).map_err(|_| "height out of range")?,
    );
    to_rgb(w, h, channels, px)
}

fn decode_webp(bytes: &[u8], max_bytes: usize) -> Result<Rgb, String> {
    let mut dec = image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(|e| e.to_string())?;
    dec.set_memory_limit(max_bytes);
    let (w, h) = dec.dimensions();
    let channels = if dec.has_alpha() { 4 } else { 3 };
    check_size(w.into(), h.into(), channels as u64, max_bytes)?;
    let len = dec
        .output_buffer_size()
        .ok_or("the image does not fit in memory")?;
    let mut buf = vec![0; len];
    dec.read_image(&mut buf).map_err(|e| e.to_string())?;
    to_rgb(w, h, channels, buf)
}

/// The size `width × height` scaled so its longest side is `max_side` (aspect kept,
/// rounded, at least 1 px); unchanged when it already fits.
pub fn fit(width: u32, height: u32, max_side: u32) -> (u32, u32) {
    let long = width.max(height);
    if long <= max_side || max_side == 0 {
        return (width, height);
    }
    let scale = |v: u32| {
        let s = (u64::from(v) * u64::from(max_side) + u64::from(long) / 2) / u64::from(long);
        (s as u32).max(1)
    };
    (scale(width), scale(height))
}

/// `img` shrunk to `width × height` (each no larger than the source's) by averaging the
/// source pixels that fall in each target pixel's box.
pub fn shrink(img: &Rgb, width: u32, height: u32) -> Rgb {
    let (sw, sh) = (img.width as usize, img.height as usize);
    if sw == 0 || sh == 0 || img.data.len() < sw * sh * 3 {
        return img.clone();
    }
    let (dw, dh) = (
        (width as usize).clamp(1, sw),
        (height as usize).clamp(1, sh),
    );
    // Target column of each source column, and how many source columns each target has.
    let col: Vec<usize> = (0..sw).map(|x| x * dw / sw).collect();
    let mut col_n = vec![0u64; dw];
    for &c in &col {
        col_n[c] += 1;
    }
    let mut data = Vec::with_capacity(dw * dh * 3);
    let mut sums = vec![0u64; dw * 3];
    let mut rows = 0u64;
    let flush = |sums: &mut Vec<u64>, rows: u64, data: &mut Vec<u8>| {
        for (c, s) in sums.chunks_exact_mut(3).enumerate() {
            let n = (col_n[c] * rows).max(1);
            for v in s.iter_mut() {
                data.push(((*v + n / 2) / n) as u8);
                *v = 0;
            }
        }
    };
    for (y, row) in img.data.chunks_exact(sw * 3).take(sh).enumerate() {
        for (px, &c) in row.chunks_exact(3).zip(&col) {
            let s = &mut sums[c * 3..c * 3 + 3];
            s[0] += u64::from(px[0]);
            s[1] += u64::from(px[1]);
            s[2] += u64::from(px[2]);
        }
        rows += 1;
        if y + 1 == sh || (y + 1) * dh / sh != y * dh / sh {
            flush(&mut sums, rows, &mut data);
            rows = 0;
        }
    }
    Rgb {
        width: dw as u32,
        height: dh as u32,
        data,
    }
}

/// A baseline JPEG of `img` at `quality` (1–100). Errors say why the encoder refused
/// (e.g. a side over 65535 px).
pub fn encode_jpeg(img: &Rgb, quality: u8) -> Result<Vec<u8>, String> {
    let w = u16::try_from(img.width).map_err(|_| "the image is too wide for JPEG")?;
    let h = u16::try_from(img.height).map_err(|_| "the image is too tall for JPEG")?;
    let mut out = Vec::with_capacity(64 * 1024);
    jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100))
        .encode(&img.data, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(w: u32, h: u32) -> image::RgbaImage {
        image::RgbaImage::from_fn(w, h, |x, y| {
            image::Rgba([(x * 7 % 256) as u8, (y * 5 % 256) as u8, 90, 128])
        })
    }

    fn encoded(img: image::DynamicImage, f: image::ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, f).unwrap();
        out.into_inner()
    }

    #[test]
    fn decodes_png_jpeg_and_webp_to_rgb() {
        let rgba = image::DynamicImage::ImageRgba8(pattern(40, 30));
        let png = decode_rgb(
            &encoded(rgba.clone(), image::ImageFormat::Png),
            MAX_DECODED_BYTES,
        )
        .unwrap();
        assert_eq!((png.width, png.height), (40, 30));
        assert_eq!(
            png.data,
            rgba.to_rgb8().into_raw(),
            "alpha dropped, RGB kept"
        );

        let webp = encoded(rgba.clone(), image::ImageFormat::WebP);
        let webp = decode_rgb(&webp, MAX_DECODED_BYTES).unwrap();
        assert_eq!(
            webp.data,
            rgba.to_rgb8().into_raw(),
            "lossless WebP round-trips"
        );

        let rgb = image::DynamicImage::ImageRgb8(rgba.to_rgb8());
        let jpeg = decode_rgb(&encoded(rgb, image::ImageFormat::Jpeg), MAX_DECODED_BYTES).unwrap();
        assert_eq!(
            (jpeg.width, jpeg.height, jpeg.data.len()),
            (40, 30, 40 * 30 * 3)
        );
    }

    #[test]
    fn grey_images_become_rgb() {
        let grey = image::GrayImage::from_fn(9, 4, |x, _| image::Luma([(x * 20) as u8]));
        for f in [image::ImageFormat::Png, image::ImageFormat::Jpeg] {
            let bytes = encoded(image::DynamicImage::ImageLuma8(grey.clone()), f);
            let img = decode_rgb(&bytes, MAX_DECODED_BYTES).unwrap();
            assert_eq!((img.width, img.height), (9, 4), "{f:?}");
            let px = &img.data[4 * 3..5 * 3];
            assert!(px[0] == px[1] && px[1] == px[2], "{f:?}: {px:?}");
        }
        let png = encoded(
            image::DynamicImage::ImageLuma8(grey.clone()),
            image::ImageFormat::Png,
        );
        assert_eq!(
            decode_rgb(&png, MAX_DECODED_BYTES).unwrap().data[3..6],
            [20; 3]
        );
    }

    #[test]
    fn refuses_other_formats_truncated_data_and_oversized_images() {
        let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";
        assert!(decode_rgb(gif, MAX_DECODED_BYTES)
            .unwrap_err()
            .contains("not PNG, JPEG or WebP"));
        let png = encoded(
            image::DynamicImage::ImageRgba8(pattern(64, 64)),
            image::ImageFormat::Png,
        );
        assert!(decode_rgb(&png[..png.len() / 2], MAX_DECODED_BYTES)
            .unwrap_err()
            .starts_with("PNG: "));
        let e = decode_rgb(&png, 1000).unwrap_err();
        assert!(e.starts_with("PNG: "), "{e}");
        let jpeg = encoded(
            image::DynamicImage::ImageRgb8(
                image::DynamicImage::ImageRgba8(pattern(64, 64)).to_rgb8(),
            ),
            image::ImageFormat::Jpeg,
        );
        assert!(decode_rgb(&jpeg, 1000).unwrap_err().contains("larger than"));
        // A grey image is judged by its RGB size (three times its samples).
        let grey = image::GrayImage::from_pixel(100, 100, image::Luma([0]));
        for f in [image::ImageFormat::Png, image::ImageFormat::Jpeg] {
            let bytes = encoded(image::DynamicImage::ImageLuma8(grey.clone()), f);
            let e = decode_rgb(&bytes, 20_000).unwrap_err();
            assert!(e.contains("larger than"), "{f:?}: {e}");
            assert!(decode_rgb(&bytes, 30_000).is_ok(), "{f:?}");
        }
        assert!(decode_rgb(&jpeg[..40], MAX_DECODED_BYTES).is_err());
        assert!(decode_rgb(b"RIFF\0\0\0\0WEBPVP8 ", MAX_DECODED_BYTES).is_err());
    }

    #[test]
    fn fits_the_longest_side_and_averages_boxes() {
        assert_eq!(fit(1200, 800, 384), (384, 256));
        assert_eq!(fit(800, 1200, 384), (256, 384));
        assert_eq!(fit(5000, 3, 384), (384, 1));
        assert_eq!(fit(300, 200, 384), (300, 200), "never upscaled");

        // 4×2 → 2×1: each target pixel is the mean of a 2×2 box.
        let img = Rgb {
            width: 4,
            height: 2,
            data: [[0, 0, 0], [100, 0, 0], [0, 0, 0], [0, 0, 200]]
                .repeat(2)
                .concat(),
        };
        let small = shrink(&img, 2, 1);
        assert_eq!(small.data, [50, 0, 0, 0, 0, 100]);

        let big = Rgb {
            width: 1000,
            height: 700,
            data: vec![77; 1000 * 700 * 3],
        };
        let (w, h) = fit(big.width, big.height, 384);
        let s = shrink(&big, w, h);
        assert_eq!((s.width, s.height, s.data.len()), (384, 269, 384 * 269 * 3));
        assert!(s.data.iter().all(|&v| v == 77));
    }

    #[test]
    fn encodes_a_jpeg_that_decodes_to_the_same_size() {
        let img = Rgb {
            width: 33,
            height: 17,
            data: vec![128; 33 * 17 * 3],
        };
        let jpeg = encode_jpeg(&img, 80).unwrap();
        let back = decode_rgb(&jpeg, MAX_DECODED_BYTES).unwrap();
        assert_eq!((back.width, back.height), (33, 17));
        assert!(back.data.iter().all(|&v| v.abs_diff(128) <= 2));
    }
}
