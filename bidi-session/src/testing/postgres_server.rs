//! [`PostgresServer`]: a private PostgreSQL server for tests and benchmarks.

use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::PostgresStore;

/// A PostgreSQL server of its own for a test: a new cluster (`initdb`) in a temporary directory,
/// served by `postgres` on a free port of 127.0.0.1 with trust authentication for user `bidi`.
/// Dropping it stops the server (every process of it) and removes the directory.
///
/// It needs the server binaries (Debian's `postgresql` package): found with `pg_config
/// --bindir`, on the `PATH`, or under `/usr/lib/postgresql/*/bin`. PostgreSQL refuses to run as
/// root, so as root the server runs as the `postgres` user.
///
/// ```no_run
/// use bidi_session::PostgresStore;
/// use bidi_session::testing::PostgresServer;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = PostgresServer::start().await?;
/// let store = PostgresStore::connect(server.url()).await?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    child: Child,
    url: String,
    dir: PathBuf,
    bin: PathBuf,
    user: Option<(u32, u32)>,
    certificate: Option<Vec<u8>>,
}

impl PostgresServer {
    /// Creates the cluster, starts the server and waits until it takes connections (at most a
    /// minute).
    ///
    /// # Errors
    ///
    /// If the binaries are missing, `initdb` fails, or the server does not come up.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while it waits for the server, the server is stopped and its
    /// directory removed, as when a `PostgresServer` is dropped.
    pub async fn start() -> io::Result<Self> {
        Self::launch(false).await
    }

    /// As [`start`](Self::start), with TLS on: a self-signed certificate for `127.0.0.1` made
    /// with the `openssl` command, its PEM in [`certificate`](Self::certificate).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); also if `openssl` is missing or fails.
    ///
    /// # Cancel safety
    ///
    /// As [`start`](Self::start).
    pub async fn start_with_tls() -> io::Result<Self> {
        Self::launch(true).await
    }

    /// The PEM of the server's certificate, when it was started with TLS.
    #[must_use]
    pub fn certificate(&self) -> Option<&[u8]> {
        self.certificate.as_deref()
    }

    async fn launch(tls: bool) -> io::Result<Self> {
        let bin = bindir()?;
        // Unique among the servers of this process (tests start several at once) and of
        // others: the process id, a counter, and the clock.
        static SERVERS: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("bidi-pg-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let launched = Self::launch_in(dir.clone(), bin, tls).await;
        if launched.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        launched
    }

    async fn launch_in(dir: PathBuf, bin: PathBuf, tls: bool) -> io::Result<Self> {
        let user = server_user();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let data = dir.join("data");
        let init = command(&bin.join("initdb"), user)
            .args([
                "--auth=trust",
                "--username=bidi",
                "--encoding=UTF8",
                "--no-sync",
            ])
            .arg("-D")
            .arg(&data)
            .output()?;
        if !init.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&init.stderr)
            )));
        }
        let certificate = if tls {
            Some(self_signed(&dir, user)?)
        } else {
            None
        };
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut postgres = command(&bin.join("postgres"), user);
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-k"])
            .arg(&dir);
        if tls {
            postgres.args(["-c", "ssl=on", "-c"]);
            postgres.arg(format!(
                "ssl_cert_file={}",
                dir.join("server.crt").display()
            ));
            postgres.arg("-c");
            postgres.arg(format!("ssl_key_file={}", dir.join("server.key").display()));
        }
        let child = postgres
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = Self {
            child,
            url: format!("postgres://bidi@127.0.0.1:{port}/postgres"),
            dir,
            bin,
            user,
            certificate,
        };
        // Ready once it takes a connection (in plain text: the certificate is not trusted).
        let probe = format!("{}?sslmode=disable", server.url);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match PostgresStore::connect(&probe).await {
                Ok(_) => return Ok(server),
                Err(error) if Instant::now() >= deadline => {
                    return Err(io::Error::other(format!(
                        "PostgreSQL did not start: {error}"
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The connection URL (`postgres://bidi@127.0.0.1:{port}/postgres`).
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for PostgresServer {
    /// Stops the server the way its own tools do (`pg_ctl stop -m fast`: clients disconnected,
    /// every server process gone when it returns), killing it only if that fails.
    fn drop(&mut self) {
        let stopped = command(&self.bin.join("pg_ctl"), self.user)
            .args(["stop", "-m", "fast", "-w", "-D"])
            .arg(self.dir.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes `server.crt` and `server.key` in `dir` for `127.0.0.1`, readable by the server only;
/// returns the certificate's PEM.
fn self_signed(dir: &Path, user: Option<(u32, u32)>) -> io::Result<Vec<u8>> {
    let (crt, key) = (dir.join("server.crt"), dir.join("server.key"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()?;
    if !made.status.success() {
        return Err(io::Error::other(format!(
            "openssl failed: {}",
            String::from_utf8_lossy(&made.stderr)
        )));
    }
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&key, Some(uid), Some(gid))?;
        std::os::unix::fs::chown(&crt, Some(uid), Some(gid))?;
    }
    std::fs::read(&crt)
}

/// Where `initdb` and `postgres` are.
fn bindir() -> io::Result<PathBuf> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").exists()));
    if let Some(dir) = on_path {
        return Ok(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    found.pop().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no PostgreSQL server binaries (initdb): install postgresql",
        )
    })
}

/// As root, the `postgres` user's uid and gid.
fn server_user() -> Option<(u32, u32)> {
    let uid = String::from_utf8(Command::new("id").arg("-u").output().ok()?.stdout).ok()?;
    if uid.trim() != "0" {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|line| line.starts_with("postgres:"))?;
    let mut fields = line.split(':').skip(2);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

fn command(bin: &Path, user: Option<(u32, u32)>) -> Command {
    let mut command = Command::new(bin);
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}
