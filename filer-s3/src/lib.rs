//! kelp-filer-s3: the [`Filer`] on S3-compatible object storage
//! ([`S3Filer`], through the `object_store` crate), and [`open`], which
//! opens the filer a [`FilerUrl`] names, whichever backend it is.
//!
//! It is a crate of its own so that the sans-IO crates that only use the
//! `Filer` trait (kelp-control) stay free of the tokio runtime the S3
//! client runs on.

use std::sync::Arc;

use filer::{Filer, FilerError, FilerUrl, LocalFiler};

mod s3_filer;

pub use s3_filer::{S3Filer, S3Settings, S3_RETRY_TIMEOUT_DEFAULT};

/// Open the filer `url` names: a [`LocalFiler`] on a `file://` directory
/// (created if missing), an [`S3Filer`] on an `s3://` bucket (reached with
/// `s3` and the standard AWS environment; nothing is sent yet).
pub fn open(url: &FilerUrl, s3: &S3Settings) -> Result<Arc<dyn Filer>, FilerError> {
    Ok(match url {
        FilerUrl::Local(dir) => Arc::new(LocalFiler::open(dir)?),
        FilerUrl::S3 { bucket, prefix } => Arc::new(S3Filer::open(bucket, prefix, s3)?),
    })
}
