//! [`Location`]: where a host keeps its conversations, an SQLite file under the wuu home
//! (the default) or a PostgreSQL database named by URL (`store.url` / `WUU_STORE_URL`,
//! feature `postgres`). README: "Several hosts, one database".

use std::path::{Path, PathBuf};

use crate::store::DB_FILE;

/// The database a [`crate::Store`] opens ([`crate::Store::open_location`]).
///
/// `Debug` and [`Location::shown`] never contain a password written in a URL.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// An SQLite file (`$WUU_HOME/wuu.db` for [`Location::home`]).
    Sqlite(PathBuf),
    /// A PostgreSQL database: `postgresql://user@host:port/db` (or `postgres://`); the
    /// password comes from `PGPASSWORD` or `~/.pgpass` as libpq resolves them.
    Postgres(String),
}

impl Location {
    /// The SQLite file of the wuu home `home`.
    pub fn home(home: &Path) -> Location {
        Location::Sqlite(home.join(DB_FILE))
    }

    /// The location a host uses: `url` (from `WUU_STORE_URL`, else the config's
    /// `store.url`) when set and not blank, else the SQLite file of `home`.
    /// Errors: a URL that is not `postgresql://` / `postgres://` (the message shows it
    /// without its password).
    pub fn choose(home: &Path, url: Option<&str>) -> Result<Location, String> {
        match url.map(str::trim).filter(|u| !u.is_empty()) {
            None => Ok(Location::home(home)),
            Some(u) if is_postgres_url(u) => Ok(Location::Postgres(u.to_string())),
            Some(u) => Err(format!(
                "store URL {} is not a PostgreSQL URL (postgresql://user@host:port/db)",
                redact_url(u)
            )),
        }
    }

    /// Whether this is a PostgreSQL database (shared by several hosts).
    pub fn is_postgres(&self) -> bool {
        matches!(self, Location::Postgres(_))
    }

    /// The file path, or the URL without its password, for messages.
    pub fn shown(&self) -> String {
        match self {
            Location::Sqlite(p) => p.display().to_string(),
            Location::Postgres(u) => redact_url(u),
        }
    }
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            Location::Postgres(u) => f.debug_tuple("Postgres").field(&redact_url(u)).finish(),
        }
    }
}

/// Whether `url` names a PostgreSQL database (`postgresql://` or `postgres://`).
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgresql://") || url.starts_with("postgres://")
}

/// `url` without its password (`postgresql://user:secret@host/db` →
/// `postgresql://user@host/db`, a `password=` query parameter dropped), for logs and
/// answers.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{user}@{host}")
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|kv| !kv.to_ascii_lowercase().starts_with("password="))
                .collect();
            if kept.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_string(),
    };
    if scheme.is_empty() {
        format!("{authority}{tail}")
    } else {
        format!("{scheme}://{authority}{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_chooses_its_store_and_never_shows_a_password() {
        let home = Path::new("/h");
        assert_eq!(
            Location::choose(home, None).unwrap(),
            Location::Sqlite("/h/wuu.db".into())
        );
        assert_eq!(
            Location::choose(home, Some("  ")).unwrap(),
            Location::home(home)
        );
        let pg = Location::choose(home, Some("postgresql://u:s3cret@db/wuu")).unwrap();
        assert!(pg.is_postgres());
        assert_eq!(pg.shown(), "postgresql://u@db/wuu");
        assert!(!format!("{pg:?}").contains("s3cret"));
        let err = Location::choose(home, Some("mysql://u:s3cret@db/wuu")).unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
    }
}
