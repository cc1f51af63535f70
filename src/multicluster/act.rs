//! Performs a [`Plan`]: the only place the job writes, in the plan's order. Every write of the
//! MultiClusterService names the version it was decided on (then the one the previous write
//! produced), so a stale view is refused (409) rather than overwritten.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::context::Context;
use super::decide::{FINALIZER, MetadataChange, Plan, ServiceChange, StatusChange, Write};
use super::error::{Error, Step};
use crate::api::{MultiClusterService, ServiceImport, set_condition};
use crate::controller::{ApiFailure, delete_unless_gone, merge_patch};

/// Carries out `plan` on `mcs` (as it was decided on); its Events are queued once the writes
/// went through. Our writes are remembered until the views show them.
pub(super) async fn perform(
    ctx: &Context,
    mcs: &MultiClusterService,
    plan: &Plan,
) -> Result<(), Error> {
    let mut w = Writes::new(ctx, mcs);
    for write in &plan.writes {
        match write {
            Write::Metadata(change) => w.metadata(change).await?,
            Write::RemoveFinalizer => w.remove_finalizer().await?,
            Write::Status(change) => w.status(change).await?,
            Write::DeleteServiceImport(name) => w.delete_import(name).await?,
            Write::CreateServiceImport { name, owner } => w.create_import(name, owner).await?,
            Write::OwnServiceImport {
                name,
                resource_version,
                owner_references,
            } => {
                w.own_import(name, resource_version, owner_references)
                    .await?
            }
            Write::DeleteService(name) => w.delete_service(name).await?,
            Write::CreateService(change) => w.create_service(change).await?,
            Write::UpdateService(change) => w.update_service(change).await?,
        }
    }
    if !plan.writes.is_empty() && !plan.events.is_empty() {
        ctx.events
            .publish(kube::Resource::object_ref(mcs, &()), &plan.events);
    }
    Ok(())
}

/// One MultiClusterService's writes.
struct Writes<'a> {
    ctx: &'a Context,
    mcs: &'a MultiClusterService,
    ns: &'a str,
    name: &'a str,
    key: ObjectRef<MultiClusterService>,
    api: Api<MultiClusterService>,
    imports: Api<ServiceImport>,
    services: Api<Service>,
    resource_version: Option<String>,
}

impl<'a> Writes<'a> {
    fn new(ctx: &'a Context, mcs: &'a MultiClusterService) -> Self {
        let ns = mcs.metadata.namespace.as_deref().unwrap_or_default();
        let name = mcs.metadata.name.as_deref().unwrap_or_default();
        Self {
            ctx,
            mcs,
            ns,
            name,
            key: ObjectRef::new(name).within(ns),
            api: Api::namespaced(ctx.member_client.clone(), ns),
            imports: Api::namespaced(ctx.member_client.clone(), ns),
            services: Api::namespaced(ctx.member_client.clone(), &ctx.fleet_system_namespace),
            resource_version: mcs.metadata.resource_version.clone(),
        }
    }

    fn err(&self, step: Step) -> impl FnOnce(kube::Error) -> Error + use<> {
        let failed = ApiFailure::of(&self.ctx.member, self.ns, self.name, step);
        move |e| failed(e).into()
    }

    async fn metadata(&mut self, change: &MetadataChange) -> Result<(), Error> {
        let mut metadata = json!({"resourceVersion": self.resource_version});
        if change.add_finalizer {
            let mut finalizers = self.mcs.metadata.finalizers.clone().unwrap_or_default();
            finalizers.push(FINALIZER.into());
            metadata["finalizers"] = json!(finalizers);
        }
        if !change.labels.is_empty() {
            metadata["labels"] = json!(change.labels);
        }
        self.patch(false, &json!({ "metadata": metadata }), Step::PatchMetadata)
            .await
    }

    async fn remove_finalizer(&mut self) -> Result<(), Error> {
        let rest: Vec<&String> = self
            .mcs
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != FINALIZER)
            .collect();
        let body =
            json!({"metadata": {"resourceVersion": self.resource_version, "finalizers": rest}});
        let params = PatchParams::default();
        match self
            .api
            .patch(self.name, &params, &Patch::Merge(&body))
            .await
        {
            Ok(patched) => {
                // Remembered until the view shows the deletion: a reconcile on a view still
                // showing our finalizer (the import's and Service's deletions trigger one)
                // would delete both again and patch a gone object.
                let superseded = self.resource_version.take();
                self.ctx
                    .own_mcs
                    .wrote(self.key.clone(), [superseded], patched);
                Ok(())
            }
            // Gone already: it was only waiting for our finalizer.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.ctx.own_mcs.forget(&self.key);
                Ok(())
            }
            Err(e) => Err(self.err(Step::RemoveFinalizer)(e)),
        }
    }

    async fn status(&mut self, change: &StatusChange) -> Result<(), Error> {
        let mut conditions = self.mcs.conditions().to_vec();
        set_condition(&mut conditions, &change.condition, Time(Timestamp::now()));
        let body = json!({
            "metadata": {"resourceVersion": self.resource_version},
            "status": {"conditions": conditions, "loadBalancer": load_balancer(&change.load_balancer)},
        });
        self.patch(true, &body, Step::PatchStatus).await
    }

    /// Merge-patches the MultiClusterService (its status when `status`), remembering what the
    /// API answered.
    async fn patch(&mut self, status: bool, body: &Value, step: Step) -> Result<(), Error> {
        let patched = merge_patch(&self.api, self.name, status, body)
            .await
            .map_err(self.err(step))?;
        let superseded = self.resource_version.take();
        self.resource_version = patched.metadata.resource_version.clone();
        self.ctx
            .own_mcs
            .wrote(self.key.clone(), [superseded], patched);
        Ok(())
    }

    fn import_seen(&self, name: &str) -> Option<String> {
        let viewed = self.ctx.imports.get(&ObjectRef::new(name).within(self.ns));
        viewed.and_then(|si| si.metadata.resource_version.clone())
    }

    fn wrote_import(&self, name: &str, after: Option<ServiceImport>) {
        let seen = self.import_seen(name);
        let key = (self.ns.to_string(), name.to_string());
        self.ctx.own_imports.wrote(key, [seen], after);
    }

    async fn delete_import(&mut self, name: &str) -> Result<(), Error> {
        delete_unless_gone(&self.imports, name, &DeleteParams::default())
            .await
            .map_err(self.err(Step::DeleteServiceImport))?;
        self.wrote_import(name, None);
        Ok(())
    }

    async fn create_import(&mut self, name: &str, owner: &OwnerReference) -> Result<(), Error> {
        let si = ServiceImport {
            api_version: Some(<ServiceImport as kube::Resource>::api_version(&()).into()),
            kind: Some(<ServiceImport as kube::Resource>::kind(&()).into()),
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(self.ns.into()),
                owner_references: Some(vec![owner.clone()]),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = self.imports.create(&PostParams::default(), &si).await;
        let created = created.map_err(self.err(Step::CreateServiceImport))?;
        self.wrote_import(name, Some(created));
        Ok(())
    }

    async fn own_import(
        &mut self,
        name: &str,
        resource_version: &Option<String>,
        owner_references: &[OwnerReference],
    ) -> Result<(), Error> {
        let body = json!({"metadata": {"resourceVersion": resource_version, "ownerReferences": owner_references}});
        let patched = self
            .imports
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await;
        let patched = patched.map_err(self.err(Step::OwnServiceImport))?;
        self.wrote_import(name, Some(patched));
        Ok(())
    }

    fn wrote_service(&self, name: &str, after: Option<Service>) {
        let key = ObjectRef::new(name).within(&self.ctx.fleet_system_namespace);
        let seen = self
            .ctx
            .services
            .get(&key)
            .and_then(|s| s.metadata.resource_version.clone());
        self.ctx.own_services.wrote(name.to_string(), [seen], after);
    }

    async fn delete_service(&mut self, name: &str) -> Result<(), Error> {
        delete_unless_gone(&self.services, name, &DeleteParams::default())
            .await
            .map_err(self.err(Step::DeleteService))?;
        self.wrote_service(name, None);
        Ok(())
    }

    async fn create_service(&mut self, change: &ServiceChange) -> Result<(), Error> {
        let service = Service {
            metadata: ObjectMeta {
                name: Some(change.name.clone()),
                namespace: Some(self.ctx.fleet_system_namespace.clone()),
                labels: Some(change.labels.clone()),
                annotations: (!change.annotations.is_empty()).then(|| change.annotations.clone()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(change.ports.clone()),
                ..Default::default()
            }),
            status: None,
        };
        let created = self.services.create(&PostParams::default(), &service).await;
        let created = created.map_err(self.err(Step::CreateService))?;
        self.wrote_service(&change.name, Some(created));
        Ok(())
    }

    async fn update_service(&mut self, change: &ServiceChange) -> Result<(), Error> {
        let mut metadata =
            json!({"resourceVersion": change.resource_version, "labels": change.labels});
        if !change.annotations.is_empty() {
            metadata["annotations"] = json!(change.annotations);
        }
        // A merge patch replaces the port list whole; the node ports the server allocated
        // are carried in it.
        let body =
            json!({"metadata": metadata, "spec": {"type": "LoadBalancer", "ports": change.ports}});
        let patched = self
            .services
            .patch(&change.name, &PatchParams::default(), &Patch::Merge(&body))
            .await;
        let patched = patched.map_err(self.err(Step::UpdateService))?;
        self.wrote_service(&change.name, Some(patched));
        Ok(())
    }
}

/// The load balancer as a merge patch: an empty one clears the ingress there.
fn load_balancer(lb: &LoadBalancerStatus) -> Value {
    match lb.ingress.as_deref() {
        None | Some([]) => json!({"ingress": null}),
        Some(_) => serde_json::to_value(lb).unwrap_or_else(|_| json!({"ingress": null})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn an_empty_load_balancer_clears_the_ingress_and_a_removed_label_is_null() {
        assert_eq!(
            load_balancer(&LoadBalancerStatus::default()),
            json!({"ingress": null})
        );
        let lb = LoadBalancerStatus {
            ingress: Some(vec![k8s_openapi::api::core::v1::LoadBalancerIngress {
                ip: Some("10.0.0.1".into()),
                ..Default::default()
            }]),
        };
        assert_eq!(load_balancer(&lb), json!({"ingress": [{"ip": "10.0.0.1"}]}));
        let labels = BTreeMap::from([
            ("a".to_string(), None),
            ("b".to_string(), Some("x".to_string())),
        ]);
        assert_eq!(json!(labels), json!({"a": null, "b": "x"}));
    }
}
