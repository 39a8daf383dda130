//! Flags that say how to reach the object store; flattened into every command that takes a
//! SOURCE (`inspect`, `cat`, `mount`).

use crate::store::StoreOptions;

/// How to reach the object store holding SOURCE.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Endpoint of the store. s3://: an S3-compatible server, e.g. http://127.0.0.1:9000
    /// (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, S3_ENDPOINT_URL, else AWS; path-style
    /// requests). gs://: a GCS emulator or proxy (default: STORAGE_EMULATOR_HOST, then
    /// GOOGLE_BASE_URL; without credentials requests are unsigned). az://: the account URL
    /// (Azurite: AZURE_STORAGE_USE_EMULATOR=true instead).
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// S3 region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1).
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// Send unsigned requests (public buckets); no credentials are looked up.
    #[arg(long)]
    pub no_sign_request: bool,
    /// Seconds a connection may stay silent (no response, no body bytes) before the request is
    /// abandoned as stalled and retried.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = parse_seconds)]
    pub stall_timeout: f64,
    /// Attempts of each request to the store before its failure reaches the reader (the
    /// first one and the retries after a 5xx, a reset, a stall or a timeout; with backoff).
    #[arg(long, value_name = "N", default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub max_attempts: u32,
}

/// Parses a positive number of seconds (fractions allowed).
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds between 0 and 86400"
        )),
    }
}

impl StoreArgs {
    /// The store options these flags ask for (everything else at its default).
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            endpoint_url: self.endpoint_url.clone(),
            region: self.region.clone(),
            no_sign_request: self.no_sign_request,
            stall_timeout: std::time::Duration::from_secs_f64(self.stall_timeout),
            max_retries: self.max_attempts - 1,
            ..StoreOptions::default()
        }
    }
}
