//! `coordinator credentials`: a testbed fleet's security material in one directory.
//!
//! - `ca.pem`, `ca.key`: a fresh CA (ECDSA P-256). Clients give `--ca ca.pem`.
//! - `server.pem`, `server.key`: the broker's certificate, for `localhost`, `127.0.0.1`, `::1` and
//!   every `--hosts` name or address.
//! - `users/<name>.password` (mode 0600): one random password per user: `coordinator`, each LPS
//!   (`--lps`), each edge client. With `--client-certs`, also `users/<name>.pem` and `.key`
//!   (CN = the username, signed by the CA).
//! - `passwd`: every user, in mosquitto's `password_file` format (`$7$`, PBKDF2-SHA512);
//!   `clients.passwd` (edge clients only) and `infra.passwd` (coordinator and LPSs) for the two
//!   listeners of `mosquitto.conf`.
//! - `acl`: mosquitto's `acl_file` for the fleet's prefix: edge clients write only their own
//!   `status` and `up` topics and read only their own `down` topic and the broadcast (`%u`
//!   patterns); each LPS its own LPS topics plus the clients' `down`/`up`/`status` topics; the
//!   coordinator everything under the prefix.
//! - `mosquitto.conf`: mosquitto 2.0 with two TLS listeners: edge clients on `--port` (client id
//!   forced to the username: no client can take over another's session), coordinator and LPSs on
//!   `--port + 1` (they open several connections each).
//! - `broker.toml`: the same policy for the embedded broker (`coordinator serve --broker-config`).
//!
//! Passwords are never printed or put on a command line; processes read them from their file
//! (`--password-file`) or from `EDGECFL_PASSWORD`.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::mqtt::{MAX_PACKET, fleet_backlog};
use edgecfl_shared::protocol::{self, MAX_PAYLOAD, Topics};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use ring::rand::{SecureRandom, SystemRandom};

use crate::broker::passwd;

/// Arguments of `coordinator credentials`.
#[derive(Debug, Clone, Args)]
pub struct CredentialsArgs {
    /// Directory to write into (created; refuses to overwrite an existing CA without --force).
    #[arg(long)]
    pub out: PathBuf,
    /// Number of edge clients, named client-000, client-001, … (the demo's names).
    #[arg(long)]
    pub clients: Option<usize>,
    /// Edge client ids instead, comma-separated (their `edge-client run --id`).
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<String>,
    /// Remote LPS ids (`coordinator lps --id`), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub lps: Vec<String>,
    /// Topic prefix of the fleet (the ACL's topics).
    #[arg(long, default_value = Topics::DEFAULT_PREFIX)]
    pub prefix: String,
    /// Host names or IP addresses the broker is reached at, besides localhost (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Also issue a client certificate per user (and make mosquitto.conf and broker.toml require
    /// one).
    #[arg(long)]
    pub client_certs: bool,
    /// Days the certificates are valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Port of mosquitto.conf's edge-client listener; the coordinator/LPS listener is the next
    /// one.
    #[arg(long, default_value_t = 8883)]
    pub port: u16,
    /// Address mosquitto.conf's listeners bind (default: every interface).
    #[arg(long)]
    pub bind: Option<String>,
    /// Overwrite an existing directory's material.
    #[arg(long)]
    pub force: bool,
}

/// What a user is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The coordinator (GPS).
    Coordinator,
    /// A remote LPS.
    Lps,
    /// An edge client.
    Client,
}

/// One user's credentials.
#[derive(Debug, Clone)]
pub struct User {
    /// Username (= the process's id).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its password file.
    pub password_file: PathBuf,
    /// Its certificate and key, with `--client-certs`.
    pub cert: Option<(PathBuf, PathBuf)>,
}

/// The files written.
#[derive(Debug, Clone)]
pub struct Material {
    /// The directory.
    pub dir: PathBuf,
    /// The CA certificate (clients' `--ca`).
    pub ca: PathBuf,
    /// The embedded broker's settings (`serve --broker-config`).
    pub broker_toml: PathBuf,
    /// mosquitto's configuration.
    pub mosquitto_conf: PathBuf,
    /// The ACL.
    pub acl: PathBuf,
    /// Each testbed shard's client, the `--ids` (or `--clients`) in order (`serve
    /// --shard-owners`).
    pub shard_owners: PathBuf,
    /// Every user, coordinator first.
    pub users: Vec<User>,
}

impl Material {
    /// The user named `name`.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let _ = fs::remove_file(path);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }
    #[cfg(not(unix))]
    {
        fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }
}

fn write_public(path: &Path, text: &str) -> anyhow::Result<()> {
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// A random password: 24 characters of an unambiguous alphabet (~139 bits).
fn password(rng: &dyn SecureRandom) -> anyhow::Result<String> {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut bytes = [0u8; 24];
    rng.fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("no randomness for a password"))?;
    // 256 is not a multiple of 56: reject the top values to stay uniform.
    let mut out = String::with_capacity(24);
    let mut pool = bytes.to_vec();
    while out.len() < 24 {
        for &b in &pool {
            if (b as usize) < 256 - 256 % ALPHABET.len() && out.len() < 24 {
                out.push(ALPHABET[b as usize % ALPHABET.len()] as char);
            }
        }
        rng.fill(&mut pool)
            .map_err(|_| anyhow::anyhow!("no randomness for a password"))?;
    }
    Ok(out)
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days.max(1)));
}

/// The ACL text for `prefix`, the LPS ids given.
pub fn acl_text(prefix: &str, lps: &[String]) -> String {
    let mut t = format!(
        "# edgecfl ACL for the fleet under {prefix:?} (mosquitto acl_file; the embedded broker\n\
         # reads the same file: coordinator serve --broker-acl / --broker-config).\n\
         #\n\
         # Edge clients: %u is the username, which is also the MQTT client id (mosquitto.conf's\n\
         # edge-client listener sets use_username_as_clientid; the embedded broker requires it).\n\
         # A client writes only its own status and uploads, reads only its own commands and the\n\
         # broadcast relay.\n\
         pattern write {prefix}/clients/%u/status\n\
         pattern write {prefix}/clients/%u/up\n\
         pattern read {prefix}/clients/%u/down\n\
         pattern read {prefix}/broadcast\n\
         \n\
         # The coordinator (and GPS): everything under the prefix.\n\
         user coordinator\n\
         topic readwrite {prefix}/#\n"
    );
    for id in lps {
        let _ = write!(
            t,
            "\n# Remote LPS {id}: its own LPS topics, and the clients of the cluster the GPS gives it\n\
             # at run time (so any client's commands, uploads and status).\n\
             user {id}\n\
             topic write {prefix}/lps/{id}/status\n\
             topic write {prefix}/lps/{id}/up\n\
             topic read {prefix}/lps/{id}/down\n\
             topic write {prefix}/clients/+/down\n\
             topic read {prefix}/clients/+/status\n\
             topic read {prefix}/clients/+/up\n"
        );
    }
    t
}

/// mosquitto.conf for the material in `dir` (absolute paths), for a fleet of `n_clients`.
fn mosquitto_conf(
    dir: &Path,
    port: u16,
    bind: Option<&str>,
    client_certs: bool,
    n_clients: usize,
) -> String {
    let p = |f: &str| dir.join(f).display().to_string();
    let listener = |port: u16| match bind {
        Some(b) => format!("listener {port} {b}"),
        None => format!("listener {port}"),
    };
    let tls = format!(
        "cafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate {client_certs}\nallow_anonymous false\nacl_file {}\n",
        p("ca.pem"),
        p("server.pem"),
        p("server.key"),
        p("acl"),
    );
    format!(
        "# mosquitto 2.0 for the edgecfl fleet of this directory (written by `coordinator credentials`).\n\
         # Run: mosquitto -c {conf}\n\
         # (Or copy it to /etc/mosquitto/conf.d/; every path below is absolute.) mosquitto started\n\
         # as root runs as the user `mosquitto`, which must be able to read server.key and the\n\
         # *.passwd files (mode 0600): chown mosquitto them, or add `user <their owner>`.\n\
         \n\
         # Logins and ACLs are set per listener.\n\
         per_listener_settings true\n\
         persistence false\n\
         # edgecfl sends models as single messages: payloads up to {MAX_PAYLOAD} bytes.\n\
         max_packet_size {MAX_PACKET}\n\
         message_size_limit {MAX_PAYLOAD}\n\
         # Memory: what every connection has yet to read is bounded in bytes, to the coordinator's\n\
         # backlog for {fleet} clients (512 KiB a client, at least 16 MiB; the coordinator reads as\n\
         # much before it pauses): that much queued, and that much sent but not acknowledged (in\n\
         # flight; without a byte bound mosquitto lets 20 messages of up to 4 MiB each wait there).\n\
         # mosquitto drops what is over it, so a client flooding its own topics cannot grow the\n\
         # broker past that per reader. Regenerate (or raise both to 512 KiB a client) for a\n\
         # larger fleet.\n\
         max_queued_bytes {backlog}\n\
         max_inflight_bytes {backlog}\n\
         set_tcp_nodelay true\n\
         \n\
         # Edge clients: TLS, a password each, and the MQTT client id replaced by the username, so\n\
         # no client can take over another's session or fire its last will.\n\
         # edge-client run --broker mqtts://HOST:{port} --ca ca.pem --password-file users/ID.password\n\
         {l1}\n\
         {tls}password_file {clients}\n\
         use_username_as_clientid true\n\
         \n\
         # Coordinator, GPS and LPSs: several connections per process (client ids <name>@<user>),\n\
         # so no forced client id; only their passwords are valid here. Firewall this port to the\n\
         # machines that run them.\n\
         # coordinator serve --broker mqtts://HOST:{port2} --ca ca.pem --username coordinator --password-file users/coordinator.password\n\
         {l2}\n\
         {tls}password_file {infra}\n",
        conf = p("mosquitto.conf"),
        fleet = n_clients,
        backlog = fleet_backlog(n_clients),
        l1 = listener(port),
        l2 = listener(port.saturating_add(1)),
        clients = p("clients.passwd"),
        infra = p("infra.passwd"),
        port2 = port.saturating_add(1),
    )
}

/// Writes the material (see the module docs).
pub fn generate(args: &CredentialsArgs) -> anyhow::Result<Material> {
    let topics = Topics::new(&args.prefix).context("bad --prefix")?;
    let mut clients: Vec<String> = args.ids.clone();
    if let Some(n) = args.clients {
        anyhow::ensure!(
            clients.is_empty(),
            "give --clients N or --ids a,b,c, not both"
        );
        clients = (0..n).map(|i| format!("client-{i:03}")).collect();
    }
    anyhow::ensure!(
        !clients.is_empty() || !args.lps.is_empty(),
        "no user: give --clients N or --ids a,b,c (and --lps for remote LPSs)"
    );
    let mut users: Vec<(String, Role)> = vec![("coordinator".into(), Role::Coordinator)];
    users.extend(args.lps.iter().map(|l| (l.clone(), Role::Lps)));
    users.extend(clients.iter().map(|c| (c.clone(), Role::Client)));
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in &users {
        protocol::id(name).with_context(|| format!("bad id {name:?}"))?;
        anyhow::ensure!(
            seen.insert(name.clone()),
            "the id {name:?} is given twice (ids of the coordinator, LPSs and clients share one namespace)"
        );
    }
    let dir = &args.out;
    anyhow::ensure!(
        args.force || !dir.join("ca.pem").exists(),
        "{} already holds a CA (ca.pem); use another --out or --force",
        dir.display()
    );
    fs::create_dir_all(dir.join("users"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let rng = SystemRandom::new();

    // The CA.
    let ca_key = KeyPair::generate().context("cannot generate the CA key")?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("edgecfl fleet CA ({})", args.prefix),
    );
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut ca, args.days);
    let ca_cert = ca.self_signed(&ca_key)?;
    write_public(&dir.join("ca.pem"), &ca_cert.pem())?;
    write_private(&dir.join("ca.key"), &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);

    // The broker's certificate.
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for h in &args.hosts {
        if !names.contains(h) {
            names.push(h.clone());
        }
    }
    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(names.clone())
        .with_context(|| format!("bad host name in {names:?}"))?;
    server
        .distinguished_name
        .push(DnType::CommonName, "edgecfl broker");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut server, args.days);
    let server_cert = server.signed_by(&server_key, &issuer)?;
    write_public(&dir.join("server.pem"), &server_cert.pem())?;
    write_private(&dir.join("server.key"), &server_key.serialize_pem())?;

    // Users.
    let (mut all, mut fleet, mut infra) = (String::new(), String::new(), String::new());
    let mut out_users = Vec::with_capacity(users.len());
    for (name, role) in users {
        let pw = password(&rng)?;
        let password_file = dir.join("users").join(format!("{name}.password"));
        write_private(&password_file, &format!("{pw}\n"))?;
        let line = passwd::hash_line(&name, &pw, &rng)?;
        all.push_str(&line);
        all.push('\n');
        let list = if role == Role::Client {
            &mut fleet
        } else {
            &mut infra
        };
        list.push_str(&line);
        list.push('\n');
        let cert = if args.client_certs {
            let key = KeyPair::generate()?;
            let mut p = CertificateParams::new(Vec::<String>::new())?;
            p.distinguished_name.push(DnType::CommonName, name.clone());
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            validity(&mut p, args.days);
            let c = p.signed_by(&key, &issuer)?;
            let (cp, kp) = (
                dir.join("users").join(format!("{name}.pem")),
                dir.join("users").join(format!("{name}.key")),
            );
            write_public(&cp, &c.pem())?;
            write_private(&kp, &key.serialize_pem())?;
            Some((cp, kp))
        } else {
            None
        };
        out_users.push(User {
            name,
            role,
            password_file,
            cert,
        });
    }
    write_private(&dir.join("passwd"), &all)?;
    write_private(&dir.join("clients.passwd"), &fleet)?;
    write_private(&dir.join("infra.passwd"), &infra)?;
    let acl = dir.join("acl");
    write_public(&acl, &acl_text(topics.prefix(), &args.lps))?;
    let mosquitto = dir.join("mosquitto.conf");
    write_public(
        &mosquitto,
        &mosquitto_conf(
            &dir,
            args.port,
            args.bind.as_deref(),
            args.client_certs,
            clients.len(),
        ),
    )?;
    let broker_toml = dir.join("broker.toml");
    write_public(
        &broker_toml,
        &format!(
            "# The embedded broker's security: coordinator serve --broker-config {}\n\
             # (paths relative to this file). Same users and ACL as mosquitto.conf, on one port:\n\
             # client ids must be the username, or <name>@<username>.\n\
             tls_cert = \"server.pem\"\n\
             tls_key = \"server.key\"\n\
             {}\
             password_file = \"passwd\"\n\
             acl_file = \"acl\"\n\
             # The CA clients verify the broker with (their --ca).\n\
             ca = \"ca.pem\"\n",
            broker_toml.display(),
            if args.client_certs {
                "tls_client_ca = \"ca.pem\"\nrequire_client_cert = true\n"
            } else {
                ""
            }
        ),
    )?;
    let shard_owners = dir.join("shard-owners.txt");
    write_public(
        &shard_owners,
        &format!(
            "# Testbed shards: line i names the client whose shard index is i (--index i); \
             coordinator serve --shard-owners {} refuses a claim of another's shard.\n{}",
            shard_owners.display(),
            clients.iter().map(|c| format!("{c}\n")).collect::<String>()
        ),
    )?;
    Ok(Material {
        ca: dir.join("ca.pem"),
        broker_toml,
        shard_owners,
        mosquitto_conf: mosquitto,
        acl,
        users: out_users,
        dir,
    })
}

/// What `coordinator credentials` prints: the files and how each process uses them.
pub fn instructions(m: &Material, port: u16) -> String {
    let d = m.dir.display();
    let mut t = format!(
        "wrote {} users' credentials to {d}\n\
         embedded broker:  coordinator serve --broker-config {d}/broker.toml ...\n\
         mosquitto:        mosquitto -c {d}/mosquitto.conf\n\
         \x20                 coordinator serve --broker mqtts://HOST:{} --ca {d}/ca.pem --username coordinator --password-file {d}/users/coordinator.password ...\n",
        m.users.len(),
        port.saturating_add(1),
    );
    for u in &m.users {
        let cert = u
            .cert
            .as_ref()
            .map(|(c, k)| format!(" --cert {} --key {}", c.display(), k.display()))
            .unwrap_or_default();
        let line = match u.role {
            Role::Coordinator => continue,
            Role::Lps => format!(
                "coordinator lps --broker mqtts://HOST:{} --id {} --ca {d}/ca.pem --password-file {}{cert} ...\n",
                port.saturating_add(1),
                u.name,
                u.password_file.display()
            ),
            Role::Client => format!(
                "edge-client run --broker mqtts://HOST:{port} --id {} --ca {d}/ca.pem --password-file {}{cert} ...\n",
                u.name,
                u.password_file.display()
            ),
        };
        t.push_str(&line);
    }
    t.push_str("(with the embedded broker, every process uses its one port: 8883 by default)\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::acl::Acl;

    #[test]
    fn generated_acl_parses_and_confines_each_role() {
        let acl = Acl::parse(&acl_text("f/x", &["lps-0".into()])).unwrap();
        assert!(acl.may_publish(Some("c1"), "c1", "f/x/clients/c1/up"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/x/clients/c2/up"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/x/lps/lps-0/up"));
        assert!(!acl.may_publish(Some("c1"), "c1", "f/x/clients/c2/down"));
        assert!(acl.may_publish(Some("lps-0"), "a@lps-0", "f/x/lps/lps-0/status"));
        assert!(acl.may_publish(Some("lps-0"), "a@lps-0", "f/x/clients/c2/down"));
        assert!(!acl.may_publish(Some("lps-0"), "a@lps-0", "f/x/lps/lps-1/up"));
        assert!(!acl.may_publish(Some("lps-0"), "a@lps-0", "f/x/clients/c2/up"));
        assert!(acl.may_publish(Some("coordinator"), "a@coordinator", "f/x/lps/lps-0/down"));
        assert!(!acl.may_publish(Some("coordinator"), "a@coordinator", "g/clients/c1/down"));
    }

    /// cross/mosquitto-secure/ is this generator's output for `--out /etc/mosquitto/edgecfl`
    /// with the defaults (prefix edgecfl/default, port 8883, no LPS, no client certificates, no
    /// client: the smallest queue bound).
    #[test]
    fn shipped_mosquitto_files_are_the_generators() {
        let conf = include_str!("../../../cross/mosquitto-secure/mosquitto.conf");
        let acl = include_str!("../../../cross/mosquitto-secure/acl");
        assert_eq!(
            conf,
            mosquitto_conf(Path::new("/etc/mosquitto/edgecfl"), 8883, None, false, 0)
        );
        assert_eq!(acl, acl_text(Topics::DEFAULT_PREFIX, &[]));
        // The edge-client rules are %u patterns, and they confine a client to its own topics.
        assert!(acl.contains("pattern write edgecfl/default/clients/%u/up"));
        let parsed = Acl::parse(acl).unwrap();
        assert!(parsed.may_publish(Some("c1"), "c1", "edgecfl/default/clients/c1/status"));
        assert!(!parsed.may_publish(Some("c1"), "c1", "edgecfl/default/clients/c2/status"));
    }

    #[test]
    fn passwords_are_long_random_and_unambiguous() {
        let rng = SystemRandom::new();
        let a = password(&rng).unwrap();
        let b = password(&rng).unwrap();
        assert_eq!(a.len(), 24);
        assert_ne!(a, b);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() && !"0O1lI".contains(c))
        );
    }
}
