//! The auditor's lease (DESIGN.md "Scale-out" 2): exactly one instance of a cluster audits, and
//! it is the one that holds the lease in ZooKeeper (or ClickHouse Keeper, which speaks the same
//! protocol).
//!
//! The standard leader recipe: every instance creates an ephemeral sequential node under
//! `/reckon/{cluster}/election` naming itself; the lowest sequence holds the lease; each other
//! instance watches the node just before its own (whose going may make it the holder) and the
//! holder's (whose going changes whom it follows; a cluster is a few instances). An ephemeral
//! node lives as long as its session: a holder that dies, or is cut off for longer than the
//! session timeout, loses it, and the next in line takes over.
//!
//! Taking the lease bumps `/reckon/{cluster}/epoch` in one transaction with a check that the
//! taker's own election node still exists (so an instance whose session has already expired
//! cannot bump it): the epoch node's version after the bump is the lease's **epoch**, strictly
//! greater than every earlier holder's. Derived writes carry it, so a deposed holder's late
//! write loses to its successor's (the fence; the store applies it).
//!
//! An instance stops acting as the auditor the moment its session is disconnected, before the
//! server expires it: it cannot know whether the lease still holds. Time in this module is only
//! the client's session machinery; the roles are plain data ([`Role`]).

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

/// What a lease needs: where the coordinator is, which cluster, who this instance is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// `host:port[,host:port...]`, as ZooKeeper clients take it.
    pub coordinator: String,
    /// The cluster's name: the lease lives under `/reckon/{cluster}`.
    pub cluster: String,
    /// This instance's name, unique in the cluster.
    pub instance: String,
    /// The session timeout asked of the coordinator: how long a silent holder keeps the lease.
    pub session_timeout: Duration,
}

/// This instance's part in the cluster, as far as it knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Connecting, or the session is disconnected or lost: not the auditor, and no knowledge of
    /// who is.
    Unknown,
    /// Another instance holds the lease (its name, when its node said).
    Follower { auditor: String },
    /// This instance holds the lease under `epoch`.
    Auditor { epoch: u64 },
}

impl Role {
    pub fn is_auditor(&self) -> bool {
        matches!(self, Role::Auditor { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("cluster name {0:?}: expected letters, digits, '-' or '_'")]
    BadCluster(String),
    #[error("instance name {0:?}: expected 1-128 characters, no '/'")]
    BadInstance(String),
}

/// A campaign for the lease, running until dropped (dropping it closes the session, which
/// hands the lease on at once).
pub struct Lease {
    role: watch::Receiver<Role>,
    task: JoinHandle<()>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Lease {
    /// Starts campaigning; the role is [`Role::Unknown`] until the coordinator answers. Never
    /// fails for an unreachable coordinator: it keeps trying, and says so in the log.
    pub fn join(settings: LeaseSettings) -> Result<Lease, LeaseError> {
        let ok_name = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if !ok_name(&settings.cluster) {
            return Err(LeaseError::BadCluster(settings.cluster));
        }
        if settings.instance.is_empty()
            || settings.instance.len() > 128
            || settings.instance.contains('/')
        {
            return Err(LeaseError::BadInstance(settings.instance));
        }
        let (tx, rx) = watch::channel(Role::Unknown);
        let task = tokio::spawn(campaign(settings, tx));
        Ok(Lease { role: rx, task })
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// Every change of role, for whoever acts on it.
    pub fn watch(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }
}

/// The paths of one cluster's lease.
struct Paths {
    election: String,
    epoch: String,
}

impl Paths {
    fn of(cluster: &str) -> Paths {
        let root = format!("/reckon/{cluster}");
        Paths {
            election: format!("{root}/election"),
            epoch: format!("{root}/epoch"),
        }
    }
}

/// Between attempts to reach the coordinator.
const RETRY: Duration = Duration::from_millis(500);

async fn campaign(settings: LeaseSettings, role: watch::Sender<Role>) {
    let paths = Paths::of(&settings.cluster);
    loop {
        role.send_replace(Role::Unknown);
        match session(&settings, &paths, &role).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(
                coordinator = %settings.coordinator,
                error = %e,
                "the auditor's lease: the coordinator session ended; joining again"
            ),
        }
        role.send_replace(Role::Unknown);
        tokio::time::sleep(RETRY).await;
    }
}

/// One session: join the election and follow it until the session is lost. Returns when a new
/// session is needed.
async fn session(
    settings: &LeaseSettings,
    paths: &Paths,
    role: &watch::Sender<Role>,
) -> Result<(), zk::Error> {
    let client = zk::Client::connector()
        .with_session_timeout(settings.session_timeout)
        .connect(&settings.coordinator)
        .await?;
    let mut state = client.state_watcher();
    ensure(&client, "/reckon", b"").await?;
    ensure(&client, &format!("/reckon/{}", settings.cluster), b"").await?;
    ensure(&client, &paths.election, b"").await?;
    ensure(&client, &paths.epoch, b"").await?;
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{}/n-", paths.election);
    let (_, seq) = client
        .create(&prefix, settings.instance.as_bytes(), &options)
        .await?;
    let mine = format!("n-{seq}");
    let my_path = format!("{}/{mine}", paths.election);
    loop {
        let (mut children, _) = client.get_children(&paths.election).await?;
        // Sequence order: the names are `n-` and the sequence's digits.
        children.sort_by_key(|c| {
            c.trim_start_matches("n-")
                .parse::<i64>()
                .unwrap_or(i64::MAX)
        });
        tracing::debug!(instance = %settings.instance, mine = %mine, ?children, "the auditor's lease: the election");
        let Some(at) = children.iter().position(|c| *c == mine) else {
            // Our node is gone: the session expired under us.
            return Ok(());
        };
        if at == 0 {
            let epoch = take(&client, &my_path, &paths.epoch, &settings.instance).await?;
            tracing::info!(epoch, instance = %settings.instance, "this instance holds the auditor's lease");
            role.send_replace(Role::Auditor { epoch });
            // Held until the session wavers: stepping down on a disconnect, not on expiry, is
            // what keeps two auditors from acting at once.
            // Connected to a read-only server (a minority side of a partition) is not holding:
            // nothing it could write would be ordered.
            loop {
                match state.changed().await {
                    zk::SessionState::SyncConnected => {}
                    s => {
                        tracing::warn!(state = ?s, epoch, "the auditor's lease: session {s:?}, stepping down");
                        return Ok(());
                    }
                }
            }
        }
        let holder = &children[0];
        let auditor = match client
            .get_data(&format!("{}/{holder}", paths.election))
            .await
        {
            Ok((data, _)) => String::from_utf8_lossy(&data).into_owned(),
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(e),
        };
        role.send_replace(Role::Follower { auditor });
        // The node before ours (its going may make us the holder) and the holder's (its going
        // changes whom we follow; the same node when we are second).
        let before = format!("{}/{}", paths.election, children[at - 1]);
        let (stat, before_gone) = client.check_and_watch_stat(&before).await?;
        if stat.is_none() {
            continue;
        }
        let (stat, holder_gone) = client
            .check_and_watch_stat(&format!("{}/{holder}", paths.election))
            .await?;
        if stat.is_none() {
            continue;
        }
        tokio::select! {
            _ = before_gone.changed() => {}
            _ = holder_gone.changed() => {}
            s = state.changed() => match s {
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {}
                s => {
                    tracing::info!(state = ?s, "the auditor's lease: session {s:?}, joining again");
                    return Ok(());
                }
            },
        }
    }
}

/// Creates a persistent node unless it exists.
async fn ensure(client: &zk::Client, path: &str, data: &[u8]) -> Result<(), zk::Error> {
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match client.create(path, data, &options).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Bumps the epoch node, in one transaction with the check that our election node still
/// exists; the node's version after the bump is the epoch.
async fn take(
    client: &zk::Client,
    my_path: &str,
    epoch_path: &str,
    instance: &str,
) -> Result<u64, zk::Error> {
    loop {
        let (_, stat) = client.get_data(epoch_path).await?;
        let mut tx = client.new_multi_writer();
        tx.add_check_version(my_path, 0)?;
        tx.add_set_data(epoch_path, instance.as_bytes(), Some(stat.version))?;
        match tx.commit().await {
            Ok(results) => {
                for r in results {
                    if let zk::MultiWriteResult::SetData { stat } = r {
                        return Ok(stat.version as u64);
                    }
                }
                return Err(zk::Error::UnexpectedError(
                    "the epoch transaction answered without the epoch".into(),
                ));
            }
            // Someone else bumped it between our read and our write: read again.
            Err(zk::MultiWriteError::OperationFailed {
                index: 1,
                source: zk::Error::BadVersion,
            }) => continue,
            Err(zk::MultiWriteError::OperationFailed { source, .. }) => return Err(source),
            Err(zk::MultiWriteError::RequestFailed { source }) => return Err(source),
        }
    }
}
