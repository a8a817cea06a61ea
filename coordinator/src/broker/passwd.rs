//! mosquitto's `password_file` format, read by the embedded broker and written by
//! `coordinator credentials`, so one file serves both brokers.
//!
//! One `username:hash` per line. mosquitto 2.0's `mosquitto_passwd` writes
//! `$7$<iterations>$<salt>$<hash>`: PBKDF2-HMAC-SHA512 over the password with a 12-byte salt,
//! 101 iterations, a 64-byte hash, salt and hash in standard base64. Older files hold
//! `$6$<salt>$<hash>`: SHA-512 of the password followed by the salt. Both are verified in
//! constant time; this module writes `$7$`.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, pbkdf2, rand::SecureRandom};

/// Iterations `mosquitto_passwd` 2.0 uses.
pub const ITERATIONS: u32 = 101;
/// Salt length `mosquitto_passwd` uses.
const SALT_LEN: usize = 12;
/// Hash length of `$7$` (SHA-512).
const HASH_LEN: usize = 64;

/// Errors of a password file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PasswdError {
    /// The file could not be read.
    #[error("cannot read the password file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `username:$7$…` or `username:$6$…`.
    #[error("password file line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The system's random generator failed.
    #[error("no randomness for a salt")]
    Random,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Hash {
    Pbkdf2Sha512 {
        iterations: NonZeroU32,
        salt: Vec<u8>,
        hash: Vec<u8>,
    },
    Sha512 {
        salt: Vec<u8>,
        hash: Vec<u8>,
    },
}

/// The users of a password file and their hashed passwords.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PasswordDb {
    users: BTreeMap<String, Hash>,
}

impl PasswordDb {
    /// Parses a password file's text (blank lines and `#` comments skipped).
    pub fn parse(text: &str) -> Result<Self, PasswdError> {
        let mut users = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| PasswdError::Line {
                line: i + 1,
                reason: reason.into(),
            };
            let (user, hash) = line
                .split_once(':')
                .ok_or_else(|| bad("no `:` between username and hash"))?;
            if user.is_empty() {
                return Err(bad("empty username"));
            }
            let parts: Vec<&str> = hash.split('$').collect();
            let decode = |s: &str| B64.decode(s).map_err(|_| bad("bad base64"));
            let h = match parts.as_slice() {
                ["", "7", iter, salt, hash] => Hash::Pbkdf2Sha512 {
                    iterations: iter
                        .parse::<u32>()
                        .ok()
                        .and_then(NonZeroU32::new)
                        .ok_or_else(|| bad("bad iteration count"))?,
                    salt: decode(salt)?,
                    hash: decode(hash)?,
                },
                ["", "6", salt, hash] => Hash::Sha512 {
                    salt: decode(salt)?,
                    hash: decode(hash)?,
                },
                _ => {
                    return Err(bad(
                        "not a mosquitto hash ($7$ or $6$; plain-text passwords must be hashed with mosquitto_passwd -U)",
                    ));
                }
            };
            users.insert(user.to_string(), h);
        }
        Ok(PasswordDb { users })
    }

    /// Reads and parses a password file.
    pub fn load(path: &Path) -> Result<Self, PasswdError> {
        let text = std::fs::read_to_string(path).map_err(|source| PasswdError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// True when `user` exists and `password` is theirs.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        match self.users.get(user) {
            Some(Hash::Pbkdf2Sha512 {
                iterations,
                salt,
                hash,
            }) => pbkdf2::verify(
                pbkdf2::PBKDF2_HMAC_SHA512,
                *iterations,
                salt,
                password.as_bytes(),
                hash,
            )
            .is_ok(),
            Some(Hash::Sha512 { salt, hash }) => {
                let mut ctx = digest::Context::new(&digest::SHA512);
                ctx.update(password.as_bytes());
                ctx.update(salt);
                let d = ctx.finish();
                ring_eq(d.as_ref(), hash)
            }
            None => false,
        }
    }

    /// The usernames, sorted.
    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// True when there is no user.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// Constant-time equality (lengths are not secret).
fn ring_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One `username:$7$101$salt$hash` line (no newline), as `mosquitto_passwd` writes it.
pub fn hash_line(
    user: &str,
    password: &str,
    rng: &dyn SecureRandom,
) -> Result<String, PasswdError> {
    let mut salt = [0u8; SALT_LEN];
    rng.fill(&mut salt).map_err(|_| PasswdError::Random)?;
    let mut hash = [0u8; HASH_LEN];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA512,
        NonZeroU32::new(ITERATIONS).expect("non-zero"),
        &salt,
        password.as_bytes(),
        &mut hash,
    );
    Ok(format!(
        "{user}:$7${ITERATIONS}${}${}",
        B64.encode(salt),
        B64.encode(hash)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by mosquitto_passwd 2.0.11 (`mosquitto_passwd -b -c F alice 's3cret pass'` and
    /// `mosquitto_passwd -b F bob hunter2`): the independent truth for `$7$`.
    const MOSQUITTO: &str = "alice:$7$101$8qGWrP0EcwUc4ucN$nS4EzH1ADA/Ne8lqYRaBjs+fjOZDZRqF8Ikq6lA1jS6KtHvQCeAa4w8IQiYTnP3BY/o5agx6mF6gx1Ccx8NJpQ==\n\
bob:$7$101$iNw9k4vifTeaWLEu$7wzlJVqN+wmVEctQUHOg39xUIa01ncoos18+bB9MrjR2FHPY5h/2/85xeMalW8TbrCCf+Su9eAAOWEI2IvJzjA==\n";

    #[test]
    fn verifies_hashes_written_by_mosquitto_passwd() {
        let db = PasswordDb::parse(MOSQUITTO).unwrap();
        assert_eq!(db.users().collect::<Vec<_>>(), ["alice", "bob"]);
        assert!(db.verify("alice", "s3cret pass"));
        assert!(db.verify("bob", "hunter2"));
        assert!(!db.verify("alice", "s3cret pas"));
        assert!(!db.verify("alice", "hunter2"));
        assert!(!db.verify("bob", ""));
        assert!(!db.verify("carol", "hunter2"));
    }

    #[test]
    fn sha512_format_of_older_mosquitto() {
        // $6$: SHA-512(password ‖ salt), computed here from the definition with ring's digest.
        let salt = b"0123456789ab";
        let mut ctx = digest::Context::new(&digest::SHA512);
        ctx.update(b"pw");
        ctx.update(salt);
        let line = format!(
            "u:$6${}${}",
            B64.encode(salt),
            B64.encode(ctx.finish().as_ref())
        );
        let db = PasswordDb::parse(&line).unwrap();
        assert!(db.verify("u", "pw"));
        assert!(!db.verify("u", "pw2"));
    }

    #[test]
    fn written_lines_round_trip_with_fresh_salts() {
        let rng = ring::rand::SystemRandom::new();
        let a = hash_line("c0", "pass-A", &rng).unwrap();
        let b = hash_line("c0", "pass-A", &rng).unwrap();
        assert_ne!(a, b, "salts are random");
        assert!(a.starts_with("c0:$7$101$"));
        let db = PasswordDb::parse(&format!("{a}\n# comment\n\n")).unwrap();
        assert!(db.verify("c0", "pass-A"));
        assert!(!db.verify("c0", "pass-B"));
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        for bad in [
            "nouser",
            ":$7$101$a$b",
            "u:plaintext",
            "u:$7$0$AAAA$AAAA",
            "u:$7$x$AAAA$AAAA",
            "u:$7$101$!!$AAAA",
            "u:$5$a$b",
        ] {
            assert!(PasswordDb::parse(bad).is_err(), "{bad}");
        }
    }
}
