//! Opening the file: the pragmas that make it durable and fast (WAL, `synchronous=FULL`), the
//! migrations, the writer thread; the read-only open `reckon report` uses; and the pool of read
//! connections.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::mpsc;

use super::super::StoreError;
use super::{schema, writer, SqliteStore, FILE_NAME};

/// How long a connection waits for a lock held by another connection (a `reckon report` in
/// another process, a checkpoint) before failing with SQLITE_BUSY.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle read connections kept for reuse; more are opened on demand and closed after use.
const MAX_IDLE_READERS: usize = 8;

fn now_nanos() -> i64 {
    crate::clock::wall_now().0
}

impl SqliteStore {
    /// Open (creating if needed) `data_dir/reckon.sqlite` for reading and writing, upgrading its
    /// schema to this binary's version.
    pub fn open(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::Io {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let path = data_dir.join(FILE_NAME);
        let conn = Connection::open(&path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // WAL: readers never block the writer nor each other, and a commit is one sequential
        // append to the WAL instead of a rollback-journal dance.
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(%mode, "SQLite refused WAL mode; writes will be slower");
        }
        // FULL, not NORMAL: in WAL mode NORMAL skips the fsync at commit, so a committed batch
        // survives a process kill but can be lost on power failure. An acknowledged OTLP export
        // is deleted by the exporter, so an acknowledged batch must survive both. The fsync is
        // paid once per group commit, not per span.
        conn.pragma_update(None, "synchronous", "FULL")?;
        // On macOS a plain fsync does not reach the platter; F_FULLFSYNC does. No-op elsewhere.
        conn.pragma_update(None, "fullfsync", true)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // The writer's B-tree work (event identities, verdict indexes) is most of the durable
        // path's cost: a larger cache and fewer, larger checkpoints measured ~10-15% faster in
        // examples/profile_engine.rs.
        conn.pragma_update(None, "cache_size", -131_072)?; // 128 MiB
                                                           // Checkpoints every ~32 MiB of WAL (in pages). A burst (a wave of deadlines written in
                                                           // pages, a long report holding checkpoints back) can grow the WAL far past that;
                                                           // without a size limit the file keeps its high-water mark on disk for as long as
                                                           // reckon runs. With one, it is cut back when reused.
        conn.pragma_update(None, "wal_autocheckpoint", 8_192)?;
        conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
        conn.set_prepared_statement_cache_capacity(32);
        schema::migrate(&conn, now_nanos())?;
        let seq: i64 = conn.query_row(
            "SELECT max(coalesce((SELECT max(seq) FROM reckon_attempts), 0),
                        coalesce((SELECT max(seq) FROM reckon_readbacks), 0),
                        coalesce((SELECT max(seq) FROM reckon_records), 0))",
            [],
            |r| r.get(0),
        )?;
        let (tx, rx) = mpsc::channel(writer::QUEUE_DEPTH);
        let thread = std::thread::Builder::new()
            .name("reckon-store-writer".into())
            .spawn(move || writer::run(conn, rx, seq))
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(SqliteStore {
            reads: Arc::new(ReadPool {
                path: path.clone(),
                read_only: false,
                idle: Mutex::new(Vec::new()),
            }),
            path,
            writer: Some(tx),
            thread: Some(thread),
        })
    }

    /// Open an existing data directory for reading only (`reckon report`), whether its server
    /// is running or stopped. Never writes, so never upgrades: an older file is an error.
    pub fn open_read_only(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        let path = data_dir.join(FILE_NAME);
        std::fs::metadata(&path).map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        let reads = ReadPool {
            path: path.clone(),
            read_only: true,
            idle: Mutex::new(Vec::new()),
        };
        let conn = reads.open()?;
        schema::check(&conn)?;
        reads.put_back(conn);
        Ok(SqliteStore {
            path,
            writer: None,
            thread: None,
            reads: Arc::new(reads),
        })
    }
}

/// Read connections: opened on demand, up to [`MAX_IDLE_READERS`] kept for reuse.
pub(super) struct ReadPool {
    path: PathBuf,
    read_only: bool,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    fn open(&self) -> Result<Connection, StoreError> {
        let conn = if self.read_only {
            Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?
        } else {
            let c = Connection::open(&self.path)?;
            // Belt and braces: only the writer thread writes.
            c.pragma_update(None, "query_only", true)?;
            c
        };
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Memory-mapped reads avoid a copy per page on the big start-up scan.
        conn.pragma_update(None, "mmap_size", 256i64 << 20)?;
        Ok(conn)
    }

    fn put_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
    }

    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => self.open()?,
        };
        let out = f(&conn);
        // A connection left inside a transaction (a failed read) is not reused.
        if conn.is_autocommit() {
            self.put_back(conn);
        }
        out
    }
}
