//! A hub and N members sharing one etcd.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};

use crate::binaries::Binaries;
use crate::cluster::Cluster;
use crate::etcd::Etcd;
use crate::pool::Ticket;
use crate::sa_keys::write_sa_keys;
use crate::{Error, Result, chart_crds_dir, io_err};

/// The hub-side namespace prefix of fleet-networking: member `m` owns `fleet-member-m`.
pub const DEFAULT_HUB_NAMESPACE_PREFIX: &str = "fleet-member-";

/// How a [`Fleet`] is to be started.
#[derive(Debug, Clone)]
pub struct FleetBuilder {
    members: Vec<String>,
    crds_dir: PathBuf,
    crds: Vec<CustomResourceDefinition>,
    namespace_prefix: String,
    quiet: bool,
    fresh: bool,
    extra_args: BTreeMap<String, Vec<String>>,
}

impl Default for FleetBuilder {
    fn default() -> Self {
        Self {
            members: vec!["member-1".into(), "member-2".into()],
            crds_dir: chart_crds_dir(),
            crds: Vec::new(),
            namespace_prefix: DEFAULT_HUB_NAMESPACE_PREFIX.into(),
            quiet: false,
            fresh: false,
            extra_args: BTreeMap::new(),
        }
    }
}

impl FleetBuilder {
    /// The member clusters to start, by name.
    pub fn members<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.members = names.into_iter().map(Into::into).collect();
        self
    }

    /// Where the CRD YAMLs are (default: the chart's `crds/`).
    pub fn crds_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crds_dir = dir.into();
        self
    }

    /// The CRDs themselves instead of a directory of YAMLs (a binary that runs away from the
    /// source tree, such as `fleetnet-hub sandbox`, has them compiled in).
    pub fn crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds = crds.into_iter().collect();
        self
    }

    /// More `kube-apiserver` flags for one cluster (`hub` or a member name), e.g. tight
    /// in-flight limits to make it answer 429.
    pub fn apiserver_args<I, S>(mut self, cluster: &str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args
            .entry(cluster.to_string())
            .or_default()
            .extend(args.into_iter().map(Into::into));
        self
    }

    /// Do not print readiness figures.
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// Every cluster started anew (its own etcd), none taken from or given back to the pool of
    /// clusters kept between fleets: for a measurement, or a test that reads an apiserver's
    /// own counters (`/metrics`), which a cluster used before would carry.
    pub fn fresh(mut self) -> Self {
        self.fresh = true;
        self
    }

    /// Starts the hub and every member (in parallel), installs the CRDs (ServiceExport in
    /// members, InternalServiceExport in the hub) and creates `fleet-member-<name>` in the hub.
    /// A cluster without flags of its own is taken from the pool when one with the same CRDs is
    /// idle (cleared back to its first-ready state, `crate::pool`); any other starts anew, on
    /// the fleet's own etcd.
    pub async fn start(self) -> Result<Fleet> {
        let begun = Instant::now();
        let binaries = Binaries::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("fleetnet-substrate-")
            .tempdir()
            .map_err(io_err("create substrate directory"))?;
        let root = dir.path().to_path_buf();
        let member_dir = root.join("kubeconfigs");
        std::fs::create_dir_all(&member_dir).map_err(io_err("create kubeconfigs dir"))?;
        let mut crds = if self.crds.is_empty() {
            CrdFiles::load(&self.crds_dir)?
        } else {
            CrdFiles::sort(self.crds, Path::new("(given CRDs)"))?
        };
        crds.add_import_side()?;

        let pooled = |cluster: &str| {
            !self.fresh && crate::pool::enabled() && !self.extra_args.contains_key(cluster)
        };
        let everything_pooled =
            pooled("hub") && self.members.iter().all(|name| pooled(name.as_str()));
        let etcd = if everything_pooled {
            None
        } else {
            write_sa_keys(&root)?;
            Some(Etcd::start(&binaries.etcd(), &root)?)
        };
        let (hub_key, member_key) = (
            crate::pool::crds_key(&crds.hub),
            crate::pool::crds_key(&crds.member),
        );
        let mut wanted = vec![Wanted {
            name: "hub".into(),
            kubeconfig: root.join("hub.kubeconfig"),
            crds: &crds.hub,
            key: hub_key,
        }];
        for name in &self.members {
            wanted.push(Wanted {
                name: name.clone(),
                kubeconfig: member_dir.join(format!("{name}.yaml")),
                crds: &crds.member,
                key: member_key,
            });
        }
        let mut clusters = Vec::new();
        let mut to_boot = Vec::new();
        let mut tickets = HashMap::new();
        for w in &wanted {
            let cluster = if pooled(&w.name) {
                match crate::pool::take(w.key).await? {
                    Some((cluster, ticket)) => {
                        tickets.insert(cluster.etcd_prefix().to_string(), ticket);
                        cluster
                    }
                    None => {
                        to_boot.push((clusters.len(), true));
                        crate::pool::new_cluster()?
                    }
                }
            } else {
                let etcd = etcd.as_ref().ok_or_else(|| Error::Cluster {
                    cluster: w.name.clone(),
                    message: "a cluster of its own, but the fleet started no etcd".into(),
                })?;
                to_boot.push((clusters.len(), false));
                Cluster::new(
                    &w.name,
                    &root,
                    &binaries.kube_apiserver(),
                    &etcd.client_url,
                    w.kubeconfig.clone(),
                    &root,
                    self.extra_args.get(&w.name).cloned().unwrap_or_default(),
                )?
            };
            clusters.push(cluster);
        }
        tickets.extend(boot(&mut clusters, &wanted, &to_boot).await?);
        for (cluster, w) in clusters.iter_mut().zip(&wanted) {
            cluster.assign(&w.name, w.kubeconfig.clone())?;
        }
        let hub = clusters.remove(0);
        prepare_hub(&hub, &clusters, &self.namespace_prefix).await?;

        let fleet = Fleet {
            etcd,
            tickets,
            hub,
            members: clusters,
            root,
            namespace_prefix: self.namespace_prefix,
            _dir: dir,
        };
        if !self.quiet {
            fleet.print_report(begun.elapsed());
        }
        Ok(fleet)
    }
}

/// A cluster a fleet asks for: its name, where its admin kubeconfig goes, its CRDs and their
/// fingerprint (the pool's key).
struct Wanted<'a> {
    name: String,
    kubeconfig: PathBuf,
    crds: &'a [CustomResourceDefinition],
    key: u64,
}

/// Spawns the clusters of `to_boot` (index, and whether it joins the pool), then awaits them all
/// together (boot time overlaps), installs their CRDs and, for a pooled one, records its
/// first-ready state: its ticket, by etcd prefix.
async fn boot(
    clusters: &mut [Cluster],
    wanted: &[Wanted<'_>],
    to_boot: &[(usize, bool)],
) -> Result<Vec<(String, Ticket)>> {
    let spawned = Instant::now();
    for (at, _) in to_boot {
        clusters[*at].spawn()?;
    }
    let ready = clusters
        .iter_mut()
        .enumerate()
        .filter(|(at, _)| to_boot.iter().any(|(b, _)| b == at))
        .map(|(_, c)| c.wait_ready(spawned));
    futures::future::try_join_all(ready).await?;
    let mut installs = vec![];
    for (at, _) in to_boot {
        let cluster = &clusters[*at];
        let client = cluster.client().await?;
        let install = install_crds(wanted[*at].name.clone(), client, wanted[*at].crds.to_vec());
        installs.push(with_log_tail(cluster, install));
    }
    futures::future::try_join_all(installs).await?;
    let mut tickets = vec![];
    for (at, pooled) in to_boot {
        if *pooled {
            let ticket = crate::pool::ticket(&clusters[*at], wanted[*at].key).await?;
            tickets.push((clusters[*at].etcd_prefix().to_string(), ticket));
        }
    }
    Ok(tickets)
}

/// Creates each member's namespace (`prefix` + name) in the hub.
async fn prepare_hub(hub: &Cluster, members: &[Cluster], prefix: &str) -> Result<()> {
    let hub_client = hub.client().await?;
    for m in members {
        let namespace = format!("{prefix}{}", m.name());
        ensure_namespace(&hub_client, "hub", &namespace).await?;
    }
    Ok(())
}

/// A running hub + members. Dropping it ends every process it started.
#[derive(Debug)]
pub struct Fleet {
    hub: Cluster,
    members: Vec<Cluster>,
    /// Only for clusters of its own (flags of their own, or [`FleetBuilder::fresh`]).
    etcd: Option<Etcd>,
    /// The pooled clusters, by etcd prefix: what each goes back to the pool with.
    tickets: HashMap<String, Ticket>,
    root: PathBuf,
    namespace_prefix: String,
    _dir: tempfile::TempDir,
}

impl Drop for Fleet {
    /// The test is over: every process is killed (SIGKILL) rather than stopped gracefully. A
    /// graceful stop took 1.2 s per apiserver and 1.1 s for etcd, one after another (4.2 s of
    /// every test's wall time with two members); nothing reads the clusters after this, and
    /// their data is removed with the scratch directory.
    fn drop(&mut self) {
        for cluster in std::iter::once(&mut self.hub).chain(&mut self.members) {
            match self.tickets.remove(cluster.etcd_prefix()) {
                Some(ticket) => crate::pool::give_back(cluster.take_over(), ticket),
                None => cluster.kill(),
            }
        }
        if let Some(etcd) = &mut self.etcd {
            etcd.kill();
        }
    }
}

impl Fleet {
    /// A builder with two members named `member-1` and `member-2`.
    pub fn builder() -> FleetBuilder {
        FleetBuilder::default()
    }

    /// The hub cluster.
    pub fn hub(&self) -> &Cluster {
        &self.hub
    }

    /// The hub cluster, to stop or start it.
    pub fn hub_mut(&mut self) -> &mut Cluster {
        &mut self.hub
    }

    /// All member clusters.
    pub fn members(&self) -> &[Cluster] {
        &self.members
    }

    /// The member named `name`. Panics on a name the fleet was not built with: a test bug.
    pub fn member(&self, name: &str) -> &Cluster {
        self.members
            .iter()
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("substrate has no member {name}"))
    }

    /// The member named `name`, to stop or start it.
    pub fn member_mut(&mut self, name: &str) -> &mut Cluster {
        self.members
            .iter_mut()
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("substrate has no member {name}"))
    }

    /// The directory of member kubeconfigs, laid out as the product's `kubeconfigs/`:
    /// `<member>.yaml` per member.
    pub fn member_kubeconfig_dir(&self) -> PathBuf {
        self.root.join("kubeconfigs")
    }

    /// A scratch directory that lives as long as the fleet.
    pub fn scratch_dir(&self) -> &Path {
        &self.root
    }

    /// Hub namespace of a member.
    pub fn hub_namespace(&self, member: &str) -> String {
        format!("{}{member}", self.namespace_prefix)
    }

    /// CPU time (user + system) the fleet's etcd has used so far.
    pub fn etcd_cpu_time(&self) -> Option<Duration> {
        self.etcd.as_ref()?.cpu_time()
    }

    /// Prints readiness times and RSS of every process.
    pub fn print_report(&self, total: Duration) {
        eprintln!(
            "[testenv] fleet ready in {total:.2?} (hub + {} members)",
            self.members.len()
        );
        for c in std::iter::once(&self.hub).chain(&self.members) {
            eprintln!(
                "[testenv]   {:<12} {}  {}ready after {:.2?}  cpu {:.2?} at ready, {:.2?} with CRDs  rss {} MiB",
                c.name(),
                c.server(),
                if self.tickets.contains_key(c.etcd_prefix()) {
                    "(pooled) "
                } else {
                    ""
                },
                c.ready_after().unwrap_or_default(),
                c.ready_cpu().unwrap_or_default(),
                c.cpu_time().unwrap_or_default(),
                c.rss_kib().map_or(0, |k| k / 1024)
            );
        }
        if let Some(etcd) = &self.etcd {
            eprintln!(
                "[testenv]   etcd (shared) cpu {:.2?}  rss {} MiB",
                etcd.cpu_time().unwrap_or_default(),
                etcd.rss_kib().map_or(0, |k| k / 1024)
            );
        }
    }
}

/// The CRDs of the import side and of membership, as published (tests/fixtures), built into
/// the binary so that the sandbox needs no checkout.
const IMPORT_SIDE_CRDS: [(&str, &str); 5] = [
    (
        "networking.fleet.azure.com_serviceimports.yaml",
        include_str!(
            "../../fixtures/fleet-networking-crds/networking.fleet.azure.com_serviceimports.yaml"
        ),
    ),
    (
        "networking.fleet.azure.com_multiclusterservices.yaml",
        include_str!(
            "../../fixtures/fleet-networking-crds/networking.fleet.azure.com_multiclusterservices.yaml"
        ),
    ),
    (
        "networking.fleet.azure.com_internalserviceimports.yaml",
        include_str!(
            "../../fixtures/fleet-networking-crds/networking.fleet.azure.com_internalserviceimports.yaml"
        ),
    ),
    (
        "networking.fleet.azure.com_endpointsliceimports.yaml",
        include_str!(
            "../../fixtures/fleet-networking-crds/networking.fleet.azure.com_endpointsliceimports.yaml"
        ),
    ),
    (
        "cluster.kubernetes-fleet.io_internalmemberclusters.yaml",
        include_str!(
            "../../fixtures/fleet-crds/cluster.kubernetes-fleet.io_internalmemberclusters.yaml"
        ),
    ),
];

#[derive(Debug, Clone)]
struct CrdFiles {
    member: Vec<CustomResourceDefinition>,
    hub: Vec<CustomResourceDefinition>,
}

impl CrdFiles {
    /// The CRDs of every `*.yaml` in `dir`, sorted as [`CrdFiles::sort`] does.
    fn load(dir: &Path) -> Result<Self> {
        let mut crds = vec![];
        let entries = std::fs::read_dir(dir).map_err(io_err(format!("read {}", dir.display())))?;
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        {
            let text = std::fs::read_to_string(&path)
                .map_err(io_err(format!("read {}", path.display())))?;
            let docs: Vec<CustomResourceDefinition> = serde_saphyr::from_str_multiple(&text)
                .map_err(|e| Error::Manifest {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            crds.extend(docs);
        }
        Self::sort(crds, dir)
    }

    /// The import side's and membership's CRDs as fleet-networking and fleet publish them
    /// (ServiceImport and MultiClusterService in every member; InternalServiceImport,
    /// EndpointSliceImport and fleet's InternalMemberCluster in the hub), unless given already.
    fn add_import_side(&mut self) -> Result<()> {
        for (file, text) in IMPORT_SIDE_CRDS {
            let crd: CustomResourceDefinition =
                serde_saphyr::from_str(text).map_err(|e| Error::Manifest {
                    path: PathBuf::from(file),
                    message: e.to_string(),
                })?;
            let side = match crd.spec.names.kind.as_str() {
                "ServiceImport" | "MultiClusterService" => &mut self.member,
                _ => &mut self.hub,
            };
            if !side.iter().any(|c| c.metadata.name == crd.metadata.name) {
                side.push(crd);
            }
        }
        Ok(())
    }

    /// ServiceExport (and anything member-side) goes to members; InternalServiceExport to the
    /// hub; both must be in `crds` (read from `source`).
    fn sort(crds: Vec<CustomResourceDefinition>, source: &Path) -> Result<Self> {
        let mut files = CrdFiles {
            member: vec![],
            hub: vec![],
        };
        for crd in crds {
            match crd.spec.names.kind.as_str() {
                "InternalServiceExport" | "EndpointSliceExport" | "MemberStatus" => {
                    files.hub.push(crd)
                }
                "ServiceExport" => files.member.push(crd),
                _ => {}
            }
        }
        if files.member.is_empty() || files.hub.is_empty() {
            return Err(Error::Manifest {
                path: source.to_path_buf(),
                message: "expected the ServiceExport and InternalServiceExport CRDs".into(),
            });
        }
        Ok(files)
    }
}

/// `step`'s failure, with what the cluster's apiserver said last (the last lines of its log,
/// read when the step failed): a cluster that stops answering
/// during a fleet's start is otherwise a bare transport error.
async fn with_log_tail(
    cluster: &Cluster,
    step: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    let log = cluster.log_path();
    step.await.map_err(|e| Error::Cluster {
        cluster: cluster.name().to_string(),
        message: format!(
            "{e}; its apiserver {}; last lines of {}:\n{}",
            if cluster.is_running() {
                "still runs"
            } else {
                "has exited"
            },
            log.display(),
            crate::cluster::tail(&log, 20)
        ),
    })
}

/// Creates every CRD of `crds` first, then waits for each to be Established and servable: the
/// apiserver sets them up together rather than one after another.
async fn install_crds(
    cluster: String,
    client: kube::Client,
    crds: Vec<CustomResourceDefinition>,
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let kube_err = |step: &str, name: &str| {
        let (cluster, step) = (cluster.clone(), format!("{step} CRD {name}"));
        move |source| Error::Kube {
            cluster,
            step,
            source,
        }
    };
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), crd)
            .await
            .map_err(kube_err("create", &name))?;
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = api.get(&name).await.map_err(kube_err("get", &name))?;
            let established = got
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Cluster {
                    cluster,
                    message: format!("CRD {name} not Established within 60 s"),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        wait_servable(&cluster, &client, crd).await?;
    }
    Ok(())
}

/// Right after Established, requests may get 429 "storage is (re)initializing" for about a
/// second: wait until a LIST of every served version succeeds.
async fn wait_servable(
    cluster: &str,
    client: &kube::Client,
    crd: &CustomResourceDefinition,
) -> Result<()> {
    use tracing::instrument::WithSubscriber;
    // 429s until it is servable are expected: not logged (see `Cluster::wait_ready`).
    let quiet = tracing::subscriber::NoSubscriber::default();
    list_every_version(cluster, client, crd)
        .with_subscriber(quiet)
        .await
}

async fn list_every_version(
    cluster: &str,
    client: &kube::Client,
    crd: &CustomResourceDefinition,
) -> Result<()> {
    for version in crd.spec.versions.iter().filter(|v| v.served) {
        let gvk =
            kube::api::GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
        let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match api.list(&ListParams::default().limit(1)).await {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(Error::Kube {
                        cluster: cluster.to_string(),
                        step: format!("list {}/{}", crd.spec.names.plural, version.name),
                        source: e,
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    Ok(())
}

/// Creates a namespace if it does not exist.
pub async fn ensure_namespace(client: &kube::Client, cluster: &str, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(source) => Err(Error::Kube {
            cluster: cluster.to_string(),
            step: format!("create namespace {name}"),
            source,
        }),
    }
}
