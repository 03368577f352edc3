//! The auditor's lease (`reckon::cluster::lease`) against a real ZooKeeper: Debian's
//! `zookeeper` package, a standalone server each test starts on a free port in a directory of its
//! own. A link is cut with a TCP proxy between one instance and the server, so the session is
//! lost as a network partition loses it. Missing ZooKeeper fails the suite with what to install,
//! unless RECKON_SKIP_ZOOKEEPER=1 asks to skip it.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reckon::cluster::lease::{Lease, LeaseError, LeaseSettings, Role};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const ZK_SERVER: &str = "/usr/share/zookeeper/bin/zkServer.sh";
/// Short, so a lost session expires within a test; ZooKeeper accepts 2-20 ticks (tickTime 250).
const SESSION: Duration = Duration::from_millis(2_000);
/// How long anything a test waits for may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

struct ZooKeeper {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        // The script's process group: the shell and the JVM it starts.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

impl ZooKeeper {
    /// A standalone server, or `None` when skipping was asked for.
    fn start() -> Option<ZooKeeper> {
        if !std::path::Path::new(ZK_SERVER).exists() {
            if std::env::var("RECKON_SKIP_ZOOKEEPER").as_deref() == Ok("1") {
                eprintln!("RECKON_SKIP_ZOOKEEPER=1: the lease tests are skipped");
                return None;
            }
            panic!(
                "the lease tests need ZooKeeper: apt-get install zookeeper (or set \
                 RECKON_SKIP_ZOOKEEPER=1 to skip them on purpose)"
            );
        }
        let dir = tempfile::tempdir().expect("a directory for ZooKeeper");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let data: PathBuf = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let cfg = dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=250\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\nminSessionTimeout=500\nmaxSessionTimeout=20000\n\
                 4lw.commands.whitelist=srvr\n",
                data.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new(ZK_SERVER)
            .arg("start-foreground")
            .arg(&cfg)
            .env("ZOO_LOG_DIR", dir.path())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start zkServer.sh");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let zk = ZooKeeper {
            child,
            addr,
            _dir: dir,
        };
        let began = Instant::now();
        while !serving(addr) {
            assert!(
                began.elapsed() < PATIENCE,
                "ZooKeeper did not answer on {addr} within {PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(zk)
    }
}

/// Whether the server answers `srvr` as a standalone server.
fn serving(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"srvr").is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.contains("Mode: standalone")
}

/// A TCP proxy to `upstream` that can be cut (every connection closed, new ones refused) and
/// restored: a network partition between one instance and the coordinator.
struct Proxy {
    addr: SocketAddr,
    open: watch::Sender<bool>,
}

impl Proxy {
    async fn to(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, _) = watch::channel(true);
        let gate = open.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = listener.accept().await else {
                    return;
                };
                let mut cut = gate.subscribe();
                if !*cut.borrow() {
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = cut.wait_for(|open| !*open) => {}
                    }
                });
            }
        });
        Proxy { addr, open }
    }

    fn cut(&self) {
        self.open.send_replace(false);
    }

    fn restore(&self) {
        self.open.send_replace(true);
    }
}

fn settings(coordinator: SocketAddr, cluster: &str, instance: &str) -> LeaseSettings {
    // What the lease logs, in the test's output when it fails.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("reckon=debug")
        .try_init();
    LeaseSettings {
        coordinator: coordinator.to_string(),
        cluster: cluster.into(),
        instance: instance.into(),
        session_timeout: SESSION,
    }
}

/// Waits until the lease's role satisfies `want`, and returns it.
async fn until(lease: &Lease, what: &str, want: impl Fn(&Role) -> bool) -> Role {
    let mut rx = lease.watch();
    let got = match tokio::time::timeout(PATIENCE, rx.wait_for(|r| want(r))).await {
        Ok(Ok(r)) => r.clone(),
        _ => panic!("{what}: still {:?} after {PATIENCE:?}", lease.role()),
    };
    got
}

fn epoch(r: &Role) -> u64 {
    match r {
        Role::Auditor { epoch } => *epoch,
        other => panic!("not the auditor: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_auditor_at_a_time_and_the_next_takes_over_with_a_higher_epoch() {
    let Some(zk) = ZooKeeper::start() else {
        return;
    };
    let a = Lease::join(settings(zk.addr, "c1", "reckon-a")).unwrap();
    let first = epoch(&until(&a, "a holds the lease", Role::is_auditor).await);
    let b = Lease::join(settings(zk.addr, "c1", "reckon-b")).unwrap();
    let c = Lease::join(settings(zk.addr, "c1", "reckon-c")).unwrap();
    for (lease, name) in [(&b, "b"), (&c, "c")] {
        let r = until(lease, &format!("{name} follows"), |r| {
            matches!(r, Role::Follower { .. })
        })
        .await;
        assert_eq!(
            r,
            Role::Follower {
                auditor: "reckon-a".into()
            }
        );
    }
    assert!(
        a.role().is_auditor(),
        "a newcomer takes nothing from the holder"
    );
    // Another cluster on the same coordinator has a lease of its own.
    let other = Lease::join(settings(zk.addr, "c2", "reckon-x")).unwrap();
    until(&other, "another cluster's instance", Role::is_auditor).await;

    // The holder stops: one of the others takes over (the next in line, b, unless a loaded
    // machine cost it its session meanwhile), under a new epoch, and the last follows it.
    drop(a);
    let (next, last, next_name) = succession(&b, &c, "b", "c").await;
    let second = epoch(&next.role());
    assert!(second > first, "epoch {second} after {first}");
    assert_eq!(
        last.role(),
        Role::Follower {
            auditor: format!("reckon-{next_name}")
        }
    );
    let (next, last) = if next_name == "b" { (b, c) } else { (c, b) };
    drop(next);
    let third = epoch(&until(&last, "the last takes over", Role::is_auditor).await);
    assert!(third > second, "epoch {third} after {second}");
}

/// Waits until one of two leases holds the lease and the other follows it; returns them in
/// that order, with the holder's name.
async fn succession<'a>(
    x: &'a Lease,
    y: &'a Lease,
    xn: &'static str,
    yn: &'static str,
) -> (&'a Lease, &'a Lease, &'static str) {
    let began = Instant::now();
    loop {
        for (h, f, hn) in [(x, y, xn), (y, x, yn)] {
            if h.role().is_auditor()
                && f.role()
                    == (Role::Follower {
                        auditor: format!("reckon-{hn}"),
                    })
            {
                return (h, f, hn);
            }
        }
        assert!(
            began.elapsed() < PATIENCE,
            "no successor: {xn} {:?}, {yn} {:?}",
            x.role(),
            y.role()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_auditor_steps_down_at_once_and_its_successor_fences_it() {
    let Some(zk) = ZooKeeper::start() else {
        return;
    };
    let proxy = Proxy::to(zk.addr).await;
    let a = Lease::join(settings(proxy.addr, "c1", "reckon-a")).unwrap();
    let first = epoch(&until(&a, "a holds the lease", Role::is_auditor).await);
    let b = Lease::join(settings(zk.addr, "c1", "reckon-b")).unwrap();
    until(&b, "b follows", |r| matches!(r, Role::Follower { .. })).await;

    // The link between a and the coordinator is cut: a stops being the auditor when its
    // session is disconnected, before the server expires it; b takes the lease only once it has.
    let cut_at = Instant::now();
    proxy.cut();
    until(&a, "a steps down", |r| *r == Role::Unknown).await;
    let stepped_down = cut_at.elapsed();
    let second = epoch(&until(&b, "b takes over", Role::is_auditor).await);
    let taken = cut_at.elapsed();
    assert!(
        second > first,
        "epoch {second} after {first}: a's late writes lose"
    );
    assert!(
        stepped_down < taken,
        "a stepped down after {stepped_down:?}, b took over after {taken:?}: never two auditors"
    );

    // The link comes back: a's session is gone, it joins again behind b.
    proxy.restore();
    let r = until(&a, "a follows b", |r| {
        *r == Role::Follower {
            auditor: "reckon-b".into(),
        }
    })
    .await;
    assert!(!r.is_auditor());
    assert_eq!(epoch(&b.role()), second, "b keeps the lease it took");
}

#[test]
fn names_that_cannot_be_paths_are_refused() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    assert!(matches!(
        Lease::join(settings(addr, "a/b", "i")),
        Err(LeaseError::BadCluster(_))
    ));
    assert!(matches!(
        Lease::join(settings(addr, "", "i")),
        Err(LeaseError::BadCluster(_))
    ));
    assert!(matches!(
        Lease::join(settings(addr, "c", "x/y")),
        Err(LeaseError::BadInstance(_))
    ));
    assert!(matches!(
        Lease::join(settings(addr, "c", "")),
        Err(LeaseError::BadInstance(_))
    ));
}
