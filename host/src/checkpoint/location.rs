//! Where checkpoints and savepoints live: a local folder, or a prefix in an
//! S3 bucket written `s3://bucket/prefix`.

use std::fmt;
use std::path::PathBuf;

/// A prefix in an S3 bucket, from `s3://bucket/prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketUrl {
    /// The bucket.
    pub bucket: String,
    /// The prefix inside it, without a leading or trailing `/` (empty: the
    /// bucket's root).
    pub prefix: String,
}

impl BucketUrl {
    /// `Ok(Some)` for `s3://bucket/prefix`, `Ok(None)` for a folder, and
    /// why not for another scheme or a malformed URL.
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!(
                    "`{text}` names no bucket: write `s3://<bucket>/<prefix>`"
                ));
            }
            let prefix = prefix.trim_matches('/');
            if !prefix.is_empty() && prefix.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
                return Err(format!(
                    "`{text}` has an empty, `.` or `..` part in its prefix: write `s3://<bucket>/<a>/<b>`"
                ));
            }
            return Ok(Some(Self {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            }));
        }
        match text.split_once("://") {
            Some((scheme, _)) if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric()) => {
                Err(format!(
                    "`{scheme}://` is not supported: give a folder, or `s3://<bucket>/<prefix>` (an S3-compatible server through `[checkpoint.s3] endpoint`)"
                ))
            }
            _ => Ok(None),
        }
    }

    /// The object key of `name` under the prefix.
    pub fn key(&self, name: &str) -> String {
        match self.prefix.as_str() {
            "" => name.to_owned(),
            prefix => format!("{prefix}/{name}"),
        }
    }

    /// Whether `other` lies inside this prefix (or is it).
    pub fn contains(&self, other: &BucketUrl) -> bool {
        self.bucket == other.bucket
            && (self.prefix.is_empty()
                || other.prefix == self.prefix
                || other.prefix.starts_with(&format!("{}/", self.prefix)))
    }
}

impl fmt::Display for BucketUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// A savepoint's place: a folder, or a prefix in a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local folder.
    Folder(PathBuf),
    /// A prefix in an S3 bucket.
    Bucket(BucketUrl),
}

impl Location {
    /// `text` as a bucket URL (`s3://…`) or a folder.
    pub fn parse(text: &str) -> Result<Self, String> {
        Ok(match BucketUrl::parse(text)? {
            Some(url) => Location::Bucket(url),
            None => Location::Folder(PathBuf::from(text)),
        })
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Folder(dir) => write!(f, "{}", dir.display()),
            Location::Bucket(url) => url.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_urls_folders_and_other_schemes() {
        let url = BucketUrl::parse("s3://b/a/c/").unwrap().unwrap();
        assert_eq!((url.bucket.as_str(), url.prefix.as_str()), ("b", "a/c"));
        assert_eq!(url.key("chk-1/_metadata.json"), "a/c/chk-1/_metadata.json");
        assert_eq!(url.to_string(), "s3://b/a/c");
        let root = BucketUrl::parse("s3://b").unwrap().unwrap();
        assert_eq!(root.key("files/x"), "files/x");
        assert!(root.contains(&url) && url.contains(&url));
        assert!(!url.contains(&BucketUrl::parse("s3://b/a/cd").unwrap().unwrap()));
        assert_eq!(BucketUrl::parse("checkpoints/x").unwrap(), None);
        assert_eq!(BucketUrl::parse("/tmp/a:b").unwrap(), None);
        for (bad, says) in [
            ("s3:///x", "names no bucket"),
            ("s3://b/a//c", "empty, `.` or `..`"),
            ("s3://b/../c", "empty, `.` or `..`"),
            ("gs://b/c", "`gs://` is not supported"),
        ] {
            let e = BucketUrl::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(
            Location::parse("sp").unwrap(),
            Location::Folder(PathBuf::from("sp"))
        );
    }
}
