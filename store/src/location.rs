//! [`Location`]: where a host keeps its conversations, an SQLite file under the wuu home
//! (the default) or a PostgreSQL database named by URL (`store.url` / `WUU_STORE_URL`,
//! feature `postgres`); opening a [`Store`] there, and the change feed of a shared one.
//! README: "Several hosts, one database".

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::store::{Backend, Store, DB_FILE};

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

impl Store {
    /// Opens the database at `location`: [`Store::open`] for an SQLite file; for a
    /// PostgreSQL URL, [`crate::pg::PgStore::open`] (connects, migrates).
    ///
    /// Errors: those of the backend's open; a PostgreSQL URL in a build without the
    /// `postgres` feature is [`crate::StoreError::Invalid`] ("this wuu was built without
    /// PostgreSQL support").
    pub fn open_location(location: &Location) -> Result<Store> {
        match location {
            Location::Sqlite(path) => Store::open(path),
            #[cfg(feature = "postgres")]
            Location::Postgres(url) => {
                let pg = crate::pg::PgStore::open(url)?;
                Ok(Store {
                    backend: Backend::Postgres(std::cell::RefCell::new(pg)),
                    lease_stale_ms: crate::lease::default_stale_ms(),
                })
            }
            #[cfg(not(feature = "postgres"))]
            Location::Postgres(url) => Err(crate::StoreError::Invalid(format!(
                "{}: {}",
                crate::redact_url(url),
                crate::NO_POSTGRES
            ))),
        }
    }

    /// Whether this store is a PostgreSQL database shared with other hosts.
    pub fn is_shared(&self) -> bool {
        self.lite().is_none()
    }

    /// Subscribes this connection to the changes other hosts commit
    /// ([`Store::changes`]). On PostgreSQL it also counts as a change
    /// ([`Store::data_version`]): whatever happened before the subscription was not
    /// heard. Nothing to do on SQLite.
    pub fn listen(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                pg.get_mut().listen()?;
                crate::pg::note_change();
                Ok(())
            }
        }
    }

    /// The ids of the conversations other hosts (or other connections of this process)
    /// changed since the last call, without waiting, once [`Store::listen`] subscribed
    /// (`""` for a change not about one conversation); always empty on SQLite.
    /// Errors: [`crate::StoreError::Unavailable`] when the connection broke (changes may have
    /// been missed: treat everything as changed, call [`Store::listen`] again).
    pub fn changes(&mut self) -> Result<Vec<String>> {
        match &mut self.backend {
            Backend::Sqlite(_) => Ok(Vec::new()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let changed = pg.get_mut().changes();
                if !matches!(&changed, Ok(c) if c.is_empty()) {
                    crate::pg::note_change();
                }
                changed
            }
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
