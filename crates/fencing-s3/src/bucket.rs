//! Where the records live: a bucket and a key prefix.

use fencing_core::{InputKind, InvalidInput, RecordKey};

/// The longest object key S3 stores, in bytes of UTF-8.
pub const MAX_OBJECT_KEY_BYTES: usize = 1024;

/// A bucket and a key prefix: record `r_815` lives at `<prefix>r_815`.
///
/// The bucket name follows S3's rules (3 to 63 characters of lowercase letters, digits, `.`
/// and `-`, beginning and ending with a letter or digit, no `..`, not shaped like an IP
/// address), checked here because emulators accept names the service refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Bucket {
    bucket: String,
    prefix: String,
}

impl S3Bucket {
    /// Records at `<prefix><key>` in `bucket`; the prefix may be empty.
    pub fn new(bucket: impl Into<String>, prefix: impl Into<String>) -> Result<Self, InvalidInput> {
        let (bucket, prefix) = (bucket.into(), prefix.into());
        check_bucket(&bucket)?;
        if prefix.len() >= MAX_OBJECT_KEY_BYTES || prefix.chars().any(char::is_control) {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "key prefix {prefix:?} must be shorter than {MAX_OBJECT_KEY_BYTES} bytes and \
                     free of control characters"
                ),
            ));
        }
        Ok(S3Bucket { bucket, prefix })
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object key of `key`, refused when prefix and key pass S3's 1,024-byte limit.
    pub fn object_key(&self, key: &RecordKey) -> Result<String, InvalidInput> {
        let object = format!("{}{key}", self.prefix);
        if object.len() > MAX_OBJECT_KEY_BYTES {
            return Err(InvalidInput::new(
                InputKind::RecordKey,
                format!(
                    "object key {}… is {} bytes, over S3's {MAX_OBJECT_KEY_BYTES}",
                    &self.prefix,
                    object.len()
                ),
            ));
        }
        Ok(object)
    }

    /// The name a store on this bucket goes by in errors and batches: `s3:<bucket>/<prefix>`.
    pub fn store_name(&self) -> String {
        format!("s3:{}/{}", self.bucket, self.prefix)
    }
}

fn check_bucket(name: &str) -> Result<(), InvalidInput> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let ip_like = name.split('.').count() == 4 && name.split('.').all(|p| p.parse::<u8>().is_ok());
    let valid = (3..=63).contains(&name.len())
        && name.chars().all(allowed)
        && edge(name.chars().next())
        && edge(name.chars().last())
        && !name.contains("..")
        && !ip_like;
    if !valid {
        return Err(InvalidInput::new(
            InputKind::Identifier,
            format!(
                "{name:?} is not an S3 bucket name: 3 to 63 characters of a-z, 0-9, '.' and '-', \
                 beginning and ending with a letter or digit, no '..', not an IP address"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_follow_the_service_rules() {
        for good in [
            "receipts",
            "m-4471.receipts",
            "abc",
            &"a".repeat(63),
            "123",
            "a.b.c.d",
            "1.2.3.400",
        ] {
            assert!(S3Bucket::new(good, "").is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "ab",
            "Receipts",
            "re_ceipts",
            "-receipts",
            "receipts-",
            "re..ceipts",
            "192.168.0.1",
            &"a".repeat(64),
            "récépts",
        ] {
            let err = S3Bucket::new(bad, "").unwrap_err();
            assert_eq!(err.kind(), InputKind::Identifier, "{bad:?}");
        }
    }

    #[test]
    fn a_store_on_a_bucket_is_named_by_its_bucket_and_prefix() {
        let bucket = S3Bucket::new("receipts", "m_4471/").unwrap();
        assert_eq!(bucket.store_name(), "s3:receipts/m_4471/");
    }

    #[test]
    fn prefix_and_key_stay_within_the_key_limit() {
        let bucket = S3Bucket::new("receipts", "m_4471/").unwrap();
        let key = RecordKey::new("r_815").unwrap();
        assert_eq!(bucket.object_key(&key).unwrap(), "m_4471/r_815");
        let long = S3Bucket::new("receipts", "p".repeat(1000)).unwrap();
        let err = long
            .object_key(&RecordKey::new("k".repeat(25)).unwrap())
            .unwrap_err();
        assert_eq!(err.kind(), InputKind::RecordKey);
        assert!(
            long.object_key(&RecordKey::new("k".repeat(24)).unwrap())
                .is_ok()
        );
        assert!(S3Bucket::new("receipts", "p".repeat(1024)).is_err());
        assert!(S3Bucket::new("receipts", "a\nb").is_err());
    }
}
