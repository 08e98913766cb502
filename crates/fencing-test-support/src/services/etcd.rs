//! A three-member etcd cluster of the test's own (Debian's `etcd-server`), each member its
//! own process and data directory on free loopback ports, for the etcd adapter's tests and
//! the faults a consensus cluster has: a member killed, a member stopped, quorum lost.

use std::path::PathBuf;
use std::time::Duration;

use super::local::{Watched, exchange, free_port, scratch};

/// One member: its name, ports, data directory and process (none while killed).
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    process: Option<Watched>,
}

impl Member {
    fn wait_until_healthy(&self) -> Result<(), String> {
        match &self.process {
            Some(process) => process.wait_for(self.client_port, "etcd", health),
            None => Err(format!("etcd member {} is not running", self.name)),
        }
    }
}

/// A cluster of etcd members on loopback, killed when dropped (and when the test process
/// dies). Heartbeats every 50 ms and elections after 500 ms, so that leases of one second
/// are granted as asked (etcd's shortest lease is one and a half election timeouts) and a
/// lost leader is replaced within about a second.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    token: String,
}

/// What one member says of itself, its cluster and its leader.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MemberStatus {
    id: String,
    cluster: String,
    leader: String,
}

impl EtcdCluster {
    /// Starts a cluster of `size` members and waits until it has a leader.
    ///
    /// # Panics
    ///
    /// When `etcd` is not installed or the cluster does not form within 20 s, saying why.
    pub fn start(size: usize) -> Self {
        Self::try_start(size).unwrap_or_else(|why| panic!("etcd cluster: {why}"))
    }

    fn try_start(size: usize) -> Result<Self, String> {
        let token = fencing_testkit::unique_name("etcd");
        let mut members = Vec::new();
        for i in 0..size {
            members.push(Member {
                name: format!("m{i}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                dir: scratch("fencing-etcd")?,
                process: None,
            });
        }
        let mut cluster = EtcdCluster { members, token };
        for i in 0..size {
            cluster.spawn(i, "new")?;
        }
        for member in &cluster.members {
            member.wait_until_healthy()?;
        }
        cluster.wait_for_leader(Duration::from_secs(20))?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize, state: &str) -> Result<(), String> {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let member = &self.members[i];
        let command = format!(
            "etcd --name {name} --data-dir '{dir}' \
             --listen-client-urls http://127.0.0.1:{client} --advertise-client-urls http://127.0.0.1:{client} \
             --listen-peer-urls http://127.0.0.1:{peer} --initial-advertise-peer-urls http://127.0.0.1:{peer} \
             --initial-cluster {initial} --initial-cluster-state {state} --initial-cluster-token {token} \
             --heartbeat-interval 50 --election-timeout 500",
            name = member.name,
            dir = member.dir.join("data").display(),
            client = member.client_port,
            peer = member.peer_port,
            initial = initial.join(","),
            token = self.token,
        );
        let process = Watched::spawn(&command, &member.dir.join("etcd.log"))
            .map_err(|why| format!("etcd: {why}"))?;
        self.members[i].process = Some(process);
        Ok(())
    }

    /// How many members it has (live or not).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member's client endpoint, `127.0.0.1:<port>`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The member that leads now, by index, as the live members report it.
    pub fn leader(&self) -> Option<usize> {
        let statuses: Vec<(usize, MemberStatus)> = (0..self.size())
            .filter(|&i| self.members[i].process.is_some())
            .filter_map(|i| status(self.members[i].client_port).map(|s| (i, s)))
            .collect();
        let first = &statuses.first()?.1;
        // Every member must be of one cluster: a port another server took would show here.
        assert!(
            statuses.iter().all(|(_, s)| s.cluster == first.cluster),
            "the members answer for different clusters: {statuses:?}"
        );
        statuses
            .iter()
            .find(|(_, s)| s.id == first.leader)
            .map(|(i, _)| *i)
    }

    /// Waits until some member leads, or `patience` has passed.
    pub fn wait_for_leader(&self, patience: Duration) -> Result<usize, String> {
        let deadline = std::time::Instant::now() + patience;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("no leader within {patience:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs member `i`: it is gone at once, mid-request, as in a crash.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut process) = self.members[i].process.take() {
            assert!(process.signal("KILL"), "etcd member {i} was already gone");
            process.stop(self.members[i].client_port);
        }
    }

    /// Starts a killed member `i` again on its data directory; it rejoins the cluster.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i, "existing")
            .unwrap_or_else(|why| panic!("restart etcd member {i}: {why}"));
        self.members[i]
            .wait_until_healthy()
            .unwrap_or_else(|why| panic!("restart etcd member {i}: {why}"));
    }

    /// SIGSTOPs member `i`: it holds its connections and answers nothing until resumed.
    pub fn pause(&self, i: usize) {
        assert!(self.live(i).signal("STOP"), "etcd member {i} is gone");
    }

    /// SIGCONTs member `i`.
    pub fn resume(&self, i: usize) {
        assert!(self.live(i).signal("CONT"), "etcd member {i} is gone");
    }

    /// Saves a snapshot of the cluster's data (through the leader) to `path`.
    ///
    /// # Panics
    ///
    /// When `etcdctl` fails, with its output.
    pub fn save_snapshot(&self, path: &std::path::Path) {
        let leader = self
            .wait_for_leader(Duration::from_secs(10))
            .unwrap_or_else(|why| panic!("snapshot: {why}"));
        let endpoint = format!("127.0.0.1:{}", self.members[leader].client_port);
        etcdctl(&[
            "--endpoints",
            &endpoint,
            "snapshot",
            "save",
            &path.display().to_string(),
        ]);
    }

    /// Kills every member and starts the cluster again from the snapshot at `path`, as an
    /// operator restores a cluster after losing it: with etcd 3.4's `etcdctl snapshot
    /// restore`, which keeps the snapshot's revisions (it has no flag to raise them), so the
    /// revisions written since the snapshot are issued again. The restored cluster has a new
    /// cluster token (so new cluster and member ids).
    pub fn restore(&mut self, path: &std::path::Path) {
        self.token = fencing_testkit::unique_name("etcd-restored");
        self.restore_as_before(path);
    }

    /// The same restore with the cluster token the cluster had, as etcd's recovery guide
    /// shows it: the restored cluster answers with the cluster and member ids it had.
    pub fn restore_as_before(&mut self, path: &std::path::Path) {
        for i in 0..self.size() {
            self.kill(i);
        }
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        for member in &self.members {
            let data = member.dir.join("data");
            let _ = std::fs::remove_dir_all(&data);
            etcdctl(&[
                "snapshot",
                "restore",
                &path.display().to_string(),
                "--name",
                &member.name,
                "--data-dir",
                &data.display().to_string(),
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-token",
                &self.token,
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", member.peer_port),
            ]);
        }
        for i in 0..self.size() {
            self.spawn(i, "new")
                .unwrap_or_else(|why| panic!("restore etcd member {i}: {why}"));
        }
        for member in &self.members {
            member
                .wait_until_healthy()
                .unwrap_or_else(|why| panic!("restore: {why}"));
        }
        self.wait_for_leader(Duration::from_secs(20))
            .unwrap_or_else(|why| panic!("restore: {why}"));
    }

    fn live(&self, i: usize) -> &Watched {
        self.members[i]
            .process
            .as_ref()
            .unwrap_or_else(|| panic!("etcd member {i} is not running"))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut process) = member.process.take() {
                // A paused member would not die of the shell's TERM trap until continued.
                process.signal("CONT");
                process.stop(member.client_port);
            }
            let _ = std::fs::remove_dir_all(&member.dir);
        }
    }
}

/// Runs `etcdctl` (API v3) with `args`.
fn etcdctl(args: &[&str]) {
    let output = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run etcdctl: {e}"));
    assert!(
        output.status.success(),
        "etcdctl {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// True when the member on `port` answers its health check as healthy.
fn health(port: u16) -> bool {
    let request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    exchange(port, request, |_| false)
        .is_some_and(|reply| String::from_utf8_lossy(&reply).contains("\"health\":\"true\""))
}

/// The member's own id and its leader's, from the JSON gateway's status call.
fn status(port: u16) -> Option<MemberStatus> {
    let body = "{}";
    let request = format!(
        "POST /v3/maintenance/status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let reply = exchange(port, request.as_bytes(), |_| false)?;
    let reply = String::from_utf8_lossy(&reply);
    let field = |name: &str| {
        let start = reply.find(&format!("\"{name}\":\""))? + name.len() + 4;
        let end = reply[start..].find('"')? + start;
        Some(reply[start..end].to_owned())
    };
    let status = MemberStatus {
        id: field("member_id")?,
        cluster: field("cluster_id")?,
        leader: field("leader")?,
    };
    (status.leader != "0").then_some(status)
}
